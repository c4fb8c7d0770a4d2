"""CPU seconds of each test, child processes included (issue 17, target 6).

The suite runs on one xdist worker more than the machine has cores and keeps the cores busy, so
its wall time follows the CPU time its tests spend, and a test's own duration (what
``--durations`` prints) says little: a fleet test waits on Flower's timers most of the time,
while a ``flwr run`` simulation spends its time starting processes (Ray, the SuperLink, an actor
that imports torch) that pytest never waits for. This pytest plugin puts each test in a cgroup
of its own (cgroup v1 ``cpuacct``, so root on Linux), so everything the test starts is counted,
also processes that outlive it (a shared fleet is counted to the test that started it), and
writes one JSON line per test; ``summarize`` reads them back, re-reading each cgroup's counter
for what ran on after its test.

Run (as root)::

    PYTHONPATH=benchmarks python -m pytest -p perf_tests_cpu -n 3 --dist loadgroup -q
    python benchmarks/perf_tests_cpu.py summarize /tmp/perf-tests-cpu

``PERF_TESTS_CPU_OUT`` sets the output folder (default ``/tmp/perf-tests-cpu``).
"""

from __future__ import annotations

import collections
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

ROOT = Path("/sys/fs/cgroup/cpuacct/bouquet-tests")
OUT = Path(os.environ.get("PERF_TESTS_CPU_OUT", "/tmp/perf-tests-cpu"))
_open: dict[str, tuple[Path, float, float]] = {}


def _usage(group: Path) -> float:
    """CPU seconds the cgroup's processes have used (also those that left or ended)."""
    return int((group / "cpuacct.usage").read_text()) / 1e9


def pytest_runtest_setup(item: Any) -> None:
    """Move this worker into the test's cgroup: what the test starts is counted there.

    A cgroup left by an earlier profile keeps its counter, so the counter at the start is
    recorded and subtracted.
    """
    worker = os.environ.get("PYTEST_XDIST_WORKER", "main")
    group = ROOT / f"{worker}-{abs(hash(item.nodeid))}"
    group.mkdir(parents=True, exist_ok=True)
    start = _usage(group)
    (group / "cgroup.procs").write_text(str(os.getpid()))
    _open[item.nodeid] = (group, time.monotonic(), start)


def pytest_runtest_logfinish(nodeid: str, location: Any) -> None:
    """Move the worker back out and write the test's line (after its teardown)."""
    if nodeid not in _open:
        return
    group, start, cpu_start = _open.pop(nodeid)
    (ROOT / "cgroup.procs").write_text(str(os.getpid()))
    OUT.mkdir(parents=True, exist_ok=True)
    line = {"test": nodeid, "cpu_s": _usage(group) - cpu_start,
            "wall_s": time.monotonic() - start, "cgroup": str(group), "cpu_start_s": cpu_start,
            "worker": os.environ.get("PYTEST_XDIST_WORKER", "main")}
    with (OUT / f"{os.getpid()}.jsonl").open("a") as f:
        f.write(json.dumps(line) + "\n")


def summarize(folder: Path, top: int = 25) -> None:
    """Print CPU and wall seconds by file and the ``top`` tests by CPU."""
    rows = [json.loads(x) for f in sorted(folder.glob("*.jsonl")) for x in f.read_text().split("\n")
            if x]
    for row in rows:  # processes that outlived their test (a shared fleet) ran on
        try:
            row["cpu_s"] = _usage(Path(row["cgroup"])) - row["cpu_start_s"]
        except OSError:
            pass
    cpu: collections.Counter[str] = collections.Counter()
    wall: collections.Counter[str] = collections.Counter()
    for row in rows:
        name = row["test"].split("::")[0]
        cpu[name] += row["cpu_s"]
        wall[name] += row["wall_s"]
    print(f"{len(rows)} tests, {sum(cpu.values()):.0f} CPU s in all\n")
    print("| file | CPU s | wall s (sum) |\n|---|---|---|")
    for name, seconds in cpu.most_common(top):
        print(f"| {name} | {seconds:.1f} | {wall[name]:.1f} |")
    print("\n| test | CPU s | wall s |\n|---|---|---|")
    for row in sorted(rows, key=lambda r: -r["cpu_s"])[:top]:
        print(f"| {row['test']} | {row['cpu_s']:.1f} | {row['wall_s']:.1f} |")


if __name__ == "__main__":
    if len(sys.argv) < 2 or sys.argv[1] != "summarize":
        sys.exit(__doc__)
    summarize(Path(sys.argv[2]) if len(sys.argv) > 2 else OUT)
