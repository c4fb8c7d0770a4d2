"""Shared server machinery for methods whose clients send compressed vectors over the model.

:class:`VectorUplinkStrategy` holds the global model (as :class:`ModelStrategy` does), builds the
uplink compressor from the method's config section, decodes and checks every reply's payload
records (a payload that does not decode, has the wrong length or non-finite values is rejected),
and remembers, per client, the last round whose reply was aggregated (``accepted``). That round
travels down as ``commit-round`` so the client can commit or discard the state it staged for its
previous reply: a lost or rejected reply never leaves client state that the server did not see
(see :mod:`bouquet.clients.staged_state`).

The config mixin naming the uplink compressor and its parameters lives in
:mod:`bouquet.strategies.sections.uplink` (``UplinkCompression``, re-exported here: its old
import path).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Mapping
from typing import Any

import numpy as np
from flwr.app import RecordDict

from bouquet.compression import (
    PAYLOAD_RECORD,
    Compressor,
    PayloadError,
    decode_record,
)
from bouquet.strategies.arguments import BASE_COMMON_KEYS, LOCAL_TRAINING_KEYS
from bouquet.strategies.model import ModelStrategy
from bouquet.strategies.round_log import NodeReply, Parsed, train_metrics
from bouquet.strategies.sections.uplink import UplinkCompression as UplinkCompression
from bouquet.wire import validation as v
from bouquet.wire.flat import Layout
from bouquet.wire.uplink import COMMIT_ROUND, STEPS_METRIC, uplink_compressor


@dataclasses.dataclass(frozen=True)
class UplinkPayload:
    """A reply's payload records, decoded: one flat vector per record, and their content bytes."""

    vectors: list[np.ndarray]
    nbytes: int


class VectorUplinkStrategy(ModelStrategy):
    """Model + compressed flat-vector replies + per-client commit rounds.

    Subclasses set :attr:`prefix` (their config section) and :attr:`payloads` (the record names
    of the vectors each reply carries) and implement :meth:`apply`.
    """

    prefix: str = ""
    payloads: tuple[str, ...] = (PAYLOAD_RECORD,)
    common_keys = (*BASE_COMMON_KEYS, *LOCAL_TRAINING_KEYS)

    def __init__(self, **kwargs: Any) -> None:
        self.accepted: dict[int, int] = {}
        super().__init__(**kwargs)
        self.reply_records = (*self.payloads, "metrics")

    @functools.cached_property
    def compressor(self) -> Compressor:
        """The uplink compressor, built once from the method's section (:meth:`make_compressor`)."""
        return self.make_compressor()

    @property
    def cfg(self) -> Any:
        """The method's configuration section."""
        return self.setup.sections[self.prefix]

    def on_model(self) -> None:
        """The flat layout of the model."""
        self.layout = Layout.of(self.weights)

    def make_compressor(self) -> Compressor:
        """Build the uplink compressor (from the section's keys; identity if it has none)."""
        return uplink_compressor(self.cfg)

    # ------------------------------------------------------------------ hooks
    def downlink(self, rnd: int, partition_id: int) -> dict[str, Any]:
        """Extra records for one client besides ``arrays`` and ``config``."""
        return {}

    def apply(self, rnd: int, vectors: list[list[np.ndarray]], replies: list[NodeReply]
              ) -> dict[str, float]:
        """Update the global state from the decoded vectors (one list per reply)."""
        raise NotImplementedError

    # ------------------------------------------------------------------ BouquetStrategy
    def configure_round(self, rnd: int, partitions: list[int]) -> dict[int, RecordDict]:
        """Global model, the client's commit round, and the method's extra records."""
        out: dict[int, RecordDict] = {}
        for pid in partitions:
            content = self.model_message(rnd)
            content.config_records["config"][COMMIT_ROUND] = self.accepted.get(pid, 0)
            for name, record in self.downlink(rnd, pid).items():
                content[name] = record
            out[pid] = content
        return out

    def validate_reply(self, rnd: int, partition_id: int, content: RecordDict) -> Parsed:
        """Every payload decodes to a finite vector of the model's length; steps and weight ok.

        ``local-steps`` (K_i) scales the server's step, so it is bounded by what the run's
        configuration allows the node (:meth:`max_local_steps`). Returns the payloads' joint norm
        and the decoded vectors with their size (:class:`UplinkPayload`).
        """
        v.num_examples(content)
        v.metric(content, STEPS_METRIC, kind=int, min=1, max=self.max_local_steps(partition_id))
        decoded = []
        size = 0
        for name in self.payloads:
            try:
                decoded.append(decode_record(content, self.compressor, (self.layout.size,), name))
            except PayloadError as exc:
                raise v.InvalidReply(f"{name}: {exc}") from exc
            record = content.array_records[name]
            size += sum(record[k].numpy().nbytes for k in record.keys())
        return Parsed(v.l2_norm(decoded), UplinkPayload(decoded, size))

    def aggregate_round(self, rnd: int, replies: list[NodeReply]) -> dict[str, float]:
        """Apply the method's rule to the decoded vectors; mark the replies accepted."""
        payloads: list[UplinkPayload] = [r.parsed for r in replies]
        vectors = [p.vectors for p in payloads]
        metrics = dict(self.apply(rnd, vectors, replies))
        for r in replies:
            self.accepted[r.partition_id] = rnd
        # payload content only (no Flower framing, no metrics): compare with the formulas
        metrics["uplink_payload_bytes"] = float(sum(p.nbytes for p in payloads))
        metrics.update(train_metrics(replies, skip=(STEPS_METRIC,)))
        return metrics

    def steps(self, replies: list[NodeReply]) -> np.ndarray:
        """K_i of each reply, clipped like the weights.

        A node that declares a huge data set may not scale its step beyond what the weight cap
        allows.
        """
        return np.asarray([min(float(r.content["metrics"][STEPS_METRIC]),  # type: ignore[index,arg-type]
                               self.max_local_steps(r.partition_id, clipped=True))
                           for r in replies])

    def num_clients(self) -> int:
        """N: the configured number of clients, else the number of clients known so far."""
        configured = int(getattr(self.cfg, "num_clients", 0))
        return configured if configured > 0 else self.federation_size()

    def move_model(self, step: np.ndarray) -> None:
        """``x <- x + step`` (flat step), keeping dtypes."""
        new = self.layout.flatten(self.weights) + step.astype(np.float32)
        arrays = self.layout.unflatten(new)
        self.weights = {k: arrays[k].astype(self.weights[k].dtype) for k in self.weights}

    def state_dict(self) -> dict[str, Any]:
        """Model, base state and the per-client commit rounds."""
        return {**super().state_dict(),
                "accepted": {str(k): int(r) for k, r in sorted(self.accepted.items())}}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        """Restore :meth:`state_dict`."""
        super().load_state_dict(state)
        self.accepted = {int(k): int(r) for k, r in state.get("accepted", {}).items()}
