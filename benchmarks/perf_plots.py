"""What a run's end-of-run plots cost, against ``plots=false`` (issue 17, target 6).

Every run folder gets ``plots/`` when the run ends (DESIGN §4: a PNG per metric and x axis,
drawn with matplotlib). A short run, such as the test suite's many two-round runs, spends a
large share of its CPU there; ``plots=false`` skips them (``bouquet report`` draws the same
curves later from ``metrics.jsonl``). This script runs the same short FedAvg run (digits-mlp,
3 nodes, 2 rounds, 1 local step, the in-process grid) with and without plots, interleaved over
``--repeats`` pairs in one process (matplotlib imported once, before the first pair), and prints
the median CPU seconds of each and their ratio::

    python benchmarks/perf_plots.py --repeats 7
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import time
from pathlib import Path


def one_run(folder: Path, name: str, plots: bool) -> float:
    """CPU seconds of one short run through bouquet's runner (``execute``)."""
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.apps.runner import execute

    grid = LocalGrid(3, {"method": "fedavg", "task": "digits-mlp", "num-server-rounds": 2,
                         "local-steps": 1, "results-dir": str(folder), "run-name": name,
                         "plots": plots})
    start = time.process_time()
    execute(grid, grid.run_config)
    return time.process_time() - start


def main(argv: list[str] | None = None) -> None:
    """Interleave runs with and without plots; print medians and the ratio."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    import matplotlib.pyplot  # noqa: F401  (imported once, outside every measured run)

    cpu: dict[bool, list[float]] = {True: [], False: []}
    with tempfile.TemporaryDirectory() as tmp:
        one_run(Path(tmp), "warm-up", True)  # data, model and plotting code paths warmed
        for i in range(args.repeats):
            for plots in (True, False):
                cpu[plots].append(one_run(Path(tmp), f"r{i}-{plots}", plots))
    with_plots, without = statistics.median(cpu[True]), statistics.median(cpu[False])
    print(f"median CPU s per run over {args.repeats} pairs: plots {with_plots:.3f}, "
          f"plots=false {without:.3f}; the plots {with_plots - without:.3f} s "
          f"({(with_plots - without) / with_plots:.0%} of the run), ratio {without / with_plots:.2f}")


if __name__ == "__main__":
    main()
