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


# --------------------------------------------------------------------------- keys nobody reads
@pytest.mark.parametrize("explicit", [None, ["dp.enabled"]])
def test_key_of_a_section_the_method_does_not_read_is_an_error(explicit: list[str] | None) -> None:
    with pytest.raises(ConfigError) as err:
        resolve({"method": "scafcom", "dp.enabled": True}, explicit)
    text = str(err.value)
    assert "'dp.enabled'" in text and "scafcom" in text
    assert "method ffa-lora" in text  # names the methods that do read it


def test_unread_key_from_a_preset_is_an_error(tmp_path: Path,
                                             monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "private.yaml").write_text("dp:\n  enabled: true\n")
    monkeypatch.setattr(config_mod, "CONF_DIR", tmp_path)
    with pytest.raises(ConfigError, match="preset private: key 'dp.enabled'"):
        resolve({"method": "scafcom", "preset": "private"})


def test_unread_key_at_its_default_changes_nothing_and_passes() -> None:
    """``dp.enabled=false`` on scafcom is what happens anyway; a full run config holds it too."""
    cfg = resolve({"method": "scafcom", "dp.enabled": False}, explicit=["dp.enabled"])
    assert "dp.enabled" not in cfg.flat


def test_task_key_of_another_task_names_the_task_that_reads_it() -> None:
    with pytest.raises(ConfigError, match="task synth-bandit"):
        resolve({"method": "fedavg", "synth-bandit.arms": 7})


def test_a_key_the_method_reads_is_accepted() -> None:
    cfg = resolve({"method": "ffa-lora", "dp.enabled": True}, explicit=["dp.enabled"])
    assert cfg.flat["dp.enabled"] is True


# --------------------------------------------------------------------------- presets vs explicit
def test_explicit_value_equal_to_the_default_beats_a_preset() -> None:
    run_config = {"preset": "label-skew", "partition": "iid"}
    cfg = resolve(run_config, explicit=list(run_config))
    assert cfg.common.partition == "iid"
    assert cfg.common.classes_per_client == 2


def test_pinned_presets_resolve_alike_on_server_and_nodes() -> None:
    from bouquet.apps.config import pin_presets
    from bouquet.apps.local_grid import full_run_config

    pinned = pin_presets({"preset": "label-skew", "partition": "iid"})
    assert "preset" not in pinned and pinned["partition"] == "iid"
    server = resolve(full_run_config(pinned), explicit=list(pinned))
    nodes = resolve(full_run_config(pinned))
    assert server.flat == nodes.flat and nodes.common.partition == "iid"


def test_server_refuses_a_preset_the_nodes_would_apply_differently() -> None:
    from bouquet.apps.config import node_view_agrees
    from bouquet.apps.local_grid import full_run_config

    given = {"preset": "label-skew", "partition": "iid"}
    run_config = full_run_config(given)
    cfg = resolve(run_config, explicit=list(given))
    with pytest.raises(ConfigError, match="partition='iid' \\(nodes would use 'pathological'\\)"):
        node_view_agrees(run_config, cfg)
    node_view_agrees(run_config, resolve(run_config))  # without explicit keys: one view


def test_a_key_set_back_to_its_default_against_the_methods_preset_reaches_the_nodes() -> None:
    """lr 0.1 is the global default; Fed-SB's own preset (applied by every node) says 0.02.
    Pinning names lr in explicit-defaults, so nodes and server both train at 0.1."""
    from bouquet.apps.config import node_view_agrees, pin_presets
    from bouquet.apps.local_grid import full_run_config

    pinned = pin_presets({"method": "fed-sb", "lr": 0.1})
    assert pinned["explicit-defaults"] == "lr"
    run_config = full_run_config(pinned)
    server = resolve(run_config, explicit=list(pinned))
    node_view_agrees(run_config, server)
    assert server.common.lr == resolve(run_config).common.lr == 0.1
    # a plain `flwr run` user names the key themselves; without it the server refuses
    given = {"method": "fed-sb", "lr": 0.1}
    with pytest.raises(ConfigError, match="explicit-defaults='lr'"):
        node_view_agrees(full_run_config(given), resolve(full_run_config(given), list(given)))
    named = full_run_config({**given, "explicit-defaults": " lr "})
    assert resolve(named).common.lr == 0.1
    # only keys the nodes would read otherwise are named: not an lr off the default, nor a
    # key that a named preset (dropped by pinning) sets to its default
    assert "explicit-defaults" not in pin_presets({"method": "fed-sb", "lr": 0.03})
    assert "explicit-defaults" not in pin_presets({"method": "fedavg", "preset": "label-skew"})
    with pytest.raises(ConfigError, match="unknown config key 'learning-rate'"):
        resolve({"method": "fed-sb", "explicit-defaults": "lr,learning-rate"})
    with pytest.raises(ConfigError, match="not itself"):
        resolve({"method": "fed-sb", "explicit-defaults": "explicit-defaults"})
    # one spelling is saved, and the refusal's advice keeps the keys already named
    assert resolve({"method": "fed-sb", "explicit-defaults": " seed ,lr,lr,"}).flat[
        "explicit-defaults"] == "lr,seed"
    seeded = {**given, "explicit-defaults": "seed"}
    with pytest.raises(ConfigError, match="explicit-defaults='lr,seed'"):
        node_view_agrees(full_run_config(seeded), resolve(full_run_config(seeded), list(seeded)))


def test_a_resume_does_not_compare_how_presets_were_spelled(tmp_path: Path) -> None:
    """A folder saved by plain ``flwr run`` (explicit-defaults as typed, or a folder from
    before the key) continues under ``bouquet run --resume``, which pins its own spelling."""
    import yaml

    from bouquet.apps.config import pin_presets
    from bouquet.apps.local_grid import full_run_config
    from bouquet.apps.resume import config_differences

    pinned = pin_presets({"method": "fed-sb", "lr": 0.1})
    cfg = resolve(full_run_config(pinned), list(pinned))
    for saved in (" lr ,lr", ""):
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(
            {**cfg.flat, "explicit-defaults": saved}))
        assert config_differences(cfg, tmp_path) == {}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump({**cfg.flat, "lr": 0.02}))
    assert set(config_differences(cfg, tmp_path)) == {"lr"}


@pytest.mark.parametrize(("method", "lr"), [("fedit", 0.005), ("ffa-lora", 0.02),
                                             ("fed-sb", 0.02), ("fedavg", 0.1)])
def test_lora_methods_have_a_learning_rate_of_their_own(method: str, lr: float) -> None:
    # AdamW at the global default lr 0.1 keeps the LoRA methods at the majority class (issue 14)
    assert resolve({"method": method}).common.lr == lr
    assert resolve({"method": method, "lr": 0.03}).common.lr == 0.03  # an explicit lr wins
    assert resolve({"method": method, "lr": 0.1}, explicit=["lr"]).common.lr == 0.1
