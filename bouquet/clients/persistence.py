"""Node memory on the node's own disk: ``context.state`` that survives a SuperNode restart.

Flower keeps ``context.state`` in the SuperNode's memory for the life of one run: a restarted
SuperNode, or a new ``flwr run`` that resumes a stopped server, starts with an empty state
(reference flower-1.42 §8, §11). For a DP client that would silently reset its privacy
accountant; for SCAFFOLD it would lose ``c_i``; for a bandit silo its tree nodes. This module
writes the whole ``context.state`` to disk after every message that changed it, and restores it
when a node meets the run with an empty state.

Layout: one folder per run and partition, holding a few round-tagged versions, one file each::

    <folder>/r000004-s000007-run<flower run id>.state

A version file is a short JSON header (round, partition id, Flower run id, size and SHA-256 of
the payload) followed by ``context.state`` serialised with Flower's own protobuf encoding, so
every record type round-trips exactly. It is written under a temporary name and renamed into
place (:func:`~bouquet.strategies.checkpoint.atomic_write`) before the reply leaves: a version
under its final name is complete; a temporary ``.r…state.…`` file is one the node died while
writing, before its reply left, and is ignored (and deleted). A version that is present but
corrupt raises :class:`StateRestoreError` naming the file and the node answers nothing (it is
never half-loaded, and it never silently falls back to an older version, which for a DP client
would under-report epsilon). Versions written by earlier bouquet releases (a folder
``r…-s…-run…/`` holding a :mod:`bouquet.strategies.checkpoint` checkpoint) are still read.

How durable a version is depends on the store's ``fsync`` switch (docs/reliability.md, "What a
saved version survives"): with it, the file and its folder are flushed to the disk before the
reply leaves (a power cut loses nothing answered); without it, the version is in the kernel's
page cache when the reply leaves, which outlives a killed node process, and whoever needs it on
the disk syncs the file system once for many nodes (the simulation server does, every round,
before its checkpoint becomes current: :func:`~bouquet.strategies.checkpoint.save_checkpoint`
with ``durable_first``).

Which version is restored (a node with no ``bouquet.persistence`` marker in ``context.state``):

* versions written in this Flower run exist (the SuperNode restarted): the latest one of a round
  <= the message's round;
* none, and the run resumes a stopped one (``resume-from``): the latest version of a round <
  the message's round, from the earlier attempts; versions of later rounds belong to work the
  resumed server never saw and are deleted. The restored state, carrying the longest privacy
  accountant of any version (:func:`carry_spent_privacy`), is re-saved under this run and
  flushed to the disk *before* anything is deleted, also when only the accountant is carried
  (every version was of a later round): the node may die at any point and still restore the
  whole privacy it spent. Its noise calibration records (``<namespace>.calibration``) and
  noise secret (``<namespace>.noise-secret``) are carried the same way
  (:func:`carry_calibrations`), so that it still refuses a recalibrated noise and a redone
  round re-releases the very noise its first attempt released;
* none, and a new run: no model state; stale versions of an earlier run with the same name are
  deleted, but the longest privacy accountant among them (if any) is carried, the same way: it
  is saved under this run as a version of round ``rnd - 1`` (round 0 for the first message),
  flushed to the disk, before they are deleted. That is the safe direction: a node never
  under-reports the privacy it spent under that name (it may over-report, if the earlier run
  was unrelated; delete its folder to start from zero).

Versions are saved under the round of the message (``server-round``). A folder keeps the three
newest versions and the newest version of each of the three newest rounds
(:func:`retained`): enough for a server that resumes from its last checkpoint, also where a
node saves more than one version a round.

The marker (:data:`MARKER`, in ``context.state``, never saved) also names the node's folder as
resolved at its first message in the run (:func:`marked_folder`), so that later messages do not
resolve it again.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import re
import shutil
from pathlib import Path
from typing import Any

import numpy as np
from flwr.app import ConfigRecord, Context, RecordDict
from flwr.common.serde import recorddict_from_proto, recorddict_to_proto
from flwr.proto.recorddict_pb2 import RecordDict as ProtoRecordDict

from bouquet.privacy.history import parse_history
from bouquet.strategies.checkpoint import (
    META_FILE,
    CheckpointError,
    atomic_rewrite,
    atomic_write,
    fsync_folder,
    load_checkpoint,
)

#: The DP accountant's record in ``context.state`` (privacy/accountant.py: ``NodeState(context,
#: "dp")``, record ``accountant``): its history only ever grows.
ACCOUNTANT_KEY = "dp.accountant"
#: Ending of the ``context.state`` records that hold the noise calibration of a client's
#: releases in a run (``dp.calibration``, ``<method>.calibration``).
CALIBRATION_SUFFIX = ".calibration"
#: Ending of a record holding a node's own noise secret (``linucb.noise-secret``: the LinUCB
#: silo's noise is drawn from it). Fixed at its first release in a run, like a calibration.
NOISE_SECRET_SUFFIX = ".noise-secret"
#: ``context.state`` record that marks a context as already restored (never persisted itself).
MARKER = "bouquet.persistence"
#: How many versions, and how many rounds' newest versions, a partition's folder keeps.
KEEP_VERSIONS = 3
#: File name suffix of a version.
SUFFIX = ".state"
#: First line of every version file (format name and number).
MAGIC = b"bouquet-node-state 1\n"
_STATE_KEY = "context-state"  # the one array of a legacy (folder) version
_VERSION = re.compile(r"^r(\d+)-s(\d+)-run(\d+)(\.state)?$")
#: Temporary file of an unfinished write (atomic_write's ``.<name>.<random>``).
_UNFINISHED = re.compile(r"^\.r\d+-s\d+-run\d+\.state\.")


class StateRestoreError(RuntimeError):
    """A node's saved state exists but cannot be read back; the node refuses to answer."""


@dataclasses.dataclass(frozen=True, order=True)
class Version:
    """One saved version: the round it belongs to, a sequence number and the Flower run id."""

    round: int
    seq: int
    run_id: int
    #: Written by an earlier release as a checkpoint folder (read, never written).
    legacy: bool = dataclasses.field(default=False, compare=False)

    @property
    def name(self) -> str:
        """Name of this version (its file name without :data:`SUFFIX`)."""
        return f"r{self.round:06d}-s{self.seq:06d}-run{self.run_id}"


def encode_state(state: RecordDict) -> bytes:
    """``state`` without the marker, as deterministic protobuf bytes."""
    # drop the marker's item from the proto (cheaper than copying the RecordDict without it)
    proto = recorddict_to_proto(state)
    for index, item in enumerate(proto.items):
        if item.key == MARKER:
            del proto.items[index]
            break
    return bytes(proto.SerializeToString(deterministic=True))


def decode_state(blob: bytes) -> RecordDict:
    """Inverse of :func:`encode_state`."""
    proto = ProtoRecordDict()
    proto.ParseFromString(blob)
    return recorddict_from_proto(proto)


class NodeStore:
    """The saved versions of one partition's state in one run.

    Parameters
    ----------
    folder : Path
        ``<state-dir>/<run name>/partition-<id>`` (created on the first save).
    partition_id : int
        Checked on load, so a folder copied to the wrong node is refused.
    run_id : int
        The Flower run id of this attempt.
    resumed : bool
        True when this run continues a stopped one (``resume-from``): versions of earlier
        attempts may then be restored.
    fsync : bool
        Flush every version (file and folder) to the disk before :meth:`save` returns, so that
        it survives a power cut. Without it a saved version survives the node process being
        killed, not its machine losing power, until the file system is synced.

    """

    def __init__(self, folder: Path, partition_id: int, run_id: int, resumed: bool,
                 fsync: bool = True) -> None:
        self.folder = folder
        self.partition_id = partition_id
        self.run_id = run_id
        self.resumed = resumed
        self.fsync = fsync

    def _scan(self) -> tuple[list[Version], list[Path]]:
        """Complete versions (oldest first) and the debris of unfinished writes, in one listing."""
        done: list[Version] = []
        debris: list[Path] = []
        try:
            entries = list(os.scandir(self.folder))
        except (FileNotFoundError, NotADirectoryError):
            return done, debris
        for entry in entries:
            m = _VERSION.match(entry.name)
            if m is None:
                if _UNFINISHED.match(entry.name):
                    debris.append(Path(entry.path))
                continue
            version = Version(int(m[1]), int(m[2]), int(m[3]), legacy=m[4] is None)
            if not version.legacy and entry.is_file():
                done.append(version)
            elif version.legacy and entry.is_dir():  # complete once its meta.json exists
                if os.path.isfile(os.path.join(entry.path, META_FILE)):
                    done.append(version)
                else:
                    debris.append(Path(entry.path))
        return sorted(done), debris

    def complete(self) -> list[Version]:
        """Versions that were completely written, oldest first."""
        return self._scan()[0]

    def path(self, version: Version) -> Path:
        """File of one version (a folder for a legacy one)."""
        return self.folder / (version.name if version.legacy else version.name + SUFFIX)

    def load(self, version: Version) -> RecordDict:
        """Read one version; raise :class:`StateRestoreError` if it is corrupt."""
        path = self.path(version)
        try:
            if version.legacy:
                rnd, owner, blob = _read_legacy(path)
            else:
                rnd, owner, blob = read_version_file(path)
            if owner != self.partition_id or rnd != version.round:
                raise CheckpointError(
                    f"{path}: belongs to partition {owner} round {rnd}, not partition "
                    f"{self.partition_id} round {version.round}")
            return decode_state(blob)
        except (CheckpointError, KeyError, ValueError) as exc:
            raise StateRestoreError(
                f"cannot restore this node's saved state: {exc}. The node refuses to answer "
                "rather than start from an empty state (a DP client would under-report epsilon). "
                f"Repair or restore the file, or delete {path} to accept losing that state."
            ) from exc

    def save(self, rnd: int, blob: bytes, fsync: bool | None = None,
             digest: str | None = None) -> Version:
        """Write a new version for round ``rnd``; keep what :func:`retained` keeps.

        ``fsync`` overrides the store's switch for this one version (True: flushed to the disk
        whatever the store says, as a version that other versions' deletion relies on must be).
        ``digest`` is ``blob``'s SHA-256 in hex where the caller has it already.
        """
        fsync = self.fsync if fsync is None else fsync
        done, debris = self._scan()
        seq = max((v.seq for v in done), default=-1) + 1
        version = Version(rnd, seq, self.run_id)
        header = {"round": rnd, "partition-id": self.partition_id, "run-id": self.run_id,
                  "size": len(blob), "sha256": digest or _digest(blob)}
        data = MAGIC + json.dumps(header).encode() + b"\n" + blob
        # Once the new version makes the oldest one surplus, reuse its file, but only on the hot
        # path (this run writing a round newer than every kept one), never while adopting or
        # rewriting a version that may itself be the oldest (renamed away before the new one
        # is complete).
        if (done and done[0] not in retained([*done, version]) and not done[0].legacy
                and done[0].run_id == self.run_id and all(rnd > v.round for v in done)):
            atomic_rewrite(self.path(done[0]), self.path(version), data, fsync=fsync)
            done = done[1:]
        else:
            atomic_write(self.path(version), data, fsync=fsync)
        if fsync:
            fsync_folder(self.folder)
        self._prune([*done, version], debris, keep=frozenset({version}))
        return version

    def prune(self, keep: frozenset[Version] = frozenset(), only_this_run: bool = False) -> None:
        """Delete unfinished and surplus versions (and, optionally, other runs' versions).

        Keeps what :func:`retained` keeps of the complete versions and anything in ``keep``;
        with ``only_this_run`` every version written by another Flower run goes too.
        """
        done, debris = self._scan()
        self._prune(done, debris, keep, only_this_run)

    def _prune(self, done: list[Version], debris: list[Path], keep: frozenset[Version],
               only_this_run: bool = False) -> None:
        doomed = {v for v in done if v.run_id != self.run_id} if only_this_run else set()
        alive = [v for v in done if v not in doomed]
        kept = retained(alive)
        doomed.update(v for v in alive if v not in kept)
        for path in [*debris, *(self.path(v) for v in doomed - set(keep))]:
            if path.is_dir():
                shutil.rmtree(path, ignore_errors=True)
            else:
                path.unlink(missing_ok=True)


def retained(versions: list[Version]) -> set[Version]:
    """The versions a folder keeps.

    The newest :data:`KEEP_VERSIONS`, and the newest version of each of the
    :data:`KEEP_VERSIONS` newest rounds. A server resumes from its last checkpoint, which may
    be a round or two behind the newest version of a node; the node then needs its newest
    version of an earlier round. Counting versions alone would keep too few rounds for a node
    that saves several versions a round.
    """
    ordered = sorted(versions)
    newest_of_round = {v.round: v for v in ordered}  # the last of each round wins
    rounds = sorted(newest_of_round)[-KEEP_VERSIONS:]
    return set(ordered[-KEEP_VERSIONS:]) | {newest_of_round[r] for r in rounds}


def read_version_file(path: Path) -> tuple[int, int, bytes]:
    """``(round, partition id, serialised state)`` of a version file, checksum verified.

    Raises :class:`~bouquet.strategies.checkpoint.CheckpointError` naming the file when it is
    missing, truncated, corrupt or not a version file.
    """
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise CheckpointError(f"{path}: cannot read ({exc})") from exc
    end = data.find(b"\n", len(MAGIC))
    if not data.startswith(MAGIC) or end < 0:
        raise CheckpointError(f"{path}: not a bouquet node-state file (truncated or corrupt)")
    try:
        header: Any = json.loads(data[len(MAGIC):end])
        rnd, owner = int(header["round"]), int(header["partition-id"])
        size, digest = int(header["size"]), str(header["sha256"])
    except (ValueError, KeyError, TypeError) as exc:
        raise CheckpointError(f"{path}: unreadable header ({exc})") from exc
    blob = data[end + 1:]
    if len(blob) != size or hashlib.sha256(blob).hexdigest() != digest:
        raise CheckpointError(f"{path}: checksum mismatch (truncated or corrupt)")
    return rnd, owner, blob


def _read_legacy(folder: Path) -> tuple[int, int, bytes]:
    """:func:`read_version_file` for a version folder written by an earlier release."""
    rnd, state, extra = load_checkpoint(folder)
    blob = state.get(_STATE_KEY)
    if not isinstance(blob, np.ndarray) or blob.dtype != np.uint8:
        raise CheckpointError(f"{folder / 'state.npz'}: no serialised context state")
    return rnd, int(extra.get("partition-id", -1)), blob.tobytes()


def carry_spent_privacy(store: NodeStore, done: list[Version], restored: RecordDict | None
                        ) -> RecordDict | None:
    """Put the longest privacy-accountant history of any saved version into ``restored``.

    Rolling a node back to an earlier version must never give privacy back: a version the
    resumed server never saw still answered a message whose noise left the node. The accountant
    history only grows along a node's life (entries are added, or the steps of the last entry
    increase), so the history with the most steps is the spend so far (ties: the newest).
    Returns the state to restore (a fresh one holding only the accountant when ``restored`` is
    None and some version had an accountant).
    """
    best = _longest_accountant(store, done)
    if best is None:
        return restored
    out = restored if restored is not None else RecordDict()
    out[ACCOUNTANT_KEY] = best
    return out


def _longest_accountant(store: NodeStore, done: list[Version]) -> ConfigRecord | None:
    """The accountant record with the most steps among ``done`` (ties: the newest), or None."""
    best: ConfigRecord | None = None
    best_steps = -1
    for version in done:
        state = store.load(version)
        if ACCOUNTANT_KEY in state.config_records:
            rec = state.config_records[ACCOUNTANT_KEY]
            steps = sum(n for _, _, n in parse_history(rec.get("history", "[]")))
            if steps >= best_steps:
                best, best_steps = rec, steps
    return best


def spent_history(folder: Path, partition_id: int) -> list[tuple[float, float, int]]:
    """The privacy a partition's node spent, as saved in its folder (empty when none).

    The accountant history (``[(noise_multiplier, sample_rate, steps), ...]``, the input of
    :class:`bouquet.privacy.accountant.ClientAccountant`) with the most steps among the
    folder's complete versions, as :func:`carry_spent_privacy` restores it: what a finished
    run's client released, read after the run (``<state-dir>/<run>/partition-<id>``).

    Raises
    ------
    StateRestoreError
        If a version is corrupt or belongs to another partition.

    """
    store = NodeStore(folder, partition_id, run_id=0, resumed=True)
    rec = _longest_accountant(store, store.complete())
    return [] if rec is None else parse_history(rec.get("history", "[]"))


def carry_calibrations(store: NodeStore, done: list[Version], restored: RecordDict | None
                       ) -> RecordDict | None:
    """Put the newest saved calibration and noise-secret records into ``restored`` (same run).

    A calibration record (the noise a client's releases used:
    :func:`bouquet.privacy.accountant.keep_calibration`, ``clients.linucb.keep_calibration``)
    and a noise secret (``clients.linucb.node_secret``) are written once, at a node's first
    release in a run, and never change, so any version's copy is the run's. A resume whose every
    version is of a round the server never finished restores no model state, but must keep
    these records: without a calibration the node would accept a recalibrated noise for the
    same run; without its secret a LinUCB silo would redo that round's release with fresh,
    independent noise, a second release of the same data that the resumed server's privacy
    ledger does not count. A new run of the same name inherits neither.
    """
    found: dict[str, ConfigRecord] = {}
    for version in reversed(done):  # newest first
        for name, rec in store.load(version).config_records.items():
            if name.endswith((CALIBRATION_SUFFIX, NOISE_SECRET_SUFFIX)):
                found.setdefault(name, rec)
    if not found:
        return restored
    out = restored if restored is not None else RecordDict()
    for name, rec in found.items():
        if name not in out:
            out[name] = rec
    return out


def _mark(state: RecordDict, digest: str, restored: int, run_id: int, folder: Path) -> None:
    """Set the marker's fields, updating an existing marker record in place.

    Flower checks the type of every value set in a record, so a new record per message costs
    more than changing the one field that changes (the digest).
    """
    rec = state.get(MARKER) if MARKER in state else None
    if not isinstance(rec, ConfigRecord):
        rec = ConfigRecord()
        state[MARKER] = rec
    fields: dict[str, str | int] = {"digest": digest, "restored-round": restored,
                                    "run-id": run_id, "folder": str(folder)}
    for key, value in fields.items():
        if rec.get(key) != value:
            rec[key] = value


def marked_folder(context: Context) -> Path | None:
    """The node's folder as the marker names it for this run (resolved once), if it does.

    None without a marker, or with one of another Flower run (Flower may carry
    ``context.state`` from one run of a series to the next).
    """
    rec = context.state.get(MARKER) if MARKER in context.state else None
    if not isinstance(rec, ConfigRecord) or rec.get("run-id") != context.run_id:
        return None
    folder = rec.get("folder")
    return Path(folder) if isinstance(folder, str) else None


def restore(context: Context, store: NodeStore, rnd: int) -> int | None:
    """Fill an empty ``context.state`` from disk (see the module docstring).

    Does nothing when the context is already marked. Returns the round of the restored version
    (None when nothing was restored).

    Parameters
    ----------
    context : Context
        The node's context; its state is replaced in place.
    store : NodeStore
        This partition's versions.
    rnd : int
        ``server-round`` of the message being answered.

    """
    if MARKER in context.state:
        return None
    done = store.complete()
    mine = [v for v in done if v.run_id == store.run_id]
    chosen: Version | None = None
    if mine:  # the SuperNode restarted during this run
        candidates = [v for v in mine if v.round <= rnd]
        chosen = candidates[-1] if candidates else None
    elif store.resumed:  # first contact with a resumed run
        candidates = [v for v in done if v.round < rnd]
        chosen = candidates[-1] if candidates else None
    restored: RecordDict | None = store.load(chosen) if chosen is not None else None
    restored = carry_spent_privacy(store, done, restored)
    if mine or store.resumed:  # the same run: its calibration holds (a new run: not inherited)
        restored = carry_calibrations(store, mine or done, restored)
    if restored is not None:
        for k in list(context.state.keys()):
            del context.state[k]
        for k, rec in restored.items():
            context.state[k] = rec
    blob = encode_state(context.state)
    if not mine:
        # Adopt the restored state (or the accountant alone, when every version was of a round
        # the resumed server never finished) under this run, flushed to the disk, before any
        # other attempt's version is deleted: the node may die at any point after this, and
        # the spent privacy must then be on the disk in a version this run restores.
        if restored is not None:
            store.save(chosen.round if chosen is not None else max(rnd - 1, 0), blob,
                       fsync=True)
        store.prune(only_this_run=True)
    _mark(context.state, _digest(blob), chosen.round if chosen else -1, context.run_id,
          store.folder)
    return chosen.round if chosen else None


def persist(context: Context, store: NodeStore, rnd: int) -> bool:
    """Save ``context.state`` as a version of round ``rnd`` if it changed; True if written."""
    blob = encode_state(context.state)
    digest = _digest(blob)
    marker = context.state.get(MARKER) if MARKER in context.state else None
    if isinstance(marker, ConfigRecord) and marker.get("digest") == digest:
        return False
    restored = marker.get("restored-round", -1) if isinstance(marker, ConfigRecord) else -1
    restored = restored if isinstance(restored, int) else -1
    if not context.state.keys() - {MARKER} and not store.complete():
        _mark(context.state, digest, restored, context.run_id, store.folder)
        return False  # nothing to keep yet
    store.save(rnd, blob, digest=digest)
    _mark(context.state, digest, restored, context.run_id, store.folder)
    return True


def _digest(blob: bytes) -> str:
    return hashlib.sha256(blob).hexdigest()
