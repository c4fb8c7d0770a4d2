"""The suite hands its longest tests to the xdist workers first (tests/suite_order.py)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
from suite_order import COLLECTED, longest_first, rank

TESTS = Path(__file__).resolve().parent


class FakeItem:
    def __init__(self, name: str, *markers: str) -> None:
        self.name, self.markers = name, set(markers)

    def get_closest_marker(self, name: str) -> object | None:
        return name if name in self.markers else None


def test_grouped_then_slow_then_quick_keeping_the_collection_order() -> None:
    items = [FakeItem("a"), FakeItem("b", "slow"), FakeItem("c", "xdist_group", "slow"),
             FakeItem("d"), FakeItem("e", "slow"), FakeItem("f", "xdist_group")]
    assert [i.name for i in longest_first(items)] == ["c", "f", "b", "e", "a", "d"]
    assert [rank(i) for i in items] == [2, 1, 0, 2, 1, 0]


def _collected_suite(config: pytest.Config) -> list[str]:
    """The whole suite's test ids in the order it runs them.

    This session's own collection (noted by tests/conftest.py before any deselection) when it
    collected every test file, as ``make test`` does: no second collection, which imports every
    test module again (about 9 CPU s); otherwise a fresh ``pytest --collect-only`` of the folder.
    """
    modules = {str(p.relative_to(TESTS.parent)) for p in TESTS.rglob("test_*.py")}
    own = config.stash.get(COLLECTED, [])
    if modules <= {nodeid.split("::")[0] for nodeid in own}:
        return own
    proc = subprocess.run([sys.executable, "-m", "pytest", "--collect-only", "-q",
                           "-p", "no:cacheprovider", str(TESTS)],
                          capture_output=True, text=True, timeout=300, cwd=TESTS.parent)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return [line for line in proc.stdout.splitlines() if "::" in line]


def test_the_collected_suite_starts_with_the_fleet_groups(request: pytest.FixtureRequest) -> None:
    """The real collection: the four fleet tests come first, other slow tests before quick ones."""
    ids = _collected_suite(request.config)
    fleet = {i for i, line in enumerate(ids)
             if "test_reliability_deploy.py::" in line
             or "test_the_built_fab_runs_on_a_real_fleet" in line
             or "test_deploy_local_over_tls_with_authentication" in line}
    assert len(fleet) == 4, [ids[i] for i in sorted(fleet)]
    assert fleet == set(range(4)), [ids[i] for i in range(6)]
    first_quick = next(i for i, line in enumerate(ids) if "test_suite_order.py::" in line)
    assert any("test_examples.py::" in line for line in ids[:first_quick])


def test_the_installed_xdist_keeps_a_group_on_one_worker(tmp_path: Path) -> None:
    """``--dist loadgroup`` must send an ``xdist_group`` to one worker: the reliability fleets
    are timed and run one at a time, and the healthy fleet is one per worker. With pytest 9.2
    and xdist 3.8 the group is silently ignored (pytest-dev/pytest-xdist#1386; pyproject pins
    pytest below 9.2), which this catches."""
    (tmp_path / "pytest.ini").write_text("[pytest]\n")
    (tmp_path / "test_grouped.py").write_text(
        "import os\nimport pytest\n\n"
        "pytestmark = pytest.mark.xdist_group('together')\n\n"
        "@pytest.mark.parametrize('i', range(6))\n"
        "def test_where(i):\n"
        "    with open('workers.txt', 'a') as f:\n"
        "        f.write(os.environ['PYTEST_XDIST_WORKER'] + '\\n')\n")
    env = {k: v for k, v in os.environ.items() if k != "PYTEST_ADDOPTS"}
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           "-n", "2", "--dist", "loadgroup", "test_grouped.py"],
                          capture_output=True, text=True, timeout=300, cwd=tmp_path, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    workers = (tmp_path / "workers.txt").read_text().split()
    assert len(workers) == 6 and len(set(workers)) == 1, workers
