"""The catalogue task's model inputs for the public client functions (torch side).

bouquet's ClientApp procedures call the same public functions a user calls; these helpers turn
the task of a :class:`~bouquet.clients.base.ClientEnv` into their arguments.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from bouquet.clients.base import ClientEnv
from bouquet.clients.local_training import LocalSchedule
from bouquet.tasks.torch_utils import BatchLoss, generator


class TaskBatches:
    """The catalogue task's shuffled mini-batches of one node and round, as an iterable.

    Iterating gives the task's endless stream, seeded by ``(seed, round, partition)``, so a
    public client function fed with it takes the same steps as the task's own loop.
    """

    def __init__(self, env: ClientEnv, rnd: int) -> None:
        self.env, self.rnd = env, rnd
        self.local = env.local_data()

    def __iter__(self) -> Iterator[Any]:
        env = self.env
        return env.supervised().batches(self.local, env.common.batch_size,
                                        generator(env.common.seed, self.rnd, env.partition_id))


def task_inputs(env: ClientEnv, rnd: int) -> tuple[TaskBatches, BatchLoss, LocalSchedule]:
    """Batches, loss closure and schedule of the catalogue task for the public functions."""
    task = env.supervised()
    batches = TaskBatches(env, rnd)
    steps = task.num_steps(env.common, batches.local.num_train)
    return (batches, lambda model, batch: task.loss(model, *batch),
            LocalSchedule(lr=env.common.lr, local_steps=int(steps)))
