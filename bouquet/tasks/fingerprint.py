"""A cheap fingerprint of what a task's loaded arrays depend on (standard library only).

A node's partition cache on disk (:mod:`bouquet.tasks.partition_cache`) is keyed by this digest,
so a cached partition is used only while everything that shaped it is unchanged:

* the task's class and the source text of every bouquet module that defines it (its class
  attributes such as ``max_length``, its loading and preprocessing code) plus
  ``bouquet.tasks.partition`` (the partitioners) and any module the task names in
  ``fingerprint_modules``;
* each data file's path, size and modification time (``stat``, no read: a file replaced by
  another with the same size and time is not noticed);
* the versions of the distributions that read or split the data (``numpy``, ``flwr-datasets``,
  ``transformers``...).

Computing it reads a few small source files and stats the data files: a few milliseconds, far
less than loading the data it stands for.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import sys
from collections.abc import Iterable
from pathlib import Path

#: Bump when the meaning of the fingerprint changes.
FORMAT = 1
#: Modules every task's partitions depend on.
BASE_MODULES = ("bouquet.tasks.partition",)


def _module_source(name: str) -> bytes:
    module = sys.modules.get(name)
    if module is None:
        __import__(name)
        module = sys.modules[name]
    path = getattr(module, "__file__", None)
    return Path(path).read_bytes() if path else name.encode()


def _version(distribution: str) -> str:
    try:
        return importlib.metadata.version(distribution)
    except importlib.metadata.PackageNotFoundError:
        return "absent"


def _file_identity(path: Path) -> str:
    st = path.stat()
    return f"{path.resolve()}\0{st.st_size}\0{st.st_mtime_ns}"


def data_fingerprint(task_class: type, sources: Iterable[Path], packages: Iterable[str],
                     modules: Iterable[str] = ()) -> str:
    """Digest of a task's definition, its data files and the packages that read them.

    Parameters
    ----------
    task_class : type
        The task's class; the source of every ``bouquet`` module in its MRO is hashed.
    sources : iterable of Path
        The local files the dataset is read from (a missing one raises ``OSError``).
    packages : iterable of str
        Distribution names whose versions shape the arrays.
    modules : iterable of str
        Further modules whose source shapes the arrays (a tokenizer helper, say).

    Returns
    -------
    str
        A hex digest.

    """
    h = hashlib.sha256()
    h.update(f"{FORMAT}\0{task_class.__module__}.{task_class.__qualname__}\0".encode())
    names = {c.__module__ for c in task_class.__mro__ if c.__module__.startswith("bouquet.")}
    for name in sorted(names | set(BASE_MODULES) | set(modules)):
        h.update(name.encode() + b"\0" + hashlib.sha256(_module_source(name)).digest())
    for path in sorted(Path(p) for p in sources):
        h.update(_file_identity(path).encode() + b"\0")
    for dist in sorted(set(packages)):
        h.update(f"{dist}=={_version(dist)}\0".encode())
    return h.hexdigest()


def folder_files(folder: Path) -> list[Path]:
    """The regular files directly inside ``folder`` (a model or tokenizer folder), sorted."""
    return sorted(p for p in folder.iterdir() if p.is_file())
