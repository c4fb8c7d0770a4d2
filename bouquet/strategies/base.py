"""The strategy base every bouquet method builds on.

:class:`BouquetStrategy` is a Flower :class:`~flwr.serverapp.strategy.Strategy`, built with
keyword arguments (``FedAvg(fraction_train=0.5)``) and run by Flower's own
``strategy.start(grid=..., initial_arrays=..., num_rounds=...)``. It composes the federation
services and declares the method hooks. The services, one job a module:

* :mod:`~bouquet.strategies.directory`: node discovery (``discovery="grid"``, ``"query"``
  with a hello per new node, or ``"sampled"`` with a hello only to the new nodes a round
  samples), partitions, declared sizes, node errors, weight bounds;
* :mod:`~bouquet.strategies.transport`: Flower's ``send_and_receive`` with every reply mapped
  back to its node through ``reply_to_message_id``;
* :mod:`~bouquet.strategies.admission`: the one admission path (:meth:`admit_phase`, shared by
  Flower's ``aggregate_*`` and :meth:`train_round`): record names, auxiliary metrics, weight
  cap, the method's checks, norm screen, rollback of a non-finite aggregate;
* :mod:`~bouquet.strategies.round_log`: the round log, its counters and derived metrics;
* :mod:`~bouquet.strategies.flower_api`: Flower's Strategy methods on these phases.

A method implements :meth:`configure_round`, :meth:`validate_reply`, :meth:`aggregate_round` and,
when it has server state beyond what the base keeps, :meth:`state_dict`/:meth:`load_state_dict`.
Train metrics follow one rule (:func:`train_metrics`): a client's metric ``loss`` is reported as
``train_loss``, and one already named ``train_loss`` is not prefixed again.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterable, Mapping
from typing import Any, ClassVar, Self

import numpy as np
from flwr.app import ArrayRecord, ConfigRecord, Message, MessageType, RecordDict
from flwr.serverapp import Grid

from bouquet.strategies import admission
from bouquet.strategies.accounting import content_bytes
from bouquet.strategies.arguments import (
    BASE_COMMON_KEYS,
    Argument,
    StrategySetup,
    arguments_of,
    as_arguments,
    parameters_doc,
    parse,
    resolve_discovery,
    signature,
)
from bouquet.strategies.directory import NodeDirectory, NotEnoughNodes
from bouquet.strategies.flower_api import FlowerStrategyAPI, use_flower_logging
from bouquet.strategies.initial_model import initial_arrays_from_nodes
from bouquet.strategies.node_errors import NodeErrors
from bouquet.strategies.round_log import (
    COUNTERS,
    NodeReply,
    Parsed,
    PendingPhase,
    RoundLog,
    merge_phase,
    round_metrics,
    train_metric_name,
    train_metrics,
    weighted_metrics,
)
from bouquet.strategies.transport import (
    match_replies,
    send_and_collect,
    short_reason,
    with_user_config,
)
from bouquet.wire import validation as v
from bouquet.wire.validation import InvalidReply

#: Names re-exported from the modules that now hold them (imports of ``base`` keep working).
__all__ = [
    "COUNTERS", "BouquetStrategy", "InvalidReply", "NodeDirectory", "NodeReply", "NotEnoughNodes",
    "Parsed", "PendingPhase", "RoundLog", "StrategySetup", "initial_arrays_from_nodes", "match_replies",
    "merge_phase", "round_metrics", "send_and_collect", "short_reason", "train_metric_name",
    "train_metrics", "use_flower_logging", "weighted_metrics", "with_user_config",
]

log = logging.getLogger("bouquet")


class BouquetStrategy(FlowerStrategyAPI):
    """Base class of every bouquet strategy (see the module docstring).

    Subclasses declare :attr:`config_sections` (their configuration sections by prefix),
    :attr:`common_keys` and, for variants, :attr:`options`; the constructor's keyword arguments,
    their checks and the ``Parameters`` section of the class docstring follow from them.
    """

    #: Record names a reply may hold; anything else is rejected.
    reply_records: tuple[str, ...] = ("arrays", "metrics")
    #: Registry name sent to nodes in each message's ``method`` config key.
    method_name: ClassVar[str] = ""
    #: Configuration sections by prefix; their fields are keyword arguments.
    config_sections: ClassVar[Mapping[str, type]] = {}
    #: Sections whose arguments carry their prefix (``dp_enabled``).
    prefixed_sections: ClassVar[tuple[str, ...]] = ()
    #: CommonConfig keys the strategy reads.
    common_keys: ClassVar[tuple[str, ...]] = BASE_COMMON_KEYS
    #: A dataclass of variant options (not run-config keys), or None.
    options: ClassVar[type | None] = None
    #: Whether the strategy keeps a model (then it needs initial arrays before round 1).
    holds_model: ClassVar[bool] = True
    #: The keyword arguments, derived from the declarations above (``__init_subclass__``).
    arguments: ClassVar[list[Argument]] = []
    #: Whether :meth:`choose_partitions` needs every candidate's partition (FedCG plans over
    #: all of them, the private bandits over silo ids): such a strategy cannot sample node ids
    #: first (``discovery="sampled"``), and bouquet's runner gives it ``discovery="query"``.
    selects_by_partition: ClassVar[bool] = False

    def __init_subclass__(cls, **kwargs: Any) -> None:
        """Derive the class's arguments, signature and parameter docs from its declarations."""
        super().__init_subclass__(**kwargs)
        cls.arguments = arguments_of(cls.common_keys, cls.config_sections, cls.options,
                                     cls.prefixed_sections)
        cls.__signature__ = signature(cls.arguments)  # type: ignore[attr-defined]
        doc = inspect.cleandoc(cls.__doc__ or cls.__name__)
        head, examples, tail = doc.partition("\nExamples\n--------")
        cls.__doc__ = (head.rstrip() + "\n\n" + parameters_doc(cls.arguments)
                       + (f"\n\nExamples\n--------{tail}" if examples else ""))

    def __init__(self, *, initial_arrays: ArrayRecord | None = None, method: str | None = None,
                 task: str = "", **kwargs: Any) -> None:
        parsed = parse(type(self).__name__, self.arguments, self.config_sections, self.options,
                       kwargs)
        self.federation = parsed.federation
        #: The variant options (:attr:`options`), None when the class has none.
        self.option: Any = parsed.options
        self.setup = StrategySetup(common=parsed.common, sections=parsed.sections,
                                   method=method or self.method_name, task=task,
                                   initial_arrays=initial_arrays)
        self.common = parsed.common
        self.method = self.setup.method
        if self.federation.discovery == "sampled" and self.selects_by_partition:
            raise ValueError(f"{type(self).__name__}: discovery='sampled' samples node ids before "
                             "their partitions are known, but this strategy selects among every "
                             "candidate's partition; use discovery='query'")
        #: The nodes known: partitions, declared sizes, hello errors.
        self.directory = NodeDirectory()
        #: Update norms of recently accepted replies (the norm screen's memory; checkpointed).
        self.norm_history: dict[str, list[float]] = {}
        self.round_offset = 0
        #: The phases sent and not yet admitted, by message type.
        self.pending: dict[str, PendingPhase] = {}
        #: The log of the last admitted phase, by message type (``train``, ``evaluate``).
        self.last_log: dict[str, RoundLog] = {}

    @classmethod
    def from_setup(cls, setup: StrategySetup, **options: Any) -> Self:
        """Build from bouquet's resolved configuration (what the runner and factories do).

        Nodes are found as the run config's ``discovery`` says; ``auto`` is ``"sampled"`` (a
        hello, which bouquet's ClientApp answers, only to the nodes a round samples: starting
        costs the same for 100 or 30,000 nodes) for a federation of more than
        :data:`~bouquet.strategies.arguments.AUTO_QUERY_MAX_NODES` nodes, else ``"query"``
        (a hello to every node: reproducible sampling), and always ``"query"`` for a strategy
        that :attr:`selects_by_partition` (:func:`resolve_discovery`); every online
        node evaluates (``fraction_evaluate=1``); ``options`` adds or overrides arguments.
        """
        kwargs = as_arguments(cls.arguments, setup.common, setup.sections)
        discovery = resolve_discovery(setup.common.discovery,
                                      selects_by_partition=cls.selects_by_partition,
                                      online_nodes=setup.online_nodes)
        kwargs.update({"discovery": discovery, "fraction_evaluate": 1.0,
                       "min_available_nodes": setup.common.min_train_nodes})
        kwargs.update(options)
        return cls(initial_arrays=setup.initial_arrays, method=setup.method, task=setup.task,
                   **kwargs)

    # ------------------------------------------------------------------ the model
    def needs_model(self) -> bool:
        """Whether the initial model is still to come (from ``configure_train``'s ``arrays``)."""
        return False

    def bind_model(self, arrays: ArrayRecord) -> None:
        """Take the initial model (strategies that hold one override this)."""

    def ensure_model(self, arrays: ArrayRecord | None) -> None:
        """Bind ``arrays`` as the initial model when none was given to the constructor."""
        if not self.needs_model():
            return
        if arrays is None or not len(arrays):
            raise ValueError(f"{type(self).__name__} needs the initial model: pass "
                             "initial_arrays to the constructor or to start()")
        self.bind_model(arrays)

    # ------------------------------------------------------------------ method hooks
    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Return the content to send to each sampled partition this round."""
        raise NotImplementedError

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict
                       ) -> float | Parsed | None:
        """Raise :class:`InvalidReply` if the reply breaks the protocol.

        Returns the L2 norm of the update the reply carries (what it would move the global state
        by), which the base screens against the round's median (``norm-bound-factor``), or None
        for methods whose replies are bounded by their own protocol (the bandits); or a
        :class:`Parsed` with that norm and the typed values aggregation reads
        (``NodeReply.parsed``).
        """
        raise NotImplementedError

    #: Whether replies weigh the average by ``num-examples`` (capped by the declared size).
    weighted_by_examples: bool = True

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Fold validated replies into the global state; return metrics for the round."""
        raise NotImplementedError

    def global_arrays(self) -> ArrayRecord | None:
        """The current global model for evaluation (None when the method has none)."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Server state for checkpoints: numpy arrays and JSON scalars, nested dicts allowed."""
        return {"partitions": {str(k): n for k, n in self.partitions.items()},
                "sizes": {str(k): n for k, n in self.sizes.items()},
                "claims": {str(k): n for k, n in self.directory.claims.items()},
                "norm_history": {k: np.asarray(x, dtype=np.float64)
                                 for k, x in self.norm_history.items()}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore what :meth:`state_dict` returned."""
        self.partitions = {int(k): int(n) for k, n in state.get("partitions", {}).items()}
        self.sizes = {int(k): int(n) for k, n in state.get("sizes", {}).items()}
        self.directory.claims = {int(k): int(n) for k, n in state.get("claims", {}).items()}
        self.norm_history = {k: [float(x) for x in np.asarray(h)]
                             for k, h in state.get("norm_history", {}).items()}

    def headline_metrics(self) -> tuple[str, ...]:
        """Train-phase metric names that belong in ``final``/``best`` (``("regret",)``)."""
        return ()

    def observe_evaluation(self, rnd: int, metrics: Mapping[str, float]) -> None:
        """Called by the run loop with round ``rnd``'s evaluation metrics (central or federated).

        Methods that report something *at* a target (FedCG's simulated time to a target
        accuracy) record what they need here; keep it in :meth:`state_dict` for resumes.
        """

    def summary_extras(self) -> dict[str, dict[str, Any]]:
        """Extra entries merged into ``summary.json`` sections (``{"time": {...}}``)."""
        return {}

    def sample_size(self, rnd: int, available: int) -> int:
        """How many partitions to train this round (``fraction-train`` of those online)."""
        n = int(np.ceil(self.common.fraction_train * available))
        return max(min(n, available), min(self.common.min_train_nodes, available))

    def choose_partitions(self, rnd: int, available: list[int]) -> list[int]:
        """Seeded uniform sampling of partitions; methods with smarter selection override."""
        k = self.sample_size(rnd, len(available))
        rng = np.random.default_rng([self.common.seed, rnd, 7])
        picked = rng.choice(len(available), size=k, replace=False)
        return sorted(available[i] for i in picked)

    def base_config(self, rnd: int) -> ConfigRecord:
        """A fresh ConfigRecord with the method name and round (never shared between nodes)."""
        return ConfigRecord({"method": self.method, "server-round": rnd})

    # ------------------------------------------------------------------ node discovery
    def wanted_nodes(self) -> int:
        """How many usable nodes a round waits for."""
        return max(self.common.min_train_nodes, self.federation.min_available_nodes)

    def discover(self, grid: Grid) -> dict[int, int]:
        """``{partition_id: node_id}`` of online nodes (:meth:`NodeDirectory.discover`)."""
        return self.directory.discover(grid, self.common, discovery=self.federation.discovery,
                                       method=self.method, wanted=self.wanted_nodes())

    def round_nodes(self, grid: Grid, rnd: int) -> tuple[list[int], dict[int, int]]:
        """The partitions a training round uses and ``{partition_id: node_id}`` for them.

        :meth:`choose_partitions` picks among what :meth:`discover` found; under
        ``discovery="sampled"`` those are node ids, and only the picked ones are introduced
        (a hello to those not yet known; one that fails is replaced by another online node, in
        a seeded order: :meth:`NodeDirectory.introduce_sample`).
        """
        by_pid = self.discover(grid)
        chosen = self.choose_partitions(rnd, sorted(by_pid))
        if self.federation.discovery != "sampled":
            return chosen, by_pid
        picked = set(chosen)
        spares = [n for n in sorted(by_pid) if n not in picked]
        order = np.random.default_rng([self.common.seed, rnd, 13]).permutation(len(spares))
        by_pid = self.directory.introduce_sample(
            grid, chosen, [spares[i] for i in order], self.common, method=self.method,
            wanted=self.wanted_nodes())
        return sorted(by_pid), by_pid

    def evaluation_candidates(self, grid: Grid) -> dict[int, int]:
        """``{partition_id: node_id}`` of the online nodes an evaluation phase may ask.

        Every online node, except under ``discovery="sampled"``: there only the online nodes
        that already answered a hello in the run (the ones training rounds sampled), so that
        evaluation never says hello itself and costs at most the nodes the run has used, not
        the federation's size (``fraction_evaluate=1`` asks every *known* node).
        """
        by_pid = self.discover(grid)
        if self.federation.discovery != "sampled":
            return by_pid
        return {self.partitions[n]: n for n in sorted(by_pid) if n in self.partitions}

    def introduce(self, grid: Grid, node_ids: list[int]) -> dict[int, int]:
        """``{partition_id: node_id}`` of ``node_ids`` (:meth:`NodeDirectory.introduce`)."""
        return self.directory.introduce(grid, node_ids, method=self.method,
                                        round_timeout=self.common.round_timeout)

    def federation_size(self) -> int:
        """Clients in the federation (:meth:`NodeDirectory.federation_size`)."""
        return self.directory.federation_size(self.federation.discovery)

    def refuse_hello(self, node_id: int, reason: str) -> None:
        """A refused hello answer (:meth:`NodeDirectory.refuse_hello`)."""
        self.directory.refuse_hello(node_id, reason)

    def report_query_errors(self, rlog: RoundLog) -> None:
        """Put the hello errors no round has recorded yet into ``rlog`` (kind ``errors``)."""
        self.directory.report_query_errors(rlog)

    @property
    def partitions(self) -> dict[int, int]:
        """node_id -> partition-id (:attr:`NodeDirectory.partitions`)."""
        return self.directory.partitions

    @partitions.setter
    def partitions(self, value: dict[int, int]) -> None:
        self.directory.partitions = value

    @property
    def sizes(self) -> dict[int, int]:
        """partition-id -> examples declared at hello (:attr:`NodeDirectory.sizes`)."""
        return self.directory.sizes

    @sizes.setter
    def sizes(self, value: dict[int, int]) -> None:
        self.directory.sizes = value

    @property
    def node_errors(self) -> NodeErrors:
        """Hello errors not yet in a round's log (:attr:`NodeDirectory.node_errors`)."""
        return self.directory.node_errors

    # ------------------------------------------------------------------ weights and bounds
    def size_cap(self) -> float:
        """Largest weight one node may have (:meth:`NodeDirectory.size_cap`)."""
        return self.directory.size_cap(self.common)

    def declared_size(self, partition_id: int) -> int:
        """A node's declared data size, clipped to :meth:`size_cap` (0 when it declared none)."""
        return self.directory.declared_size(partition_id, self.common)

    def max_local_steps(self, partition_id: int, *, clipped: bool = False) -> int:
        """Most local steps a node may take in a round (:meth:`NodeDirectory.max_local_steps`)."""
        return self.directory.max_local_steps(partition_id, self.common,
                                              discovery=self.federation.discovery,
                                              clipped=clipped)

    def weight_cap(self) -> float:
        """Largest training weight one node may have (:meth:`NodeDirectory.weight_cap`)."""
        return self.directory.weight_cap(self.common, discovery=self.federation.discovery)

    def check_weight(self, partition_id: int, content: RecordDict) -> None:
        """``num-examples`` at most the declared size; clipped to :meth:`weight_cap`."""
        admission.check_weight(content, self.sizes.get(partition_id, 0), self.weight_cap())

    def screen_norms(self, norms: Mapping[int, float], key: str = "train") -> dict[int, str]:
        """Partitions whose update norm is out of bounds (:func:`admission.screen_norms`).

        ``key`` names the kind of update (a method whose phases send different quantities
        keeps one memory per phase in :attr:`norm_history`).
        """
        return admission.screen_norms(norms, self.norm_history.get(key, []),
                                      max_update_norm=self.common.max_update_norm,
                                      factor=self.common.norm_bound_factor)

    def remember_norms(self, norms: list[float], key: str = "train", keep: int = 64) -> None:
        """Keep the accepted norms of the last rounds for :meth:`screen_norms`."""
        self.norm_history[key] = admission.remembered(self.norm_history.get(key, []), norms,
                                                      keep)

    def state_is_finite(self) -> bool:
        """Whether the global state is finite (the base checks :meth:`global_arrays`)."""
        return admission.arrays_are_finite(self.global_arrays())

    # ------------------------------------------------------------------ one phase
    def send_phase(self, rnd: int, contents: Mapping[int, RecordDict], by_pid: Mapping[int, int],
                   message_type: str, *, norm_key: str = "train",
                   before: RoundLog | None = None) -> list[Message]:
        """Messages for ``contents`` (by partition); the phase waits in :attr:`pending`."""
        node_of = {pid: by_pid[pid] for pid in contents}
        messages = [Message(c, dst_node_id=node_of[pid], message_type=message_type,
                            group_id=str(rnd)) for pid, c in contents.items()]
        self.pending[message_type] = PendingPhase(
            round=rnd, message_type=message_type, norm_key=norm_key,
            partition_of={n: pid for pid, n in node_of.items()},
            down_bytes={pid: content_bytes(c) for pid, c in contents.items()},
            messages=messages, before=before)
        return messages

    def admit_phase(self, message_type: str, replies: Iterable[Message]) -> RoundLog:
        """Admit the replies to the pending phase of ``message_type``: the one admission path.

        Train replies pass, in order: the record names, the auxiliary metrics (finite
        scalars), the weight (:meth:`check_weight`), the method's :meth:`validate_reply`, and
        the norm screen (:meth:`screen_norms`); the aggregate is rolled back if it leaves a
        non-finite global state. Evaluation replies pass
        :func:`~bouquet.wire.validation.evaluation_reply`. Error replies are mapped to
        their node through ``reply_to_message_id``, messages without a reply are counted
        missing, and every refused reply is named in ``failures``. The phase stays in
        :attr:`pending` while its replies are admitted (a method whose phases expect different
        replies reads it there, as Fed-SB's init does).
        """
        try:
            return admission.admit(self, self.pending[message_type], replies)
        finally:
            self.pending.pop(message_type, None)

    def run_phase(self, grid: Grid, rnd: int, contents: Mapping[int, RecordDict],
                  by_pid: Mapping[int, int], message_type: str, *,
                  norm_key: str = "train") -> RoundLog:
        """Send ``contents`` (by partition), wait up to ``round-timeout``, admit the replies."""
        messages = self.send_phase(rnd, contents, by_pid, message_type, norm_key=norm_key)
        replies = grid.send_and_receive(messages, timeout=self.common.round_timeout) \
            if messages else []
        return self.admit_phase(message_type, replies)

    def before_train(self, grid: Grid, rnd: int) -> RoundLog | None:
        """A phase to run before a round's training (Fed-SB's one-time init); None by default."""
        return None

    def train_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Sample, send, collect, validate and aggregate one training round."""
        messages = self.configure_train(rnd, self.global_arrays() or ArrayRecord(),
                                        ConfigRecord(), grid)
        replies = grid.send_and_receive(messages, timeout=self.common.round_timeout) \
            if messages else []
        return self.admit_phase(MessageType.TRAIN, replies)

    def admit_train_reply(self, rnd: int, partition_id: int, content: RecordDict) -> Parsed:
        """The checks every train reply passes before the method's own; returns what it parsed."""
        v.expect_records(content, self.reply_records)
        v.aux_metrics(content)
        if self.weighted_by_examples:
            self.check_weight(partition_id, content)
        out = self.validate_reply(rnd, partition_id, content)
        parsed = out if isinstance(out, Parsed) else Parsed(out)
        if parsed.norm is not None and not np.isfinite(parsed.norm):
            raise InvalidReply("update norm is not finite")
        return parsed

    def clip_evaluation_weight(self, content: RecordDict) -> None:
        """Clip an evaluation reply's ``num-examples`` to :meth:`size_cap` (in place)."""
        admission.clip_weight(content, self.size_cap())

    def aggregate_safely(self, rnd: int, replies: list[NodeReply], rlog: RoundLog
                         ) -> dict[str, float]:
        """:meth:`aggregate_round`, undone if it raises :class:`InvalidReply` or leaves NaN/inf."""
        return admission.aggregate_safely(self, rnd, replies, rlog)

    # ------------------------------------------------------------------ federated evaluation
    def evaluation_content(self, rnd: int, partition_id: int) -> RecordDict | None:
        """What a node needs to evaluate the global state (None: nothing to evaluate yet)."""
        content = RecordDict({"config": self.base_config(rnd)})
        arrays = self.global_arrays()
        if arrays is not None:
            content["arrays"] = arrays
        return content

    def evaluation_messages(self, rnd: int, by_pid: Mapping[int, int], chosen: list[int],
                            config: ConfigRecord | None = None) -> list[Message]:
        """Evaluation instructions to the ``chosen`` partitions (the phase waits in pending).

        None are sent (and no phase waits) when the method has nothing to evaluate yet.
        """
        contents = {}
        for pid in chosen:
            content = self.evaluation_content(rnd, pid)
            if content is None:
                return []
            contents[pid] = with_user_config(content, config)
        return self.send_phase(rnd, contents, by_pid, MessageType.EVALUATE)

    def evaluate_round(self, grid: Grid, rnd: int) -> RoundLog:
        """Ask the candidate nodes to evaluate the global state; weighted-average metrics.

        The candidates are :meth:`evaluation_candidates` (every online node, or every known one
        under ``discovery="sampled"``).
        """
        by_pid = self.evaluation_candidates(grid)
        messages = self.evaluation_messages(rnd, by_pid, sorted(by_pid))
        if MessageType.EVALUATE not in self.pending:
            return RoundLog(round=rnd)
        replies = grid.send_and_receive(messages, timeout=self.common.round_timeout) \
            if messages else []
        return self.admit_phase(MessageType.EVALUATE, replies)

    def skip_training(self) -> bool:
        """Whether the round stops after :meth:`before_train` (its phase failed)."""
        return False
