"""Reliability in simulation: server resume, node restarts, node memory on disk, corrupt state.

Every run goes through the real ServerApp loop (``execute``) and the real ClientApp on the
in-process grid. A new :class:`LocalGrid` is a new ``flwr run``: new run id, empty
``context.state`` on every node, exactly what a resumed server meets.
"""

from __future__ import annotations

import json
import os
import re
import shutil
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import Array, ArrayRecord, ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity

from bouquet.apps.config import ConfigError, resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.registry import get_method, get_task, methods
from bouquet.apps.runner import CHECKPOINT_DIR, build_strategy, execute, restore_strategy
from bouquet.clients.persistence import MARKER, NodeStore, StateRestoreError, persist, restore
from bouquet.strategies.base import NotEnoughNodes
from bouquet.strategies.checkpoint import CheckpointError, load_checkpoint, save_checkpoint
from bouquet.wire.arrays import to_record

#: One method per family (with its privacy switch where it has one).
FAMILIES: dict[str, dict[str, Any]] = {
    "scafcom": {},
    "fedkseed": {},
    "ffa-lora": {"dp.enabled": True},
    "dp-fedlinucb-ldp": {},
}
FAMILY_METHODS = [m for m in FAMILIES if m in methods()]


class HookedGrid(LocalGrid):
    """A LocalGrid that calls ``hooks[r](grid)`` once, before the first message of round ``r``."""

    def __init__(self, num_nodes: int, run_config: dict[str, Any],
                 hooks: dict[int, Callable[[HookedGrid], None]] | None = None) -> None:
        super().__init__(num_nodes, run_config)
        self.hooks = dict(hooks or {})

    def push_messages(self, messages: Any) -> Any:
        messages = list(messages)
        for m in messages:
            cfg = m.content.get("config") if "config" in m.content else None
            rnd = cfg.get("server-round") if isinstance(cfg, ConfigRecord) else None
            if isinstance(rnd, int) and rnd in self.hooks:
                self.hooks.pop(rnd)(self)
        return super().push_messages(messages)


class ServerDies(Exception):
    """Stands for a ServerApp killed in the middle of a round."""


class DyingGrid(LocalGrid):
    """Nodes answer round ``die_at`` (and save their state), then the server dies."""

    def __init__(self, num_nodes: int, run_config: dict[str, Any], die_at: int) -> None:
        super().__init__(num_nodes, run_config)
        self.die_at = die_at

    def pull_messages(self, message_ids: Any) -> Any:
        for m in self.sent:
            cfg = m.content.get("config") if "config" in m.content else None
            if isinstance(cfg, ConfigRecord) and cfg.get("server-round") == self.die_at:
                raise ServerDies
        return super().pull_messages(message_ids)


def config(name: str, tmp_path: Path, **over: Any) -> dict[str, Any]:
    m = get_method(name)
    cfg = {"method": name, "task": m.test_task or m.default_task, "results-dir": str(tmp_path),
           "seed": 3, "fraction-train": 0.5, "sample-deadline": 5.0, "round-timeout": 60.0,
           "plots": False, **m.test_config, **FAMILIES.get(name, {})}
    cfg.update(over)
    return cfg


def run(cfg: dict[str, Any], nodes: int = 4, grid: LocalGrid | None = None) -> Path:
    g = grid or LocalGrid(nodes, cfg)
    return execute(g, g.run_config)


def lines(summary: Path) -> list[dict[str, Any]]:
    rows = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]


def node_folder(run_dir: Path, pid: int) -> Path:
    return run_dir / "client-state" / f"partition-{pid}"


# --------------------------------------------------------------------------- server resume
@pytest.mark.parametrize("name", FAMILY_METHODS)
def test_resumed_run_equals_uninterrupted_run(name: str, tmp_path: Path) -> None:
    full = run(config(name, tmp_path, **{"num-server-rounds": 3, "run-name": "full"}))
    part = run(config(name, tmp_path, **{"num-server-rounds": 2, "run-name": "part"}))
    resumed = run(config(name, tmp_path, **{"num-server-rounds": 3,
                                            "resume-from": str(part.parent)}))
    assert resumed == part
    assert len(lines(full)) == 3
    assert lines(resumed) == lines(full)


def test_unnamed_run_resumed_through_plain_flwr_run_keeps_node_state(tmp_path: Path) -> None:
    """``flwr run`` without ``run-name``, then ``resume-from``: nodes find their state again.

    The nodes must file their state where the server's run folder is, under a name both compute
    (config + Flower run id); SCAFCOM's control variates and momentum live there.
    """
    over = {"num-server-rounds": 3, "fraction-train": 1.0}
    full = run(config("scafcom", tmp_path, **over, **{"run-name": "full"}))
    part = run(config("scafcom", tmp_path, **{**over, "num-server-rounds": 2}))
    assert (part.parent / "client-state").is_dir()
    resumed = run(config("scafcom", tmp_path, **over, **{"resume-from": str(part.parent)}))
    assert lines(resumed) == lines(full)


def test_without_node_memory_a_resumed_bandit_run_diverges(tmp_path: Path) -> None:
    """The check above can fail: the same resume with node memory off gives other numbers."""
    name = "dp-fedlinucb-ldp"
    if name not in methods():
        pytest.skip(f"{name} is not registered")
    full = run(config(name, tmp_path, **{"num-server-rounds": 3, "run-name": "full"}))
    part = run(config(name, tmp_path, **{"num-server-rounds": 2, "run-name": "part"}))
    grid = LocalGrid(4, config(name, tmp_path, **{"num-server-rounds": 3,
                                                  "resume-from": str(part.parent)}))
    for ctx in grid.contexts.values():
        ctx.node_config["state-dir"] = "off"
    resumed = run({}, grid=grid)
    assert lines(resumed)[:2] == lines(full)[:2]
    assert lines(resumed)[2] != lines(full)[2]


def test_server_killed_mid_round_then_resumed(tmp_path: Path) -> None:
    """Nodes saved round-2 state the dead server never aggregated; the resume must not use it.

    The bandit silo refuses a round it has already answered, so restoring the orphaned
    round-2 state would turn into error replies.
    """
    name = "dp-fedlinucb-ldp" if "dp-fedlinucb-ldp" in methods() else "scafcom"
    over = {"num-server-rounds": 3, "fraction-train": 1.0}
    full = run(config(name, tmp_path, **over, **{"run-name": "full"}))
    part = run(config(name, tmp_path, **{**over, "num-server-rounds": 1, "run-name": "part"}))
    dying = DyingGrid(4, config(name, tmp_path, **over, **{"resume-from": str(part.parent)}),
                      die_at=2)
    with pytest.raises(ServerDies):
        run({}, grid=dying)
    assert any(v.round == 2 for v in NodeStore(node_folder(part.parent, 0), 0, 0, True).complete())
    resumed = run(config(name, tmp_path, **over, **{"resume-from": str(part.parent)}))
    assert lines(resumed) == lines(full)
    assert all(r["errors"] == 0 for r in lines(resumed))


def test_corrupt_server_checkpoint_is_refused_and_nothing_is_touched(tmp_path: Path) -> None:
    part = run(config("fedavg", tmp_path, **{"num-server-rounds": 1, "run-name": "part",
                                             "local-steps": 1}), nodes=2)
    run_dir = part.parent
    (state,) = (run_dir / CHECKPOINT_DIR).glob("state-*.npz")
    state.write_bytes(state.read_bytes()[:100])
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    with pytest.raises(CheckpointError, match=rf"checkpoint/{state.name}"):
        run(config("fedavg", tmp_path, **{"num-server-rounds": 2, "resume-from": str(run_dir),
                                          "local-steps": 1}), nodes=2)
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def _fedavg(tmp_path: Path, **over: Any) -> dict[str, Any]:
    return config("fedavg", tmp_path, **{"local-steps": 1, **over})


def test_server_refuses_a_key_the_method_does_not_read_before_any_message(tmp_path: Path) -> None:
    grid = LocalGrid(2, config("scafcom", tmp_path, **{"dp.enabled": True, "run-name": "x"}))
    with pytest.raises(ConfigError, match="'dp.enabled'.*method fedit"):
        run({}, grid=grid)
    assert grid.sent == [] and not (tmp_path / "x").exists()


@pytest.mark.parametrize("change", [{"seed": 9}, {"task": "fmnist-cnn"}, {"lr": 0.3},
                                    {"partition": "dirichlet"}])
def test_resume_through_the_server_refuses_other_settings(change: dict[str, Any],
                                                          tmp_path: Path) -> None:
    """Plain ``flwr run --run-config "resume-from=..."`` with other settings: nothing sent."""
    part = run(_fedavg(tmp_path, **{"num-server-rounds": 1, "run-name": "part"}), nodes=2)
    run_dir = part.parent
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    grid = LocalGrid(2, _fedavg(tmp_path, **{"num-server-rounds": 2,
                                             "resume-from": str(run_dir), **change}))
    with pytest.raises(ConfigError, match=f"{next(iter(change))}="):
        run({}, grid=grid)
    assert grid.sent == []
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before


def test_checkpoint_of_another_run_is_refused(tmp_path: Path) -> None:
    part = run(_fedavg(tmp_path, **{"num-server-rounds": 1, "run-name": "part"}), nodes=2)
    ckpt = part.parent / CHECKPOINT_DIR
    _, state, extra = load_checkpoint(ckpt)
    save_checkpoint(ckpt, 1, state, {**extra, "seed": 11})
    grid = LocalGrid(2, _fedavg(tmp_path, **{"num-server-rounds": 2,
                                             "resume-from": str(part.parent)}))
    with pytest.raises(ConfigError, match="checkpoint .* is of seed=11"):
        run({}, grid=grid)
    assert grid.sent == []


def test_checkpoint_with_another_model_layout_is_refused(tmp_path: Path) -> None:
    cfg = resolve(_fedavg(tmp_path))
    strategy = build_strategy(cfg, to_record(get_task(cfg.task_name).load().initial_arrays(0)))
    state = strategy.state_dict()

    def shrink(tree: Any) -> Any:
        if isinstance(tree, np.ndarray):
            return np.zeros(3, dtype=tree.dtype)
        if isinstance(tree, dict):
            return {k: shrink(v) for k, v in tree.items()}
        return tree

    with pytest.raises(ConfigError, match="does not fit|model layout"):
        restore_strategy(strategy, shrink(state), tmp_path)


def test_reused_run_name_is_refused_by_the_server(tmp_path: Path) -> None:
    first = run(_fedavg(tmp_path, **{"num-server-rounds": 1, "run-name": "same"}), nodes=2)
    before = (first.parent / "metrics.jsonl").read_bytes()
    grid = LocalGrid(2, _fedavg(tmp_path, **{"num-server-rounds": 1, "run-name": "same",
                                             "seed": 5}))
    with pytest.raises(ConfigError, match="already holds a run"):
        run({}, grid=grid)
    assert grid.sent == [] and (first.parent / "metrics.jsonl").read_bytes() == before


def test_stop_after_a_resume_keeps_the_earlier_rounds_in_the_summary(tmp_path: Path) -> None:
    part = run(_fedavg(tmp_path, **{"num-server-rounds": 2, "run-name": "part"}), nodes=2)
    done = json.loads(part.read_text())
    grid = LocalGrid(2, _fedavg(tmp_path, **{"num-server-rounds": 3, "min-train-nodes": 3,
                                             "sample-deadline": 0.5,
                                             "resume-from": str(part.parent)}))
    with pytest.raises(NotEnoughNodes):
        run({}, grid=grid)
    summary = json.loads(part.read_text())
    assert summary["stopped"]["after_round"] == 2 and summary["rounds"] == 2
    assert summary["final"] == done["final"] and summary["best"] == done["best"]
    assert "accuracy" in summary["final"]


# --------------------------------------------------------------------------- planned rounds
#: Methods whose mechanism is planned for ``num-server-rounds`` (their ``planned_rounds``
#: declaration), with the keys that make it so, and what their nodes answer when a server
#: resumed with more rounds anyway.
PLANNED: dict[str, tuple[dict[str, Any], str]] = {
    "ffa-lora": ({"dp.enabled": True, "dp.target-epsilon": 2.0, "num-server-rounds": 2},
                 "calibrated for num-server-rounds=2"),
    "dp-fedlinucb-ldp": ({"linucb.horizon-rounds": 0, "num-server-rounds": 2},
                         "released for horizon-rounds=2 \\(2 tree levels"),
}


@pytest.mark.parametrize("name", [m for m in PLANNED if m in methods()])
def test_a_resume_that_would_recalibrate_the_noise_is_refused_by_server_and_nodes(
        name: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Extending a finished run whose noise is calibrated for its rounds: refused, naming the key.

    Before the fix the server resumed: FFA-LoRA's nodes recalibrated sigma for 4 rounds and
    every node's budget check then refused rounds 3 and 4 (the target was spent by round 2);
    the LDP silos released round 3 with the 3-level noise (sigma 2.66 instead of 2.17), the
    reported epsilon fell from 1.0 to 0.68 (the ledger assumed the new noise for rounds 1-2
    too), and round 4 failed ("sync 4 needs tree level 2"). A server that skips the check (a
    hostile or misconfigured one) meets the nodes' own refusal, from their saved state.
    """
    over, node_refusal = PLANNED[name]
    part = run(config(name, tmp_path, **over, **{"run-name": "part", "fraction-train": 1.0}),
               nodes=2)
    run_dir = part.parent
    before = {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()}
    longer = config(name, tmp_path, **{**over, "num-server-rounds": 4, "fraction-train": 1.0,
                                       "resume-from": str(run_dir)})
    grid = LocalGrid(2, longer)
    with pytest.raises(ConfigError, match="num-server-rounds=2, which fixes .*"
                                          "num-server-rounds=4 fixes"):
        run({}, grid=grid)
    assert grid.sent == []
    assert {p.name: p.read_bytes() for p in run_dir.iterdir() if p.is_file()} == before

    from bouquet.apps import resume

    monkeypatch.setattr(resume, "plan_change", lambda cfg, run_dir: None)
    rows = lines(run(longer, nodes=2))
    refusals = [f["reason"] for f in rows[2]["failures"] if f["kind"] == "errors"]
    assert rows[2]["errors"] == 2 and all(re.search(node_refusal, r) for r in refusals), refusals


@pytest.mark.parametrize("name, over", [
    ("fedavg", {"local-steps": 1}),
    ("ffa-lora", {"dp.enabled": True, "dp.noise-multiplier": 1.0}),  # no target: no plan
    ("dp-fedlinucb-ldp", {"linucb.horizon-rounds": 0}),  # 2 -> 3 rounds: the same 2 levels
])
def test_extending_a_run_whose_mechanism_stays_the_same_is_allowed(
        name: str, over: dict[str, Any], tmp_path: Path) -> None:
    """A finished run given more rounds continues, and equals the longer uninterrupted run."""
    if name not in methods():
        pytest.skip(f"{name} is not registered")
    full = run(config(name, tmp_path, **over, **{"num-server-rounds": 3, "run-name": "full"}),
               nodes=2)
    part = run(config(name, tmp_path, **over, **{"num-server-rounds": 2, "run-name": "part"}),
               nodes=2)
    resumed = run(config(name, tmp_path, **over, **{"num-server-rounds": 3,
                                                    "resume-from": str(part.parent)}), nodes=2)
    assert lines(resumed) == lines(full)


def test_a_plan_is_declared_by_the_method_not_named_in_resume() -> None:
    """Which methods plan for their rounds is their declaration's business (one place)."""
    from bouquet.apps import bench, resume

    for module in (resume, bench):
        text = Path(module.__file__).read_text()  # type: ignore[arg-type]
        assert not [m for m in methods() if f'"{m}"' in text], module.__name__
    planned = {m for m, rec in methods().items() if rec.planned_rounds}
    assert {"fedit", "ffa-lora", "fed-sb", "fedlinucb", "dp-fedlinucb-ldp"} <= planned
    assert not planned & {"fedavg", "scafcom", "fedkseed"}


def test_a_new_run_under_the_same_name_does_not_inherit_the_calibration(tmp_path: Path) -> None:
    """The accountant is carried to a new run of the same name; the noise it used is not."""
    from bouquet.clients.persistence import ACCOUNTANT_KEY

    def saved(folder: Path) -> Path:
        store = NodeStore(folder, 0, 7, False)
        ctx = _context()
        restore(ctx, store, 1)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord({"history": json.dumps([[1.0, 0.1, 10]])})
        ctx.state["dp.calibration"] = ConfigRecord({"noise-multiplier": 1.0, "rounds": 2})
        persist(ctx, store, 1)
        return folder

    fresh = _context(8)
    restore(fresh, NodeStore(saved(tmp_path / "new"), 0, 8, resumed=False), 1)
    assert ACCOUNTANT_KEY in fresh.state and "dp.calibration" not in fresh.state
    back = _context(8)
    restore(back, NodeStore(saved(tmp_path / "resumed"), 0, 8, resumed=True), 2)
    assert "dp.calibration" in back.state  # a resume restores it, and the node checks it


def test_spent_history_reads_the_longest_saved_accountant_of_a_finished_run(
        tmp_path: Path) -> None:
    """What a finished run's client released is read back from its saved versions (the sweep
    epsilon of the LoRA tuning grid reads it); a corrupt version is refused, not skipped."""
    from bouquet.clients.persistence import ACCOUNTANT_KEY, spent_history

    folder = tmp_path / "partition-0"
    store = NodeStore(folder, 0, 7, False)
    ctx = _context()
    for rnd in (1, 2, 3):
        restore(ctx, store, rnd)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord({"history": json.dumps([[0.7, 0.01, 10 * rnd]])})
        persist(ctx, store, rnd)
    assert spent_history(folder, 0) == [(0.7, 0.01, 30)]
    assert spent_history(tmp_path / "partition-9", 9) == []  # a node that saved nothing
    with pytest.raises(StateRestoreError, match="partition 0"):
        spent_history(folder, 1)  # another partition's folder
    newest = max(folder.glob("*.state"))
    newest.write_bytes(newest.read_bytes()[:-3])
    with pytest.raises(StateRestoreError, match="checksum"):
        spent_history(folder, 0)


def test_a_resume_before_every_saved_round_keeps_the_calibration(tmp_path: Path) -> None:
    """Every saved version is of a round the resumed server never finished: the accountant alone
    used to be carried, so the node's calibration record was lost and the resumed run could
    recalibrate the noise unchecked. Both are carried now (a new run still inherits neither)."""
    from bouquet.clients.persistence import ACCOUNTANT_KEY

    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    for rnd in (2, 3):
        restore(ctx, store, rnd)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord({"history": json.dumps([[1.0, 0.1, 10 * rnd]])})
        ctx.state["dp.calibration"] = ConfigRecord({"noise-multiplier": 1.0, "rounds": 3})
        ctx.state["dp-fedlinucb-ldp.calibration"] = ConfigRecord({"levels": 2, "sigma": 2.5})
        persist(ctx, store, rnd)
    back = _context(8)
    assert restore(back, NodeStore(tmp_path / "p0", 0, 8, resumed=True), 2) is None
    assert ACCOUNTANT_KEY in back.state
    assert dict(back.state["dp.calibration"]) == {"noise-multiplier": 1.0, "rounds": 3}
    assert dict(back.state["dp-fedlinucb-ldp.calibration"]) == {"levels": 2, "sigma": 2.5}
    again = _context(9)  # and it is on the disk under the resumed run
    restore(again, NodeStore(tmp_path / "p0", 0, 8, resumed=True), 2)
    assert "dp.calibration" in again.state


def test_a_silo_first_saved_in_an_unfinished_round_keeps_its_noise_secret(tmp_path: Path) -> None:
    """A LinUCB silo whose every saved version is of a round the resumed server never finished:
    the resume restores no model state. Its noise secret used to be lost with it, so the redone
    round released the same data again with fresh, independent noise, a second release the
    resumed server's ledger never counted. The secret is carried now (a new run draws its own)."""
    from bouquet.clients.linucb import node_secret

    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 2)
    secret = node_secret(ctx)  # drawn at the silo's first release, in round 2
    persist(ctx, store, 2)
    back = _context(8)
    assert restore(back, NodeStore(tmp_path / "p0", 0, 8, resumed=True), 2) is None
    assert node_secret(back) == secret
    fresh = _context(9)
    restore(fresh, NodeStore(tmp_path / "p0", 0, 9, resumed=False), 1)
    assert node_secret(fresh) != secret


# --------------------------------------------------------------------------- lacking nodes
def test_too_few_nodes_stops_with_a_usable_checkpoint(tmp_path: Path) -> None:
    over = {"num-server-rounds": 3, "min-train-nodes": 3, "sample-deadline": 1.0,
            "fraction-train": 1.0, "local-steps": 2}
    full = run(config("fedavg", tmp_path, **over, **{"run-name": "full"}), nodes=3)

    def leave(g: HookedGrid) -> None:
        g.offline.add(1002)

    grid = HookedGrid(3, config("fedavg", tmp_path, **over, **{"run-name": "part"}),
                      hooks={2: leave})
    # The hook fires when round 2's first message is pushed; discovery for round 2 has run by
    # then, so the node is gone from round 3 on.
    with pytest.raises(NotEnoughNodes, match="min-train-nodes is 3"):
        run({}, grid=grid)
    run_dir = tmp_path / "part"
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["stopped"]["after_round"] == 2 and summary["rounds"] == 2
    assert "--resume" in summary["stopped"]["resume"]
    assert load_checkpoint(run_dir / CHECKPOINT_DIR)[0] == 2
    resumed = run(config("fedavg", tmp_path, **over, **{"resume-from": str(run_dir)}), nodes=3)
    assert lines(resumed) == lines(full)


def test_missing_node_is_recorded_and_later_rounds_use_the_others(tmp_path: Path) -> None:
    def vanish(g: HookedGrid) -> None:  # its round-2 reply never comes; then it is gone
        g.drop.add(1)
        g.offline.add(1001)

    grid = HookedGrid(3, config("fedavg", tmp_path, **{"num-server-rounds": 3, "run-name": "x",
                                                       "fraction-train": 1.0, "local-steps": 1,
                                                       "round-timeout": 1.0}),
                      hooks={2: vanish})
    rows = lines(run({}, grid=grid))
    assert [r["missing"] for r in rows] == [0, 1, 0]
    assert rows[1]["failures"] == [{"kind": "missing", "node_id": 1001, "partition_id": 1,
                                    "reason": "no reply before the round timeout"}]
    assert rows[2]["clients"] == 2 and rows[2]["sampled"] == 2
    summary = json.loads((tmp_path / "x" / "summary.json").read_text())
    assert summary["failures"]["missing"] == 1


# --------------------------------------------------------------------------- node restarts
@pytest.mark.skipif("ffa-lora" not in methods(), reason="ffa-lora is not registered")
def test_restarted_dp_node_keeps_its_epsilon_and_a_corrupt_one_refuses(tmp_path: Path) -> None:
    """Before round 3, three SuperNodes restart (empty ``context.state``).

    * node 0 restores its accountant: its epsilon grows from its round-2 value and equals the
      uninterrupted run's;
    * node 1 finds its saved state truncated: it refuses (error reply naming the file);
    * node 2 restarts with node memory off: its accountant starts again from zero, so it reports
      an epsilon below its round-2 value; the server refuses that reply (a node that lost its
      accountant must not under-report) and keeps the last value.
    """
    over = {"num-server-rounds": 3, "fraction-train": 1.0}
    full = run(config("ffa-lora", tmp_path, **over, **{"run-name": "full"}), nodes=3)
    eps_full = load_checkpoint(full.parent / CHECKPOINT_DIR)[1]["epsilon"]
    run_dir = tmp_path / "restarts"
    seen: dict[str, dict[str, float]] = {}
    truncated: list[str] = []

    def restart(g: HookedGrid) -> None:
        seen["round 2"] = load_checkpoint(run_dir / CHECKPOINT_DIR)[1]["epsilon"]
        store = NodeStore(node_folder(run_dir, 1), 1, g.run_id, False)
        blob = store.path(store.complete()[-1])
        blob.write_bytes(blob.read_bytes()[:-20])
        truncated.append(blob.name)
        for pid in (0, 1, 2):
            g.restart(pid)
        g.contexts[1002].node_config["state-dir"] = "off"

    grid = HookedGrid(3, config("ffa-lora", tmp_path, **over, **{"run-name": "restarts"}),
                      hooks={3: restart})
    rows = lines(run({}, grid=grid))
    eps = load_checkpoint(run_dir / CHECKPOINT_DIR)[1]["epsilon"]
    before = seen["round 2"]
    assert eps["0"] > before["0"] > 0
    assert eps["0"] == eps_full["0"]
    errors = [f for f in rows[2]["failures"] if f["kind"] == "errors"]
    assert rows[2]["errors"] == 1 and errors[0]["partition_id"] == 1
    assert truncated[0] in errors[0]["reason"]
    assert eps["1"] == before["1"]  # no reply: the server keeps its last value
    assert rows[2]["rejected"] == 1
    rejected = [f for f in rows[2]["failures"] if f["kind"] == "rejected"]
    assert rejected[0]["partition_id"] == 2 and "epsilon went down" in rejected[0]["reason"]
    assert eps["2"] == before["2"] < eps_full["2"]


# --------------------------------------------------------------------------- the store itself
def _context(run_id: int = 7) -> Context:
    return Context(run_id, 1, {"partition-id": 0, "num-partitions": 1}, RecordDict(), {})


def _set(ctx: Context, value: int) -> None:
    ctx.state["m.counter"] = ConfigRecord({"n": value, "b": b"\x00\xff", "l": [1.5, 2.5]})
    ctx.state["m.arrays"] = ArrayRecord({"w": Array(np.full((2, 3), value, dtype=np.float32))})


def _read(ctx: Context) -> int:
    return int(ctx.state["m.counter"]["n"])  # type: ignore[arg-type]


def test_store_round_trips_every_record_type(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 1)
    _set(ctx, 5)
    assert persist(ctx, store, 1)
    assert not persist(ctx, store, 1)  # unchanged state is not written again
    again = _context()
    assert restore(again, store, 2) == 1
    assert again.state["m.counter"] == ctx.state["m.counter"]
    assert (again.state.array_records["m.arrays"]["w"].numpy() == 5).all()
    assert MARKER in again.state


def test_stateless_nodes_write_nothing(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 1)
    assert not persist(ctx, store, 1)
    assert not (tmp_path / "p0").exists()


def test_unfinished_version_is_ignored_and_corrupt_metadata_refused(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    for rnd in (1, 2, 3):
        restore(ctx, store, rnd)
        _set(ctx, rnd)
        persist(ctx, store, rnd)
    versions = store.complete()
    assert [v.round for v in versions] == [1, 2, 3]
    last = store.path(versions[-1])  # died while writing round 3: never got its final name
    last.rename(last.with_name(f".{last.name}.x7k2"))
    back = _context()
    assert restore(back, store, 4) == 2 and _read(back) == 2
    store.path(versions[1]).write_text("{")
    with pytest.raises(StateRestoreError, match=r"r000002-s000001-run7\.state"):
        restore(_context(), store, 4)


def test_new_run_with_the_same_name_starts_empty(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 1)
    _set(ctx, 9)
    persist(ctx, store, 1)
    later = NodeStore(tmp_path / "p0", 0, 8, resumed=False)
    fresh = _context(8)
    assert restore(fresh, later, 3) is None and "m.counter" not in fresh.state
    assert later.complete() == []


def test_restore_after_resume_skips_orphaned_rounds(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    for rnd in (1, 2, 3):
        restore(ctx, store, rnd)
        _set(ctx, rnd)
        persist(ctx, store, rnd)
    resumed = NodeStore(tmp_path / "p0", 0, 8, resumed=True)
    back = _context(8)
    assert restore(back, resumed, 3) == 2 and _read(back) == 2  # server resumed after round 2
    assert [(v.round, v.run_id) for v in resumed.complete()] == [(2, 8)]


def test_state_folder_copied_to_another_partition_is_refused(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 1)
    _set(ctx, 1)
    persist(ctx, store, 1)
    other = NodeStore(tmp_path / "p0", 3, 7, False)
    with pytest.raises(StateRestoreError, match="partition 0"):
        restore(_context(), other, 2)


def test_message_without_round_neither_restores_nor_saves(tmp_path: Path) -> None:
    from bouquet.apps.client_app import with_node_memory
    from bouquet.apps.config import resolve

    cfg = resolve({"method": "fedavg", "results-dir": str(tmp_path), "run-name": "r"})
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    ctx = _context()
    msg = Message(RecordDict({"config": ConfigRecord({"action": "x"})}), dst_node_id=1,
                  message_type="query")
    out = with_node_memory(msg, ctx, cfg, None, lambda: RecordDict())  # type: ignore[arg-type]
    assert out == RecordDict() and MARKER not in ctx.state


def test_rolling_a_dp_node_back_never_gives_privacy_back(tmp_path: Path) -> None:
    """The orphaned round-3 version answered a message: its accountant history is kept."""
    from bouquet.clients.persistence import ACCOUNTANT_KEY
    from bouquet.privacy.accountant import ClientAccountant

    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    for rnd in (1, 2, 3):
        restore(ctx, store, rnd)
        _set(ctx, rnd)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord(  # entries merge: the steps grow
            {"history": json.dumps([[1.0, 0.1, 10 * rnd]])})
        persist(ctx, store, rnd)
    resumed = NodeStore(tmp_path / "p0", 0, 8, resumed=True)
    back = _context(8)
    assert restore(back, resumed, 3) == 2 and _read(back) == 2  # model state of round 2...
    history = json.loads(str(back.state[ACCOUNTANT_KEY]["history"]))  # type: ignore[index]
    assert history == [[1.0, 0.1, 30]]  # ...but the privacy spent in orphaned round 3 counts
    assert ClientAccountant.epsilon_of([(1.0, 0.1, 30)], 1e-5) > \
        ClientAccountant.epsilon_of([(1.0, 0.1, 20)], 1e-5)


# --------------------------------------------------------------------------- what reaches the disk
def _fsync_calls(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    import bouquet.strategies.checkpoint as checkpoint

    calls: list[int] = []
    real = checkpoint.os.fsync
    monkeypatch.setattr(checkpoint.os, "fsync", lambda fd: (calls.append(fd), real(fd))[1])
    return calls


@pytest.mark.parametrize("fsync", [True, False])
def test_a_version_is_fsynced_only_where_the_store_says(fsync: bool, tmp_path: Path,
                                                       monkeypatch: pytest.MonkeyPatch) -> None:
    """``fsync``: file and folder flushed before ``save`` returns; ``cache``: no fsync at all."""
    calls = _fsync_calls(monkeypatch)
    store = NodeStore(tmp_path / "p0", 0, 7, False, fsync=fsync)
    ctx = _context()
    restore(ctx, store, 1)
    _set(ctx, 1)
    assert persist(ctx, store, 1)
    assert len(calls) == (2 if fsync else 0)
    back = _context()
    assert restore(back, store, 2) == 1 and _read(back) == 1


def test_state_sync_node_config(tmp_path: Path) -> None:
    """Default: fsync on a SuperNode's own ``state-dir``, the page cache in the run folder."""
    from bouquet.apps.client_app import node_store, state_fsync

    assert state_fsync({}) is False
    assert state_fsync({"state-dir": "/var/lib/bouquet"}) is True
    assert state_fsync({"state-dir": "/x", "state-sync": "cache"}) is False
    assert state_fsync({"state-sync": " FSYNC "}) is True
    with pytest.raises(ValueError, match="state-sync='sometimes': use one of fsync, cache"):
        state_fsync({"state-sync": "sometimes"})
    cfg = resolve({"method": "fedavg", "results-dir": str(tmp_path), "run-name": "r"})
    env = type("Env", (), {"partition_id": 0})()
    ctx = _context()
    store = node_store(ctx, cfg, env)  # type: ignore[arg-type]
    assert store is not None and store.fsync is False
    assert store.folder == tmp_path / "r" / "client-state" / "partition-0"
    ctx.node_config["state-dir"] = str(tmp_path / "own")
    store = node_store(ctx, cfg, env)  # type: ignore[arg-type]
    assert store is not None and store.fsync is True


def test_a_version_in_the_page_cache_survives_the_node_being_killed(tmp_path: Path) -> None:
    """``cache`` mode: the node process is SIGKILLed right after the save; nothing is lost."""
    import signal
    import subprocess
    import sys

    script = f"""
import os, signal
from pathlib import Path
from flwr.app import ConfigRecord, Context, RecordDict
from bouquet.clients.persistence import NodeStore, persist, restore
ctx = Context(7, 1, {{"partition-id": 0, "num-partitions": 1}}, RecordDict(), {{}})
store = NodeStore(Path({str(tmp_path / 'p0')!r}), 0, 7, False, fsync=False)
restore(ctx, store, 1)
ctx.state["m.counter"] = ConfigRecord({{"n": 41}})
assert persist(ctx, store, 1)
os.kill(os.getpid(), signal.SIGKILL)
"""
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == -signal.SIGKILL, proc.stderr
    back = _context()
    assert restore(back, NodeStore(tmp_path / "p0", 0, 7, False), 2) == 1
    assert back.state["m.counter"]["n"] == 41


def test_a_flipped_byte_is_refused_and_debris_of_a_dead_write_is_deleted(tmp_path: Path) -> None:
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    ctx = _context()
    restore(ctx, store, 1)
    _set(ctx, 1)
    persist(ctx, store, 1)
    path = store.path(store.complete()[-1])
    debris = path.with_name(f".{path.name}.a1b2")
    debris.write_bytes(b"half")
    _set(ctx, 2)
    persist(ctx, store, 2)
    assert not debris.exists() and len(store.complete()) == 2
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF
    path.write_bytes(bytes(data))
    _set(ctx, 3)
    persist(ctx, store, 3)  # the newest versions are fine...
    store.path(store.complete()[-1]).unlink()
    store.path(store.complete()[-1]).unlink()
    with pytest.raises(StateRestoreError, match="checksum mismatch"):
        restore(_context(), store, 4)  # ...but the only one left is corrupt: refused


def test_a_node_finds_its_folder_from_the_marker_after_its_first_message(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Resolving the state folder is done once per node and run, not once per message."""
    from types import SimpleNamespace

    from bouquet.apps.client_app import node_store

    cfg = resolve({"method": "fedavg", "results-dir": str(tmp_path), "run-name": "r"})
    env: Any = SimpleNamespace(partition_id=0)  # node_store reads only the partition
    ctx = _context()
    first = node_store(ctx, cfg, env)
    assert first is not None
    restore(ctx, first, 1)
    _set(ctx, 1)
    persist(ctx, first, 1)
    calls = []
    real = Path.resolve
    monkeypatch.setattr(Path, "resolve", lambda self, *a, **k: calls.append(self) or real(self))
    again = node_store(ctx, cfg, env)
    assert again is not None and again.folder == first.folder and calls == []
    assert node_store(_context(), cfg, env).folder == first.folder and calls  # a new node
    calls.clear()
    next_run = Context(8, 1, {"partition-id": 0, "num-partitions": 1}, ctx.state, {})
    node_store(next_run, cfg, env)  # Flower carried the state into another run of a series
    assert calls
    # the marker never reaches the saved bytes, and keeps one record updated in place
    marker = ctx.state[MARKER]
    _set(ctx, 2)
    persist(ctx, again, 2)
    assert ctx.state[MARKER] is marker and _read(_restored(again, 3)) == 2
    assert b"partition-0" not in again.path(again.complete()[-1]).read_bytes()


def _restored(store: NodeStore, rnd: int) -> Context:
    ctx = _context()
    restore(ctx, store, rnd)
    return ctx


def test_a_version_folder_of_an_earlier_release_is_still_restored(tmp_path: Path) -> None:
    """Before single-file versions, a version was a checkpoint folder (state.npz + meta.json)."""
    from bouquet.clients.persistence import encode_state

    ctx = _context()
    _set(ctx, 6)
    save_checkpoint(tmp_path / "p0" / "r000002-s000004-run7", 2,
                    {"context-state": np.frombuffer(encode_state(ctx.state), dtype=np.uint8)},
                    extra={"partition-id": 0, "run-id": 7})
    store = NodeStore(tmp_path / "p0", 0, 7, False)
    back = _context()
    assert restore(back, store, 3) == 2 and _read(back) == 6
    _set(back, 7)
    assert persist(back, store, 3)
    assert [(v.round, v.seq, v.legacy) for v in store.complete()] == [(2, 4, True),
                                                                       (3, 5, False)]


def test_the_server_syncs_node_state_before_each_checkpoint(tmp_path: Path,
                                                             monkeypatch: pytest.MonkeyPatch
                                                             ) -> None:
    """Simulated nodes write into the page cache; round r's checkpoint waits for their disk.

    One file-system sync a round makes their versions, the checkpoint's state file and the new
    ``meta.json`` (under its temporary name) durable together, before that ``meta.json`` is
    renamed into place and makes the checkpoint current; where that sync is reliable (Linux
    ``syncfs``) neither file gets an ``fsync`` of its own (issue 17, target 5).
    """
    import bouquet.strategies.checkpoint as checkpoint

    events: list[str] = []
    sync, write = checkpoint.sync_filesystem, checkpoint.atomic_write
    stage, publish = checkpoint.staged_write, checkpoint.publish

    def logged_sync(folder: Path) -> None:
        events.append(f"sync {folder.name}")
        sync(folder)

    def logged_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
        events.append(f"write {path.name.split('-')[0]} fsync={fsync}")
        write(path, data, fsync=fsync)

    def logged_stage(path: Path, data: bytes, *, fsync: bool) -> Path:
        if path.name == "meta.json":  # (atomic_write stages every other file too)
            events.append(f"stage {path.name} fsync={fsync}")
        return stage(path, data, fsync=fsync)

    def logged_publish(tmp: Path, path: Path) -> None:
        if path.name == "meta.json":
            events.append(f"publish {path.name}")
        publish(tmp, path)

    monkeypatch.setattr(checkpoint, "sync_filesystem", logged_sync)
    monkeypatch.setattr(checkpoint, "atomic_write", logged_write)
    monkeypatch.setattr(checkpoint, "staged_write", logged_stage)
    monkeypatch.setattr(checkpoint, "publish", logged_publish)
    name = "dp-fedlinucb-ldp" if "dp-fedlinucb-ldp" in methods() else "scafcom"
    run(config(name, tmp_path, **{"num-server-rounds": 2, "run-name": "x",
                                  "fraction-train": 1.0}), nodes=2)
    own_fsync = not checkpoint.syncs_reliably()
    assert events == [f"write state fsync={own_fsync}", f"stage meta.json fsync={own_fsync}",
                      "sync client-state", "publish meta.json"] * 2
    # the run's end settles the last checkpoint: one state file, the one meta.json names
    assert len(list((tmp_path / "x" / "checkpoint").glob("state*.npz"))) == 1


def test_one_sync_flushes_node_state_and_the_checkpoint_state_file(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The state file and ``meta.json`` skip their ``fsync`` only where one reliable sync
    covers them.

    Without a folder to make durable first, or with an unreliable sync (``sync`` off Linux),
    both keep their own ``fsync``, and so does a state file that replaces the one ``meta.json``
    names (an unchanged state); a node-state folder on another file system gets a sync of its
    own.
    """
    import bouquet.strategies.checkpoint as checkpoint

    synced: list[str] = []
    monkeypatch.setattr(checkpoint, "sync_filesystem", lambda p: synced.append(p.name))
    monkeypatch.setattr(checkpoint, "syncs_reliably", lambda: True)
    flushed: list[str] = []
    real_fsync = os.fsync

    def logged_fsync(fd: int) -> None:
        target = Path(os.readlink(f"/proc/self/fd/{fd}"))
        flushed.append("folder" if target.is_dir() else target.name.split(".")[1])
        real_fsync(fd)

    if not Path("/proc/self/fd").is_dir():
        pytest.skip("needs /proc to name the flushed files")
    monkeypatch.setattr(checkpoint.os, "fsync", logged_fsync)
    nodes = tmp_path / "nodes"
    nodes.mkdir()

    def save(rnd: int, value: float) -> tuple[list[str], list[str]]:
        synced.clear()
        flushed.clear()
        checkpoint.save_checkpoint(tmp_path / "ck", rnd, {"w": np.full(3, value)},
                                   durable_first=nodes if rnd > 1 else None)
        assert checkpoint.load_checkpoint(tmp_path / "ck")[0] == rnd
        return list(synced), [f.split("-")[0] for f in flushed]

    # temporary names: ".state-<h>.npz.<random>" -> "state", ".meta.json.<random>" -> "meta"
    # without one sync, the folder too: the rename on the disk before the old state goes
    assert save(1, 1.0) == ([], ["state", "meta", "folder"])  # no node state: fsync both
    assert save(2, 2.0) == (["nodes"], [])  # one sync covers nodes, state file and meta.json
    assert save(3, 2.0) == (["nodes"], ["state"])  # replaces the file meta.json names
    monkeypatch.setattr(checkpoint, "same_file_system", lambda a, b: False)
    assert save(4, 4.0) == (["nodes", "ck"], [])  # each file system synced
    monkeypatch.setattr(checkpoint, "syncs_reliably", lambda: False)
    assert save(5, 5.0) == (["nodes", "ck"], ["state", "meta", "folder"])  # plain sync


def test_the_state_file_a_not_yet_durable_meta_json_replaced_is_kept(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """With one sync a round, ``meta.json``'s rename reaches the disk only at the next sync.

    A power cut before it may bring back the previous ``meta.json``: the state file that one
    names must still be there. It is kept until the next round's sync (which makes the newer
    rename durable), and older state files go (issue 17, target 5).
    """
    import bouquet.strategies.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "syncs_reliably", lambda: True)
    folder, nodes = tmp_path / "ck", tmp_path / "nodes"
    nodes.mkdir()
    metas: list[bytes] = []
    for rnd in range(1, 5):
        save_checkpoint(folder, rnd, {"w": np.full(3, float(rnd))}, durable_first=nodes)
        metas.append((folder / "meta.json").read_bytes())
    named = [json.loads(m)["state_file"] for m in metas]
    assert sorted(p.name for p in folder.glob("state*.npz")) == sorted(named[-2:])
    (folder / "meta.json").write_bytes(metas[-2])  # the rename of round 4 lost: round 3 back
    rnd, state, _ = load_checkpoint(folder)
    assert rnd == 3 and np.array_equal(state["w"], np.full(3, 3.0))
    (folder / "meta.json").write_bytes(metas[-1])
    checkpoint.settle_checkpoint(folder)  # the end of the run: only what meta.json names
    assert [p.name for p in folder.glob("state*.npz")] == named[-1:]
    assert load_checkpoint(folder)[0] == 4


def test_a_state_file_of_an_earlier_release_is_kept_as_the_previous_one(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """A resumed checkpoint of an earlier release (``state.npz``, no name in ``meta.json``)
    is the previous checkpoint of the first new round: it stays until the next round's sync."""
    import bouquet.strategies.checkpoint as checkpoint

    monkeypatch.setattr(checkpoint, "syncs_reliably", lambda: True)
    folder, nodes = tmp_path / "ck", tmp_path / "nodes"
    nodes.mkdir()
    save_checkpoint(folder, 1, {"w": np.ones(2)})
    (state_file,) = folder.glob("state-*.npz")
    state_file.rename(folder / "state.npz")
    meta = json.loads((folder / "meta.json").read_text())
    del meta["state_file"]
    old_meta = json.dumps(meta).encode()
    (folder / "meta.json").write_bytes(old_meta)
    save_checkpoint(folder, 2, {"w": np.zeros(2)}, durable_first=nodes)
    assert (folder / "state.npz").exists()
    (folder / "meta.json").write_bytes(old_meta)  # round 2's rename lost
    assert load_checkpoint(folder)[0] == 1


def test_a_checkpoint_removes_the_temporary_files_of_a_killed_writer(tmp_path: Path) -> None:
    """A ServerApp killed mid-write leaves ``.state-<h>.npz.<random>``; the next save removes it."""
    folder = tmp_path / "ck"
    save_checkpoint(folder, 1, {"w": np.ones(2)})
    debris = [folder / ".state-0123456789abcdef.npz.k2j_x9", folder / ".meta.json.a1b2c3d4"]
    for path in debris:
        path.write_bytes(b"half")
    keep = folder / ".hidden-by-someone-else"
    keep.write_bytes(b"x")
    save_checkpoint(folder, 2, {"w": np.zeros(2)})
    assert not any(p.exists() for p in debris) and keep.exists()
    assert load_checkpoint(folder)[0] == 2


def test_a_failed_file_system_sync_raises(tmp_path: Path,
                                          monkeypatch: pytest.MonkeyPatch) -> None:
    """A write-back error reported by ``syncfs`` stops the checkpoint (no silent ``sync``)."""
    import ctypes
    import errno

    import bouquet.strategies.checkpoint as checkpoint

    class FailingLibc:
        def syncfs(self, fd: int) -> int:
            return -1

    plain_syncs: list[int] = []
    monkeypatch.setattr(checkpoint, "_libc", FailingLibc)
    monkeypatch.setattr(checkpoint.os, "sync", lambda: plain_syncs.append(1))
    monkeypatch.setattr(ctypes, "get_errno", lambda: errno.EIO)
    with pytest.raises(OSError, match="syncfs failed"):
        checkpoint.sync_filesystem(tmp_path)
    with pytest.raises(OSError):
        checkpoint.save_checkpoint(tmp_path / "ck", 1, {"w": np.ones(2)},
                                   durable_first=tmp_path)
    assert not (tmp_path / "ck" / "meta.json").exists()  # the checkpoint did not advance
    assert not list((tmp_path / "ck").glob(".meta.json.*"))  # nor left its temporary file
    monkeypatch.setattr(ctypes, "get_errno", lambda: errno.ENOSYS)
    checkpoint.sync_filesystem(tmp_path)  # no syncfs in this kernel: falls back to sync
    assert plain_syncs == [1]
    monkeypatch.setattr(checkpoint, "_libc", lambda: None)
    monkeypatch.delattr(checkpoint.os, "sync")
    checkpoint.sync_filesystem(tmp_path / "not-even-there")  # Windows: neither, and no error


def test_the_oldest_version_is_recycled_for_the_next(tmp_path: Path) -> None:
    """Past three versions, a save overwrites the oldest file (no file created, none deleted)."""
    store = NodeStore(tmp_path / "p0", 0, 7, False, fsync=False)
    ctx = _context()
    restore(ctx, store, 1)
    inodes = []
    for rnd in range(1, 6):
        _set(ctx, rnd)
        persist(ctx, store, rnd)
        inodes.append(store.path(store.complete()[-1]).stat().st_ino)
    assert [v.round for v in store.complete()] == [3, 4, 5]
    assert inodes[3:] == inodes[:2]  # rounds 4 and 5 live in the files of rounds 1 and 2
    assert sorted(p.name for p in (tmp_path / "p0").iterdir()) == \
        [store.path(v).name for v in store.complete()]
    for v in store.complete():
        assert int(store.load(v)["m.counter"]["n"]) == v.round  # type: ignore[arg-type]


def test_a_node_saving_twice_a_round_keeps_three_rounds(tmp_path: Path) -> None:
    """Two versions a round (a node whose state changes in training and in evaluation): the
    folder keeps each of the three newest rounds' newest version, so that a server resuming
    from an earlier round still finds the node's state of that round."""
    store = NodeStore(tmp_path / "p0", 0, 7, False, fsync=False)
    ctx = _context()
    restore(ctx, store, 1)
    for rnd in range(1, 5):
        for step in (0, 1):  # training, then evaluation, each changing the state
            _set(ctx, 10 * rnd + step)
            persist(ctx, store, rnd)
    assert [v.round for v in store.complete()] == [2, 3, 4, 4]
    back = _context(run_id=8)
    assert restore(back, NodeStore(tmp_path / "p0", 0, 8, True, fsync=False), 3) == 2
    assert _read(back) == 21  # round 2's newest version (a count of three would keep none)


def test_a_version_of_another_run_is_never_recycled(tmp_path: Path,
                                                      monkeypatch: pytest.MonkeyPatch) -> None:
    """Adopting an older attempt's version (a resume) must not rename the oldest file away
    before the new one exists: that file may be the very version being adopted."""
    from bouquet.clients import persistence

    old_run = NodeStore(tmp_path / "p0", 0, 7, False, fsync=False)
    for rnd in (1, 2, 3):
        old_run.save(rnd, f"state {rnd}".encode())
    rewrites: list[Path] = []
    real = persistence.atomic_rewrite
    monkeypatch.setattr(persistence, "atomic_rewrite",
                        lambda spare, *a, **k: (rewrites.append(spare), real(spare, *a, **k)))
    resumed = NodeStore(tmp_path / "p0", 0, 8, False, fsync=False)
    resumed.save(1, b"state 1")  # the resumed run adopts round 1 of run 7
    assert rewrites == []
    same = NodeStore(tmp_path / "p1", 0, 9, False, fsync=False)
    for rnd in (1, 2, 3, 4):
        same.save(rnd, f"state {rnd}".encode())
    assert len(rewrites) == 1  # the hot path still recycles


class _Crash(BaseException):
    """The node process dies here (nothing after this line of the node runs)."""


def _dp_history(ctx: Context) -> list[list[float]]:
    from bouquet.clients.persistence import ACCOUNTANT_KEY

    if ACCOUNTANT_KEY not in ctx.state:
        return []
    return json.loads(str(ctx.state[ACCOUNTANT_KEY]["history"]))  # type: ignore[index]


@pytest.mark.parametrize("answered", [(3,), (1, 3)], ids=["only-orphaned", "older-and-orphaned"])
def test_a_node_dying_in_the_first_round_after_a_resume_keeps_its_accountant(
        answered: tuple[int, ...], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Crash the node at every file-system step of its first restore after a resume, and once
    restore has returned (in the round's local training, before the reply's save): whatever
    point it dies at, the node restarted in the same run restores the whole privacy spent.

    Before the fix, a node whose every version was of a round the resumed server had not
    finished (here round 3, the server resumes at round 3) adopted only the accountant in
    memory and deleted the version holding it: dying before its next save lost its epsilon.
    """
    from bouquet.clients import persistence
    from bouquet.clients.persistence import ACCOUNTANT_KEY

    old = NodeStore(tmp_path / "p0", 0, 7, False, fsync=False)
    ctx = _context()
    for rnd in answered:  # run 7 (crashed after round 2's checkpoint) asked this node these
        restore(ctx, old, rnd)
        _set(ctx, rnd)
        ctx.state[ACCOUNTANT_KEY] = ConfigRecord({"history": json.dumps([[1.0, 0.1, 10 * rnd]])})
        persist(ctx, old, rnd)
    spent = [[1.0, 0.1, 30]]
    folder = tmp_path / "p0"
    pristine = {p.name: p.read_bytes() for p in folder.iterdir()}
    steps = 0
    budget = [0]

    def crash_after(fn: Callable[..., Any]) -> Callable[..., Any]:
        def wrapped(*a: Any, **k: Any) -> Any:
            nonlocal steps
            steps += 1
            if steps > budget[0]:
                raise _Crash
            return fn(*a, **k)
        return wrapped

    for name in ("atomic_write", "atomic_rewrite"):
        monkeypatch.setattr(persistence, name, crash_after(getattr(persistence, name)))
    monkeypatch.setattr(Path, "unlink", crash_after(Path.unlink))
    monkeypatch.setattr(persistence.shutil, "rmtree", crash_after(shutil.rmtree))
    budget[0] = 10**6
    restore(_context(8), NodeStore(folder, 0, 8, resumed=True, fsync=False), 3)
    total, steps = steps, 0
    for crash_at in range(total + 1):  # total: restore returned; dies in local training
        for p in folder.iterdir():
            p.unlink() if p.is_file() else shutil.rmtree(p)
        for n, data in pristine.items():
            (folder / n).write_bytes(data)
        budget[0], steps = crash_at, 0
        first = _context(8)
        try:
            restore(first, NodeStore(folder, 0, 8, resumed=True, fsync=False), 3)
        except _Crash:
            pass
        else:
            assert _dp_history(first) == spent
        budget[0] = 10**6
        again = _context(8)  # the SuperNode restarted: same run, empty context, round 3 again
        restore(again, NodeStore(folder, 0, 8, resumed=True, fsync=False), 3)
        assert _dp_history(again) == spent, f"accountant lost when dying at step {crash_at}"
