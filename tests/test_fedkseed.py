"""FedKSeed / FedKSeed-Pro: protocol, bytes, Pro's probabilities and replay exactness."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from bouquet.apps.config import ConfigError, resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, evaluation_mode, execute, load_server_task
from bouquet.clients import fedkseed as client
from bouquet.clients import zeroth_order as zo
from bouquet.clients.base import ClientEnv
from bouquet.strategies import fedkseed as fk
from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.base import NodeReply
from bouquet.tasks.classification import get_arrays
from bouquet.wire import fedkseed as wk


def config(tmp_path: Path, method: str = "fedkseed", **over: Any) -> dict[str, Any]:
    cfg: dict[str, Any] = {
        "method": method, "task": "digits-mlp", "results-dir": str(tmp_path), "run-name": "r",
        "seed": 1, "batch-size": 32, "fedkseed.num-seeds": 32, "fedkseed.local-steps": 12,
        "fedkseed.lr": 2e-2, "fedkseed.eps": 1e-3, "round-timeout": 60.0,
    }
    cfg.update(over)
    return cfg


def setup(tmp_path: Path, nodes: int, method: str = "fedkseed", **over: Any
          ) -> tuple[LocalGrid, fk.FedKSeed]:
    client.clear_cache()
    grid = LocalGrid(nodes, config(tmp_path, method, **over))
    strategy = build_strategy(resolve(grid.run_config), None)
    assert isinstance(strategy, fk.FedKSeed)
    return grid, strategy


def flat(arrays: dict[str, np.ndarray]) -> np.ndarray:
    return np.concatenate([a.reshape(-1) for a in arrays.values()])


def env_for(grid: LocalGrid) -> ClientEnv:
    cfg = resolve(grid.run_config)
    task = load_server_task(cfg)
    return ClientEnv(cfg.common, cfg.sections, task, 0, len(grid.contexts))


# ---------------------------------------------------------------------------- seeds and setup
def test_candidate_seeds_are_shared_and_distinct() -> None:
    a, b = wk.candidate_seeds(42, 4096), wk.candidate_seeds(42, 4096)
    assert np.array_equal(a, b) and a.dtype == np.int64
    assert len(np.unique(a)) == 4096 and a.min() > 0
    assert not np.array_equal(a, wk.candidate_seeds(43, 4096))


def test_server_holds_no_model_and_evaluates_on_nodes(tmp_path: Path) -> None:
    cfg = resolve(config(tmp_path))
    assert evaluation_mode(cfg, load_server_task(cfg)) == "federated"
    with pytest.raises(ConfigError, match="keeps no model"):
        evaluation_mode(resolve(config(tmp_path, evaluation="central")),
                        load_server_task(cfg))
    _, strategy = setup(tmp_path, 2)
    assert strategy.global_arrays() is None
    state = strategy.state_dict()
    assert state["accumulator"].shape == (32,)
    assert all(not isinstance(v, dict) or k in ("partitions", "sizes", "claims", "norm_history")
               for k, v in state.items())


def test_a_checkpoint_from_another_direction_generator_is_not_resumed(tmp_path: Path) -> None:
    """The same seeds give other directions under another generator: A would mean nothing."""
    _, strategy = setup(tmp_path, 2)
    state = strategy.state_dict()
    assert state["direction_generator"] == wk.DIRECTION_GENERATOR
    strategy.load_state_dict(state)  # its own checkpoint resumes
    old = {k: v for k, v in state.items() if k != "direction_generator"}  # before issue 17
    with pytest.raises(ValueError, match="mt19937"):
        strategy.load_state_dict(old)
    with pytest.raises(ValueError, match="start a new run"):
        strategy.load_state_dict({**state, "direction_generator": "another"})


# ---------------------------------------------------------------------------- codec
def test_pairs_codec_round_trips_little_endian() -> None:
    idx = np.array([0, 5, 4095, 5], dtype=np.int64)
    grad = np.array([0.5, -1.25, 3e-8, 0.0], dtype=np.float64)
    data = wk.pack_pairs(idx, grad)
    assert data[:8] == (0).to_bytes(4, "little") + np.float32(0.5).astype("<f4").tobytes()
    got_idx, got_grad = wk.unpack_pairs(data, 4096, 4)
    np.testing.assert_array_equal(got_idx, idx)
    np.testing.assert_array_equal(got_grad, grad.astype(np.float32))
    assert wk.unpack_pairs(b"", 4096, 4)[0].shape == (0,)
    with pytest.raises(ValueError, match="gradients"):
        wk.pack_pairs(idx, grad[:-1])


@pytest.mark.parametrize(("label", "data", "match"), [
    ("truncated", wk.pack_pairs(np.arange(3), np.ones(3))[:-1], "multiple of 8"),
    ("half pair", wk.pack_pairs(np.arange(3), np.ones(3)) + b"\0" * 4, "multiple of 8"),
    ("too many", wk.pack_pairs(np.arange(5), np.ones(5)), "more than the 4"),
    ("negative", wk.pack_pairs(np.array([1, -1]), np.ones(2)), "outside"),
    ("out of range", wk.pack_pairs(np.array([16]), np.ones(1)), "outside"),
    ("nan", wk.pack_pairs(np.arange(2), np.array([1.0, np.nan])), "non-finite"),
    ("inf", wk.pack_pairs(np.arange(2), np.array([-np.inf, 1.0])), "non-finite"),
    ("list", [1, 2, 3, 4, 5, 6, 7, 8], "expected bytes"),
    ("str", "00" * 8, "expected bytes"),
])
def test_unpack_pairs_rejects(label: str, data: object, match: str) -> None:
    with pytest.raises(wk.v.InvalidReply, match=match):
        wk.unpack_pairs(data, 16, 4)


def test_read_down_is_strict() -> None:
    good = wk.down_record(np.arange(8.0), None)
    acc, p = wk.read_down(RecordDict({wk.DOWN_RECORD: good}), 8)
    np.testing.assert_array_equal(acc, np.arange(8.0))
    assert p is None
    bad = {
        "wrong length": ConfigRecord({wk.ACCUMULATOR: wk.pack_floats(np.zeros(7))}),
        "one byte more": ConfigRecord({wk.ACCUMULATOR: wk.pack_floats(np.zeros(8)) + b"\0"}),
        "nan": ConfigRecord({wk.ACCUMULATOR: wk.pack_floats(np.full(8, np.nan))}),
        "wrong type": ConfigRecord({wk.ACCUMULATOR: [0.0] * 8}),
        "missing field": ConfigRecord({wk.PROBABILITIES: wk.pack_floats(np.ones(8))}),
        "extra field": ConfigRecord({wk.ACCUMULATOR: wk.pack_floats(np.zeros(8)), "x": 1}),
        "negative probability": wk.down_record(np.zeros(8), -np.ones(8)),
        "short probabilities": ConfigRecord({wk.ACCUMULATOR: wk.pack_floats(np.zeros(8)),
                                             wk.PROBABILITIES: wk.pack_floats(np.ones(4))}),
    }
    for label, rec in bad.items():
        with pytest.raises(ValueError):
            wk.read_down(RecordDict({wk.DOWN_RECORD: rec}), 8)
            pytest.fail(label)
    with pytest.raises(ValueError, match="missing config record"):
        wk.read_down(RecordDict({wk.DOWN_RECORD: MetricRecord({"x": 1.0})}), 8)


def test_client_rejects_a_downlink_of_the_wrong_length(tmp_path: Path) -> None:
    grid, strategy = setup(tmp_path, 2)
    short = wk.down_record(np.zeros(31), None)  # the run has K=32
    orig = strategy.configure_round

    def configure(rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        out = orig(rnd, partitions)
        out[1][wk.DOWN_RECORD] = short
        return out

    strategy.configure_round = configure  # type: ignore[method-assign]
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 1 and rlog.errors == 1
    assert np.count_nonzero(strategy.accumulator) > 0


@pytest.mark.parametrize("method", ["fedkseed", "fedkseed-pro"])
def test_all_replies_malformed_keeps_the_state(tmp_path: Path, method: str) -> None:
    """Every packed-format bad reply is rejected with its reason; the state does not move."""
    grid, strategy = setup(tmp_path, 2, method)
    captured: dict[str, RecordDict] = {}

    def capture(content: RecordDict) -> RecordDict:
        captured["reply"] = content
        return content

    grid.corrupt[0] = capture
    strategy.train_round(grid, 1)
    cases = fk.bad_replies(captured["reply"])
    assert len(cases) >= 10
    for rnd, (label, bad) in enumerate(cases, start=2):
        before = strategy.state_dict()
        def replace(_content: RecordDict, bad: RecordDict = bad) -> RecordDict:
            return bad

        for pid in (0, 1):
            grid.corrupt[pid] = replace
        rlog = strategy.train_round(grid, rnd)
        assert rlog.clients == 0 and rlog.rejected == 2, label
        for name in ("accumulator", "abs_sum", "count"):
            if name in before:
                np.testing.assert_array_equal(before[name], strategy.state_dict()[name])


# ---------------------------------------------------------------------------- bytes
def one_round(tmp_path: Path, method: str, k: int, steps: int
              ) -> tuple[RecordDict, RecordDict, int, int]:
    grid, strategy = setup(tmp_path / f"{method}-{k}-{steps}", 2, method,
                           **{"fedkseed.num-seeds": k, "fedkseed.local-steps": steps})
    seen: dict[int, RecordDict] = {}
    for pid in (0, 1):
        def capture(content: RecordDict, pid: int = pid) -> RecordDict:
            seen[pid] = content
            return content
        grid.corrupt[pid] = capture
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 2 and rlog.failures == []
    downs = [m.content for m in grid.sent if m.metadata.message_type == "train"]
    # what the round log measured is Flower's serialized size of exactly these messages
    assert rlog.up_bytes == sum(content_bytes(c) for c in seen.values())
    assert rlog.down_bytes == sum(content_bytes(c) for c in downs)
    return downs[0], seen[0], rlog.up_bytes, rlog.down_bytes


def payload(content: RecordDict, record: str) -> dict[str, bytes]:
    rec = content[record]
    assert isinstance(rec, ConfigRecord)
    out = {}
    for name in rec.keys():
        value = rec[name]
        assert isinstance(value, bytes)
        out[name] = value
    return out


@pytest.mark.parametrize("method", ["fedkseed", "fedkseed-pro"])
@pytest.mark.parametrize(("k", "steps"), [(256, 20), (4096, 200)])
def test_exact_payload_and_measured_bytes(tmp_path: Path, method: str, k: int, steps: int
                                          ) -> None:
    down, up, up_bytes, down_bytes = one_round(tmp_path, method, k, steps)
    # uplink: exactly `steps` packed (int32 LE, float32 LE) pairs and one metrics record
    assert set(up.keys()) == {wk.PAIRS_RECORD, "metrics"}
    pairs = payload(up, wk.PAIRS_RECORD)
    assert list(pairs) == [wk.PAIRS] and len(pairs[wk.PAIRS]) == 8 * steps
    idx, grad = wk.unpack_pairs(pairs[wk.PAIRS], k, steps)
    assert idx.dtype == np.int32 and grad.dtype == np.float32 and idx.shape == (steps,)
    raw = np.frombuffer(pairs[wk.PAIRS], dtype=np.uint8).reshape(steps, 8)
    np.testing.assert_array_equal(raw[:, :4].copy().view("<i4").reshape(-1), idx)
    np.testing.assert_array_equal(raw[:, 4:].copy().view("<f4").reshape(-1), grad)
    # downlink: K float32 (+K for Pro) and the round config, nothing model-sized
    assert set(down.keys()) == {wk.DOWN_RECORD, "config"}
    floats = payload(down, wk.DOWN_RECORD)
    expected = [wk.ACCUMULATOR] + ([wk.PROBABILITIES] if method == "fedkseed-pro" else [])
    assert sorted(floats) == sorted(expected)
    assert all(len(b) == 4 * k for b in floats.values())
    acc, p = wk.read_down(down, k)
    assert acc.shape == (k,) and (p is None) == (method == "fedkseed")
    # framing (record and field names, length prefixes, metrics, config) is small
    pay_up, pay_down = 8 * steps, 4 * k * len(expected)
    assert 0 < content_bytes(up) - pay_up < 100
    assert 0 < content_bytes(down) - pay_down < 160
    assert down_bytes == 2 * content_bytes(down)
    if (k, steps) == (4096, 200) and method == "fedkseed":
        # the paper's setting: per-client traffic of a real round, measured, under 18 KiB
        per_client = (up_bytes + down_bytes) / 2
        assert per_client < 18_432, per_client


@pytest.mark.parametrize("method", ["fedkseed", "fedkseed-pro"])
def test_bytes_grow_by_the_payload_only(tmp_path: Path, method: str) -> None:
    """Framing is constant: more seeds cost 4 B each (8 B for Pro), more steps 8 B each.

    (Up to the protobuf length prefixes, which grow by a byte when a length crosses 2**7k.)
    """
    floats_down = 2 if method == "fedkseed-pro" else 1
    d1, u1, _, _ = one_round(tmp_path, method, 256, 20)
    d2, u2, _, _ = one_round(tmp_path, method, 1024, 60)
    assert content_bytes(d2) - content_bytes(d1) == 4 * floats_down * (1024 - 256)
    assert content_bytes(u2) - content_bytes(u1) == 8 * (60 - 20)


# ---------------------------------------------------------------------------- Pro
def test_pro_probabilities_follow_the_reference_formula_on_a_planted_history(
    tmp_path: Path,
) -> None:
    _, strategy = setup(tmp_path, 2, "fedkseed-pro", **{"fedkseed.num-seeds": 6,
                                                         "fedkseed.pro-clip": 5.0})
    planted = [  # (seed index, scalar gradient) pairs of two clients, two rounds
        [(0, 1.0), (0, -3.0), (2, 0.5), (5, 40.0)],
        [(2, -0.5), (3, 2.0), (0, 2.0)],
        [(3, -1.0), (5, -1.0)],
        [(1, 0.25)],
    ]

    def reply(pid: int, pairs: list[tuple[int, float]]) -> NodeReply:
        idx = np.array([i for i, _ in pairs], dtype=np.int32)
        g = np.array([x for _, x in pairs], dtype=np.float32)
        content = RecordDict({wk.PAIRS_RECORD: wk.pairs_record(idx, g),
                              "metrics": MetricRecord({"num-examples": 10})})
        strategy.validate_reply(1, pid, content)
        return NodeReply(pid, pid, content, 0, 0)

    strategy.aggregate_round(1, [reply(0, planted[0]), reply(1, planted[1])])
    strategy.aggregate_round(2, [reply(0, planted[2]), reply(1, planted[3])])

    # the reference, written out from the paper's code: history starts at [0.0]
    history: dict[int, list[float]] = {k: [0.0] for k in range(6)}
    for pairs in planted:
        for i, g in pairs:
            history[i].append(g)
    psi = np.array([np.mean([abs(min(max(g, -5.0), 5.0)) for g in history[k]])
                    for k in range(6)])
    norm = (psi - psi.min()) / (psi.max() - psi.min() + 1e-10)
    expected = np.exp(norm) / np.exp(norm).sum()
    p = strategy.probabilities()
    np.testing.assert_allclose(p, expected, rtol=1e-12)
    assert p.sum() == pytest.approx(1.0)
    assert p.max() / p.min() <= np.e + 1e-9  # a gentle bias
    assert np.argmax(p) == 5 and np.argmin(p) == 4  # clipped 40 dominates; 4 never sampled
    _, sent = wk.read_down(strategy.configure_round(3, [0])[0], 6)
    assert sent is not None
    np.testing.assert_allclose(sent, p, rtol=1e-6)


def test_pro_clients_sample_with_the_probabilities(tmp_path: Path) -> None:
    grid, strategy = setup(tmp_path, 1, "fedkseed-pro")
    strategy.abs_sum[7] = 1e6  # seed 7 is e times likelier than each of the other 31
    strategy.count[:] = 1.0
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 1
    p = strategy.probabilities()
    assert p[7] == pytest.approx(np.e / (np.e + 31))
    cfg = resolve(grid.run_config).sections["fedkseed"]
    down = wk.read_down(grid.sent[-1].content, cfg.num_seeds)
    picks = client.seed_choices(down, cfg, np.random.default_rng(0))
    many = np.concatenate([client.seed_choices(down, cfg, np.random.default_rng(s))
                           for s in range(400)])
    assert picks.shape == (12,)
    assert np.mean(many == 7) == pytest.approx(p[7], abs=0.02)


# ---------------------------------------------------------------------------- replay exactness
def trained_models(tmp_path: Path, rounds: int, nodes: int) -> tuple[
        LocalGrid, fk.FedKSeed, list[dict[int, np.ndarray]]]:
    """Run rounds; capture each client's model right after its local steps."""
    grid, strategy = setup(tmp_path, nodes)
    captured: list[dict[int, np.ndarray]] = []
    for rnd in range(1, rounds + 1):
        models: dict[int, np.ndarray] = {}
        for pid in range(nodes):
            def capture(content: RecordDict, pid: int = pid,
                        models: dict[int, np.ndarray] = models) -> RecordDict:
                rep = client.cached_replica()
                assert rep is not None
                models[pid] = flat(get_arrays(rep.model))
                return content
            grid.corrupt[pid] = capture
        rlog = strategy.train_round(grid, rnd)
        assert rlog.clients == nodes
        captured.append(models)
    return grid, strategy, captured


def rebuild(env: ClientEnv, accumulator: np.ndarray) -> np.ndarray:
    """A cold client: w0, then every seed of ``A`` replayed."""
    client.clear_cache()
    acc = accumulator.astype(np.float32).astype(np.float64)
    rep, replayed = client.sync_task(env, env.section("fedkseed"), acc)
    assert replayed == np.count_nonzero(acc)
    return flat(get_arrays(rep.model))


def test_one_client_replay_equals_its_sequential_steps(tmp_path: Path) -> None:
    grid, strategy, captured = trained_models(tmp_path, rounds=3, nodes=1)
    env = env_for(grid)
    w0 = flat(env.task.initial_arrays(env.common.seed))
    sequential = captured[-1][0]  # one client applied all 36 steps one after the other
    fresh = rebuild(env, strategy.accumulator)
    moved = np.abs(sequential - w0).max()
    err = np.abs(fresh - sequential).max()
    assert moved > 1e-3
    assert err < 1e-5 and err < 1e-3 * moved, (err, moved)


def test_fresh_warm_and_averaged_clients_agree(tmp_path: Path) -> None:
    grid, strategy, captured = trained_models(tmp_path, rounds=3, nodes=3)
    env = env_for(grid)
    w0 = flat(env.task.initial_arrays(env.common.seed))
    sizes = np.array([env.task.num_examples(p, 3, env.common) for p in range(3)], dtype=float)
    # FedAvg of the last round's client models (their common start is the previous global)
    averaged = sum(w * captured[-1][p] for p, w in enumerate(sizes / sizes.sum()))
    assert isinstance(averaged, np.ndarray)
    # a warm client: the process's replica after the last client, synced to the global A
    acc = strategy.accumulator.astype(np.float32).astype(np.float64)
    rep, replayed = client.sync_task(env, env.section("fedkseed"), acc)
    assert 0 < replayed <= 3 * 12  # only seeds touched in the last round are replayed
    warm = flat(get_arrays(rep.model))
    fresh = rebuild(env, strategy.accumulator)
    moved = np.abs(fresh - w0).max()
    assert moved > 1e-3
    for name, other in (("warm", warm), ("averaged", averaged)):
        err = np.abs(fresh - other).max()
        assert err < 1e-5 and err < 1e-3 * moved, (name, err, moved)


def test_replay_with_another_generator_does_not_match(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    grid, strategy, captured = trained_models(tmp_path, rounds=2, nodes=1)
    env = env_for(grid)
    w0 = flat(env.task.initial_arrays(env.common.seed))
    keys = zo.block_keys  # other pool windows for the same seeds
    monkeypatch.setattr(zo, "block_keys", lambda seed, n: keys(int(seed) % 2**31, n))
    fresh = rebuild(env, strategy.accumulator)
    sequential = captured[-1][0]
    assert np.abs(fresh - sequential).max() > 0.3 * np.abs(sequential - w0).max()


def test_full_run_learns_and_reports_bytes(tmp_path: Path) -> None:
    client.clear_cache()
    over: dict[str, Any] = {"num-server-rounds": 4, "fedkseed.local-steps": 40,
                            "fedkseed.num-seeds": 256}
    grid = LocalGrid(3, config(tmp_path, **over))
    summary = execute(grid, grid.run_config)
    import json

    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    assert [x["clients"] for x in lines] == [3, 3, 3, 3]
    assert all(x["pairs_per_client"] == 40 for x in lines)
    first, last = lines[0], lines[-1]
    assert last["loss"] < first["loss"]  # federated evaluation on the nodes' test shares
    assert first["train_up_bytes_per_client"] > 8 * 40


def test_a_client_round_decodes_its_downlink_once(tmp_path: Path,
                                                  monkeypatch: pytest.MonkeyPatch) -> None:
    """Issue 13 §5: the round reads ``A`` and Pro's probabilities from one decoded value."""
    calls: list[int] = []

    def counting(content: RecordDict, num_seeds: int) -> wk.Downlink:
        calls.append(num_seeds)
        return wk.read_down(content, num_seeds)

    monkeypatch.setattr(client, "read_down", counting)
    grid, strategy = setup(tmp_path, 1, "fedkseed-pro")
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 1 and rlog.errors == 0
    assert len(calls) == 1


# ------------------------------------------------------------------ the replica on the node's disk
def accumulators(k: int) -> tuple[np.ndarray, np.ndarray]:
    """An accumulator and the next round's: three seeds more, one changed (fp32 values)."""
    rng = np.random.default_rng(3)
    old = np.zeros(k)
    old[:10] = rng.normal(size=10)
    new = old.copy()
    new[[4, 20, 21, 22]] += rng.normal(size=4)
    return (old.astype(np.float32).astype(np.float64), new.astype(np.float32).astype(np.float64))


def test_a_fresh_process_replays_only_the_new_seeds_from_the_disk_copy(tmp_path: Path) -> None:
    grid, _ = setup(tmp_path, 1)
    env = env_for(grid)
    cfg = env.section("fedkseed")
    old, new = accumulators(cfg.num_seeds)
    store = tmp_path / "node" / "fedkseed-replica.pt"
    rep, replayed = client.sync_task(env, cfg, old, store)
    assert replayed == 10 and not store.exists()
    client.remember(rep, store)
    # the process that kept its replica in memory
    _, in_memory = client.sync_task(env, cfg, new, store)
    warm = flat(get_arrays(client.cached_replica().model))  # type: ignore[union-attr]
    assert in_memory == 4
    # a fresh process (empty in-memory cache): loads round r from disk, replays only the change
    client.clear_cache()
    rep, from_disk = client.sync_task(env, cfg, new, store)
    assert from_disk == 4
    np.testing.assert_array_equal(flat(get_arrays(rep.model)), warm)  # bitwise
    # against a cold rebuild from w0: equal within fp32 round-off, as a warm replica always is
    cold = rebuild(env, new)
    w0 = flat(env.task.initial_arrays(env.common.seed))
    assert np.abs(cold - warm).max() < 1e-3 * np.abs(cold - w0).max()


@pytest.mark.parametrize("damage", ["other-key", "other-w0", "torn", "garbage", "applied-length"])
def test_a_disk_copy_that_does_not_match_is_ignored(tmp_path: Path, damage: str) -> None:
    grid, _ = setup(tmp_path, 1)
    env = env_for(grid)
    cfg = env.section("fedkseed")
    old, new = accumulators(cfg.num_seeds)
    store = tmp_path / "fedkseed-replica.pt"
    rep, _ = client.sync_task(env, cfg, old, store)
    if damage == "other-key":  # e.g. another lr: same file, another meaning of `applied`
        client.replica_store.save(store, (*rep.key[:-1], 0.5, rep.origin), rep.applied,
                                  rep.directions.params)
    elif damage == "other-w0":
        client.replica_store.save(store, (*rep.key, "another w0"), rep.applied,
                                  rep.directions.params)
    elif damage == "applied-length":
        client.replica_store.save(store, rep.disk_key, rep.applied[:-1], rep.directions.params)
    else:
        client.remember(rep, store)
        data = store.read_bytes()
        store.write_bytes(data[: len(data) // 2] if damage == "torn" else b"not a replica")
    client.clear_cache()
    _, replayed = client.sync_task(env, cfg, new, store)
    assert replayed == np.count_nonzero(new)  # rebuilt from w0, as without a copy


def test_the_client_app_keeps_the_replica_under_state_dir(tmp_path: Path) -> None:
    grid, strategy = setup(tmp_path, 1)
    node = tmp_path / "node-state"
    for ctx in grid.contexts.values():
        ctx.node_config["state-dir"] = str(node)
    assert strategy.train_round(grid, 1).clients == 1
    saved = client.replica_store.read(node / client.replica_store.FILE_NAME,
                                      client.cached_replica().disk_key,  # type: ignore[union-attr]
                                      32)
    assert saved is not None and np.count_nonzero(saved.applied) > 0
    rep = client.cached_replica()
    assert rep is not None and np.array_equal(saved.applied, rep.applied)
    ctx = next(iter(grid.contexts.values()))
    ctx.node_config["state-dir"] = "off"
    assert client.replica_file(ctx) is None
