"""FedKSeed / FedKSeed-Pro node side (Qin et al., ICML 2024, arXiv:2312.06353).

A node rebuilds the global model ``w = w0 - lr * sum_k A[k] z(s_k)`` from the accumulator ``A``
in the message, runs ``fedkseed.local-steps`` two-point zeroth-order steps, each along one
candidate seed (uniform, or with the server's probabilities for Pro), and replies with its
(seed index, scalar gradient) pairs, packed as bytes by the strategy module's codec
(:func:`bouquet.wire.fedkseed.pack_pairs`; the accumulator arrives as float32 bytes, read by
:func:`~bouquet.wire.fedkseed.read_down`).

The rebuilt model is kept in the process (a cache, not node memory: any node served by the process
may use it) together with the coefficients ``applied`` it holds, so that the next message only
replays the seeds whose coefficient changed. Every move of the model -- replays and local steps --
is a move along one seed's direction, so ``applied`` always describes the model exactly up to fp32
round-off. When replaying the difference would regenerate at least as many directions as a rebuild
from ``w0`` (always the case for ``A = 0``, i.e. round 1 of a run), the model is reset to ``w0``
and replayed from there; a process that never held the model does the same, unless the node
keeps a copy on its disk (node config ``state-dir``: :mod:`bouquet.clients.replica_store`, saved
after every train message), which it loads and brings up to date instead. Consequence for
reproducibility: a run is bitwise reproducible when every process serves its nodes in the same
order (the in-process engine); with another schedule the weights agree within fp32 round-off.

A user's module passed as ``model`` (:func:`train`, :func:`global_model`) is the model the cache
moves: the first time a module object is seen in the process its state is recorded as ``w0``
(:mod:`bouquet.clients.model_origin`), and every rebuild resets the module to that state, so a
``@app.train()`` passing the same module on every message still rebuilds from ``w0``.
"""

from __future__ import annotations

import dataclasses
import hashlib
import logging
from collections.abc import Callable, Iterable, Sequence
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients import model_origin, replica_store
from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.clients.local_training import (
    batch_stream,
    examples_in,
    node_index,
    reply,
    section_from,
)
from bouquet.clients.node_folder import node_folder
from bouquet.clients.task_inputs import TaskBatches
from bouquet.clients.zeroth_order import Directions, canonical_parameters, replay, zo_steps
from bouquet.strategies.sections.fedkseed import FedKSeedConfig
from bouquet.wire.fedkseed import PAIRS_RECORD, Downlink, candidate_seeds, pairs_record, read_down

log = logging.getLogger("bouquet")


@dataclasses.dataclass
class Replica:
    """A model rebuilt from ``w0`` and the seed coefficients it holds.

    Attributes
    ----------
    key : tuple
        What ``w0`` and the meaning of ``applied`` depend on (task, run seed, seeds, lr).
    model : nn.Module
        The model (fp32).
    directions : Directions
        Its perturbation engine (holds the one scratch buffer).
    applied : np.ndarray
        float64 ``(K,)``: the model is ``w0 - lr * sum_k applied[k] z(s_k)``.
    origin : str
        :func:`origin_fingerprint` of ``w0`` (part of the key of the copy on disk).

    """

    key: tuple[Any, ...]
    model: nn.Module
    directions: Directions
    applied: np.ndarray
    origin: str

    @property
    def disk_key(self) -> tuple[Any, ...]:
        """Identity of the saved copy: the key and the fingerprint of ``w0``."""
        return (*self.key, self.origin)


#: The process's one replica (a cache: losing it only costs a rebuild from w0).
_CACHE: dict[str, Replica] = {}


def clear_cache() -> None:
    """Forget the cached replica (the next message rebuilds from ``w0``)."""
    _CACHE.clear()


def cached_replica() -> Replica | None:
    """Return the cached replica, if any (tests and diagnostics)."""
    return _CACHE.get("replica")


@lru_cache(maxsize=4)
def _seeds(master_seed: int, num_seeds: int) -> np.ndarray:
    return candidate_seeds(master_seed, num_seeds)


#: What builds ``w0``: the model itself (recorded as ``w0`` when first seen), or a zero-argument
#: function called only when needed that builds ``w0`` afresh on every call.
ModelSource = nn.Module | Callable[[], nn.Module]
#: ``loss_fn(model, batch)`` -> loss of the batch, forward only (no gradients are taken).
ForwardLoss = Callable[[nn.Module, Any], "float | torch.Tensor"]


def replica_key(env: ClientEnv, cfg: FedKSeedConfig) -> tuple[Any, ...]:
    """Identity of a catalogue replica: changing any of these changes ``w0`` or the seeds."""
    return (env.task.name, env.common.seed, cfg.master_seed, cfg.num_seeds, cfg.lr)


def _build(source: ModelSource, previous: nn.Module | None) -> nn.Module:
    """``w0``: the user's module reset to its first-seen state, or the factory's fresh build.

    ``previous`` is the model the cache held (moved away from ``w0``): a factory that hands it
    back would rebuild from moved weights, which is refused.
    """
    if isinstance(source, nn.Module):
        return model_origin.reset_to_origin(source)
    model = source()
    if model is previous:
        raise ValueError("the model factory returned the module that holds the global model "
                         "(moved away from w0); build w0 afresh in the factory, or pass the "
                         "module itself as model=")
    return model


def _needs_rebuild(applied: np.ndarray, target: np.ndarray) -> bool:
    """Replaying ``target - applied`` would touch at least as many seeds as ``target`` itself."""
    return bool(0 < np.count_nonzero(target - applied) >= np.count_nonzero(target))


def origin_fingerprint(params: Sequence[torch.Tensor]) -> str:
    """A cheap digest of ``w0``: shapes and every 4096th value of each trainable tensor."""
    h = hashlib.sha256()
    for p in params:
        h.update(str(tuple(p.shape)).encode())
        h.update(p.detach().reshape(-1)[::4096].cpu().numpy().tobytes())
    return h.hexdigest()


def _fresh(key: tuple[Any, ...], source: ModelSource, cfg: FedKSeedConfig,
           previous: Replica | None) -> Replica:
    model = _build(source, None if previous is None else previous.model)
    model.eval()
    params = canonical_parameters(model)
    return Replica(key, model, Directions(params), np.zeros(cfg.num_seeds, dtype=np.float64),
                   origin_fingerprint(params))


def _restore(rep: Replica, store: Path, cfg: FedKSeedConfig, target: np.ndarray) -> None:
    """Load the replica saved in ``store`` into the fresh ``rep`` when it matches and helps."""
    saved = replica_store.read(store, rep.disk_key, cfg.num_seeds)
    if saved is not None and not _needs_rebuild(saved.applied, target) \
            and saved.restore(rep.directions.params):
        rep.applied = saved.applied


def sync(key: tuple[Any, ...], source: ModelSource, cfg: FedKSeedConfig, target: np.ndarray,
         store: Path | None = None) -> tuple[Replica, int]:
    """Bring the cached replica to the accumulator ``target``; return it and the replay count.

    ``source`` holds (or builds) ``w0``; ``key`` is its identity. Replays only the seeds whose
    coefficient changed, or rebuilds from ``w0`` when that is not more work (see the module
    docstring). A process without a replica in memory first looks for one saved in ``store``
    (:mod:`bouquet.clients.replica_store`; see :func:`remember`).
    """
    cached = _CACHE.get("replica")
    rep = cached if cached is not None and cached.key == key else None
    if rep is None:
        _CACHE.clear()
        rep = _fresh(key, source, cfg, cached)
        if store is not None:
            _restore(rep, store, cfg, target)
    elif _needs_rebuild(rep.applied, target):
        rep = _fresh(key, source, cfg, rep)
    _CACHE["replica"] = rep
    seeds = _seeds(cfg.master_seed, cfg.num_seeds)
    replayed = replay(rep.directions, seeds, target - rep.applied, cfg.lr)
    rep.applied = target.copy()
    return rep, replayed


def remember(rep: Replica, store: Path | None) -> None:
    """Save the replica to ``store`` (atomically) so that the node's next process starts from it."""
    if store is not None:
        replica_store.save(store, rep.disk_key, rep.applied, rep.directions.params)


def replica_file(context: Context) -> Path | None:
    """Where this node keeps its replica: ``<state-dir>/fedkseed-replica.pt`` (None: nowhere)."""
    folder = node_folder(context)
    return None if folder is None else folder / replica_store.FILE_NAME


def seed_choices(down: Downlink, cfg: FedKSeedConfig, rng: np.random.Generator) -> np.ndarray:
    """Seed index of every local step: uniform with replacement, or Pro's probabilities."""
    p = down.probabilities
    if p is not None:
        return rng.choice(cfg.num_seeds, size=cfg.local_steps, p=p / p.sum())
    return rng.integers(0, cfg.num_seeds, size=cfg.local_steps)


def local_round(msg: Message, context: Context, key: tuple[Any, ...], source: ModelSource,
                batches: Iterable[Any], loss_fn: ForwardLoss, cfg: FedKSeedConfig, *,
                num_examples: int | None, seed: int) -> RecordDict:
    """Zeroth-order steps from the rebuilt global model; the (index, g) pairs and metrics."""
    rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
    n = examples_in(batches, num_examples)
    down = read_down(msg.content, cfg.num_seeds)  # decoded once, passed on
    store = replica_file(context)
    seeds = _seeds(cfg.master_seed, cfg.num_seeds)
    pid = node_index(context)
    rng = np.random.default_rng([seed, rnd, pid, 0x5EED])
    choices = seed_choices(down, cfg, rng)
    index: list[int] = []
    grads: list[float] = []
    loss_sum = 0.0
    try:
        rep, replayed = sync(key, source, cfg, down.accumulator, store)
        model = rep.model
        model.eval()

        def loss(batch: Any) -> float:
            with torch.inference_mode():
                return float(loss_fn(model, batch))

        steps = zo_steps(rep.directions, (int(seeds[k]) for k in choices),
                         batch_stream(batches), loss, eps=cfg.eps, lr=cfg.lr)
        for k, step in zip(choices, steps, strict=True):
            if step.applied:
                index.append(int(k))
                grads.append(step.grad)
                rep.applied[k] += step.grad
                loss_sum += 0.5 * (step.loss_plus + step.loss_minus)
    except BaseException:
        # A failure part-way (the user's loss, an exhausted batch stream, out of memory) leaves
        # the weights moved by steps ``applied`` does not hold: forget the in-memory replica so
        # the next message rebuilds; the one on disk (saved only below) is still consistent.
        clear_cache()
        raise
    remember(rep, store)
    log.debug("fedkseed round %d node %d: %d directions replayed, %d/%d steps applied",
              rnd, pid, replayed, len(index), len(choices))
    metrics = MetricRecord({"num-examples": n, "loss": loss_sum / max(len(index), 1)})
    pairs = pairs_record(np.array(index, dtype=np.int32), np.array(grads, dtype=np.float32))
    return RecordDict({PAIRS_RECORD: pairs, "metrics": metrics})


def _user_key(model: ModelSource, model_key: str | None, cfg: FedKSeedConfig
              ) -> tuple[Any, ...]:
    """The replica key of a user's model; a module is recorded as ``w0`` when first seen.

    Without ``model_key`` the identity of ``w0`` is the digest of the module's first-seen
    weights (:mod:`bouquet.clients.model_origin`): stable while the module moves, and the same
    in every process that builds the same ``w0``.
    """
    if isinstance(model, nn.Module):
        origin = model_origin.origin_of(model)
        if model_key is None:
            model_key = origin.fingerprint
    elif model_key is None:
        raise TypeError("pass model_key= with a model factory (the identity of w0)")
    return ("user", model_key, cfg.master_seed, cfg.num_seeds, cfg.lr)


def train(msg: Message, context: Context, model: ModelSource, batches: Iterable[Any],
          loss_fn: ForwardLoss, *, num_examples: int | None = None, seed: int = 0,
          model_key: str | None = None, **options: Any) -> Message:
    """One FedKSeed / FedKSeed-Pro round on the user's model, forward passes only.

    Parameters
    ----------
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; the message carries the accumulator (and Pro's
        seed probabilities).
    model : nn.Module or callable
        The initial model ``w0``, identical on every node (e.g. a seeded build or pretrained
        weights), or a zero-argument function building it (then ``model_key`` is required).
        The process keeps the rebuilt global model as a cache and replays only what changed.
        A module may be passed again on every message (e.g. one built at import time): the
        first time a module object is seen in the process it must hold ``w0``, a CPU copy of
        its state is kept as ``w0`` while the object lives, and the module itself becomes the
        cached model (after the call it holds the node's model, not ``w0``), reset to the copy
        whenever the global model is rebuilt. A function must build ``w0`` afresh on every call;
        one returning the cached, moved module raises ``ValueError``.
    batches : Iterable
        Any iterable of batches, iterated afresh each epoch; one batch per step.
    loss_fn : callable
        ``loss_fn(model, batch)`` -> loss (float or scalar tensor), forward only.
    num_examples : int, optional
        The reply's weight; counted from ``batches`` when omitted.
    seed : int
        Seed of the seed choices (with the node's partition id).
    model_key : str, optional
        Identity of ``w0`` for the cache and the node's saved replica (default: a digest of the
        module's weights when first seen, which does not change as the module moves).
    **options
        The client keys of the ``fedkseed`` section: ``num_seeds`` (4096), ``local_steps``
        (200), ``eps`` (1e-3), ``lr`` (3e-4), ``master_seed`` (42). They must match the server's.

    Returns
    -------
    Message
        ``pairs`` (seed index, scalar gradient) and ``metrics`` (``num-examples``, ``loss``).

    """
    cfg = section_from(FedKSeedConfig, options, _SERVER_ONLY)
    return reply(msg, local_round(msg, context, _user_key(model, model_key, cfg), model, batches,
                                  loss_fn, cfg, num_examples=num_examples, seed=seed))


def global_model(msg: Message, model: ModelSource, *, model_key: str | None = None,
                 **options: Any) -> nn.Module:
    """The global model ``w0 - lr sum_k A[k] z(s_k)`` the message describes (for evaluation).

    Arguments as :func:`train` (the same contract on ``model``). The returned module is the
    process's cached replica (the module passed, when one is): evaluate it, do not train it.
    """
    cfg = section_from(FedKSeedConfig, options, _SERVER_ONLY)
    rep, _ = sync(_user_key(model, model_key, cfg), model, cfg,
                  read_down(msg.content, cfg.num_seeds).accumulator)
    return rep.model


#: ``fedkseed`` keys only the server reads.
_SERVER_ONLY = frozenset({"equal_weight", "pro_clip"})


def task_source(env: ClientEnv) -> Callable[[], nn.Module]:
    """Builds the catalogue task's ``w0`` (only when the cached replica cannot serve)."""
    task = env.supervised()
    return lambda: task.model_from(initial_weights(env))  # type: ignore[no-any-return]


def sync_task(env: ClientEnv, cfg: FedKSeedConfig, target: np.ndarray,
              store: Path | None = None) -> tuple[Replica, int]:
    """:func:`sync` for the catalogue task's model."""
    return sync(replica_key(env, cfg), task_source(env), cfg, target, store)


class FedKSeedClient(ClientProcedure):
    """Local zeroth-order steps from the rebuilt global model; replies with (index, g) pairs."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round on the catalogue task."""
        cfg: FedKSeedConfig = env.section("fedkseed")
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        batches = TaskBatches(env, rnd)
        return local_round(msg, context, replica_key(env, cfg), task_source(env), batches,
                           lambda model, batch: env.supervised().loss(model, *batch), cfg,
                           num_examples=batches.local.num_train, seed=env.common.seed)

    def evaluate(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Rebuild the global model from ``A`` and evaluate it on this node's test share."""
        cfg: FedKSeedConfig = env.section("fedkseed")
        store = replica_file(context)
        rep, replayed = sync_task(env, cfg, read_down(msg.content, cfg.num_seeds).accumulator,
                                  store)
        if replayed:
            remember(rep, store)
        local = env.local_data()
        metrics = env.evaluated().evaluate_model(rep.model, local.x_test, local.y_test)
        metrics["num-examples"] = int(local.y_test.shape[0])
        return RecordDict({"metrics": MetricRecord(metrics)})


def initial_weights(env: ClientEnv) -> dict[str, np.ndarray]:
    """``w0``: the task's initial model for the run seed (every node builds the same one)."""
    return env.supervised().initial_arrays(env.common.seed)
