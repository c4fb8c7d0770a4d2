"""Keyword arguments of the strategies, declared once.

A strategy's constructor parameters are the fields of the configuration sections it reads
(``Scafcom(beta=0.2, compressor="topk")`` are the keys ``scafcom.beta`` and
``scafcom.compressor``), a few keys every run has (``fraction_train``, ``seed``, ...),
Flower's own sampling names that bouquet's run config does not carry (:class:`FederationOptions`)
and, for some classes, options that pick a variant (:attr:`options`). The same
:class:`~bouquet.schema.KeySpec` that checks a run-config key checks the keyword argument, so a
value is validated by one rule whichever way it arrives, and the same help line documents it in
``help(Scafcom)`` and in ``bouquet list --keys``.
"""

from __future__ import annotations

import dataclasses
import inspect
from collections.abc import Mapping, Sequence
from typing import Any

from flwr.app import ArrayRecord

from bouquet.schema import CommonConfig, KeySpec, key, section_keys


@dataclasses.dataclass(frozen=True)
class FederationOptions:
    """Flower's names for sampling and evaluation, plus how nodes are found."""

    fraction_evaluate: float = key(
        1.0, "fraction of online nodes asked to evaluate the global model after each round "
        "(Flower's start() path; 0 switches federated evaluation off). Under sampled "
        "discovery: of the online nodes already known (no hello is sent for evaluation)",
        min=0.0, max=1.0)
    min_evaluate_nodes: int = key(1, "fewest nodes an evaluation round asks", min=0)
    min_available_nodes: int = key(
        1, "fewest online nodes a round waits for (up to sample_deadline)", min=1)
    discovery: str = key(
        "grid",
        "grid: node ids from grid.get_node_ids(), no message per node (any Flower ClientApp); "
        "the node id stands for the partition, so sampling follows Flower's random ids and no "
        "data size is declared (weights are bounded by max_num_examples and weight_cap_factor "
        "times the median of the online nodes' claims; equal while fewer than 3 are known). "
        "query: every "
        "new node is asked once for its partition-id and data size (bouquet's ClientApp): "
        "reproducible partition-keyed sampling in simulation and the median weight cap. "
        "sampled: node ids from the grid, sampled first; only the sampled nodes not yet known "
        "are asked (the same hello), so a round's cost is that of the nodes it uses, whatever "
        "the federation's size (bouquet's runner; sampling follows Flower's node ids)",
        choices=("grid", "query", "sampled"))


#: CommonConfig keys every strategy takes as keyword arguments.
BASE_COMMON_KEYS = ("fraction_train", "min_train_nodes", "sample_deadline", "round_timeout",
                    "seed", "max_num_examples", "weight_cap_factor", "norm_bound_factor",
                    "max_update_norm")
#: CommonConfig keys of strategies that bound or scale by the clients' local training.
LOCAL_TRAINING_KEYS = ("local_epochs", "local_steps", "batch_size", "lr")


@dataclasses.dataclass(frozen=True)
class Argument:
    """One keyword argument: its check, and where its value goes."""

    name: str
    spec: KeySpec
    group: str  # "common", "federation", "options" or a section prefix


@dataclasses.dataclass
class ParsedArguments:
    """Checked keyword arguments, grouped as the strategy reads them."""

    common: CommonConfig
    federation: FederationOptions
    sections: dict[str, Any]
    options: Any | None


def arguments_of(common_keys: Sequence[str], sections: Mapping[str, type],
                 options: type | None, prefixed: Sequence[str] = ()) -> list[Argument]:
    """Every keyword argument of a strategy class, in signature order.

    ``prefixed`` names sections whose fields take their prefix (``dp_enabled`` for ``dp.enabled``)
    because bare they would be ambiguous. Raises ``TypeError`` when two arguments share a name.
    """
    common = {s.field: s for s in section_keys(CommonConfig)}
    out = [Argument(k, common[k], "common") for k in common_keys]
    out += [Argument(s.field, s, "federation") for s in section_keys(FederationOptions)]
    for prefix, section in sections.items():
        head = prefix.replace("-", "_") + "_" if prefix in prefixed else ""
        out += [Argument(head + s.field, s, prefix) for s in section_keys(section, prefix)]
    if options is not None:
        out += [Argument(s.field, s, "options") for s in section_keys(options)]
    seen: set[str] = set()
    for a in out:
        if a.name in seen:
            raise TypeError(f"two strategy arguments are named {a.name!r}")
        seen.add(a.name)
    return out


def parse(owner: str, arguments: Sequence[Argument], sections: Mapping[str, type],
          options: type | None, given: Mapping[str, Any]) -> ParsedArguments:
    """Check ``given`` against ``arguments``; raise ``TypeError``/``ValueError`` naming the argument."""
    by_name = {a.name: a for a in arguments}
    unknown = sorted(set(given) - set(by_name))
    if unknown:
        raise TypeError(f"{owner}() got an unexpected keyword argument {unknown[0]!r}; it takes "
                        + ", ".join(by_name))
    values: dict[str, dict[str, Any]] = {}
    for name, value in given.items():
        arg = by_name[name]
        try:
            checked = arg.spec.check(value)
        except ValueError as exc:
            raise ValueError(f"{owner}: {name}={value!r}: {exc}; allowed: "
                             f"{arg.spec.allowed()}") from None
        values.setdefault(arg.group, {})[arg.spec.field] = checked
    return ParsedArguments(
        common=CommonConfig(**values.get("common", {})),
        federation=FederationOptions(**values.get("federation", {})),
        sections={p: s(**values.get(p, {})) for p, s in sections.items()},
        options=options(**values.get("options", {})) if options is not None else None,
    )


def as_arguments(arguments: Sequence[Argument], common: CommonConfig,
                 sections: Mapping[str, Any]) -> dict[str, Any]:
    """The keyword arguments that rebuild a strategy from resolved config sections."""
    out: dict[str, Any] = {}
    for a in arguments:
        if a.group == "common":
            out[a.name] = getattr(common, a.spec.field)
        elif a.group in sections:
            out[a.name] = getattr(sections[a.group], a.spec.field)
    return out


#: Parameters every strategy has besides the declared ones.
FIXED_PARAMETERS = (
    ("initial_arrays", "ArrayRecord or None", "the initial model; when None, the ``arrays`` "
     "Flower passes to the first ``configure_train`` (``start(initial_arrays=...)``)"),
    ("method", "str", "name sent to nodes in each message's config (``method``); defaults to "
     "the class's registered method"),
    ("task", "str", "task name (informational, in logs)"),
)


def signature(arguments: Sequence[Argument]) -> inspect.Signature:
    """The constructor signature ``help()`` shows (keyword-only, with defaults)."""
    kw = inspect.Parameter.KEYWORD_ONLY
    params = [inspect.Parameter("initial_arrays", kw, default=None),
              inspect.Parameter("method", kw, default=None, annotation=str),
              inspect.Parameter("task", kw, default="", annotation=str)]
    params += [inspect.Parameter(a.name, kw, default=a.spec.default, annotation=a.spec.type)
               for a in arguments]
    return inspect.Signature(params)


def parameters_doc(arguments: Sequence[Argument]) -> str:
    """A numpy-style ``Parameters`` section for the arguments."""
    lines = ["Parameters", "----------"]
    for name, typ, text in FIXED_PARAMETERS:
        lines += [f"{name} : {typ}", f"    {text}"]
    for a in arguments:
        where = {"common": f"run-config key ``{a.spec.name}``",
                 "federation": "strategy argument only",
                 "options": "variant option"}.get(a.group, f"run-config key ``{a.spec.name}``")
        lines += [f"{a.name} : {a.spec.type.__name__}, default {a.spec.default!r}",
                  f"    {a.spec.help} ({a.spec.allowed()}; {where})."]
    return "\n".join(lines)


@dataclasses.dataclass
class StrategySetup:
    """What a strategy factory receives.

    Attributes
    ----------
    common : CommonConfig
        Keys every run has.
    sections : dict[str, Any]
        The method's (and task's) configuration sections by prefix.
    method : str
        Method name (sent to nodes so the ClientApp can dispatch).
    task : str
        Task name.
    initial_arrays : ArrayRecord or None
        The task's initial model, when the method has one.
    online_nodes : int or None
        How many nodes the grid listed when the run started (None: not known). It decides
        what ``discovery = "auto"`` becomes (:func:`resolve_discovery`).

    """

    common: CommonConfig
    sections: dict[str, Any]
    method: str
    task: str
    initial_arrays: ArrayRecord | None = None
    online_nodes: int | None = None


#: Up to this many online nodes at the start, ``discovery = "auto"`` sends the hello to every node
#: (``"query"``: same seed, same partitions sampled, also in Ray simulation whose node ids are
#: random; about 40 ms per node on 2 cores, so at most ~40 s before round 1); above it only the
#: nodes a round samples are asked (``"sampled"``: start-up independent of the federation's size).
AUTO_QUERY_MAX_NODES = 1000


def resolve_discovery(requested: str, *, selects_by_partition: bool,
                      online_nodes: int | None) -> str:
    """What the run config's ``discovery`` means for one strategy and federation.

    ``"auto"`` is ``"query"`` for a strategy that selects among every candidate's partition
    (FedCG, the bandits), for a federation of at most :data:`AUTO_QUERY_MAX_NODES` nodes when
    it starts, and when that size is not known; it is ``"sampled"`` for a larger federation.
    Any other value is returned as given.
    """
    if requested != "auto":
        return requested
    if selects_by_partition or online_nodes is None or online_nodes <= AUTO_QUERY_MAX_NODES:
        return "query"
    return "sampled"
