"""What node-state persistence costs a bandit run (issue 17, target 5: under 10 % of its wall time).

Run it as a script (it is not a ``bouquet bench`` suite: it needs per-node settings)::

    python benchmarks/perf_persistence.py                      # this checkout only
    python benchmarks/perf_persistence.py --before /tmp/before  # and an older source tree

Each configuration is the bandit benchmark's quick setting (``benchmarks/bandits.py``: M = 10
silos, K = 30 arms, d = 6, B = 25 steps per round, 40 rounds, seed 0) run through the ServerApp's
loop and the real ClientApp on the in-process grid (what ``bouquet run --engine inprocess``
does), each in a fresh Python process, in these persistence modes:

* ``off``: ``state-dir=off`` on every node (no node state written; the server still checkpoints);
* ``cache``: the default in simulation: every changed ``context.state`` written atomically into
  the page cache before the reply leaves, the run folder's file system synced once per round
  before the server's checkpoint;
* ``fsync``: ``state-sync=fsync`` on every node (the default on a SuperNode with ``state-dir``):
  every version and its folder flushed to the disk before the reply leaves;
* with ``--before TREE``: ``before`` and ``before-off``, the same run on another source tree
  (e.g. ``git archive <commit> | tar -x -C /tmp/before``) in its default mode and with
  ``state-dir=off``.

Modes are interleaved over ``--repeats`` and the median of each is printed. Per run it measures
the wall time of the whole run (``execute``, the interpreter start and imports excluded) and the
time spent inside the persistence calls: the nodes' ``node_store`` (finding the folder; counted
since 2026-12-06, session 20), ``restore`` and ``persist``, the server's
checkpoint (``save_checkpoint``) and its per-round file-system sync. ``share`` is that time over
the run's wall time; ``vs off`` is the wall time over the ``off`` run of the same tree.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import Any

#: The quick bandit benchmark's configuration (benchmarks/bandits.py, LDP at epsilon 1).
CONFIG: dict[str, Any] = {
    "task": "synth-bandit", "seed": 0, "num-server-rounds": 40, "linucb.batch-steps": 25,
    "linucb.num-silos": 10, "synth-bandit.arms": 30, "synth-bandit.dim": 6,
    "synth-bandit.noise": 0.5,
}
METHODS = {"dp-fedlinucb-ldp": {"dp-linucb.epsilon": 1.0, "dp-linucb.delta": 0.1},
           "fedlinucb": {}}
#: Node config of each mode (``before*`` modes run another tree).
NODE_CONFIG: dict[str, dict[str, str]] = {"off": {"state-dir": "off"}, "cache": {},
                                          "fsync": {"state-sync": "fsync"},
                                          "before": {}, "before-off": {"state-dir": "off"}}


def runs(quick: bool) -> list[Any]:
    """Not a ``bouquet bench`` suite: say how to run it."""
    raise SystemExit("perf_persistence sets per-node options: run "
                     "`python benchmarks/perf_persistence.py` instead of `bouquet bench`")


def _timed(fn: Callable[..., Any], spent: dict[str, float], key: str) -> Callable[..., Any]:
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        t0 = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            spent[key] += time.perf_counter() - t0
    return wrapper


def measure_one(method: str, mode: str, rounds: int, out: Path) -> dict[str, float]:
    """One run in this process; seconds of wall time and of each persistence call."""
    import bouquet.apps.client_app as client_app
    import bouquet.apps.recorder as recorder
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.apps.runner import execute

    spent = {"node": 0.0, "server": 0.0}
    client_app.persist = _timed(client_app.persist, spent, "node")  # type: ignore[assignment]
    client_app.restore = _timed(client_app.restore, spent, "node")  # type: ignore[assignment]
    # finding the node's folder is persistence work too (counted since session 20)
    client_app.node_store = _timed(client_app.node_store, spent, "node")  # type: ignore
    # the checkpoint includes the round's file-system sync (before session 15 the recorder
    # called it itself; a --before tree may still)
    recorder.save_checkpoint = _timed(recorder.save_checkpoint, spent, "server")  # type: ignore
    if hasattr(recorder, "sync_filesystem"):
        recorder.sync_filesystem = _timed(recorder.sync_filesystem, spent, "server")  # type: ignore
    cfg = {**CONFIG, **METHODS[method], "method": method, "num-server-rounds": rounds,
           "results-dir": str(out), "run-name": f"{method}-{mode}"}
    grid = LocalGrid(int(CONFIG["linucb.num-silos"]), cfg)
    for ctx in grid.contexts.values():
        ctx.node_config.update(NODE_CONFIG[mode])
    t0 = time.perf_counter()
    execute(grid, grid.run_config)
    wall = time.perf_counter() - t0
    return {"wall": wall, **spent}


def _spawn(method: str, mode: str, rounds: int, tree: Path) -> dict[str, float]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    with tempfile.TemporaryDirectory(prefix="perf-persistence-") as out:
        proc = subprocess.run(
            [sys.executable, __file__, "--one", method, mode, str(rounds), out],
            env=env, capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{method} {mode} failed:\n{proc.stdout[-2000:]}\n{proc.stderr[-4000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])  # type: ignore[no-any-return]


def table(results: Mapping[tuple[str, str], list[dict[str, float]]]) -> str:
    """Markdown table of the medians: wall time, persistence time and shares."""
    lines = ["| method | mode | runs | wall s | node state s | server ckpt+sync s | share | vs off |",
             "|---|---|---|---|---|---|---|---|"]
    med = {k: {f: statistics.median(r[f] for r in v) for f in v[0]} for k, v in results.items()}
    for (method, mode), m in med.items():
        base = med.get((method, "before-off" if mode.startswith("before") else "off"))
        share = (m["node"] + m["server"]) / m["wall"]
        ratio = f"{m['wall'] / base['wall']:.3f}" if base else "—"
        lines.append(f"| {method} | {mode} | {len(results[method, mode])} | {m['wall']:.2f} | "
                     f"{m['node']:.3f} | {m['server']:.3f} | {100 * share:.1f} % | {ratio} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> None:
    """Parse arguments; run every (method, mode) ``--repeats`` times, interleaved; print."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--one", nargs=4, metavar=("METHOD", "MODE", "ROUNDS", "OUT"),
                        help=argparse.SUPPRESS)
    parser.add_argument("--before", type=Path, help="another source tree to compare with")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=int(CONFIG["num-server-rounds"]))
    parser.add_argument("--methods", nargs="+", default=list(METHODS), choices=list(METHODS))
    args = parser.parse_args(argv)
    if args.one:
        method, mode, rounds, out = args.one
        print(json.dumps(measure_one(method, mode, int(rounds), Path(out))))
        return
    here = Path(__file__).resolve().parents[1]
    modes = [("off", here), ("cache", here), ("fsync", here)]
    if args.before:
        modes += [("before-off", args.before.resolve()), ("before", args.before.resolve())]
    results: dict[tuple[str, str], list[dict[str, float]]] = {}
    t0 = time.monotonic()
    for rep in range(args.repeats):
        for method in args.methods:
            for mode, tree in modes:
                r = _spawn(method, mode, args.rounds, tree)
                results.setdefault((method, mode), []).append(r)
                print(f"[perf_persistence] {rep + 1}/{args.repeats} {method} {mode}: "
                      f"wall {r['wall']:.2f} s, node {r['node']:.3f} s, "
                      f"server {r['server']:.3f} s", flush=True)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"\n{args.rounds} rounds, {CONFIG['linucb.num-silos']} silos; medians of "
          f"{args.repeats} runs per row; {time.monotonic() - t0:.0f} s in all; load average at "
          f"the end {load:.1f} on {os.cpu_count()} CPUs\n")
    print(table(results))


if __name__ == "__main__":
    main()
