"""PNG curves of one run or of several: a metric vs round, vs cumulative uplink, vs simulated time.

What a reader can rely on in every figure drawn here:

* **No two curves look alike.** :func:`line_styles` gives each curve its own (colour, line style,
  marker) triple for any number of curves; with a ``family`` function, one colour per family
  (e.g. the method) and a line style and marker per variant inside it.
* **Seeds are averaged.** Runs that differ only by their seed (named ``<name>-s<seed>``, or
  given the same group, or with the same ``config.yaml`` but the seed: :func:`seed_groups`) are
  drawn as one line, the mean over seeds at each round, with a shaded band from the minimum to
  the maximum over seeds (the figure's note says so).
* **One task per axis.** Runs of different tasks go into side-by-side panels, one per task.
* **Titles and units.** Every figure has a title, every axis a unit (rounds, MB of uplink,
  simulated seconds) and the legend sits beside the data, never over it.
"""

from __future__ import annotations

import colorsys
import dataclasses
import json
import re
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402
from matplotlib.ticker import MaxNLocator  # noqa: E402

#: Matplotlib's ten colours of the "tab10" cycle, in order.
PALETTE = ("tab:blue", "tab:orange", "tab:green", "tab:red", "tab:purple", "tab:brown",
           "tab:pink", "tab:gray", "tab:olive", "tab:cyan")
LINESTYLES = ("-", "--", "-.", ":")
MARKERS = ("o", "s", "^", "v", "D", "x", "P", "*", "<", ">")
#: Keys of a run's config that do not make two runs different configurations.
NOT_CONFIGURATION = frozenset({"seed", "run-name", "results-dir", "explicit-defaults", "plots"})
#: A loss panel whose largest value is more than this factor above its median gets a log y
#: axis, so that one diverged run (a loss of 1e12) does not flatten every other curve to a line
#: at zero. Only losses: other metrics (regret, epsilon, a straggler gap near 0 s) may start at
#: or near zero, where a log axis would draw noise decades apart or hide the values.
Y_LOG_SPAN = 1e3
#: The x axes a figure can have: name -> (axis label, title word).
X_AXES = {"round": ("round", "round"),
          "uplink": ("cumulative uplink (MB, measured on the wire)", "cumulative uplink"),
          "sim_time": ("simulated time (s)", "simulated time")}
SPREAD_NOTE = "lines: mean over seeds; shaded: min-max over seeds"
#: ``name-s<seed>``, also with the default run name's tail (``-run<id>`` or ``-<date>-<time>``).
_SEED_SUFFIX = re.compile(r"^(?P<name>.+)-s(?P<seed>\d+)(-run\d+|-\d{8}-\d{6})?$")


@dataclasses.dataclass(frozen=True)
class LineStyle:
    """How one curve is drawn (a distinct triple per curve of a figure)."""

    color: str
    linestyle: str
    marker: str

    def as_kwargs(self) -> dict[str, str]:
        """Keyword arguments for ``Axes.plot``."""
        return {"color": self.color, "linestyle": self.linestyle, "marker": self.marker}


@dataclasses.dataclass(frozen=True)
class Curve:
    """One line of a figure: the mean over its runs (seeds) and, with several, the min-max band."""

    label: str
    task: str
    rounds: np.ndarray
    x: Mapping[str, np.ndarray]
    mean: np.ndarray
    low: np.ndarray
    high: np.ndarray
    runs: int


def _extra_colour(i: int) -> str:
    """A colour beyond the palette: golden-ratio hues, distinct from each other."""
    r, g, b = colorsys.hsv_to_rgb((i * 0.618033988749895) % 1.0, 0.75, 0.8)
    return f"#{round(r * 255):02x}{round(g * 255):02x}{round(b * 255):02x}"


def _indexed_style(i: int) -> LineStyle:
    """The i-th triple: colours vary fastest, then line styles, then markers (400 distinct)."""
    n = len(PALETTE) * len(LINESTYLES) * len(MARKERS)
    colour = PALETTE[i % len(PALETTE)] if i < n else _extra_colour(i)
    return LineStyle(colour, LINESTYLES[(i // len(PALETTE)) % len(LINESTYLES)],
                     MARKERS[(i // (len(PALETTE) * len(LINESTYLES))) % len(MARKERS)])


def line_styles(labels: Sequence[str],
                family: Callable[[str], str] | None = None) -> dict[str, LineStyle]:
    """A distinct style per label.

    Parameters
    ----------
    labels : Sequence[str]
        The curves of one figure, in legend order.
    family : Callable[[str], str], optional
        Maps a label to its family (e.g. the method). Each family gets one colour and its members
        a line style and marker each. Without it, with a single family (one colour for every
        curve would be unreadable) or with more families than colours, the styles are simply
        the first ``len(labels)`` distinct triples.

    Returns
    -------
    dict[str, LineStyle]
        Label -> style; no two labels share a style.

    """
    unique = list(dict.fromkeys(labels))
    if family is not None:
        families = list(dict.fromkeys(family(label) for label in unique))
        if 1 < len(families) <= len(PALETTE):
            seen: dict[str, int] = {}
            out = {}
            for label in unique:
                fam = family(label)
                k = seen.get(fam, 0)
                seen[fam] = k + 1
                ls, mk = LINESTYLES[k % len(LINESTYLES)], MARKERS[(k // len(LINESTYLES)) % len(MARKERS)]
                out[label] = LineStyle(PALETTE[families.index(fam)], ls, mk)
            if len(set(out.values())) == len(out):
                return out
    return {label: _indexed_style(i) for i, label in enumerate(unique)}


def seed_name(label: str) -> str:
    """``"fedavg-s3"``, ``"fedavg-digits-mlp-s3-run7"`` -> ``"fedavg"``, ``"fedavg-digits-mlp"``.

    A label without a ``-s<seed>`` suffix is its own name.
    """
    m = _SEED_SUFFIX.match(label)
    return m.group("name") if m else label


def seed_groups(labels: Sequence[str],
                configs: Mapping[str, Mapping[str, Any]] | None = None) -> dict[str, str]:
    """Label -> group name; runs of one group differ only by their seed.

    Runs are grouped by their config without ``seed``, ``run-name`` and ``results-dir`` when
    ``configs`` has it (``config.yaml`` of each run) and, where names end in ``-s<seed>``, by
    the name without it too (a benchmark's fault injection is not in the config); without
    configs by the name alone. A group's name is that stripped name when its members share it,
    else the members' common prefix (or the first member's name).
    """
    by_key: dict[str, list[str]] = {}
    for label in labels:
        cfg = (configs or {}).get(label)
        if cfg:  # a name's -s<seed> suffix still counts: what a config omits (faults) differs
            kept = {k: v for k, v in cfg.items() if k not in NOT_CONFIGURATION}
            named = seed_name(label) if _SEED_SUFFIX.match(label) else ""
            key = f"config:{named}:" + json.dumps(kept, sort_keys=True, default=str)
        else:
            key = "name:" + seed_name(label)
        by_key.setdefault(key, []).append(label)
    out: dict[str, str] = {}
    for members in by_key.values():
        names = {seed_name(m) for m in members}
        if len(names) == 1:
            name = names.pop()
        else:
            prefix = _common_prefix(members).rstrip("-_ ")
            name = prefix if prefix else members[0]
        for m in members:
            out[m] = name
    names_used: dict[str, set[str]] = {}
    for label, name in out.items():  # two groups never share a name
        names_used.setdefault(name, set()).add(label)
    keys_of = {label: key for key, members in by_key.items() for label in members}
    for clashing in names_used.values():
        if len({keys_of[m] for m in clashing}) > 1:
            for m in clashing:
                out[m] = m
    return out


def _common_prefix(texts: Sequence[str]) -> str:
    first, last = min(texts), max(texts)
    i = 0
    while i < min(len(first), len(last)) and first[i] == last[i]:
        i += 1
    return first[:i]


def _series(records: Sequence[Mapping[str, Any]], key: str) -> dict[int, dict[str, float]]:
    """Round -> {value, uplink (cumulative bytes), sim_time (cumulative s)} where ``key`` is a number."""
    out: dict[int, dict[str, float]] = {}
    up = 0.0
    for r in records:
        up += float(r.get("up_bytes", 0) or 0)
        v = r.get(key)
        if isinstance(v, int | float) and not isinstance(v, bool) and np.isfinite(v):
            point = {"value": float(v), "uplink": up}
            sim = r.get("sim_time_cum_s")
            if isinstance(sim, int | float) and not isinstance(sim, bool):
                point["sim_time"] = float(sim)
            out[int(r["round"])] = point
    return out


def curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], key: str, *,
           groups: Mapping[str, str] | None = None,
           tasks: Mapping[str, str] | None = None) -> list[Curve]:
    """One :class:`Curve` per (task, group): mean and min-max over the group's runs.

    A round enters a group's curve only when every run of the group has the metric there, so a
    mean is never over fewer seeds than the legend says.
    """
    groups = groups or seed_groups(list(runs))
    members: dict[tuple[str, str], list[dict[int, dict[str, float]]]] = {}
    for label, records in runs.items():
        series = _series(records, key)
        if series:
            task = (tasks or {}).get(label, "")
            members.setdefault((task, groups.get(label, label)), []).append(series)
    out = []
    for (task, name), series_list in members.items():
        common = sorted(set.intersection(*(set(s) for s in series_list)))
        if not common:
            continue
        values = np.array([[s[r]["value"] for r in common] for s in series_list])
        xs = {"uplink": np.mean([[s[r]["uplink"] for r in common] for s in series_list], axis=0)
              / 1e6}
        if all("sim_time" in s[r] for s in series_list for r in common):
            xs["sim_time"] = np.mean([[s[r]["sim_time"] for r in common] for s in series_list],
                                     axis=0)
        out.append(Curve(name, task, np.array(common, dtype=float), xs, values.mean(axis=0),
                         values.min(axis=0), values.max(axis=0), len(series_list)))
    return out


def axis_label(key: str) -> str:
    """A metric's axis label with its unit."""
    words = key.replace("_", " ")
    if key.endswith("_bytes"):
        return f"{words[: -len(' bytes')]} (MB)"
    if key.endswith("_cum_s"):
        return f"cumulative {words[: -len(' cum s')]} (s)"
    if key.endswith("_s"):
        return f"{words[: -len(' s')]} (s)"
    if key in ("accuracy", "exact_match"):
        return f"{words} (fraction)"
    if key == "epsilon":
        return "epsilon (privacy spent)"
    return words


def display_name(curve: Curve) -> str:
    """A curve's legend name: its group without the task's name (the panel names the task)."""
    if not curve.task or curve.task not in curve.label:
        return curve.label
    parts = [p.strip("-_ ") for p in curve.label.split(curve.task)]
    return "-".join(p for p in parts if p) or curve.label


def _x_of(curve: Curve, xaxis: str) -> np.ndarray | None:
    return curve.rounds if xaxis == "round" else curve.x.get(xaxis)


def legend_names(drawn: Sequence[Curve]) -> list[str]:
    """:func:`display_name` of each curve, or its full group name where two in a panel would clash."""
    names = [display_name(c) for c in drawn]
    for task in {c.task for c in drawn}:
        in_panel = [i for i, c in enumerate(drawn) if c.task == task]
        shown = [names[i] for i in in_panel]
        for i in in_panel:
            if shown.count(names[i]) > 1:
                names[i] = drawn[i].label
    return names


def diverged(key: str, values: Sequence[float]) -> bool:
    """Whether a panel of ``key`` needs a log y axis.

    Only a loss whose values are all positive and whose largest value is more than
    :data:`Y_LOG_SPAN` times its median does (a diverged run beside converging ones).
    """
    if not key.endswith("loss") or not values or min(values) <= 0:
        return False
    return max(values) > Y_LOG_SPAN * float(np.median(values))


def draw_figure(drawn: list[Curve], key: str, xaxis: str, title: str,
                family: Callable[[str], str] | None) -> Any:
    """The figure of one metric and x axis: one panel per task, shared legend beside them."""
    tasks = list(dict.fromkeys(c.task for c in drawn))
    ncols = len(tasks)
    fig, axes = plt.subplots(1, ncols, figsize=(5.2 * ncols + 2.6, 4.2), squeeze=False)
    names = legend_names(drawn)
    of_family = {n: (family or (lambda g: g))(c.label) for n, c in zip(names, drawn, strict=True)}
    styles = line_styles(list(of_family), of_family.__getitem__ if family else None)
    seeded = any(c.runs > 1 for c in drawn)
    values = key.endswith("_bytes")
    for ax, task in zip(axes[0], tasks, strict=True):
        positive, heights = [], []
        for name, c in ((n, c) for n, c in zip(names, drawn, strict=True) if c.task == task):
            x = _x_of(c, xaxis)
            assert x is not None
            scale = 1e-6 if values else 1.0
            style = styles[name]
            label = name + (f" (mean of {c.runs} seeds)" if c.runs > 1 else "")
            ax.plot(x, c.mean * scale, label=label, markevery=max(1, len(x) // 10),
                    markersize=4, linewidth=1.4, **style.as_kwargs())
            if c.runs > 1:
                ax.fill_between(x, c.low * scale, c.high * scale, color=style.color, alpha=0.15,
                                linewidth=0)
            positive += [float(v) for v in x if v > 0]
            band = np.concatenate([c.low, c.high]) * scale
            heights += [float(v) for v in band if np.isfinite(v)]
        if xaxis != "round" and positive and max(positive) / min(positive) > 50:
            ax.set_xscale("log")
        if diverged(key, heights):
            ax.set_yscale("log")
        if xaxis == "round":
            ax.xaxis.set_major_locator(MaxNLocator(integer=True))
        ax.set_xlabel(X_AXES[xaxis][0])
        ax.set_ylabel(axis_label(key))
        ax.grid(alpha=0.3)
        if task:
            ax.set_title(f"task: {task}", fontsize=9)
    suptitle = f"{title}: " if title else ""
    suptitle += f"{key.replace('_', ' ')} vs {X_AXES[xaxis][1]}"
    fig.suptitle(suptitle + (f"\n({SPREAD_NOTE})" if seeded else ""), fontsize=10)
    handles, labels = [], []
    for ax in axes[0]:
        h, lab = ax.get_legend_handles_labels()
        for hh, ll in zip(h, lab, strict=True):
            if ll not in labels:
                handles.append(hh)
                labels.append(ll)
    fig.legend(handles, labels, loc="upper left", bbox_to_anchor=(1.0, 0.9), fontsize=7,
               frameon=False)
    fig.tight_layout()
    return fig


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str],
                out_dir: Path, *, groups: Mapping[str, str] | None = None,
                tasks: Mapping[str, str] | None = None, title: str = "",
                family: Callable[[str], str] | None = None) -> list[Path]:
    """One PNG per metric and x axis (round, uplink, simulated time where recorded).

    Parameters
    ----------
    runs : Mapping[str, Sequence[Mapping[str, Any]]]
        Run name -> its ``metrics.jsonl`` records.
    metrics : Sequence[str]
        Metric keys of the records to draw (a metric no run has is skipped).
    out_dir : Path
        Where ``<metric>_vs_<axis>.png`` go.
    groups : Mapping[str, str], optional
        Run -> group; a group's runs (seeds) are drawn as their mean with a min-max band.
        Default: :func:`seed_groups` on the names.
    tasks : Mapping[str, str], optional
        Run -> task; each task gets its own panel.
    title : str
        Put in front of every figure's title (e.g. the benchmark suite).
    family : Callable[[str], str], optional
        Group name -> family, for one colour per family (see :func:`line_styles`).

    Returns
    -------
    list[Path]
        The files written.

    """
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key in metrics:
        drawn = curves(runs, key, groups=groups, tasks=tasks)
        for xaxis in X_AXES:
            usable = [c for c in drawn if _x_of(c, xaxis) is not None]
            if not usable or (xaxis != "round" and len(usable) < len(drawn)):
                continue
            fig = draw_figure(usable, key, xaxis, title, family)
            path = out_dir / f"{key}_vs_{xaxis}.png"
            fig.savefig(path, dpi=100, bbox_inches="tight")
            plt.close(fig)
            written.append(path)
    return written


def plot_run(run_dir: Path, records: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Path]:
    """The plots/ folder of a single run."""
    return plot_curves({run_dir.name: records}, metrics, run_dir / "plots", title=run_dir.name)
