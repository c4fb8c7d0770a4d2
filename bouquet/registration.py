"""Declarations of methods and tasks: the one record each method and task is registered with.

This is a bottom-layer module (standard library only, like :mod:`bouquet.schema`), so that
``bouquet.tasks``, ``bouquet.strategies`` and third-party packages can declare themselves without
importing ``bouquet.apps``. Lookups (by name, with the built-ins and the ``bouquet.methods`` /
``bouquet.tasks`` entry points) live in :mod:`bouquet.apps.registry`.

A method is declared once, PEFT-style, with its variants as options::

    FEDLINUCB = Method(
        name="fedlinucb",
        description="Federated LinUCB, exact sums",
        strategy="bouquet.strategies.linucb:build_fedlinucb",
        client="bouquet.clients.linucb:FedLinUCBClient",
        default_task="synth-bandit",
        sections={"linucb": LinUCBConfig},
        variants=(
            Variant("dp-fedlinucb-ldp", "... silo-level LDP",
                    strategy="bouquet.strategies.linucb:build_ldp",
                    client="bouquet.clients.linucb:LDPFedLinUCBClient",
                    sections={"linucb": LinUCBConfig, "dp-linucb": DPLinUCBConfig}),
        ),
    )

Every variant is a ``method=`` name of its own; what it does not set it takes from its method.
Strategy factories, client procedures and task factories are ``"module:attribute"`` strings,
imported only when used, so a server never imports a client module (and with it torch).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Mapping
from typing import Any


def load_object(path: str) -> Any:
    """Import ``"module:attribute"`` and return the attribute (``attr.sub`` walks attributes)."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


@dataclasses.dataclass(frozen=True)
class Variant:
    """A named option of a :class:`Method`: another ``method=`` value sharing the method's record.

    Parameters
    ----------
    name : str
        Its ``method=`` value (``"dp-fedlinucb-ldp"``).
    description : str
        One line for ``bouquet list``.
    strategy, client : str, optional
        ``"module:attribute"``; empty means the method's own.
    sections : Mapping[str, type], optional
        The configuration sections of the variant, replacing the method's (``None``: the
        method's). Only the sections named here are accepted in a run of the variant.
    paper : str, optional
        Citation; empty means the method's.
    test_config : Mapping[str, Any], optional
        Conformance overrides merged over the method's.

    """

    name: str
    description: str
    strategy: str = ""
    client: str = ""
    sections: Mapping[str, type] | None = None
    paper: str = ""
    test_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)


@dataclasses.dataclass(frozen=True)
class PlannedRounds:
    """The rounds a method's mechanism is planned for, as one run configuration sets them.

    Attributes
    ----------
    key : str
        The key that sets them: ``num-server-rounds``, or a method's own key that pins them
        (``linucb.horizon-rounds``).
    rounds : int
        Their value in that configuration.
    fixes : str
        What of the mechanism they fix, e.g. ``"3 tree levels (node noise and shift)"``: two
        configurations run the same mechanism exactly when their ``fixes`` are equal.
    pinned_by : str
        A key that, set when a run starts, fixes the plan whatever ``num-server-rounds`` (empty:
        none); named in the refusal.

    """

    key: str
    rounds: int
    fixes: str
    pinned_by: str = ""


@dataclasses.dataclass(frozen=True)
class Method:
    """A federated method: one declaration naming its strategy, client, config and variants.

    Parameters
    ----------
    name : str
        The value of the ``method`` key.
    description : str
        One line for ``bouquet list``.
    strategy : str
        ``"module:callable"``; the callable builds the method's Flower strategy.
    client : str
        ``"module:attribute"`` naming the method's client procedure.
    default_task : str
        The task used when ``task`` is empty.
    sections : Mapping[str, type]
        Configuration sections by prefix (``{"scafcom": ScafcomConfig}``). Sections with the same
        prefix in several methods must be the same class (``dp`` is shared, for example).
    test_task : str
        A small task that the conformance suite uses (defaults to ``default_task``).
    family : str
        Group shown by ``bouquet list`` (``"scaffold"``, ``"lora"``...).
    extra : str
        The pip extra a node needs (``flwr-bouquet[<extra>]``).
    paper : str
        Citation for docs.
    test_config : Mapping[str, Any]
        Run-config overrides that make the conformance suite fast (few steps, small rank...).
    bad_replies : str
        Optional ``"module:callable"``; the callable takes a valid reply ``RecordDict`` and returns
        ``[(label, RecordDict), ...]`` of method-specific malformed replies (an index out of range,
        a matrix that is not symmetric...) that the strategy must reject.
    planned_rounds : str
        Optional ``"module:callable"`` for a method whose mechanism is planned for a number of
        rounds (a privacy calibration, a tree's depth). The callable takes a run's sections
        (prefix -> section instance) and its ``num-server-rounds`` and returns a
        :class:`PlannedRounds`, or None where nothing in that configuration depends on them. A
        resume or a ``bench --reuse`` that would change what they fix is refused
        (:mod:`bouquet.apps.resume`); one that keeps it (an extension within the plan) is not.
        Empty: the method may be extended freely.
    variants : tuple of Variant
        The method's options, each registered under its own name.
    variant_of : str
        Set by :meth:`expand` on a variant's record: the name of the method it belongs to.

    """

    name: str
    description: str
    strategy: str
    client: str
    default_task: str
    sections: Mapping[str, type] = dataclasses.field(default_factory=dict)
    test_task: str = ""
    family: str = ""
    extra: str = ""
    paper: str = ""
    test_config: Mapping[str, Any] = dataclasses.field(default_factory=dict)
    bad_replies: str = ""
    planned_rounds: str = ""
    variants: tuple[Variant, ...] = ()
    variant_of: str = ""

    def expand(self) -> list[Method]:
        """Return the method and one record per variant, each complete (what ``method=`` selects)."""
        out = [dataclasses.replace(self, variants=())]
        for v in self.variants:
            out.append(dataclasses.replace(
                self,
                name=v.name,
                description=v.description,
                strategy=v.strategy or self.strategy,
                client=v.client or self.client,
                sections=self.sections if v.sections is None else v.sections,
                paper=v.paper or self.paper,
                test_config={**self.test_config, **v.test_config},
                variants=(),
                variant_of=self.name,
            ))
        return out

    def load_strategy_factory(self) -> Any:
        """Import and return the strategy factory."""
        return load_object(self.strategy)

    def load_client(self) -> Any:
        """Import and return the client procedure class."""
        return load_object(self.client)

    def plan(self, sections: Mapping[str, Any], num_server_rounds: int) -> PlannedRounds | None:
        """The :class:`PlannedRounds` of a configuration (None: its mechanism plans for none)."""
        if not self.planned_rounds:
            return None
        plan = load_object(self.planned_rounds)(sections, num_server_rounds)
        if plan is not None and not isinstance(plan, PlannedRounds):
            raise TypeError(f"{self.planned_rounds} returned {plan!r}, not a PlannedRounds")
        return plan


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A task (data + model + metrics).

    Parameters
    ----------
    name : str
        The value of the ``task`` key.
    description : str
        One line for ``bouquet list``.
    factory : str
        ``"module:callable"`` returning a task object; imported lazily (it may need torch).
    kind : str
        ``"classification"``, ``"bandit"`` or ``"language-model"``.
    sections : Mapping[str, type]
        Configuration sections of the task, by prefix.
    extra : str
        The pip extra the task needs.

    """

    name: str
    description: str
    factory: str
    kind: str = "classification"
    sections: Mapping[str, type] = dataclasses.field(default_factory=dict)
    extra: str = ""

    def load(self) -> Any:
        """Import the factory and build the task object."""
        return load_object(self.factory)()
