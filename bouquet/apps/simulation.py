"""``bouquet run``: a convenience over ``flwr run`` that side-steps Flower's pitfalls.

- runtime dependency installation off (Flower would otherwise ``uv sync`` a CUDA torch);
- a private, throwaway ``FLWR_HOME`` and ``RAY_TMPDIR``, telemetry and update checks off;
- the local simulation SuperLink is started from a neutral folder (its cwd would shadow the app's
  code) and stopped by PID afterwards, also on failure or Ctrl-C (:mod:`bouquet.apps.processes`,
  psutil: Linux, macOS and Windows);
- the app folder handed to ``flwr run`` is generated (:func:`bouquet.apps.fab.write_app`): a
  ``pyproject.toml`` and the ``bouquet_fab`` components, which run the installed ``bouquet`` after
  a version check, so the same command works from a checkout or a plain ``pip install``.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from bouquet.apps.config import name_run
from bouquet.apps.fab import write_app
from bouquet.apps.processes import live_pids, pids_mentioning, stop_pids
from bouquet.apps.results import default_results_dir

#: Process helpers (:mod:`bouquet.apps.processes`), imported from here by older callers.
__all__ = ["flower_env", "flower_home", "free_port", "live_pids", "pids_mentioning",
           "run_config_arg", "run_simulation", "run_simulation_bench", "stop_pids",
           "toml_value"]


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
    from bouquet.apps.bench import run_overrides

    return run_simulation(run_overrides(run, out), run.clients, stream=False)
