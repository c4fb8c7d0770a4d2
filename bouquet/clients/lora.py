"""Node side of FedIT, FFA-LoRA and Fed-SB: PEFT LoRA on the task's model, optional DP-SGD.

Each round the client copies the task's pretrained model, injects LoRA layers with PEFT
(``peft.inject_adapter_in_model``) on the adapted modules that
:func:`bouquet.strategies.lora.adapted_modules` names (so server and client agree), loads the
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
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.privacy.dp_config import DP_MAX_EPSILON_KEY, DP_SEED_KEY, DPConfig
from bouquet.strategies import lora as L
from bouquet.strategies.model import to_numpy, to_record
from bouquet.tasks.classification import generator


@dataclasses.dataclass
class AdaptedModel:
    """A model with LoRA layers and the canonical name -> parameter map of what travels."""

    model: nn.Module
    adapted: list[L.Adapted]
    head: dict[str, tuple[int, ...]]
    params: dict[str, torch.Tensor]

    def arrays(self) -> dict[str, np.ndarray]:
        """The travelling tensors as float32 numpy arrays (canonical order)."""
        return {k: p.detach().cpu().numpy().astype(np.float32).copy()
                for k, p in self.params.items()}

    def merged(self, variant: str, fixed: dict[str, np.ndarray], s: float,
               base: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """Merged full weights (numpy), as the server computes them."""
        return L.merge(variant, base, self.adapted, self.arrays(), fixed, s)


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


def build_adapted(task: Any, variant: str, cfg: L.LoraConfig, arrays: dict[str, np.ndarray],
                  fixed: dict[str, np.ndarray], model: nn.Module | None = None) -> AdaptedModel:
    """Copy the task's model, inject LoRA, load ``arrays`` (travelling) and ``fixed`` (frozen).

    Parameters
    ----------
    task : object
        The task (``build_model()``).
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

    model = task.build_model() if model is None else model
    shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
    adapted = L.adapted_modules(shapes, L.split_names(cfg.target_modules))
    head = {k: shapes[k] for k in L.head_names(shapes, L.split_names(cfg.head_modules))}
    peft_cfg = PeftLoraConfig(r=cfg.rank, lora_alpha=cfg.alpha or cfg.rank,  # type: ignore[arg-type]
                              lora_dropout=0.0,
                              target_modules=[a.module for a in adapted], bias="none")
    model = inject_adapter_in_model(peft_cfg, model)
    for p in model.parameters():
        p.requires_grad_(False)
    params: dict[str, torch.Tensor] = {}
    named = dict(model.named_parameters())
    with torch.no_grad():
        for a in adapted:
            layer = model.get_submodule(a.module)
            lin_a, lin_b = _layer_tensors(layer)
            mod = a.module
            if variant == "fedsb":
                framed = FramedA(lin_a, cfg.rank)
                layer.lora_A["default"] = framed  # type: ignore[index,operator,assignment]
                lin_r = framed.lora_R
                lin_a.weight.copy_(torch.from_numpy(fixed[f"{mod}.lora_A"]))
                lin_b.weight.copy_(torch.from_numpy(fixed[f"{mod}.lora_B"]))
                lin_r.weight.copy_(torch.from_numpy(arrays[f"{mod}.lora_R"]))
                params[f"{mod}.lora_R"] = lin_r.weight
            else:
                src_a = arrays if variant == "fedit" else fixed
                lin_a.weight.copy_(torch.from_numpy(src_a[f"{mod}.lora_A"]))
                lin_b.weight.copy_(torch.from_numpy(arrays[f"{mod}.lora_B"]))
                if variant == "fedit":
                    params[f"{mod}.lora_A"] = lin_a.weight
                params[f"{mod}.lora_B"] = lin_b.weight
        for k in head:
            named[k].copy_(torch.from_numpy(arrays[k]))
            params[k] = named[k]
    for t in params.values():
        t.requires_grad_(True)
    return AdaptedModel(model, adapted, head, params)


def ffa_fixed(adapted: list[L.Adapted], rank: int, seed: int) -> dict[str, np.ndarray]:
    """FFA-LoRA's frozen A of every matrix, derived from the run seed (never sent)."""
    return {f"{a.module}.lora_A": L.lora_a_init(seed, i, rank, a.n)
            for i, a in enumerate(adapted)}


class LoraClient(ClientProcedure):
    """Local procedure shared by the three methods; subclasses set :attr:`variant`."""

    variant = "fedit"

    # ------------------------------------------------------------------ set-up
    def fixed(self, msg: Message, context: Context, env: ClientEnv, cfg: L.LoraConfig,
              adapted: list[L.Adapted]) -> dict[str, np.ndarray]:
        """The frozen arrays: FFA's A from the seed; Fed-SB's frame (message or node state)."""
        if self.variant == "ffa":
            return ffa_fixed(adapted, cfg.rank, env.common.seed)
        if self.variant != "fedsb":
            return {}
        state = NodeState(context, "fed-sb")
        want = int(message_config(msg).get(L.FRAME_ID_KEY, 0))  # type: ignore[arg-type]
        if L.FRAME_RECORD in msg.content:
            frame = to_numpy(msg.content[L.FRAME_RECORD])  # type: ignore[arg-type]
            state.set_arrays("frame", frame)
            state.set_values("frame-meta", {"id": want})
            return frame
        held = state.arrays("frame")
        if held is None or int(state.values("frame-meta").get("id", -1)) != want:  # type: ignore[arg-type]
            raise RuntimeError(
                f"partition {env.partition_id}: Fed-SB frame {want} is not held by this node "
                "(its state was lost); the server must send the frame again"
            )
        return held

    def adapted_model(self, msg: Message, context: Context, env: ClientEnv) -> AdaptedModel:
        """The task's model with this round's adapters loaded."""
        cfg: L.LoraConfig = env.section("lora")
        arrays = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        model = env.task.build_model()
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        adapted = L.adapted_modules(shapes, L.split_names(cfg.target_modules))
        fixed = self.fixed(msg, context, env, cfg, adapted)
        return build_adapted(env.task, self.variant, cfg, arrays, fixed, model=model)

    # ------------------------------------------------------------------ procedures
    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Local training (or Fed-SB's init gradient when ``phase`` asks for it)."""
        config = message_config(msg)
        rnd = int(config["server-round"])  # type: ignore[arg-type]
        _require_dp(context, env)
        if config.get("phase", L.PHASE_TRAIN) == L.PHASE_INIT:
            return self.init_gradient(msg, context, env, rnd)
        am = self.adapted_model(msg, context, env)
        local = env.local_data()
        common = env.common
        cfg: L.LoraConfig = env.section("lora")
        steps = env.task.num_steps(common, local.num_train)
        dp: DPConfig | None = env.sections.get("dp")
        if dp is None or not dp.enabled:
            stats = _train(am, env, local, context, steps=steps, optimizer=cfg.optimizer, rnd=rnd)
            metrics: dict[str, Any] = {"num-examples": local.num_train}
            if np.isfinite(stats["train_loss"]):
                metrics["train_loss"] = stats["train_loss"]
            return RecordDict({"arrays": to_record(am.arrays()), "metrics": MetricRecord(metrics)})
        # Private: the reply holds the released arrays and what the accountant says about them,
        # nothing else computed from the training rows (no training loss).
        from bouquet.privacy.accountant import dp_events

        accountant, sigma = self._accountant(context, env, dp, local.num_train)
        q, count = dp_events(dp.sampling, common.batch_size, local.num_train, steps)
        accountant.check(sigma, q, count, dp.delta, _budget(dp, context),
                         who=f"partition {env.partition_id}")
        _train(am, env, local, context, steps=steps, optimizer=cfg.optimizer, rnd=rnd, dp=dp,
               sigma=sigma)
        accountant.record(sigma, q, count)
        metrics = {"epsilon": accountant.epsilon(dp.delta), "delta": dp.delta,
                   "noise_multiplier": sigma, "num-examples": local.num_train}
        return RecordDict({"arrays": to_record(am.arrays()), "metrics": MetricRecord(metrics)})

    def evaluate(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Evaluate the global adapters on this node's held-out rows."""
        am = self.adapted_model(msg, context, env)
        local = env.local_data()
        metrics = env.task.evaluate_model(am.model, local.x_test, local.y_test)
        metrics["num-examples"] = int(len(local.y_test))
        return RecordDict({"metrics": MetricRecord(metrics)})

    def init_gradient(self, msg: Message, context: Context, env: ClientEnv, rnd: int
                      ) -> RecordDict:
        """Fed-SB round 0: summed gradients of the adapted full matrices (private if DP is on)."""
        cfg: L.LoraConfig = env.section("lora")
        sb: L.FedSBConfig = env.section("fed-sb")
        model = env.task.build_model()
        shapes = {k: tuple(v.shape) for k, v in model.state_dict().items()}
        adapted = L.adapted_modules(shapes, L.split_names(cfg.target_modules))
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
        local = env.local_data()
        dp: DPConfig | None = env.sections.get("dp")
        metrics: dict[str, Any] = {}
        model.train()
        if dp is not None and dp.enabled:
            from bouquet.privacy.dp import (
                example_losses_of,
                poisson_batches,
                private_gradient_sum,
                secret_generator,
            )

            accountant, sigma = self._accountant(context, env, dp, local.num_train)
            q = _rate(env.common.batch_size, local.num_train)
            accountant.check(sigma, q, 1, dp.delta, _budget(dp, context),
                             who=f"partition {env.partition_id}")
            seed = _dp_seed(context)
            idx = next(poisson_batches(local.num_train, env.common.batch_size,
                                       secret_generator(seed, env.partition_id, rnd, 0x5B)))
            grads = private_gradient_sum(
                model, params, example_losses_of(env.task), local.x_train[idx],
                local.y_train[idx], max_grad_norm=dp.max_grad_norm, noise_multiplier=sigma,
                noise_generator=secret_generator(seed, env.partition_id, rnd, 0xD9))
            accountant.record(sigma, q, 1)
            metrics.update(epsilon=accountant.epsilon(dp.delta), delta=dp.delta)
            # the row count, not the size of the secret Poisson batch (which is not noised)
            used = local.num_train
        else:
            gen = generator(env.common.seed, rnd, env.partition_id, 0x5B)
            k = min(sb.init_samples, local.num_train)
            idx = torch.randperm(local.num_train, generator=gen)[:k]
            bs = env.common.batch_size
            for i in range(0, k, bs):
                j = idx[i : i + bs]
                (env.task.loss(model, local.x_train[j], local.y_train[j]) * len(j)).backward()
            grads = [p.grad if p.grad is not None else torch.zeros_like(p) for p in params]
            used = k
        out = {a.module: g.detach().numpy().astype(np.float32) for a, g in zip(adapted, grads,
                                                                               strict=True)}
        metrics["num-examples"] = max(used, 1)
        return RecordDict({L.GRADS_RECORD: to_record(out), "metrics": MetricRecord(metrics)})

    # ------------------------------------------------------------------ privacy
    def _accountant(self, context: Context, env: ClientEnv, dp: DPConfig, n: int
                    ) -> tuple[Any, float]:
        """Return the persistent accountant and the run's noise multiplier.

        Target-epsilon mode calibrates sigma for a client in every round: ``rounds x`` this
        round's events at their rate, plus Fed-SB's init release counted as one more such event
        (its Poisson rate is at most that rate, so this over-counts, never under-counts).
        """
        from bouquet.privacy.accountant import ClientAccountant, check_delta, dp_events, noise_for

        check_delta(dp.delta, n, who=f"partition {env.partition_id}")
        steps = env.task.num_steps(env.common, n)
        q, count = dp_events(dp.sampling, env.common.batch_size, n, steps)
        total = env.common.num_server_rounds * count + self._extra_steps(env)
        return ClientAccountant(NodeState(context, "dp")), noise_for(dp, q, total)

    def _extra_steps(self, env: ClientEnv) -> int:
        """DP steps beyond training: Fed-SB's private init gradient."""
        if self.variant == "fedsb" and env.section("fed-sb").init == "svd":
            return 1
        return 0


def _rate(batch_size: int, n: int) -> float:
    return min(1.0, batch_size / max(n, 1))


def _node_budget(context: Context) -> float | None:
    """The node's own ``dp-max-epsilon`` (node config), or None when the node sets none."""
    raw = context.node_config.get(DP_MAX_EPSILON_KEY)
    return None if raw is None or raw == "" else float(raw)  # type: ignore[arg-type]


def _require_dp(context: Context, env: ClientEnv) -> None:
    """A node with its own budget never touches its rows without DP, whatever the run says."""
    node = _node_budget(context)
    dp: DPConfig | None = env.sections.get("dp")
    if node is not None and (dp is None or not dp.enabled):
        from bouquet.privacy.accountant import PrivacyBudgetExceeded  # opacus: [dp] nodes only

        raise PrivacyBudgetExceeded(
            f"partition {env.partition_id}: refusing to train: this node requires DP-SGD "
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


def _train(am: AdaptedModel, env: ClientEnv, local: Any, context: Context, *, steps: int,
           optimizer: str, rnd: int, dp: DPConfig | None = None, sigma: float = 0.0
           ) -> dict[str, float]:
    """Local steps; in private mode rows and noise come from the node's secret randomness."""
    from bouquet.privacy.dp import example_losses_of, local_train, secret_generator

    seed, pid = env.common.seed, env.partition_id
    if dp is None:
        return local_train(am.model, list(am.params.values()), env.task.loss, local.x_train,
                           local.y_train, steps=steps, batch_size=env.common.batch_size,
                           lr=env.common.lr, optimizer=optimizer,
                           generator=generator(seed, rnd, pid))
    node_seed = _dp_seed(context)
    return local_train(am.model, list(am.params.values()), env.task.loss, local.x_train,
                       local.y_train, steps=steps, batch_size=env.common.batch_size,
                       lr=env.common.lr, optimizer=optimizer,
                       generator=secret_generator(node_seed, pid, rnd, 0x5A), dp=dp,
                       noise_multiplier=sigma,
                       noise_generator=secret_generator(node_seed, pid, rnd, 0xD9),
                       example_loss_fn=example_losses_of(env.task))


class FedITClient(LoraClient):
    """FedIT: trains and sends A and B."""

    variant = "fedit"


class FFALoraClient(LoraClient):
    """FFA-LoRA: A frozen (from the seed), trains and sends B."""

    variant = "ffa"


class FedSBClient(LoraClient):
    """Fed-SB: B and A frozen (the frame), trains and sends R."""

    variant = "fedsb"
