"""Federated LinUCB with silo-level LDP and shuffle DP (server side; numpy only).

Zhou & Chowdhury, "On Differentially Private Federated Linear Contextual Bandits", ICLR 2024
(arXiv:2302.13945), Algorithm 1 (Private-FedLinUCB) with the privacy protocols of §5.

``M`` silos each serve one user per step. Synchronisations follow a fixed, data-independent
schedule: one Flower round is one synchronisation, after ``B`` local LinUCB steps on every silo
(so a run of ``R`` rounds has horizon ``T = R B`` steps per silo). At round ``k`` the server
broadcasts its private estimate ``(V~, u~)`` of the sum over all silos of ``x x^T`` and ``x y``
up to batch ``k - 1``; each silo acts with ``V = lambda I + V~ + W_i`` and
``theta = V^{-1} (u~ + U_i)`` (``W_i, U_i``: its own statistics of the running batch) and answers
with one node of the distributed tree mechanism (:mod:`bouquet.privacy.tree`):

``fedlinucb``
    no noise, ``lambda = sqrt(M)`` (non-private FedLinUCB; the tree then returns exact sums).
``dp-fedlinucb-ldp``
    silo-level LDP: Gaussian noise ``sigma0`` on every node, calibrated per silo (Thm 5.1);
    ``lambda`` shifts the noisy Gram matrix back to positive definite.
``dp-fedlinucb-sdp-amp``
    shuffle DP (after Thm 5.3): the same nodes with ``sigma0`` smaller by ``sqrt(M_min)``; a
    trusted shuffler releases only the sum of at least ``M_min`` nodes (a shuffled multiset of
    nodes over many users each would not be amplified; see docs/methods/dp-fedlinucb.md).
``dp-fedlinucb-sdp-vecsum``
    shuffle DP with a vector-sum protocol (Thm 5.5, :mod:`bouquet.privacy.shuffle`): every user
    of the node's window is encoded separately; the shuffler releases the per-coordinate sums of
    all silos' messages and the analyser (this strategy) decodes them. No verified epsilon.

Regret is the environment's pseudo-regret, which only a simulation knows; silos report their
cumulative value so that ``metrics.jsonl`` can show it (a deployment has no regret to report).
"""

from __future__ import annotations

import dataclasses
import logging
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import MetricRecord, RecordDict

from bouquet.privacy import ledger, shuffle, tree
from bouquet.schema import key
from bouquet.strategies.arguments import BASE_COMMON_KEYS, StrategySetup
from bouquet.strategies.base import BouquetStrategy

# The protocol derivation silos share lives in its own module; its public names stay importable
# from here (``from bouquet.strategies.linucb import make_protocol`` still works).
from bouquet.strategies.linucb_protocol import (
    TAIL,
    VARIANTS,
    Protocol,
    announced_values,
    env_section,
    horizon_of,
    make_protocol,
    variant_named,
)
from bouquet.strategies.linucb_protocol import Calibration as Calibration
from bouquet.strategies.linucb_protocol import LinUCBVariant as LinUCBVariant
from bouquet.strategies.linucb_protocol import confidence_radius as confidence_radius
from bouquet.strategies.round_log import NodeReply
from bouquet.strategies.sections.linucb import DPLinUCBConfig, LinUCBConfig
from bouquet.wire import validation as v
from bouquet.wire.arrays import to_numpy, to_record
from bouquet.wire.linucb import CODES, GLOBAL_RECORD, GRAM, NODE_RECORD, REGRET_METRIC, VEC

log = logging.getLogger("bouquet")


@dataclasses.dataclass(frozen=True)
class FedLinUCBOptions:
    """FedLinUCB's privacy variant and the feature dimension (constructor options)."""

    privacy: str = key(
        "none", "none: FedLinUCB; ldp: silo-level LDP (tree mechanism); sdp-amp / sdp-vecsum: "
        "shuffle DP by amplification / the vector-sum protocol",
        choices=tuple(VARIANTS))
    context_dim: int = key(0, "d: dimension of the contexts (required; the bandit task's "
                           "context-dim)", min=0)


class FedLinUCB(BouquetStrategy):
    """Server of (private) federated LinUCB: sums tree nodes per level, broadcasts prefixes.

    Everything that calibrates noise (``M``, the horizon, ``B``, the bounds) comes from the
    operator's configuration; what nodes report (partition ids at hello, the number of nodes
    online) never enters it. Partitions outside ``0..M-1`` are not asked to train. The private
    variants (``privacy``) key silos by partition id and so need ``discovery="query"``.
    """

    method_name = "fedlinucb"
    config_sections = {"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig}
    common_keys = (*BASE_COMMON_KEYS, "num_server_rounds")
    options = FedLinUCBOptions
    holds_model = False
    reply_records = (NODE_RECORD, "metrics")
    selects_by_partition = True

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        setup = self.setup
        opts: FedLinUCBOptions = self.option
        variant = variant_named(opts.privacy)
        if self.method == self.method_name and variant.private:
            self.method = self.setup.method = variant.method
        if opts.context_dim < 1:
            raise ValueError("FedLinUCB: context_dim is required (>= 1): the dimension of the "
                             "bandit contexts")
        if variant.private and self.federation.discovery != "query":
            raise ValueError(f"FedLinUCB: privacy={variant.name!r} keys silos by partition id: use "
                             "discovery='query' (bouquet's ClientApp answers it; a user's ClientApp "
                             "answers with bouquet.clients.discovery.answer_hello)")
        self.variant = variant
        self.lin: LinUCBConfig = setup.sections["linucb"]
        self.dp: DPLinUCBConfig | None = setup.sections["dp-linucb"] if variant.private \
            else None
        self.dim = opts.context_dim
        self.horizon_rounds = horizon_of(self.lin, self.common.num_server_rounds)
        if self.common.num_server_rounds > self.horizon_rounds:
            raise ValueError(
                f"num-server-rounds ({self.common.num_server_rounds}) exceeds "
                f"linucb.horizon-rounds ({self.horizon_rounds}): the privacy calibration would "
                "not cover the extra synchronisations")
        self.levels = tree.num_levels(self.horizon_rounds)
        self.num_silos = self.lin.num_silos
        self.proto: Protocol | None = None
        if self.num_silos or variant.private:
            # private variants: fixed now, from the operator's config (raises if it is missing)
            self.proto = make_protocol(variant.name, self.lin, self.dp, self.dim, self.num_silos,
                                       self.horizon_rounds)
            asked = math.ceil(self.common.fraction_train * self.num_silos)
            if variant.shuffled and asked < self.proto.min_silos:
                raise ValueError(
                    f"fraction-train {self.common.fraction_train:g} asks {asked} of "
                    f"{self.num_silos} silos per round, fewer than dp-linucb.min-silos "
                    f"({self.proto.min_silos}): the shuffler would never release a sum")
        self.tree = tree.ServerTree.empty(self.levels, tree.stats_size(self.dim))
        self.ledger = ledger.TreeLedger(max(self.num_silos, 0))
        #: last round whose silos were asked (the LDP epsilon counts syncs 1..this)
        self.rounds_done = 0
        self.cum_regret: dict[int, float] = {}

    # ------------------------------------------------------------------ protocol
    def protocol(self) -> Protocol:
        """Return the run's protocol (fixed once the number of silos is known)."""
        if self.proto is None:
            raise RuntimeError("the protocol is fixed at the first round")
        return self.proto

    def _fix_silos(self) -> None:
        if self.proto is None:  # fedlinucb without linucb.num-silos: lambda = sqrt(nodes known)
            self.num_silos = max(len(self.partitions), 1)
            self.ledger = ledger.TreeLedger(self.num_silos)
            self.proto = make_protocol(self.variant.name, self.lin, self.dp, self.dim, self.num_silos,
                                       self.horizon_rounds)

    def choose_partitions(self, rnd: int, available: list[int]) -> list[int]:
        """Private variants: only partitions ``0..M-1`` (``M`` from the config) take part."""
        if self.variant.private:
            outside = [p for p in available if not 0 <= p < self.num_silos]
            if outside:
                log.warning("round %d: partitions %s are outside linucb.num-silos = %d and are "
                            "not asked", rnd, outside, self.num_silos)
            available = [p for p in available if 0 <= p < self.num_silos]
        return super().choose_partitions(rnd, available)

    def evaluation_content(self, rnd: int, partition_id: int) -> None:
        """No federated evaluation: the regret (a train metric) is what a bandit run reports."""
        return None

    # ------------------------------------------------------------------ round
    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Broadcast the prefix estimate over batches ``1..rnd-1`` to every silo."""
        self._fix_silos()
        proto = self.protocol()
        self.rounds_done = max(self.rounds_done, rnd)  # asked silos may release at rnd
        gram, vec = tree.unpack(self.tree.prefix(rnd - 1), self.dim)
        out = {}
        for pid in partitions:
            cfg = self.base_config(rnd)
            for name, value in announced_values(proto).items():
                cfg[name] = value
            out[pid] = RecordDict({GLOBAL_RECORD: to_record({GRAM: gram, VEC: vec}),
                                   "config": cfg})
        return out

    #: ``num-examples`` is the window's user count, checked exactly below.
    weighted_by_examples = False

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> None:
        """Node shapes and dtypes, symmetry, magnitude bounds, PSD up to noise, regret plausible.

        A Gram node is a sum of ``x x^T`` plus (private variants) one symmetric Gaussian noise
        matrix of entry scale sigma, whose spectral norm stays below ``sigma (2 sqrt(d) + TAIL)``
        with overwhelming probability: a smaller eigenvalue than minus that is no Gram matrix.
        The cumulative regret may grow by at most ``max-step-regret`` per step played.
        """
        proto = self.protocol()
        v.expect_records(content, self.reply_records)
        if self.variant.sends_codes:
            params = proto.vecsum_params(rnd)
            rows = proto.window_users(rnd)
            codes = v.arrays(content, NODE_RECORD, {
                CODES: ((rows, shuffle.num_coordinates(self.dim)), np.int32)})[CODES]
            try:
                params.check(codes)
            except ValueError as exc:
                raise v.InvalidReply(f"node/codes: {exc}") from None
        else:
            d = self.dim
            arrays = v.arrays(content, NODE_RECORD, {GRAM: ((d, d), np.float64),
                                                VEC: ((d,), np.float64)})
            gram, vec = arrays[GRAM], arrays[VEC]
            if not np.array_equal(gram, gram.T):
                raise v.InvalidReply("node/gram: not symmetric")
            n_w = proto.window_users(rnd)
            bound = proto.feature_bound
            slack = TAIL * proto.sigma
            if np.abs(gram).max() > n_w * bound**2 + slack or np.diag(gram).min() < -slack:
                raise v.InvalidReply("node/gram: values impossible for the window's users")
            if proto.clips and np.abs(vec).max() > n_w * bound * proto.reward_bound + slack:
                raise v.InvalidReply("node/vec: values impossible for the window's users")
            v.positive_semidefinite(
                gram, "node/gram",
                slack=proto.sigma * (2 * np.sqrt(d) + TAIL) + 1e-9 * (1 + n_w * bound**2))
        if v.num_examples(content) != proto.batch:
            raise v.InvalidReply(f"metrics/num-examples: expected {proto.batch}")
        last = self.cum_regret.get(partition_id, 0.0)
        most = rnd * proto.batch * self.lin.max_step_regret
        v.metric(content, REGRET_METRIC, min=last - 1e-9, max=most + 1e-9)

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Sum the nodes of this sync's level (SDP: through the shuffler, sums only); log regret."""
        total: np.ndarray | None
        if self.variant.shuffled:
            total = self._through_shuffler(rnd, replies)
        else:
            total = np.zeros(tree.stats_size(self.dim))
            for r in replies:
                arrays = to_numpy(r.content[NODE_RECORD])  # type: ignore[arg-type]
                total += tree.pack(arrays[GRAM], arrays[VEC])
        if total is not None:
            self.tree.store(rnd, total)
        for r in replies:
            self.cum_regret[r.partition_id] = float(
                r.content["metrics"][REGRET_METRIC])  # type: ignore[index,arg-type]
        return self.round_metrics(rnd)

    def _through_shuffler(self, rnd: int, replies: list[NodeReply]) -> np.ndarray | None:
        """Hand every message to the shuffler; return the analysed sum (None: not released)."""
        proto = self.protocol()
        vecsum = self.variant.sends_codes
        size = shuffle.num_coordinates(self.dim) if vecsum else tree.stats_size(self.dim)
        shuffler = shuffle.SumShuffler(size, proto.min_silos)
        for r in replies:
            node = r.content[NODE_RECORD]
            if vecsum:
                shuffler.submit(r.partition_id, node[CODES].numpy())  # type: ignore[index,union-attr]
            else:
                shuffler.submit(r.partition_id, tree.pack(
                    node[GRAM].numpy(), node[VEC].numpy()))  # type: ignore[index,union-attr]
        released = shuffler.release()
        if released is None:
            log.warning("round %d: %d silo message(s), fewer than the %d the noise is calibrated "
                        "for; the shuffler releases nothing", rnd, len(replies), proto.min_silos)
            return None
        sums, rows, senders = released
        if not vecsum:
            self.ledger.record(rnd, senders, copies=len(senders))
            return sums
        gram, vec = shuffle.rows_to_stats(proto.vecsum_params(rnd).analyse(sums, rows), self.dim)
        return tree.pack(gram, vec)

    def privacy(self) -> dict[str, Any]:
        """Epsilon of the noise actually added, per silo and for the run (tree variants)."""
        proto = self.protocol()
        if self.variant.accounting == "unverified":
            return {"epsilon": None, "delta": proto.delta, "verified": False,
                    "claimed_epsilon": proto.epsilon,
                    "note": "vector-sum protocol with the reference code's constants; no "
                            "verified bound is computed (docs/methods/dp-fedlinucb.md)"}
        book = self.ledger
        if self.variant.accounting == "every-sync":
            # the server sees every node on its own; count a release by every silo at every sync
            # so far (an upper bound: a node rejected or late was still seen, a silo not asked
            # released less)
            book = ledger.TreeLedger.everyone(self.num_silos, self.rounds_done)
        per_silo = book.epsilons(proto.sensitivity, proto.sigma, proto.delta)
        out: dict[str, Any] = {
            "epsilon": max(per_silo.values(), default=0.0), "delta": proto.delta,
            "per_silo": {str(k): e for k, e in per_silo.items()},
            "target_epsilon": proto.epsilon, "sigma": proto.sigma,
            "sensitivity": proto.sensitivity, "accountant": "exact Gaussian (GDP)",
            "verified": True}
        if self.variant.accounting == "released":
            # what the silos' nodes would cost if the shuffler handed them to the server
            alone = ledger.TreeLedger(self.num_silos, self.ledger.syncs,
                                      [1] * len(self.ledger.syncs), self.ledger.members)
            out["epsilon_without_shuffler"] = max(
                alone.epsilons(proto.sensitivity, proto.sigma, proto.delta).values(), default=0.0)
        return out

    def round_metrics(self, rnd: int) -> dict[str, float]:
        """Regret (total, per silo, time average) and the privacy spent so far."""
        proto = self.protocol()
        t = rnd * proto.batch
        total = sum(self.cum_regret.values())
        out: dict[str, float] = {"regret": total / t, "cum_regret": total, "t": float(t),
                                 "level": float(tree.lowest_set_bit(rnd)), "lambda": proto.lam}
        for pid in sorted(self.cum_regret):
            out[f"regret_silo{pid}"] = self.cum_regret[pid]
        if proto.private:
            priv = self.privacy()
            if priv["epsilon"] is not None:
                out["epsilon"] = float(priv["epsilon"])
                for pid, eps in priv["per_silo"].items():
                    out[f"epsilon_silo{pid}"] = float(eps)
            else:
                out["epsilon_claimed"] = proto.epsilon
            out["delta"] = proto.delta
            out["sigma"] = proto.sigma
        return out

    def headline_metrics(self) -> tuple[str, ...]:
        """``final.regret`` in summary.json is the time-averaged cumulative regret."""
        return ("regret",)

    def summary_extras(self) -> dict[str, dict[str, Any]]:
        """``privacy`` in summary.json: the spent epsilon per silo and how it was computed."""
        if self.proto is None or not self.proto.private:
            return {}
        return {"privacy": self.privacy()}

    # ------------------------------------------------------------------ state
    def state_dict(self) -> dict[str, Any]:
        """Return the base state, the level sums, the ledger, ``M`` and the silos' regrets."""
        return {**super().state_dict(), "tree": self.tree.state(), "num_silos": self.num_silos,
                "ledger": self.ledger.state(), "rounds_done": self.rounds_done,
                "cum_regret": {str(k): val for k, val in self.cum_regret.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict` (``M`` must match the config for private variants)."""
        super().load_state_dict(state)
        self.tree = tree.ServerTree.from_state(state["tree"])
        saved = int(state["num_silos"])
        if self.variant.private and saved != self.num_silos:
            raise ValueError(f"checkpoint has {saved} silos, linucb.num-silos is {self.num_silos}")
        self.num_silos = saved
        self.proto = None
        if self.num_silos:
            self.proto = make_protocol(self.variant.name, self.lin, self.dp, self.dim, self.num_silos,
                                       self.horizon_rounds)
        self.ledger = ledger.TreeLedger.from_state(self.num_silos, state["ledger"])
        self.cum_regret = {int(k): float(val) for k, val in state["cum_regret"].items()}
        # the syncs asked so far are charged to every silo (LDP): a resumed server keeps them
        self.rounds_done = int(state.get("rounds_done", 0))


# ---------------------------------------------------------------------- factories
def from_setup(setup: StrategySetup, privacy: str) -> FedLinUCB:
    """FedLinUCB from bouquet's config; ``context_dim`` comes from the bandit task's section."""
    return FedLinUCB.from_setup(setup, privacy=privacy,
                                context_dim=int(env_section(setup.sections).context_dim))


def build_fedlinucb(setup: StrategySetup) -> FedLinUCB:
    """Strategy factory of ``fedlinucb``."""
    return from_setup(setup, "none")


def build_ldp(setup: StrategySetup) -> FedLinUCB:
    """Strategy factory of ``dp-fedlinucb-ldp``."""
    return from_setup(setup, "ldp")


def build_sdp_amp(setup: StrategySetup) -> FedLinUCB:
    """Strategy factory of ``dp-fedlinucb-sdp-amp``."""
    return from_setup(setup, "sdp-amp")


def build_sdp_vecsum(setup: StrategySetup) -> FedLinUCB:
    """Strategy factory of ``dp-fedlinucb-sdp-vecsum``."""
    return from_setup(setup, "sdp-vecsum")


# ---------------------------------------------------------------------- conformance
def bad_replies(content: RecordDict) -> list[tuple[str, RecordDict]]:
    """Method-specific malformed replies for the conformance suite (all must be rejected)."""
    node = to_numpy(content[NODE_RECORD])  # type: ignore[arg-type]
    metrics = content["metrics"]

    def reply(arrays: Mapping[str, np.ndarray], regret: float | None = None) -> RecordDict:
        rec = MetricRecord(dict(metrics))  # type: ignore[arg-type]
        if regret is not None:
            rec[REGRET_METRIC] = regret
        return RecordDict({NODE_RECORD: to_record(arrays), "metrics": rec})

    out: list[tuple[str, RecordDict]] = [("negative regret", reply(node, -1.0))]
    if CODES in node:
        codes = node[CODES]
        high = codes.copy()
        high[0, 0] = np.iinfo(np.int32).max
        low = codes.copy()
        low[0, 0] = -1
        out += [("wrong dimension", reply({CODES: codes[:, :-1]})),
                ("code above the protocol's range", reply({CODES: high})),
                ("negative code", reply({CODES: low})),
                ("float codes", reply({CODES: codes.astype(np.float64)}))]
        return out
    gram, vec = node[GRAM], node[VEC]
    d = gram.shape[0]
    skew = gram.copy()
    skew[0, d - 1] += 1.0
    nan = vec.copy()
    nan[0] = np.nan
    big = gram.copy()
    big[0, 0] = 1e12
    out += [("wrong dimension", reply({GRAM: np.zeros((d + 1, d + 1)), VEC: np.zeros(d + 1)})),
            ("non-symmetric matrix", reply({GRAM: skew, VEC: vec})),
            ("NaN in vector", reply({GRAM: gram, VEC: nan})),
            ("impossible magnitude", reply({GRAM: big, VEC: vec}))]
    return out
