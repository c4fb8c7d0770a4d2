"""A node's partition kept on its own disk, so that fresh processes skip the dataset load.

Flower 1.42 runs every message of a deployment in a fresh ``flwr-clientapp`` process, which
would load the whole dataset (decompress Fashion-MNIST, tokenise Rotten Tomatoes...) and split
it on every message only to use one node's rows. A node that has built its partition once keeps
it here (:class:`PartitionCache`), one folder per :class:`PartitionKey`::

    <cache>/<key digest>/x_train.npy  y_train.npy  x_test.npy  y_test.npy  meta.json

* **Key**: the task, its data fingerprint (:mod:`bouquet.tasks.fingerprint`: the task's code,
  data files and reading packages), the partition scheme and its arguments, the seed, the
  partition id and the number of partitions. Another key is another folder; storing an entry
  removes the same partition's entries under another fingerprint (the data or code changed:
  they can never be read again), so a node keeps one entry per partition.
* **Written atomically**: into a temporary folder, ``meta.json`` last, then renamed into place,
  so a reader sees a whole entry or none; an intact entry already in place (another process
  was faster) is kept. Temporary folders and files older than :data:`STALE_TMP_S` (a writer
  that died) are removed on the next store. Not flushed to the disk (``fsync``): the cache can
  always be rebuilt, and what a power cut leaves is caught by the checks below.
* **Never trusted**: ``meta.json`` names the key, each array's shape, dtype, byte size and
  BLAKE2b digest. An entry whose meta does not parse or names another key, whose file is
  missing, truncated or of another shape or dtype, or whose bytes do not match the digest is a
  miss; the partition is then built from the dataset and the entry rewritten.
* **Memory-mapped**: the arrays are read with ``np.load(mmap_mode="c")`` (copy-on-write): the
  digest check reads each file once through the page cache, and the process never holds a
  private copy of the partition (a write to the tensors stays in the process).

:meth:`PartitionCache.count` answers a hello's "how many training rows" from ``meta.json`` and
the files' ``.npy`` headers and sizes alone (each size must be the header's plus rows x row
size; the digests are checked when the rows are loaded), and
:func:`cached_count` does so without the task: ``<cache>/hello/<partition>.json`` keeps the
fingerprint's inputs, checked again by :func:`~bouquet.tasks.fingerprint.inputs_hold`, so a hello
on a warm node imports neither the task's module nor torch.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import shutil
import tempfile
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from bouquet.tasks.fingerprint import digest_of, inputs_hold

if TYPE_CHECKING:  # torch only where rows are built or mapped: a hello's count needs none
    from bouquet.tasks.classification import LocalData

#: Version of the entry layout (part of every key).
FORMAT = 1
#: The arrays of an entry, in :class:`~bouquet.tasks.classification.LocalData`'s order.
ARRAYS = ("x_train", "y_train", "x_test", "y_test")
META = "meta.json"
#: Folder of the hello index: per partition (without the fingerprint), the fingerprint's inputs.
HELLO_DIR = "hello"
#: Temporary folders and files of writers that died are removed after this many seconds.
STALE_TMP_S = 3600.0


@dataclasses.dataclass(frozen=True)
class PartitionKey:
    """Everything a node's partition depends on."""

    task: str
    fingerprint: str
    scheme: str
    dirichlet_alpha: float
    classes_per_client: int
    seed: int
    partition_id: int
    num_partitions: int

    def digest(self) -> str:
        """The entry's folder name."""
        text = json.dumps([FORMAT, dataclasses.asdict(self)], sort_keys=True)
        return hashlib.sha256(text.encode()).hexdigest()[:32]


def _array_digest(array: np.ndarray) -> str:
    """BLAKE2b of the array's bytes, read through the (memory-mapped) buffer without a copy."""
    data = np.ascontiguousarray(array)
    return hashlib.blake2b(data.data.cast("B") if data.size else b"",
                           digest_size=16).hexdigest()


class PartitionCache:
    """The partition entries in one folder (see the module docstring)."""

    def __init__(self, folder: Path) -> None:
        self.folder = folder

    def entry(self, key: PartitionKey) -> Path:
        """The folder of ``key``'s entry."""
        return self.folder / key.digest()

    # --------------------------------------------------------------- reading
    def _meta(self, key: PartitionKey) -> dict[str, Any] | None:
        """The entry's checked meta (key, and every file present at its size), or None."""
        entry = self.entry(key)
        try:
            meta = json.loads((entry / META).read_text())
        except (OSError, ValueError):
            return None
        if not isinstance(meta, dict) or meta.get("key") != [FORMAT, dataclasses.asdict(key)]:
            return None
        arrays = meta.get("arrays")
        if not isinstance(arrays, dict) or set(arrays) != set(ARRAYS):
            return None
        for name in ARRAYS:
            info = arrays[name]
            if not (isinstance(info, dict) and isinstance(info.get("bytes"), int)
                    and isinstance(info.get("shape"), list) and isinstance(info.get("dtype"), str)
                    and isinstance(info.get("digest"), str)):
                return None
            if not _file_matches(entry / f"{name}.npy", info):
                return None  # truncated, replaced, or meta naming another shape
        shapes = {name: arrays[name]["shape"] for name in ARRAYS}
        if (not shapes["y_train"] or not shapes["x_train"]
                or shapes["x_train"][0] != shapes["y_train"][0]
                or not shapes["y_test"] or not shapes["x_test"]
                or shapes["x_test"][0] != shapes["y_test"][0]):
            return None
        return meta

    def count(self, key: PartitionKey) -> int | None:
        """The number of training rows of ``key``'s entry, from its meta (None: no usable entry)."""
        meta = self._meta(key)
        if meta is None:
            return None
        n = meta["arrays"]["y_train"]["shape"][0]
        return n if isinstance(n, int) and n >= 0 else None

    def load(self, key: PartitionKey) -> LocalData | None:
        """``key``'s partition, memory-mapped, or None when the entry is absent or not intact."""
        import torch

        from bouquet.tasks.classification import LocalData

        arrays = self._arrays(key)
        return None if arrays is None else LocalData(*(torch.from_numpy(a) for a in arrays))

    def _arrays(self, key: PartitionKey) -> list[np.ndarray] | None:
        """``key``'s arrays, memory-mapped and checked against every digest, or None."""
        meta = self._meta(key)
        if meta is None:
            return None
        entry, arrays = self.entry(key), []
        for name in ARRAYS:
            info = meta["arrays"][name]
            try:
                array = np.load(entry / f"{name}.npy", mmap_mode="c", allow_pickle=False)
            except (OSError, ValueError):
                return None
            if (list(array.shape) != info["shape"] or array.dtype.str != info["dtype"]
                    or array.dtype.hasobject or _array_digest(array) != info["digest"]):
                return None
            arrays.append(array)
        return arrays

    # --------------------------------------------------------------- writing
    def store(self, key: PartitionKey, local: LocalData,
              inputs: dict[str, Any] | None = None) -> None:
        """Write ``local`` as ``key``'s entry, atomically, replacing a damaged one.

        An intact entry already there (another process wrote it meanwhile) is kept. Then the
        folder is pruned (:meth:`_prune`): the same partition's entries under another
        fingerprint, and what writers that died left. With ``inputs`` (the fingerprint's
        :func:`~bouquet.tasks.fingerprint.fingerprint_inputs`), the hello index is written too,
        so that :func:`cached_count` finds the entry without the task.
        """
        self.folder.mkdir(parents=True, exist_ok=True)
        entry = self.entry(key)
        tmp = Path(tempfile.mkdtemp(dir=self.folder, prefix=f"{entry.name}.tmp-"))
        try:
            arrays: dict[str, Any] = {}
            for name in ARRAYS:
                array = np.ascontiguousarray(getattr(local, name).detach().cpu().numpy())
                path = tmp / f"{name}.npy"
                np.save(path, array, allow_pickle=False)
                arrays[name] = {"shape": list(array.shape), "dtype": array.dtype.str,
                                "bytes": path.stat().st_size, "digest": _array_digest(array)}
            meta = {"key": [FORMAT, dataclasses.asdict(key)], "arrays": arrays}
            (tmp / META).write_text(json.dumps(meta, sort_keys=True))
            self._install(tmp, key)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        self._prune(key)
        if inputs is not None and digest_of(inputs) == key.fingerprint:
            index = self.folder / HELLO_DIR / f"{hello_name(key)}.json"
            index.parent.mkdir(exist_ok=True)
            fd, part = tempfile.mkstemp(dir=index.parent, prefix=index.name, suffix=".tmp")
            with os.fdopen(fd, "w") as f:
                json.dump({"format": FORMAT, "inputs": inputs}, f, sort_keys=True)
            os.replace(part, index)

    def _install(self, tmp: Path, key: PartitionKey) -> None:
        """Rename ``tmp`` to ``key``'s entry, unless an intact one is there (then ``tmp`` stays).

        A damaged entry in the way is moved aside and removed first.
        """
        entry = self.entry(key)
        if self._arrays(key) is not None:
            return  # the caller removes tmp
        if entry.exists():
            trash = Path(tempfile.mkdtemp(dir=self.folder, prefix=f"{entry.name}.old-"))
            try:
                os.replace(entry, trash / "entry")
            except OSError:  # another writer moved it first
                pass
            shutil.rmtree(trash, ignore_errors=True)
        try:
            os.rename(tmp, entry)
        except OSError:  # another process installed the same entry meanwhile: keep theirs
            pass

    def _prune(self, key: PartitionKey) -> None:
        """Remove what can never be read again, so a node keeps one entry per partition.

        * entries of ``key``'s partition (:func:`hello_name`) under another fingerprint, and
          entries of another layout :data:`FORMAT`;
        * temporary and moved-aside folders, entries without a readable meta, and temporary
          hello index files, once older than :data:`STALE_TMP_S` (a live writer's are newer).
        """
        now, partition = time.time(), hello_name(key)
        for path in self.folder.iterdir():
            if path.name == HELLO_DIR or path.name == key.digest() or not path.is_dir():
                continue
            other = _entry_key(path) if _is_entry_name(path.name) else None
            if other is _OTHER_FORMAT or (isinstance(other, PartitionKey)
                                          and hello_name(other) == partition):
                shutil.rmtree(path, ignore_errors=True)
            elif other is None and _older_than(path, now - STALE_TMP_S):
                shutil.rmtree(path, ignore_errors=True)  # a dead writer's, or a broken entry
        hello = self.folder / HELLO_DIR
        for path in hello.glob("*.tmp") if hello.is_dir() else ():
            if _older_than(path, now - STALE_TMP_S):
                path.unlink(missing_ok=True)


#: :func:`_entry_key` of an entry written with another :data:`FORMAT`.
_OTHER_FORMAT = object()


def _entry_key(entry: Path) -> PartitionKey | object | None:
    """The key an entry's meta names, :data:`_OTHER_FORMAT`, or None (no readable meta)."""
    try:
        named = json.loads((entry / META).read_text())["key"]
        if named[0] != FORMAT:
            return _OTHER_FORMAT
        return PartitionKey(**named[1])
    except (OSError, ValueError, KeyError, IndexError, TypeError):
        return None


def _is_entry_name(name: str) -> bool:
    """Whether ``name`` is an entry's (:meth:`PartitionKey.digest`), not a temporary folder's."""
    return len(name) == 32 and all(c in "0123456789abcdef" for c in name)


def _older_than(path: Path, moment: float) -> bool:
    try:
        return path.stat().st_mtime < moment
    except OSError:
        return False


def _file_matches(path: Path, info: dict[str, Any]) -> bool:
    """Whether a ``.npy`` file has the meta's size, and its header the meta's shape and dtype.

    The size must also be the header's plus ``rows x row size``, so a count read from the
    meta is the count of rows in the file.
    """
    try:
        with path.open("rb") as f:
            version = np.lib.format.read_magic(f)
            if version == (1, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_1_0(f)
            elif version == (2, 0):
                shape, fortran, dtype = np.lib.format.read_array_header_2_0(f)
            else:
                return False
            header = f.tell()
        size = path.stat().st_size
    except (OSError, ValueError):
        return False
    if fortran or dtype.hasobject or list(shape) != info["shape"] or dtype.str != info["dtype"]:
        return False
    return size == info["bytes"] == header + int(np.prod(shape, dtype=np.int64)) * dtype.itemsize


def hello_name(key: PartitionKey) -> str:
    """Name of a partition's hello index file: the key without the fingerprint."""
    fields = {**dataclasses.asdict(key), "fingerprint": ""}
    return hashlib.sha256(json.dumps([FORMAT, fields], sort_keys=True).encode()).hexdigest()[:32]


def _inputs_of(task: Any) -> tuple[str, dict[str, Any] | None] | None:
    """The task's fingerprint and its inputs (None: not cacheable; an error is "not cacheable")."""
    try:
        get_inputs = getattr(task, "data_fingerprint_inputs", None)
        inputs = get_inputs() if callable(get_inputs) else None
        fingerprint = digest_of(inputs) if inputs is not None else task.data_fingerprint()
    except (OSError, ImportError, ValueError):
        return None
    if not isinstance(fingerprint, str) or not fingerprint:
        return None
    return fingerprint, inputs


def _key(task_name: str, fingerprint: str, partition_id: int, num_partitions: int,
         common: Any) -> PartitionKey:
    return PartitionKey(task=task_name, fingerprint=fingerprint, scheme=common.partition,
                        dirichlet_alpha=float(common.dirichlet_alpha),
                        classes_per_client=int(common.classes_per_client), seed=int(common.seed),
                        partition_id=partition_id, num_partitions=num_partitions)


def partition_key(task: Any, partition_id: int, num_partitions: int,
                  common: Any) -> PartitionKey | None:
    """The key of a task's partition, or None when the task cannot say what its data are.

    Only tasks with a ``data_fingerprint()`` that returns a digest are cached (their
    ``partition`` gives :class:`~bouquet.tasks.classification.LocalData`); an error while
    computing it (a data file gone) means no cache, never a failed message.
    """
    found = _inputs_of(task)
    return None if found is None else _key(str(task.name), found[0], partition_id,
                                           num_partitions, common)


def load_partition(task: Any, partition_id: int, num_partitions: int, common: Any,
                   cache: PartitionCache) -> Any:
    """The partition from ``cache``, else built by the task (and then stored in ``cache``)."""
    from bouquet.tasks.classification import LocalData

    found = _inputs_of(task)
    key = None if found is None else _key(str(task.name), found[0], partition_id,
                                          num_partitions, common)
    if key is not None:
        local = cache.load(key)
        if local is not None:
            return local
    local = task.partition(partition_id, num_partitions, common)
    if key is not None and found is not None and isinstance(local, LocalData):
        try:
            cache.store(key, local, found[1])
        except OSError:  # a full or read-only disk costs the next message a load, nothing else
            pass
    return local


def partition_size(task: Any, partition_id: int, num_partitions: int, common: Any,
                   cache: PartitionCache) -> int | None:
    """The training rows of the cached partition, without loading it (None: not cached)."""
    key = partition_key(task, partition_id, num_partitions, common)
    return None if key is None else cache.count(key)


def cached_count(folder: Path, task_name: str, task_class: str, partition_id: int,
                 num_partitions: int, common: Any) -> int | None:
    """A hello's count from the cache alone: no task object, no task module, no torch.

    The hello index names the fingerprint's inputs; they are checked again
    (:func:`~bouquet.tasks.fingerprint.inputs_hold`: the task's module sources, data files and
    package versions), the fingerprint recomputed from them, and the entry of that key counted
    (:meth:`PartitionCache.count`). ``task_class`` (``"module.Class"``, what the task's name
    stands for now) must be the class the entry was made for. Any mismatch or damage is None:
    the caller counts as usual.
    """
    probe = _key(task_name, "", partition_id, num_partitions, common)
    try:
        index = json.loads((folder / HELLO_DIR / f"{hello_name(probe)}.json").read_text())
    except (OSError, ValueError):
        return None
    inputs = index.get("inputs") if isinstance(index, dict) else None
    if (not isinstance(index, dict) or index.get("format") != FORMAT
            or not isinstance(inputs, dict) or inputs.get("class") != task_class
            or not inputs_hold(inputs)):
        return None
    key = dataclasses.replace(probe, fingerprint=digest_of(inputs))  # type: ignore[arg-type]
    return PartitionCache(folder).count(key)
