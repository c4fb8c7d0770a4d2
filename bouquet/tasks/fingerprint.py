"""A cheap fingerprint of what a task's loaded arrays depend on (standard library only).

A node's partition cache on disk (:mod:`bouquet.tasks.partition_cache`) is keyed by this digest
(:func:`digest_of` the :func:`fingerprint_inputs`), so a cached partition is used only while
everything that shaped it is unchanged:

* the task's class and the source text of every module of its class hierarchy outside the
  standard library (bouquet's and a plugin's own: its class attributes, its loading and
  preprocessing code) plus
  ``bouquet.tasks.partition`` (the partitioners) and any module the task names in
  ``fingerprint_modules``;
* the ``repr`` of the task object's attributes that shape the rows (``max_length``,
  ``train_rows``, ``template``...: set on the object, they are not in any source file);
* each data file's path, size and modification time (``stat``, no read: a file replaced by
  another with the same size and time is not noticed);
* the versions of the distributions that read or split the data (``numpy``, ``flwr-datasets``,
  ``transformers``...);
* the values of the environment variables that choose the data files (``BOUQUET_FMNIST_DIR``,
  ``BOUQUET_RT_MODEL``...): a hello checks the recorded inputs without the task, so it cannot
  ask the task for its files again, and a variable pointing elsewhere must be a miss.

Computing it reads a few small source files and stats the data files: a few milliseconds, far
less than loading the data it stands for. The inputs are kept beside a cached partition, so that
:func:`inputs_hold` can check them again without importing the task (a hello does).
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import importlib.util
import json
import os
import sys
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

#: Bump when the meaning of the fingerprint changes.
FORMAT = 2
#: Modules every task's partitions depend on.
BASE_MODULES = ("bouquet.tasks.partition",)


def _module_file(name: str) -> Path | None:
    """The source file of module ``name``, found without running it (its parents are imported)."""
    module = sys.modules.get(name)
    path = getattr(module, "__file__", None) if module is not None else None
    if path is None:
        spec = importlib.util.find_spec(name)
        path = spec.origin if spec is not None and spec.has_location else None
    return Path(path) if path else None


def _module_digest(name: str) -> str:
    path = _module_file(name)
    return hashlib.sha256(path.read_bytes() if path else name.encode()).hexdigest()


def _is_stdlib(module: str) -> bool:
    top = module.split(".", 1)[0]
    return top in sys.stdlib_module_names or top == "builtins"


def class_modules(task_class: type) -> set[str]:
    """The modules defining ``task_class`` and its bases, the standard library's left out."""
    return {c.__module__ for c in task_class.__mro__ if not _is_stdlib(c.__module__)}


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _file_identity(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"


def fingerprint_inputs(task_class: type, sources: Iterable[Path], packages: Iterable[str],
                       modules: Iterable[str] = (),
                       environment: Iterable[str] = (),
                       attributes: Mapping[str, str] | None = None) -> dict[str, Any]:
    """What a task's data fingerprint is computed from, as plain JSON values.

    Parameters
    ----------
    task_class : type
        The task's class; the source of every module in its MRO outside the standard library
        is hashed (:func:`class_modules`), the task's own module included.
    sources : iterable of Path
        The local files the dataset is read from (a missing one raises ``OSError``).
    packages : iterable of str
        Distribution names whose versions shape the arrays.
    modules : iterable of str
        Further modules whose source shapes the arrays (a tokenizer helper, say).
    environment : iterable of str
        Environment variables that choose the data files (their values, None when unset, are
        recorded and compared by :func:`inputs_hold`).
    attributes : mapping of str to str, optional
        The ``repr`` of each task attribute that shapes the rows (recorded as they are: a
        hello, which has no task object, keeps the ones the entry was written with).

    Returns
    -------
    dict
        ``format``, ``class``, ``modules`` (name -> source digest), ``files`` (path, size and
        modification time), ``packages`` (name -> version) and ``environment`` (variable ->
        value or None) and ``attributes`` (name -> repr).

    """
    names = class_modules(task_class)
    return {
        "format": FORMAT,
        "class": f"{task_class.__module__}.{task_class.__qualname__}",
        "modules": {n: _module_digest(n) for n in sorted(names | set(BASE_MODULES) | set(modules))},
        "files": sorted(_file_identity(Path(p)) for p in sources),
        "packages": {d: _version(d) for d in sorted(set(packages))},
        "environment": {n: os.environ.get(n) for n in sorted(set(environment))},
        "attributes": dict(sorted((attributes or {}).items())),
    }


def digest_of(inputs: dict[str, Any]) -> str:
    """The fingerprint: a digest of :func:`fingerprint_inputs`' values."""
    return hashlib.sha256(json.dumps(inputs, sort_keys=True).encode()).hexdigest()


def inputs_hold(inputs: Any) -> bool:
    """Whether recorded :func:`fingerprint_inputs` still describe this machine, without the task.

    Re-hashes the named modules' source files (found, not run), re-stats the named data files,
    re-reads the package versions and the environment variables that choose the files;
    anything missing, changed or malformed is False. Attributes are not checked (a hello has
    no task object). This is how a hello checks a cached partition without importing the
    task's module (and torch).
    """
    try:
        if not isinstance(inputs, dict) or inputs.get("format") != FORMAT:
            return False
        modules, files, packages = inputs["modules"], inputs["files"], inputs["packages"]
        environment = inputs["environment"]
        if not (isinstance(modules, dict) and isinstance(files, list)
                and isinstance(packages, dict) and isinstance(environment, dict)):
            return False
        if any(os.environ.get(str(n)) != v for n, v in environment.items()):
            return False
        if any(_module_digest(str(n)) != d for n, d in modules.items()):
            return False
        now = sorted(_file_identity(Path(str(f).split("\0", 1)[0])) for f in files)
        if now != sorted(files):
            return False
        return all(_version(str(d)) == v for d, v in packages.items())
    except (OSError, ImportError, ValueError, KeyError, TypeError):
        return False


def folder_files(folder: Path) -> list[Path]:
    """The regular files directly inside ``folder`` (a model or tokenizer folder), sorted."""
    return sorted(p for p in folder.iterdir() if p.is_file())
