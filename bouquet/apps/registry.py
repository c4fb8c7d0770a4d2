"""Method and task lookup: the built-ins, registered in code, plus third-party entry points.

Built-in methods are the ``METHODS`` lists of the modules in :mod:`bouquet.apps.methods` (one
:class:`~bouquet.registration.Method` declaration per method, its variants as options); built-in
tasks are :data:`bouquet.tasks.catalog.TASKS`. Nothing built in goes through entry points, so a
FAB or a source checkout finds every built-in method with no package metadata at all.

Third-party packages add methods and tasks through the entry-point groups ``bouquet.methods`` and
``bouquet.tasks``::

    [project.entry-points."bouquet.methods"]
    mymethod = "my_package.bouquet_plugin:METHODS"

where ``METHODS`` is a :class:`~bouquet.registration.Method` or a list of them (tasks: a
:class:`~bouquet.registration.TaskSpec` or a list). A third-party name that a built-in (or another
package) already uses is an error naming both. Entry points of flwr-bouquet's own distribution
(left in the metadata of an older install) are ignored: built-ins come from code only.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterable
from functools import cache
from importlib.metadata import EntryPoint, entry_points
from typing import Any, TypeVar

from bouquet.registration import Method, TaskSpec, Variant, load_object

__all__ = ["METHOD_GROUP", "TASK_GROUP", "Method", "RegistryError", "TaskSpec", "Variant",
           "builtin_methods", "builtin_tasks", "get_method", "get_task", "load_object", "methods",
           "tasks"]

METHOD_GROUP = "bouquet.methods"
TASK_GROUP = "bouquet.tasks"
#: The distribution whose own entry points are never read (its methods register in code).
OWN_DISTRIBUTION = "flwr-bouquet"
BUILTIN_METHOD_PACKAGE = "bouquet.apps.methods"

_Record = TypeVar("_Record", Method, TaskSpec)


class RegistryError(LookupError):
    """An unknown method or task name (the known ones in the message), or a name used twice."""


def _records(value: Any, kind: type[_Record], where: str) -> list[_Record]:
    items = list(value) if isinstance(value, list | tuple) else [value]
    for item in items:
        if not isinstance(item, kind):
            raise RegistryError(f"{where} gave {item!r}, expected a {kind.__name__} or a list of them")
    return items


def builtin_methods() -> list[Method]:
    """The built-in method declarations: ``METHODS`` of every module in bouquet.apps.methods."""
    package = importlib.import_module(BUILTIN_METHOD_PACKAGE)
    found: list[Method] = []
    for info in sorted(pkgutil.iter_modules(package.__path__), key=lambda i: i.name):
        module = importlib.import_module(f"{BUILTIN_METHOD_PACKAGE}.{info.name}")
        found += _records(getattr(module, "METHODS", []), Method, module.__name__)
    return found


def builtin_tasks() -> list[TaskSpec]:
    """The built-in tasks (:data:`bouquet.tasks.catalog.TASKS`)."""
    from bouquet.tasks.catalog import TASKS

    return _records(TASKS, TaskSpec, "bouquet.tasks.catalog")


def _third_party(group: str) -> list[EntryPoint]:
    def own(ep: EntryPoint) -> bool:
        dist = getattr(ep, "dist", None)
        return dist is not None and dist.name.lower().replace("_", "-") == OWN_DISTRIBUTION
    return sorted((ep for ep in entry_points(group=group) if not own(ep)), key=lambda e: e.name)


def _entry_point_label(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    source = f" of {dist.name} {dist.version}" if dist is not None else ""
    return f"entry point {ep.name!r} ({ep.value}){source}"


def _register(found: dict[str, _Record], record: _Record, where: str, origin: dict[str, str]) -> None:
    if record.name in found:
        raise RegistryError(f"{type(record).__name__.lower()} name {record.name!r} from {where} is "
                            f"already registered by {origin[record.name]}; choose another name")
    found[record.name] = record
    origin[record.name] = where


@cache
def methods() -> dict[str, Method]:
    """Every ``method=`` name (variants included) with its complete record; read once per process."""
    found: dict[str, Method] = {}
    origin: dict[str, str] = {}
    for declared in builtin_methods():
        for method in declared.expand():
            _register(found, method, "flwr-bouquet (built-in)", origin)
    for ep in _third_party(METHOD_GROUP):
        where = _entry_point_label(ep)
        for declared in _records(ep.load(), Method, where):
            for method in declared.expand():
                _register(found, method, where, origin)
    return found


@cache
def tasks() -> dict[str, TaskSpec]:
    """Every ``task=`` name with its record; read once per process."""
    found: dict[str, TaskSpec] = {}
    origin: dict[str, str] = {}
    for spec in builtin_tasks():
        _register(found, spec, "flwr-bouquet (built-in)", origin)
    for ep in _third_party(TASK_GROUP):
        where = _entry_point_label(ep)
        for spec in _records(ep.load(), TaskSpec, where):
            _register(found, spec, where, origin)
    return found


def _known(names: Iterable[str]) -> str:
    return ", ".join(sorted(names))


def get_method(name: str) -> Method:
    """Return the method called ``name`` or raise :class:`RegistryError` naming the known ones."""
    known = methods()
    if name not in known:
        raise RegistryError(f"unknown method {name!r}; registered: {_known(known)}")
    return known[name]


def get_task(name: str) -> TaskSpec:
    """Return the task called ``name`` or raise :class:`RegistryError` naming the known ones."""
    known = tasks()
    if name not in known:
        raise RegistryError(f"unknown task {name!r}; registered: {_known(known)}")
    return known[name]
