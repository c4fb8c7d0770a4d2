"""A silo of (private) federated LinUCB: ``B`` LinUCB steps, then one tree node (numpy only).

Zhou & Chowdhury, ICLR 2024, Algorithm 1 (silo side). Per round ``k`` the silo

1. reads the server's prefix estimate ``(V~, u~)`` over batches ``1..k-1``;
2. serves ``B`` users of its own stream: ``V = lambda I + V~ + W``, ``theta = V^{-1}(u~ + U)``,
   picks ``argmax_x <x, theta> + beta_t ||x||_{V^{-1}}`` (``V^{-1}`` kept by Sherman-Morrison
   updates), observes the reward and adds ``x x^T`` and ``x y`` to its batch statistics. In the
   private variants ``W = U = 0`` within the batch: a user's data must not steer the arms
   chosen for the later users of the same batch, or their contributions to the released node
   would depend on it and one user's sensitivity would not bound the node's; features enter
   the statistics clipped to norm ``L`` and rewards clipped to ``[-Y, Y]``;
3. releases the tree node of sync ``k`` (:class:`bouquet.privacy.tree.SiloTree`) with its own
   calibrated Gaussian noise, or, for the vector-sum variant, the randomised encoding of every
   user in the node's window.

What a silo keeps between rounds lives in ``context.state`` (``<method>.progress``, ``.tree`` or
``.rows``): its exact p-sums, the users of the open windows, its cumulative regret. A silo that
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

import secrets

import numpy as np
from flwr.app import Context, Message, MetricRecord, RecordDict

from bouquet.clients.base import ClientEnv, ClientProcedure, NodeState, message_config
from bouquet.privacy import shuffle, tree
from bouquet.privacy.dp_config import DP_SEED_KEY
from bouquet.strategies.linucb import (
    LinUCBConfig,
    Protocol,
    announced_values,
    confidence_radius,
    env_section,
    horizon_of,
    make_protocol,
)
from bouquet.strategies.model import to_numpy, to_record
from bouquet.tasks.bandits import Block


def linucb_steps(
    block: Block,
    gram: np.ndarray,
    vec: np.ndarray,
    proto: Protocol,
    lin: LinUCBConfig,
    first_step: int,
) -> tuple[np.ndarray, np.ndarray, float]:
    """Run LinUCB over one block from the shared statistics ``(gram, vec)``.

    Returns
    -------
    x : ndarray, shape (B, d)
        Chosen arms' features.
        (Private variants: clipped to norm ``L``, as they enter the statistics.)
    y : ndarray, shape (B,)
        Observed rewards (clipped to ``[-Y, Y]`` for private variants).
    regret : float
        Pseudo-regret of the block.

    """
    steps, _, d = block.features.shape
    inv = np.linalg.inv(proto.lam * np.eye(d) + gram)
    b = np.array(vec, dtype=np.float64, copy=True)
    xs = np.zeros((steps, d))
    ys = np.zeros(steps)
    regret = 0.0
    for s in range(steps):
        arms = block.features[s]
        theta = inv @ b
        width = np.sqrt(np.maximum(np.einsum("kd,de,ke->k", arms, inv, arms), 0.0))
        ucb = arms @ theta + confidence_radius(first_step + s, proto, lin) * width
        a = int(np.argmax(ucb))
        x = arms[a]
        y = float(block.rewards[s, a])
        regret += float(block.means[s].max() - block.means[s, a])
        if proto.private:
            # bounded contribution, and no influence on the batch's later choices
            y = min(max(y, -proto.reward_bound), proto.reward_bound)
            x = clip_norm(x, proto.feature_bound)
        else:
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
    the server could regenerate and subtract (no privacy against the server at all).
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


class FedLinUCBClient(ClientProcedure):
    """Silo procedure; ``variant`` picks the privacy protocol (see the strategy module)."""

    variant = "none"

    def protocol(self, msg: Message, context: Context, env: ClientEnv) -> Protocol:
        """Derive the protocol from this silo's own config; refuse a server that disagrees."""
        cfg = message_config(msg)
        lin: LinUCBConfig = env.section("linucb")
        horizon = horizon_of(lin, env.common.num_server_rounds)
        num_silos = own_num_silos(context, lin)
        if not num_silos and self.variant == "none":
            num_silos = int(cfg.get("num-silos", 1))  # type: ignore[arg-type]
        dim = int(env_section(env.sections).context_dim)
        proto = make_protocol(self.variant, lin, env.sections.get("dp-linucb"), dim, num_silos,
                              horizon)
        if proto.private and not 0 <= env.partition_id < proto.num_silos:
            raise ValueError(f"partition {env.partition_id} is outside the {proto.num_silos} "
                             "silos this silo's config declares")
        for name, own in announced_values(proto).items():
            sent = cfg.get(name)
            if not isinstance(sent, int) or isinstance(sent, bool) or sent != own:
                raise ValueError(f"server announces {name}={sent!r}, this silo's config says {own}: "
                                 "refusing to calibrate noise on the server's word")
        return proto

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One synchronisation: ``B`` local steps, then the node (see the module docstring)."""
        cfg = message_config(msg)
        rnd = int(cfg["server-round"])  # type: ignore[arg-type]
        proto = self.protocol(msg, context, env)
        lin: LinUCBConfig = env.section("linucb")
        if rnd > proto.horizon_rounds:
            raise ValueError(f"round {rnd} is beyond the planned {proto.horizon_rounds} syncs")
        state = NodeState(context, str(cfg["method"]))
        progress = state.values("progress")
        done = int(progress.get("round", 0))
        if done >= rnd:
            raise ValueError(f"silo already answered round {done}; round {rnd} comes too late")

        shared = to_numpy(msg.content["global"])  # type: ignore[arg-type]
        gram, vec = shared["gram"], shared["vec"]
        if gram.shape != (proto.dim, proto.dim) or vec.shape != (proto.dim,):
            raise ValueError(f"global statistics of shape {gram.shape}, expected d={proto.dim}")
        block = env.local_data().block(rnd, proto.batch,
                                       env.section(env.task.section_prefix))
        xs, ys, regret = linucb_steps(block, gram, vec, proto, lin, (rnd - 1) * proto.batch + 1)
        rng = noise_rng(context, env.common.seed, env.partition_id, rnd)
        if proto.variant == "sdp-vecsum":
            node = self._vecsum_node(state, proto, done, rnd, xs, ys, rng)
        else:
            node = self._tree_node(state, proto, done, rnd, xs, ys, rng)
        cum = float(progress.get("cum-regret", 0.0)) + regret
        state.set_values("progress", {"round": rnd, "cum-regret": cum})
        metrics = MetricRecord({"cum-regret": cum, "num-examples": proto.batch})
        return RecordDict({"node": to_record(node), "metrics": metrics})

    # ------------------------------------------------------------------ tree variants
    @staticmethod
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
        return {"gram": np.ascontiguousarray(gram), "vec": np.ascontiguousarray(vec)}

    # ------------------------------------------------------------------ vector sum
    @staticmethod
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
        return {"codes": codes}


class LDPFedLinUCBClient(FedLinUCBClient):
    """Silo-level LDP: Gaussian noise on every released node."""

    variant = "ldp"


class SDPAmpFedLinUCBClient(FedLinUCBClient):
    """Shuffle DP, sum variant: smaller Gaussian noise; the shuffler releases only the sum."""

    variant = "sdp-amp"


class SDPVecSumFedLinUCBClient(FedLinUCBClient):
    """Shuffle DP by vector summation: every user's contribution encoded separately."""

    variant = "sdp-vecsum"
