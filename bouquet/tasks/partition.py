"""Split a dataset's rows over nodes with flwr-datasets partitioners (in memory, offline).

Schemes (the ``partition`` key): ``iid``; ``dirichlet`` on the label with ``dirichlet-alpha``;
``pathological`` with ``classes-per-client`` labels per node; ``natural`` by a group column the
task provides (writer, movie...).
"""

from __future__ import annotations

from functools import lru_cache

import numpy as np


@lru_cache(maxsize=16)
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
    part = _partitioner(
        tuple(int(x) for x in labels),
        None if groups is None else tuple(str(g) for g in groups),
        scheme, num_partitions, seed, alpha, classes_per_client,
    )
    if scheme == "natural":
        total = part.num_partitions  # type: ignore[attr-defined]
        rows = [np.asarray(part.load_partition(g)["row"], dtype=np.int64)  # type: ignore[attr-defined]
                for g in range(partition_id, total, num_partitions)]
        return np.sort(np.concatenate(rows))
    return np.asarray(part.load_partition(partition_id)["row"], dtype=np.int64)  # type: ignore[attr-defined]
