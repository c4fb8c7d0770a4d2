"""What the public client functions share.

The local schedule, keyword options checked against a method's config section, the node's
stream index and the reply wrapper.

Torch-free (bandit nodes import it). The public functions (``bouquet.clients.scafcom.train``
and the others, see :mod:`bouquet.clients`) take the user's own model, batches and loss;
bouquet's ClientApp calls the same functions with the catalogue task's model and data.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Iterator, Mapping
from typing import Any, TypeVar

from flwr.app import Context, Message, RecordDict

from bouquet.schema import section_keys

S = TypeVar("S")


def batch_stream(batches: Iterable[Any]) -> Iterator[Any]:
    """Endless stream over ``batches``, iterating it afresh at the end of every epoch.

    Raises
    ------
    ValueError
        If an epoch yields no batch at all.

    """
    while True:
        empty = True
        for batch in batches:
            empty = False
            yield batch
        if empty:
            raise ValueError("the batches yield nothing: no local data to train on")


def count_batches(batches: Iterable[Any]) -> int:
    """Batches per epoch: ``len(batches)`` when defined, else one counting pass."""
    try:
        return len(batches)  # type: ignore[arg-type]
    except TypeError:
        return sum(1 for _ in batches)


def count_examples(batches: Iterable[Any]) -> int:
    """Examples per epoch: ``len(batches.dataset)`` (a DataLoader), else summed batch sizes.

    A batch's size is :func:`batch_size`.
    """
    dataset = getattr(batches, "dataset", None)
    if dataset is not None:
        try:
            return len(dataset)
        except TypeError:
            pass
    return sum(batch_size(batch) for batch in batches)


def batch_size(batch: Any) -> int:
    """Examples in one batch.

    The length of its first element when it is a tuple or list (``(x, y)``), of the batch
    itself otherwise.
    """
    first = batch[0] if isinstance(batch, tuple | list) else batch
    return len(first)


@dataclasses.dataclass(frozen=True)
class LocalSchedule:
    """How long and how fast a node trains in one round.

    Attributes
    ----------
    lr : float
        Local learning rate (the method's ``eta_l``).
    local_steps : int
        Optimiser steps per round; 0 means ``local_epochs`` passes over the batches.
    local_epochs : int
        Passes over the batches when ``local_steps`` is 0.

    """

    lr: float = 0.05
    local_steps: int = 0
    local_epochs: int = 1

    def __post_init__(self) -> None:
        if not self.lr > 0:
            raise ValueError(f"lr must be positive, got {self.lr}")
        if self.local_steps < 0 or self.local_epochs < 1:
            raise ValueError("local_steps must be >= 0 and local_epochs >= 1, got "
                             f"{self.local_steps} and {self.local_epochs}")

    def num_steps(self, batches: Iterable[Any]) -> int:
        """Steps this round: ``local_steps``, else ``local_epochs`` times the batches per epoch."""
        if self.local_steps > 0:
            return self.local_steps
        return max(1, self.local_epochs * count_batches(batches))

    def stream(self, batches: Iterable[Any]) -> Iterator[Any]:
        """The batches as an endless stream (iterated afresh every epoch)."""
        return batch_stream(batches)


#: Section fields only the server reads; a client function refuses them.
SERVER_ONLY = frozenset({"server_lr", "server_step", "num_clients"})


def section_from(section: type[S], options: Mapping[str, Any],
                 server_only: frozenset[str] = SERVER_ONLY) -> S:
    """Build a method's config section from keyword options, checked like the run config.

    Names are the section's field names (``compressor_ratio``; the run config's
    ``compressor-ratio`` is accepted too). Unknown names, names only the server reads
    (``server_only``), wrong types and out-of-range values raise ``TypeError`` / ``ValueError``
    naming what is allowed.
    """
    specs = {spec.field: spec for spec in section_keys(section) if spec.field not in server_only}
    values: dict[str, Any] = {}
    for raw, value in options.items():
        name = raw.replace("-", "_")
        if name not in specs:
            raise TypeError(f"unknown option {raw!r} for {section.__name__}; allowed: "
                            + ", ".join(sorted(specs)))
        try:
            values[name] = specs[name].check(value)
        except ValueError as exc:
            raise ValueError(f"{raw}={value!r}: {exc}; allowed: {specs[name].allowed()}") from exc
    return section(**values)


def node_index(context: Context) -> int:
    """The node's index in the seeded random streams: ``partition-id``, else its node id."""
    raw = context.node_config.get("partition-id")
    return int(raw) if raw is not None else int(context.node_id)  # type: ignore[arg-type]


def examples_in(batches: Iterable[Any], num_examples: int | None) -> int:
    """The reply's ``num-examples``: as given, else counted from the batches."""
    n = count_examples(batches) if num_examples is None else int(num_examples)
    if n < 1:
        raise ValueError(f"num-examples must be at least 1, got {n}")
    return n


def reply(msg: Message, content: RecordDict) -> Message:
    """The Flower reply to ``msg`` carrying ``content``."""
    return Message(content, reply_to=msg)
