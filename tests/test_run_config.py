"""Config in one place (issue 13 §6): one run-name rule, the resolved task saved, unread keys refused
through every entry."""

from __future__ import annotations

import datetime as dt
import re
from pathlib import Path

import pytest
from omegaconf import OmegaConf

from bouquet.apps import config as config_mod
from bouquet.apps.cli import main
from bouquet.apps.config import ConfigError, name_run, resolve
from bouquet.apps.results import default_run_name

TIMED = r"\d{8}-\d{6}"


def test_the_resolved_task_is_in_the_config_even_when_the_default_is_used() -> None:
    cfg = resolve({"method": "scafcom"})
    assert cfg.common.task == cfg.task_name == "digits-mlp"
    assert cfg.flat["task"] == "digits-mlp"
    assert OmegaConf.create(cfg.to_yaml())["task"] == "digits-mlp"
    assert resolve({"method": "fedlinucb"}).flat["task"] == "synth-bandit"


def test_one_run_name_rule_with_a_run_id_or_the_start_time() -> None:
    assert default_run_name("fedavg", "digits-mlp", 3, run_id=17) == "fedavg-digits-mlp-s3-run17"
    when = dt.datetime(2026, 1, 2, 3, 4, 5)
    assert default_run_name("fedavg", "digits-mlp", 3, now=when) == "fedavg-digits-mlp-s3-20260102-030405"


def test_name_run_names_only_new_unnamed_runs_with_the_resolved_task() -> None:
    named = name_run({"method": "fed-ef", "seed": 4})
    assert re.fullmatch(rf"fed-ef-digits-mlp-s4-{TIMED}", named["run-name"])
    assert name_run({"run-name": "mine"})["run-name"] == "mine"
    assert "run-name" not in name_run({"resume-from": "/somewhere/old"})


def test_bouquet_run_names_its_folder_by_the_rule_and_saves_the_task(
        tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "fedavg", "--engine", "inprocess", "--clients", "2", "--rounds", "1",
                 "--results-dir", str(tmp_path), "--set", "local-steps=1", "--set", "seed=5"]) == 0
    [run_dir] = tmp_path.iterdir()
    assert re.fullmatch(rf"fedavg-digits-mlp-s5-{TIMED}", run_dir.name)
    assert OmegaConf.load(run_dir / "config.yaml")["task"] == "digits-mlp"


def test_simulation_and_deploy_name_runs_with_the_same_rule() -> None:
    """Neither builds a name of its own any more: both go through config.name_run."""
    import inspect

    from bouquet.apps import deploy, simulation

    for module in (simulation, deploy):
        source = inspect.getsource(module)
        assert "name_run(" in source and "strftime" not in source


# --------------------------------------------------------------------------- unread keys, every entry
UNREAD = {"method": "scafcom", "dp.enabled": True}


def test_unread_key_refused_by_the_cli(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "scafcom", "--engine", "inprocess", "--results-dir", str(tmp_path),
                 "--set", "dp.enabled=true"]) == 2
    assert "'dp.enabled'" in capsys.readouterr().err
    assert not list(tmp_path.iterdir())


def test_unread_key_refused_by_the_server_app_path(tmp_path: Path) -> None:
    """What flwr run hands the ServerApp: the full run config with the override."""
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.apps.runner import execute

    grid = LocalGrid(2, {**UNREAD, "results-dir": str(tmp_path), "run-name": "x"})
    with pytest.raises(ConfigError, match="'dp.enabled'"):
        execute(grid, grid.run_config)
    assert not (tmp_path / "x").exists()


def test_unread_key_refused_on_a_node() -> None:
    """A ClientApp resolves the same fused run config with the same resolver."""
    from bouquet.apps.config import full_run_config

    with pytest.raises(ConfigError, match="'dp.enabled'"):
        resolve(full_run_config(UNREAD))


def test_unread_key_refused_from_a_preset_through_the_cli(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    (tmp_path / "conf").mkdir()
    (tmp_path / "conf" / "private.yaml").write_text("dp:\n  enabled: true\n")
    monkeypatch.setattr(config_mod, "CONF_DIR", tmp_path / "conf")
    assert main(["run", "scafcom", "--engine", "inprocess", "--results-dir", str(tmp_path / "r"),
                 "--set", "preset=private"]) == 2
    assert "preset private: key 'dp.enabled'" in capsys.readouterr().err
