"""What the command line checks before it starts any process, so that a mistake is one line.

One job: the checks that need no node and no Flower process, beyond the configuration itself
(:func:`bouquet.apps.runner.precheck`, which also checks the run folder and a resume):

- the results folder can be created and written (:func:`check_writable`; the server runs it
  too, :func:`bouquet.apps.runner.checked_start`);
- ``bouquet run`` and ``bouquet deploy-local`` start the nodes on this machine, so the nodes'
  packages must be here: the method's extra (torch, transformers, peft, opacus...), its client
  procedure, its task and the task's packaged data/model files (:func:`check_local_nodes`);
- the simulation engine needs Ray (:func:`check_engine`).

Every port bouquet opens is picked free at start (``free_port``), so there is no port to check.
A failed check raises :class:`StartupError`, which the CLI prints as ``bouquet: error: ...``
and exits 2, before anything has started.
"""

from __future__ import annotations

import importlib.util
import tempfile
from pathlib import Path

from bouquet.apps.config import ConfigError, RunConfig


class StartupError(Exception):
    """A problem found before start-up: printed as one line, exit status 2."""


def check_writable(folder: Path, key: str = "results-dir") -> None:
    """Create ``folder`` if needed and write (then remove) a probe file in it.

    Raises
    ------
    ConfigError
        Naming ``key`` and the folder, when it cannot be created or written.

    """
    try:
        folder.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ConfigError(f"{key}: cannot create {folder} ({exc.strerror or exc})") from exc
    try:
        with tempfile.NamedTemporaryFile(dir=folder, prefix=".bouquet-probe-"):
            pass
    except OSError as exc:
        raise ConfigError(f"{key}: cannot write in {folder} ({exc.strerror or exc})") from exc


def missing_distributions(extra: str) -> list[str]:
    """Distributions of ``extra`` (and the base install) that are not installed at all.

    Versions that differ are left to ``bouquet doctor``; a source tree that is not installed
    as a package has no metadata to read (then nothing is reported).
    """
    from importlib import metadata

    from bouquet.apps.doctor import extra_requirements

    try:
        requirements = extra_requirements(extra)
    except metadata.PackageNotFoundError:
        return []
    missing = set()
    for r in requirements:
        try:
            metadata.version(r.name)
        except metadata.PackageNotFoundError:
            missing.add(r.name)
    return sorted(missing)


def check_local_nodes(cfg: RunConfig) -> None:
    """Raise :class:`StartupError` when the nodes this machine starts could not run the method."""
    from bouquet.apps.doctor import install_hint
    from bouquet.apps.registry import get_task

    method, spec = cfg.method, get_task(cfg.task_name)
    extra = spec.extra or method.extra
    doctor = f"bouquet doctor {method.name} --task {spec.name} checks everything"
    missing = missing_distributions(method.extra)
    if missing:
        raise StartupError(f"method {method.name!r} needs {', '.join(missing)} on its nodes, "
                           f"which run on this machine (not installed); install: "
                           f"{install_hint(method.extra)}  ({doctor})")
    try:
        method.load_client()
        task = spec.load()
        if hasattr(task, "require"):  # packaged data/model files
            task.require()
    except ImportError as exc:
        text = str(exc) if "pip install" in str(exc) else \
            f"{exc}; install: {install_hint(extra)}"
        raise StartupError(f"the nodes of {method.name!r} on task {spec.name!r} cannot start "
                           f"here: {text}  ({doctor})") from exc


def check_engine(engine: str) -> None:
    """Raise :class:`StartupError` when the chosen engine's packages are missing."""
    if engine == "simulation" and importlib.util.find_spec("ray") is None:
        raise StartupError('the simulation engine needs Ray: pip install '
                           '"flwr-bouquet[simulation]" (or run with --engine inprocess)')
