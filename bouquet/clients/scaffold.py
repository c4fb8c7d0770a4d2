"""Node side of SCAFFOLD, single-uplink SCAFFOLD, SCALLION and SCAFCOM.

See :mod:`bouquet.strategies.scaffold` for the algorithms and the papers. Each client:

1. commits or discards the state staged for its previous reply (``commit-round``,
   :mod:`bouquet.clients.staged_state`); a client never selected before starts from zero state;
2. runs ``K`` local SGD steps from ``x`` with the corrected gradient ``g(y) - c_i + c``;
3. computes its uplink vector(s), compresses them with the section's compressor, and stages its
   new ``c_i`` (and ``v_i``).
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.clients.local_training import (
    LocalSchedule,
    batch_size,
    examples_in,
    node_index,
    reply,
    section_from,
)
from bouquet.clients.staged_state import StagedState
from bouquet.clients.task_inputs import task_inputs
from bouquet.compression import Compressor, make_compressor, to_array_record
from bouquet.strategies.sections.scaffold import ScaffoldConfig, control_step
from bouquet.tasks.torch_utils import BatchLoss, get_arrays, set_arrays, sgd_steps
from bouquet.wire.arrays import to_numpy
from bouquet.wire.flat import Layout
from bouquet.wire.scaffold import CONTROL_KEY, CONTROL_RECORD
from bouquet.wire.uplink import COMMIT_ROUND, STEPS_METRIC, uplink_compressor

#: Stream tag of the compressor's random generator (distinct from the data shuffling stream).
_COMPRESSOR_STREAM = 0x5CAF


def mean_gradient(model: nn.Module, batches: Iterable[Any], loss_fn: BatchLoss,
                  examples: int) -> dict[str, np.ndarray]:
    """The gradient of the per-example mean loss over one pass of ``batches``, at the model.

    One pass: batches until ``examples`` examples were seen (the catalogue's batches are an
    endless shuffled stream) or the iterable ends. Each batch's mean-loss gradient is
    weighted by its :func:`batch_size`. The model is in training mode, as in local training;
    its parameters are not changed (buffers such as batch-norm statistics may be: the caller
    reloads the model). Returns named float32 arrays for every entry of
    ``model.state_dict()``, zeros for those that are not parameters.
    """
    model.train()
    params = dict(model.named_parameters())
    for p in params.values():
        p.grad = None
    total = 0
    for batch in batches:
        size = batch_size(batch)
        if size < 1:  # an endless stream of empty batches would never end the pass
            raise ValueError("the gradient at x (option I controls) got an empty batch")
        (loss_fn(model, batch) * size).backward()
        total += size
        if total >= examples:
            break
    if total < 1:
        raise ValueError("the gradient at x (option I controls) needs at least one example")
    out: dict[str, np.ndarray] = {}
    for name, value in model.state_dict().items():
        grad = params[name].grad if name in params else None
        out[name] = (np.zeros(tuple(value.shape), dtype=np.float32) if grad is None
                     else (grad.detach().cpu() / total).numpy().astype(np.float32))
    for p in params.values():
        p.grad = None
    return out


class LocalRound:
    """What one local round produced: the flat model before and after, and K.

    With option I controls also the flat gradient at ``x`` over one pass of the batches.
    """

    def __init__(self, x: np.ndarray, y: np.ndarray, steps: int, lr: float,
                 stats: dict[str, float], gradient_at_x: np.ndarray | None = None) -> None:
        self.x, self.y, self.steps, self.lr, self.stats = x, y, steps, lr, stats
        self.gradient_at_x = gradient_at_x

    def mean_direction(self) -> np.ndarray:
        """``(x - y) / (K eta_l)`` in float64: the mean corrected gradient of the round."""
        return (self.x.astype(np.float64) - self.y) / (self.steps * self.lr)


class VectorClient(ClientProcedure):
    """Base: local SGD (optionally control-corrected), then compressed vector(s) up.

    Subclasses set :attr:`prefix` (config section) and implement :meth:`uplink`.
    """

    prefix: str = ""
    #: Whether the local steps use the control correction ``c - c_i``.
    corrected: bool = False

    def compressor(self, section: Any) -> Compressor:
        """Build the uplink compressor of this method."""
        return uplink_compressor(section)

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """Return ``({record name: payload}, new state)``."""
        raise NotImplementedError

    def local_direction(self, state: dict[str, np.ndarray], c: np.ndarray, c_i: np.ndarray,
                        section: Any) -> tuple[float, np.ndarray]:
        """``(s, b)``: local steps follow ``s g(y) + b`` (SCAFFOLD: ``s = 1``, ``b = c - c_i``)."""
        return 1.0, (c - c_i).astype(np.float32)

    def needs_gradient_at_x(self, section: Any) -> bool:
        """Whether :meth:`uplink` needs :attr:`LocalRound.gradient_at_x` (option I controls)."""
        return False

    def check_section(self, section: Any) -> None:
        """Refuse a section this rule cannot run (before any training)."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One round on the catalogue task (see :meth:`run`)."""
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        batches, loss_fn, schedule = task_inputs(env, rnd)
        return self.run(msg, context, env.supervised().build_model(), batches, loss_fn,
                        env.section(self.prefix), schedule,
                        num_examples=batches.local.num_train, seed=env.common.seed)

    def run(self, msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
            loss_fn: BatchLoss, section: Any, schedule: LocalSchedule, *,
            num_examples: int | None = None, seed: int = 0) -> RecordDict:
        """One round on any model and batches: resolve state, train, compress, stage.

        ``model`` receives the message's arrays (names and shapes must match); ``section`` is
        the method's config section; ``seed`` and the node's :func:`node_index` seed the
        compressor's randomness.
        """
        self.check_section(section)
        cfg = message_config(msg)
        rnd = int(cfg["server-round"])  # type: ignore[arg-type]
        method = str(cfg.get("method", self.prefix))
        x_arrays = to_numpy(msg.content["arrays"])  # type: ignore[arg-type]
        layout = Layout.of(x_arrays)
        store = StagedState(context, method)
        state = store.resolve(int(cfg.get(COMMIT_ROUND, 0)))  # type: ignore[arg-type]
        c = None
        if self.corrected:
            c = msg.content[CONTROL_RECORD][CONTROL_KEY].numpy()  # type: ignore[index,union-attr]
            if c.shape != (layout.size,):
                raise ValueError(f"control of shape {c.shape}, model has {layout.size} values")
            c_i = state.get("c", np.zeros(layout.size, dtype=np.float32))
            scale, correction = self.local_direction(state, c, c_i, section)
            hook = control_correction(layout, correction, scale)
        else:
            hook = None
        n = examples_in(batches, num_examples)
        set_arrays(model, x_arrays)
        stats = sgd_steps(model, schedule.stream(batches), loss_fn,
                          steps=schedule.num_steps(batches), lr=schedule.lr, correct_grad=hook)
        steps = int(stats.pop("steps"))
        y_arrays = get_arrays(model)
        gradient_at_x = None
        if self.needs_gradient_at_x(section):
            set_arrays(model, x_arrays)
            gradient_at_x = layout.flatten(mean_gradient(model, batches, loss_fn, n))
            set_arrays(model, y_arrays)  # the caller's model ends the round at y, as ever
        run = LocalRound(layout.flatten(x_arrays), layout.flatten(y_arrays), steps,
                         schedule.lr, stats, gradient_at_x)
        rng = np.random.default_rng([seed, rnd, node_index(context), _COMPRESSOR_STREAM])
        payloads, new_state = self.uplink(run, state, c, section, self.compressor(section), rng)
        content = RecordDict({name: to_array_record(p) for name, p in payloads.items()})
        content["metrics"] = MetricRecord(
            {**stats, "num-examples": n, STEPS_METRIC: steps})
        store.stage(rnd, new_state)
        return content


def control_correction(layout: Layout, correction: np.ndarray, scale: float = 1.0) -> Any:
    """Build a ``correct_grad`` hook: ``grad <- scale grad + correction`` for every parameter."""
    by_name = {k: torch.from_numpy(a.copy()) for k, a in layout.unflatten(correction).items()}

    def hook(model: nn.Module) -> None:
        for name, p in model.named_parameters():
            if p.grad is not None:
                if scale != 1.0:
                    p.grad.mul_(scale)
                p.grad.add_(by_name[name])

    return hook


class ScaffoldClient(VectorClient):
    """SCAFFOLD: two dense vectors, ``dy = y - x`` and ``dc = c_i+ - c_i``.

    ``c_i+`` by option II (``scaffold.controls``, default: ``c_i - c + (x - y)/(K eta_l)``)
    or option I (the gradient at ``x`` over one pass of the batches; Karimireddy et al.,
    ICML 2020, Algorithm 1).
    """

    prefix = "scaffold"
    corrected = True

    def compressor(self, section: Any) -> Compressor:
        """Dense uplink."""
        return make_compressor("identity")

    def needs_gradient_at_x(self, section: Any) -> bool:
        """Option I controls need the gradient at ``x``."""
        return bool(section.controls == "I")

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """``dc = c_i+ - c_i``: option II ``(x - y)/(K eta_l) - c``, option I ``g(x) - c_i``."""
        assert c is not None
        c_i = state.get("c", np.zeros_like(c))
        if run.gradient_at_x is not None:
            dc = (run.gradient_at_x.astype(np.float64) - c_i).astype(np.float32)
        else:
            dc = (run.mean_direction() - c).astype(np.float32)
        dy = (run.y - run.x).astype(np.float32)
        return ({"payload": comp.compress(dy, rng), "payload-c": comp.compress(dc, rng)},
                {"c": (c_i + dc).astype(np.float32)})


class SingleUplinkClient(VectorClient):
    """Single-uplink SCAFFOLD and SCALLION: send ``C(delta)``, ``c_i <- c_i + alpha C(delta)``."""

    prefix = "scaffold"
    corrected = True

    def check_section(self, section: Any) -> None:
        """Option II controls only: the one vector stands for ``dy`` and ``dc`` through them."""
        if getattr(section, "controls", "II") != "II":
            raise ValueError("single-uplink SCAFFOLD needs controls='II' (option II): its one "
                             "uplink vector stands for dy and dc only under option II")

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """``delta = (x - y)/(K eta_l) - c = gbar_i - c_i``."""
        assert c is not None
        c_i = state.get("c", np.zeros_like(c))
        delta = (run.mean_direction() - c).astype(np.float32)
        payload = comp.compress(delta, rng)
        alpha = control_step(section, comp, delta.size)
        new_c = (c_i + np.float32(alpha) * comp.decompress(payload)).astype(np.float32)
        return {"payload": payload}, {"c": new_c}


class ScallionClient(SingleUplinkClient):
    """SCALLION's node side (section ``scallion``)."""

    prefix = "scallion"


class ScafcomClient(VectorClient):
    """SCAFCOM: momentum ``v_i`` of the mean local gradient, send ``C(v_i - c_i)``."""

    prefix = "scafcom"
    corrected = True

    def local_direction(self, state: dict[str, np.ndarray], c: np.ndarray, c_i: np.ndarray,
                        section: Any) -> tuple[float, np.ndarray]:
        """``local-steps`` placement: ``beta g + (1 - beta) v_i - c_i + c``."""
        if section.momentum_placement == "local-steps" and "v" in state:
            beta = float(section.beta)
            return beta, ((1.0 - beta) * state["v"] + c - c_i).astype(np.float32)
        return 1.0, (c - c_i).astype(np.float32)

    def uplink(self, run: LocalRound, state: dict[str, np.ndarray], c: np.ndarray | None,
               section: Any, comp: Compressor, rng: np.random.Generator
               ) -> tuple[dict[str, dict[str, np.ndarray]], dict[str, np.ndarray]]:
        """``v <- (1-beta) v + beta gbar``; ``q = C(v - c_i)``; ``c_i <- c_i + alpha q``."""
        assert c is not None
        c_i = state.get("c", np.zeros_like(c)).astype(np.float64)
        gbar = run.mean_direction() - c + c_i  # local-steps placement: already the new v
        if section.momentum_placement == "local-steps" and "v" in state:
            v = gbar
        elif "v" in state:
            v = (1.0 - section.beta) * state["v"] + section.beta * gbar
        else:
            v = gbar if section.momentum_init == "first" else section.beta * gbar
        payload = comp.compress((v - c_i).astype(np.float32), rng)
        alpha = control_step(section, comp, c.size)
        new_c = (c_i.astype(np.float32) + np.float32(alpha) * comp.decompress(payload))
        return {"payload": payload}, {"c": new_c.astype(np.float32),
                                      "v": v.astype(np.float32)}


def public_round(rule: VectorClient, section: Any, msg: Message, context: Context,
                 model: nn.Module, batches: Iterable[Any], loss_fn: BatchLoss, *, lr: float,
                 local_steps: int, local_epochs: int, num_examples: int | None,
                 seed: int) -> Message:
    """Run ``rule``'s round on the user's model and batches and wrap the reply."""
    schedule = LocalSchedule(lr=lr, local_steps=local_steps, local_epochs=local_epochs)
    content = rule.run(msg, context, model, batches, loss_fn, section, schedule,
                       num_examples=num_examples, seed=seed)
    return reply(msg, content)


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None, seed: int = 0, controls: str = "II") -> Message:
    """SCAFFOLD's node side on the user's own model and data.

    Parameters
    ----------
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; ``c_i`` lives in ``context.state``.
    model : nn.Module
        The user's model; it receives the message's ``arrays`` (same names and shapes).
    batches : Iterable
        Any iterable of batches, iterated afresh each epoch (a DataLoader, a list...).
    loss_fn : callable
        ``loss_fn(model, batch)`` -> mean loss (a scalar tensor).
    lr, local_steps, local_epochs : float, int, int
        Local schedule: ``local_steps`` SGD steps (0: ``local_epochs`` passes over ``batches``).
    num_examples : int, optional
        The reply's weight; counted from ``batches`` when omitted.
    seed : int
        Seed of the node's compressor randomness (with the node's partition id).
    controls : {"II", "I"}
        How ``c_i`` is updated (Karimireddy et al., ICML 2020, Algorithm 1): option II,
        ``c_i - c + (x - y)/(K lr)``, costs nothing; option I is the gradient at the server
        model ``x`` over one more pass of ``batches``.

    Returns
    -------
    Message
        The reply: ``payload`` (``dy``), ``payload-c`` (``dc``) and ``metrics``.

    """
    section = section_from(ScaffoldConfig, {"controls": controls})
    return public_round(ScaffoldClient(), section, msg, context, model,
                        batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)


def train_single_uplink(msg: Message, context: Context, model: nn.Module,
                        batches: Iterable[Any], loss_fn: BatchLoss, *, lr: float = 0.05,
                        local_steps: int = 0, local_epochs: int = 1,
                        num_examples: int | None = None, seed: int = 0) -> Message:
    """Single-uplink SCAFFOLD (``scaffold-1up``): one dense vector up; arguments as :func:`train`."""
    return public_round(SingleUplinkClient(), section_from(ScaffoldConfig, {}), msg, context,
                        model, batches, loss_fn, lr=lr, local_steps=local_steps,
                        local_epochs=local_epochs, num_examples=num_examples, seed=seed)
