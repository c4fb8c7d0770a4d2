"""Split a dataset's rows over nodes with flwr-datasets partitioners (in memory, offline).

Schemes (the ``partition`` key): ``iid``; ``dirichlet`` on the label with ``dirichlet-alpha``;
``pathological`` with ``classes-per-client`` labels per node; ``natural`` by a group column the
task provides (writer, movie...).

A simulated client process serves many partitions (thousands, at scale): the partitioner of a
split is built once per process and each partition's rows are kept after their first use
(:class:`Split`), keyed by a digest of the labels, so a partition costs a dictionary look-up
after the first time instead of hashing the whole label column and re-selecting its rows.
"""

from __future__ import annotations

import dataclasses
import hashlib
from collections import OrderedDict

import numpy as np


@dataclasses.dataclass
class Split:
    """One split of a dataset (its partitioner) and the rows of the partitions used so far."""

    partitioner: object
    rows: dict[int, np.ndarray] = dataclasses.field(default_factory=dict)


#: Splits built in this process, most recently used last.
_SPLITS: OrderedDict[tuple[object, ...], Split] = OrderedDict()
#: How many splits a process keeps (a run uses one; tests use a few).
MAX_SPLITS = 16


def _digest(labels: np.ndarray, groups: np.ndarray | None) -> str:
    """A digest of the label (and group) columns: the split's identity, cheap to recompute."""
    h = hashlib.blake2b(digest_size=16)
    h.update(np.ascontiguousarray(labels, dtype=np.int64).tobytes())
    if groups is not None:
        h.update("\0".join(str(g) for g in groups).encode())
    return h.hexdigest()


def _split(labels: np.ndarray, groups: np.ndarray | None, scheme: str, num_partitions: int,
           seed: int, alpha: float, classes_per_client: int) -> Split:
    """The cached :class:`Split` of these columns and settings (built on first use)."""
    key = (_digest(labels, groups), groups is not None, scheme, num_partitions, seed, alpha,
           classes_per_client)
    split = _SPLITS.get(key)
    if split is None:
        split = Split(_partitioner(tuple(int(x) for x in labels),
                                   None if groups is None else tuple(str(g) for g in groups),
                                   scheme, num_partitions, seed, alpha, classes_per_client))
        _SPLITS[key] = split
        while len(_SPLITS) > MAX_SPLITS:
            _SPLITS.popitem(last=False)
    else:
        _SPLITS.move_to_end(key)
    return split


def _partitioner(
    labels: tuple[int, ...],
    groups: tuple[str, ...] | None,
    scheme: str,
    num_partitions: int,
    seed: int,
    alpha: float,
    classes_per_client: int,
) -> object:
    from datasets import Dataset
    from flwr_datasets.partitioner import (
        DirichletPartitioner,
        IidPartitioner,
        NaturalIdPartitioner,
        PathologicalPartitioner,
    )

    columns: dict[str, list] = {"label": list(labels), "row": list(range(len(labels)))}
    if groups is not None:
        columns["group"] = list(groups)
    ds = Dataset.from_dict(columns)
    if scheme == "iid":
        part: object = IidPartitioner(num_partitions=num_partitions)
    elif scheme == "dirichlet":
        part = DirichletPartitioner(
            num_partitions=num_partitions, partition_by="label", alpha=alpha,
            min_partition_size=1, self_balancing=True, seed=seed,
        )
    elif scheme == "pathological":
        part = PathologicalPartitioner(
            num_partitions=num_partitions, partition_by="label",
            num_classes_per_partition=classes_per_client,
            class_assignment_mode="deterministic", seed=seed,
        )
    elif scheme == "natural":
        if groups is None:
            raise ValueError("partition='natural' needs a task with a natural group column")
        part = NaturalIdPartitioner(partition_by="group")
    else:
        raise ValueError(f"unknown partition scheme {scheme!r}")
    part.dataset = ds  # type: ignore[attr-defined]
    if scheme == "natural":
        n = part.num_partitions  # type: ignore[attr-defined]
        if n < num_partitions:
            raise ValueError(
                f"partition='natural': the data has only {n} groups for {num_partitions} nodes"
            )
    return part


def partition_rows(
    labels: np.ndarray,
    *,
    scheme: str,
    num_partitions: int,
    partition_id: int,
    seed: int,
    alpha: float = 0.5,
    classes_per_client: int = 2,
    groups: np.ndarray | None = None,
) -> np.ndarray:
    """Row indices of ``partition_id`` out of ``num_partitions``.

    With ``scheme='natural'`` and more groups than nodes, node ``i`` gets every group whose
    index is ``i`` modulo ``num_partitions``.
    """
    if not 0 <= partition_id < num_partitions:
        raise ValueError(f"partition-id {partition_id} outside 0..{num_partitions - 1}")
    if scheme == "iid":
        return iid_rows(len(labels), num_partitions, partition_id)
    split = _split(labels, groups, scheme, num_partitions, seed, alpha, classes_per_client)
    rows = split.rows.get(partition_id)
    if rows is None:
        rows = _rows_of(split.partitioner, scheme, num_partitions, partition_id)
        rows.setflags(write=False)  # shared by every later call
        split.rows[partition_id] = rows
    return rows


def iid_rows(num_rows: int, num_partitions: int, partition_id: int) -> np.ndarray:
    """Rows of an IID partition: the contiguous block ``IidPartitioner`` gives, computed directly.

    flwr-datasets' ``IidPartitioner`` shards the rows into contiguous blocks whose sizes differ
    by at most one (``datasets.Dataset.shard(contiguous=True)``); this is that block, without
    building a dataset (a test checks it against the partitioner).
    """
    div, mod = divmod(num_rows, num_partitions)
    start = div * partition_id + min(partition_id, mod)
    rows = np.arange(start, start + div + (1 if partition_id < mod else 0), dtype=np.int64)
    rows.setflags(write=False)
    return rows


def _rows_of(part: object, scheme: str, num_partitions: int, partition_id: int) -> np.ndarray:
    """Row indices of one partition, from the partitioner.

    The label partitioners assign every partition at their first use and keep the assignment
    (``_partition_id_to_indices``); it is read directly when present, since ``load_partition``
    would build a dataset for each call. The dataset's ``row`` column is the row index, so the
    indices are the rows.
    """
    assign = getattr(part, "_determine_partition_id_to_indices_if_needed", None)
    if scheme in ("dirichlet", "pathological") and callable(assign):
        assign()
        table = getattr(part, "_partition_id_to_indices", None)
        if isinstance(table, dict) and partition_id in table:
            return np.asarray(table[partition_id], dtype=np.int64)
    if scheme == "natural":
        total = part.num_partitions  # type: ignore[attr-defined]
        rows = [np.asarray(part.load_partition(g)["row"], dtype=np.int64)  # type: ignore[attr-defined]
                for g in range(partition_id, total, num_partitions)]
        return np.sort(np.concatenate(rows))
    return np.asarray(part.load_partition(partition_id)["row"], dtype=np.int64)  # type: ignore[attr-defined]
