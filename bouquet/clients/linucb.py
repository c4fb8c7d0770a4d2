"""A silo of (private) federated LinUCB: ``B`` LinUCB steps, then one tree node (numpy only).

Zhou & Chowdhury, ICLR 2024, Algorithm 1 (silo side). Per round ``k`` the silo

1. reads the server's prefix estimate ``(V~, u~)`` over batches ``1..k-1``;
2. serves ``B`` users of its own stream: ``V = lambda I + V~ + W``, ``theta = V^{-1}(u~ + U)``,
   picks ``argmax_x <x, theta> + beta_t ||x||_{V^{-1}}`` (``V^{-1}`` kept by Sherman-Morrison
   updates), observes the reward and adds ``x x^T`` and ``x y`` to its batch statistics. In the
   private variants ``W = U = 0`` within the batch: a user's data must not steer the arms
   chosen for the later users of the same batch, or their contributions to the released node
   would depend on it and one user's sensitivity would not bound the node's; features enter
   the statistics clipped to norm ``L`` and rewards clipped to ``[-Y, Y]`` (``fedlinucb``
   clips the same way when ``linucb.reward-clip`` sets ``Y``, for a like-for-like baseline);
3. releases the tree node of sync ``k`` (:class:`bouquet.privacy.tree.SiloTree`) with its own
   calibrated Gaussian noise, or, for the vector-sum variant, the randomised encoding of every
   user in the node's window.

What a silo keeps between rounds lives in ``context.state`` (``<method>.progress``, ``.tree`` or
``.rows``, ``.calibration``): its exact p-sums, the users of the open windows, its cumulative
regret, and the tree depth and noise of its first node (a later message that would change them,
a server resumed with another horizon, is refused). A silo that
missed syncs (a lost message, a restart of the node process keeps ``context.state`` only for the
life of the SuperNode) advances its tree with empty batches, so later nodes stay correct.

Everything that calibrates the silo's noise comes from its own configuration: ``M`` from its
node config (``--node-config 'num-silos=<M>'``) or else ``linucb.num-silos``, the horizon, ``B`` and
the bounds from the run config. The server announces ``num-silos``, ``horizon-rounds`` and
``batch-steps`` each round; a silo refuses (error reply) to answer when they differ from its own.

Noise is drawn from ``(seed, partition, round)`` mixed with a secret the server never sees: the
node's ``dp-seed`` (node config; the in-process grid sets one per node for reproducible
simulations; ``dp-secret`` is the older name), else a random 63-bit secret drawn from OS entropy
on first use and kept in ``context.state`` (and so in node memory on disk, so that a restarted
silo regenerates the same noise for the same tree node instead of releasing a second draw).
"""

from __future__ import annotations

import dataclasses
import math
import secrets
import typing
from typing import Any, runtime_checkable

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.clients.local_training import node_index, reply, section_from
from bouquet.privacy import shuffle, tree
from bouquet.privacy.dp_config import DP_SEED_KEY
from bouquet.strategies.linucb_protocol import (
    VARIANTS,
    Protocol,
    announced_values,
    confidence_radius,
    env_section,
    horizon_of,
    make_protocol,
    variant_named,
)
from bouquet.strategies.sections.linucb import DPLinUCBConfig, LinUCBConfig
from bouquet.tasks.bandits import Block
from bouquet.wire.arrays import to_numpy, to_record
from bouquet.wire.linucb import CODES, GLOBAL_RECORD, GRAM, NODE_RECORD, REGRET_METRIC, VEC


@runtime_checkable
class RewardSource(typing.Protocol):
    """A silo's users, as the bandit functions see them (the user's own environment).

    ``contexts(rnd, step)`` gives the ``(K, d)`` arm features of the ``step``-th user served in
    synchronisation ``rnd``; ``reward(rnd, step, arm)`` the reward observed for the chosen arm.
    """

    def contexts(self, rnd: int, step: int) -> np.ndarray:
        """Arm features of one user, shape ``(K, d)``."""
        ...

    def reward(self, rnd: int, step: int, arm: int) -> float:
        """The reward observed when ``arm`` is chosen for that user."""
        ...


@runtime_checkable
class KnownMeans(typing.Protocol):
    """A source that also knows the pseudo-regret of a choice (simulations); else 0 is reported."""

    def regret(self, rnd: int, step: int, arm: int) -> float:
        """Best expected reward minus the chosen arm's."""
        ...


@dataclasses.dataclass(frozen=True)
class BlockSource:
    """A catalogue :class:`~bouquet.tasks.bandits.Block` as a :class:`RewardSource`."""

    block: Block

    def contexts(self, rnd: int, step: int) -> np.ndarray:
        """The step's arm features."""
        return self.block.features[step]

    def reward(self, rnd: int, step: int, arm: int) -> float:
        """The step's reward of ``arm``."""
        return float(self.block.rewards[step, arm])

    def regret(self, rnd: int, step: int, arm: int) -> float:
        """The step's pseudo-regret of ``arm``."""
        means = self.block.means[step]
        return float(means.max() - means[arm])


def linucb_steps(
    source: RewardSource | Block,
    gram: np.ndarray,
    vec: np.ndarray,
    proto: Protocol,
    lin: LinUCBConfig,
    first_step: int,
    *,
    rnd: int = 1,
    steps: int | None = None,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Run LinUCB over the users of sync ``rnd`` from the shared statistics ``(gram, vec)``.

    ``source`` is the silo's :class:`RewardSource` (or a catalogue :class:`Block`); ``steps``
    users are served: by default ``B`` (a block's own length for a block).

    Returns
    -------
    x : ndarray, shape (B, d)
        Chosen arms' features (clipped to norm ``L``, as they enter the statistics, when
        ``proto.clips``: always for the private variants).
    y : ndarray, shape (B,)
        Observed rewards (clipped to ``[-Y, Y]`` when ``proto.clips``).
    regret : float
        Pseudo-regret of the block (0 unless the source is :class:`KnownMeans`).

    """
    if isinstance(source, Block):
        steps = source.features.shape[0] if steps is None else steps
        source = BlockSource(source)
    steps = proto.batch if steps is None else steps
    d = proto.dim
    inv = np.linalg.inv(proto.lam * np.eye(d) + gram)
    b = np.array(vec, dtype=np.float64, copy=True)
    xs = np.zeros((steps, d))
    ys = np.zeros(steps)
    regret = 0.0
    knows_means = isinstance(source, KnownMeans)
    for s in range(steps):
        arms = np.asarray(source.contexts(rnd, s), dtype=np.float64)
        if arms.ndim != 2 or arms.shape[1] != d or not np.isfinite(arms).all():
            raise ValueError(f"contexts of shape {arms.shape}: expected finite (K, {d})")
        theta = inv @ b
        width = np.sqrt(np.maximum(np.einsum("kd,de,ke->k", arms, inv, arms), 0.0))
        ucb = arms @ theta + confidence_radius(first_step + s, proto, lin) * width
        a = int(np.argmax(ucb))
        x = arms[a]
        y = float(source.reward(rnd, s, a))
        if not np.isfinite(y):
            raise ValueError(f"reward {y!r} is not finite")
        if knows_means:
            regret += float(source.regret(rnd, s, a))  # type: ignore[attr-defined]
        if proto.clips:  # bounded contribution (private variants; fedlinucb's reward-clip)
            y = min(max(y, -proto.reward_bound), proto.reward_bound)
            x = clip_norm(x, proto.feature_bound)
        if not proto.private:  # private: no influence on the batch's later choices
            ix = inv @ x
            inv -= np.outer(ix, ix) / (1.0 + x @ ix)
            b += x * y
        xs[s], ys[s] = x, y
    return xs, ys, regret


def clip_norm(x: np.ndarray, bound: float) -> np.ndarray:
    """``x`` scaled down to norm ``bound`` when longer (unchanged otherwise)."""
    norm = float(np.linalg.norm(x))
    return x * (bound / norm) if norm > bound else x


def own_num_silos(context: Context, lin: LinUCBConfig) -> int:
    """``M`` as this silo's operator set it: node config ``num-silos``, else the run config."""
    raw = context.node_config.get("num-silos")
    return int(raw) if raw is not None else lin.num_silos  # type: ignore[arg-type]


def node_secret(context: Context) -> int:
    """The silo's noise secret: node config ``dp-seed`` / ``dp-secret``, else a kept random one.

    Without it the noise would be a function of the public run seed, partition and round, which
    the server could regenerate and subtract (no privacy against the server at all). The kept
    one (record ``linucb.noise-secret``) is carried across a server resume even when no model
    state is (:func:`bouquet.clients.persistence.carry_calibrations`), so a redone round
    releases the same noise again instead of a second, independent draw. That release is the
    first attempt's again only if the round's data are too (the ``RewardSource`` is indexed by
    round and step, and the resumed server re-sends the same global statistics), which every
    restored silo already relies on: a source that answers a redone round with other data
    would let the two releases' difference show the data's.
    """
    for name in (DP_SEED_KEY, "dp-secret"):
        if name in context.node_config:
            return int(context.node_config[name])  # type: ignore[arg-type]
    state = NodeState(context, "linucb")
    kept = state.values("noise-secret")
    if "secret" not in kept:
        kept = {"secret": secrets.randbits(63)}
        state.set_values("noise-secret", kept)
    return int(kept["secret"])


def noise_rng(context: Context, seed: int, partition_id: int, rnd: int) -> np.random.Generator:
    """Return the silo's noise generator (public coordinates mixed with :func:`node_secret`)."""
    return np.random.default_rng([seed, partition_id, rnd, 0xD9, node_secret(context)])


def check_announced(msg: Message, proto: Protocol, partition_id: int) -> None:
    """Refuse a server whose announced protocol differs from this silo's own config."""
    cfg = message_config(msg)
    if proto.private and not 0 <= partition_id < proto.num_silos:
        raise ValueError(f"partition {partition_id} is outside the {proto.num_silos} "
                         "silos this silo's config declares")
    for name, own in announced_values(proto).items():
        sent = cfg.get(name)
        if not isinstance(sent, int) or isinstance(sent, bool) or sent != own:
            raise ValueError(f"server announces {name}={sent!r}, this silo's config says {own}: "
                             "refusing to calibrate noise on the server's word")


def keep_calibration(state: NodeState, proto: Protocol, partition_id: int) -> None:
    """Record the tree depth and noise of the silo's first node; refuse other ones later.

    The horizon fixes both (:func:`~bouquet.strategies.linucb_protocol.planned_rounds`): a
    server resumed with another ``num-server-rounds`` (no ``linucb.horizon-rounds`` pinning the
    horizon) would announce a horizon of another depth, and the silo would release its later
    nodes with another noise than the earlier ones, which its stored tree was built for. A
    horizon of the same depth runs the same mechanism and is answered. The record lives in
    ``context.state`` (node memory on disk keeps it across a server resume).
    """
    held = state.values("calibration")
    if not held:
        state.set_values("calibration", {"horizon-rounds": proto.horizon_rounds,
                                         "levels": proto.levels, "sigma": float(proto.sigma)})
        return
    levels, sigma = int(held["levels"]), float(held["sigma"])  # type: ignore[arg-type]
    if levels != proto.levels or not math.isclose(sigma, proto.sigma, rel_tol=1e-9):
        raise ValueError(
            f"partition {partition_id}: this silo's nodes were released for horizon-rounds="
            f"{held['horizon-rounds']} ({levels} tree levels, node noise {sigma:.6g}); the server "
            f"now announces horizon-rounds={proto.horizon_rounds} ({proto.levels} levels, noise "
            f"{proto.sigma:.6g}): refusing to change the mechanism mid-run")


def silo_round(msg: Message, context: Context, source: RewardSource, proto: Protocol,
               lin: LinUCBConfig, *, seed: int, namespace: str) -> RecordDict:
    """One synchronisation: ``B`` local steps, then the node (see the module docstring)."""
    cfg = message_config(msg)
    rnd = int(cfg["server-round"])  # type: ignore[arg-type]
    pid = node_index(context)
    check_announced(msg, proto, pid)
    if rnd > proto.horizon_rounds:
        raise ValueError(f"round {rnd} is beyond the planned {proto.horizon_rounds} syncs")
    state = NodeState(context, namespace)
    keep_calibration(state, proto, pid)
    progress = state.values("progress")
    done = int(progress.get("round", 0))
    if done >= rnd:
        raise ValueError(f"silo already answered round {done}; round {rnd} comes too late")

    shared = to_numpy(msg.content[GLOBAL_RECORD])  # type: ignore[arg-type]
    gram, vec = shared[GRAM], shared[VEC]
    if gram.shape != (proto.dim, proto.dim) or vec.shape != (proto.dim,):
        raise ValueError(f"global statistics of shape {gram.shape}, expected d={proto.dim}")
    xs, ys, regret = linucb_steps(source, gram, vec, proto, lin, (rnd - 1) * proto.batch + 1,
                                  rnd=rnd)
    rng = noise_rng(context, seed, pid, rnd)
    if proto.variant.sends_codes:
        node = _vecsum_node(state, proto, done, rnd, xs, ys, rng)
    else:
        node = _tree_node(state, proto, done, rnd, xs, ys, rng)
    cum = float(progress.get("cum-regret", 0.0)) + regret
    state.set_values("progress", {"round": rnd, "cum-regret": cum})
    metrics = MetricRecord({REGRET_METRIC: cum, "num-examples": proto.batch})
    return RecordDict({NODE_RECORD: to_record(node), "metrics": metrics})


#: ``linucb`` keys only the server reads.
_SERVER_ONLY = frozenset({"max_step_regret"})


def train(msg: Message, context: Context, source: RewardSource, *, context_dim: int,
          variant: str = "none", seed: int = 0, **options: Any) -> Message:
    """One synchronisation of a (private) federated LinUCB silo on the user's own users.

    Parameters
    ----------
    msg, context : Message, Context
        What Flower passes to ``@app.train()``; the silo's tree, open windows and cumulative
        regret live in ``context.state``. Node config ``num-silos`` and ``dp-seed`` are read
        as in bouquet's ClientApp (see the module docstring).
    source : RewardSource
        The silo's users: ``contexts(rnd, step)`` and ``reward(rnd, step, arm)`` (and
        ``regret(rnd, step, arm)`` when known, for the ``cum-regret`` metric).
    context_dim : int
        ``d``, the arms' feature dimension.
    variant : str
        ``"none"`` (FedLinUCB), ``"ldp"``, ``"sdp-amp"`` or ``"sdp-vecsum"``; must be the
        server's.
    seed : int
        The run seed (mixed with the node's secret for the noise).
    **options
        Keys of the ``linucb`` section (``batch_steps``, ``horizon_rounds`` (required),
        ``num_silos`` (required for the private variants), ``crs``, ``alpha``,
        ``reward_noise``, ``regularizer``, ``feature_bound``, ``reward_clip``) and, for the private variants,
        of ``dp-linucb`` (``epsilon``, ``delta``, ``reward_bound``, ``vecsum_scale``,
        ``min_silos``). They must match the server's: the silo refuses an announced protocol
        that differs.

    Returns
    -------
    Message
        ``node`` (the released tree node or vector-sum codes) and ``metrics``.

    """
    kind = variant_named(variant)
    dp_fields = {f.name for f in dataclasses.fields(DPLinUCBConfig)}
    dp_options = {k: v for k, v in options.items() if k.replace("-", "_") in dp_fields}
    if dp_options and not kind.private:
        raise TypeError(f"options {sorted(dp_options)} need a private variant")
    lin = section_from(LinUCBConfig, {k: v for k, v in options.items() if k not in dp_options},
                       _SERVER_ONLY)
    if lin.horizon_rounds < 1:
        raise ValueError("pass horizon_rounds= (the synchronisations the run plans for)")
    num_silos = own_num_silos(context, lin)
    if not num_silos and not kind.private:
        num_silos = int(message_config(msg).get("num-silos", 1))  # type: ignore[arg-type]
    dp = section_from(DPLinUCBConfig, dp_options) if kind.private else None
    proto = make_protocol(variant, lin, dp, int(context_dim), num_silos, lin.horizon_rounds)
    namespace = str(message_config(msg).get("method", "linucb"))
    return reply(msg, silo_round(msg, context, source, proto, lin, seed=seed,
                                 namespace=namespace))


class FedLinUCBClient(ClientProcedure):
    """Silo procedure; ``variant`` picks the privacy protocol (see :data:`VARIANTS`)."""

    variant = "none"

    def protocol(self, msg: Message, context: Context, env: ClientEnv) -> Protocol:
        """Derive the protocol from this silo's own config (checked against the server's)."""
        cfg = message_config(msg)
        lin: LinUCBConfig = env.section("linucb")
        horizon = horizon_of(lin, env.common.num_server_rounds)
        num_silos = own_num_silos(context, lin)
        if not num_silos and not VARIANTS[self.variant].private:
            num_silos = int(cfg.get("num-silos", 1))  # type: ignore[arg-type]
        dim = int(env_section(env.sections).context_dim)
        return make_protocol(self.variant, lin, env.sections.get("dp-linucb"), dim, num_silos,
                             horizon)

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One synchronisation on the catalogue task's stream."""
        cfg = message_config(msg)
        rnd = int(cfg["server-round"])  # type: ignore[arg-type]
        proto = self.protocol(msg, context, env)
        check_announced(msg, proto, env.partition_id)
        block = env.local_data().block(rnd, proto.batch, env.section(env.bandit().section_prefix))
        return silo_round(msg, context, BlockSource(block), proto, env.section("linucb"),
                          seed=env.common.seed, namespace=str(cfg["method"]))


# ---------------------------------------------------------------------- tree variants
def _tree_node(state: NodeState, proto: Protocol, done: int, rnd: int, xs: np.ndarray,
               ys: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    stored = state.arrays("tree")
    silo = (tree.SiloTree.from_state(stored) if stored is not None
            else tree.SiloTree.empty(proto.levels, tree.stats_size(proto.dim)))
    empty = np.zeros(tree.stats_size(proto.dim))
    for k in range(done + 1, rnd):  # syncs this silo missed: empty batches
        silo.release(k, empty)
    exact = silo.release(rnd, tree.pack(xs.T @ xs, xs.T @ ys))
    state.set_arrays("tree", silo.state())
    noisy = exact + tree.gaussian_node_noise(rng, proto.dim, proto.sigma)
    gram, vec = tree.unpack(noisy, proto.dim)
    return {GRAM: np.ascontiguousarray(gram), VEC: np.ascontiguousarray(vec)}

# ---------------------------------------------------------------------- vector sum
def _vecsum_node(state: NodeState, proto: Protocol, done: int, rnd: int, xs: np.ndarray,
                 ys: np.ndarray, rng: np.random.Generator) -> dict[str, np.ndarray]:
    slots = 1 << (proto.levels - 1)
    cols = shuffle.num_coordinates(proto.dim)
    stored = state.arrays("rows")
    if stored is None:
        rows = np.zeros((slots, proto.batch, cols))
        ids = np.zeros(slots, dtype=np.int64)
    else:
        rows, ids = stored["rows"], stored["ids"]
    slot = (rnd - 1) % slots
    rows[slot] = shuffle.user_rows(xs, ys)
    ids[slot] = rnd
    state.set_arrays("rows", {"rows": rows, "ids": ids})
    start, end = tree.node_window(rnd)
    window = []
    for k in range(start + 1, end + 1):
        s = (k - 1) % slots
        window.append(rows[s] if ids[s] == k else np.zeros((proto.batch, cols)))
    params = proto.vecsum_params(rnd)
    if params.max_code() >= np.iinfo(np.int32).max:
        raise ValueError("vector-sum codes overflow int32; raise epsilon or lower delta")
    codes = params.encode(np.concatenate(window), rng).astype(np.int32)
    return {CODES: codes}


class LDPFedLinUCBClient(FedLinUCBClient):
    """Silo-level LDP: Gaussian noise on every released node."""

    variant = "ldp"


class SDPAmpFedLinUCBClient(FedLinUCBClient):
    """Shuffle DP, sum variant: smaller Gaussian noise; the shuffler releases only the sum."""

    variant = "sdp-amp"


class SDPVecSumFedLinUCBClient(FedLinUCBClient):
    """Shuffle DP by vector summation: every user's contribution encoded separately."""

    variant = "sdp-vecsum"
