"""A round per method family on a real loopback fleet against the same round in process.

Issue 17, target 3. Flower 1.42 runs every message in a fresh ``flwr-clientapp`` process, so a
node pays per message for the interpreter, Flower's own start-up, the FAB's installation,
bouquet's imports and the task and model load before it trains. This benchmark measures those
parts inside each of those processes, not by subtraction of run times:

* a ``sitecustomize`` module (on ``PYTHONPATH`` of the fleet) notes, in ``flwr-clientapp``
  processes only, when the interpreter reached it and how long Flower's ``pull_task_input`` and
  ``install_from_fab`` took;
* the app run on the fleet is bouquet's (``bouquet.apps.fab.write_app``) with its ClientApp
  wrapped by ``perf_probe.py``, which times the import of bouquet's ClientApp, the run config's
  resolution, the task load, the client procedure's load and the message's own work (training,
  the hello's count, node-state restore/save) and, inside it, the time spent getting the node's
  rows (``rows``: the dataset load and split, or the node's partition cache);
* the process's creation time comes from the kernel (``psutil``) and its end from ``atexit``.

Every method runs ``--rounds`` rounds with its conformance settings (``Method.test_config``,
small and fast) on ``--nodes`` SuperNodes (TLS and SuperNode authentication, as
``bouquet deploy-local``), and the same run on the in-process grid (bouquet's runner and
ClientApp in this process: the simulation without Ray). The yardstick is the bare
``python -c "import flwr, torch"`` (messages that did not load transformers) or
``import flwr, torch, transformers, peft`` (those that did), each in a fresh interpreter, best
of three::

    python benchmarks/perf_deploy.py --methods fedavg,scafcom,ffa-lora,fedkseed,fedlinucb
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from bouquet.apps.deploy import LocalFleet
from bouquet.apps.fab import write_app
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.registry import get_method
from bouquet.apps.runner import execute

SITECUSTOMIZE = r'''
"""perf_deploy: times Flower's own steps in flwr-clientapp processes (nothing elsewhere)."""
import os
import sys
import time

if os.path.basename(sys.argv[0] or "") == "flwr-clientapp":
    import importlib.abc
    import importlib.machinery

    sys._bouquet_probe = {"site_at": time.time()}
    _TARGET = "flwr.supernode.runtime.run_clientapp"

    def _timed(name, fn):
        def inner(*args, **kwargs):
            start = time.perf_counter()
            try:
                return fn(*args, **kwargs)
            finally:
                sys._bouquet_probe[name] = time.perf_counter() - start
        return inner

    class _Wrap(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name != _TARGET:
                return None
            spec = importlib.machinery.PathFinder.find_spec(name, path)
            if spec is None or spec.loader is None:
                return None
            loader = spec.loader
            run = loader.exec_module

            def exec_module(module):
                run(module)
                module.pull_task_input = _timed("pull_s", module.pull_task_input)
                module.install_from_fab = _timed("fab_install_s", module.install_from_fab)
                sys._bouquet_probe["flower_imported_at"] = time.time()
            loader.exec_module = exec_module
            return spec

    sys.meta_path.insert(0, _Wrap())
'''

PROBE = r'''
"""perf_deploy's ClientApp: bouquet's, with every step of a message timed."""
import atexit
import json
import os
import sys
import time

import psutil
from flwr.clientapp import ClientApp

LOG = {log!r}
_REC = dict(getattr(sys, "_bouquet_probe", {{}}))
_REC.update(pid=os.getpid(), created_at=psutil.Process().create_time(), probe_at=time.time())
_t = time.perf_counter()
from bouquet_fab.client_app import app as _bouquet_app  # noqa: E402  the FAB's own component
_REC["import_bouquet_s"] = time.perf_counter() - _t

from bouquet.apps import client_app as _ca  # noqa: E402
from bouquet.wire.actions import ACTION_KEY  # noqa: E402


def _timed(name, fn):
    def inner(*args, **kwargs):
        start = time.perf_counter()
        try:
            return fn(*args, **kwargs)
        finally:
            _REC[name] = _REC.get(name, 0.0) + time.perf_counter() - start
    inner.cache_clear = getattr(fn, "cache_clear", None)
    return inner


_ca._resolve = _timed("resolve_s", _ca._resolve)
_ca._task = _timed("task_load_s", _ca._task)
_ca._procedure = _timed("procedure_load_s", _ca._procedure)
_memory = _ca.with_node_memory


def _with_node_memory(msg, context, cfg, env, answer):
    start = time.perf_counter()
    try:
        return _memory(msg, context, cfg, env, _timed("work_s", answer))
    finally:
        _REC["work_and_state_s"] = time.perf_counter() - start


_ca.with_node_memory = _with_node_memory

from bouquet.apps import node_worker as _nw  # noqa: E402

# with a node worker (--worker) the message's work is the call to the worker, IPC included
_nw.forward = _timed("work_s", _nw.forward)

from bouquet.clients import base as _base  # noqa: E402

# the node's rows (dataset load and split, or the partition cache) inside a message's work
_base._local_data = _timed("rows_s", _base._local_data)
_base.ClientEnv.num_examples = _timed("count_s", _base.ClientEnv.num_examples)


def _write(extra):
    with open(LOG, "a") as f:
        f.write(json.dumps({{**_REC, **extra}}) + "\n")


class ProbeApp(ClientApp):
    def __call__(self, message, context):
        start = time.perf_counter()
        _REC["call_at"] = time.time()
        _REC["type"] = message.metadata.message_type
        config = message.content.config_records.get("config")
        _REC["action"] = str(config.get(ACTION_KEY, "")) if config is not None else ""
        reply = _bouquet_app(message, context)
        _REC["call_s"] = time.perf_counter() - start
        return reply


app = ProbeApp()
atexit.register(lambda: _write({{"exit_at": time.time(), "hf_loaded": "transformers" in sys.modules}}))
'''


def bare_import(code: str, repeat: int) -> float:
    """Best wall time of ``python -c CODE`` in a fresh interpreter."""
    best = float("inf")
    for _ in range(repeat):
        start = time.perf_counter()
        subprocess.run([sys.executable, "-c", code], check=True)
        best = min(best, time.perf_counter() - start)
    return best


def probe_app(folder: Path, log: Path) -> Path:
    """bouquet's app folder with its ClientApp wrapped by the probe."""
    write_app(folder)
    (folder / "perf_probe.py").write_text(PROBE.format(log=str(log)))
    pyproject = folder / "pyproject.toml"
    text = pyproject.read_text()
    pyproject.write_text(text.replace('clientapp = "bouquet_fab.client_app:app"',
                                      'clientapp = "perf_probe:app"', 1))
    return folder


def run_config(method: str, rounds: int, nodes: int, out: Path, name: str) -> dict[str, Any]:
    m = get_method(method)
    cfg: dict[str, Any] = {"method": method, "task": m.test_task or m.default_task,
                           **m.test_config}
    if "linucb.num-silos" in cfg:  # one silo per node
        cfg["linucb.num-silos"] = nodes
    return {**cfg, "num-server-rounds": rounds, "fraction-train": 1.0, "round-timeout": 600.0,
            "results-dir": str(out), "run-name": name}


def inprocess_round(method: str, args: argparse.Namespace, out: Path) -> float:
    """The same run on the in-process grid (first a warm-up run, so imports are paid): wall s."""
    warm = run_config(method, args.rounds, args.nodes, out, f"{method}-warm")
    execute(LocalGrid(args.nodes, warm), warm)
    cfg = run_config(method, args.rounds, args.nodes, out, f"{method}-inproc")
    grid = LocalGrid(args.nodes, cfg)
    start = time.perf_counter()
    execute(grid, grid.run_config)
    return time.perf_counter() - start


def message_rows(log: Path) -> list[dict[str, Any]]:
    """One merged record per flwr-clientapp process (its reply line and its exit line)."""
    by_pid: dict[int, dict[str, Any]] = {}
    if log.is_file():
        for line in log.read_text().splitlines():
            rec = json.loads(line)
            by_pid.setdefault(rec["pid"], {}).update(rec)
    return [r for r in by_pid.values() if "call_s" in r]


def breakdown(rows: list[dict[str, Any]]) -> dict[str, float]:
    """Median seconds of each part over the messages (and their count)."""
    def med(values: list[float]) -> float:
        return statistics.median(values) if values else float("nan")

    parts = {
        "interpreter": [r["site_at"] - r["created_at"] for r in rows if "site_at" in r],
        "flower start": [r["flower_imported_at"] - r["site_at"] for r in rows
                         if "flower_imported_at" in r],
        "pull": [r.get("pull_s", 0.0) for r in rows],
        "FAB install": [r.get("fab_install_s", 0.0) for r in rows],
        "bouquet import": [r["import_bouquet_s"] for r in rows],
        "config": [r.get("resolve_s", 0.0) for r in rows],
        "task load": [r.get("task_load_s", 0.0) for r in rows],
        "procedure load": [r.get("procedure_load_s", 0.0) for r in rows],
        "work": [r.get("work_s", r["call_s"] - r.get("resolve_s", 0.0) - r.get("task_load_s", 0.0))
                 for r in rows],
        "rows": [_rows(r) for r in rows],
        "process": [r["exit_at"] - r["created_at"] for r in rows if "exit_at" in r],
    }
    out = {k: med(v) for k, v in parts.items()}
    out["messages"] = float(len(rows))
    out["hf_loaded"] = float(any(r.get("hf_loaded") for r in rows))
    out["overhead"] = med([r["exit_at"] - r["created_at"] - r.get("work_s", 0.0)
                           for r in rows if "exit_at" in r])
    out["beyond training"] = med([r["exit_at"] - r["created_at"] - r.get("work_s", 0.0)
                                  + (_rows(r) if "work_s" in r else 0.0)
                                  for r in rows if "exit_at" in r])
    return out


def by_kind(rows: list[dict[str, Any]]) -> str:
    """``hello 12.2 / 3.4 / 3.3, train ...``: medians per message kind."""
    groups: dict[str, list[dict[str, Any]]] = {}
    for r in sorted(rows, key=lambda r: r["created_at"]):
        kind = "hello" if r.get("action") == "bouquet.hello" else str(r.get("type", "?"))
        groups.setdefault(kind, []).append(r)
    parts = []
    for kind, recs in groups.items():
        ends = [r["exit_at"] - r["created_at"] for r in recs if "exit_at" in r]
        proc = statistics.median(ends) if ends else float("nan")
        work = statistics.median(r.get("work_s", r["call_s"] - r.get("resolve_s", 0.0)
                                       - r.get("task_load_s", 0.0)) for r in recs)
        rows_s = statistics.median(_rows(r) for r in recs)
        parts.append(f"{kind} x{len(recs)} {proc:.2f} / {work:.2f} / {rows_s:.2f}")
    return ", ".join(parts)


def _rows(rec: dict[str, Any]) -> float:
    """Seconds a message spent getting the node's rows (a hello: counting them)."""
    return max(rec.get("rows_s", 0.0), rec.get("count_s", 0.0))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--methods", default="fedavg,scafcom,ffa-lora,fedkseed,fedlinucb")
    parser.add_argument("--nodes", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3, help="bare-import timings, best of")
    parser.add_argument("--worker", action="store_true", help="a warm `bouquet node-worker` "
                        "beside each SuperNode (node config worker-socket): a message's work "
                        "is then its call to the worker, serialisation and socket included")
    args = parser.parse_args(argv)
    methods = args.methods.split(",")

    bare = {"torch": bare_import("import flwr, torch", args.repeat),
            "hf": bare_import("import flwr, torch, transformers, peft", args.repeat)}
    print(f'bare python -c "import flwr, torch":                      {bare["torch"]:.2f} s')
    print(f'bare python -c "import flwr, torch, transformers, peft":  {bare["hf"]:.2f} s')

    work = Path(tempfile.mkdtemp(prefix="bq-perf-deploy-"))
    inproc = {m: inprocess_round(m, args, work / "inproc") for m in methods}

    site = work / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(SITECUSTOMIZE)
    os.environ["PYTHONPATH"] = os.pathsep.join(
        [str(site)] + [p for p in os.environ.get("PYTHONPATH", "").split(os.pathsep) if p])
    results: dict[str, dict[str, float]] = {}
    kinds: dict[str, str] = {}
    fleet_start = time.perf_counter()
    with LocalFleet(args.nodes, workdir=work / "fleet", worker=args.worker) as fleet:
        fleet_up = time.perf_counter() - fleet_start
        for m in methods:
            log = work / f"messages-{m}.jsonl"
            app = probe_app(work / f"app-{m}", log)
            start = time.perf_counter()
            cfg = run_config(m, args.rounds, args.nodes, work / "deploy", m)
            fleet.run(cfg, timeout=1800, app=app)
            rows = message_rows(log)
            results[m] = {"deploy_s": time.perf_counter() - start, **breakdown(rows)}
            kinds[m] = by_kind(rows)
    print(f"fleet start ({args.nodes} SuperNodes, TLS + authentication"
          f"{', each with a node worker' if args.worker else ''}): {fleet_up:.1f} s")
    print(f"\n{args.rounds} round(s), {args.nodes} nodes; per message: median seconds inside the "
          "flwr-clientapp process")
    cols = ["interpreter", "flower start", "pull", "FAB install", "bouquet import", "config",
            "task load", "procedure load", "work", "rows", "process", "overhead",
            "beyond training"]
    print("| method | in process s | fleet s | msgs | " + " | ".join(cols)
          + " | beyond training / bare |")
    print("|" + "---|" * (len(cols) + 5))
    for m in methods:
        r = results[m]
        yard = bare["hf"] if r["hf_loaded"] else bare["torch"]
        cells = " | ".join(f"{r[c]:.2f}" for c in cols)
        print(f"| {m} | {inproc[m]:.2f} | {r['deploy_s']:.1f} | {int(r['messages'])} | {cells} | "
              f"{r['beyond training'] / yard:.2f} |")
    print("\nby message (median process / work / rows s, in the order the fleet ran them):")
    for m in methods:
        print(f"  {m}: {kinds[m]}")
    print(f"\nlogs: {work}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
