"""Portable process handling (psutil): find a run's processes by folder, env or parent; stop them."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path

from bouquet.apps.processes import (
    children,
    is_alive,
    live_pids,
    pids_mentioning,
    pids_with_env,
    stop_pids,
)

ROOT = Path(__file__).resolve().parents[1]
SLEEPER = "import time; time.sleep(60)"


def spawn(tmp_path: Path, marker: str, *, ignore_term: bool = False) -> subprocess.Popen[bytes]:
    code = SLEEPER if not ignore_term else (
        "import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
        "print('ready', flush=True); time.sleep(60)")
    env = {**os.environ, "BQ_TEST_HOME": str(tmp_path / marker)}
    return subprocess.Popen([sys.executable, "-c", code, str(tmp_path / marker)], env=env,
                            stdout=subprocess.PIPE if ignore_term else None)


def test_processes_are_found_by_folder_env_and_parent_then_stopped(tmp_path: Path) -> None:
    proc = spawn(tmp_path, "home-a")
    other = spawn(tmp_path, "home-ab")
    try:
        time.sleep(0.5)
        assert proc.pid in pids_mentioning(str(tmp_path / "home-a"))
        assert pids_with_env("BQ_TEST_HOME", str(tmp_path / "home-a")) == [proc.pid]
        assert proc.pid in children(os.getpid())
        assert os.getpid() not in pids_mentioning(str(tmp_path))
        stop_pids([proc.pid], grace=5.0)
        proc.wait(timeout=10)
        assert live_pids([proc.pid]) == [] and is_alive(other.pid)
    finally:
        for p in (proc, other):
            p.kill()
            p.wait()


def test_a_process_that_ignores_terminate_is_killed_after_the_grace(tmp_path: Path) -> None:
    proc = spawn(tmp_path, "stubborn", ignore_term=True)
    try:
        assert proc.stdout is not None and proc.stdout.readline().strip() == b"ready"
        t0 = time.monotonic()
        stop_pids([proc.pid], grace=1.0)
        assert proc.wait(timeout=10) != 0 and time.monotonic() - t0 >= 1.0
    finally:
        proc.kill()
        proc.wait()


def test_gone_pids_are_neither_alive_nor_an_error() -> None:
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    assert not is_alive(dead.pid) and children(dead.pid) == []
    stop_pids([dead.pid], grace=0.1)


def test_no_module_reads_linux_proc() -> None:
    """``bouquet run`` and ``deploy-local`` must work where there is no /proc (macOS, Windows)."""
    readers = [str(p.relative_to(ROOT)) for p in (ROOT / "bouquet").rglob("*.py")
               if re.search(r"""["']/proc\b""", p.read_text())]
    assert readers == []
