"""One declaration per method; built-ins in code; entry points for third-party packages only."""

from __future__ import annotations

import importlib.metadata
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps import config, registry
from bouquet.registration import Method, Variant

#: Every ``method=`` name before methods were declared once with variants (issue 13 §4).
BUILTIN_METHODS = {
    "fedavg", "fedavg-compressed", "fed-ef",
    "scaffold", "scaffold-1up", "scallion", "scafcom",
    "fedcg", "fedcg-select-only", "fedcg-lp-only", "random-topk",
    "fedlinucb", "dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp", "dp-fedlinucb-sdp-vecsum",
    "fedkseed", "fedkseed-pro",
    "fedit", "ffa-lora", "fed-sb",
}
BUILTIN_TASKS = {"digits-mlp", "fmnist-cnn", "rt-minilm", "tiny-bert-cls", "gsm-smollm",
                 "rt-smollm", "synth-bandit", "digits-bandit"}

TOY_PLUGIN = '''
"""A third-party method: FedAvg's strategy and client under another name, one key of its own."""
import dataclasses

from bouquet.registration import Method, TaskSpec, Variant
from bouquet.schema import key


@dataclasses.dataclass(frozen=True)
class ToyConfig:
    mix: float = key(0.5, "how much of the update to keep", min=0.0, max=1.0)


METHODS = Method(
    name="toy-avg",
    description="a toy method registered by a third-party package",
    strategy="bouquet.strategies.fedavg:build",
    client="bouquet.clients.fedavg:FedAvgClient",
    default_task="toy-digits",
    sections={"toy": ToyConfig},
    family="toy",
    variants=(Variant("toy-avg-plain", "the toy without its key", sections={}),),
)
TASKS = [TaskSpec(name="toy-digits", description="digits again",
                  factory="bouquet.tasks.digits:DigitsMLP")]
CLASH = Method(name="fedavg", description="a second fedavg", strategy="x:y", client="x:z",
               default_task="digits-mlp")
'''


def _clear_caches() -> None:
    for fn in (registry.methods, registry.tasks, config.all_keys, config.section_readers):
        fn.cache_clear()


@pytest.fixture(autouse=True)
def fresh_registry() -> Iterator[None]:
    _clear_caches()
    yield
    _clear_caches()


def _entry_points(monkeypatch: pytest.MonkeyPatch, eps: list[importlib.metadata.EntryPoint]) -> None:
    """Make ``entry_points(group=...)`` return only ``eps`` (wherever the registry looks)."""
    def fake(**params: Any) -> list[importlib.metadata.EntryPoint]:
        return [ep for ep in eps if ep.group == params.get("group")]
    monkeypatch.setattr(importlib.metadata, "entry_points", fake)
    monkeypatch.setattr(registry, "entry_points", fake)


@pytest.fixture
def toy_plugin(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> str:
    (tmp_path / "toy_bouquet_plugin.py").write_text(textwrap.dedent(TOY_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "toy_bouquet_plugin"
    sys.modules.pop("toy_bouquet_plugin", None)


def test_builtins_are_found_with_no_entry_points(monkeypatch: pytest.MonkeyPatch) -> None:
    _entry_points(monkeypatch, [])
    assert set(registry.methods()) == BUILTIN_METHODS
    assert set(registry.tasks()) == BUILTIN_TASKS
    for name in BUILTIN_METHODS:  # every name still works as method=
        assert config.resolve({"method": name}).method.name == name


def test_stale_entry_points_of_our_own_distribution_are_ignored(
        monkeypatch: pytest.MonkeyPatch) -> None:
    own = importlib.metadata.EntryPoint("fedavg", "bouquet.apps.methods.fedavg:METHODS",
                                        registry.METHOD_GROUP)
    dist = type("Dist", (), {"name": "flwr_bouquet", "version": "0.0.1"})()
    _entry_points(monkeypatch, [own._for(dist)])  # type: ignore[attr-defined]
    assert set(registry.methods()) == BUILTIN_METHODS


def test_a_third_party_entry_point_adds_a_method_its_variant_and_a_task(
        monkeypatch: pytest.MonkeyPatch, toy_plugin: str) -> None:
    _entry_points(monkeypatch, [
        importlib.metadata.EntryPoint("toy", f"{toy_plugin}:METHODS", registry.METHOD_GROUP),
        importlib.metadata.EntryPoint("toy", f"{toy_plugin}:TASKS", registry.TASK_GROUP),
    ])
    assert set(registry.methods()) == BUILTIN_METHODS | {"toy-avg", "toy-avg-plain"}
    assert registry.get_method("toy-avg-plain").variant_of == "toy-avg"
    assert "toy-digits" in registry.tasks()
    cfg = config.resolve({"method": "toy-avg", "toy.mix": 0.25})
    assert cfg.task_name == "toy-digits" and cfg.section("toy").mix == 0.25
    with pytest.raises(config.ConfigError, match="toy.mix"):  # the variant reads no toy keys
        config.resolve({"method": "toy-avg-plain", "toy.mix": 0.25})
    with pytest.raises(config.ConfigError, match="toy.mix"):  # nor does a built-in
        config.resolve({"method": "fedavg", "toy.mix": 0.25})


def test_a_third_party_name_that_collides_with_a_builtin_is_a_clear_error(
        monkeypatch: pytest.MonkeyPatch, toy_plugin: str) -> None:
    _entry_points(monkeypatch, [
        importlib.metadata.EntryPoint("clash", f"{toy_plugin}:CLASH", registry.METHOD_GROUP)])
    with pytest.raises(registry.RegistryError, match=r"'fedavg'.*clash.*built-in"):
        registry.methods()


def test_an_entry_point_that_gives_no_method_is_refused(
        monkeypatch: pytest.MonkeyPatch, toy_plugin: str) -> None:
    _entry_points(monkeypatch, [
        importlib.metadata.EntryPoint("bad", f"{toy_plugin}:TASKS", registry.METHOD_GROUP)])
    with pytest.raises(registry.RegistryError, match="expected a Method"):
        registry.methods()


def test_variants_take_what_they_do_not_set_from_their_method() -> None:
    base = Method(name="m", description="d", strategy="s:a", client="c:a", default_task="t",
                  sections={"m": int}, paper="P", test_config={"a": 1},
                  variants=(Variant("m-v", "dv", strategy="s:b", test_config={"b": 2}),
                            Variant("m-w", "dw", client="c:w", sections={"w": float})))
    m, v, w = base.expand()
    assert (m.name, m.variants, m.variant_of) == ("m", (), "")
    assert (v.strategy, v.client, dict(v.sections), v.paper, dict(v.test_config), v.variant_of) \
        == ("s:b", "c:a", {"m": int}, "P", {"a": 1, "b": 2}, "m")
    assert (w.strategy, w.client, dict(w.sections)) == ("s:a", "c:w", {"w": float})


def test_each_builtin_family_is_one_declaration_with_its_variants() -> None:
    declared = {m.name: {v.name for v in m.variants} for m in registry.builtin_methods()}
    assert declared["fedlinucb"] == {"dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp",
                                     "dp-fedlinucb-sdp-vecsum"}
    assert declared["fedcg"] == {"fedcg-select-only", "fedcg-lp-only", "random-topk"}
    assert declared["scaffold"] == {"scaffold-1up", "scallion", "scafcom"}
    assert declared["fedkseed"] == {"fedkseed-pro"}
    assert declared["fedit"] == {"ffa-lora", "fed-sb"}
