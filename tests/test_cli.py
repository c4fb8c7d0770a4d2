"""The bouquet command line (in-process engine; the Ray/flwr paths are in test_simulation.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bouquet.apps.cli import main


def test_list_shows_methods_tasks_and_keys(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list", "--keys"]) == 0
    out = capsys.readouterr().out
    assert "fedavg" in out and "digits-mlp" in out and "num-server-rounds" in out


def test_bad_set_value_fails_before_running(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert main(["run", "fedavg", "--engine", "inprocess", "--results-dir", str(tmp_path),
                 "--set", "fraction-train=7"]) == 2
    assert "fraction-train" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_run_then_report(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    for seed in (0, 1):
        assert main(["run", "fedavg", "--engine", "inprocess", "--clients", "3", "--rounds", "2",
                     "--results-dir", str(tmp_path / "runs"), "--set", f"seed={seed}",
                     "--set", f"run-name=r{seed}", "--set", "local-steps=2"]) == 0
    assert main(["report", str(tmp_path / "runs"), "--out", str(tmp_path / "rep")]) == 0
    table = (tmp_path / "rep" / "table.md").read_text()
    assert "| r0 |" in table and "| r1 |" in table
    assert (tmp_path / "rep" / "plots" / "accuracy_vs_round.png").is_file()
    s = json.loads((tmp_path / "runs" / "r1" / "summary.json").read_text())
    assert s["seed"] == 1


# --------------------------------------------------------------------------- user mistakes
def _run(tmp_path: Path, *extra: str, rounds: int = 2, clients: int = 3) -> int:
    return main(["run", "--engine", "inprocess", "--clients", str(clients), "--rounds",
                 str(rounds), "--results-dir", str(tmp_path), "--set", "sample-deadline=1",
                 *extra])


def _yaml(path: Path) -> dict:
    from omegaconf import OmegaConf

    return dict(OmegaConf.to_container(OmegaConf.load(path)))  # type: ignore[arg-type]


def _rows(run_dir: Path) -> list[dict]:
    rows = [json.loads(x) for x in (run_dir / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def test_explicit_default_beats_a_preset_on_the_command_line(tmp_path: Path) -> None:
    assert _run(tmp_path, "fedavg", "--rounds", "1", "--set", "preset=label-skew",
                "--set", "partition=iid", "--set", "run-name=r", "--set", "local-steps=1") == 0
    saved = (tmp_path / "r" / "config.yaml").read_text()
    assert "partition: iid" in saved


@pytest.mark.parametrize("clients", ["0", "-3"])
def test_no_nodes_is_a_one_line_error(clients: str, tmp_path: Path,
                                      capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["run", "fedavg", "--engine", "inprocess", "--clients", clients, "--rounds", "1",
              "--results-dir", str(tmp_path), "--set", "sample-deadline=1"])
    assert exc.value.code == 2
    assert "at least 1 node" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_resume_restores_the_whole_saved_config(tmp_path: Path) -> None:
    settings = ["fedavg", "--set", "seed=4", "--set", "lr=0.05", "--set", "local-steps=2",
                "--set", "partition=dirichlet", "--set", "fraction-train=0.67"]
    assert _run(tmp_path, *settings, "--set", "run-name=full", rounds=3) == 0
    assert _run(tmp_path, *settings, "--set", "run-name=part", rounds=2) == 0
    saved = _yaml(tmp_path / "part" / "config.yaml")
    assert main(["run", "--engine", "inprocess", "--clients", "3", "--rounds", "3",
                 "--resume", str(tmp_path / "part")]) == 0
    assert _rows(tmp_path / "part") == _rows(tmp_path / "full")
    after = _yaml(tmp_path / "part" / "config.yaml")
    assert after["num-server-rounds"] == 3 and after["resume-from"] == str(tmp_path / "part")
    changed = {"num-server-rounds", "resume-from"}
    assert {k: v for k, v in after.items() if k not in changed} == \
        {k: v for k, v in saved.items() if k not in changed}
    assert (saved["seed"], saved["partition"], saved["local-steps"]) == (4, "dirichlet", 2)


def test_a_folder_saved_with_an_empty_task_resumes_under_the_default_task(tmp_path: Path) -> None:
    """Folders written before config.yaml held the resolved task say ``task: ''``."""
    settings = ["fedavg", "--set", "local-steps=1"]
    assert _run(tmp_path, *settings, "--set", "run-name=full", rounds=2) == 0
    assert _run(tmp_path, *settings, "--set", "run-name=old", rounds=1) == 0
    cfg_file = tmp_path / "old" / "config.yaml"
    assert "task: digits-mlp" in cfg_file.read_text()
    cfg_file.write_text(cfg_file.read_text().replace("task: digits-mlp", "task: ''"))
    assert main(["run", "--engine", "inprocess", "--clients", "3", "--rounds", "2",
                 "--resume", str(tmp_path / "old")]) == 0
    assert _rows(tmp_path / "old") == _rows(tmp_path / "full")


@pytest.mark.parametrize(("change", "named"), [
    (["--set", "seed=5"], "seed=5"),
    (["--set", "task=fmnist-cnn"], "task"),
    (["--set", "lr=0.3"], "lr=0.3"),
])
def test_resume_with_other_settings_is_refused_and_changes_nothing(
        change: list[str], named: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "fedavg", "--set", "run-name=part", "--set", "local-steps=1",
                rounds=1) == 0
    run_dir = tmp_path / "part"
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    capsys.readouterr()
    assert main(["run", "--engine", "inprocess", "--clients", "3", "--rounds", "2",
                 "--resume", str(run_dir), *change]) == 2
    assert named in capsys.readouterr().err
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_reusing_a_run_name_is_refused(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    args = ["fedavg", "--set", "run-name=same", "--set", "local-steps=1"]
    assert _run(tmp_path, *args, rounds=2) == 0
    before = (tmp_path / "same" / "metrics.jsonl").read_bytes()
    capsys.readouterr()
    assert _run(tmp_path, *args, "--set", "seed=1", rounds=1) == 2
    assert "already holds a run" in capsys.readouterr().err
    assert (tmp_path / "same" / "metrics.jsonl").read_bytes() == before


def test_a_stopped_run_exits_non_zero_and_claims_no_checkpoint_before_round_1(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, "fedavg", "--set", "run-name=s", "--set", "min-train-nodes=3",
                clients=2) == 1
    out = capsys.readouterr()
    assert "checkpoint of round 0" not in out.out + out.err
    assert "no checkpoint" in out.out
    summary = json.loads((tmp_path / "s" / "summary.json").read_text())
    assert summary["stopped"]["after_round"] == 0
    assert "--resume" not in summary["stopped"]["resume"]
    assert not (tmp_path / "s" / "checkpoint").exists()


@pytest.mark.parametrize(("args", "named"), [
    (["fedlinucb", "--set", "task=digits-mlp"], "needs a bandit task"),
    (["scafcom", "--set", "task=synth-bandit"], "needs a model task"),
    (["scafcom", "--set", "dp.enabled=true"], "'dp.enabled'"),
    (["fedavg", "--set", "partition=pathological"],
     "cannot split task 'digits-mlp' over 1000 nodes"),
])
def test_mistakes_known_before_start_are_config_errors(
        args: list[str], named: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    assert _run(tmp_path, *args, clients=1000 if "partition=pathological" in args else 3) == 2
    err = capsys.readouterr().err
    assert named in err and "Traceback" not in err
    assert not list(tmp_path.iterdir())
