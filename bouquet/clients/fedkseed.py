"""FedKSeed / FedKSeed-Pro node side (Qin et al., ICML 2024, arXiv:2312.06353).

A node rebuilds the global model ``w = w0 - lr * sum_k A[k] z(s_k)`` from the accumulator ``A``
in the message, runs ``fedkseed.local-steps`` two-point zeroth-order steps, each along one
candidate seed (uniform, or with the server's probabilities for Pro), and replies with its
(seed index, scalar gradient) pairs, packed as bytes by the strategy module's codec
(:func:`bouquet.strategies.fedkseed.pack_pairs`; the accumulator arrives as float32 bytes, read by
:func:`~bouquet.strategies.fedkseed.read_down`).

The rebuilt model is kept in the process (a cache, not node memory: any node served by the process
may use it) together with the coefficients ``applied`` it holds, so that the next message only
replays the seeds whose coefficient changed. Every move of the model -- replays and local steps --
is a move along one seed's direction, so ``applied`` always describes the model exactly up to fp32
round-off. When replaying the difference would regenerate at least as many directions as a rebuild
from ``w0`` (always the case for ``A = 0``, i.e. round 1 of a run), the model is reset to ``w0``
and replayed from there; a process that never held the model does the same. Consequence for
reproducibility: a run is bitwise reproducible when every process serves its nodes in the same
order (the in-process engine); with another schedule the weights agree within fp32 round-off.
"""

from __future__ import annotations

import dataclasses
import logging
from functools import lru_cache
from typing import Any

import numpy as np
import torch
from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.clients.zeroth_order import Directions, canonical_parameters, replay, zo_step
from bouquet.strategies.fedkseed import (
    PAIRS_RECORD,
    FedKSeedConfig,
    candidate_seeds,
    pairs_record,
    read_down,
)
from bouquet.tasks.classification import generator, set_arrays

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

    """

    key: tuple[Any, ...]
    model: nn.Module
    directions: Directions
    applied: np.ndarray


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


def replica_key(env: ClientEnv, cfg: FedKSeedConfig) -> tuple[Any, ...]:
    """Identity of a replica: changing any of these changes ``w0`` or the seeds' meaning."""
    return (env.task.name, env.common.seed, cfg.master_seed, cfg.num_seeds, cfg.lr)


def initial_weights(env: ClientEnv) -> dict[str, np.ndarray]:
    """``w0``: the task's initial model for the run seed (every node builds the same one)."""
    return env.task.initial_arrays(env.common.seed)  # type: ignore[no-any-return]


def sync(env: ClientEnv, cfg: FedKSeedConfig, target: np.ndarray) -> tuple[Replica, int]:
    """Bring the cached replica to the accumulator ``target``; return it and the replay count.

    Replays only the seeds whose coefficient changed, or rebuilds from ``w0`` when that is not
    more work (see the module docstring).
    """
    key = replica_key(env, cfg)
    rep = _CACHE.get("replica")
    if rep is not None and rep.key != key:
        rep = None
        _CACHE.clear()
    if rep is None:
        model = env.task.model_from(initial_weights(env))
        model.eval()
        rep = Replica(key, model, Directions(canonical_parameters(model)),
                      np.zeros(cfg.num_seeds, dtype=np.float64))
        _CACHE["replica"] = rep
    elif 0 < np.count_nonzero(target - rep.applied) >= np.count_nonzero(target):
        set_arrays(rep.model, initial_weights(env))
        rep.applied = np.zeros(cfg.num_seeds, dtype=np.float64)
    seeds = _seeds(cfg.master_seed, cfg.num_seeds)
    replayed = replay(rep.directions, seeds, target - rep.applied, cfg.lr)
    rep.applied = target.copy()
    return rep, replayed


def seed_choices(msg: Message, cfg: FedKSeedConfig, rng: np.random.Generator) -> np.ndarray:
    """Seed index of every local step: uniform with replacement, or Pro's probabilities."""
    _, p = read_down(msg.content, cfg.num_seeds)
    if p is not None:
        return rng.choice(cfg.num_seeds, size=cfg.local_steps, p=p / p.sum())
    return rng.integers(0, cfg.num_seeds, size=cfg.local_steps)


class FedKSeedClient(ClientProcedure):
    """Local zeroth-order steps from the rebuilt global model; replies with (index, g) pairs."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round."""
        cfg: FedKSeedConfig = env.section("fedkseed")
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        rep, replayed = sync(env, cfg, read_down(msg.content, cfg.num_seeds)[0])
        seeds = _seeds(cfg.master_seed, cfg.num_seeds)
        rng = np.random.default_rng([env.common.seed, rnd, env.partition_id, 0x5EED])
        choices = seed_choices(msg, cfg, rng)
        local = env.local_data()
        stream = env.task.batches(local, env.common.batch_size,
                                  generator(env.common.seed, rnd, env.partition_id))
        model = rep.model
        model.eval()
        index: list[int] = []
        grads: list[float] = []
        loss_sum = 0.0
        for k in choices:
            x, y = next(stream)

            def loss(x: torch.Tensor = x, y: torch.Tensor = y) -> float:
                with torch.inference_mode():
                    return float(env.task.loss(model, x, y))

            step = zo_step(rep.directions, int(seeds[k]), loss, eps=cfg.eps, lr=cfg.lr)
            if step.applied:
                index.append(int(k))
                grads.append(step.grad)
                rep.applied[k] += step.grad
                loss_sum += 0.5 * (step.loss_plus + step.loss_minus)
        log.debug("fedkseed round %d node %d: %d directions replayed, %d/%d steps applied",
                  rnd, env.partition_id, replayed, len(index), len(choices))
        metrics = MetricRecord({"num-examples": int(local.num_train),
                                "loss": loss_sum / max(len(index), 1)})
        pairs = pairs_record(np.array(index, dtype=np.int32), np.array(grads, dtype=np.float32))
        return RecordDict({PAIRS_RECORD: pairs, "metrics": metrics})

    def evaluate(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """Rebuild the global model from ``A`` and evaluate it on this node's test share."""
        cfg: FedKSeedConfig = env.section("fedkseed")
        rep, _ = sync(env, cfg, read_down(msg.content, cfg.num_seeds)[0])
        local = env.local_data()
        metrics = env.task.evaluate_model(rep.model, local.x_test, local.y_test)
        metrics["num-examples"] = int(local.y_test.shape[0])
        return RecordDict({"metrics": MetricRecord(metrics)})
