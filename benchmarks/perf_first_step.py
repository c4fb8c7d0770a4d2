"""What a fresh process pays for its first SGD step and its digits, the old way and the new way.

Issue 17 (targets 3 and 6). A node without a warm worker runs every message in a fresh process,
and the test suite starts a few hundred processes, so first-use costs count as often as the
process starts. Two of them were measured and cut in session 29:

* ``sgd``: bouquet's local SGD (:func:`bouquet.tasks.torch_utils.sgd_steps`) used
  ``torch.optim.SGD``, whose first optimiser in a process imports ``torch._dynamo``; it now
  writes out the same update. Arm ``torch.optim.SGD`` runs the old loop, arm ``sgd_steps`` the
  current one, on the same model and batches (the results are equal bit for bit; tests check).
* ``digits``: digits-mlp loaded scikit-learn's digits with ``sklearn.datasets.load_digits``,
  which imports scikit-learn (scipy and the rest); it now reads the file scikit-learn ships.
  Arm ``load_digits`` is the old call, arm ``DigitsMLP.load_arrays`` the current load with the
  task's split.

Each arm runs in its own fresh interpreter after ``import torch`` (not timed), so what is
timed is the first use; the arms alternate ``--repeats`` times and the medians of the timed
block's CPU seconds (``time.process_time``) and wall seconds are printed with their ratio::

    python benchmarks/perf_first_step.py --repeats 7
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys

_TIMED = r'''
import json, sys, time
import numpy as np
import torch
arm = sys.argv[1]
c0, w0 = time.process_time(), time.perf_counter()
if arm in ("torch.optim.SGD", "sgd_steps"):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(64, 64), torch.nn.ReLU(), torch.nn.Linear(64, 10))
    batches = [(torch.randn(32, 64), torch.randint(0, 10, (32,))) for _ in range(2)]
    loss = lambda m, b: torch.nn.functional.cross_entropy(m(b[0]), b[1])
    if arm == "torch.optim.SGD":
        opt = torch.optim.SGD(model.parameters(), lr=0.1)
        for batch in batches:
            opt.zero_grad(set_to_none=True)
            loss(model, batch).backward()
            opt.step()
    else:
        from bouquet.tasks.torch_utils import sgd_steps
        sgd_steps(model, iter(batches), loss, steps=2, lr=0.1)
elif arm == "load_digits":
    from sklearn.datasets import load_digits
    x, y = load_digits(return_X_y=True)
else:
    from bouquet.tasks.digits import DigitsMLP
    DigitsMLP().load_arrays()
print(json.dumps({"cpu": time.process_time() - c0, "wall": time.perf_counter() - w0,
                  "dynamo": "torch._dynamo" in sys.modules, "sklearn": "sklearn" in sys.modules}))
'''

#: The two comparisons: (old arm, new arm).
PAIRS = {"sgd": ("torch.optim.SGD", "sgd_steps"), "digits": ("load_digits", "DigitsMLP.load_arrays")}


def _run(arm: str) -> dict[str, float]:
    out = subprocess.run([sys.executable, "-c", _TIMED, arm], check=True, capture_output=True,
                         text=True).stdout
    return json.loads(out.strip().splitlines()[-1])  # type: ignore[no-any-return]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=7)
    args = parser.parse_args(argv)
    print(f"{'pair':7s} {'arm':24s} {'CPU s':>7s} {'wall s':>7s}  loaded")
    for name, (old, new) in PAIRS.items():
        runs: dict[str, list[dict[str, float]]] = {old: [], new: []}
        for _ in range(args.repeats):
            for arm in (old, new):
                runs[arm].append(_run(arm))
        med = {arm: {k: statistics.median(r[k] for r in rs) for k in ("cpu", "wall")}
               for arm, rs in runs.items()}
        for arm in (old, new):
            last = runs[arm][-1]
            loaded = [m for m in ("dynamo", "sklearn") if last[m]]
            print(f"{name:7s} {arm:24s} {med[arm]['cpu']:7.3f} {med[arm]['wall']:7.3f}  "
                  f"{','.join(loaded) or '-'}")
        print(f"{name:7s} {'new / old':24s} {med[new]['cpu'] / med[old]['cpu']:7.3f} "
              f"{med[new]['wall'] / med[old]['wall']:7.3f}   (medians of {args.repeats}, "
              "arms alternating)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
