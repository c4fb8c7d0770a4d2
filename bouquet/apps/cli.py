"""The ``bouquet`` command line: list, run, deploy-local, report, bench, doctor."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from bouquet.apps.config import ConfigError, RunConfig, all_keys, name_run, pin_presets, resolve
from bouquet.apps.prestart import StartupError, check_engine, check_local_nodes
from bouquet.apps.registry import methods, tasks
from bouquet.strategies.checkpoint import CheckpointError


def parse_sets(items: Sequence[str]) -> dict[str, Any]:
    """``["lr=0.1", "partition=dirichlet"]`` -> typed overrides (checked against the schema)."""
    specs = all_keys()
    out: dict[str, Any] = {}
    for item in items:
        name, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"--set expects key=value, got {item!r}")
        name = name.strip()
        if name not in specs:
            resolve({name: value})  # raises the helpful unknown-key error
        try:
            out[name] = specs[name].check(value.strip().strip("'\""))
        except ValueError as exc:
            raise ConfigError(f"bad value for {name!r}: {exc}; allowed: "
                              f"{specs[name].allowed()}") from exc
    return out


def cmd_list(args: argparse.Namespace) -> int:
    """Print methods and tasks (and keys with --keys)."""
    print("Methods:")
    for m in sorted(methods().values(), key=lambda m: (m.family, m.variant_of or m.name,
                                                        bool(m.variant_of), m.name)):
        name = f"  {m.name}" if m.variant_of else m.name
        print(f"  {name:<26} {m.description}  [task: {m.default_task}]")
    print("\nTasks:")
    for t in sorted(tasks().values(), key=lambda t: t.name):
        print(f"  {t.name:<26} {t.description}")
    if args.keys:
        print("\nConfig keys (key = default: help; allowed):")
        for name, spec in all_keys().items():
            print(f"  {name} = {spec.default!r}: {spec.help}; {spec.allowed()}")
    return 0


def positive_int(text: str) -> int:
    """Parse an integer >= 1 (a fleet of 0 nodes can never run a round)."""
    try:
        value = int(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(f"expected a whole number, got {text!r}") from exc
    if value < 1:
        raise argparse.ArgumentTypeError(f"needs at least 1 node, got {value}")
    return value


def _overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The keys to send to Flower: saved config on resume, presets pinned, checked."""
    cfg = parse_sets(args.set or [])
    if getattr(args, "method", None):
        cfg["method"] = args.method
    if args.rounds is not None:
        cfg["num-server-rounds"] = args.rounds
    if args.results_dir:
        cfg["results-dir"] = str(Path(args.results_dir).resolve())
    if getattr(args, "resume", None):
        from bouquet.apps.resume import resume_overrides

        cfg = resume_overrides(Path(args.resume).resolve(), cfg)
    cfg = pin_presets(cfg)
    return cfg


def _outcome(summary: Path) -> int:
    """Print the summary path; 1 when the run stopped before its last round, else 0."""
    print(f"summary: {summary}")
    data = json.loads(summary.read_text())
    stopped = data.get("stopped")
    if stopped:
        done = stopped.get("after_round")
        when = "before round 1" if done == 0 else f"after round {done}"
        print(f"bouquet: run stopped {when}: {stopped.get('reason')}; {stopped.get('resume')}",
              file=sys.stderr)
        return 1
    return 0


def _finished(resolved: RunConfig) -> Path | None:
    """The summary of a resumed run that already stopped at its target (then nothing starts)."""
    from bouquet.apps.runner import stopped_summary

    summary = stopped_summary(resolved)
    if summary is not None:
        print(f"bouquet: {summary.parent} is finished: it stopped at target-accuracy "
              f"{resolved.common.target_accuracy} (stop-at-target); nothing to resume (set "
              "stop-at-target=false to run its remaining rounds)", file=sys.stderr)
    return summary


def cmd_run(args: argparse.Namespace) -> int:
    """Run one method in simulation (``flwr run``) or on the in-process grid."""
    from bouquet.apps.runner import precheck, run_dir_for

    cfg = name_run(_overrides(args))
    resolved = precheck(cfg, num_nodes=args.clients)  # mistakes known now stop before start-up
    finished = _finished(resolved)
    if finished is not None:
        return _outcome(finished)
    check_engine(args.engine)
    check_local_nodes(resolved)
    if args.engine == "inprocess":
        from bouquet.apps.local_grid import LocalGrid
        from bouquet.apps.runner import execute
        from bouquet.strategies.directory import NotEnoughNodes

        grid = LocalGrid(args.clients, cfg)
        try:
            summary = execute(grid, grid.run_config)
        except NotEnoughNodes:  # the stop is in summary.json; _outcome reports it
            summary = run_dir_for(resolved) / "summary.json"
    else:
        from bouquet.apps.simulation import run_simulation

        summary = run_simulation(cfg, args.clients)
    return _outcome(summary)


def cmd_deploy(args: argparse.Namespace) -> int:
    """Run through a real SuperLink and SuperNodes on loopback."""
    from bouquet.apps.deploy import deploy_local
    from bouquet.apps.runner import precheck

    cfg = _overrides(args)
    resolved = precheck(cfg, num_nodes=args.nodes)
    finished = _finished(resolved)
    if finished is not None:
        return _outcome(finished)
    check_local_nodes(resolved)
    summary = deploy_local(args.nodes, cfg, secure=not args.insecure, keep=args.keep,
                           worker=args.worker)
    return _outcome(summary)


def cmd_report(args: argparse.Namespace) -> int:
    """Comparison table, plots and one HTML page per folder from runs' summary.json."""
    from bouquet.apps.bench import DEFAULT_COLUMNS, table
    from bouquet.apps.plots import plot_curves, seed_groups
    from bouquet.apps.report import find_runs, read_config, write_reports
    from bouquet.apps.results import read_metrics

    summaries: dict[str, dict[str, Any]] = {}
    runs: dict[str, list[dict[str, Any]]] = {}
    configs: dict[str, dict[str, Any]] = {}
    for d in args.dirs:
        for name, run_dir in find_runs(Path(d)).items():
            summaries[name] = json.loads((run_dir / "summary.json").read_text())
            runs[name] = read_metrics(run_dir)
            configs[name] = read_config(run_dir)
    if not summaries:
        print("no summary.json found under " + ", ".join(args.dirs), file=sys.stderr)
        return 1
    out = Path(args.out) if args.out else None
    dirs = [Path(d) for d in args.dirs if find_runs(Path(d))]
    if out is not None and out.suffix == ".html" and len(dirs) > 1:
        print(f"bouquet: -o {out} names one page but {len(dirs)} folders have runs; pass a folder",
              file=sys.stderr)
        return 2
    columns = args.columns.split(",") if args.columns else DEFAULT_COLUMNS
    text = table(summaries, columns)
    print(text)
    if out is not None and out.suffix != ".html":
        out.mkdir(parents=True, exist_ok=True)
        (out / "table.md").write_text(text + "\n")
        metrics = sorted({k for s in summaries.values() for k in s.get("final", {})})
        for p in plot_curves(runs, metrics, out / "plots", groups=seed_groups(list(runs), configs),
                             tasks={n: str(s.get("task", "")) for n, s in summaries.items()}):
            print(f"plot: {p}")
    for page in write_reports(dirs, out):
        print(f"report: {page}")
    return 0


def cmd_bench(args: argparse.Namespace) -> int:
    """Run a benchmark suite from benchmarks/."""
    from bouquet.apps.bench import run_suite

    path = run_suite(args.suite, Path(args.out), quick=args.quick, engine=args.engine,
                     only=args.only or (), reuse=args.reuse, report_only=args.report_only)
    print(f"table: {path}")
    return 0


def cmd_doctor(args: argparse.Namespace) -> int:
    """Check that this machine has what a method and its task need (see bouquet/apps/doctor.py)."""
    from bouquet.apps.doctor import run

    return run(args.method, args.task, args.server)


def cmd_node_worker(args: argparse.Namespace) -> int:
    """Serve a SuperNode's messages from one warm process (see bouquet/apps/node_worker.py)."""
    import logging
    import signal
    import threading

    from bouquet.apps.node_worker import serve

    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):  # finish the message in hand, then exit
        signal.signal(sig, lambda *_: stop.set())
    serve(Path(args.socket), stop=stop)
    return 0


def build_parser() -> argparse.ArgumentParser:
    """The argument parser (also used to generate docs)."""
    p = argparse.ArgumentParser(prog="bouquet", description="Federated methods for Flower.")
    sub = p.add_subparsers(dest="command", required=True)

    s = sub.add_parser("list", help="methods and tasks with one-line descriptions")
    s.add_argument("--keys", action="store_true", help="also list every config key")
    s.set_defaults(func=cmd_list)

    def common(sp: argparse.ArgumentParser) -> None:
        sp.add_argument("--rounds", type=int, help="num-server-rounds")
        sp.add_argument("--set", action="append", metavar="KEY=VALUE",
                        help="any config key (repeatable), e.g. --set lr=0.05")
        sp.add_argument("--results-dir", help="where the run folder goes")

    s = sub.add_parser("run", help="run a method in Flower's simulation engine")
    s.add_argument("method", nargs="?", help="method name (bouquet list)")
    s.add_argument("--clients", type=positive_int, default=10,
                   help="simulated nodes (default 10)")
    s.add_argument("--engine", choices=("simulation", "inprocess"), default="simulation",
                   help="simulation: flwr run (Ray); inprocess: the same apps without Ray")
    s.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    common(s)
    s.set_defaults(func=cmd_run)

    s = sub.add_parser("deploy-local", help="run through a real SuperLink + SuperNodes (TLS)")
    s.add_argument("method", nargs="?", help="method name")
    s.add_argument("--nodes", type=positive_int, default=2, help="SuperNodes (default 2)")
    s.add_argument("--insecure", action="store_true",
                   help="no TLS, no node authentication (debugging only)")
    s.add_argument("--keep", action="store_true", help="keep the fleet folder (logs)")
    s.add_argument("--worker", action="store_true", help="a warm `bouquet node-worker` beside "
                   "each SuperNode (docs/deploy.md)")
    s.add_argument("--resume", metavar="RUN_DIR", help="continue a run from its checkpoint")
    common(s)
    s.set_defaults(func=cmd_deploy)

    s = sub.add_parser("report", help="table, plots and one self-contained HTML page per folder "
                       "from runs' summary.json")
    s.add_argument("dirs", nargs="+", help="run folders or folders that contain them (a benchmark "
                   "output: its table.md and verdicts.json go on the page too)")
    s.add_argument("--columns", help="comma-separated summary keys, e.g. final.accuracy")
    s.add_argument("-o", "--out", help="write table.md, plots/ and DIR-name.html per DIR here "
                   "(a path ending in .html: that page, for one DIR); without it each DIR gets "
                   "DIR/report.html")
    s.set_defaults(func=cmd_report)

    s = sub.add_parser("bench", help="run a benchmark suite from benchmarks/")
    s.add_argument("suite")
    s.add_argument("--quick", action="store_true", help="the minutes-long variant")
    s.add_argument("--out", required=True, help="output folder")
    s.add_argument("--engine", choices=("inprocess", "simulation"), default="inprocess")
    s.add_argument("--only", action="append", help="run only configurations whose name "
                   "contains this (repeatable)")
    s.add_argument("--reuse", action="store_true", help="read back the runs the output folder "
                   "holds in full, continue the unfinished ones (a suite run in parts)")
    s.add_argument("--report-only", action="store_true", help="train nothing: report the runs "
                   "the output folder holds in full, list the others as not run")
    s.set_defaults(func=cmd_bench)

    s = sub.add_parser("doctor", help="check that a method's and task's packages, data and model "
                       "load here; print what is missing and how to install it")
    s.add_argument("method", nargs="?", help="method name (without: every extra's packages)")
    s.add_argument("--task", help="task name (default: the method's default task)")
    s.add_argument("--server", action="store_true",
                   help="check as a server (no task packages needed) instead of a node")
    s.set_defaults(func=cmd_doctor)

    s = sub.add_parser("node-worker", help="run a SuperNode's messages in one warm process "
                       "(start beside the node; node config worker-socket=PATH)")
    s.add_argument("--socket", required=True, help="path of the Unix socket to listen on (the "
                   "node's --node-config worker-socket)")
    s.set_defaults(func=cmd_node_worker)
    return p


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of the ``bouquet`` command."""
    args = build_parser().parse_args(argv)
    if args.command in ("run", "deploy-local") and not args.method and not getattr(args, "resume", None):
        args.method = "fedavg"
    try:
        return int(args.func(args))
    except (ConfigError, StartupError) as exc:  # found before anything started
        print(f"bouquet: error: {exc}", file=sys.stderr)
        return 2
    except CheckpointError as exc:
        print(f"bouquet: error: cannot resume: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print("bouquet: interrupted; every process started was stopped", file=sys.stderr)
        return 130


if __name__ == "__main__":
    raise SystemExit(main())
