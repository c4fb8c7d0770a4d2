"""``bouquet report``: one self-contained HTML page per results folder, checked in a real browser."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest
from synthetic_results import write_suite

from bouquet.apps.bench import load_suite
from bouquet.apps.cli import main
from bouquet.apps.report import build_page, markdown_html
from bouquet.apps.verdicts import Check, read_checks, write_checks

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def _suite(tmp_path: Path) -> Path:
    root = write_suite(tmp_path / "bench-synthetic", methods=("fedavg", "scaffold", "scafcom"),
                       seeds=(0, 1), tasks=("digits-mlp", "rt-minilm"))
    write_checks(root, "synthetic", [
        Check.of("SCAFCOM within 1.5 points of SCAFFOLD", True, "-0.4 points"),
        Check.of("FedAvg beats SCAFCOM", False, "-3.0 points"),
        Check("Fed-SB matches FedIT", "inconclusive", "within 2 standard errors")])
    return root


def test_page_has_tables_plots_verdicts_and_nothing_from_the_network(tmp_path: Path) -> None:
    page = build_page(_suite(tmp_path))
    assert "<h1>benchmark synthetic</h1>" in page
    # one row per configuration and task, seeds averaged
    assert page.count("<td>digits-mlp-fedavg</td>") == 1 and "<td>0, 1</td>" in page
    assert "uplink total MB" in page and "final accuracy" in page and "wall s" in page
    assert page.count('src="data:image/png;base64,') >= 4  # accuracy and loss, round and uplink
    for claim, cls in (("SCAFCOM within 1.5 points of SCAFFOLD", "holds"),
                       ("FedAvg beats SCAFCOM", "fails"), ("Fed-SB matches FedIT", "other")):
        assert re.search(rf'<tr class="{cls}"><td>{re.escape(claim)}</td>', page)
    assert "Benchmark notes (table.md)" in page
    # self-contained: no script, no stylesheet link, no URL but the embedded images
    assert "<script" not in page and "<link" not in page
    assert not re.search(r"(src|href)=\"(?!data:)", page)
    assert "http://" not in page and "https://" not in page


def test_seeds_are_averaged_in_the_table(tmp_path: Path) -> None:
    root = _suite(tmp_path)
    accs = [json.loads((root / f"digits-mlp-fedavg-s{s}" / "summary.json").read_text())
            ["final"]["accuracy"] for s in (0, 1)]
    page = build_page(root)
    row = next(r for r in page.splitlines() if r.startswith("<tr><td>digits-mlp-fedavg</td>"))
    assert f"{sum(accs) / 2:.4g} ± {abs(accs[0] - accs[1]) / 2:.2g}" in row


def test_cli_writes_one_page_per_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    a = write_suite(tmp_path / "a", methods=("fedavg",), seeds=(0,))
    b = write_suite(tmp_path / "b", methods=("scaffold",), seeds=(0, 1))
    assert main(["report", str(a)]) == 0
    assert (a / "report.html").is_file()
    assert main(["report", str(a), str(b), "-o", str(tmp_path / "out")]) == 0
    out = tmp_path / "out"
    assert (out / "a.html").is_file() and (out / "b.html").is_file()
    assert (out / "table.md").is_file() and (out / "plots" / "accuracy_vs_round.png").is_file()
    assert "<td>scaffold</td>" in (out / "b.html").read_text()
    assert main(["report", str(b), "-o", str(tmp_path / "one.html")]) == 0
    assert (tmp_path / "one.html").is_file()
    assert f"report: {tmp_path / 'one.html'}" in capsys.readouterr().out
    assert main(["report", str(a), str(b), "-o", str(tmp_path / "two.html")]) == 2
    assert "names one page" in capsys.readouterr().err
    assert not (tmp_path / "two.html").exists()


def test_a_single_run_folder_gets_its_page(tmp_path: Path) -> None:
    from synthetic_results import write_run

    run = write_run(tmp_path / "fedavg-digits-mlp-s0-run3", method="fedavg", task="digits-mlp",
                    seed=0)
    assert main(["report", str(run)]) == 0
    page = (run / "report.html").read_text()
    assert "<h1>fedavg-digits-mlp-s0-run3</h1>" in page and "1 run(s)" in page
    assert "<td>fedavg-digits-mlp</td>" in page and "Verdicts" not in page
    assert main(["report", str(tmp_path / "empty")]) == 1  # nothing to report


def test_markdown_of_the_suites_becomes_html() -> None:
    text = ("### Checks\n\n| run | acc |\n|---|---|\n| **fedavg** | 0.9 |\n\n- a: holds\n"
            "  (continued)\n- b: **does not hold**\n\n```\npython -c 'x < y'\n```\nplain `code`")
    out = markdown_html(text)
    assert "<h4>Checks</h4>" in out
    assert "<tr><th>run</th><th>acc</th></tr><tr><td><b>fedavg</b></td><td>0.9</td></tr>" in out
    assert "<li>a: holds (continued)</li><li>b: <b>does not hold</b></li>" in out
    assert "<pre>python -c &#x27;x &lt; y&#x27;</pre>" in out and "<code>code</code>" in out


def test_a_suite_writes_its_verdicts_in_the_shared_format(tmp_path: Path) -> None:
    robust = load_suite("robust")
    acc = {"none": 0.88, "x1e4-noscreen": 0.1, "x1e4": 0.88, "flip-noscreen": 0.1, "flip": 0.88}
    summaries = {f"{a}-{t}-s0": {"final": {"accuracy": v if a == "mean" else 0.87}}
                 for a in robust.AGGREGATORS for t, v in acc.items()}
    text = robust.report(summaries, tmp_path)
    suite, checks = read_checks(tmp_path) or ("", [])
    assert suite == "robust" and len(checks) == 4
    assert [c.verdict for c in checks] == ["holds"] * 4
    assert all(c.markdown() in text for c in checks)
    data = json.loads((tmp_path / "verdicts.json").read_text())
    assert set(data["checks"][0]) == {"claim", "verdict", "measured"}
    with pytest.raises(ValueError, match="verdict must be one of"):
        Check("x", "maybe")


def test_scafcom_and_fedcg_write_verdicts(tmp_path: Path) -> None:
    scafcom = load_suite("scafcom")
    best = {"fedavg": .90, "scaffold": .966, "scaffold-1up": .966, "fedavg-topk": .873,
            "fed-ef": .904, "scallion-randk": .885, "scafcom-topk": .9155, "scafcom-local": .93,
            "scafcom-beta1": .952}
    up = {"scaffold": 3.93e7, "scaffold-1up": 1.969e7}
    summaries = {f"{n}-s0": {"best": {"accuracy": a}, "final": {"accuracy": a},
                             "comm": {"up_bytes_total": up.get(n, 1.159e6)}} for n, a in best.items()}
    (tmp_path / "s").mkdir()
    scafcom.report(summaries, tmp_path / "s")
    suite, checks = read_checks(tmp_path / "s") or ("", [])
    assert suite == "scafcom"
    assert [c.verdict for c in checks] == ["does not hold", "does not hold", "holds", "holds",
                                           "does not hold", "holds"]
    fedcg = load_suite("fedcg")
    times = {"fedavg": 2339, "random-topk-warm": 693, "select-only": 104, "lp-only-warm": 352,
             "fedcg": 115, "fedcg-ew1": 702}  # the Dirichlet(1) arms were not run
    out = tmp_path / "f"
    for arm in times:
        (out / f"{arm}-s0").mkdir(parents=True)
        (out / f"{arm}-s0" / "metrics.jsonl").write_text(json.dumps(
            {"sim_round_time_s": 10, "straggler_gap_s": 0.1 if "lp" in arm else 5}) + "\n")
    fedcg.report({f"{a}-s0": {"time": {"sim_time_to_target_s": t},
                              "target": {"up_bytes": 5e6 if a == "fedavg" else 1e6}}
                  for a, t in times.items()}, out)
    suite, checks = read_checks(out) or ("", [])
    assert suite == "fedcg"
    # the last two: FedCG against its three rivals, uplinks redrawn (select-only's 104 s beats
    # fedcg's 115 s here) and fixed (no -fixed arm was run)
    assert [c.verdict for c in checks] == ["holds"] * 4 + ["not measured", "does not hold",
                                                           "not measured"]
    assert "random-topk-warm-mild" in checks[4].measured  # says what was not run
    assert "select-only-fixed" in checks[-1].measured


@pytest.mark.skipif(CHROMIUM is None, reason="headless Chromium is not installed "
                    "(make system-deps installs Debian's chromium when run as root)")
def test_page_renders_in_headless_chromium(tmp_path: Path) -> None:
    from PIL import Image

    root = _suite(tmp_path)
    assert main(["report", str(root), "-o", str(tmp_path / "page.html")]) == 0
    shot = tmp_path / "shot.png"
    assert CHROMIUM is not None
    proc = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic",
         "--no-first-run", "--disable-background-networking", "--disable-component-update",
         "--disable-sync", f"--user-data-dir={tmp_path / 'profile'}", f"--screenshot={shot}",
         "--window-size=1200,1600", (tmp_path / "page.html").as_uri()],
        capture_output=True, text=True, timeout=180)
    assert shot.is_file(), proc.stderr[-2000:]
    image = Image.open(shot).convert("RGB")
    assert image.size == (1200, 1600)
    colours = image.getcolors(maxcolors=1 << 22)
    assert colours is not None
    counts = {rgb: n for n, rgb in colours}
    total = image.size[0] * image.size[1]
    assert len(counts) > 200, "too few colours: the page did not render"
    assert 1 - counts.get((255, 255, 255), 0) / total > 0.05, "the page is blank"
    assert counts.get((238, 242, 247), 0) > 2000, "no table header cells (#eef2f7) on screen"
    plot_blue = sum(n for (r, g, b), n in counts.items()
                    if abs(r - 31) < 20 and abs(g - 119) < 20 and abs(b - 180) < 20)
    assert plot_blue > 200, "no curve (tab:blue) of the embedded plots on screen"
    assert counts.get((223, 243, 223), 0) > 500, "no 'holds' verdict row on screen"
