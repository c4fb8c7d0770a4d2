"""Plots a reader can trust: distinct styles, seeds averaged with a band, one task per panel."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from synthetic_results import write_run, write_suite

from bouquet.apps.plots import (
    axis_label,
    curves,
    diverged,
    draw_figure,
    legend_names,
    line_styles,
    plot_curves,
    seed_groups,
)
from bouquet.apps.results import read_metrics


def _runs(root: Path) -> dict[str, list[dict]]:
    return {p.name: read_metrics(p) for p in sorted(root.iterdir()) if p.is_dir()}


def _tasks(root: Path) -> dict[str, str]:
    return {p.name: json.loads((p / "summary.json").read_text())["task"]
            for p in root.iterdir() if p.is_dir()}


def test_25_runs_never_share_a_style() -> None:
    labels = [f"run{i}" for i in range(25)]
    styles = line_styles(labels)
    assert len(set(styles.values())) == 25
    assert len(set(line_styles([f"r{i}" for i in range(450)]).values())) == 450


def test_one_colour_per_family_and_a_style_per_variant() -> None:
    labels = [f"{m}-v{v}" for m in ("fedit", "ffa-lora", "fed-sb") for v in range(9)]
    styles = line_styles(labels, family=lambda g: g.rsplit("-v", 1)[0])
    assert len(set(styles.values())) == len(labels)
    for m in ("fedit", "ffa-lora", "fed-sb"):
        assert len({styles[f"{m}-v{v}"].color for v in range(9)}) == 1
    assert len({styles[f"{m}-v0"].color for m in ("fedit", "ffa-lora", "fed-sb")}) == 3
    # one family for every curve: one colour would be unreadable, so colours vary again
    single = line_styles([f"fedavg-v{i}" for i in range(5)], family=lambda g: "fedavg")
    assert len({st.color for st in single.values()}) == 5
    # more families than colours: still distinct
    many = line_styles([f"f{i}-a" for i in range(14)], family=lambda g: g.split("-")[0])
    assert len(set(many.values())) == 14


def test_seeds_are_grouped_by_name_suffix_or_by_config() -> None:
    assert seed_groups(["fedavg-s0", "fedavg-s1", "fedcg-ew1-s0", "x"]) == {
        "fedavg-s0": "fedavg", "fedavg-s1": "fedavg", "fedcg-ew1-s0": "fedcg-ew1", "x": "x"}
    # the default run names (bouquet.apps.results.default_run_name) carry a tail after the seed
    assert seed_groups(["fedavg-digits-mlp-s0-run17", "fedavg-digits-mlp-s1-20261201-120000"]) == {
        "fedavg-digits-mlp-s0-run17": "fedavg-digits-mlp",
        "fedavg-digits-mlp-s1-20261201-120000": "fedavg-digits-mlp"}
    base = {"method": "fedavg", "task": "digits-mlp", "lr": 0.1}
    configs = {"r0": {**base, "seed": 0, "run-name": "r0"}, "r1": {**base, "seed": 1, "run-name": "r1"},
               "other": {**base, "lr": 0.2, "seed": 0, "run-name": "other"}}
    groups = seed_groups(list(configs), configs)
    assert groups["r0"] == groups["r1"] != groups["other"]
    # a run saved before explicit-defaults existed and one saved after: the same configuration
    configs["r1"] = {**configs["r1"], "explicit-defaults": ""}
    groups = seed_groups(list(configs), configs)
    assert groups["r0"] == groups["r1"] != groups["other"]
    # equal configs, but the names say they are different arms (robust's faults are not in the
    # config): grouped by name and config
    same = {n: {**base, "seed": int(n[-1]), "run-name": n}
            for n in ("mean-none-s0", "mean-none-s1", "mean-x1e4-s0", "mean-x1e4-s1")}
    assert seed_groups(list(same), same) == {"mean-none-s0": "mean-none", "mean-none-s1": "mean-none",
                                             "mean-x1e4-s0": "mean-x1e4", "mean-x1e4-s1": "mean-x1e4"}


def test_group_mean_and_min_max_band(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "s", methods=("fedavg",), seeds=(0, 1, 2))
    runs = _runs(root)
    (c,) = curves(runs, "accuracy")
    assert c.label == "fedavg" and c.runs == 3
    per_seed = np.array([[r["accuracy"] for r in runs[f"fedavg-s{s}"]] for s in range(3)])
    np.testing.assert_allclose(c.mean, per_seed.mean(axis=0))
    np.testing.assert_allclose(c.low, per_seed.min(axis=0))
    np.testing.assert_allclose(c.high, per_seed.max(axis=0))
    assert c.high.max() > c.low.min()  # the seeds differ: a band is drawn


def test_mean_uses_only_rounds_every_seed_has(tmp_path: Path) -> None:
    write_run(tmp_path / "a-s0", method="fedavg", task="t", seed=0, rounds=5)
    write_run(tmp_path / "a-s1", method="fedavg", task="t", seed=1, rounds=3)
    (c,) = curves(_runs(tmp_path), "accuracy")
    assert list(c.rounds) == [1, 2, 3]


def test_each_task_gets_its_own_panel(tmp_path: Path) -> None:
    root = write_suite(tmp_path / "s", methods=("fedkseed", "fedit"), seeds=(0,),
                       tasks=("digits-mlp", "rt-minilm"))
    drawn = curves(_runs(root), "accuracy", tasks=_tasks(root))
    fig = draw_figure(drawn, "accuracy", "round", "benchmark fedkseed", None)
    axes = [ax for ax in fig.axes if ax.get_title()]
    assert sorted(ax.get_title() for ax in axes) == ["task: digits-mlp", "task: rt-minilm"]
    for ax in axes:
        assert len(ax.get_lines()) == 2  # each panel holds its own task's runs only
        assert ax.get_xlabel() == "round" and "(fraction)" in ax.get_ylabel()
    assert "benchmark fedkseed: accuracy vs round" in fig._suptitle.get_text()
    # the legend sits beside the panels, not over them
    fig.canvas.draw()
    legend_box = fig.legends[0].get_window_extent()
    assert all(legend_box.x0 >= ax.get_window_extent().x1 for ax in axes)
    # the same method keeps its style across panels
    colours = {(ax.get_title(), line.get_label().split(" ")[0]): line.get_color()
               for ax in axes for line in ax.get_lines()}
    assert colours[("task: digits-mlp", "fedit")] == colours[("task: rt-minilm", "fedit")]


def test_two_groups_that_read_alike_in_a_panel_keep_their_own_names(tmp_path: Path) -> None:
    write_run(tmp_path / "t-a-s0", method="fedavg", task="t", seed=0)
    write_run(tmp_path / "a-t-s0", method="fedit", task="t", seed=0)
    runs = _runs(tmp_path)
    drawn = curves(runs, "accuracy", tasks=dict.fromkeys(runs, "t"))
    assert sorted(legend_names(drawn)) == ["a-t", "t-a"]  # both would read "a" without the task
    fig = draw_figure(drawn, "accuracy", "round", "", None)
    assert len({line.get_color() for line in fig.axes[0].get_lines()}) == 2


def test_plot_files_titles_and_units(tmp_path: Path) -> None:
    root = tmp_path / "s"
    for seed in (0, 1):
        write_run(root / f"fedcg-s{seed}", method="fedcg", task="digits-mlp", seed=seed,
                  sim_time=True)
    paths = plot_curves(_runs(root), ["accuracy", "missing_metric"], tmp_path / "plots")
    assert sorted(p.name for p in paths) == ["accuracy_vs_round.png", "accuracy_vs_sim_time.png",
                                             "accuracy_vs_uplink.png"]
    assert axis_label("straggler_gap_s") == "straggler gap (s)"
    assert axis_label("sim_time_cum_s") == "cumulative sim time (s)"
    assert axis_label("up_bytes") == "up (MB)"


def test_a_diverged_run_gets_a_log_axis_and_the_others_stay_linear(tmp_path: Path) -> None:
    """One run's loss of 1e12 (SCAFFOLD without its norm screen) must not flatten the rest."""
    write_run(tmp_path / "ok-s0", method="fedavg", task="t", seed=0)
    write_run(tmp_path / "bad-s0", method="scaffold", task="t", seed=0)
    runs = _runs(tmp_path)
    for rec in runs["bad-s0"][4:]:
        rec["loss"] = 1e12
    fig = draw_figure(curves(runs, "loss"), "loss", "round", "", None)
    assert fig.axes[0].get_yscale() == "log"
    fig = draw_figure(curves({"ok-s0": runs["ok-s0"]}, "loss"), "loss", "round", "", None)
    assert fig.axes[0].get_yscale() == "linear"


def test_only_a_diverged_loss_gets_a_log_axis() -> None:
    assert diverged("loss", [0.5, 0.6, 0.7, 1e9]) and diverged("train_loss", [0.5, 0.4, 5e3])
    assert not diverged("loss", [0.5, 0.6, 0.7, 2.3])  # an ordinary loss curve
    assert not diverged("loss", [0.0, 0.5, 0.6, 1e9])  # a zero would vanish on a log axis
    # metrics that start at or near zero keep a linear axis whatever their span
    assert not diverged("straggler_gap_s", [2e-6, 4e-5, 3e-6, 10.0, 60.0])
    assert not diverged("regret", [1e-3, 0.5, 2.0, 9.0])
    assert not diverged("epsilon", [1e-4, 0.3, 1.0])
