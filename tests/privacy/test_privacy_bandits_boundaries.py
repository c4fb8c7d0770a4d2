"""What crosses the trust boundaries of the private bandit methods.

* Shuffle DP by vector sum: the analyser and everything the server keeps see per-coordinate sums
  only, never one user's (or one silo's) codes.
* Nothing that calibrates noise is taken from what nodes report: a node that claims a huge
  partition id at hello moves neither the announced ``M`` nor any silo's noise, and a silo
  refuses a server whose announcement differs from its own configuration.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import MessageType, RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy
from bouquet.privacy import shuffle
from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig, make_protocol

SMALL = {"linucb.batch-steps": 5, "linucb.horizon-rounds": 8, "synth-bandit.arms": 8,
         "synth-bandit.dim": 4, "num-server-rounds": 8}


def _grid(tmp_path: Path, method: str, silos: int, **cfg: Any) -> LocalGrid:
    return LocalGrid(silos, {"results-dir": str(tmp_path), "run-name": method, "method": method,
                             "linucb.num-silos": silos, **SMALL, **cfg})


def _arrays(obj: Any, seen: set[int] | None = None) -> Iterator[np.ndarray]:
    """Every numpy array reachable from ``obj`` through attributes, mappings and sequences."""
    seen = set() if seen is None else seen
    if id(obj) in seen or isinstance(obj, str | bytes | int | float | bool | type(None) | type):
        return
    seen.add(id(obj))
    if isinstance(obj, np.ndarray):
        yield obj
        return
    if isinstance(obj, dict):
        children: list[Any] = list(obj.values())
    elif isinstance(obj, list | tuple | set):
        children = list(obj)
    elif dataclasses.is_dataclass(obj):
        children = [getattr(obj, f.name) for f in dataclasses.fields(obj)]
    elif hasattr(obj, "__dict__") and not callable(obj):
        children = list(vars(obj).values())
    else:
        return
    for child in children:
        yield from _arrays(child, seen)


def test_no_server_side_object_holds_an_individual_code(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    grid = _grid(tmp_path, "dp-fedlinucb-sdp-vecsum", 3)
    strategy = build_strategy(resolve(grid.run_config), None)
    analysed: list[tuple[Any, ...]] = []
    original = shuffle.VecSumParams.analyse

    def spy(self: shuffle.VecSumParams, *args: Any) -> np.ndarray:
        analysed.append(args)
        return original(self, *args)

    monkeypatch.setattr(shuffle.VecSumParams, "analyse", spy)
    rows: set[bytes] = set()
    for pid in range(3):
        def keep(content: RecordDict) -> RecordDict:
            codes = content["node"]["codes"].numpy()  # type: ignore[index,union-attr]
            rows.update(r.astype(np.float64).tobytes() for r in codes)
            rows.update(r.astype(np.int32).tobytes() for r in codes)
            return content
        grid.corrupt[pid] = keep
    for rnd in range(1, 5):
        assert strategy.train_round(grid, rnd).clients == 3
    assert analysed and rows
    for args in analysed:  # the analyser is handed per-coordinate sums, nothing finer
        for a in args:
            assert not isinstance(a, np.ndarray) or a.ndim == 1
    held = list(_arrays(strategy)) + list(_arrays(strategy.state_dict()))
    for a in held:
        for r in np.atleast_2d(a) if a.ndim <= 2 else a.reshape(-1, a.shape[-1]):
            assert r.tobytes() not in rows


@pytest.mark.parametrize("method", ["dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp"])
def test_a_claimed_partition_id_moves_no_noise(tmp_path: Path, method: str) -> None:
    grid = _grid(tmp_path, method, 3)
    liar = 1002
    grid.contexts[liar].node_config["partition-id"] = 10**6  # answers hello with 10^6
    strategy = build_strategy(resolve(grid.run_config), None)
    rlog = strategy.train_round(grid, 1)
    sent = [m for m in grid.sent if m.metadata.message_type == MessageType.TRAIN]
    assert {int(m.content["config"]["num-silos"]) for m in sent} == {3}  # type: ignore[arg-type]
    assert liar not in {m.metadata.dst_node_id for m in sent}
    variant = method.removeprefix("dp-fedlinucb-")
    lin = LinUCBConfig(batch_steps=5, horizon_rounds=8, num_silos=3)
    expected = make_protocol(variant, lin, DPLinUCBConfig(), 4, 3, 8)
    assert rlog.clients == 2
    assert rlog.metrics["sigma"] == pytest.approx(expected.sigma)


@pytest.mark.parametrize("method", ["dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp",
                                    "dp-fedlinucb-sdp-vecsum"])
def test_silo_refuses_an_announcement_that_differs_from_its_config(tmp_path: Path,
                                                                   method: str) -> None:
    grid = _grid(tmp_path, method, 3)
    grid.contexts[1002].node_config["num-silos"] = 5  # this silo's operator says M = 5
    strategy = build_strategy(resolve(grid.run_config), None)
    by_pid = strategy.discover(grid)
    contents = strategy.configure_round(1, [0, 1, 2])
    contents[0]["config"]["num-silos"] = 10**6  # a server announcing a huge M
    rlog = strategy.run_phase(grid, 1, contents, by_pid, MessageType.TRAIN)
    assert rlog.errors == 2 and rlog.clients == 1
    assert sorted(f["partition_id"] for f in rlog.failures) == [0, 2]
    assert all("num-silos" in f["reason"] for f in rlog.failures)


@pytest.mark.parametrize("method", ["dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp",
                                    "dp-fedlinucb-sdp-vecsum"])
def test_private_runs_need_the_operators_number_of_silos(tmp_path: Path, method: str) -> None:
    grid = _grid(tmp_path, method, 3, **{"linucb.num-silos": 0})
    with pytest.raises(ValueError, match="num-silos"):
        build_strategy(resolve(grid.run_config), None)


def test_sdp_amp_releases_no_sum_of_fewer_silos_than_calibrated(tmp_path: Path) -> None:
    grid = _grid(tmp_path, "dp-fedlinucb-sdp-amp", 3, **{"round-timeout": 1})
    strategy = build_strategy(resolve(grid.run_config), None)
    grid.drop = {1}
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 2
    assert int(strategy.tree.syncs[0]) == 0  # nothing stored: 2 < 3 noisy nodes
    assert strategy.privacy()["epsilon"] == 0.0


@pytest.mark.parametrize("method", ["dp-fedlinucb-sdp-amp", "dp-fedlinucb-sdp-vecsum"])
def test_sdp_refuses_a_sampling_rate_below_its_floor(tmp_path: Path, method: str) -> None:
    grid = _grid(tmp_path, method, 4, **{"fraction-train": 0.5})
    with pytest.raises(ValueError, match="min-silos"):
        build_strategy(resolve(grid.run_config), None)
    ok = _grid(tmp_path, method, 4, **{"fraction-train": 0.5, "dp-linucb.min-silos": 2})
    build_strategy(resolve(ok.run_config), None)


def test_silo_noise_is_not_a_function_of_public_values() -> None:
    """Without a node secret, two silos with the same public coordinates draw different noise,
    and one silo keeps its secret (the same tree node is never drawn twice differently)."""
    from flwr.app import Context, RecordDict

    from bouquet.clients.linucb import noise_rng

    def ctx() -> Context:
        return Context(1, 1, {"partition-id": 0, "num-partitions": 2}, RecordDict(), {})

    a, b = ctx(), ctx()
    draw_a = noise_rng(a, 0, 0, 3).standard_normal(4)
    assert not np.array_equal(draw_a, noise_rng(b, 0, 0, 3).standard_normal(4))
    np.testing.assert_array_equal(draw_a, noise_rng(a, 0, 0, 3).standard_normal(4))


def test_a_resumed_ldp_server_still_charges_the_earlier_syncs(tmp_path: Path) -> None:
    """A server restored from a checkpoint that stops before its first new round must still
    report the privacy spent in the checkpointed rounds (not 0)."""
    from conformance_kit import build

    grid, strategy = build("dp-fedlinucb-ldp", tmp_path, **{"fraction-train": 1.0})
    for rnd in (1, 2):
        strategy.train_round(grid, rnd)
    spent = strategy.summary_extras()["privacy"]["epsilon"]
    assert spent > 0
    _, fresh = build("dp-fedlinucb-ldp", tmp_path / "again", **{"fraction-train": 1.0})
    fresh.load_state_dict(strategy.state_dict())
    assert fresh.summary_extras()["privacy"]["epsilon"] == spent
