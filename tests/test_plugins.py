"""Strategies as Flower plugins: keyword construction, Flower's start(), a plain Flower ClientApp."""

from __future__ import annotations

import inspect
import json
import pydoc
from collections.abc import Iterable
from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Error, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp
from flwr.common.constant import ErrorCode
from flwr.serverapp.strategy import Result

import bouquet.strategies as strategies
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.recorder import CHECKPOINT_DIR, RunRecorder
from bouquet.apps.results import read_metrics
from bouquet.strategies import FedAvg, FedCG, FedLinUCB, Scafcom
from bouquet.strategies.base import train_metric_name
from bouquet.strategies.checkpoint import load_checkpoint

PLUGINS = [getattr(strategies, n) for n in strategies.__all__
           if isinstance(getattr(strategies, n), type)
           and issubclass(getattr(strategies, n), strategies.BouquetStrategy)
           and getattr(strategies, n).method_name]


# --------------------------------------------------------------------------- a Flower quickstart
def quickstart_app() -> ClientApp:
    """A ClientApp written as Flower's quickstarts are: numpy model, train and evaluate only."""
    app = ClientApp()
    rng_of = {}

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        rng = rng_of.setdefault(context.node_id, np.random.default_rng(context.node_id))
        new = [a - 0.1 * (a - 1.0) + 0.01 * rng.standard_normal(a.shape).astype(a.dtype)
               for a in arrays]
        loss = float(np.mean([np.mean((a - 1.0) ** 2) for a in new]))
        content = RecordDict({"arrays": ArrayRecord(new),
                              "metrics": MetricRecord({"train_loss": loss, "num-examples": 50})})
        return Message(content=content, reply_to=msg)

    @app.evaluate()
    def evaluate(msg: Message, context: Context) -> Message:
        arrays = msg.content["arrays"].to_numpy_ndarrays()
        loss = float(np.mean([np.mean((a - 1.0) ** 2) for a in arrays]))
        metrics = MetricRecord({"eval_loss": loss, "num-examples": 20})
        return Message(content=RecordDict({"metrics": metrics}), reply_to=msg)

    return app


def initial() -> ArrayRecord:
    return ArrayRecord([np.zeros((3, 2), np.float32), np.zeros(2, np.float32)])


def test_fedavg_runs_a_plain_flower_clientapp_through_start() -> None:
    grid = LocalGrid(3, {}, client=quickstart_app())
    strategy = FedAvg(fraction_train=1.0, min_available_nodes=3, sample_deadline=5.0)
    result = strategy.start(grid=grid, initial_arrays=initial(), num_rounds=3, timeout=10)
    assert isinstance(result, Result)
    assert not any(m.metadata.message_type == "query" for m in grid.sent)  # no handshake
    assert sorted(result.train_metrics_clientapp) == [1, 2, 3]
    losses = [result.train_metrics_clientapp[r]["train_loss"] for r in (1, 2, 3)]
    assert losses[0] > losses[-1]
    for rec in result.train_metrics_clientapp.values():
        assert "train_train_loss" not in rec and rec["clients"] == 3 and rec["up_bytes"] > 0
    assert sorted(result.evaluate_metrics_clientapp) == [1, 2, 3]  # federated evaluation
    assert result.evaluate_metrics_clientapp[3]["eval_loss"] < 1.0
    final = result.arrays.to_numpy_ndarrays()
    assert float(final[0].mean()) > 0.2


def test_start_admits_through_the_defences() -> None:
    """A poisoned and a failing node on Flower's path are dropped and counted, not averaged."""
    grid = LocalGrid(4, {}, client=quickstart_app())

    def poison(content: RecordDict) -> RecordDict:
        arrays = [np.full_like(a, np.nan) for a in content["arrays"].to_numpy_ndarrays()]
        return RecordDict({"arrays": ArrayRecord(arrays), "metrics": content["metrics"]})

    grid.corrupt[1] = poison
    grid.fail.add(2)
    strategy = FedAvg(min_available_nodes=4, sample_deadline=5.0, fraction_evaluate=0.0)
    result = strategy.start(grid=grid, initial_arrays=initial(), num_rounds=2, timeout=10)
    rec = result.train_metrics_clientapp[2]
    assert (rec["clients"], rec["rejected"], rec["errors"]) == (2, 1, 1)
    assert all(np.all(np.isfinite(a)) for a in result.arrays.to_numpy_ndarrays())
    assert result.evaluate_metrics_clientapp == {}
    kinds = {f["node_id"]: f["kind"] for f in strategy.last_log["train"].failures}
    assert kinds == {1001: "rejected", 1002: "errors"}


def test_a_user_clientapp_answers_query_discovery_with_answer_hello() -> None:
    """``discovery="query"`` works with a user's ClientApp that adds the public hello answer."""
    from bouquet.clients.discovery import answer_hello

    app = quickstart_app()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        declared = 10 if context.node_config["partition-id"] == 2 else 50  # 2 will claim 50
        return answer_hello(msg, context, num_examples=declared)

    grid = LocalGrid(3, {}, client=app)
    strategy = FedAvg(discovery="query", min_available_nodes=3, sample_deadline=5.0,
                      fraction_evaluate=0.0)
    result = strategy.start(grid=grid, initial_arrays=initial(), num_rounds=2, timeout=10)
    assert sum(m.metadata.message_type == "query" for m in grid.sent) == 3  # once per node
    assert strategy.partitions == {1000: 0, 1001: 1, 1002: 2}
    assert strategy.sizes == {0: 50, 1: 50, 2: 10}
    rec = result.train_metrics_clientapp[2]
    assert (rec["clients"], rec["rejected"]) == (2, 1)  # 50 examples above the 10 it declared
    reasons = [f["reason"] for f in strategy.last_log["train"].failures]
    assert any("above the 10 examples the node declared" in r for r in reasons)


def test_answer_hello_refuses_what_is_not_a_hello() -> None:
    from bouquet.clients.discovery import answer_hello

    ctx = Context(1, 5, {}, RecordDict(), {})
    train = Message(RecordDict(), dst_node_id=5, message_type="train")
    with pytest.raises(ValueError, match="not a bouquet.hello"):
        answer_hello(train, ctx, num_examples=3)


def test_grid_discovery_caps_an_inflated_weight_at_the_round_median_rule() -> None:
    """No node declares a size under grid discovery: a claim of 10^6 examples is clipped."""
    from bouquet.strategies.admission import cap_undeclared_weights
    from bouquet.strategies.directory import NodeDirectory
    from bouquet.strategies.round_log import NodeReply

    def reply(pid: int, n: int) -> NodeReply:
        rec = RecordDict({"metrics": MetricRecord({"num-examples": n})})
        return NodeReply(pid, pid, rec, 0, 0)

    replies = [reply(0, 50), reply(1, 40), reply(2, 60), reply(3, 10**6)]
    cap_undeclared_weights(replies, NodeDirectory(), factor=10.0, train=False,
                           discovery="grid")
    assert [r.content["metrics"]["num-examples"] for r in replies] == [50, 40, 60, 550]
    declared = [reply(0, 50), reply(1, 40), reply(2, 10**6)]
    cap_undeclared_weights(declared, NodeDirectory(sizes={2: 10**6}), factor=10.0,
                           train=False, discovery="grid")  # the declared node is check_weight's
    assert declared[2].content["metrics"]["num-examples"] == 10**6

    grid = LocalGrid(4, {}, client=quickstart_app())

    def inflate(content: RecordDict) -> RecordDict:
        content["metrics"]["num-examples"] = 10**6
        return content

    grid.corrupt[3] = inflate
    strategy = FedAvg(min_available_nodes=4, sample_deadline=5.0, fraction_evaluate=0.0)
    strategy.start(grid=grid, initial_arrays=initial(), num_rounds=1, timeout=10)
    assert strategy.last_log["train"].clients == 4


def test_initial_model_comes_from_start_when_not_given() -> None:
    strategy = Scafcom()
    assert strategy.needs_model() and strategy.global_arrays() is None
    strategy.ensure_model(initial())
    assert strategy.layout.size == 8 and strategy.c.shape == (8,)


# --------------------------------------------------------------------------- construction
@pytest.mark.parametrize("cls", PLUGINS, ids=lambda c: c.__name__)
def test_every_plugin_builds_with_defaults_and_documents_its_arguments(cls: type) -> None:
    strategy = cls(context_dim=4) if cls is FedLinUCB else cls()
    assert strategy.method == cls.method_name
    params = inspect.signature(cls).parameters
    assert {"fraction_train", "min_train_nodes", "fraction_evaluate", "min_available_nodes",
            "seed", "round_timeout", "discovery"} <= set(params)
    text = pydoc.render_doc(cls)
    assert "Parameters" in text and "fraction_train" in text


def test_method_arguments_are_named_as_in_the_paper_and_checked_eagerly() -> None:
    assert {"beta", "compressor", "alpha", "compressor_ratio"} <= set(
        inspect.signature(Scafcom).parameters)
    s = Scafcom(beta=0.5, compressor="randk", fraction_train=0.25)
    assert s.cfg.beta == 0.5 and s.cfg.compressor == "randk" and s.common.fraction_train == 0.25
    with pytest.raises(ValueError, match=r"beta=1\.5.*maximum.*<= 1"):
        Scafcom(beta=1.5)
    with pytest.raises(ValueError, match=r"compressor='zip'.*one of"):
        Scafcom(compressor="zip")
    with pytest.raises(ValueError, match="fraction_train"):
        FedAvg(fraction_train=2.0)
    with pytest.raises(TypeError, match="unexpected keyword argument 'betta'"):
        Scafcom(betta=0.1)


def test_variants_are_constructor_options() -> None:
    ablation = FedCG(selection="random", ratios="uniform")
    assert (ablation.settings.selection, ablation.settings.ratios) == ("random", "uniform")
    with pytest.raises(ValueError, match="selection"):
        FedCG(selection="greedy")
    private = FedLinUCB(privacy="ldp", context_dim=3, num_silos=4, discovery="query")
    assert private.variant.name == "ldp" and private.method == "dp-fedlinucb-ldp"
    with pytest.raises(ValueError, match="discovery='query'"):
        FedLinUCB(privacy="ldp", context_dim=3, num_silos=4)
    with pytest.raises(ValueError, match="context_dim"):
        FedLinUCB()


def test_one_train_metric_naming_rule() -> None:
    assert train_metric_name("loss") == "train_loss"
    assert train_metric_name("train_loss") == "train_loss"


# --------------------------------------------------------------------------- bouquet's extras
def test_start_callbacks_record_results_for_a_user_run(tmp_path: Path) -> None:
    """What bouquet's runner adds (results files, checkpoints) is a callback any start() takes."""
    grid = LocalGrid(3, {}, client=quickstart_app())
    seen: list[int] = []
    recorder = RunRecorder(tmp_path / "run", meta={"method": "fedavg", "task": "mine", "seed": 0},
                           num_rounds=2)
    strategy = FedAvg(min_available_nodes=3, sample_deadline=5.0)
    strategy.start(grid=grid, initial_arrays=initial(), num_rounds=2,
                   callbacks=[recorder, lambda s, report: seen.append(report.round)])
    summary = json.loads(recorder.finish(strategy).read_text())
    lines = read_metrics(tmp_path / "run")
    assert seen == [1, 2] and [r["round"] for r in lines] == [1, 2]
    assert lines[0]["clients"] == 3 and lines[0]["up_bytes"] > 0
    assert "eval_loss" in lines[0] and "train_loss" in lines[0]
    assert summary["rounds"] == 2 and summary["comm"]["up_bytes_total"] > 0
    round_done, state, _ = load_checkpoint(tmp_path / "run" / CHECKPOINT_DIR)
    assert round_done == 2

    resumed = FedAvg(min_available_nodes=3, sample_deadline=5.0)
    resumed.load_state_dict(state)
    result = resumed.start(grid=grid, num_rounds=3, first_round=3)
    assert sorted(result.train_metrics_clientapp) == [3]


class UnavailableGrid(LocalGrid):
    """The SuperLink answers for node 1001: an error reply signed with its own node id (1)."""

    def push_messages(self, messages: Iterable[Message]) -> Iterable[str]:
        ids = list(super().push_messages(messages))
        for mid in ids:
            reply = self.replies[mid]
            if reply.metadata.src_node_id == 1001 and not reply.has_error():
                error = Message(Error(code=ErrorCode.NODE_UNAVAILABLE, reason="node unavailable"),
                                reply_to=next(m for m in self.sent if m.metadata.message_id == mid))
                error.metadata.__dict__["_src_node_id"] = 1
                self.replies[mid] = error
        return ids


def test_error_replies_are_mapped_to_their_node_through_reply_to_message_id() -> None:
    grid = UnavailableGrid(3, {}, client=quickstart_app())
    strategy = FedAvg(min_available_nodes=3, sample_deadline=5.0, fraction_evaluate=0.0)
    result = strategy.start(grid=grid, initial_arrays=initial(), num_rounds=1, timeout=10)
    assert result.train_metrics_clientapp[1]["errors"] == 1
    [failure] = strategy.last_log["train"].failures
    assert (failure["node_id"], failure["kind"]) == (1001, "errors")
    assert "node unavailable" in failure["reason"]


# --------------------------------------------------------------------------- weights from round 1
def _share_app(hostile: set[int]) -> ClientApp:
    """Honest nodes send zeros (50 examples); hostile ones send ones and claim 10^9 examples."""
    from bouquet.clients.discovery import answer_hello

    app = ClientApp()

    def lies(context: Context) -> bool:
        return int(context.node_config["partition-id"]) in hostile  # type: ignore[arg-type]

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return answer_hello(msg, context, num_examples=10**9 if lies(context) else 50)

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = [np.full_like(a, 1.0 if lies(context) else 0.0)
                  for a in msg.content["arrays"].to_numpy_ndarrays()]
        n = 10**9 if lies(context) else 50
        metrics = MetricRecord({"train_loss": 0.0, "num-examples": n})
        return Message(RecordDict({"arrays": ArrayRecord(arrays), "metrics": metrics}),
                       reply_to=msg)

    return app


@pytest.mark.parametrize("discovery", ["sampled", "grid"])
def test_a_hostile_weight_claim_in_a_round_of_two_replies_weighs_no_more_than_an_honest_one(
        discovery: str, caplog: pytest.LogCaptureFixture) -> None:
    """Round 1 of a 20-node federation sampling 2 nodes: the median rule has fewer than 3 sizes.

    Before, the liar's 10^9 (declared at hello under ``sampled``, claimed in the reply under
    ``grid``) was bounded only by ``max-num-examples`` (none): the average was the liar's model.
    Now the replies weigh equally until three sizes are known.
    """
    import logging

    caplog.set_level(logging.INFO, logger="bouquet")

    def one_round(hostile: set[int]) -> tuple[set[int], float]:
        grid = LocalGrid(20, {}, client=_share_app(hostile))
        strategy = FedAvg(discovery=discovery, fraction_train=0.1, min_available_nodes=2,
                          sample_deadline=5.0, fraction_evaluate=0.0)
        result = strategy.start(grid=grid, initial_arrays=initial(), num_rounds=1, timeout=10)
        sampled = {int(grid.contexts[m.metadata.dst_node_id].node_config["partition-id"])  # type: ignore[arg-type]
                   for m in grid.sent if m.metadata.message_type == "train"}
        return sampled, float(result.arrays.to_numpy_ndarrays()[0].mean())

    sampled, _ = one_round(set())
    assert len(sampled) == 2
    caplog.clear()
    again, share = one_round({min(sampled)})  # the same seeded sample, one liar in it
    assert again == sampled
    assert share == pytest.approx(0.5)  # was 1 - 5e-8: the liar's model
    assert sum("weigh equally" in r.message for r in caplog.records) == 1


def test_grid_claims_admitted_earlier_bound_a_later_round_of_two_and_are_checkpointed() -> None:
    """Once three partitions' claims are known, the median of the run's claims caps a round of
    two replies (not the equal-weights fall-back), and the claims survive a checkpoint."""
    from bouquet.strategies.admission import cap_undeclared_weights
    from bouquet.strategies.round_log import NodeReply

    def reply(pid: int, n: int) -> NodeReply:
        return NodeReply(pid, pid, RecordDict({"metrics": MetricRecord({"num-examples": n})}),
                         0, 0)

    strategy = FedAvg()
    strategy.directory.partitions = {p: p for p in range(20)}
    strategy.directory.claims.update(cap_undeclared_weights(
        [reply(0, 50), reply(1, 40), reply(2, 60)], strategy.directory, factor=10.0,
        train=True, discovery="grid"))
    restored = FedAvg()
    restored.load_state_dict(strategy.state_dict())
    assert restored.directory.claims == {0: 50, 1: 40, 2: 60}
    later = [reply(3, 10**9), reply(4, 45)]
    claims = cap_undeclared_weights(later, restored.directory, factor=10.0, train=True,
                                    discovery="grid")
    assert [r.content["metrics"]["num-examples"] for r in later] == [500, 45]  # 10 x median 50
    assert claims == {3: 10**9, 4: 45}  # the raw claims are what is remembered


class _ListedGrid:
    """Just ``get_node_ids``: the node ids a grid lists now."""

    def __init__(self, ids: list[int]) -> None:
        self.ids = ids

    def get_node_ids(self) -> list[int]:
        return list(self.ids)


def test_a_node_reconnecting_each_round_with_a_huge_claim_does_not_ratchet_the_grid_median(
        ) -> None:
    """Three honest nodes claim 100; an attacker restarts its SuperNode every round (a new node
    id each time) claiming 10^9. Before, every stale id kept its clipped claim (10x the median)
    in the median: the attacker's share reached 0.971 at round 5, 0.997 at round 10. Now only
    online nodes' raw claims count: its share stays at the per-round bound 1000/1300."""
    from bouquet.schema import CommonConfig
    from bouquet.strategies.admission import cap_undeclared_weights
    from bouquet.strategies.directory import NodeDirectory
    from bouquet.strategies.round_log import NodeReply

    def reply(pid: int, n: int) -> NodeReply:
        return NodeReply(pid, pid, RecordDict({"metrics": MetricRecord({"num-examples": n})}),
                         0, 0)

    directory = NodeDirectory()
    honest = [1, 2, 3]
    shares = []
    for rnd in range(1, 21):
        attacker = 100 + rnd
        directory.discover(_ListedGrid([*honest, attacker]), CommonConfig(), discovery="grid",
                           method="fedavg", wanted=4)
        replies = [reply(p, 100) for p in honest] + [reply(attacker, 10**9)]
        directory.claims.update(cap_undeclared_weights(replies, directory, 10.0, train=True,
                                                       discovery="grid"))
        weights = [int(r.content["metrics"]["num-examples"]) for r in replies]  # type: ignore[arg-type]
        shares.append(weights[-1] / sum(weights))
    assert max(shares) <= 1000 / 1300 + 1e-9
    assert set(directory.claims) == {*honest, 120}  # offline ids forgotten


def test_query_discovery_weights_are_the_median_rule_alone() -> None:
    """Under ``"query"`` every online node declared at hello; one that declared nothing (0, or
    a refused hello) is not weighed. Before, a 5000-row node in a federation of three online
    nodes with two positive declarations was clipped to 100 (equal weights)."""
    from bouquet.strategies.admission import cap_undeclared_weights
    from bouquet.strategies.round_log import NodeReply

    for sizes in ({0: 100, 1: 5000}, {0: 100, 1: 5000, 2: 0}):
        strategy = FedAvg(discovery="query")
        strategy.directory.sizes = dict(sizes)
        strategy.directory.online = 3
        content = RecordDict({"metrics": MetricRecord({"num-examples": 5000})})
        strategy.check_weight(1, content)
        assert content["metrics"]["num-examples"] == 5000
    strategy.directory.sizes = {0: 100, 1: 120, 2: 110, 3: 5000}  # three or more: the median
    content = RecordDict({"metrics": MetricRecord({"num-examples": 5000})})
    strategy.check_weight(3, content)
    assert content["metrics"]["num-examples"] == 1150
    undeclared = [NodeReply(p, p, RecordDict({"metrics": MetricRecord({"num-examples": n})}),
                            0, 0) for p, n in ((7, 40), (8, 10**6))]
    strategy.directory.online = 20
    assert cap_undeclared_weights(undeclared, strategy.directory, 10.0, train=True,
                                  discovery="query") == {}
    assert [r.content["metrics"]["num-examples"] for r in undeclared] == [40, 10**6]


def test_the_equal_weights_fallback_clips_training_weights_only() -> None:
    """Early sampled rounds (two of 20 nodes declared, one of them 1 example): training weights
    are equal, but the 5000-row node's step budget, declared size (FedCG's weight) and
    evaluation weight are not cut to 1."""
    strategy = FedAvg(discovery="sampled")  # local-steps 0: the budget follows the size
    strategy.directory.sizes = {0: 1, 1: 5000}
    strategy.directory.online = 20
    assert strategy.weight_cap() == 1.0
    assert strategy.declared_size(1) == 5000
    steps = strategy.common.local_epochs * -(-5000 // strategy.common.batch_size)
    assert strategy.max_local_steps(1, clipped=True) == strategy.max_local_steps(1) == steps
    content = RecordDict({"metrics": MetricRecord({"num-examples": 5000})})
    strategy.clip_evaluation_weight(content)
    assert content["metrics"]["num-examples"] == 5000
    strategy.check_weight(1, content)
    assert content["metrics"]["num-examples"] == 1


def test_the_equal_weights_log_counts_only_positive_sizes(
        caplog: pytest.LogCaptureFixture) -> None:
    """A node that declared 0 is no known size: the log said 'only 3 node size(s) known, fewer
    than the 3' before."""
    import logging

    caplog.set_level(logging.INFO, logger="bouquet")
    strategy = FedAvg(discovery="sampled")
    strategy.directory.sizes = {0: 100, 1: 5000, 2: 0}
    strategy.directory.online = 20
    assert strategy.weight_cap() == 100.0
    assert any("only 2 node size(s) known" in r.message for r in caplog.records)


def test_a_round_undone_at_aggregation_leaves_no_grid_claim_behind(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """``aggregate_safely`` rejects the round's replies: their claims must not be remembered."""
    from bouquet.wire.validation import InvalidReply

    def refuse(rnd: int, replies: list[object]) -> dict[str, float]:
        raise InvalidReply("refused")

    kept = FedAvg(min_available_nodes=3, sample_deadline=5.0, fraction_evaluate=0.0)
    kept.start(grid=LocalGrid(3, {}, client=quickstart_app()), initial_arrays=initial(),
               num_rounds=1, timeout=10)
    assert len(kept.directory.claims) == 3  # an admitted round is remembered
    undone = FedAvg(min_available_nodes=3, sample_deadline=5.0, fraction_evaluate=0.0)
    monkeypatch.setattr(undone, "aggregate_round", refuse)
    undone.start(grid=LocalGrid(3, {}, client=quickstart_app()), initial_arrays=initial(),
                 num_rounds=1, timeout=10)
    assert undone.last_log["train"].clients == 0
    assert undone.directory.claims == {}


def test_federated_evaluation_under_sampled_discovery_says_hello_to_no_one_new() -> None:
    """50 nodes, 3 sampled per round, ``fraction_evaluate=1``: before, round 1's evaluation
    introduced every online node (50 hellos); now it asks only the nodes the run knows."""
    from bouquet.clients.discovery import answer_hello

    app = quickstart_app()

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        return answer_hello(msg, context, num_examples=50)

    grid = LocalGrid(50, {}, client=app)
    strategy = FedAvg(discovery="sampled", fraction_train=0.06, min_available_nodes=3,
                      sample_deadline=5.0, fraction_evaluate=1.0)
    strategy.start(grid=grid, initial_arrays=initial(), num_rounds=2, timeout=10)
    sent = [(m.metadata.message_type, m.metadata.dst_node_id) for m in grid.sent]
    hellos = [n for t, n in sent if t == "query"]
    trained = {n for t, n in sent if t == "train"}
    evaluated = [n for t, n in sent if t == "evaluate"]
    assert len(hellos) == len(set(hellos)) <= 6  # one per sampled node, 3 per round at most
    assert set(hellos) == trained and set(evaluated) <= trained
    first_eval = [n for n in evaluated][:3]
    assert len(evaluated) <= 3 + 6 and len(set(first_eval)) == 3  # round 1: its 3 nodes
    assert strategy.last_log["evaluate"].clients == len(set(evaluated[3:]))
