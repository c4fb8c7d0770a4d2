"""A node's rows per message with and without its partition cache, in fresh processes.

Issue 17, target 3. Every message of a deployment runs in a fresh ``flwr-clientapp`` process;
without a cache each one loads the task's whole dataset and splits it to use one node's rows.
For each task this script runs, each in a fresh interpreter: the task's module import (torch),
then the node's rows (``ClientEnv.local_data()``) with no cache, with a cold cache (load and
write) and with a warm cache (map), and a hello's count from the warm cache before any task is
loaded (``cached_count``: what a hello costs beyond the ClientApp's own import)::

    python benchmarks/perf_partition_cache.py --tasks digits-mlp,fmnist-cnn,rt-minilm
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile

_ROWS = r'''
import json, sys, time
from pathlib import Path
task_name, mode, folder = sys.argv[1], sys.argv[2], sys.argv[3]
import bouquet.apps.client_app as ca
from bouquet.apps.config import full_run_config
from bouquet.clients.base import ClientEnv
cfg = ca._resolve(tuple(sorted(full_run_config({"method": "fedavg", "task": task_name,
                                                 "partition": "dirichlet"}).items())))
t0 = time.perf_counter()
if mode == "hello":
    from bouquet.apps.registry import get_task
    from bouquet.tasks.partition_cache import cached_count
    module, _, attr = get_task(task_name).factory.partition(":")
    n = cached_count(Path(folder), task_name, f"{module}.{attr}", 1, 3, cfg.common)
    print(json.dumps({"task_s": 0.0, "rows_s": time.perf_counter() - t0, "rows": n,
                      "torch": "torch" in sys.modules}))
    raise SystemExit
task = ca._task(cfg.task_name)
t1 = time.perf_counter()
env = ClientEnv(cfg.common, cfg.sections, task, 1, 3,
                partition_cache=None if mode == "none" else Path(folder))
local = env.local_data()
print(json.dumps({"task_s": t1 - t0, "rows_s": time.perf_counter() - t1,
                  "rows": int(local.num_train), "torch": True}))
'''


def _fresh(task: str, mode: str, folder: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _ROWS, task, mode, folder], check=True,
                         capture_output=True, text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--tasks", default="digits-mlp,fmnist-cnn,rt-minilm")
    args = parser.parse_args(argv)
    print("| task | task module s | rows, no cache s | rows, cold cache s | rows, warm cache s "
          "| hello from the cache s (torch loaded) | rows |")
    print("|---|---|---|---|---|---|---|")
    for task in args.tasks.split(","):
        folder = tempfile.mkdtemp(prefix="bq-partition-cache-")
        none = _fresh(task, "none", folder)
        cold = _fresh(task, "cache", folder)
        warm = _fresh(task, "cache", folder)
        hello = _fresh(task, "hello", folder)
        assert none["rows"] == cold["rows"] == warm["rows"] == hello["rows"]
        print(f"| {task} | {none['task_s']:.2f} | {none['rows_s']:.2f} | {cold['rows_s']:.2f} | "
              f"{warm['rows_s']:.3f} | {hello['rows_s']:.3f} ({hello['torch']}) | "
              f"{int(none['rows'])} |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
