"""Every float key refuses inf, -inf and NaN, through every entry that sets one.

Before, ``dp-linucb.reward-bound=inf`` was accepted (``inf`` passes a ``min`` bound and NaN
passes every bound, because it compares false) and turned off the reward clipping along with
the noise calibrated on it.
"""

from __future__ import annotations

import inspect
import math
from pathlib import Path
from typing import Any

import pytest
from flwr.app import Context, RecordDict

import bouquet.strategies as plugins
from bouquet.apps import config as config_mod
from bouquet.apps.cli import parse_sets
from bouquet.apps.config import ConfigError, all_keys, resolve
from bouquet.privacy.dp_config import DP_MAX_EPSILON_KEY
from bouquet.schema import coerce, node_config_float

FLOAT_KEYS = sorted(name for name, spec in all_keys().items() if spec.type is float)
#: Non-finite spellings a user, a YAML preset or a TOML run config can produce.
NON_FINITE: list[Any] = [math.inf, -math.inf, math.nan, "inf", "-inf", "nan", "NaN",
                         "Infinity", "1e999", "-1e999"]


def test_there_are_float_keys_to_fuzz() -> None:
    assert "dp-linucb.reward-bound" in FLOAT_KEYS and len(FLOAT_KEYS) > 20


@pytest.mark.parametrize("value", NON_FINITE, ids=repr)
def test_coerce_refuses_non_finite_floats(value: Any) -> None:
    with pytest.raises(ValueError, match="finite"):
        coerce(value, float)


def test_finite_extremes_are_still_numbers() -> None:
    assert coerce("1e308", float) == 1e308 and coerce(-0.0, float) == 0.0
    assert coerce(10**30, float) == 1e30


@pytest.mark.parametrize("name", FLOAT_KEYS)
def test_every_float_key_refuses_non_finite_values_in_the_run_config_and_set(name: str) -> None:
    for value in NON_FINITE:
        with pytest.raises(ConfigError, match=rf"{name!r}.*finite"):
            resolve({name: value})
        with pytest.raises(ConfigError, match=rf"{name!r}.*finite"):
            parse_sets([f"{name}={value}"])
        with pytest.raises(ValueError, match="finite"):
            all_keys()[name].check(value)


def test_a_preset_with_a_non_finite_float_is_refused(tmp_path: Path,
                                                     monkeypatch: pytest.MonkeyPatch) -> None:
    (tmp_path / "unclipped.yaml").write_text("dp-linucb:\n  reward-bound: .inf\n")
    monkeypatch.setattr(config_mod, "CONF_DIR", tmp_path)
    with pytest.raises(ConfigError, match=r"preset unclipped: bad value for "
                                          r"'dp-linucb.reward-bound'.*finite"):
        resolve({"method": "dp-fedlinucb-ldp", "preset": "unclipped"})


def test_reward_bound_inf_no_longer_turns_clipping_off() -> None:
    with pytest.raises(ConfigError, match="reward-bound"):
        resolve({"method": "dp-fedlinucb-ldp", "dp-linucb.reward-bound": "inf"})
    assert resolve({"method": "dp-fedlinucb-ldp",
                    "dp-linucb.reward-bound": 2.0}).flat["dp-linucb.reward-bound"] == 2.0


def _float_arguments(cls: type) -> list[str]:
    return [p.name for p in inspect.signature(cls).parameters.values()
            if isinstance(p.default, float)]


@pytest.mark.parametrize("name", sorted(n for n in plugins.__all__
                                        if n != "BouquetStrategy"
                                        and _float_arguments(getattr(plugins, n))))
def test_every_float_argument_of_every_strategy_plugin_refuses_non_finite(name: str) -> None:
    cls = getattr(plugins, name)
    for arg in _float_arguments(cls):
        for value in (math.inf, math.nan):
            with pytest.raises(ValueError, match=rf"{arg}=.*finite"):
                cls(**{arg: value})


def _node(**node_config: Any) -> Context:
    return Context(1, 1, node_config, RecordDict(), {})


@pytest.mark.parametrize("value", ["nan", "inf", math.nan, math.inf])
def test_a_node_config_float_refuses_non_finite_values(value: Any) -> None:
    with pytest.raises(ValueError, match=rf"node config {DP_MAX_EPSILON_KEY}: .*finite"):
        node_config_float(_node(**{DP_MAX_EPSILON_KEY: value}).node_config, DP_MAX_EPSILON_KEY)
    assert node_config_float(_node(**{DP_MAX_EPSILON_KEY: "3"}).node_config,
                             DP_MAX_EPSILON_KEY) == 3.0
    assert node_config_float(_node().node_config, DP_MAX_EPSILON_KEY) is None


def test_a_nan_node_budget_no_longer_disables_the_nodes_own_epsilon_cap() -> None:
    """``dp-max-epsilon=nan`` passed ``b > 0`` as False: the node's budget was silently dropped."""
    from bouquet.clients.lora import _budget
    from bouquet.privacy.dp_config import DPConfig

    with pytest.raises(ValueError, match=DP_MAX_EPSILON_KEY):
        _budget(DPConfig(enabled=True), _node(**{DP_MAX_EPSILON_KEY: "nan"}))
