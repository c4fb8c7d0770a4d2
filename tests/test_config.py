"""Config resolution: presets, overrides, and errors that name the key."""

from __future__ import annotations

from pathlib import Path

import pytest

from bouquet.apps import config as config_mod
from bouquet.apps.config import ConfigError, all_keys, resolve, sync_pyproject

REPO = Path(__file__).resolve().parents[1]


def test_defaults_resolve_to_fedavg_on_its_default_task() -> None:
    cfg = resolve({})
    assert cfg.method.name == "fedavg"
    assert cfg.task_name == "digits-mlp"
    assert cfg.common.num_server_rounds == all_keys()["num-server-rounds"].default


@pytest.mark.parametrize(
    ("run_config", "fragment"),
    [
        ({"lrr": 0.1}, "'lrr'"),
        ({"lr": "fast"}, "'lr'"),
        ({"lr": -1.0}, "'lr'"),
        ({"partition": "bogus"}, "'partition'"),
        ({"fraction-train": 1.5}, "'fraction-train'"),
        ({"num-server-rounds": 2.5}, "'num-server-rounds'"),
        ({"method": "nope"}, "method"),
        ({"task": "nope"}, "task"),
        ({"preset": "nope"}, "preset"),
    ],
)
def test_bad_values_name_the_key(run_config: dict, fragment: str) -> None:
    with pytest.raises(ConfigError) as err:
        resolve(run_config)
    assert fragment in str(err.value)


def test_preset_then_explicit_override(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "quick.yaml").write_text("num-server-rounds: 2\nlr: 0.3\n")
    monkeypatch.setattr(config_mod, "CONF_DIR", tmp_path)
    cfg = resolve({"preset": "quick", "lr": 0.01})
    assert cfg.common.num_server_rounds == 2
    assert cfg.common.lr == 0.01


def test_preset_with_unknown_key_is_rejected(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "bad.yaml").write_text("nonsense: 1\n")
    monkeypatch.setattr(config_mod, "CONF_DIR", tmp_path)
    with pytest.raises(ConfigError, match="preset bad.*nonsense"):
        resolve({"preset": "bad"})


def test_pyproject_run_config_is_in_sync_with_the_schema() -> None:
    assert sync_pyproject(REPO / "pyproject.toml", check=True), (
        "run `python -m bouquet.apps.config --sync-pyproject`"
    )


def test_every_key_has_help_and_a_valid_default() -> None:
    for name, spec in all_keys().items():
        assert spec.help, name
        assert spec.check(spec.default) == spec.default, name


def test_configuration_reference_is_in_sync() -> None:
    from bouquet.apps.docs import main as docs_main

    assert docs_main(["--check"]) == 0, "run `python -m bouquet.apps.docs`"


def test_shipped_label_skew_preset() -> None:
    cfg = resolve({"preset": "label-skew"})
    assert (cfg.common.partition, cfg.common.classes_per_client) == ("pathological", 2)
