"""Node side of FedIT, FFA-LoRA and Fed-SB: PEFT LoRA on the task's model, optional DP-SGD.

Each round the client copies the task's pretrained model, injects LoRA layers with PEFT
(``peft.inject_adapter_in_model``) on the adapted modules that
:func:`bouquet.strategies.lora_layout.adapted_modules` names (so server and client agree), loads the
received arrays, trains only the method's trainable tensors (plus the head) and replies with
exactly those tensors. For Fed-SB the PEFT ``lora_A`` of each layer is replaced by
:class:`FramedA` (``x -> R A x``) so the layer computes ``s B R A x``; A and B are frozen.

Per-client memory in ``context.state``: Fed-SB's frame (``fed-sb.frame``) and, in private mode, the
privacy accountant (``dp.accountant``), which lives across rounds.

In private mode (``dp.enabled``) a reply carries the released arrays, ``epsilon``, ``delta``,
``noise_multiplier`` and ``num-examples`` (the row count, treated as public as in Opacus), and
nothing else computed from the training rows; which rows a step uses and the noise come from the
node's secret randomness (:func:`bouquet.privacy.dp.secret_generator`), never the run seed.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.privacy.dp import ExampleLossFn, LossFn
from bouquet.privacy.dp_config import DP_MAX_EPSILON_KEY, DP_SEED_KEY, DPConfig
from bouquet.schema import node_config_float
from bouquet.strategies.lora_layout import (
    Adapted,
    adapted_modules,
    head_names,
    lora_a_init,
    lora_variant,
    merge,
    split_names,
)
from bouquet.strategies.sections.lora import FedSBConfig, LoraConfig
from bouquet.tasks.torch_utils import generator
from bouquet.wire.arrays import to_numpy, to_record
from bouquet.wire.lora import FRAME_ID_KEY, FRAME_RECORD, GRADS_RECORD, PHASE_INIT, PHASE_TRAIN


@dataclasses.dataclass
class AdaptedModel:
    """A model with LoRA layers and the canonical name -> parameter map of what travels."""

    model: nn.Module
    adapted: list[Adapted]
    head: dict[str, tuple[int, ...]]
    params: dict[str, torch.Tensor]

    def arrays(self) -> dict[str, np.ndarray]:
        """The travelling tensors as float32 numpy arrays (canonical order)."""
        return {k: p.detach().cpu().numpy().astype(np.float32).copy()
                for k, p in self.params.items()}

    def merged(self, variant: str, fixed: dict[str, np.ndarray], s: float,
               base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Merged full weights (numpy), as the server computes them."""
        return merge(variant, base, self.adapted, self.arrays(), fixed, s)


class FramedA(nn.Linear):
    """Fed-SB's ``x -> R (A x)`` in the place of PEFT's ``lora_A`` (A frozen, R trained).

    It stays an ``nn.Linear`` whose ``weight`` is A, because PEFT reads ``lora_A.weight``; R is a
    child ``nn.Linear`` so Opacus computes its per-sample gradients with the standard sampler.
    """

    def __init__(self, a: nn.Linear, rank: int) -> None:
        super().__init__(a.in_features, a.out_features, bias=False)
        self.weight = a.weight
        self.lora_R = nn.Linear(rank, rank, bias=False)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        """``R (A x)``."""
        return self.lora_R(nn.functional.linear(x, self.weight))  # type: ignore[no-any-return]


def _layer_tensors(layer: nn.Module) -> tuple[nn.Linear, nn.Linear]:
    return layer.lora_A["default"], layer.lora_B["default"]  # type: ignore[index,return-value]


def build_adapted(task: Any | None, variant: str, cfg: LoraConfig, arrays: dict[str, np.ndarray],
                  fixed: dict[str, np.ndarray], model: nn.Module | None = None) -> AdaptedModel:
    """Copy the task's model, inject LoRA, load ``arrays`` (travelling) and ``fixed`` (frozen).

    Parameters
    ----------
    task : object or None
        The task (``build_model()``), used when ``model`` is not given.
    variant : str
        ``"fedit"``, ``"ffa"`` or ``"fedsb"``.
    cfg : LoraConfig
        Rank, alpha, targets, head.
    arrays : dict
        The received travelling arrays (adapters and head).
    fixed : dict
        Frozen arrays: FFA's A, Fed-SB's B and A.
    model : nn.Module, optional
        A model to adapt instead of ``task.build_model()``.

    """
    from peft import LoraConfig as PeftLoraConfig
    from peft import inject_adapter_in_model

    if model is None:
        if task is None:
            raise ValueError("build_adapted needs a model or a task")
        model = task.build_model()
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    adapted = adapted_modules(shapes, split_names(cfg.target_modules))
    head = {k: shapes[k] for k in head_names(shapes, split_names(cfg.head_modules))}
    peft_cfg = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha or cfg.rank,  # type: ignore[arg-type]
                              lora_dropout=0.0,
                              target_modules=[a.module for a in adapted], bias="none")
    model = inject_adapter_in_model(peft_cfg, model)
    for p in model.parameters():
        p.requires_grad_(False)
    kind = lora_variant(variant)
    params: dict[str, torch.Tensor] = {}
    named = dict(model.named_parameters())
    with torch.no_grad():
        for a in adapted:
            layer = model.get_submodule(a.module)
            lin_a, lin_b = _layer_tensors(layer)
            mod = a.module
            if kind.framed:
                framed = FramedA(lin_a, cfg.rank)
                layer.lora_A["default"] = framed  # type: ignore[index,operator,assignment]
                lin_r = framed.lora_R
                lin_a.weight.copy_(torch.from_numpy(fixed[f"{mod}.lora_A"]))
                lin_b.weight.copy_(torch.from_numpy(fixed[f"{mod}.lora_B"]))
                lin_r.weight.copy_(torch.from_numpy(arrays[f"{mod}.lora_R"]))
                params[f"{mod}.lora_R"] = lin_r.weight
            else:
                a_travels = "lora_A" in kind.sends
                src_a = arrays if a_travels else fixed
                lin_a.weight.copy_(torch.from_numpy(src_a[f"{mod}.lora_A"]))
                lin_b.weight.copy_(torch.from_numpy(arrays[f"{mod}.lora_B"]))
                if a_travels:
                    params[f"{mod}.lora_A"] = lin_a.weight
                params[f"{mod}.lora_B"] = lin_b.weight
        for k in head:
            if k not in named:
                raise ValueError(_tied_head_message(model, k))
            named[k].copy_(torch.from_numpy(arrays[k]))
            params[k] = named[k]
    for t in params.values():
        t.requires_grad_(True)
    return AdaptedModel(model, adapted, head, params)


def _tied_head_message(model: nn.Module, name: str) -> str:
    """Why head tensor ``name`` (a state-dict entry, not a parameter of its own) cannot train."""
    ptr = model.state_dict()[name].data_ptr()
    twins = [n for n, p in model.named_parameters() if p.data_ptr() == ptr]
    what = f"tied to {twins[0]!r}" if twins else "an alias of another tensor"
    return (f"lora.head-modules: {name!r} is not a parameter of its own: it is {what} (e.g. an "
            "output embedding tied to the input one). Name the parameter itself, or leave it "
            "frozen (a prompted task reads its verbalizer from it)")


def ffa_fixed(adapted: list[Adapted], rank: int, seed: int) -> dict[str, np.ndarray]:
    """FFA-LoRA's frozen A of every matrix, derived from the run seed (never sent)."""
    return {f"{a.module}.lora_A": lora_a_init(seed, i, rank, a.n)
            for i, a in enumerate(adapted)}


#: What builds the model to adapt: the model itself (used once) or a zero-argument factory.
ModelSource = nn.Module | Callable[[], nn.Module]


@dataclasses.dataclass
class LoraJob:
    """Everything one LoRA-family round needs besides the message and the context.

    Attributes
    ----------
    model : ModelSource
        The pretrained model to adapt (a fresh one per call: adapters are injected in place).
    x, y : torch.Tensor
        The node's training rows (inputs and labels).
    loss_fn : LossFn
        ``loss_fn(model, x, y)`` -> mean loss of a batch.
    example_loss_fn : ExampleLossFn or None
        ``fn(model, x, y)`` -> one loss per example; required with DP-SGD.
    lora : LoraConfig
        Rank, alpha, targets, head, optimiser (the server's ``lora`` section).
    fed_sb : FedSBConfig
        Fed-SB's initialisation keys.
    dp : DPConfig or None
        DP-SGD settings; None or ``enabled=False`` trains plainly.
    seed, partition_id : int
        Run seed (FFA's frozen A, the plain path's shuffling) and the node's index.
    batch_size, steps : int
        Local batches and steps per round.
    lr : float
        Local learning rate.
    num_server_rounds : int
        Rounds the privacy calibration plans for (target-epsilon mode).

    """

    model: ModelSource
    x: torch.Tensor
    y: torch.Tensor
    loss_fn: LossFn
    example_loss_fn: ExampleLossFn | None
    lora: LoraConfig
    fed_sb: FedSBConfig
    dp: DPConfig | None
    seed: int
    partition_id: int
    batch_size: int
    steps: int
    lr: float
    num_server_rounds: int

    @property
    def num_train(self) -> int:
        """Number of local training rows."""
        return int(len(self.y))

    @property
    def private(self) -> bool:
        """Whether DP-SGD is on."""
        return self.dp is not None and self.dp.enabled

    def build(self) -> nn.Module:
        """The model to adapt."""
        return self.model if isinstance(self.model, nn.Module) else self.model()

    def example_losses(self) -> ExampleLossFn:
        """The per-example loss DP-SGD needs (a clear error when there is none)."""
        if self.example_loss_fn is None:
            raise ValueError("DP-SGD needs example_loss_fn(model, x, y) -> one loss per example")
        return self.example_loss_fn


def task_job(env: ClientEnv) -> LoraJob:
    """The :class:`LoraJob` of the catalogue task."""
    from bouquet.privacy.dp import example_losses_of

    task = env.supervised()
    local = env.local_data()
    dp: DPConfig | None = env.sections.get("dp")
    return LoraJob(
        model=task.build_model, x=local.x_train, y=local.y_train, loss_fn=task.loss,
        example_loss_fn=example_losses_of(task) if dp is not None and dp.enabled else None,
        lora=env.section("lora"), fed_sb=env.sections.get("fed-sb") or FedSBConfig(), dp=dp,
        seed=env.common.seed, partition_id=env.partition_id, batch_size=env.common.batch_size,
        steps=int(task.num_steps(env.common, local.num_train)), lr=env.common.lr,
        num_server_rounds=env.common.num_server_rounds)


class LoraClient(ClientProcedure):
    """Local procedure shared by the three methods; subclasses set :attr:`variant`."""

    variant = "fedit"

    # ------------------------------------------------------------------ set-up
    def fixed(self, msg: Message, context: Context, job: LoraJob,
              adapted: list[Adapted]) -> dict[str, np.ndarray]:
        """The frozen arrays: FFA's A from the seed; Fed-SB's frame (message or node state)."""
        kind = lora_variant(self.variant)
        if kind.seeded_frozen_a:
            return ffa_fixed(adapted, job.lora.rank, job.seed)
        if not kind.framed:
            return {}
        state = NodeState(context, "fed-sb")
        want = int(message_config(msg).get(FRAME_ID_KEY, 0))  # type: ignore[arg-type]
        if FRAME_RECORD in msg.content:
            frame = to_numpy(msg.content[FRAME_RECORD])  # type: ignore[arg-type]
            state.set_arrays("frame", frame)
            state.set_values("frame-meta", {"id": want})
            return frame
        held = state.arrays("frame")
        if held is None or int(state.values("frame-meta").get("id", -1)) != want:  # type: ignore[arg-type]
            raise RuntimeError(
                f"partition {job.partition_id}: Fed-SB frame {want} is not held by this node "
                "(its state was lost); the server must send the frame again"
            )
        return held

    def adapted_model(self, msg: Message, context: Context, job: LoraJob) -> AdaptedModel:
        """The job's model with this round's adapters loaded."""
        arrays = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        model = job.build()
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        adapted = adapted_modules(shapes, split_names(job.lora.target_modules))
        fixed = self.fixed(msg, context, job, adapted)
        return build_adapted(None, self.variant, job.lora, arrays, fixed, model=model)

    # ------------------------------------------------------------------ procedures
    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Local training on the catalogue task (see :meth:`run`)."""
        return self.run(msg, context, task_job(env))

    def run(self, msg: Message, context: Context, job: LoraJob) -> RecordDict:
        """Local training (or Fed-SB's init gradient when ``phase`` asks for it)."""
        config = message_config(msg)
        rnd = int(config["server-round"])  # type: ignore[arg-type]
        _require_dp(context, job.dp, job.partition_id)
        if config.get("phase", PHASE_TRAIN) == PHASE_INIT:
            return self.init_gradient(msg, context, job, rnd)
        am = self.adapted_model(msg, context, job)
        dp = job.dp
        if dp is None or not dp.enabled:
            stats = _train(am, job, context, rnd=rnd)
            metrics: dict[str, Any] = {"num-examples": job.num_train}
            if np.isfinite(stats["train_loss"]):
                metrics["train_loss"] = stats["train_loss"]
            return RecordDict({"arrays": to_record(am.arrays()), "metrics": MetricRecord(metrics)})
        # Private: the reply holds the released arrays and what the accountant says about them,
        # nothing else computed from the training rows (no training loss).
        from bouquet.privacy.accountant import dp_events

        accountant, sigma = self._accountant(context, job, dp)
        q, count = dp_events(dp.sampling, job.batch_size, job.num_train, job.steps)
        accountant.check(sigma, q, count, dp.delta, _budget(dp, context),
                         who=f"partition {job.partition_id}")
        _train(am, job, context, rnd=rnd, dp=dp, sigma=sigma)
        accountant.record(sigma, q, count)
        metrics = {"epsilon": accountant.epsilon(dp.delta), "delta": dp.delta,
                   "noise_multiplier": sigma, "num-examples": job.num_train}
        return RecordDict({"arrays": to_record(am.arrays()), "metrics": MetricRecord(metrics)})

    def evaluate(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Evaluate the global adapters on this node's held-out rows."""
        am = self.adapted_model(msg, context, task_job(env))
        local = env.local_data()
        metrics = env.evaluated().evaluate_model(am.model, local.x_test, local.y_test)
        metrics["num-examples"] = int(len(local.y_test))
        return RecordDict({"metrics": MetricRecord(metrics)})

    def init_gradient(self, msg: Message, context: Context, job: LoraJob, rnd: int
                      ) -> RecordDict:
        """Fed-SB round 0: summed gradients of the adapted full matrices (private if DP is on)."""
        model = job.build()
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        adapted = adapted_modules(shapes, split_names(job.lora.target_modules))
        heads = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        named = dict(model.named_parameters())
        for p in model.parameters():
            p.requires_grad_(False)
        with torch.no_grad():
            for k, arr in heads.items():
                named[k].copy_(torch.from_numpy(arr))
        params = [named[a.weight] for a in adapted]
        for p in params:
            p.requires_grad_(True)
        dp = job.dp
        metrics: dict[str, Any] = {}
        model.train()
        if dp is not None and dp.enabled:
            from bouquet.privacy.dp import poisson_batches, private_gradient_sum, secret_generator

            accountant, sigma = self._accountant(context, job, dp)
            q = _rate(job.batch_size, job.num_train)
            accountant.check(sigma, q, 1, dp.delta, _budget(dp, context),
                             who=f"partition {job.partition_id}")
            seed = _dp_seed(context)
            idx = next(poisson_batches(job.num_train, job.batch_size,
                                       secret_generator(seed, job.partition_id, rnd, 0x5B)))
            grads = private_gradient_sum(
                model, params, job.example_losses(), job.x[idx], job.y[idx],
                max_grad_norm=dp.max_grad_norm, noise_multiplier=sigma,
                noise_generator=secret_generator(seed, job.partition_id, rnd, 0xD9))
            accountant.record(sigma, q, 1)
            metrics.update(epsilon=accountant.epsilon(dp.delta), delta=dp.delta)
            # the row count, not the size of the secret Poisson batch (which is not noised)
            used = job.num_train
        else:
            gen = generator(job.seed, rnd, job.partition_id, 0x5B)
            count = min(job.fed_sb.init_samples, job.num_train)
            idx = torch.randperm(job.num_train, generator=gen)[:count]
            bs = job.batch_size
            for i in range(0, count, bs):
                j = idx[i : i + bs]
                (job.loss_fn(model, job.x[j], job.y[j]) * len(j)).backward()
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            used = count
        out = {a.module: g.detach().numpy().astype(np.float32) for a, g in zip(adapted, grads,
                                                                               strict=True)}
        metrics["num-examples"] = max(used, 1)
        return RecordDict({GRADS_RECORD: to_record(out), "metrics": MetricRecord(metrics)})

    # ------------------------------------------------------------------ privacy
    def _accountant(self, context: Context, job: LoraJob, dp: DPConfig) -> tuple[Any, float]:
        """Return the persistent accountant and the run's noise multiplier.

        Target-epsilon mode calibrates sigma for a client in every round: ``rounds x`` this
        round's events at their rate, plus Fed-SB's init release counted as one more such event
        (its Poisson rate is at most that rate, so this over-counts, never under-counts). A
        calibration other than the one of this client's earlier releases in the run is refused
        (:func:`bouquet.privacy.accountant.keep_calibration`).
        """
        from bouquet.privacy.accountant import (
            ClientAccountant,
            check_delta,
            dp_events,
            keep_calibration,
            noise_for,
        )

        n = job.num_train
        who = f"partition {job.partition_id}"
        check_delta(dp.delta, n, who=who)
        q, count = dp_events(dp.sampling, job.batch_size, n, job.steps)
        total = job.num_server_rounds * count + self._extra_steps(job)
        sigma = noise_for(dp, q, total)
        state = NodeState(context, "dp")
        # the node's own check that the noise stays the one its earlier releases used (a server
        # resumed with other num-server-rounds would recalibrate it in target-epsilon mode)
        keep_calibration(state, sigma, job.num_server_rounds if dp.target_epsilon > 0 else 0,
                         who=who)
        return ClientAccountant(state), sigma

    def _extra_steps(self, job: LoraJob) -> int:
        """DP steps beyond training: Fed-SB's private init gradient."""
        if lora_variant(self.variant).framed and job.fed_sb.init == "svd":
            return 1
        return 0


def _rate(batch_size: int, n: int) -> float:
    return min(1.0, batch_size / max(n, 1))


def _node_budget(context: Context) -> float | None:
    """The node's own ``dp-max-epsilon`` (node config), or None when the node sets none."""
    return node_config_float(context.node_config, DP_MAX_EPSILON_KEY)


def _require_dp(context: Context, dp: DPConfig | None, partition_id: int) -> None:
    """A node with its own budget never touches its rows without DP, whatever the run says."""
    node = _node_budget(context)
    if node is not None and (dp is None or not dp.enabled):
        from bouquet.privacy.accountant import PrivacyBudgetExceeded  # opacus: [dp] nodes only

        raise PrivacyBudgetExceeded(
            f"partition {partition_id}: refusing to train: this node requires DP-SGD "
            f"(node config {DP_MAX_EPSILON_KEY}={node:g}) but the run has dp.enabled=false"
        )


def _budget(dp: DPConfig, context: Context) -> float:
    """The tighter of the run's budget and the node's own ``dp-max-epsilon`` (0: none)."""
    from bouquet.privacy.accountant import budget_of

    budgets = [b for b in (budget_of(dp), _node_budget(context)) if b is not None and b > 0]
    return min(budgets) if budgets else 0.0


def _dp_seed(context: Context) -> int | None:
    """The node's own ``dp-seed`` (node config, never sent), or None (fresh OS entropy)."""
    raw = context.node_config.get(DP_SEED_KEY)
    return None if raw is None or raw == "" else int(raw)  # type: ignore[arg-type]


def _train(am: AdaptedModel, job: LoraJob, context: Context, *, rnd: int,
           dp: DPConfig | None = None, sigma: float = 0.0) -> dict[str, float]:
    """Local steps; in private mode rows and noise come from the node's secret randomness."""
    from bouquet.privacy.dp import local_train, secret_generator

    pid = job.partition_id
    if dp is None:
        return local_train(am.model, list(am.params.values()), job.loss_fn, job.x, job.y,
                           steps=job.steps, batch_size=job.batch_size, lr=job.lr,
                           optimizer=job.lora.optimizer,
                           generator=generator(job.seed, rnd, pid))
    node_seed = _dp_seed(context)
    return local_train(am.model, list(am.params.values()), job.loss_fn, job.x, job.y,
                       steps=job.steps, batch_size=job.batch_size, lr=job.lr,
                       optimizer=job.lora.optimizer,
                       generator=secret_generator(node_seed, pid, rnd, 0x5A), dp=dp,
                       noise_multiplier=sigma,
                       noise_generator=secret_generator(node_seed, pid, rnd, 0xD9),
                       example_loss_fn=job.example_losses())


class FedITClient(LoraClient):
    """FedIT: trains and sends A and B."""

    variant = "fedit"


class FFALoraClient(LoraClient):
    """FFA-LoRA: A frozen (from the seed), trains and sends B."""

    variant = "ffa"


class FedSBClient(LoraClient):
    """Fed-SB: B and A frozen (the frame), trains and sends R."""

    variant = "fedsb"


#: ``lora`` keys only the server reads.
_LORA_SERVER_ONLY = frozenset({"weighting"})


def _names(value: str | Sequence[str]) -> str:
    return value if isinstance(value, str) else ",".join(value)


def public_round(client: LoraClient, msg: Message, context: Context, model: ModelSource,
                 x: torch.Tensor, y: torch.Tensor, loss_fn: LossFn, *,
                 target_modules: str | Sequence[str] = "query,value,q_proj,v_proj",
                 head_modules: str | Sequence[str] = "classifier,score", lr: float = 1e-3,
                 local_steps: int = 0, local_epochs: int = 1, batch_size: int = 32,
                 seed: int = 0, dp: DPConfig | Mapping[str, Any] | None = None,
                 example_loss_fn: ExampleLossFn | None = None, num_server_rounds: int = 1,
                 fed_sb: FedSBConfig | None = None, **options: Any) -> Message:
    """One round of ``client``'s LoRA method on the user's model and rows (wrapped reply).

    ``bouquet.clients.fedit.train``, ``ffa_lora.train`` and ``fed_sb.train`` call this with
    their client and take these arguments.

    Parameters
    ----------
    client : LoraClient
        The method's procedure (FedIT, FFA-LoRA or Fed-SB).
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; the DP accountant (and Fed-SB's frame) live in
        ``context.state``. Node config ``dp-seed`` and ``dp-max-epsilon`` are honoured.
    model : nn.Module or callable
        The user's pretrained transformers (or any torch) model, fresh for this call (LoRA
        layers are injected in place with PEFT), or a zero-argument factory building it.
    x, y : torch.Tensor
        The node's training rows: model inputs (e.g. token ids) and labels.
    loss_fn : callable
        ``loss_fn(model, x, y)`` -> mean loss of a batch.
    target_modules, head_modules : str or sequence of str
        Modules whose 2-D weight gets LoRA (last name component or full name), and modules
        trained in full and sent (the task head); as the server's ``lora`` section.
    lr, local_steps, local_epochs, batch_size : float, int, int, int
        Local schedule (``local_steps`` 0: ``local_epochs`` passes over the rows).
    seed : int
        The run seed (FFA-LoRA's frozen A derives from it: use the server's).
    dp : DPConfig or mapping, optional
        DP-SGD with Opacus (``pip install flwr-bouquet[dp]``): a :class:`DPConfig` or its fields
        (``noise_multiplier``, ``target_epsilon``, ``delta``, ``max_grad_norm``,
        ``max_epsilon``, ``sampling``); needs ``example_loss_fn``.
    example_loss_fn : callable, optional
        ``fn(model, x, y)`` -> one loss per example (DP-SGD bounds each example's gradient).
    num_server_rounds : int
        Rounds the privacy calibration plans for (``dp.target_epsilon`` mode).
    fed_sb : FedSBConfig, optional
        Fed-SB's ``fed-sb`` section (its round-0 protocol).
    **options
        Further ``lora`` keys: ``rank`` (8), ``alpha`` (0: r), ``optimizer`` ("adamw").

    Returns
    -------
    Message
        ``arrays`` (the trained adapters and head) and ``metrics`` (``num-examples``; with
        DP ``epsilon``, ``delta``, ``noise_multiplier``).

    """
    from bouquet.clients.local_training import LocalSchedule, node_index, reply, section_from

    lora = section_from(LoraConfig, {**options, "target_modules": _names(target_modules),
                                       "head_modules": _names(head_modules)},
                        _LORA_SERVER_ONLY)
    if dp is not None and not isinstance(dp, DPConfig):
        dp = section_from(DPConfig, {"enabled": True, **dp})
    schedule = LocalSchedule(lr=lr, local_steps=local_steps, local_epochs=local_epochs)
    if len(x) != len(y) or len(y) < 1:
        raise ValueError(f"x and y must hold the same positive number of rows, got {len(x)}, "
                         f"{len(y)}")
    steps = schedule.local_steps or max(1, local_epochs * int(np.ceil(len(y) / batch_size)))
    job = LoraJob(model=model, x=x, y=y, loss_fn=loss_fn, example_loss_fn=example_loss_fn,
                  lora=lora, fed_sb=fed_sb or FedSBConfig(), dp=dp, seed=seed,
                  partition_id=node_index(context), batch_size=batch_size, steps=steps,
                  lr=lr, num_server_rounds=num_server_rounds)
    return reply(msg, client.run(msg, context, job))

