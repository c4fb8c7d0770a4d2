"""FedAvg's node side: local SGD from the global model, reply with the new model.

:func:`train` is what a user's own ``@app.train()`` may call (any ``nn.Module``, batches and
loss); :class:`FedAvgClient` is bouquet's ClientApp procedure, a thin user of it.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from flwr.app import Context, Message, MetricRecord, RecordDict
from torch import nn

from bouquet.clients.base import ClientEnv, ClientProcedure, message_config
from bouquet.clients.local_training import LocalSchedule, examples_in, reply
from bouquet.clients.task_inputs import task_inputs
from bouquet.tasks.torch_utils import BatchLoss, get_arrays, set_arrays, sgd_steps
from bouquet.wire.arrays import to_numpy, to_record


def local_round(msg: Message, model: nn.Module, batches: Iterable[Any], loss_fn: BatchLoss,
                schedule: LocalSchedule, num_examples: int | None) -> RecordDict:
    """Load the message's arrays into ``model``, train, return ``arrays`` and ``metrics``."""
    n = examples_in(batches, num_examples)
    set_arrays(model, to_numpy(msg.content["arrays"]))  # type: ignore[arg-type]
    stats = sgd_steps(model, schedule.stream(batches), loss_fn,
                      steps=schedule.num_steps(batches), lr=schedule.lr)
    metrics: dict[str, int | float | list[int] | list[float]] = {**stats, "num-examples": n}
    return RecordDict({"arrays": to_record(get_arrays(model)), "metrics": MetricRecord(metrics)})


def train(msg: Message, context: Context, model: nn.Module, batches: Iterable[Any],
          loss_fn: BatchLoss, *, lr: float = 0.05, local_steps: int = 0, local_epochs: int = 1,
          num_examples: int | None = None) -> Message:
    """One FedAvg round on the user's model and batches.

    Parameters
    ----------
    msg, context : Message, Context
        What Flower passes to ``@app.train()``.
    model : nn.Module
        Receives the message's ``arrays`` (same names and shapes), then trains.
    batches : Iterable
        Any iterable of batches, iterated afresh each epoch.
    loss_fn : callable
        ``loss_fn(model, batch)`` -> mean loss.
    lr, local_steps, local_epochs : float, int, int
        ``local_steps`` SGD steps (0: ``local_epochs`` passes over ``batches``).
    num_examples : int, optional
        The reply's weight; counted from ``batches`` when omitted.

    Returns
    -------
    Message
        ``arrays`` (the whole model) and ``metrics`` (``num-examples``, ``train_loss``,
        ``steps``).

    """
    schedule = LocalSchedule(lr=lr, local_steps=local_steps, local_epochs=local_epochs)
    return reply(msg, local_round(msg, model, batches, loss_fn, schedule, num_examples))


class FedAvgClient(ClientProcedure):
    """Train ``local-epochs`` (or ``local-steps``) of SGD and send the whole model back."""

    def train(self, msg: Message, context: Context, env: ClientEnv) -> RecordDict:
        """One local round on the catalogue task."""
        rnd = int(message_config(msg)["server-round"])  # type: ignore[arg-type]
        batches, loss_fn, schedule = task_inputs(env, rnd)
        return local_round(msg, env.supervised().build_model(), batches, loss_fn, schedule,
                           batches.local.num_train)
