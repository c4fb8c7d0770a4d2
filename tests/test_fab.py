"""The FAB: small, no copy of the package, built-ins found without entry points, one version."""

from __future__ import annotations

import fcntl
import json
import os
import shutil
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from pathlib import Path
from typing import Any

import pytest

import bouquet
from bouquet.apps import fab

ROOT = Path(bouquet.__file__).resolve().parent.parent
FAB_FILES = {"pyproject.toml", "bouquet_fab/__init__.py", "bouquet_fab/server_app.py",
             "bouquet_fab/client_app.py", ".info/CONTENT"}
#: Largest FAB accepted (today's is about 10 KB; the package as a whole was 735 KB).
MAX_FAB_BYTES = 32_000


def _fab_app(folder: Path, version: str) -> Path:
    """An extracted FAB whose pyproject says it was built for ``version``."""
    fab.write_app(folder)
    text = (folder / "pyproject.toml").read_text()
    (folder / "pyproject.toml").write_text(
        text.replace(f'version = "{bouquet.__version__}"', f'version = "{version}"', 1))
    return folder


#: The line a node worker logs per answered training message (bouquet/apps/node_worker.py).
ANSWERED = "node worker: train message of run"


def test_the_repository_components_are_the_generated_ones() -> None:
    assert fab.package_in_sync(ROOT), "run python -m bouquet.apps.fab --sync"
    app = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["flwr"]["app"]
    assert app["components"] == {"serverapp": "bouquet_fab.server_app:app",
                                 "clientapp": "bouquet_fab.client_app:app"}
    assert app["fab-include"] == ["bouquet_fab/*.py"]


@pytest.fixture(scope="session")
def repository_fab(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The repository built by ``flwr build`` (the command a user runs), once per test session.

    Shared by this module's tests across the xdist workers (the first one builds under a lock,
    in a folder of its own that becomes the shared one whole): Flower 1.42's build walks and
    resolves every file under the app folder before it filters them, ``.venv`` included, about
    10-16 CPU s here. Under xdist the workers' temporary folders share this session's parent.
    """
    base = tmp_path_factory.getbasetemp()
    shared = (base.parent if "PYTEST_XDIST_WORKER" in os.environ else base) / "repository-fab"
    with open(f"{shared}.lock", "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not shared.is_dir():
            from bouquet.apps.simulation import flower_env

            building = Path(tempfile.mkdtemp(prefix="repository-fab-", dir=shared.parent))
            build = subprocess.run([str(Path(sys.executable).parent / "flwr"), "build", "--app",
                                    str(ROOT)], cwd=building, env=flower_env(building / "home"),
                                   capture_output=True, text=True, timeout=300)
            assert build.returncode == 0, build.stdout + build.stderr
            building.rename(shared)
    [built] = shared.glob("*.fab")
    return built


def test_flwr_build_of_the_repository_is_small_and_carries_no_copy_of_the_package(
        repository_fab: Path) -> None:
    data = repository_fab.read_bytes()
    names = set(zipfile.ZipFile(__import__("io").BytesIO(data)).namelist())
    assert names == FAB_FILES
    assert len(data) < MAX_FAB_BYTES


def test_a_matching_install_passes(tmp_path: Path) -> None:
    app = _fab_app(tmp_path / "app", bouquet.__version__)
    assert fab.require_fab_version(app / "bouquet_fab" / "server_app.py") == bouquet.__version__


def test_another_installed_version_is_refused_in_one_line_naming_both(tmp_path: Path) -> None:
    app = _fab_app(tmp_path / "app", "9.9.9")
    with pytest.raises(fab.VersionMismatch) as err:
        fab.require_fab_version(app / "bouquet_fab" / "client_app.py")
    text = str(err.value)
    assert "\n" not in text and "flwr-bouquet 9.9.9" in text and f"{bouquet.__version__} is installed" in text


def test_a_missing_install_or_a_shadowing_copy_is_refused(tmp_path: Path,
                                                         monkeypatch: pytest.MonkeyPatch) -> None:
    app = _fab_app(tmp_path / "app", bouquet.__version__)
    component = app / "bouquet_fab" / "server_app.py"
    monkeypatch.setattr(fab, "installed_version", lambda: None)
    with pytest.raises(fab.VersionMismatch, match="not installed here: pip install"):
        fab.require_fab_version(component)
    monkeypatch.setattr(fab, "installed_version", lambda: "0.0.1")
    monkeypatch.setattr(fab, "fab_version", lambda _: "0.0.1")
    with pytest.raises(fab.VersionMismatch, match="Python imports bouquet"):
        fab.require_fab_version(component)


def test_the_components_refuse_on_import_and_the_server_one_needs_no_torch(tmp_path: Path) -> None:
    from test_import_rules import BLOCKER

    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    good = _fab_app(tmp_path / "good", bouquet.__version__)
    ok = subprocess.run([sys.executable, "-c", BLOCKER + "import bouquet_fab.server_app as s; "
                         "print(type(s.app).__name__)"], cwd=good, env=env, capture_output=True,
                        text=True, timeout=120)
    assert ok.returncode == 0 and ok.stdout.strip() == "ServerApp", ok.stderr[-2000:]
    bad = _fab_app(tmp_path / "bad", "9.9.9")
    for part in ("server_app", "client_app"):
        proc = subprocess.run([sys.executable, "-c", f"import bouquet_fab.{part}"], cwd=bad,
                              env=env, capture_output=True, text=True, timeout=120)
        assert proc.returncode != 0
        assert "VersionMismatch: this FAB was built for flwr-bouquet 9.9.9" in proc.stderr


def _installed_apps(fleet_dir: Path) -> list[Path]:
    """The FABs the fleet's components installed (each in its own FLWR_HOME/apps)."""
    return [p for p in fleet_dir.glob("home-*/apps/*") if p.is_dir()]


@pytest.mark.slow
@pytest.mark.xdist_group("fleet-healthy")  # shares the healthy fleet (tests/conftest.py)
def test_the_built_fab_runs_on_a_real_fleet(tmp_path: Path, healthy_fleet: Any,
                                            repository_fab: Path) -> None:
    """flwr build, extract, then a SuperLink and 2 SuperNodes run FedAvg and SCAFCOM from it."""
    from bouquet.apps.deploy import CONNECTION
    from bouquet.apps.simulation import run_config_arg

    assert repository_fab.stat().st_size < MAX_FAB_BYTES
    app = tmp_path / "bouquet-fab"
    with zipfile.ZipFile(repository_fab) as z:
        assert set(z.namelist()) == FAB_FILES
        z.extractall(app)
    # plots=false: this test is about the FAB; the plots are tested in process (test_plots.py)
    common: dict[str, Any] = {"num-server-rounds": 2, "local-steps": 2, "round-timeout": 120.0,
                              "plots": False,
                              "sample-deadline": 120.0, "min-train-nodes": 2,
                              "results-dir": str(tmp_path / "results")}
    fleet = healthy_fleet  # shared; tests/conftest.py stops it and checks no process is left
    installed_before = set(_installed_apps(fleet.dir))
    worker_log = fleet.dir / "worker0.log"  # the shared fleet's other tests also write to it
    answered_before = worker_log.read_text(errors="replace").count(ANSWERED)
    summaries = {m: json.loads(fleet.run({**common, "method": m, "run-name": m},
                                         timeout=900, app=app).read_text())
                 for m in ("fedavg", "scafcom")}
    # This test's installs only: the shared fleet's homes also hold other tests' apps.
    installed = [p for p in _installed_apps(fleet.dir) if p not in installed_before]
    # A FAB built for another version is refused, in one line naming both versions.
    other = tmp_path / "other-fab"
    shutil.copytree(app, other)
    text = (other / "pyproject.toml").read_text()
    (other / "pyproject.toml").write_text(text.replace(
        f'version = "{bouquet.__version__}"', 'version = "9.9.9"', 1))
    try:
        out = fleet.flwr("run", str(other), CONNECTION, "--stream", "--run-config",
                         run_config_arg({**common, "method": "fedavg", "run-name": "other"}),
                         timeout=300)
    except RuntimeError as exc:  # flwr run may also exit non-zero for a failed run
        out = str(exc)
    except subprocess.TimeoutExpired:
        out = "flwr run of the other FAB did not end within 300 s\n"
        fleet.stop_unfinished_runs()  # the fleet is shared: leave no live run behind
    logs = out + "".join(p.read_text(errors="replace") for p in fleet.dir.glob("*.log"))
    for method, summary in summaries.items():
        assert summary["method"] == method and summary["rounds"] == 2
        assert summary["failures"] == {"errors": 0, "rejected": 0, "missing": 0}
        assert summary["versions"]["bouquet"] == bouquet.__version__
        rows = [json.loads(x) for x in
                (tmp_path / "results" / method / "metrics.jsonl").read_text().splitlines()]
        assert [r["clients"] for r in rows] == [2, 2]
    assert f"this FAB was built for flwr-bouquet 9.9.9 but {bouquet.__version__} is installed" in logs
    # SuperNode 0 answered through its warm worker (each method's 2 rounds of training there),
    # never in its own process; SuperNode 1 has no worker
    answered = worker_log.read_text(errors="replace").count(ANSWERED) - answered_before
    assert answered >= 4, worker_log.read_text(errors="replace")[-2000:]
    assert "running the message in this process" not in logs
    assert not (fleet.dir / "worker1.log").exists()
    assert not (tmp_path / "results" / "other" / "metrics.jsonl").exists()
    assert installed, "no component installed the FAB"
    for folder in installed:  # what each SuperNode and the SuperLink unpacked: no bouquet/
        assert not (folder / "bouquet").exists()
        assert {p.name for p in folder.iterdir()} <= {"pyproject.toml", "bouquet_fab", ".info"}


def test_stop_unfinished_runs_stops_only_runs_that_have_not_finished(
        monkeypatch: pytest.MonkeyPatch) -> None:
    """A timed-out ``flwr run`` leaves its run live on a shared fleet: the test stops it."""
    import json as json_

    from bouquet.apps.deploy import CONNECTION, LocalFleet

    runs = [{"run-id": "1", "status": "finished:completed"}, {"run-id": "2", "status": "running"},
            {"run-id": "3", "status": "pending"}, {"run-id": "4", "status": "finished:stopped"}]
    calls: list[tuple[str, ...]] = []

    def flwr(*args: str, **_: Any) -> str:
        calls.append(args)
        return json_.dumps({"success": True, "runs": runs}) if args[0] == "ls" else ""

    fleet = object.__new__(LocalFleet)  # no processes: only the CLI calls are checked
    monkeypatch.setattr(fleet, "flwr", flwr)
    assert fleet.stop_unfinished_runs() == [2, 3]
    assert calls == [("ls", CONNECTION, "--format", "json"), ("stop", "2", CONNECTION),
                     ("stop", "3", CONNECTION)]
