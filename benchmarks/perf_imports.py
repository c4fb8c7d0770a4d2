"""What a ClientApp message imports, measured in fresh processes (issue 17, target 3).

In deployment Flower 1.42 runs every message in a new ``flwr-clientapp`` process, so a message
pays for the interpreter, ``import bouquet.apps.client_app`` and then, on the first call, the
run config's resolution (the method registry and every method's config class), the task and the
method's client procedure. This script times each step in its own fresh interpreter (the best of
``--repeat`` runs) and names the heavy modules each step loaded::

    python benchmarks/perf_imports.py --methods fedavg,scafcom,fedkseed,fedlinucb --repeat 3

Figures are wall seconds on this machine; the bare ``python -c "import flwr, torch"`` line is the
yardstick of issue 17's target 3.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import time

#: Modules whose presence in ``sys.modules`` after a step is reported.
HEAVY = ("scipy", "torch", "transformers", "peft", "opacus", "datasets", "sklearn")

_STEPS = r'''
import json, sys, time
t0 = time.perf_counter()
import bouquet.apps.client_app as ca
t1 = time.perf_counter()
from bouquet.apps.config import full_run_config
method = sys.argv[1]
cfg = ca._resolve(tuple(sorted(full_run_config({"method": method}).items())))
t2 = time.perf_counter()
ca._task(cfg.task_name)
t3 = time.perf_counter()
ca._procedure(cfg.method.client)
t4 = time.perf_counter()
heavy = HEAVY_NAMES
print(json.dumps({
    "import_client_app": t1 - t0, "resolve_config": t2 - t1, "load_task": t3 - t2,
    "load_procedure": t4 - t3,
    "heavy": sorted(h for h in heavy if h in sys.modules),
    "strategy_modules": sorted(m for m in sys.modules if m.startswith("bouquet.strategies.")),
}))
'''.replace("HEAVY_NAMES", repr(HEAVY))


def _fresh(code: str, *args: str) -> tuple[float, str]:
    start = time.perf_counter()
    out = subprocess.run([sys.executable, "-c", code, *args], check=True, capture_output=True,
                         text=True).stdout
    return time.perf_counter() - start, out


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="fedavg,scafcom,fedkseed,fedlinucb")
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args(argv)
    bare = {name: min(_fresh(code)[0] for _ in range(args.repeat)) for name, code in [
        ("python -c pass", "pass"),
        ("import flwr, torch", "import flwr, torch"),
        ("import flwr, torch, transformers, peft", "import flwr, torch, transformers, peft"),
    ]}
    for name, s in bare.items():
        print(f"{name:48s} {s:6.2f} s")
    print()
    print(f"{'method':12s} {'process':>8s} {'import app':>10s} {'resolve':>8s} {'task':>6s} "
          f"{'procedure':>9s}  heavy modules loaded / strategy modules")
    for method in args.methods.split(","):
        runs = [_fresh(_STEPS, method) for _ in range(args.repeat)]
        wall, out = min(runs, key=lambda r: r[0])
        row = json.loads(out.strip().splitlines()[-1])
        print(f"{method:12s} {wall:8.2f} {row['import_client_app']:10.2f} "
              f"{row['resolve_config']:8.2f} {row['load_task']:6.2f} {row['load_procedure']:9.2f}  "
              f"{','.join(row['heavy']) or '-'} / {len(row['strategy_modules'])}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
