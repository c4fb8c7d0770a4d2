"""The Flower App Bundle: a FAB that carries no copy of the package and checks the installed one.

A FAB of flwr-bouquet holds ``pyproject.toml`` and the small ``bouquet_fab`` package only (the
``fab-include`` setting of ``[tool.flwr.app]`` in the repository; :func:`write_app` for an app
folder written from an installed package). Its two components::

    # bouquet_fab/server_app.py
    from bouquet.apps.fab import require_fab_version
    require_fab_version(__file__)
    from bouquet.apps.server_app import app

import the flwr-bouquet installed on each machine, once :func:`require_fab_version` has checked
that it is the version the FAB was built for (the ``[project] version`` of the FAB's own
``pyproject.toml``). Every built-in method registers in code, so nothing depends on package
metadata beyond that version. A machine with another version, without flwr-bouquet, or with a copy
of ``bouquet`` shadowing the installed one, refuses with one line naming both versions: a fleet
never runs two versions of the code at once.

``python -m bouquet.apps.fab --sync [ROOT]`` rewrites the repository's ``bouquet_fab/`` from the
sources below (``--check`` reports a difference); a test keeps the two identical.
"""

from __future__ import annotations

import sys
import tomllib
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path

DISTRIBUTION = "flwr-bouquet"
PACKAGE = "bouquet_fab"

_COMPONENT = '''"""The installed flwr-bouquet's {kind}, if it is the version this FAB was built for."""

from bouquet.apps.fab import require_fab_version

require_fab_version(__file__)

from bouquet.apps.{module} import app  # noqa: E402

__all__ = ["app"]
'''

#: The files of the ``bouquet_fab`` package, by name (generated: see the module docstring).
SOURCES = {
    "__init__.py": '"""flwr-bouquet\'s Flower App components; see bouquet.apps.fab (generated)."""\n',
    "server_app.py": _COMPONENT.format(kind="ServerApp", module="server_app"),
    "client_app.py": _COMPONENT.format(kind="ClientApp", module="client_app"),
}

APP_PYPROJECT = """\
[build-system]
requires = ["hatchling"]
build-backend = "hatchling.build"

[project]
name = "flwr-bouquet-app"
version = "{version}"
description = "Flower App that runs the installed flwr-bouquet {version}"
license = "Apache-2.0"
dependencies = []

[tool.flwr.app]
publisher = "flwr-bouquet"

[tool.flwr.app.components]
serverapp = "{package}.server_app:app"
clientapp = "{package}.client_app:app"

{table}
"""


class VersionMismatch(RuntimeError):
    """The installed flwr-bouquet is not the version the FAB was built for."""


def fab_version(component_file: str | Path) -> str:
    """The ``[project] version`` of the FAB that holds ``component_file`` (``bouquet_fab/x.py``)."""
    pyproject = Path(component_file).resolve().parent.parent / "pyproject.toml"
    with pyproject.open("rb") as f:
        return str(tomllib.load(f)["project"]["version"])


def installed_version() -> str | None:
    """The installed flwr-bouquet's version, or None when it is not installed."""
    try:
        return version(DISTRIBUTION)
    except PackageNotFoundError:
        return None


def require_fab_version(component_file: str | Path) -> str:
    """Refuse, in one line, to run a FAB on another flwr-bouquet than it was built for.

    Parameters
    ----------
    component_file : str or Path
        ``__file__`` of the FAB's component module; the FAB's ``pyproject.toml`` is one folder up.

    Returns
    -------
    str
        The version, the same in the FAB, the installed distribution and the imported package.

    Raises
    ------
    VersionMismatch
        When flwr-bouquet is not installed, is installed in another version, or the ``bouquet``
        Python imports is not the installed version (a copy earlier on ``sys.path``).

    """
    import bouquet

    want, have = fab_version(component_file), installed_version()
    imported = str(getattr(bouquet, "__version__", "unknown"))
    if have is None:
        raise VersionMismatch(f"this FAB was built for {DISTRIBUTION} {want}, which is not installed "
                              f"here: pip install '{DISTRIBUTION}=={want}'")
    if have != want:
        raise VersionMismatch(f"this FAB was built for {DISTRIBUTION} {want} but {have} is installed "
                              f"here: install {want} or run a FAB built for {have}")
    if imported != have:
        raise VersionMismatch(f"this FAB was built for {DISTRIBUTION} {want} but Python imports bouquet "
                              f"{imported} from {Path(bouquet.__file__).parent}, not the installed one")
    return have


def write_package(root: Path) -> Path:
    """Write ``bouquet_fab/`` (the FAB's components) under ``root``; return its folder."""
    folder = root / PACKAGE
    folder.mkdir(parents=True, exist_ok=True)
    for name, text in SOURCES.items():
        (folder / name).write_text(text)
    return folder


def write_app(folder: Path) -> Path:
    """Write a Flower App folder for the installed flwr-bouquet (pyproject.toml + bouquet_fab/).

    ``flwr run <folder> ...`` then runs the installed version on every machine that has it, and
    refuses on every machine that has another one.
    """
    import bouquet
    from bouquet.apps.config import generated_table

    folder.mkdir(parents=True, exist_ok=True)
    (folder / "pyproject.toml").write_text(APP_PYPROJECT.format(
        version=bouquet.__version__, package=PACKAGE, table=generated_table()))
    write_package(folder)
    return folder


def package_in_sync(root: Path) -> bool:
    """Whether ``root/bouquet_fab`` holds exactly :data:`SOURCES`."""
    folder = root / PACKAGE
    present = {p.name for p in folder.glob("*.py")} if folder.is_dir() else set()
    return present == set(SOURCES) and all(
        (folder / name).read_text() == text for name, text in SOURCES.items())


def main(argv: list[str] | None = None) -> int:
    """Command-line entry: ``--sync [ROOT]`` or ``--check [ROOT]`` (ROOT: the repository)."""
    args = sys.argv[1:] if argv is None else argv
    root = Path(args[1]) if len(args) > 1 else Path(".")
    if args and args[0] == "--sync":
        print(f"{write_package(root)}: written")
        return 0
    if args and args[0] == "--check":
        ok = package_in_sync(root)
        print(f"{root / PACKAGE}: " + ("in sync" if ok else "out of sync; run --sync"))
        return 0 if ok else 1
    print("usage: python -m bouquet.apps.fab --sync|--check [ROOT]")
    return 2


if __name__ == "__main__":
    raise SystemExit(main())
