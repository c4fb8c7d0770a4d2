"""Starting costs what a round uses, not what the federation holds (issue 17, target 1).

``discovery="sampled"`` (the runner's) sends a hello only to the nodes a round samples, with every
check of ``"query"`` kept; the node side keeps each partition's rows once per process.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from flwr.app import ArrayRecord, Context, Message, MetricRecord, RecordDict
from flwr.clientapp import ClientApp

from bouquet.apps.config import resolve
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import build_strategy, initial_arrays, load_server_task
from bouquet.clients.discovery import answer_hello, is_hello
from bouquet.strategies import FedAvg, FedCG, Scafcom, arguments
from bouquet.tasks import partition as part
from bouquet.wire.actions import HELLO_ACTION


def hellos(grid: LocalGrid) -> list[int]:
    """Node ids the strategy sent a hello to, in order."""
    return [m.metadata.dst_node_id for m in grid.sent if is_hello(m)]


def runner_strategy(grid: LocalGrid):  # type: ignore[no-untyped-def]
    cfg = resolve(grid.run_config)
    return build_strategy(cfg, initial_arrays(cfg, load_server_task(cfg), grid),
                          online_nodes=len(list(grid.get_node_ids())))


@pytest.fixture
def large_above(monkeypatch: pytest.MonkeyPatch) -> None:
    """Federations above 10 nodes count as large (auto discovery becomes "sampled")."""
    monkeypatch.setattr(arguments, "AUTO_QUERY_MAX_NODES", 10)


@pytest.mark.usefixtures("large_above")
def test_runner_asks_only_the_sampled_nodes(tmp_path: Path) -> None:
    grid = LocalGrid(60, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                          "fraction-train": 0.05, "run-name": "r"})
    strategy = runner_strategy(grid)
    assert strategy.federation.discovery == "sampled"
    rlog = strategy.train_round(grid, 1)
    asked = hellos(grid)
    assert len(asked) == 3 and rlog.clients == 3  # 5 % of 60; the old discovery asked all 60
    assert sorted(strategy.partitions) == sorted(asked)
    assert all(strategy.partitions[n] == grid.pid(n) for n in asked)
    strategy.train_round(grid, 2)
    again = hellos(grid)[3:]
    assert len(again) <= 3 and not set(again) & set(asked)  # a known node is never asked again
    assert strategy.federation_size() == 60  # SCAFFOLD's N counts the grid's nodes, not the known


def test_sampled_discovery_keeps_the_declared_size_check(tmp_path: Path) -> None:
    """A node claiming more examples than its hello declared is still rejected."""
    grid = LocalGrid(6, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                         "run-name": "r", "discovery": "sampled"})

    def inflate(content: RecordDict) -> RecordDict:
        content["metrics"]["num-examples"] = 10**6
        return content

    grid.corrupt[4] = inflate
    strategy = runner_strategy(grid)
    rlog = strategy.train_round(grid, 1)
    assert rlog.clients == 5 and rlog.rejected == 1
    (fail,) = [f for f in rlog.failures if f["kind"] == "rejected"]
    assert fail["partition_id"] == 4 and "above the" in fail["reason"]


def test_sampled_discovery_caps_an_inflated_declared_size() -> None:
    """A hello declaring 10^6 examples is held to weight-cap-factor x the median declaration."""
    app = _numpy_app(declared={3: 10**6})
    grid = LocalGrid(5, {}, client=app)
    strategy = FedAvg(discovery="sampled", min_available_nodes=5, sample_deadline=5.0,
                      fraction_evaluate=0.0, weight_cap_factor=10.0)
    strategy.start(grid=grid, initial_arrays=_initial(), num_rounds=1, timeout=10)
    assert strategy.sizes[3] == 10**6
    assert strategy.declared_size(3) == 500  # 10 x the median (50)
    assert strategy.last_log["train"].clients == 5


@pytest.mark.usefixtures("large_above")
def test_a_failed_hello_is_replaced_by_another_node(tmp_path: Path) -> None:
    grid = LocalGrid(20, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                          "fraction-train": 0.25, "run-name": "r"})
    first = runner_strategy(grid)
    first.round_nodes(grid, 1)
    picked = sorted(first.partitions)  # what round 1 samples when every node answers

    def refuse(content: RecordDict) -> RecordDict:
        return RecordDict()  # an answer without an info record

    grid = LocalGrid(20, {"method": "fedavg", "results-dir": str(tmp_path), "local-steps": 1,
                          "fraction-train": 0.25, "run-name": "r2"})
    grid.corrupt_query[grid.pid(picked[0])] = refuse
    strategy = runner_strategy(grid)
    chosen, by_pid = strategy.round_nodes(grid, 1)
    assert len(chosen) == 5 and picked[0] not in by_pid.values()
    assert strategy.node_errors.latest[picked[0]][0] == "hello query"


def test_the_discovery_key_chooses_the_runners_discovery(tmp_path: Path) -> None:
    base = {"results-dir": str(tmp_path), "local-steps": 1, "run-name": "r"}
    query = runner_strategy(LocalGrid(4, {"method": "fedavg", "discovery": "query", **base}))
    assert query.federation.discovery == "query"
    fedcg = runner_strategy(LocalGrid(4, {"method": "fedcg", **base}))
    assert fedcg.federation.discovery == "query"  # auto: it selects among every candidate


def test_auto_discovery_asks_every_node_of_a_small_federation_only() -> None:
    """auto: a hello to every node up to AUTO_QUERY_MAX_NODES (reproducible sampling in Ray
    simulation, whose node ids are random), only to the sampled ones above it."""
    limit = arguments.AUTO_QUERY_MAX_NODES

    def auto(online: int | None, selects: bool = False) -> str:
        return arguments.resolve_discovery("auto", selects_by_partition=selects,
                                           online_nodes=online)
    assert auto(10) == auto(limit) == auto(None) == "query"
    assert auto(limit + 1) == auto(30_000) == "sampled"
    assert auto(30_000, selects=True) == "query"
    assert arguments.resolve_discovery("sampled", selects_by_partition=False,
                                       online_nodes=5) == "sampled"


def test_selecting_strategies_keep_query_discovery() -> None:
    with pytest.raises(ValueError, match="discovery='query'"):
        FedCG(discovery="sampled")
    assert Scafcom(discovery="sampled").federation.discovery == "sampled"


@pytest.mark.usefixtures("large_above")
def test_sampled_runs_are_reproducible_on_stable_node_ids(tmp_path: Path) -> None:
    runs = []
    for tag in ("a", "b"):
        grid = LocalGrid(30, {"method": "fedavg", "results-dir": str(tmp_path),
                              "local-steps": 1, "fraction-train": 0.1, "run-name": tag})
        strategy = runner_strategy(grid)
        for rnd in (1, 2):
            strategy.train_round(grid, rnd)
        runs.append(hellos(grid))
    assert runs[0] == runs[1]


# --------------------------------------------------------------------------- node side
@pytest.mark.parametrize("rows,n", [(60, 7), (100, 10), (13, 5), (6, 6)])
def test_iid_rows_are_the_partitioners_blocks(rows: int, n: int) -> None:
    from datasets import Dataset
    from flwr_datasets.partitioner import IidPartitioner

    p = IidPartitioner(num_partitions=n)
    p.dataset = Dataset.from_dict({"row": list(range(rows))})
    for i in range(n):
        assert part.iid_rows(rows, n, i).tolist() == p.load_partition(i)["row"]


@pytest.mark.parametrize("scheme", ["dirichlet", "pathological"])
def test_cached_label_partitions_equal_the_partitioners(scheme: str) -> None:
    labels = np.random.default_rng(0).integers(0, 5, size=400)
    fresh = part._partitioner(tuple(int(x) for x in labels), None, scheme, 8, 3, 0.5, 2)
    expected = [fresh.load_partition(i)["row"] for i in range(8)]  # type: ignore[attr-defined]
    part._SPLITS.clear()
    got = [part.partition_rows(labels, scheme=scheme, num_partitions=8, partition_id=i, seed=3)
           for i in range(8)]
    assert [g.tolist() for g in got] == expected
    again = part.partition_rows(labels, scheme=scheme, num_partitions=8, partition_id=2, seed=3)
    assert again is got[2]  # kept: the second use is a look-up
    assert not again.flags.writeable


# --------------------------------------------------------------------------- helpers
def _initial() -> ArrayRecord:
    return ArrayRecord([np.zeros((3, 2), np.float32)])


def _numpy_app(declared: dict[int, int]) -> ClientApp:
    app = ClientApp()

    @app.train()
    def train(msg: Message, context: Context) -> Message:
        arrays = [a + 0.1 for a in msg.content["arrays"].to_numpy_ndarrays()]
        pid = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        content = RecordDict({"arrays": ArrayRecord(arrays), "metrics": MetricRecord(
            {"num-examples": declared.get(pid, 50)})})
        return Message(content, reply_to=msg)

    @app.query()
    def query(msg: Message, context: Context) -> Message:
        pid = int(context.node_config["partition-id"])  # type: ignore[arg-type]
        assert msg.content["config"]["action"] == HELLO_ACTION
        return answer_hello(msg, context, num_examples=declared.get(pid, 50))

    return app
