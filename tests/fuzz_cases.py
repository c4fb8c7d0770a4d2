"""Hostile-node cases of the fuzz suite (tests/test_fuzz.py) and the table docs/reliability.md shows.

Each case edits one node's honest reply into what an attacker (or a broken node) could send. The
suite runs every case that applies against every registered method and asserts the outcome named
here; ``python tests/fuzz_cases.py`` prints the markdown table that docs/reliability.md embeds (a
test keeps the two in sync).
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Callable

import numpy as np
from flwr.app import ConfigRecord, MetricRecord, RecordDict

from bouquet.apps.faults import map_arrays

Edit = Callable[[RecordDict], RecordDict | None]


def _with_metric(content: RecordDict, key: str, value: object, *, only_if_present: bool = False
                 ) -> RecordDict | None:
    if "metrics" not in content:
        return None
    old = content["metrics"]
    assert isinstance(old, MetricRecord)
    if only_if_present and key not in old:
        return None
    out = RecordDict({k: v for k, v in content.items() if k != "metrics"})
    out["metrics"] = MetricRecord({**dict(old.items()), key: value})  # type: ignore[dict-item]
    return out


def scale_1e4(content: RecordDict) -> RecordDict | None:
    """Multiply the first float array by 1e4 and shift it off zero (finite, absurd)."""
    return map_arrays(content, lambda a: a * 1e4 + np.sign(a + 1e-30) * 1e-3)


def float32_max(content: RecordDict) -> RecordDict | None:
    """Fill the first float array with the largest finite float32."""
    return map_arrays(content, lambda a: np.full_like(a, np.finfo(np.float32).max))


def huge_weight(content: RecordDict) -> RecordDict | None:
    """``num-examples`` = 2**62 (hijacks a weighted average)."""
    return _with_metric(content, "num-examples", 2**62, only_if_present=True)


def float_weight(content: RecordDict) -> RecordDict | None:
    """``num-examples`` sent as a float (3.0)."""
    return _with_metric(content, "num-examples", 3.0, only_if_present=True)


def nan_aux(content: RecordDict) -> RecordDict | None:
    """An auxiliary metric ``train_loss`` = NaN."""
    return _with_metric(content, "train_loss", float("nan"))


def list_aux(content: RecordDict) -> RecordDict | None:
    """An auxiliary metric ``train_loss`` sent as a list."""
    return _with_metric(content, "train_loss", [0.5, 0.25])


def huge_steps(content: RecordDict) -> RecordDict | None:
    """``local-steps`` (K_i) = 2**40 where the protocol carries it."""
    return _with_metric(content, "local-steps", 2**40, only_if_present=True)


def huge_regret(content: RecordDict) -> RecordDict | None:
    """``cum-regret`` = 1e300 where the protocol carries it."""
    return _with_metric(content, "cum-regret", 1e300, only_if_present=True)


def huge_epsilon(content: RecordDict) -> RecordDict | None:
    """``epsilon`` = 1e300 where the protocol carries it."""
    return _with_metric(content, "epsilon", 1e300, only_if_present=True)


@dataclasses.dataclass(frozen=True)
class TrainCase:
    """A hostile train reply and what must happen to it."""

    name: str
    fault: str
    edit: Edit
    outcome: str = ("rejected, named in `failures`; the global state equals the one after an "
                    "error reply from that node; the next honest round is fully accepted")


TRAIN_CASES = [
    TrainCase("scale-1e4", "update values x1e4 (finite)", scale_1e4),
    TrainCase("float32-max", "update values = float32 max (finite)", float32_max),
    TrainCase("weight-2^62", "`num-examples` = 2^62", huge_weight),
    TrainCase("weight-float", "`num-examples` = 3.0 (a float)", float_weight),
    TrainCase("aux-nan", "`train_loss` = NaN", nan_aux),
    TrainCase("aux-list", "`train_loss` = a list", list_aux),
    TrainCase("steps-2^40", "`local-steps` = 2^40 (SCAFFOLD family)", huge_steps),
    TrainCase("regret-1e300", "`cum-regret` = 1e300 (bandits)", huge_regret),
    TrainCase("epsilon-1e300", "`epsilon` = 1e300 (private LoRA)", huge_epsilon),
]


# ----------------------------------------------------------------------------- hello
def hello_value(key: str, value: object) -> Edit:
    """A hello answer whose ``info[key]`` is ``value``."""
    def edit(content: RecordDict) -> RecordDict:
        info = content["info"]
        assert isinstance(info, ConfigRecord)
        return RecordDict({"info": ConfigRecord({**dict(info.items()), key: value})})  # type: ignore[dict-item]
    return edit


@dataclasses.dataclass(frozen=True)
class HelloCase:
    """A hostile hello answer and what must happen to it."""

    name: str
    fault: str
    edit: Edit
    outcome: str = ("node refused: logged, an `errors` entry \"hello query: answer refused: ...\" "
                    "in the next phase's `failures` (quoted if the run stops for lack of nodes); "
                    "the run goes on with the others")


HELLO_CASES = [
    HelloCase("pid-inf", "hello `partition-id` = inf", hello_value("partition-id", float("inf"))),
    HelloCase("pid-bytes", "hello `partition-id` = b\"3\"", hello_value("partition-id", b"3")),
    HelloCase("pid-negative", "hello `partition-id` = -1", hello_value("partition-id", -1)),
    HelloCase("pid-huge", "hello `partition-id` = 10^12", hello_value("partition-id", 10**12)),
    HelloCase("pid-duplicate", "hello `partition-id` of another online node",
              hello_value("partition-id", 0)),
    HelloCase("size-inf", "hello `num-examples` = inf", hello_value("num-examples", float("inf"))),
]

#: Declared sizes are clipped, not refused: the outcome differs.
HELLO_SIZE_OUTCOME = ("accepted, but its weight is clipped to `weight-cap-factor` x the median "
                      "declared size")


# ----------------------------------------------------------------------------- evaluation
def eval_metric(key: str, value: object) -> Edit:
    """An evaluation reply whose ``metrics[key]`` is ``value``."""
    return lambda content: _with_metric(content, key, value)


@dataclasses.dataclass(frozen=True)
class EvalCase:
    """A hostile federated-evaluation reply and what must happen to it."""

    name: str
    fault: str
    edit: Edit
    outcome: str = ("rejected, named in `failures` (phase `evaluate`); the round's metrics are "
                    "the others' average")


EVAL_CASES = [
    EvalCase("accuracy-2.5e29", "evaluation `accuracy` = 2.5e29", eval_metric("accuracy", 2.5e29)),
    EvalCase("accuracy-nan", "evaluation `accuracy` = NaN", eval_metric("accuracy", float("nan"))),
    EvalCase("loss-negative", "evaluation `loss` = -1", eval_metric("loss", -1.0)),
    EvalCase("eval-weight-2^62", "evaluation `num-examples` = 2^62",
             eval_metric("num-examples", 2**62)),
]


def table() -> str:
    """The markdown fault -> outcome table (docs/reliability.md embeds it verbatim)."""
    rows = ["| fault (one node) | outcome (asserted by tests/test_fuzz.py for every method it "
            "applies to) |", "|---|---|"]
    rows += [f"| {c.fault} | {c.outcome} |" for c in TRAIN_CASES]
    rows += [f"| {c.fault} | {c.outcome} |" for c in HELLO_CASES]
    rows.append(f"| hello `num-examples` = 2^31-1 | {HELLO_SIZE_OUTCOME} |")
    rows += [f"| {c.fault} | {c.outcome} |" for c in EVAL_CASES]
    rows.append("| an accuracy of 1.0 (in range, a lie) | accepted: its weight is clipped like "
                "any other; no server can tell a lie in range from a result |")
    rows.append("| aggregation that raises or leaves NaN/inf | the round is undone, its replies "
                "are named as rejected, the run goes on |")
    return "\n".join(rows) + "\n"


if __name__ == "__main__":
    sys.stdout.write(table())
