"""Mismatches that can be known before any node is contacted: method vs task, impossible partitions.

A bandit method needs a bandit task and a model-training method a task with a model; the kind of
the method's default task says which it is. A partition that cannot be made (pathological with
more nodes than a label has samples, natural with more nodes than groups) is found by making the
first node's share where the task can be loaded here and the number of nodes is known
(``bouquet run``, ``bouquet deploy-local``). Each is a :class:`ConfigError` naming the problem.
"""

from __future__ import annotations

from bouquet.apps.config import ConfigError, RunConfig
from bouquet.apps.registry import get_task, tasks


def _family(kind: str) -> str:
    return "bandit" if kind == "bandit" else "model"


def check_task_fits_method(cfg: RunConfig) -> None:
    """Refuse a task of another family than the method's default task (bandit vs model)."""
    want = _family(get_task(cfg.method.default_task).kind)
    task = get_task(cfg.task_name)
    if _family(task.kind) != want:
        fitting = sorted(t.name for t in tasks().values() if _family(t.kind) == want)
        raise ConfigError(
            f"task: method {cfg.method.name!r} needs a {want} task, but {task.name!r} is a "
            f"{_family(task.kind)} task; tasks it can run: {', '.join(fitting)}"
        )


def check_partition(cfg: RunConfig, num_nodes: int) -> None:
    """Make node 0's share for ``num_nodes`` nodes; refuse a partition that cannot be made.

    Skipped where the task cannot be loaded here (its packages or data are on the nodes only;
    the nodes will say).
    """
    try:
        task = get_task(cfg.task_name).load()
        if hasattr(task, "require"):  # its packaged data/model files
            task.require()
    except Exception:  # not loadable on this machine: the nodes will report it
        return
    if not hasattr(task, "num_examples"):
        return
    try:
        size = int(task.num_examples(0, num_nodes, cfg.common))
    except ImportError:  # data this machine lacks: the nodes (or the CLI's node check) say so
        return
    except ValueError as exc:
        raise ConfigError(
            f"partition: {cfg.common.partition!r} cannot split task {cfg.task_name!r} over "
            f"{num_nodes} nodes: {exc}"
        ) from exc
    if size < 1 and getattr(task, "kind", "") != "bandit":  # a bandit stream may be unbounded
        raise ConfigError(f"partition: {cfg.common.partition!r} leaves node 0 of {num_nodes} "
                          f"without training examples on task {cfg.task_name!r}")


def check_fit(cfg: RunConfig, num_nodes: int | None = None) -> None:
    """Every pre-start fit check; the partition one only when ``num_nodes`` is known."""
    check_task_fits_method(cfg)
    if num_nodes is not None:
        check_partition(cfg, num_nodes)
