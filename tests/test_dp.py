"""DP-SGD on clients: equivalence with plain training, cumulative accounting, noise scale, budget."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from flwr.app import Context, RecordDict
from opacus.accountants import RDPAccountant
from scipy import stats
from torch import nn

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import execute
from bouquet.clients.base import NodeState
from bouquet.clients.lora import build_adapted
from bouquet.privacy.accountant import ClientAccountant, PrivacyBudgetExceeded
from bouquet.privacy.dp import local_train
from bouquet.privacy.dp_config import DPConfig
from bouquet.schema import CommonConfig
from bouquet.strategies import lora as L
from bouquet.tasks.classification import generator
from bouquet.tasks.text import TinyBertCls


def _adapted(task: TinyBertCls) -> tuple[object, list[torch.Tensor]]:
    torch.manual_seed(0)
    model = task.build_model()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    adapted = L.adapted_modules(shapes, ["query", "value"])
    head = L.head_names(shapes, ["classifier"])
    arrays = {**L.initial_adapters("fedit", adapted, 2, 0),
              **{k: model.state_dict()[k].numpy() for k in head}}
    am = build_adapted(task, "fedit", L.LoraConfig(rank=2), arrays, {}, model=model)
    return am, list(am.params.values())


def test_noise_zero_and_no_clipping_equals_plain_training() -> None:
    task = TinyBertCls()
    local = task.partition(0, 4, CommonConfig())
    results = []
    for dp in (None, DPConfig(enabled=True, noise_multiplier=0.0, max_grad_norm=1e9,
                              sampling="shuffle")):
        am, params = _adapted(task)
        local_train(am.model, params, task.loss, local.x_train, local.y_train,  # type: ignore[attr-defined]
                    steps=5, batch_size=16, lr=0.05, optimizer="sgd", generator=generator(1, 2, 3),
                    dp=dp, noise_multiplier=0.0, noise_generator=generator(9),
                    example_loss_fn=task.example_losses)
        results.append([p.detach().clone() for p in params])
    moved = max(float((a - b).abs().max()) for a, b in zip(results[0], _adapted(task)[1], strict=True))
    assert moved > 1e-3
    for a, b in zip(*results, strict=True):
        assert torch.allclose(a, b, atol=1e-6, rtol=1e-5)


def test_clipping_changes_the_update() -> None:
    """Control for the test above: with a tight clip the update differs (the test can fail)."""
    task = TinyBertCls()
    local = task.partition(0, 4, CommonConfig())
    results = []
    for clip in (1e9, 1e-3):
        am, params = _adapted(task)
        local_train(am.model, params, task.loss, local.x_train, local.y_train,  # type: ignore[attr-defined]
                    steps=3, batch_size=16, lr=0.05, optimizer="sgd", generator=generator(1),
                    dp=DPConfig(enabled=True, max_grad_norm=clip, sampling="shuffle"),
                    noise_multiplier=0.0, example_loss_fn=task.example_losses)
        results.append(torch.cat([p.detach().reshape(-1) for p in params]))
    assert not torch.allclose(results[0], results[1], atol=1e-5)


def test_accountant_across_rounds_equals_one_run() -> None:
    context = Context(1, 1, {}, RecordDict(), {})
    sigma, q, steps, rounds, delta = 1.1, 0.02, 7, 5, 1e-5
    eps = []
    for _ in range(rounds):  # a fresh accountant object each round, restored from context.state
        acc = ClientAccountant(NodeState(context, "dp"))
        acc.record(sigma, q, steps)
        eps.append(acc.epsilon(delta))
    single = RDPAccountant()
    for _ in range(rounds * steps):
        single.step(noise_multiplier=sigma, sample_rate=q)
    assert eps[-1] == pytest.approx(single.get_epsilon(delta), rel=1e-12)
    assert all(a < b for a, b in zip(eps, eps[1:], strict=False))  # cumulative, not per round
    history = json.loads(str(context.state.config_records["dp.accountant"]["history"]))
    assert history == [[sigma, q, rounds * steps]]


def test_noise_on_zero_gradient_has_the_configured_std() -> None:
    torch.manual_seed(0)
    model = nn.Linear(100, 100)
    params = list(model.parameters())
    before = torch.cat([p.detach().reshape(-1).clone() for p in params])
    sigma, clip, batch = 2.0, 0.5, 4
    x, y = torch.randn(64, 100), torch.zeros(64)
    zero = lambda m, xb, yb: (m(xb) * 0.0).mean(1)  # noqa: E731
    local_train(model, params, zero, x, y, steps=1,
                batch_size=batch, lr=1.0, optimizer="sgd", generator=generator(0),
                dp=DPConfig(enabled=True, max_grad_norm=clip, sampling="shuffle"),
                noise_multiplier=sigma, noise_generator=generator(1), example_loss_fn=zero)
    after = torch.cat([p.detach().reshape(-1) for p in params])
    noise = (before - after).numpy().astype(np.float64) * batch  # the step divides by the batch
    expected = sigma * clip
    n = noise.size
    assert abs(noise.std() / expected - 1) < 4 * np.sqrt(1 / (2 * n))
    assert abs(noise.mean()) < 4 * expected / np.sqrt(n)
    assert stats.kstest(noise / expected, "norm").pvalue > 1e-3


def test_budget_refusal_is_a_clear_error() -> None:
    acc = ClientAccountant()
    acc.record(1.0, 0.05, 100)
    with pytest.raises(PrivacyBudgetExceeded, match="refusing to train"):
        acc.check(1.0, 0.05, 100, 1e-5, budget=acc.epsilon(1e-5) + 1e-3, who="partition 0")


def _dp_run(tmp_path: Path, name: str, rounds: int, **over: object) -> tuple[LocalGrid, Path]:
    cfg = {"method": "ffa-lora", "task": "tiny-bert-cls", "results-dir": str(tmp_path),
           "run-name": name, "num-server-rounds": rounds, "local-steps": 3, "batch-size": 8,
           "lora.rank": 2, "lr": 0.01, "dp.enabled": True, **over}
    grid = LocalGrid(2, cfg)
    return grid, execute(grid, grid.run_config)


def test_reported_epsilon_is_cumulative_and_reaches_target(tmp_path: Path) -> None:
    grid, summary = _dp_run(tmp_path, "t", 3, **{"dp.target-epsilon": 2.0})
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    eps = [x["epsilon"] for x in lines]
    assert all(a < b for a, b in zip(eps, eps[1:], strict=False))
    assert 1.9 < eps[-1] <= 2.0
    privacy = json.loads(summary.read_text())["privacy"]
    assert {k: privacy[k] for k in ("epsilon", "delta")} == {"epsilon": eps[-1], "delta": 1e-5}
    assert any(s.startswith("num-examples") for s in privacy["not_covered"])
    # equals one accountant over every step of the client that took part in every round
    n = TinyBertCls().num_examples(0, 2, CommonConfig(seed=0))
    hist = json.loads(str(grid.contexts[1000].state.config_records["dp.accountant"]["history"]))
    assert hist[0][1] == pytest.approx(8 / n) and sum(h[2] for h in hist) == 9
    assert ClientAccountant.epsilon_of([tuple(h) for h in hist], 1e-5) <= eps[-1] + 1e-12


def test_client_refuses_beyond_its_budget(tmp_path: Path) -> None:
    _, summary = _dp_run(tmp_path, "b", 2, **{"dp.noise-multiplier": 0.8, "dp.max-epsilon": 1e-3})
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["errors"] == 2 and lines[0]["clients"] == 0
    assert "refusing to train" in lines[0]["failures"][0]["reason"]


#: What a private LoRA reply may carry: the release and what the accountant says about it.
COVERED_METRICS = {"epsilon", "delta", "noise_multiplier", "num-examples"}


@pytest.mark.parametrize("method", ["ffa-lora", "fed-sb"])
def test_private_replies_carry_nothing_outside_the_accountant(method: str, tmp_path: Path) -> None:
    cfg = {"method": method, "task": "tiny-bert-cls", "results-dir": str(tmp_path),
           "run-name": "r", "num-server-rounds": 2, "local-steps": 3, "batch-size": 8,
           "lora.rank": 2, "lr": 0.01, "dp.enabled": True, "dp.noise-multiplier": 1.0}
    grid = LocalGrid(2, cfg)
    seen: list[RecordDict] = []
    for pid in range(2):
        grid.corrupt[pid] = lambda c: seen.append(c) or c  # type: ignore[func-returns-value]
    summary = execute(grid, grid.run_config)
    train = [c for c in seen if "epsilon" in c["metrics"]]  # type: ignore[operator]
    assert len(train) >= 4
    for c in train:
        assert set(c["metrics"]) <= COVERED_METRICS, set(c["metrics"]) - COVERED_METRICS  # type: ignore[arg-type]
        n = TinyBertCls().num_examples(0, 2, CommonConfig())
        assert c["metrics"]["num-examples"] in {n, TinyBertCls().num_examples(1, 2, CommonConfig())}  # type: ignore[index]
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    assert not any("train_loss" in x for x in lines)


def test_server_ignores_a_training_loss_in_a_private_reply(tmp_path: Path) -> None:
    grid, _ = _dp_run(tmp_path, "warm", 1)
    for pid in range(2):
        def add_loss(c: RecordDict) -> RecordDict:
            if "arrays" in c:
                c["metrics"]["train_loss"] = 0.123  # type: ignore[index]
            return c
        grid.corrupt[pid] = add_loss
    summary = execute(grid, {**grid.run_config, "run-name": "leak"})
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    assert lines[0]["clients"] == 2 and "train_loss" not in lines[0]


def _released(tmp_path: Path, name: str, node_seed: int | None) -> np.ndarray:
    """The arrays partition 0 sends in round 1 of a private run (seed 0 for every run)."""
    grid = LocalGrid(1, {"method": "ffa-lora", "task": "tiny-bert-cls", "results-dir": str(tmp_path),
                         "run-name": name, "num-server-rounds": 1, "local-steps": 2,
                         "batch-size": 8, "lora.rank": 2, "lr": 0.01, "dp.enabled": True,
                         "seed": 0})
    ctx = grid.contexts[1000]
    ctx.node_config.pop("dp-seed", None)
    if node_seed is not None:
        ctx.node_config["dp-seed"] = node_seed
    seen: list[RecordDict] = []
    grid.corrupt[0] = lambda c: seen.append(c) or c  # type: ignore[func-returns-value]
    execute(grid, grid.run_config)
    from bouquet.wire.arrays import to_numpy

    arrays = to_numpy(next(c for c in seen if "arrays" in c)["arrays"])  # type: ignore[arg-type]
    return np.concatenate([a.reshape(-1) for a in arrays.values()])


def test_dp_randomness_is_not_a_function_of_the_run_seed(tmp_path: Path) -> None:
    """The server knows the run seed: with it, seeded noise and rows could be replayed."""
    a, b = _released(tmp_path, "a", None), _released(tmp_path, "b", None)
    assert not np.allclose(a, b)
    c, d = _released(tmp_path, "c", 77), _released(tmp_path, "d", 77)  # the node's own seed
    np.testing.assert_array_equal(c, d)


def test_client_refuses_a_delta_of_one_over_n_or_more(tmp_path: Path) -> None:
    _, summary = _dp_run(tmp_path, "d", 1, **{"dp.delta": 0.01})  # ~1000 rows per client
    line = json.loads((summary.parent / "metrics.jsonl").read_text().splitlines()[0])
    assert line["errors"] == 2 and line["clients"] == 0
    assert "dp.delta 0.01 must be in (0, 1/n)" in line["failures"][0]["reason"]


def test_auto_evaluation_of_a_private_run_never_falls_back_to_federated(tmp_path: Path) -> None:
    from bouquet.apps.config import resolve
    from bouquet.apps.runner import evaluation_mode

    cfg = {"method": "ffa-lora", "task": "tiny-bert-cls", "results-dir": str(tmp_path)}
    assert evaluation_mode(resolve(cfg), None) == "federated"
    assert evaluation_mode(resolve({**cfg, "dp.enabled": True}), None) == "none"
    assert evaluation_mode(resolve({**cfg, "dp.enabled": True, "evaluation": "federated"}),
                           None) == "federated"


def test_node_budget_holds_whatever_the_run_config_says(tmp_path: Path) -> None:
    """The run config is the server's; a node's own dp-max-epsilon is enforced regardless."""
    cfg = {"method": "ffa-lora", "task": "tiny-bert-cls", "results-dir": str(tmp_path),
           "run-name": "nodp", "num-server-rounds": 1, "local-steps": 2, "batch-size": 8,
           "lora.rank": 2, "lr": 0.01}
    grid = LocalGrid(2, cfg)
    grid.contexts[1000].node_config["dp-max-epsilon"] = 1.0
    line = json.loads((execute(grid, grid.run_config).parent / "metrics.jsonl")
                      .read_text().splitlines()[0])
    assert line["errors"] == 1 and line["clients"] == 1
    assert "requires DP-SGD" in line["failures"][0]["reason"]
    grid = LocalGrid(2, {**cfg, "run-name": "weak", "dp.enabled": True,
                         "dp.noise-multiplier": 0.5})
    grid.contexts[1001].node_config["dp-max-epsilon"] = 0.5
    line = json.loads((execute(grid, grid.run_config).parent / "metrics.jsonl")
                      .read_text().splitlines()[0])
    assert line["errors"] == 1 and "above the budget 0.5" in line["failures"][0]["reason"]
