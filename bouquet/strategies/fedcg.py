"""FedCG: heterogeneity-aware client selection and per-client gradient compression.

Jiang, Xu, Xu, Wang & Qian, "Heterogeneity-Aware Federated Learning with Adaptive Client Selection
and Gradient Compression", IEEE INFOCOM 2023 (arXiv 2212.09483). Every round the server

1. estimates each online client's computation time and current uplink (:mod:`.system_model`);
2. selects up to ``k`` representative clients by greedy facility location over the clients'
   latest updates (:mod:`.selection`), and gives each client a keep-ratio from a linear program
   that trades round time against compression error (:mod:`.ratio_lp`); the two decisions
   alternate until the objective stops improving (:mod:`.fedcg_plan`);
3. sends the global model and each client's ratio; a client trains, compresses its model delta
   with top-k at that ratio plus error feedback (:mod:`bouquet.compression`) and replies;
4. adds the decoded updates weighted by the share of clients each selected one represents, and
   keeps every decoded update as that client's representativeness signal.

The first ``warmup-rounds`` rounds train every online client so that every client has a signal.
The paper's exact objective, LP and stopping rule are not public: what is reconstructed and which
alternatives are configurable is listed in docs/methods/fedcg.md.

Baselines share this class: ``fedcg-select-only`` (selection, one uniform ratio),
``fedcg-lp-only`` (random selection, LP ratios) and ``random-topk`` (random selection, one
uniform ratio; with ``fedcg.uniform-ratio=1`` it is FedAvg with the same time accounting).

Numpy/scipy only (server side).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, RecordDict

from bouquet.compression import PayloadError, TopK, decode_record
from bouquet.compression.bitpack import index_width
from bouquet.schema import key
from bouquet.strategies import fedcg_plan
from bouquet.strategies.arguments import BASE_COMMON_KEYS, LOCAL_TRAINING_KEYS, StrategySetup
from bouquet.strategies.model import ModelStrategy
from bouquet.strategies.round_log import NodeReply, Parsed
from bouquet.strategies.sections.fedcg import FedcgConfig
from bouquet.strategies.system_model import (
    MeasuredProfile,
    SimulatedProfile,
    TimeModel,
    round_time,
)
from bouquet.wire import validation as v
from bouquet.wire.fedcg import (
    PAYLOAD_RECORD,
    RATIO_KEY,
    STEP_TIME_METRIC,
    UPLINK_METRIC,
    wire_compressor,
)
from bouquet.wire.flat import Layout


@dataclasses.dataclass(frozen=True)
class PlannedRound:
    """The plan (selection, ratios, weights) of the round whose replies are awaited.

    Made when the round's partitions are chosen, read by ``configure_round`` (the ratios sent),
    ``validate_reply`` (the ratio each reply must respect) and ``aggregate_round`` (the weights);
    a reply for any other round finds no plan.
    """

    round: int
    plan: fedcg_plan.RoundPlan


@dataclasses.dataclass(frozen=True)
class FedCGOptions:
    """FedCG's ablations as constructor options (the registry's fedcg-* methods set them)."""

    selection: str = key(
        "facility-location", "client selection: facility-location (FedCG) or random (seeded)",
        choices=("facility-location", "random"))
    ratios: str = key("lp", "keep-ratios: lp (FedCG) or uniform (fedcg.uniform-ratio)",
                      choices=("lp", "uniform"))


class FedCG(ModelStrategy):
    """FedCG server: submodular client selection and LP-chosen per-client top-k ratios.

    ``selection`` and ``ratios`` give the ablation baselines: ``fedcg-select-only`` is
    ``ratios="uniform"``, ``fedcg-lp-only`` is ``selection="random"``, ``random-topk`` is both.
    Its clients send top-k payloads (bouquet's client half).
    """

    method_name = "fedcg"
    config_sections = {"fedcg": FedcgConfig}
    common_keys = (*BASE_COMMON_KEYS, *LOCAL_TRAINING_KEYS, "target_accuracy")
    options = FedCGOptions
    reply_records = (PAYLOAD_RECORD, "metrics")
    selects_by_partition = True

    def __init__(self, **kwargs: Any) -> None:
        # Server state (checkpointed).
        self.signals: dict[int, np.ndarray] = {}
        self.last_ratio: dict[int, float] = {}  # reported and checkpointed, never planned on
        self.sim_time = 0.0
        self.time_after: dict[int, float] = {}
        self.accuracy: dict[int, float] = {}
        #: The plan of the round in progress (transient, never checkpointed: only
        #: aggregate_round commits what it decided).
        self.planned: PlannedRound | None = None
        super().__init__(**kwargs)
        cfg = self.cfg
        variant: FedCGOptions = self.option
        self.profile = SimulatedProfile(
            seed=self.common.seed, step_time_min=cfg.step_time_min,
            step_time_max=max(cfg.step_time_max, cfg.step_time_min),
            step_time_dist=cfg.step_time_dist, uplink_min_mbps=cfg.uplink_min_mbps,
            uplink_max_mbps=max(cfg.uplink_max_mbps, cfg.uplink_min_mbps),
            uplink_dist=cfg.uplink_dist, uplink_per_round=cfg.uplink_per_round)
        self.measured = MeasuredProfile(
            smoothing=cfg.measured_smoothing,
            fallback_step_time=(cfg.step_time_min + cfg.step_time_max) / 2,
            fallback_uplink_mbps=(cfg.uplink_min_mbps + cfg.uplink_max_mbps) / 2)
        self.settings = fedcg_plan.PlanSettings(
            selection=variant.selection, ratios=variant.ratios, lam_sel=cfg.diversity_weight,
            lam_cmp=cfg.error_weight, time_weight=cfg.time_weight, lp_error=cfg.lp_error,
            theta_min=cfg.theta_min, uniform_ratio=cfg.uniform_ratio,
            max_iterations=cfg.max_iterations, lp_form=cfg.lp_form, budget=cfg.time_budget)

    @property
    def cfg(self) -> FedcgConfig:
        """The ``fedcg`` section."""
        return self.setup.sections["fedcg"]  # type: ignore[no-any-return]

    def on_model(self) -> None:
        """The flat layout (float models only) and the time model charged for it."""
        self.layout = Layout.of(self.weights)
        self.dim = self.layout.size
        charged = self.cfg.virtual_params or self.dim
        self.time_model = TimeModel(
            params=charged,
            index_bits=index_width(charged) if self.cfg.charge_index_bits else 0)

    # ------------------------------------------------------------------ planning
    def _system(self) -> SimulatedProfile | MeasuredProfile:
        return self.profile if self.cfg.system == "simulated" else self.measured

    def steps_of(self, pid: int) -> int:
        """Local steps of ``pid`` (from its data size learnt at hello)."""
        return self.max_local_steps(pid)

    def client_times(self, rnd: int, pids: list[int]) -> fedcg_plan.ClientTimes:
        """Compute and dense-upload seconds of each candidate this round."""
        sysm = self._system()
        compute = [self.time_model.compute_s(self.steps_of(p), sysm.step_time(p)) for p in pids]
        upload = [self.time_model.upload_s(sysm.uplink_bps(p, rnd)) for p in pids]
        return fedcg_plan.ClientTimes(list(pids), np.array(compute), np.array(upload))

    def data_size(self, pid: int) -> float:
        """Training examples of ``pid`` reported at hello, capped by the weight rule (at least 1)."""
        return float(max(self.declared_size(pid), 1))

    def client_weight(self, pid: int) -> float:
        """Weight of a client in facility location and aggregation."""
        return self.data_size(pid) if self.cfg.client_weights == "examples" else 1.0

    def choose_partitions(self, rnd: int, available: list[int]) -> list[int]:
        """Plan the round (selection and ratios) and return the selected partitions."""
        k = self.sample_size(rnd, len(available))
        rng = np.random.default_rng([self.common.seed, rnd, 7])
        s = self.settings
        random = s.selection == "random"
        if rnd <= self.cfg.warmup_rounds and (not random or self.cfg.warmup_random):
            n = max(1, math.ceil(self.cfg.warmup_fraction * len(available)))
            members = sorted(available) if n >= len(available) else sorted(
                int(available[i]) for i in rng.choice(len(available), size=n, replace=False))
            weights = {p: (self.data_size(p) if random else self.client_weight(p))
                       for p in members}
            plan = fedcg_plan.plan_everyone(self.client_times(rnd, members), weights, s)
        elif random:
            times = self.client_times(rnd, available)
            plan = fedcg_plan.plan_random(
                times, k, {p: self.data_size(p) for p in available}, s, rng)
        else:
            times = self.client_times(rnd, available)
            weights = {p: self.client_weight(p) for p in set(available) | set(self.signals)}
            plan = fedcg_plan.plan_joint(times, k, self.signals, weights, s, rng)
        self.planned = PlannedRound(rnd, plan)
        return plan.selected

    def plan_of(self, rnd: int) -> fedcg_plan.RoundPlan | None:
        """The plan of round ``rnd`` (None when that round was not planned)."""
        planned = self.planned
        return planned.plan if planned is not None and planned.round == rnd else None

    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Send the global model and each selected client's keep-ratio."""
        plan = self.plan_of(rnd)
        if plan is None:
            self.choose_partitions(rnd, partitions)
            plan = self.plan_of(rnd)
        assert plan is not None
        out = {}
        for pid in partitions:
            if pid not in plan.theta:
                raise ValueError(f"partition {pid} is not in round {rnd}'s plan")
            content = self.model_message(rnd)
            config = content["config"]
            assert isinstance(config, ConfigRecord)
            config[RATIO_KEY] = float(plan.theta[pid])
            out[pid] = content
        return out

    # ------------------------------------------------------------------ replies
    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> Parsed:
        """Check the payload decodes at the client's ratio with no more coordinates than allowed.

        Returns the update's norm. Measured step times and uplinks (deployment) feed the ratio
        LP, so they are bounded to plausible ranges (up to a day per step, 1e6 Mbit/s).
        """
        plan = self.plan_of(rnd)
        if plan is None or partition_id not in plan.theta:
            raise v.InvalidReply(f"partition {partition_id} was not selected in round {rnd}")
        comp = wire_compressor(plan.theta[partition_id], self.dim)
        if isinstance(comp, TopK):
            rec = v.array_record(content, PAYLOAD_RECORD)
            sent = rec["values"].numpy().size if "values" in rec else 0
            allowed = comp.count(self.dim)
            if sent > allowed:
                raise v.InvalidReply(f"{sent} coordinates sent, the ratio allows {allowed}")
        try:
            vec = decode_record(content, comp, (self.dim,), PAYLOAD_RECORD)
        except PayloadError as exc:
            raise v.InvalidReply(f"{PAYLOAD_RECORD}: {exc}") from exc
        v.num_examples(content)
        rec_m = v.metric_record(content)
        if "train_loss" in rec_m:
            v.metric(content, "train_loss")
        if STEP_TIME_METRIC in rec_m:
            v.metric(content, STEP_TIME_METRIC, min=0.0, max=86_400.0)
        if UPLINK_METRIC in rec_m:
            v.metric(content, UPLINK_METRIC, min=1e-9, max=1e6)
        return Parsed(v.l2_norm([vec]), vec)

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Add the decoded updates weighted by the clients they represent; commit the plan."""
        plan = self.plan_of(rnd)
        assert plan is not None
        gamma = np.array([plan.gamma[r.partition_id] for r in replies], dtype=np.float64)
        gamma = gamma / gamma.sum() if gamma.sum() > 0 else np.full(len(replies), 1 / len(replies))
        update = np.zeros(self.dim, dtype=np.float64)
        for g, r in zip(gamma, replies, strict=True):
            update += g * r.parsed
        flat = self.layout.flatten(self.weights).astype(np.float64) + self.cfg.server_lr * update
        self.weights = self.layout.unflatten(flat.astype(np.float32))
        for r in replies:
            self.signals[r.partition_id] = r.parsed.astype(np.float32)
            if self.cfg.system == "measured":
                m = r.content["metrics"]
                step = float(m[STEP_TIME_METRIC]) if STEP_TIME_METRIC in m else None  # type: ignore[arg-type]
                up = float(m[UPLINK_METRIC]) if UPLINK_METRIC in m else None  # type: ignore[arg-type]
                self.measured.report(r.partition_id, step, up)
        for pid, theta in plan.theta.items():
            self.last_ratio[pid] = theta
        finish = self.finish_times(rnd, plan)
        t_round, gap = round_time(finish.values())
        self.sim_time += t_round
        self.time_after[rnd] = self.sim_time
        loss = [(float(r.content["metrics"]["train_loss"]),  # type: ignore[arg-type]
                 float(r.content["metrics"]["num-examples"]))  # type: ignore[arg-type]
                for r in replies if "train_loss" in r.content["metrics"]]  # type: ignore[operator]
        metrics = {
            "sim_round_time_s": t_round,
            "sim_time_cum_s": self.sim_time,
            "straggler_gap_s": gap,
            "mean_ratio": float(np.mean(list(plan.theta.values()))),
            "selected": float(len(plan.selected)),
            "plan_iterations": float(plan.iterations),
        }
        if not math.isnan(plan.objective):
            metrics["plan_objective"] = plan.objective
        if loss:
            w = sum(n for _, n in loss)
            metrics["train_loss"] = sum(val * n for val, n in loss) / w
        return metrics

    def finish_times(self, rnd: int, plan: fedcg_plan.RoundPlan) -> dict[int, float]:
        """Finish time of every selected client with its exact payload (the round's clock)."""
        sysm = self._system()
        return {p: self.time_model.finish_s(self.steps_of(p), sysm.step_time(p),
                                            sysm.uplink_bps(p, rnd), plan.theta[p])
                for p in plan.selected}

    # ------------------------------------------------------------------ results and state
    def observe_evaluation(self, rnd: int, metrics: Mapping[str, float]) -> None:
        """Remember the round's accuracy (for the simulated time to the target)."""
        if "accuracy" in metrics:
            self.accuracy[rnd] = float(metrics["accuracy"])

    def time_to_target(self, target: float) -> float | None:
        """Return the simulated seconds until the evaluated accuracy first reached ``target``."""
        if target <= 0:
            return None
        for rnd in sorted(self.accuracy):
            if self.accuracy[rnd] >= target and rnd in self.time_after:
                return self.time_after[rnd]
        return None

    def summary_extras(self) -> dict[str, dict[str, Any]]:
        """``time.sim_time_s`` and ``time.sim_time_to_target_s`` for summary.json."""
        return {"time": {"sim_time_s": round(self.sim_time, 6),
                         "sim_time_to_target_s": self.time_to_target(
                             self.common.target_accuracy)}}

    def state_dict(self) -> dict[str, Any]:
        """Model, signals, last ratios, simulated clock, accuracy history, measured estimates."""
        return {
            **super().state_dict(),
            "fedcg": {
                "signals": {str(p): a for p, a in self.signals.items()},
                "last_ratio": {str(p): t for p, t in self.last_ratio.items()},
                "sim_time": self.sim_time,
                "time_after": {str(r): t for r, t in self.time_after.items()},
                "accuracy": {str(r): a for r, a in self.accuracy.items()},
                "measured": self.measured.state_dict(),
            },
        }

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        s = state["fedcg"]
        self.signals = {int(p): np.asarray(a, dtype=np.float32) for p, a in s["signals"].items()}
        self.last_ratio = {int(p): float(t) for p, t in s["last_ratio"].items()}
        self.sim_time = float(s["sim_time"])
        self.time_after = {int(r): float(t) for r, t in s["time_after"].items()}
        self.accuracy = {int(r): float(a) for r, a in s["accuracy"].items()}
        self.measured.load_state_dict(s["measured"])
        self.planned = None


def build(setup: StrategySetup) -> FedCG:
    """Strategy factory of ``fedcg``: facility-location selection and LP ratios."""
    return FedCG.from_setup(setup, selection="facility-location", ratios="lp")


def build_select_only(setup: StrategySetup) -> FedCG:
    """``fedcg-select-only``: FedCG's selection, one uniform ratio (``fedcg.uniform-ratio``)."""
    return FedCG.from_setup(setup, selection="facility-location", ratios="uniform")


def build_lp_only(setup: StrategySetup) -> FedCG:
    """``fedcg-lp-only``: seeded random selection, FedCG's LP ratios."""
    return FedCG.from_setup(setup, selection="random", ratios="lp")


def build_random_topk(setup: StrategySetup) -> FedCG:
    """``random-topk``: seeded random selection, uniform top-k (ratio 1 = FedAvg)."""
    return FedCG.from_setup(setup, selection="random", ratios="uniform")
