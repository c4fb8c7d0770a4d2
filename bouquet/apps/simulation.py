"""``bouquet run``: a convenience over ``flwr run`` that side-steps Flower's pitfalls.

- runtime dependency installation off (Flower would otherwise ``uv sync`` a CUDA torch);
- a private, throwaway ``FLWR_HOME`` and ``RAY_TMPDIR``, telemetry and update checks off;
- the local simulation SuperLink is started from a neutral folder (its cwd would shadow the app's
  code) and stopped by PID afterwards, also on failure or Ctrl-C;
- the app folder handed to ``flwr run`` is generated (:func:`bouquet.apps.fab.write_app`): a
  ``pyproject.toml`` and the ``bouquet_fab`` components, which run the installed ``bouquet`` after
  a version check, so the same command works from a checkout or a plain ``pip install``.
"""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bouquet.apps.config import name_run
from bouquet.apps.fab import write_app
from bouquet.apps.results import default_results_dir


def toml_value(v: Any) -> str:
    """A TOML literal for a run-config override value."""
    if isinstance(v, bool):
        return "true" if v else "false"
    if isinstance(v, int | float):
        return repr(v)
    return '"' + str(v).replace("\\", "\\\\").replace('"', '\\"') + '"'


def run_config_arg(overrides: Mapping[str, Any]) -> str:
    """The ``--run-config`` string for ``flwr run``."""
    return " ".join(f"{k}={toml_value(v)}" for k, v in overrides.items())


def free_port() -> int:
    """A TCP port that is free on loopback right now."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def flower_env(home: Path) -> dict[str, str]:
    """Environment for Flower commands: private home, no installs, no telemetry, offline hub."""
    env = dict(os.environ)
    bin_dir = str(Path(sys.executable).parent)
    env.update({
        "FLWR_HOME": str(home),
        "FLWR_TELEMETRY_ENABLED": "0",
        "FLWR_DISABLE_UPDATE_CHECK": "1",
        "FLWR_DISABLE_RUNTIME_DEPENDENCY_INSTALLATION": "1",
        "RAY_TMPDIR": str(home / "ray"),
        "RAY_ACCEL_ENV_VAR_OVERRIDE_ON_ZERO": "0",
        "PATH": bin_dir + os.pathsep + env.get("PATH", ""),
    })
    env.setdefault("HF_HUB_OFFLINE", "1")
    return env


def pids_mentioning(text: str) -> list[int]:
    """PIDs of processes whose command line contains ``text`` (Linux /proc)."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit() or int(entry.name) == os.getpid():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
            environ = (entry / "environ").read_bytes().decode(errors="replace")
        except OSError:
            continue
        if text in cmd or text in environ:
            found.append(int(entry.name))
    return found


def stop_pids(pids: list[int], grace: float = 5.0) -> None:
    """SIGTERM, then SIGKILL after ``grace`` seconds, every PID still alive."""
    for pid in pids:
        try:
            os.kill(pid, signal.SIGTERM)
        except ProcessLookupError:
            pass
    end = time.monotonic() + grace
    while time.monotonic() < end and any(_alive(p) for p in pids):
        time.sleep(0.2)
    for pid in pids:
        if _alive(pid):
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass


def live_pids(pids: list[int]) -> list[int]:
    """The PIDs that still run (zombies, which only wait to be reaped, are not counted)."""
    return [p for p in pids if _alive(p)]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    try:
        state = Path(f"/proc/{pid}/stat").read_text().split()[2]
    except OSError:
        return False
    return state != "Z"


@contextmanager
def flower_home(keep: bool = False) -> Iterator[Path]:
    """A throwaway FLWR_HOME whose every process is stopped on exit (by PID)."""
    home = Path(tempfile.mkdtemp(prefix="bq-flwr-"))
    try:
        yield home
    finally:
        stop_pids(pids_mentioning(str(home)))
        if not keep:
            shutil.rmtree(home, ignore_errors=True)


def run_simulation(overrides: Mapping[str, Any], clients: int, *, stream: bool = True,
                   cpus_per_client: float = 1.0, timeout: float | None = None) -> Path:
    """Run one configuration through ``flwr run`` in Flower's simulation engine.

    Returns the path of the run's ``summary.json``.
    """
    cfg = name_run(overrides)
    results = Path(str(cfg.get("results-dir") or default_results_dir())).expanduser().resolve()
    cfg["results-dir"] = str(results)
    run_dir = (Path(str(cfg["resume-from"])).resolve() if cfg.get("resume-from")
               else results / str(cfg["run-name"]))
    with flower_home() as home:
        app = write_app(home / "app")
        env = flower_env(home)
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(free_port())
        env["FLWR_LOCAL_CONTROL_API_PORT"] = str(free_port())
        # --stream also makes flwr run wait until the run ends.
        cmd = [str(Path(sys.executable).parent / "flwr"), "run", str(app), "--stream"]
        cmd += ["--run-config", run_config_arg(cfg), "--federation-config",
                f"num-supernodes={clients} client-resources-num-cpus={cpus_per_client:g}"]
        proc = subprocess.run(cmd, cwd=home, env=env, timeout=timeout, check=False,
                              stdout=None if stream else subprocess.PIPE,
                              stderr=None if stream else subprocess.STDOUT)
        summary = run_dir / "summary.json"
        if proc.returncode != 0 or not summary.is_file():
            tail = proc.stdout.decode(errors="replace")[-3000:] if proc.stdout else ""
            raise RuntimeError(f"flwr run failed (exit {proc.returncode}); no {summary}\n{tail}")
    return summary


def run_simulation_bench(run: Any, out: Path) -> Path:
    """Bench runner that sends one :class:`~bouquet.apps.bench.BenchRun` through ``flwr run``."""
    cfg = {**run.config, "results-dir": str(out), "run-name": run.name}
    return run_simulation(cfg, run.clients, stream=False)
