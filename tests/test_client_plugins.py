"""The public client functions, called as a Flower user's own ``@app.train()`` would.

Every test uses a model and data that are NOT from bouquet's catalogue (a tiny user-defined
``nn.Module``, user-made batches), checks that the reply passes the method's strategy validation
(the strategy built as the runner builds it, with the user's model as initial arrays, and the
reply's parsed value aggregated), and that the
node's memory lands in ``context.state``.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import torch
from flwr.app import ConfigRecord, Context, Message, RecordDict
from flwr.supercore.task_identity import TaskIdentity
from torch import nn

from bouquet.apps.config import resolve
from bouquet.apps.registry import get_method
from bouquet.apps.runner import build_strategy
from bouquet.clients import compressed_fedavg, fed_ef, fedavg, fedcg, scafcom, scaffold, scallion
from bouquet.strategies.base import BouquetStrategy, NodeReply
from bouquet.strategies.model import to_record
from bouquet.tasks.torch_utils import get_arrays, set_arrays
from bouquet.wire.arrays import to_numpy

LOCAL_STEPS = 3


class TwoLayer(nn.Module):
    """A user's own model (names and shapes unlike any catalogue model)."""

    def __init__(self) -> None:
        super().__init__()
        self.encoder = nn.Linear(5, 7)
        self.decoder = nn.Linear(7, 3)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.decoder(torch.tanh(self.encoder(x)))  # type: ignore[no-any-return]


def user_model() -> nn.Module:
    torch.manual_seed(0)
    return TwoLayer()


def user_batches(n: int = 24, batch: int = 6) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(1)
    x = torch.randn(n, 5, generator=g)
    y = torch.randint(0, 3, (n,), generator=g)
    return [(x[i : i + batch], y[i : i + batch]) for i in range(0, n, batch)]


def user_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> torch.Tensor:
    return nn.functional.cross_entropy(model(batch[0]), batch[1])


def strategy_for(method: str, tmp_path: Path, model: nn.Module | None, **keys: Any
                 ) -> BouquetStrategy:
    """The method's strategy from its factory, holding the user's model."""
    cfg = resolve({"method": method, "task": get_method(method).default_task,
                   "results-dir": str(tmp_path), "run-name": "r", "seed": 2,
                   "local-steps": LOCAL_STEPS, **keys})
    return build_strategy(cfg, None if model is None else to_record(get_arrays(model)))


def node_context(partition_id: int = 0) -> Context:
    return Context(1, 100 + partition_id, {"partition-id": partition_id, "num-partitions": 2},
                   RecordDict(), {})


def instruction(strategy: BouquetStrategy, rnd: int, partition_id: int = 0) -> Message:
    TaskIdentity.run_id, TaskIdentity.node_id, TaskIdentity.task_id = 1, 1, 1
    content = strategy.configure_round(rnd, [partition_id])[partition_id]
    msg = Message(content, dst_node_id=100 + partition_id, message_type="train")
    msg.metadata.__dict__["_message_id"] = uuid.uuid4().hex
    return msg


def admit(strategy: BouquetStrategy, rnd: int, reply: Message, partition_id: int = 0) -> None:
    """The reply passes the strategy's checks and what they parsed is aggregated."""
    assert reply.metadata.reply_to_message_id
    parsed = strategy.admit_train_reply(rnd, partition_id, reply.content)
    strategy.aggregate_round(rnd, [NodeReply(100 + partition_id, partition_id, reply.content, 1, 1,
                                             parsed.value)])


Call = Callable[[Message, Context], Message]

GRADIENT = [
    ("scaffold", {}, lambda m, c: scaffold.train(m, c, user_model(), user_batches(), user_loss,
                                                 lr=0.1, local_steps=LOCAL_STEPS), "committed"),
    ("scaffold", {"scaffold.controls": "I"},
     lambda m, c: scaffold.train(m, c, user_model(), user_batches(), user_loss, lr=0.1,
                                 local_steps=LOCAL_STEPS, controls="I"), "committed"),
    ("scaffold-1up", {}, lambda m, c: scaffold.train_single_uplink(
        m, c, user_model(), user_batches(), user_loss, lr=0.1, local_steps=LOCAL_STEPS),
     "committed"),
    ("scallion", {"scallion.compressor-ratio": 0.3},
     lambda m, c: scallion.train(m, c, user_model(), user_batches(), user_loss, lr=0.1,
                                 local_steps=LOCAL_STEPS, compressor_ratio=0.3), "committed"),
    ("scafcom", {"scafcom.beta": 0.5, "scafcom.compressor-ratio": 0.3},
     lambda m, c: scafcom.train(m, c, user_model(), user_batches(), user_loss, lr=0.1,
                                local_steps=LOCAL_STEPS, beta=0.5, compressor="topk",
                                compressor_ratio=0.3), "committed"),
    ("fedavg-compressed", {"fedavg-compressed.compressor-ratio": 0.3},
     lambda m, c: compressed_fedavg.train(m, c, user_model(), user_batches(), user_loss, lr=0.1,
                                          local_steps=LOCAL_STEPS, compressor_ratio=0.3), None),
    ("fed-ef", {"fed-ef.compressor-ratio": 0.3},
     lambda m, c: fed_ef.train(m, c, user_model(), user_batches(), user_loss, lr=0.1,
                               local_steps=LOCAL_STEPS, compressor_ratio=0.3), "committed"),
    ("fedavg", {}, lambda m, c: fedavg.train(m, c, user_model(), user_batches(), user_loss,
                                             lr=0.1, local_epochs=1), None),
]


@pytest.mark.parametrize(("method", "keys", "call", "memory"), GRADIENT,
                         ids=[g[0] + ("-option-i" if g[1].get("scaffold.controls") == "I" else "")
                              for g in GRADIENT])
def test_gradient_function_on_user_model_passes_validation(
        method: str, keys: dict[str, Any], call: Call, memory: str | None,
        tmp_path: Path) -> None:
    strategy = strategy_for(method, tmp_path, user_model(), **keys)
    context = node_context()
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        reply = call(msg, context)
        assert int(reply.content["metrics"]["num-examples"]) == 24  # type: ignore[index]
        admit(strategy, rnd, reply)
    if memory is not None:
        # round 2 committed round 1's state: c_i (and v_i / e) now live in context.state
        assert f"{method}.{memory}" in context.state.array_records
        assert context.state.array_records[f"{method}.{memory}"].keys()
    if method == "fedavg":
        assert "arrays" in reply.content


def test_keyword_built_strategy_admits_the_function_reply() -> None:
    """A user's ``Scafcom(...)`` (keyword constructor, grid discovery) takes ``scafcom.train``."""
    from bouquet.strategies import Scafcom

    strategy = Scafcom(initial_arrays=to_record(get_arrays(user_model())), local_steps=LOCAL_STEPS,
                       lr=0.1, beta=0.5, compressor="topk", compressor_ratio=0.3)
    assert strategy.federation.discovery == "grid"
    context = node_context()
    for rnd in (1, 2):
        reply = scafcom.train(instruction(strategy, rnd), context, user_model(), user_batches(),
                              user_loss, lr=0.1, local_steps=LOCAL_STEPS, beta=0.5,
                              compressor="topk", compressor_ratio=0.3)
        admit(strategy, rnd, reply)
    assert "scafcom.committed" in context.state.array_records


def test_fedcg_function_on_user_model_passes_validation(tmp_path: Path) -> None:
    strategy = strategy_for("fedcg", tmp_path, user_model(), **{"fedcg.error-feedback": True})
    strategy.sizes = {0: 24}
    context = node_context()
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        reply = fedcg.train(msg, context, user_model(), user_batches(), user_loss, lr=0.1,
                            local_steps=LOCAL_STEPS, error_feedback=True)
        strategy.admit_train_reply(rnd, 0, reply.content)
    assert "fedcg.ef" in context.state.array_records


def test_unknown_or_server_only_options_are_refused(tmp_path: Path) -> None:
    strategy = strategy_for("scafcom", tmp_path, user_model())
    msg = instruction(strategy, 1)
    with pytest.raises(TypeError, match="unknown option 'betta'"):
        scafcom.train(msg, node_context(), user_model(), user_batches(), user_loss, betta=0.1)
    with pytest.raises(TypeError, match="server_lr"):
        scafcom.train(msg, node_context(), user_model(), user_batches(), user_loss, server_lr=2.0)
    with pytest.raises(ValueError, match="beta"):
        scafcom.train(msg, node_context(), user_model(), user_batches(), user_loss, beta=3.0)


def test_mismatched_compressor_is_rejected_by_the_strategy(tmp_path: Path) -> None:
    """The options must match the server's: a differently compressed reply is refused."""
    from bouquet.strategies.base import InvalidReply

    strategy = strategy_for("scafcom", tmp_path, user_model(), **{"scafcom.compressor": "topk"})
    msg = instruction(strategy, 1)
    reply = scafcom.train(msg, node_context(), user_model(), user_batches(), user_loss,
                          local_steps=LOCAL_STEPS, compressor="qsgd")
    with pytest.raises(InvalidReply):
        strategy.admit_train_reply(1, 0, reply.content)


def test_num_examples_counts_a_dataloader_and_can_be_given(tmp_path: Path) -> None:
    from torch.utils.data import DataLoader, TensorDataset

    data = TensorDataset(torch.randn(20, 5), torch.randint(0, 3, (20,)))
    loader = DataLoader(data, batch_size=8, shuffle=True,
                        generator=torch.Generator().manual_seed(0))
    strategy = strategy_for("fedavg", tmp_path, user_model())
    msg = instruction(strategy, 1)
    out = fedavg.train(msg, node_context(), user_model(), loader, user_loss, local_epochs=2)
    assert out.content["metrics"]["num-examples"] == 20  # type: ignore[index]
    assert out.content["metrics"]["steps"] == 6  # type: ignore[index]
    out = fedavg.train(msg, node_context(), user_model(), loader, user_loss, num_examples=7)
    assert out.content["metrics"]["num-examples"] == 7  # type: ignore[index]


def test_catalogue_inputs_through_the_function_match_the_client_app(tmp_path: Path) -> None:
    """The ClientApp's procedure and the public function on the task's model and batches agree."""
    from bouquet.apps.client_app import environment
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.clients.scaffold import ScafcomClient
    from bouquet.clients.task_inputs import task_inputs

    grid = LocalGrid(2, {"method": "scafcom", "task": "digits-mlp", "results-dir": str(tmp_path),
                         "run-name": "r", "seed": 5, "local-steps": 2})
    _, env = environment(next(iter(grid.contexts.values())))
    strategy = strategy_for("scafcom", tmp_path, env.task.build_model(), seed=5)
    msg = instruction(strategy, 1)
    ctx_a, ctx_b = node_context(), node_context()
    env.partition_id = 0
    via_app = ScafcomClient().train(msg, ctx_a, env)
    batches, loss_fn, schedule = task_inputs(env, 1)
    via_function = scafcom.train(msg, ctx_b, env.task.build_model(), batches, loss_fn,
                                 lr=schedule.lr, local_steps=schedule.local_steps,
                                 num_examples=batches.local.num_train, seed=5,
                                 **_client_options(env.section("scafcom")))
    for name in ("payload",):
        a, b = via_app[name], via_function.content[name]
        for k in a.keys():  # type: ignore[union-attr]
            assert np.array_equal(a[k].numpy(), b[k].numpy())  # type: ignore[index]
    assert dict(via_app["metrics"]) == dict(via_function.content["metrics"])  # type: ignore[arg-type]


def _client_options(section: Any) -> dict[str, Any]:
    import dataclasses

    from bouquet.clients.local_training import SERVER_ONLY

    return {f.name: getattr(section, f.name) for f in dataclasses.fields(section)
            if f.name not in SERVER_ONLY}


def test_instruction_config_is_a_config_record(tmp_path: Path) -> None:
    msg = instruction(strategy_for("scaffold", tmp_path, user_model()), 1)
    assert isinstance(msg.content["config"], ConfigRecord)


@pytest.mark.parametrize("method", ["fedkseed", "fedkseed-pro"])
def test_fedkseed_function_on_user_model_passes_validation(method: str, tmp_path: Path) -> None:
    from bouquet.clients import fedkseed

    fedkseed.clear_cache()
    options = {"num_seeds": 16, "local_steps": 5, "lr": 1e-2, "eps": 1e-3}
    strategy = strategy_for(method, tmp_path, user_model(), **{
        "fedkseed.num-seeds": 16, "fedkseed.local-steps": 5, "fedkseed.lr": 1e-2})
    context = node_context()

    def forward_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        return float(user_loss(model, batch))

    w0 = get_arrays(user_model())
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        reply = fedkseed.train(msg, context, user_model(), user_batches(), forward_loss,
                               **options)
        assert int(reply.content["metrics"]["num-examples"]) == 24  # type: ignore[index]
        admit(strategy, rnd, reply)
    # the global model the server's accumulator describes moved away from w0
    glob = fedkseed.global_model(instruction(strategy, 3), user_model(), **options)
    moved = max(float(np.abs(get_arrays(glob)[k] - w0[k]).max()) for k in w0)
    assert moved > 0
    with pytest.raises(TypeError, match="pro_clip"):
        fedkseed.train(msg, context, user_model(), user_batches(), forward_loss, pro_clip=1.0)


class UserBandit:
    """A user's own silo: random unit contexts, a hidden linear reward (no catalogue task)."""

    def __init__(self, dim: int = 6, arms: int = 4) -> None:
        self.dim, self.arms = dim, arms
        self.theta = np.linspace(-0.5, 0.5, dim)

    def contexts(self, rnd: int, step: int) -> np.ndarray:
        x = np.random.default_rng([rnd, step]).standard_normal((self.arms, self.dim))
        return x / np.linalg.norm(x, axis=1, keepdims=True)  # type: ignore[no-any-return]

    def reward(self, rnd: int, step: int, arm: int) -> float:
        return float(self.contexts(rnd, step)[arm] @ self.theta)


BANDIT_KEYS = {"linucb.num-silos": 2, "linucb.horizon-rounds": 3, "linucb.batch-steps": 5,
               "num-server-rounds": 3}
BANDITS = [("fedlinucb", "none", {}),
           ("dp-fedlinucb-ldp", "ldp", {"epsilon": 2.0, "delta": 0.1}),
           ("dp-fedlinucb-sdp-amp", "sdp-amp", {"epsilon": 2.0, "delta": 0.1}),
           ("dp-fedlinucb-sdp-vecsum", "sdp-vecsum", {"epsilon": 2.0, "delta": 0.1})]


@pytest.mark.parametrize(("method", "variant", "dp"), BANDITS, ids=[b[0] for b in BANDITS])
def test_bandit_function_on_user_source_passes_validation(
        method: str, variant: str, dp: dict[str, Any], tmp_path: Path) -> None:
    from bouquet.clients import linucb

    keys = {**BANDIT_KEYS, **{f"dp-linucb.{k}": v for k, v in dp.items()}}
    strategy = strategy_for(method, tmp_path, None, **keys)
    strategy.partitions = {100: 0, 101: 1}
    context = node_context()
    context.node_config["dp-seed"] = 7
    source = UserBandit()
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        reply = linucb.train(msg, context, source, context_dim=6, variant=variant, seed=2,
                             num_silos=2, horizon_rounds=3, batch_steps=5, **dp)
        strategy.admit_train_reply(rnd, 0, reply.content)
    assert context.state.config_records[f"{method}.progress"]["round"] == 2
    # the silo refuses a protocol that differs from the server's
    with pytest.raises(ValueError, match="batch-steps"):
        linucb.train(instruction(strategy, 3), context, source, context_dim=6, variant=variant,
                     num_silos=2, horizon_rounds=3, batch_steps=4, **dp)


def tiny_llama() -> nn.Module:
    """A tiny random Llama classifier (the catalogue's LoRA task is a BERT), built offline."""
    from transformers import LlamaConfig, LlamaForSequenceClassification

    torch.manual_seed(0)
    cfg = LlamaConfig(vocab_size=40, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                      num_attention_heads=2, num_key_value_heads=2, num_labels=2,
                      pad_token_id=0, max_position_embeddings=32)
    return LlamaForSequenceClassification(cfg)  # type: ignore[no-any-return]


def token_rows(n: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(3)
    return torch.randint(1, 40, (n, 6), generator=g), torch.randint(0, 2, (n,), generator=g)


def llama_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(input_ids=x).logits, y)


def llama_example_losses(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    return nn.functional.cross_entropy(model(input_ids=x).logits, y, reduction="none")


LORA_KEYS = {"lora.rank": 2, "lora.target-modules": "q_proj,v_proj",
             "lora.head-modules": "score", "batch-size": 8}
LORA = [("fedit", "fedit", {}), ("ffa-lora", "ffa_lora", {})]


@pytest.mark.parametrize(("method", "module", "keys"), LORA, ids=[m[0] for m in LORA])
def test_lora_function_on_another_architecture_passes_validation(
        method: str, module: str, keys: dict[str, Any], tmp_path: Path) -> None:
    import importlib

    fn = importlib.import_module(f"bouquet.clients.{module}").train
    strategy = strategy_for(method, tmp_path, tiny_llama(), **LORA_KEYS, **keys)
    context = node_context()
    x, y = token_rows()
    extra = {"init_samples": 8} if method == "fed-sb" else {}
    for rnd in (1, 2, 3):
        msg = instruction(strategy, rnd)
        reply = fn(msg, context, tiny_llama(), x, y, llama_loss, target_modules=["q_proj", "v_proj"],
                   head_modules="score", rank=2, lr=1e-2, local_steps=LOCAL_STEPS, batch_size=8,
                   seed=2, **extra)
        assert reply.content["metrics"]["num-examples"] >= 1  # type: ignore[index]
        admit(strategy, rnd, reply)
    sent = set(reply.content["arrays"].keys())  # type: ignore[union-attr]
    assert any("q_proj" in k for k in sent) and any("score" in k for k in sent)


def test_fed_sb_function_runs_the_init_phase_and_keeps_the_frame(tmp_path: Path) -> None:
    """Fed-SB in a user's own ClientApp on the in-process grid: init gradient, frame, rounds."""
    from bouquet.apps.client_app import app as builtin_app
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.clients import fed_sb

    x, y = token_rows()

    def user_app(msg: Message, context: Context) -> Message:
        if msg.metadata.message_type.startswith("query"):  # discovery, until it goes away
            return builtin_app(msg, context)
        return fed_sb.train(msg, context, tiny_llama(), x, y, llama_loss,
                            target_modules="q_proj,v_proj", head_modules="score", rank=2,
                            lr=1e-2, local_steps=LOCAL_STEPS, batch_size=8, seed=2,
                            init_samples=8)

    run = {"method": "fed-sb", "results-dir": str(tmp_path), "run-name": "r", "seed": 2,
           "local-steps": LOCAL_STEPS, "fed-sb.init-samples": 8, "sample-deadline": 5.0,
           **LORA_KEYS}
    grid = LocalGrid(2, run, client=user_app)
    strategy = strategy_for("fed-sb", tmp_path, tiny_llama(), **{
        k: v for k, v in run.items() if k not in ("method", "results-dir", "run-name")})
    for rnd in (1, 2):
        rlog = strategy.train_round(grid, rnd)
        assert rlog.clients == 2 and rlog.rejected == rlog.errors == 0, rlog.failures
    for context in grid.contexts.values():
        assert "fed-sb.frame" in context.state.array_records  # the frame lives on the node


def test_lora_function_with_dp_sgd_reports_epsilon_and_keeps_the_accountant(
        tmp_path: Path) -> None:
    pytest.importorskip("opacus")
    from bouquet.clients import ffa_lora

    keys = {**LORA_KEYS, "dp.enabled": True, "dp.noise-multiplier": 1.0, "dp.delta": 1e-3}
    strategy = strategy_for("ffa-lora", tmp_path, tiny_llama(), **keys)
    context = node_context()
    context.node_config["dp-seed"] = 11
    x, y = token_rows()
    eps = []
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        reply = ffa_lora.train(msg, context, tiny_llama, x, y, llama_loss,
                               target_modules="q_proj,v_proj", head_modules="score", rank=2,
                               lr=1e-2, local_steps=2, batch_size=8, seed=2,
                               dp={"noise_multiplier": 1.0, "delta": 1e-3},
                               example_loss_fn=llama_example_losses, num_server_rounds=2)
        admit(strategy, rnd, reply)
        eps.append(float(reply.content["metrics"]["epsilon"]))  # type: ignore[index,arg-type]
        assert "train_loss" not in reply.content["metrics"]  # type: ignore[operator]
    assert 0 < eps[0] < eps[1]  # one accountant across rounds, in context.state
    assert any(k.startswith("dp.") for k in context.state.keys())


def test_catalogue_tasks_satisfy_the_protocols_their_clients_need() -> None:
    from bouquet.apps.registry import get_task
    from bouquet.tasks.protocols import BanditTask, ModelTask, PrivateTask, SupervisedTask, Task

    for name in ("digits-mlp", "fmnist-cnn"):
        task = get_task(name).load()
        assert isinstance(task, SupervisedTask) and isinstance(task, PrivateTask)
    bandit = get_task("synth-bandit").load()
    assert isinstance(bandit, BanditTask) and isinstance(bandit, Task)
    assert not isinstance(bandit, ModelTask)


def test_a_method_on_the_wrong_kind_of_task_says_what_it_needs() -> None:
    from bouquet.apps.registry import get_task
    from bouquet.clients.base import ClientEnv
    from bouquet.clients.task_inputs import task_inputs
    from bouquet.schema import CommonConfig

    env = ClientEnv(CommonConfig(), {}, get_task("synth-bandit").load(), 0, 1)
    with pytest.raises(TypeError, match="needs a task with a model, batches and a loss"):
        task_inputs(env, 1)


def test_torch_helpers_have_one_home() -> None:
    from bouquet.tasks import classification, torch_utils

    for name in ("get_arrays", "set_arrays", "generator"):
        assert getattr(classification, name) is getattr(torch_utils, name)


def _rebuilt_from_pristine_w0(accumulator: np.ndarray, num_seeds: int, lr: float
                              ) -> dict[str, np.ndarray]:
    """The reference: a pristine ``w0`` with every coefficient of ``accumulator`` replayed."""
    from bouquet.clients.zeroth_order import Directions, canonical_parameters, replay
    from bouquet.wire.fedkseed import candidate_seeds

    model = user_model()
    replay(Directions(canonical_parameters(model)), candidate_seeds(42, num_seeds), accumulator,
           lr)
    return get_arrays(model)


def _max_gap(a: dict[str, np.ndarray], b: dict[str, np.ndarray]) -> float:
    return max(float(np.abs(a[k] - b[k]).max()) for k in a)


@pytest.mark.parametrize("model_key", [None, "users-two-layer"])
def test_fedkseed_one_module_passed_every_round_is_rebuilt_from_its_w0(
        model_key: str | None, tmp_path: Path) -> None:
    """A user's ClientApp passing the SAME module object to ``train`` / ``global_model``.

    After every message the node's model must be ``w0 - lr sum_k A[k] z(s_k)`` for the
    coefficients it holds (the server's accumulator semantics), whatever it did before, and the
    cache key must not follow the module's moving weights.
    """
    from bouquet.clients import fedkseed
    from bouquet.wire.fedkseed import read_down

    fedkseed.clear_cache()
    options = {"num_seeds": 16, "local_steps": 5, "lr": 1e-2, "eps": 1e-3}
    strategy = strategy_for("fedkseed", tmp_path, user_model(), **{
        "fedkseed.num-seeds": 16, "fedkseed.local-steps": 5, "fedkseed.lr": 1e-2})
    context = node_context()
    net = user_model()  # built once, as a ClientApp module-level model would be

    def forward_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        return float(user_loss(model, batch))

    contexts = [node_context(0), node_context(1)]  # two nodes served by one process
    keys, gaps = set(), []
    for rnd in (1, 2, 3):
        replies = []
        for pid, context in enumerate(contexts):
            reply = fedkseed.train(instruction(strategy, rnd, pid), context, net, user_batches(),
                                   forward_loss, model_key=model_key, **options)
            rep = fedkseed.cached_replica()
            assert rep is not None
            keys.add(rep.key)
            reference = _rebuilt_from_pristine_w0(rep.applied, 16, 1e-2)
            gaps.append(_max_gap(get_arrays(rep.model), reference))
            parsed = strategy.admit_train_reply(rnd, pid, reply.content)
            replies.append(NodeReply(100 + pid, pid, reply.content, 1, 1, parsed.value))
        strategy.aggregate_round(rnd, replies)
        msg = instruction(strategy, rnd + 1)  # the evaluation between rounds
        glob = fedkseed.global_model(msg, net, model_key=model_key, **options)
        keys.add(fedkseed.cached_replica().key)  # type: ignore[union-attr]
        accumulator = read_down(msg.content, 16).accumulator
        gaps.append(_max_gap(get_arrays(glob), _rebuilt_from_pristine_w0(accumulator, 16, 1e-2)))
    moved = _max_gap(get_arrays(glob), get_arrays(user_model()))
    assert moved > 1e-3
    assert max(gaps) < 1e-5, (gaps, moved)
    assert len(keys) == 1, keys


def test_fedkseed_factory_handing_back_the_moved_module_is_refused(tmp_path: Path) -> None:
    """A factory must build ``w0`` afresh: one returning the cached (moved) module is an error."""
    from bouquet.clients import fedkseed

    fedkseed.clear_cache()
    options = {"num_seeds": 16, "local_steps": 5, "lr": 1e-2, "eps": 1e-3}
    strategy = strategy_for("fedkseed", tmp_path, user_model(), **{
        "fedkseed.num-seeds": 16, "fedkseed.local-steps": 5, "fedkseed.lr": 1e-2})
    net = user_model()

    def forward_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        return float(user_loss(model, batch))

    fedkseed.train(instruction(strategy, 1, 0), node_context(0), lambda: net, user_batches(),
                   forward_loss, model_key="net", **options)
    # node 1 of round 1 (A = 0) rebuilds from w0: the factory hands back the moved module
    with pytest.raises(ValueError, match="build w0 afresh"):
        fedkseed.train(instruction(strategy, 1, 1), node_context(1), lambda: net,
                       user_batches(), forward_loss, model_key="net", **options)


def test_fedkseed_a_step_that_fails_part_way_forgets_the_moved_replica(tmp_path: Path) -> None:
    """The user's loss raising at the third step: the weights have moved by steps the replica
    does not hold, so the cached replica must go (the next message rebuilds from w0)."""
    from bouquet.clients import fedkseed

    fedkseed.clear_cache()
    options = {"num_seeds": 16, "local_steps": 5, "lr": 1e-2, "eps": 1e-3}
    strategy = strategy_for("fedkseed", tmp_path, user_model(), **{
        "fedkseed.num-seeds": 16, "fedkseed.local-steps": 5, "fedkseed.lr": 1e-2})
    calls = {"n": 0}

    def failing_loss(model: nn.Module, batch: tuple[torch.Tensor, torch.Tensor]) -> float:
        calls["n"] += 1
        if calls["n"] == 5:  # the third step's first forward
            raise RuntimeError("out of memory")
        return float(user_loss(model, batch))

    with pytest.raises(RuntimeError, match="out of memory"):
        fedkseed.train(instruction(strategy, 1, 0), node_context(0), user_model, user_batches(),
                       failing_loss, model_key="users-two-layer", **options)
    assert calls["n"] == 5
    assert fedkseed.cached_replica() is None


def full_gradient(weights: dict[str, np.ndarray]) -> np.ndarray:
    """The gradient of the mean loss over all 24 user examples at ``weights``, in one batch."""
    model = user_model()
    set_arrays(model, weights)
    batches = user_batches()
    user_loss(model, (torch.cat([b[0] for b in batches]), torch.cat([b[1] for b in batches]))
              ).backward()
    return np.concatenate([p.grad.numpy().ravel() for p in model.parameters()
                           if p.grad is not None])


def test_scaffold_option_i_control_is_the_gradient_at_the_server_model(tmp_path: Path) -> None:
    """Option I (Karimireddy et al. 2020, Algorithm 1): ``c_i+ = g_i(x)``, the client's full local
    gradient at the server model, so ``dc = g_i(x) - c_i``; the local steps, ``dy`` and the
    caller's final model are as under option II."""
    # N = 2 nodes (one answers), so that c = c_i / 2 differs from c_i after round 1
    strategy = strategy_for("scaffold", tmp_path, user_model(), **{"scaffold.controls": "I",
                                                                   "scaffold.num-clients": 2})
    # round 1 under option II, on a node of its own: the reference for dy
    msg = instruction(strategy, 1)
    other = scaffold.train(msg, node_context(), user_model(), user_batches(), user_loss,
                           lr=0.1, local_steps=LOCAL_STEPS, controls="II")
    dy_ii, dc_ii = strategy.admit_train_reply(1, 0, other.content).value.vectors
    # rounds 1 and 2 under option I on one node (its c_i is g(x_1) after round 1)
    context, c_i = node_context(), None
    for rnd in (1, 2):
        msg = instruction(strategy, rnd)
        x = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        model = user_model()
        reply = scaffold.train(msg, context, model, user_batches(), user_loss, lr=0.1,
                               local_steps=LOCAL_STEPS, controls="I")
        parsed = strategy.admit_train_reply(rnd, 0, reply.content)
        dy, dc = parsed.value.vectors
        g = full_gradient(x)
        expected = g if c_i is None else g - c_i
        np.testing.assert_allclose(dc, expected, rtol=1e-5, atol=1e-6)
        # the caller's model ends the round at y = x + dy
        y = np.concatenate([a.ravel() for a in get_arrays(model).values()])
        np.testing.assert_allclose(y, np.concatenate([a.ravel() for a in x.values()]) + dy,
                                   atol=1e-6)
        if rnd == 1:
            np.testing.assert_array_equal(dy, dy_ii)  # the same local steps
            assert np.abs(dc - dc_ii).max() > 1e-3  # option II's control is another vector
        strategy.aggregate_round(rnd, [NodeReply(100, 0, reply.content, 1, 1, parsed.value)])
        c_i = g
    assert np.abs(dc).max() > 1e-3  # round 2 moved the control


def test_single_uplink_scaffold_refuses_option_i_controls(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="controls"):
        strategy_for("scaffold-1up", tmp_path, user_model(), **{"scaffold.controls": "I"})
    from bouquet.clients.local_training import section_from
    from bouquet.clients.scaffold import SingleUplinkClient, public_round
    from bouquet.strategies.sections.scaffold import ScaffoldConfig

    msg = instruction(strategy_for("scaffold-1up", tmp_path, user_model()), 1)
    with pytest.raises(ValueError, match="controls='II'"):
        public_round(SingleUplinkClient(), section_from(ScaffoldConfig, {"controls": "I"}), msg,
                     node_context(), user_model(), user_batches(), user_loss, lr=0.1,
                     local_steps=LOCAL_STEPS, local_epochs=1, num_examples=None, seed=0)
