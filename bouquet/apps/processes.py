"""Finding and stopping the processes a run started, portably (psutil: Linux, macOS, Windows).

One job: ``bouquet run`` and ``bouquet deploy-local`` start Flower processes that start others
(the local SuperLink, SuperNodes, ServerApp and ClientApp processes, Ray). They are found by
what they carry, a private folder in their command line or environment (:func:`pids_mentioning`,
:func:`pids_with_env`) or their parent (:func:`children`), and stopped by PID (:func:`stop_pids`:
terminate, then kill after a grace period). A process this user may not inspect is skipped.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterable

import psutil

#: What psutil raises for a process that ended or that this user may not inspect.
GONE_OR_HIDDEN = (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess, OSError)


def _others() -> Iterable[psutil.Process]:
    """Every process but this one."""
    me = os.getpid()
    return (p for p in psutil.process_iter() if p.pid != me)


def _environ(proc: psutil.Process) -> dict[str, str]:
    try:
        return dict(proc.environ())
    except GONE_OR_HIDDEN:
        return {}


def pids_mentioning(text: str) -> list[int]:
    """PIDs of processes whose command line or an environment value contains ``text``."""
    found = []
    for proc in _others():
        try:
            cmd = " ".join(proc.cmdline())
        except GONE_OR_HIDDEN:
            continue
        if text in cmd or any(text in value for value in _environ(proc).values()):
            found.append(proc.pid)
    return found


def pids_with_env(name: str, value: str) -> list[int]:
    """PIDs of processes whose environment variable ``name`` is exactly ``value``."""
    return [p.pid for p in _others() if _environ(p).get(name) == value]


def children(pid: int) -> list[int]:
    """PIDs of the direct children of ``pid`` (empty when it is gone)."""
    try:
        return [c.pid for c in psutil.Process(pid).children()]
    except GONE_OR_HIDDEN:
        return []


def is_alive(pid: int) -> bool:
    """Whether ``pid`` still runs (a zombie, which only waits to be reaped, does not)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except GONE_OR_HIDDEN:
        return False


def live_pids(pids: Iterable[int]) -> list[int]:
    """The PIDs that still run."""
    return [p for p in pids if is_alive(p)]


def _signal(pid: int, *, kill: bool) -> None:
    try:
        proc = psutil.Process(pid)
        if kill:
            proc.kill()
        else:
            proc.terminate()
    except GONE_OR_HIDDEN:
        pass


def kill_pids(pids: Iterable[int]) -> None:
    """Kill at once (SIGKILL; TerminateProcess on Windows) every PID still alive."""
    for pid in pids:
        _signal(pid, kill=True)


def stop_pids(pids: Iterable[int], grace: float = 5.0) -> None:
    """Terminate (SIGTERM) every PID, then kill those still alive after ``grace`` seconds."""
    pids = list(pids)
    for pid in pids:
        _signal(pid, kill=False)
    end = time.monotonic() + grace
    while time.monotonic() < end and live_pids(pids):
        time.sleep(0.2)
    kill_pids(live_pids(pids))
