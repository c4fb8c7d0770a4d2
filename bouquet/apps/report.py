"""``bouquet report``: one self-contained HTML page per results folder (a benchmark or one run).

The page holds the run table (final and best metrics, bytes, time, privacy, failures; runs that
differ only by their seed averaged, with their spread), the curves as embedded PNGs (drawn by
:mod:`bouquet.apps.plots`), the verdicts against the paper where the suite wrote them
(``verdicts.json``, :mod:`bouquet.apps.verdicts`) and the suite's own notes (``table.md``). It
loads nothing from the network: no script, no font, no stylesheet outside the file.
"""

from __future__ import annotations

import base64
import datetime as _dt
import html
import json
import re
import tempfile
from collections.abc import Iterable, Mapping, Sequence
from pathlib import Path
from typing import Any

from bouquet.apps.results import read_metrics
from bouquet.apps.verdicts import HOLDS, read_checks

#: Metrics the page draws when the runs record them (besides each run's final metrics).
CURVE_EXTRAS = ("loss", "train_loss", "epsilon", "sim_time_cum_s", "straggler_gap_s")

CSS = """
body { font-family: sans-serif; margin: 1.5em auto; max-width: 1150px; color: #222; }
h1 { font-size: 1.5em; } h2 { font-size: 1.2em; border-bottom: 1px solid #ccc; }
table { border-collapse: collapse; margin: 0.6em 0; font-size: 0.85em; }
th, td { border: 1px solid #bbb; padding: 3px 7px; text-align: right; }
td { white-space: nowrap; }
th { background: #eef2f7; } td:first-child, th:first-child { text-align: left; }
.holds { background: #dff3df; } .fails { background: #f9dcdc; } .other { background: #fdf3d0; }
img { max-width: 100%; border: 1px solid #ddd; margin: 0.4em 0; }
.wide { overflow-x: auto; } .meta { color: #555; font-size: 0.85em; }
pre { background: #f5f5f5; padding: 0.5em; }
"""


def find_runs(folder: Path) -> dict[str, Path]:
    """Run name (path below ``folder``) -> run folder, for every ``summary.json`` under it."""
    out = {}
    for path in sorted(folder.glob("**/summary.json")):
        name = str(path.parent.relative_to(folder)) if path.parent != folder else folder.name
        out[name] = path.parent
    return out


def read_config(run_dir: Path) -> dict[str, Any]:
    """A run's ``config.yaml`` as a dict ({} when it has none)."""
    path = run_dir / "config.yaml"
    if not path.is_file():
        return {}
    from omegaconf import OmegaConf

    data = OmegaConf.to_container(OmegaConf.load(path))
    return {str(k): v for k, v in data.items()} if isinstance(data, dict) else {}


def _num(v: Any) -> float | None:
    return float(v) if isinstance(v, int | float) and not isinstance(v, bool) else None


def _fmt(v: float | None, digits: int = 4) -> str:
    if v is None:
        return "—"
    return f"{v:.{digits}g}" if abs(v) < 1e6 else f"{v:.3e}"


def _cell(values: Sequence[float | None], scale: float = 1.0) -> str:
    """Mean of the numbers (scaled), with ± half their range when there are several."""
    nums = [v * scale for v in values if v is not None]
    if not nums:
        return "—"
    mean = sum(nums) / len(nums)
    if len(nums) == 1 or max(nums) == min(nums):
        return _fmt(mean)
    return f"{_fmt(mean)} ± {_fmt((max(nums) - min(nums)) / 2, 2)}"


def _get(summary: Mapping[str, Any], dotted: str) -> float | None:
    cur: Any = summary
    for part in dotted.split("."):
        if not isinstance(cur, Mapping):
            return None
        cur = cur.get(part)
    return _num(cur)


def _columns(summaries: Iterable[Mapping[str, Any]]) -> list[tuple[str, str, float]]:
    """(header, dotted key, scale) of the run table, for the keys some run has."""
    summaries = list(summaries)
    metrics = sorted({k for s in summaries for k in (s.get("final") or {})})
    cols = [(f"final {m}", f"final.{m}", 1.0) for m in metrics]
    cols += [(f"best {m}", f"best.{m}", 1.0) for m in metrics]
    cols += [("uplink total MB", "comm.up_bytes_total", 1e-6),
             ("downlink total MB", "comm.down_bytes_total", 1e-6),
             ("uplink B / client / round", "comm.up_bytes_per_client_round", 1.0),
             ("wall s", "time.wall_s", 1.0), ("simulated s", "time.sim_time_s", 1.0),
             ("epsilon", "privacy.epsilon", 1.0), ("errors", "failures.errors", 1.0),
             ("rejected", "failures.rejected", 1.0), ("missing", "failures.missing", 1.0)]
    return [c for c in cols if any(_get(s, c[1]) is not None for s in summaries)]


def run_table(summaries: Mapping[str, Mapping[str, Any]], groups: Mapping[str, str]) -> str:
    """The HTML table: one row per group of seeds, mean ± half-range over its runs."""
    by_group: dict[str, list[str]] = {}
    for name in summaries:
        by_group.setdefault(groups.get(name, name), []).append(name)
    cols = _columns(summaries.values())
    head = "".join(f"<th>{html.escape(h)}</th>" for h, _, _ in cols)
    rows = [f"<tr><th>run</th><th>method</th><th>task</th><th>seeds</th>{head}</tr>"]
    for group, names in by_group.items():
        first = summaries[names[0]]
        seeds = ", ".join(str(summaries[n].get("seed", "?")) for n in names)
        cells = "".join(f"<td>{_cell([_get(summaries[n], k) for n in names], scale)}</td>"
                        for _, k, scale in cols)
        rows.append(f"<tr><td>{html.escape(group)}</td><td>{html.escape(str(first.get('method', '')))}"
                    f"</td><td>{html.escape(str(first.get('task', '')))}</td>"
                    f"<td>{html.escape(seeds)}</td>{cells}</tr>")
    return '<div class="wide"><table>\n' + "\n".join(rows) + "\n</table></div>"


def verdict_table(folder: Path) -> str:
    """The checks of ``verdicts.json`` as an HTML table ("" when the folder has none)."""
    found = read_checks(folder)
    if not found or not found[1]:
        return ""
    rows = ["<tr><th>prediction</th><th>measured</th><th>verdict</th></tr>"]
    for c in found[1]:
        cls = "holds" if c.verdict == HOLDS else "fails" if c.verdict == "does not hold" else "other"
        rows.append(f'<tr class="{cls}"><td>{html.escape(c.claim)}</td>'
                    f"<td>{html.escape(c.measured)}</td><td>{html.escape(c.verdict)}</td></tr>")
    return "<table>\n" + "\n".join(rows) + "\n</table>"


def _inline(text: str) -> str:
    out = html.escape(text)
    out = re.sub(r"\*\*(.+?)\*\*", r"<b>\1</b>", out)
    out = re.sub(r"~~(.+?)~~", r"<s>\1</s>", out)
    return re.sub(r"`([^`]+)`", r"<code>\1</code>", out)


def markdown_html(text: str) -> str:
    """The markdown the suites write (headings, pipe tables, lists, code, paragraphs) as HTML."""
    out: list[str] = []
    lines = text.splitlines()
    i = 0
    while i < len(lines):
        line = lines[i]
        if line.startswith("```"):
            j = i + 1
            while j < len(lines) and not lines[j].startswith("```"):
                j += 1
            out.append("<pre>" + html.escape("\n".join(lines[i + 1 : j])) + "</pre>")
            i = j + 1
        elif line.startswith("#"):
            level = min(len(line) - len(line.lstrip("#")) + 1, 6)
            out.append(f"<h{level}>{_inline(line.lstrip('#').strip())}</h{level}>")
            i += 1
        elif line.startswith("|"):
            rows: list[str] = []
            while i < len(lines) and lines[i].startswith("|"):
                cells = [c.strip() for c in lines[i].strip().strip("|").split("|")]
                if not all(set(c) <= set("-: ") for c in cells):
                    tag = "th" if not rows else "td"
                    rows.append("<tr>" + "".join(f"<{tag}>{_inline(c)}</{tag}>" for c in cells)
                                + "</tr>")
                i += 1
            out.append("<table>" + "".join(rows) + "</table>")
        elif line.lstrip().startswith(("- ", "* ")):
            items = []
            while i < len(lines) and lines[i].strip():
                if lines[i].lstrip().startswith(("- ", "* ")):
                    items.append(lines[i].lstrip()[2:])
                elif items:
                    items[-1] += " " + lines[i].strip()
                i += 1
            out.append("<ul>" + "".join(f"<li>{_inline(t)}</li>" for t in items) + "</ul>")
        elif line.strip():
            para = []
            while i < len(lines) and lines[i].strip() and not lines[i].startswith(("#", "|", "```")):
                para.append(lines[i].strip())
                i += 1
            out.append(f"<p>{_inline(' '.join(para))}</p>")
        else:
            i += 1
    return "\n".join(out)


def _png_tag(path: Path) -> str:
    data = base64.b64encode(path.read_bytes()).decode()
    return f'<img alt="{html.escape(path.stem)}" src="data:image/png;base64,{data}">'


def build_page(folder: Path) -> str:
    """The HTML page of one results folder (a benchmark output or a single run)."""
    from bouquet.apps.plots import plot_curves, seed_groups

    runs = find_runs(folder)
    if not runs:
        raise FileNotFoundError(f"no summary.json under {folder}")
    summaries = {n: json.loads((d / "summary.json").read_text()) for n, d in runs.items()}
    configs = {n: read_config(d) for n, d in runs.items()}
    groups = seed_groups(list(runs), configs)
    tasks = {n: str(s.get("task", "")) for n, s in summaries.items()}
    records = {n: read_metrics(d) for n, d in runs.items()}
    notes = folder / "table.md"
    suite_text = notes.read_text() if notes.is_file() else ""
    found = read_checks(folder)
    named = re.match(r"# Benchmark `([^`]+)`", suite_text)
    suite = found[0] if found else named.group(1) if named else ""
    title = f"benchmark {suite}" if suite else folder.name
    metrics = sorted({k for s in summaries.values() for k in (s.get("final") or {})})
    metrics += [k for k in CURVE_EXTRAS if k not in metrics]
    with tempfile.TemporaryDirectory() as tmp:
        method_of = {groups[n]: str(s.get("method", groups[n])) for n, s in summaries.items()}
        pngs = plot_curves(records, metrics, Path(tmp), groups=groups, tasks=tasks, title=title,
                           family=lambda g: method_of.get(g, g))
        images = "\n".join(_png_tag(p) for p in pngs)
    versions: dict[str, Any] = next(
        (s["versions"] for s in summaries.values() if isinstance(s.get("versions"), dict)), {})
    stamp = _dt.datetime.now(_dt.UTC).strftime("%Y-%m-%d %H:%M UTC")
    parts = [
        "<!DOCTYPE html>", '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{html.escape(title)} — bouquet report</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{html.escape(title)}</h1>",
        f'<p class="meta">{len(runs)} run(s) in <code>{html.escape(str(folder))}</code>; '
        f"page written {stamp}; versions: "
        + html.escape(", ".join(f"{k} {v}" for k, v in versions.items() if v)) + ".</p>",
    ]
    verdicts = verdict_table(folder)
    if verdicts:
        parts += ["<h2>Verdicts against the paper</h2>", verdicts]
    parts += ["<h2>Runs</h2>",
              '<p class="meta">One row per configuration; runs that differ only by their seed '
              "are averaged (± is half the range over seeds). Bytes are measured on the wire.</p>",
              run_table(summaries, groups)]
    if images:
        parts += ["<h2>Curves</h2>", images]
    if suite_text:
        parts += ["<h2>Benchmark notes (table.md)</h2>", markdown_html(suite_text)]
    parts.append("</body></html>")
    return "\n".join(parts) + "\n"


def write_reports(folders: Sequence[Path], out: Path | None = None) -> list[Path]:
    """One page per folder: ``FOLDER/report.html``, or in ``out`` (a ``.html`` file for one folder).

    Returns the pages written.
    """
    if out is not None and out.suffix == ".html" and len(folders) > 1:
        raise ValueError(f"{out} is one page, but {len(folders)} folders were given: "
                         "pass a folder to -o (one page per folder goes there)")
    written: list[Path] = []
    for folder in folders:
        if out is None:
            target = folder / "report.html"
        elif out.suffix == ".html" and len(folders) == 1:
            target = out
        else:
            target = out / f"{folder.resolve().name or 'report'}.html"
            if target in written:
                target = out / f"{folder.resolve().name}-{len(written)}.html"
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_text(build_page(folder), encoding="utf-8")
        written.append(target)
    return written
