"""End-to-end tests of the federated LinUCB family through the real ClientApp (in-process grid)."""

from __future__ import annotations

import json
import math
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from flwr.app import RecordDict

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.results import read_metrics
from bouquet.apps.runner import build_strategy, execute
from bouquet.privacy import tree
from bouquet.schema import CommonConfig
from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.linucb import FedLinUCB, bad_replies
from bouquet.tasks.bandits import SynthBanditConfig, SyntheticBandit

METHODS = ["fedlinucb", "dp-fedlinucb-ldp", "dp-fedlinucb-sdp-amp", "dp-fedlinucb-sdp-vecsum"]
SMALL = {"linucb.batch-steps": 5, "linucb.horizon-rounds": 8, "synth-bandit.arms": 8,
         "synth-bandit.dim": 4}


def _grid(tmp_path: Path, name: str, nodes: int, **cfg: Any) -> LocalGrid:
    """A grid whose nodes keep their saved state under ``tmp_path/name`` (never shared).

    The operator's ``linucb.num-silos`` is the number of nodes unless a test sets it.
    """
    return LocalGrid(nodes, {"results-dir": str(tmp_path), "run-name": name,
                             "linucb.num-silos": nodes, "plots": False, **cfg})


def _run(tmp_path: Path, name: str, nodes: int, **cfg: Any) -> tuple[LocalGrid, Path]:
    grid = _grid(tmp_path, name, nodes, **cfg)
    summary = execute(grid, grid.run_config)
    return grid, summary.parent


def _plain_linucb(rounds: int, batch: int, lam: float, cfg: SynthBanditConfig,
                  alpha: float = 0.01, noise: float = 0.5) -> list[float]:
    """Textbook LinUCB (Abbasi-Yadkori et al. 2011) on silo 0's stream; cumulative regret."""
    stream = SyntheticBandit().partition(0, 1, CommonConfig(seed=0))
    d = cfg.dim
    gram, vec = lam * np.eye(d), np.zeros(d)
    cum, out, t = 0.0, [], 0
    for rnd in range(1, rounds + 1):
        block = stream.block(rnd, batch, cfg)
        for s in range(batch):
            t += 1
            arms = block.features[s]
            theta = np.linalg.solve(gram, vec)
            beta = math.sqrt(lam) * math.sqrt(d) + noise * math.sqrt(
                d * math.log(1 + t / (d * lam)) + math.log(1 / alpha))
            widths = np.sqrt(np.einsum("kd,kd->k", arms, np.linalg.solve(gram, arms.T).T))
            a = int(np.argmax(arms @ theta + beta * widths))
            cum += block.means[s].max() - block.means[s, a]
            gram += np.outer(arms[a], arms[a])
            vec += arms[a] * block.rewards[s, a]
        out.append(cum)
    return out


def test_one_silo_fedlinucb_is_plain_linucb(tmp_path: Path) -> None:
    rounds, batch = 12, 7
    _, run = _run(tmp_path, "one", 1, method="fedlinucb", **{"num-server-rounds": rounds,
                  "linucb.batch-steps": batch})
    fed = [r["regret_silo0"] for r in read_metrics(run)]
    plain = _plain_linucb(rounds, batch, 1.0, SynthBanditConfig())
    assert plain[-1] > 0
    np.testing.assert_allclose(fed, plain, rtol=1e-9, atol=1e-9)


def _schedule(grid: LocalGrid, run: Path) -> list[Any]:
    sent = [(m.metadata.group_id, m.metadata.message_type, m.metadata.dst_node_id,
             content_bytes(m.content)) for m in grid.sent]
    per_round = [(r["round"], r["up_bytes"], r["down_bytes"], r["clients"])
                 for r in read_metrics(run)]
    return [sent, per_round]


@pytest.mark.parametrize("method", METHODS)
def test_schedule_does_not_depend_on_data(tmp_path: Path, method: str) -> None:
    common = {"method": method, "num-server-rounds": 6, **SMALL}
    g1, r1 = _run(tmp_path, "a", 3, **common)
    g2, r2 = _run(tmp_path, "b", 3, **common, **{"synth-bandit.env-seed": 7,
                                                   "synth-bandit.noise": 0.05})
    m1, m2 = read_metrics(r1), read_metrics(r2)
    assert [r["regret"] for r in m1] != [r["regret"] for r in m2]  # the data did differ
    assert _schedule(g1, r1) == _schedule(g2, r2)


def _bad_variants(tmp_path: Path, method: str) -> list[tuple[str, RecordDict]]:
    """The method's malformed variants of a real round-1 reply."""
    g = _grid(tmp_path, "probe", 2, method=method, **{"num-server-rounds": 2}, **SMALL)
    strategy = build_strategy(resolve(g.run_config), None)
    captured: list[RecordDict] = []

    def keep(content: RecordDict) -> RecordDict:
        captured.append(content)
        return content

    g.corrupt[0] = keep
    strategy.train_round(g, 1)
    return bad_replies(captured[0])


def _corrupter(label: str) -> Callable[[RecordDict], RecordDict]:
    def corrupt(content: RecordDict) -> RecordDict:
        return dict(bad_replies(content))[label]

    return corrupt


@pytest.mark.parametrize("method", METHODS)
def test_malformed_silo_messages_are_rejected_and_counted(tmp_path: Path, method: str) -> None:
    labels = [label for label, _ in _bad_variants(tmp_path, method)]
    assert {"wrong dimension", "negative regret"} <= set(labels)
    if method != "dp-fedlinucb-sdp-vecsum":
        assert {"non-symmetric matrix", "NaN in vector"} <= set(labels)
    for label in labels:
        g = _grid(tmp_path, label.replace(" ", "-"), 3, method=method,
                  **{"num-server-rounds": 2}, **SMALL)
        strategy = build_strategy(resolve(g.run_config), None)
        g.corrupt[1] = _corrupter(label)
        rlog = strategy.train_round(g, 1)
        assert (rlog.rejected, rlog.clients) == (1, 2), label
        assert [(f["kind"], f["partition_id"]) for f in rlog.failures] == [("rejected", 1)]
        assert set(strategy.state_dict()["cum_regret"]) == {"0", "2"}


def test_all_bad_replies_keep_the_state(tmp_path: Path) -> None:
    g = _grid(tmp_path, "allbad", 2, method="dp-fedlinucb-ldp", **{"num-server-rounds": 2}, **SMALL)
    strategy = build_strategy(resolve(g.run_config), None)
    strategy.train_round(g, 1)
    before = strategy.state_dict()
    for pid in (0, 1):
        g.corrupt[pid] = lambda content: dict(bad_replies(content))["non-symmetric matrix"]
    rlog = strategy.train_round(g, 2)
    assert rlog.rejected == 2 and rlog.clients == 0
    after = strategy.state_dict()
    np.testing.assert_array_equal(before["tree"]["sums"], after["tree"]["sums"])
    np.testing.assert_array_equal(before["tree"]["syncs"], after["tree"]["syncs"])
    assert before["cum_regret"] == after["cum_regret"]


def test_zero_noise_server_prefix_is_the_exact_sum_even_with_a_missed_sync(tmp_path: Path) -> None:
    g = _grid(tmp_path, "missed", 3, method="fedlinucb",
              **{"num-server-rounds": 4, "round-timeout": 1}, **SMALL)
    strategy = build_strategy(resolve(g.run_config), None)
    assert isinstance(strategy, FedLinUCB)
    for rnd in range(1, 5):
        g.drop = {1} if rnd == 2 else set()
        rlog = strategy.train_round(g, rnd)
        assert rlog.missing == (1 if rnd == 2 else 0)
    d = strategy.dim
    exact = np.zeros(tree.stats_size(d))
    for ctx in g.contexts.values():
        rec = ctx.state.array_records["fedlinucb.tree"]
        exact += rec["psums"].numpy()[2]  # the level-2 p-sum formed at sync 4 covers 1..4
    np.testing.assert_allclose(strategy.tree.prefix(4), exact, rtol=1e-12, atol=1e-12)
    assert exact[0] > 0


def test_resume_gives_the_same_metrics(tmp_path: Path) -> None:
    base = {"method": "dp-fedlinucb-ldp", **SMALL}
    _, full = _run(tmp_path, "full", 3, **base, **{"num-server-rounds": 4})
    grid, part = _run(tmp_path, "part", 3, **base, **{"num-server-rounds": 2})
    execute(grid, {**grid.run_config, "resume-from": str(part), "num-server-rounds": 4})

    def strip(rows: list[dict[str, Any]]) -> list[dict[str, Any]]:
        return [{k: v for k, v in r.items() if k != "wall_s"} for r in rows]

    assert strip(read_metrics(full)) == strip(read_metrics(part))
    # a resume with restarted nodes (fresh contexts): silos get their tree back from disk
    _, again = _run(tmp_path, "again", 3, **base, **{"num-server-rounds": 2})
    fresh = LocalGrid(3, {**grid.run_config, "run-name": "", "resume-from": str(again),
                          "num-server-rounds": 4})
    execute(fresh, fresh.run_config)
    assert strip(read_metrics(full)) == strip(read_metrics(again))
    summary = json.loads((part / "summary.json").read_text())
    assert summary["final"]["regret"] == read_metrics(full)[-1]["regret"]
    privacy = summary["privacy"]
    assert privacy["epsilon"] == read_metrics(full)[-1]["epsilon"]
    assert 0 < privacy["epsilon"] <= privacy["target_epsilon"] == 1.0  # 4 of 8 planned syncs
    assert set(privacy["per_silo"]) == {"0", "1", "2"} and privacy["delta"] == 0.1


def test_horizon_shorter_than_the_run_is_refused(tmp_path: Path) -> None:
    g = _grid(tmp_path, "short", 2, method="dp-fedlinucb-ldp", **{"num-server-rounds": 9}, **SMALL)
    with pytest.raises(ValueError, match="horizon-rounds"):
        build_strategy(resolve(g.run_config), None)


def test_digits_bandit_learns(tmp_path: Path) -> None:
    _, run = _run(tmp_path, "digits", 2, method="fedlinucb", task="digits-bandit",
                  **{"num-server-rounds": 8, "linucb.batch-steps": 25, "linucb.crs": 0.1})
    rows = read_metrics(run)
    first = rows[0]["regret"] / 2  # per silo and step
    last = rows[-1]["regret"] / 2
    assert 0 <= last < first and last < 0.9  # better than a random arm (0.9)


def test_method_import_chain_is_torch_free(tmp_path: Path) -> None:
    # Emulate a node without torch: the path finder no longer sees it, so ``import torch``
    # fails and ``importlib.util.find_spec("torch")`` (how libraries probe) returns None.
    script = textwrap.dedent(f"""
        import sys
        from importlib.machinery import PathFinder

        class HideTorch(PathFinder):
            @classmethod
            def find_spec(cls, fullname, path=None, target=None):
                if fullname.split(".")[0] == "torch":
                    return None
                return PathFinder.find_spec(fullname, path, target)

        sys.meta_path[:] = [HideTorch if f is PathFinder else f for f in sys.meta_path]
        try:
            import torch
            raise SystemExit("torch was not hidden")
        except ImportError:
            pass
        from bouquet.apps.local_grid import LocalGrid
        from bouquet.apps.runner import execute
        for method in {METHODS!r}:
            g = LocalGrid(2, {{"method": method, "num-server-rounds": 1,
                               "results-dir": {str(tmp_path)!r}, "run-name": method,
                               "sample-deadline": 5, "linucb.num-silos": 2,
                               **{SMALL!r}}})
            execute(g, g.run_config)
        g = LocalGrid(2, {{"method": "fedlinucb", "task": "digits-bandit",
                           "num-server-rounds": 1, "results-dir": {str(tmp_path)!r},
                           "run-name": "digits", "sample-deadline": 5}})
        execute(g, g.run_config)
        assert "torch" not in sys.modules
        print("torch-free")
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    assert "torch-free" in out.stdout
    for method in METHODS:
        assert json.loads((tmp_path / method / "summary.json").read_text())["rounds"] == 1


def test_the_cli_precheck_accepts_an_unbounded_bandit_stream() -> None:
    """synth-bandit declares no finite pool (0 examples): that is not an empty partition."""
    from bouquet.apps.compat import check_partition
    from bouquet.apps.config import resolve
    from bouquet.apps.local_grid import full_run_config

    cfg = resolve(full_run_config({"method": "fedlinucb", "task": "synth-bandit"}))
    check_partition(cfg, 2)  # raised ConfigError before the fix


# --------------------------------------------------------------------------- fair baseline
def _big_block(steps: int = 20, arms: int = 5, dim: int = 4) -> Any:
    """Features of norm 3 and rewards of +-4: outside the default bounds L = Y = 1."""
    from bouquet.tasks.bandits import Block

    rng = np.random.default_rng(3)
    x = rng.standard_normal((steps, arms, dim))
    x *= 3.0 / np.linalg.norm(x, axis=2, keepdims=True)
    return Block(x, np.zeros((steps, arms)), rng.choice([-4.0, 4.0], size=(steps, arms)))


def test_fedlinucb_reward_clip_bounds_the_statistics_like_the_private_arms() -> None:
    from bouquet.clients.linucb import linucb_steps
    from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig, make_protocol

    block = _big_block()
    zeros = (np.zeros((4, 4)), np.zeros(4))
    plain = LinUCBConfig(num_silos=2)
    clipped = LinUCBConfig(num_silos=2, reward_clip=1.0)
    xs, ys, _ = linucb_steps(block, *zeros, make_protocol("none", plain, None, 4, 2, 8), plain, 1)
    assert np.abs(ys).max() == 4.0  # unclipped by default: the baseline of the paper's code
    proto = make_protocol("none", clipped, None, 4, 2, 8)
    assert proto.clips and not proto.private
    xs, ys, _ = linucb_steps(block, *zeros, proto, clipped, 1)
    assert np.abs(ys).max() == pytest.approx(1.0)
    np.testing.assert_allclose(np.linalg.norm(xs, axis=1), 1.0)
    # the same bounds as the private variants' statistics
    ldp = make_protocol("ldp", plain, DPLinUCBConfig(reward_bound=1.0), 4, 2, 8)
    _, ys_ldp, _ = linucb_steps(block, *zeros, ldp, plain, 1)
    assert np.abs(ys_ldp).max() == pytest.approx(1.0)


def test_private_variants_refuse_the_non_private_reward_clip() -> None:
    from bouquet.strategies.linucb import DPLinUCBConfig, LinUCBConfig, make_protocol

    with pytest.raises(ValueError, match="reward-clip"):
        make_protocol("ldp", LinUCBConfig(num_silos=2, reward_clip=1.0), DPLinUCBConfig(), 4, 2,
                      8)


def test_reward_clip_runs_through_the_apps_and_changes_only_the_clipped_run(
        tmp_path: Path) -> None:
    cfg = {"num-server-rounds": 4, "synth-bandit.noise": 2.0, **SMALL}
    _, plain = _run(tmp_path, "plain", 2, method="fedlinucb", **cfg)
    _, clipped = _run(tmp_path, "clipped", 2, method="fedlinucb", **cfg,
                      **{"linucb.reward-clip": 0.5})
    _, huge = _run(tmp_path, "huge", 2, method="fedlinucb", **cfg,
                   **{"linucb.reward-clip": 1e9})
    regret = {name: [r["cum_regret"] for r in read_metrics(run)]
              for name, run in (("plain", plain), ("clipped", clipped), ("huge", huge))}
    assert regret["huge"] == regret["plain"]  # a bound no reward reaches changes nothing
    assert regret["clipped"] != regret["plain"]
