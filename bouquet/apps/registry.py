"""Method and task registry, filled from Python entry points.

A method is a name, a one-line description, a strategy factory (server side, numpy only), a client
procedure (node side), its configuration sections and a default task. Built-in methods register
through the entry-point group ``bouquet.methods`` exactly as a third-party package would::

    [project.entry-points."bouquet.methods"]
    mymethod = "my_package.bouquet_plugin:METHODS"

where ``METHODS`` is a :class:`Method` or a list of them. Tasks register the same way under
``bouquet.tasks`` with :class:`TaskSpec` objects.

Strategy factories and client procedures are given as ``"module:attribute"`` strings and imported
only when used, so a server never imports a client module (and with it torch).
"""

from __future__ import annotations

import dataclasses
import importlib
from collections.abc import Iterable, Mapping
from functools import cache
from importlib.metadata import entry_points
from typing import Any

METHOD_GROUP = "bouquet.methods"
TASK_GROUP = "bouquet.tasks"


@dataclasses.dataclass(frozen=True)
class Method:
    """A registered federated method.

    Parameters
    ----------
    name : str
        The value of the ``method`` key.
    description : str
        One line for ``bouquet list``.
    strategy : str
        ``"module:callable"``; the callable takes a :class:`bouquet.strategies.base.StrategySetup`
        and returns a :class:`bouquet.strategies.base.BouquetStrategy`.
    client : str
        ``"module:attribute"`` naming a :class:`bouquet.clients.base.ClientProcedure` subclass.
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

    def load_strategy_factory(self) -> Any:
        """Import and return the strategy factory."""
        return load_object(self.strategy)

    def load_client(self) -> Any:
        """Import and return the client procedure class."""
        return load_object(self.client)


@dataclasses.dataclass(frozen=True)
class TaskSpec:
    """A registered task (data + model + metrics).

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


class RegistryError(LookupError):
    """Raised for an unknown method or task name, with the known ones in the message."""


def load_object(path: str) -> Any:
    """Import ``"module:attribute"`` and return the attribute."""
    module, _, attr = path.partition(":")
    obj: Any = importlib.import_module(module)
    for part in attr.split(".") if attr else []:
        obj = getattr(obj, part)
    return obj


def _flatten(value: Any, kind: type) -> Iterable[Any]:
    if isinstance(value, kind):
        return [value]
    if isinstance(value, list | tuple):
        return list(value)
    raise TypeError(f"entry point gave {value!r}, expected {kind.__name__} or a list of them")


@cache
def methods() -> dict[str, Method]:
    """All registered methods by name (entry points are read once per process)."""
    found: dict[str, Method] = {}
    for ep in sorted(entry_points(group=METHOD_GROUP), key=lambda e: e.name):
        for method in _flatten(ep.load(), Method):
            if method.name in found:
                raise RegistryError(f"method {method.name!r} registered twice (entry point {ep.name})")
            found[method.name] = method
    return found


@cache
def tasks() -> dict[str, TaskSpec]:
    """All registered tasks by name."""
    found: dict[str, TaskSpec] = {}
    for ep in sorted(entry_points(group=TASK_GROUP), key=lambda e: e.name):
        for spec in _flatten(ep.load(), TaskSpec):
            if spec.name in found:
                raise RegistryError(f"task {spec.name!r} registered twice (entry point {ep.name})")
            found[spec.name] = spec
    return found


def get_method(name: str) -> Method:
    """Return the method called ``name`` or raise :class:`RegistryError` naming the known ones."""
    known = methods()
    if name not in known:
        raise RegistryError(f"unknown method {name!r}; registered: {', '.join(sorted(known))}")
    return known[name]


def get_task(name: str) -> TaskSpec:
    """Return the task called ``name`` or raise :class:`RegistryError` naming the known ones."""
    known = tasks()
    if name not in known:
        raise RegistryError(f"unknown task {name!r}; registered: {', '.join(sorted(known))}")
    return known[name]
