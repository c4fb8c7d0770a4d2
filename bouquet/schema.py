"""Typed configuration sections: the one way every key gets a type, a default and a help line.

A *section* is a dataclass whose fields are declared with :func:`key`. Field names are
snake_case in Python and kebab-case in Flower's ``run_config`` (``num_seeds`` is the key
``fedkseed.num-seeds`` when the section's prefix is ``fedkseed``). Only scalar types are allowed
(``int``, ``float``, ``bool``, ``str``) because Flower's run config holds scalars only.

This module has no dependencies so that servers, clients and tasks can all declare sections.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, get_type_hints

Scalar = int | float | bool | str

_SCALARS = (int, float, bool, str)


def key(
    default: Scalar,
    help: str,  # noqa: A002 - mirrors argparse's name
    *,
    choices: Sequence[Scalar] | None = None,
    min: float | None = None,  # noqa: A002
    max: float | None = None,  # noqa: A002
) -> Any:
    """Declare one configuration key.

    Parameters
    ----------
    default : int, float, bool or str
        The value used when neither a preset nor the user sets the key.
    help : str
        One line shown by ``bouquet list --keys`` and in docs/configuration.md.
    choices : sequence, optional
        The only allowed values.
    min, max : float, optional
        Inclusive bounds for numbers.

    """
    meta = {"help": help, "choices": tuple(choices) if choices else None, "min": min, "max": max}
    return dataclasses.field(default=default, metadata=meta)


@dataclasses.dataclass(frozen=True)
class KeySpec:
    """One flat key of the run config, with what is allowed for it."""

    name: str
    field: str
    type: type
    default: Scalar
    help: str
    choices: tuple[Scalar, ...] | None
    min: float | None
    max: float | None

    def allowed(self) -> str:
        """Describe the allowed values in words, for error messages and docs."""
        if self.choices:
            return "one of " + ", ".join(repr(c) for c in self.choices)
        bounds = []
        if self.min is not None:
            bounds.append(f">= {self.min:g}")
        if self.max is not None:
            bounds.append(f"<= {self.max:g}")
        return f"{self.type.__name__}" + (f" ({' and '.join(bounds)})" if bounds else "")

    def check(self, value: Any) -> Scalar:
        """Coerce ``value`` to this key's type and check its range; raise ``ValueError``.

        A float key never takes ``inf``, ``-inf`` or ``NaN`` (nor a string that parses to one,
        such as ``"1e999"``): see :func:`coerce`.
        """
        v = coerce(value, self.type)
        if self.choices and v not in self.choices:
            raise ValueError(f"{v!r} is not allowed")
        if isinstance(v, int | float) and not isinstance(v, bool):
            if self.min is not None and v < self.min:
                raise ValueError(f"{v!r} is below the minimum {self.min:g}")
            if self.max is not None and v > self.max:
                raise ValueError(f"{v!r} is above the maximum {self.max:g}")
        return v


def coerce(value: Any, typ: type) -> Scalar:
    """Convert a run-config value to ``typ`` without silently losing information.

    Floats must be finite: ``inf``, ``-inf`` and ``NaN`` raise ``ValueError`` for every key.
    """
    if typ is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, str) and value.lower() in ("true", "false"):
            return value.lower() == "true"
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        raise ValueError(f"expected a bool, got {value!r}")
    if typ is int:
        if isinstance(value, bool):
            raise ValueError(f"expected an int, got {value!r}")
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            try:
                return int(value)
            except ValueError:
                pass
        raise ValueError(f"expected an int, got {value!r}")
    if typ is float:
        if isinstance(value, bool):
            raise ValueError(f"expected a number, got {value!r}")
        number: float | None = None
        if isinstance(value, int | float):
            number = float(value)
        elif isinstance(value, str):
            try:
                number = float(value)
            except ValueError:
                pass
        if number is None:
            raise ValueError(f"expected a number, got {value!r}")
        if not math.isfinite(number):
            # inf/NaN would pass every min/max bound (NaN compares false) and silently switch a
            # defence off (dp-linucb.reward-bound=inf: no clipping, no noise); no key means
            # "no limit" by inf: those that have one say 0.
            raise ValueError(f"expected a finite number, got {value!r}")
        return number
    if typ is str:
        if isinstance(value, str):
            return value
        raise ValueError(f"expected a string, got {value!r}")
    raise TypeError(f"unsupported config type {typ}")


def to_key(field_name: str) -> str:
    """Map a Python field name to its run-config spelling (``num_seeds`` -> ``num-seeds``)."""
    return field_name.replace("_", "-")


def section_keys(section: type, prefix: str = "") -> Iterator[KeySpec]:
    """Yield the flat keys of a section dataclass, prefixed with ``prefix.`` when given."""
    if not dataclasses.is_dataclass(section):
        raise TypeError(f"{section!r} is not a dataclass")
    hints = get_type_hints(section)
    for f in dataclasses.fields(section):
        typ = hints[f.name]
        if typ not in _SCALARS:
            raise TypeError(f"{section.__name__}.{f.name}: only int/float/bool/str keys allowed")
        name = f"{prefix}.{to_key(f.name)}" if prefix else to_key(f.name)
        meta = f.metadata
        yield KeySpec(
            name=name,
            field=f.name,
            type=typ,
            default=f.default,  # type: ignore[arg-type]
            help=meta.get("help", ""),
            choices=meta.get("choices"),
            min=meta.get("min"),
            max=meta.get("max"),
        )


@dataclasses.dataclass(frozen=True)
class CommonConfig:
    """Keys every run has (no prefix)."""

    method: str = key("fedavg", "the federated method to run (bouquet list shows them)")
    task: str = key("", "data + model; empty means the method's default task")
    preset: str = key("", "name of a YAML preset in bouquet/apps/conf to apply before overrides")
    explicit_defaults: str = key(
        "", "comma-separated keys this run sets to their declared default, which then beat every "
        "preset on the nodes too (a ClientApp cannot tell such a key from an unset one; bouquet "
        "run and bouquet bench fill this in)")
    num_server_rounds: int = key(5, "number of federated rounds", min=1)
    fraction_train: float = key(1.0, "fraction of online nodes sampled per round", min=0.0, max=1.0)
    min_train_nodes: int = key(1, "fewest nodes a round needs before it starts", min=1)
    sample_deadline: float = key(
        120.0, "seconds to wait for min-train-nodes online nodes before stopping", min=0.0
    )
    round_timeout: float = key(600.0, "seconds to wait for replies in one phase", min=1.0)
    discovery: str = key(
        "auto", "how the runner finds nodes. sampled: a hello only to the nodes a round samples "
        "(start-up independent of the federation's size; sampling follows Flower's node ids, "
        "random in Ray simulation). query: a hello to every node before round 1 (same seed, "
        "same partitions sampled in simulation; costs one message per node). auto: query up to "
        "1,000 online nodes at the start and for methods that select among every candidate "
        "(fedcg, the bandits), sampled for larger federations",
        choices=("auto", "sampled", "query"))
    seed: int = key(0, "drives sampling, partitioning, initialisation and compressors", min=0)
    results_dir: str = key(
        "", "where run folders go; empty means $BOUQUET_RESULTS_DIR or ~/bouquet-results"
    )
    run_name: str = key("", "name of this run's folder; empty means method-task-seed-time")
    plots: bool = key(
        True, "draw the run folder's plots/ (PNG curves of each metric) when the run ends; false "
        "skips them and matplotlib (bouquet report draws the same curves later from "
        "metrics.jsonl)")
    resume_from: str = key("", "a run folder whose checkpoint this run continues")
    partition: str = key(
        "iid",
        "how samples are split over nodes",
        choices=("iid", "dirichlet", "pathological", "natural"),
    )
    dirichlet_alpha: float = key(0.5, "Dirichlet concentration for partition='dirichlet'", min=1e-6)
    classes_per_client: int = key(2, "labels per node for partition='pathological'", min=1)
    evaluation: str = key(
        "auto",
        "central: server evaluates the global model; federated: nodes do; auto: central if the "
        "server can load the task",
        choices=("auto", "central", "federated", "none"),
    )
    local_epochs: int = key(3, "local epochs per round (when local-steps is 0)", min=0)
    local_steps: int = key(0, "local optimiser steps per round; 0 means use local-epochs", min=0)
    batch_size: int = key(16, "local mini-batch size", min=1)
    lr: float = key(0.1, "local learning rate", min=0.0)
    target_accuracy: float = key(
        0.0, "accuracy at which time/bytes-to-target are reported; 0 disables", min=0.0, max=1.0
    )
    stop_at_target: bool = key(
        False, "end the run after the first round whose evaluated accuracy reaches "
        "target-accuracy (summary.json: stopped_at_target; the checkpoint of that round is "
        "kept); false runs every round")
    max_num_examples: int = key(
        0, "largest num-examples weight a node may claim (at hello or in a reply); 0: no absolute "
        "cap (the weight-cap-factor rule still applies)", min=0)
    weight_cap_factor: float = key(
        10.0, "a node's aggregation weight is clipped to this multiple of the median data size "
        "declared by the known nodes (needs 3 or more; with 1-2 known in a larger federation "
        "the replies weigh equally); 0 disables", min=0.0)
    norm_bound_factor: float = key(
        10.0, "a reply whose update norm exceeds this multiple of the median update norm (this "
        "round's replies and the last rounds' accepted ones) is rejected; 0 disables", min=0.0)
    max_update_norm: float = key(
        0.0, "absolute bound on a reply's update norm (0: none)", min=0.0)


def node_config_float(node_config: Mapping[str, Any], name: str) -> float | None:
    """A float a node's operator sets in its node config (``--node-config``), or None if unset.

    Node-config keys are read by the node alone, outside the run config's sections, but get the
    same check as a float key: a finite number (``dp-max-epsilon=nan`` would otherwise pass every
    comparison and switch the node's own budget off). Raises ``ValueError`` naming the key.
    """
    raw = node_config.get(name)
    if raw is None or raw == "":
        return None
    try:
        return float(coerce(raw, float))
    except ValueError as exc:
        raise ValueError(f"node config {name}: {exc}") from None
