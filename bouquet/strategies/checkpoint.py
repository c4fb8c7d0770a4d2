"""Checkpoints of server state: nested dicts of numpy arrays and JSON scalars, written atomically.

Layout of a checkpoint folder::

    state-<h>.npz every array of the state, keyed by its path in the nested dict; ``<h>`` is
                  the start of its SHA-256, so a new state never overwrites the one in use
    meta.json     the JSON skeleton (arrays replaced by references), the round, the state
                  file's name and SHA-256; written last, and the previous state file is
                  removed only after it (with one sync a round, only after the next round's
                  sync: :func:`save_checkpoint`), so a writer killed at any point leaves the
                  previous checkpoint or the new one whole (checkpoints of earlier releases
                  name no state file and are read from ``state.npz``)

Loading verifies the checksum and every reference: a corrupt or truncated file raises
:class:`CheckpointError` naming the file; nothing is ever half-loaded.

The write helpers (:func:`atomic_write`, :func:`atomic_rewrite`, :func:`staged_write`,
:func:`publish`, :func:`fsync_folder`, :func:`sync_filesystem`) are the
one place where bouquet decides what reaches the disk when; the results writer and the nodes'
saved state (:mod:`bouquet.clients.persistence`) use them too. docs/reliability.md states the
guarantee each writer gives.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import hashlib
import io
import json
import os
import re
import secrets
import sys
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any, BinaryIO

import numpy as np

STATE_FILE = "state.npz"  # the state file of checkpoints that name none (earlier releases)
#: A state file's name as meta.json may give it (nothing else is opened).
_STATE_NAME = re.compile(r"state(-[0-9a-f]{16})?\.npz")
META_FILE = "meta.json"
#: Temporary file of an unfinished :func:`atomic_write` of a checkpoint file.
_UNFINISHED = re.compile(r"\.(state(-[0-9a-f]{16})?\.npz|meta\.json)\.[A-Za-z0-9_]+")
_REF = "__array__"


class CheckpointError(RuntimeError):
    """A checkpoint that is missing, truncated or corrupt."""


def _split(tree: Any, path: str, arrays: dict[str, np.ndarray]) -> Any:
    if isinstance(tree, np.ndarray):
        arrays[path] = tree
        return {_REF: path}
    if isinstance(tree, Mapping):
        return {str(k): _split(v, f"{path}/{k}", arrays) for k, v in tree.items()}
    if isinstance(tree, list | tuple):
        return [_split(v, f"{path}/{i}", arrays) for i, v in enumerate(tree)]
    if isinstance(tree, np.generic):
        return tree.item()
    if tree is None or isinstance(tree, bool | int | float | str):
        return tree
    raise TypeError(f"cannot checkpoint {type(tree).__name__} at {path or '/'}")


def _join(tree: Any, arrays: Mapping[str, np.ndarray], source: Path) -> Any:
    if isinstance(tree, dict):
        if set(tree) == {_REF}:
            ref = tree[_REF]
            if ref not in arrays:
                raise CheckpointError(f"{source}: array {ref!r} is missing")
            return arrays[ref]
        return {k: _join(v, arrays, source) for k, v in tree.items()}
    if isinstance(tree, list):
        return [_join(v, arrays, source) for v in tree]
    return tree


def atomic_write(path: Path, data: bytes, *, fsync: bool = True) -> None:
    """Write ``data`` to ``path`` so that readers see the old or the new file, never a mix.

    The data goes to a temporary file ``.<name>.<random>`` beside ``path``, which is then renamed
    over ``path``. Once this returns, the new file survives the writing process being killed (it
    is in the kernel's page cache). With ``fsync`` (the default) the temporary file is also
    flushed to the disk before the rename, so that a power cut never leaves ``path`` holding a
    half-written file; :func:`fsync_folder` on the parent then makes the rename itself durable.
    """
    publish(staged_write(path, data, fsync=fsync), path)


def staged_write(path: Path, data: bytes, *, fsync: bool) -> Path:
    """The first half of :func:`atomic_write`: ``data`` in a new temporary file beside ``path``.

    Returns the temporary file (``.<name>.<random>``); :func:`publish` renames it into place.
    A writer that makes the data durable some other way before the rename (one file-system sync
    for many files, :func:`save_checkpoint`) passes ``fsync=False``. On a failure the temporary
    file is removed and the error re-raised.
    """
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    _fill(lambda: os.fdopen(fd, "wb"), Path(tmp), data, fsync=fsync)
    return Path(tmp)


def atomic_rewrite(spare: Path, path: Path, data: bytes, *, fsync: bool = True) -> None:
    """:func:`atomic_write` that reuses the file ``spare`` (consumed) instead of creating one.

    ``spare`` is renamed to the temporary name, overwritten, and renamed to ``path``. Creating a
    file and deleting an old one whose blocks are already on the disk costs the file system two
    journal updates (on ext4 the delete alone about 2 ms, against 0.1 ms for this); a writer that
    keeps a rotating set of files (node state versions) recycles its oldest one instead.
    """
    tmp = path.parent / f".{path.name}.{secrets.token_hex(4)}"
    os.replace(spare, tmp)
    _fill(lambda: open(tmp, "r+b"), tmp, data, fsync=fsync)
    publish(tmp, path)


def publish(tmp: Path, path: Path) -> None:
    """Rename the filled temporary file ``tmp`` over ``path``; remove ``tmp`` if that fails."""
    try:
        os.replace(tmp, path)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def _fill(open_tmp: Callable[[], BinaryIO], tmp: Path, data: bytes, *, fsync: bool) -> None:
    """Fill the temporary file ``tmp`` (opened by ``open_tmp``) with ``data``.

    The file is cut after ``data`` (a recycled file may be longer), closed, flushed to the disk
    first with ``fsync``; on any failure the temporary file is removed and the error re-raised.
    """
    try:
        with open_tmp() as f:
            f.write(data)
            f.truncate()
            if fsync:
                f.flush()
                os.fsync(f.fileno())
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise


def fsync_folder(folder: Path) -> None:
    """Flush ``folder``'s entries (a rename into it) to the disk (a no-op where unsupported)."""
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:  # some file systems (and Windows) cannot fsync a folder
        pass
    finally:
        os.close(fd)


def sync_filesystem(folder: Path) -> None:
    """Flush every pending write of the file system that holds ``folder`` to the disk.

    One call makes everything written there so far durable: the cheap way to make many small
    files that were written without :func:`os.fsync` durable at once. Linux ``syncfs``, whose
    failure (a write-back error such as EIO or ENOSPC) raises :class:`OSError`; where there is
    no ``syncfs``, ``sync``, which flushes every file system but may return before the writes
    are done (POSIX) and reports no error; where neither exists (Windows), nothing: only files
    written with ``fsync`` are durable there. :func:`syncs_reliably` says which case this is.
    """
    libc = _libc()
    if libc is None:
        if hasattr(os, "sync"):
            os.sync()
        return
    fd = os.open(folder, os.O_RDONLY)  # a folder cannot be opened so on Windows
    try:
        if libc.syncfs(fd) != 0:
            err = ctypes.get_errno()
            if err != errno.ENOSYS:
                raise OSError(err, f"syncfs failed: {os.strerror(err)}", str(folder))
            os.sync()
    finally:
        os.close(fd)


def syncs_reliably() -> bool:
    """Whether :func:`sync_filesystem` waits for the disk and reports errors (Linux ``syncfs``).

    On a network or FUSE file system even ``syncfs`` may stop at the server or daemon; the
    run folder belongs on a local disk (docs/reliability.md).
    """
    return _libc() is not None


@functools.cache
def _libc() -> Any:
    """The C library when it has ``syncfs`` (Linux), else None."""
    if not sys.platform.startswith("linux"):
        return None
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        libc.syncfs.argtypes = [ctypes.c_int]
        return libc
    except (OSError, AttributeError):
        return None


def same_file_system(a: Path, b: Path) -> bool:
    """Whether ``a`` and ``b`` (links followed) are on one file system (one sync covers both)."""
    return os.stat(a).st_dev == os.stat(b).st_dev


def save_checkpoint(folder: Path, round_: int, state: Mapping[str, Any],
                    extra: Mapping[str, Any] | None = None, *,
                    durable_first: Path | None = None) -> None:
    """Write ``state`` (after round ``round_``) into ``folder``.

    The state file is on the disk before ``meta.json`` names it, and ``meta.json``'s new content
    before it replaces the old one. ``durable_first`` is a folder whose files were written
    without ``fsync`` and that this checkpoint relies on (the simulated nodes' saved state).
    Where it is given and :func:`sync_filesystem` is reliable (:func:`syncs_reliably`), one
    sync of its file system (and of the checkpoint's, if it is another one) flushes those
    files, the new state file and the new ``meta.json`` (still under its temporary name)
    together, and neither file gets an ``fsync`` of its own: one sync a round instead of a sync
    and two ``fsync`` calls. The same sync makes the *previous* round's ``meta.json`` rename
    durable, so state files older than the one it names are deleted then, and the one it names
    only at the next round's sync (or by :func:`settle_checkpoint` at the end of the run):
    until then, a power cut may bring back either ``meta.json``, and both of the state files
    they name are kept. Otherwise each file has its own ``fsync``, and the previous state file
    is deleted once the new ``meta.json``'s rename is on the disk (:func:`fsync_folder`); the
    state file keeps its ``fsync`` whenever a file of its name already exists (an unchanged
    state replaces the very file ``meta.json`` names).
    """
    arrays: dict[str, np.ndarray] = {}
    skeleton = _split(dict(state), "", arrays)
    buf = io.BytesIO()
    named = {k.lstrip("/").replace("/", "|"): v for k, v in arrays.items()}
    np.savez(buf, **named)  # type: ignore[arg-type]
    blob = buf.getvalue()
    digest = hashlib.sha256(blob).hexdigest()
    state_name = f"state-{digest[:16]}.npz"
    meta = {"round": round_, "sha256": digest, "state_file": state_name, "state": skeleton,
            "extra": dict(extra or {})}
    one_sync = durable_first is not None and syncs_reliably()
    keep = {state_name}
    if one_sync:  # the meta.json this round replaces is made durable by this round's sync
        keep.add(_named_state(folder / META_FILE))
    # beside the state the current meta.json names; an unchanged state has the same name as
    # that one, and replacing the file meta.json names is safe only with the new one on the disk
    # first (its own fsync)
    replaces_named = (folder / state_name).exists()
    atomic_write(folder / state_name, blob, fsync=replaces_named or not one_sync)
    meta_tmp = staged_write(folder / META_FILE, json.dumps(meta).encode(), fsync=not one_sync)
    if durable_first is not None:
        try:
            sync_filesystem(durable_first)
            if not same_file_system(durable_first, folder):
                sync_filesystem(folder)
        except BaseException:
            meta_tmp.unlink(missing_ok=True)
            raise
    publish(meta_tmp, folder / META_FILE)
    if not one_sync:  # the rename on the disk before any state file it replaced is deleted
        fsync_folder(folder)
    _remove_unreferenced(folder, keep)


def settle_checkpoint(folder: Path) -> None:
    """Finish a run's last checkpoint: its ``meta.json`` rename goes to the disk.

    Then the state file kept for the previous ``meta.json`` (:func:`save_checkpoint` with one
    sync a round) is deleted.

    Does nothing where ``folder`` holds no readable checkpoint.
    """
    named = _named_state(folder / META_FILE)
    if named:
        fsync_folder(folder)
        _remove_unreferenced(folder, {named})


def _remove_unreferenced(folder: Path, keep: set[str]) -> None:
    """Delete the state files not in ``keep`` and the debris of writers killed mid-write."""
    for old in folder.glob("state*.npz"):
        if old.name not in keep and _STATE_NAME.fullmatch(old.name):
            old.unlink(missing_ok=True)
    for debris in folder.glob(".*"):  # temporary files of a writer killed before its rename
        if _UNFINISHED.fullmatch(debris.name):
            debris.unlink(missing_ok=True)


def _named_state(meta_path: Path) -> str:
    """The state file a checkpoint's ``meta.json`` names.

    "" when there is no ``meta.json`` or it is unreadable: no state file to keep for it then.
    """
    try:
        return str(json.loads(meta_path.read_bytes()).get("state_file", STATE_FILE))
    except (OSError, ValueError, AttributeError):
        return ""


def load_checkpoint(folder: Path) -> tuple[int, dict[str, Any], dict[str, Any]]:
    """Return ``(round, state, extra)`` from ``folder`` or raise :class:`CheckpointError`."""
    meta_path = folder / META_FILE
    if not meta_path.is_file():
        raise CheckpointError(f"{meta_path}: checkpoint file is missing")
    try:
        meta = json.loads(meta_path.read_text())
        round_, digest, skeleton = int(meta["round"]), meta["sha256"], meta["state"]
        state_name = str(meta.get("state_file", STATE_FILE))
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{meta_path}: unreadable checkpoint metadata ({exc})") from exc
    if not _STATE_NAME.fullmatch(state_name):
        raise CheckpointError(f"{meta_path}: names an unexpected state file {state_name!r}")
    state_path = folder / state_name
    if not state_path.is_file():
        raise CheckpointError(f"{state_path}: checkpoint file is missing")
    blob = state_path.read_bytes()
    if hashlib.sha256(blob).hexdigest() != digest:
        raise CheckpointError(f"{state_path}: checksum mismatch (truncated or corrupt)")
    try:
        with np.load(io.BytesIO(blob), allow_pickle=False) as z:
            arrays = {"/" + k.replace("|", "/"): z[k] for k in z.files}
    except Exception as exc:
        raise CheckpointError(f"{state_path}: cannot read arrays ({exc})") from exc
    return round_, _join(skeleton, arrays, state_path), dict(meta.get("extra", {}))
