"""Simulation scale: start-up, round time and memory against the number of simulated clients.

Issue 17, target 1. Each federation size runs the same configuration through ``flwr run`` in
Flower's simulation engine (:func:`bouquet.apps.simulation.run_simulation`, Ray, one CPU per
client actor): SCAFCOM (top-k 2 %, beta 0.2) on fmnist-cnn with an IID split (digits-mlp when
Fashion-MNIST is not installed), a fixed number of clients per round, central evaluation. The
table has, per size:

* ``start_s``: from launching ``flwr run`` to the start of round 1 (SuperLink, Ray, FAB,
  ServerApp start, the server's task and model);
* ``round1_s``: round 1 (what node discovery costs lands here: the strategy learns its nodes
  inside ``configure_train``);
* ``later_s``: mean of rounds 2..n;
* ``total_s``: launch to exit of ``flwr run``;
* ``peak_rss_gib`` / ``peak_pss_gib``: peak of the summed RSS (PSS: shared pages split between
  the processes that map them) of every process the run started (SuperLink, simulation
  process, Ray and its actors), sampled every 0.5 s.

Run it alone on the machine (wall times are what the machine gives)::

    python benchmarks/perf_scale.py --sizes 1000,10000 --rounds 3 --per-round 100
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import psutil

from bouquet.apps import simulation

FMNIST = Path("/usr/share/datasets/fashion-mnist")
GIB = 2**30


def config(clients: int, per_round: int, rounds: int, out: Path, name: str,
           discovery: str | None = None, evaluation: str = "central") -> dict[str, Any]:
    """The run config of one federation size (``discovery``: the run-config key, else its default)."""
    task = "fmnist-cnn" if FMNIST.is_dir() else "digits-mlp"
    extra = {} if discovery is None else {"discovery": discovery}
    return {**extra, "evaluation": evaluation, "method": "scafcom", "task": task, "num-server-rounds": rounds,
            "fraction-train": per_round / clients, "partition": "iid", "local-steps": 2,
            "batch-size": 2, "lr": 0.05,
            "scafcom.compressor": "topk", "scafcom.compressor-ratio": 0.02, "scafcom.beta": 0.2,
            "results-dir": str(out), "run-name": name}


class Watcher:
    """Peak summed RSS/PSS of the processes whose command line or environment names a folder,
    and the moment the run's first metrics line appears (the end of round 1)."""

    def __init__(self, marker: str, metrics: Path, every: float = 0.5) -> None:
        self.marker = marker
        self.metrics = metrics
        self.every = every
        self.peak_rss = 0
        self.peak_pss = 0
        self.first_line_at = float("nan")
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def __enter__(self) -> Watcher:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        while not self._stop.wait(self.every):
            if self.first_line_at != self.first_line_at and self.metrics.is_file() \
                    and self.metrics.stat().st_size:
                self.first_line_at = time.monotonic()
            rss = pss = 0
            procs: dict[int, psutil.Process] = {}
            for pid in simulation.pids_mentioning(self.marker):
                try:
                    p = psutil.Process(pid)
                    procs[pid] = p
                    procs.update({c.pid: c for c in p.children(recursive=True)})
                except psutil.Error:
                    continue
            for p in procs.values():
                try:
                    info = p.memory_full_info()
                except psutil.Error:
                    continue
                rss += info.rss
                pss += getattr(info, "pss", info.rss)
            self.peak_rss = max(self.peak_rss, rss)
            self.peak_pss = max(self.peak_pss, pss)


def measure(clients: int, per_round: int, rounds: int, out: Path,
            discovery: str | None = None, evaluation: str = "central") -> dict[str, Any]:
    """Run one federation size; return its row of the table."""
    name = (f"scale-{clients}" + (f"-{discovery}" if discovery else "")
            + ("" if evaluation == "central" else f"-eval-{evaluation}"))
    cfg = config(clients, per_round, rounds, out, name, discovery, evaluation)
    # flower_home() makes its folder in tempfile's directory: a private one marks this run's
    # processes (SuperLink, simulation, Ray) apart from anything else on the machine
    # (short: Ray's socket paths below it must stay under 107 bytes)
    marker = tempfile.mkdtemp(prefix="ps", dir="/tmp")
    saved, tempfile.tempdir = tempfile.tempdir, marker
    t0 = time.monotonic()
    try:
        with Watcher(marker, out / name / "metrics.jsonl") as mem:
            summary = simulation.run_simulation(cfg, clients, stream=False)
    finally:
        tempfile.tempdir = saved
    total = time.monotonic() - t0
    lines = [json.loads(x) for x in (summary.parent / "metrics.jsonl").read_text().splitlines()]
    walls = [float(x["wall_s"]) for x in lines]
    data = json.loads(summary.read_text())
    # round 1 ended when its line appeared (to the 0.5 s poll); it started wall_s before that
    start_s = mem.first_line_at - t0 - walls[0]
    acc = data["final"].get("accuracy")  # None without evaluation
    return {"clients": clients, "per_round": per_round, "rounds": len(lines),
            "start_s": start_s, "round1_s": walls[0],
            "later_s": sum(walls[1:]) / max(len(walls) - 1, 1), "total_s": total,
            "peak_rss_gib": mem.peak_rss / GIB, "peak_pss_gib": mem.peak_pss / GIB,
            "accuracy": float("nan") if acc is None else float(acc), "task": cfg["task"]}


def main() -> None:
    """Parse the sizes, run each, print the table."""
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--sizes", default="1000,10000", help="comma-separated client counts")
    p.add_argument("--per-round", type=int, default=100)
    p.add_argument("--rounds", type=int, default=3)
    p.add_argument("--out", default=None, help="results folder (default: a temporary one)")
    p.add_argument("--discovery", default=None, choices=("auto", "query", "sampled"),
                   help="node discovery (run-config key `discovery`; default: the runner's auto)")
    p.add_argument("--evaluation", default="central", choices=("central", "none"),
                   help="central (default): the test set after every round; none: no evaluation, "
                   "to separate its cost (the final accuracy then reads nan)")
    args = p.parse_args()
    out = Path(args.out or tempfile.mkdtemp(prefix="perf-scale-")).resolve()
    rows = []
    for n in (int(x) for x in args.sizes.split(",")):
        rows.append(measure(n, args.per_round, args.rounds, out, args.discovery,
                            args.evaluation))
        print(json.dumps(rows[-1]), flush=True)
    print("\n| clients | per round | rounds | start s | round 1 s | later rounds s (mean) | "
          "total s | peak RSS GiB | peak PSS GiB | final acc |")
    print("|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['clients']:,} | {r['per_round']} | {r['rounds']} | {r['start_s']:.1f} | "
              f"{r['round1_s']:.1f} | {r['later_s']:.1f} | {r['total_s']:.1f} | "
              f"{r['peak_rss_gib']:.2f} | {r['peak_pss_gib']:.2f} | {r['accuracy']:.3f} |")
    print(f"\nresults in {out}; task {rows[0]['task']}; machine: {os.cpu_count()} CPUs, "
          f"load average {os.getloadavg()[0]:.1f} at the end")


if __name__ == "__main__":
    main()
