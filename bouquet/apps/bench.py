"""Benchmark suites: several configurations run through the real apps, one summary.json each.

A suite is a Python file ``benchmarks/<suite>.py`` that defines::

    def runs(quick: bool) -> list[BenchRun]: ...
    # optional: metrics to tabulate and a note printed under the table
    COLUMNS = ["final.accuracy", "best.accuracy", "comm.up_bytes_total"]
    # optional: metrics drawn in DIR/plots (one colour per method, a style per configuration)
    PLOT_METRICS = ["accuracy"]
    def report(summaries: dict[str, dict]) -> str: ...   # extra markdown (checks, ratios)

``bouquet bench SUITE [--quick] --out DIR`` runs each :class:`BenchRun` through the ServerApp's
run loop and the real ClientApp. The default engine is the in-process grid (the same app code,
without Ray's start-up cost); ``--engine simulation`` sends every run through ``flwr run``.
Results: ``DIR/<run>/summary.json`` (plus metrics.jsonl and plots), ``DIR/table.md``, and
``DIR/plots`` with every run's curves together.

With ``--reuse`` (``run_suite(..., reuse=True)``) a suite can be run in parts into one folder: a
run whose folder already holds all its rounds is read back instead of run again, one that holds
fewer rounds (stopped midway, or given more rounds now) continues from its checkpoint, and a
folder of another configuration is an error (``config.yaml``, and the node count and faults that
``bench.json`` keeps beside it). A run that cannot continue (no readable checkpoint) stops the
call before any run starts. The table, the report and the plots then cover
every selected run, the reused ones included.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import json
import time
from collections.abc import Callable, Mapping, Sequence
from functools import partial
from pathlib import Path
from types import ModuleType
from typing import Any

from bouquet.apps.results import read_metrics


@dataclasses.dataclass(frozen=True)
class BenchRun:
    """One configuration of a suite.

    Attributes
    ----------
    name : str
        Folder name under the output directory (unique in the suite).
    config : Mapping[str, Any]
        Run-config overrides (``method``, ``task``, method keys...).
    clients : int
        Number of simulated nodes.
    group : str
        Runs with the same group are averaged over seeds in the table (default: the name
        without a trailing ``-s<seed>``).
    faults : Mapping[int, str]
        Partition id -> a fault of :data:`bouquet.apps.faults.FAULTS` that node's train replies
        suffer (in-process engine only).

    """

    name: str
    config: Mapping[str, Any]
    clients: int = 10
    group: str = ""
    faults: Mapping[int, str] = dataclasses.field(default_factory=dict)

    @property
    def group_name(self) -> str:
        """Group key used for averaging over seeds."""
        if self.group:
            return self.group
        head, sep, tail = self.name.rpartition("-s")
        return head if sep and tail.isdigit() else self.name


def parse_run(run: str) -> tuple[str, float, int | None] | None:
    """Split a grid run's name: ``"fedit-r2-nodp-lr0.005-s1"`` -> ``("fedit-r2-nodp", 0.005, 1)``.

    The suites that tune on a learning-rate grid name a run ``ARM-lrLR[-sSEED]``; the seed suffix
    is optional (``None`` without it). A name without ``-lr<number>`` gives ``None``.
    """
    seed: int | None = None
    head, sep, tail = run.rpartition("-s")
    if sep and tail.isdigit():
        run, seed = head, int(tail)
    arm, sep, lr = run.rpartition("-lr")
    try:
        return (arm, float(lr), seed) if sep else None
    except ValueError:
        return None


def method_family(runs: Sequence[BenchRun]) -> Callable[[str], str]:
    """Group name -> its runs' ``method``, for one colour per method in the plots."""
    methods = {r.group_name: str(r.config.get("method", r.group_name)) for r in runs}
    return lambda group: methods.get(group, group)


DEFAULT_COLUMNS = ["final.accuracy", "best.accuracy", "comm.up_bytes_total",
                   "comm.up_bytes_per_client_round", "time.wall_s"]


def suite_path(name: str, root: Path | None = None) -> Path:
    """Locate ``benchmarks/<name>.py`` (in ``root``, the cwd, or the source checkout)."""
    candidates = [Path(root or Path.cwd()) / "benchmarks" / f"{name}.py",
                  Path(__file__).resolve().parents[2] / "benchmarks" / f"{name}.py"]
    for c in candidates:
        if c.is_file():
            return c
    known = sorted({p.stem for c in candidates if c.parent.is_dir() for p in c.parent.glob("*.py")
                    if not p.stem.startswith("_")})
    raise FileNotFoundError(f"no benchmark suite {name!r}; known: {', '.join(known) or 'none'}")


def load_suite(name: str) -> ModuleType:
    """Import a suite file as a module."""
    path = suite_path(name)
    spec = importlib.util.spec_from_file_location(f"bouquet_bench_{name}", path)
    assert spec and spec.loader
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def lookup(summary: Mapping[str, Any], dotted: str) -> Any:
    """``lookup(s, "comm.up_bytes_total")`` -> ``s["comm"]["up_bytes_total"]`` (None if absent)."""
    cur: Any = summary
    for part in dotted.split("."):
        if not isinstance(cur, Mapping) or part not in cur:
            return None
        cur = cur[part]
    return cur


def _fmt(v: Any) -> str:
    if v is None:
        return "—"
    if isinstance(v, float):
        return f"{v:.4g}" if abs(v) < 1e5 else f"{v:.3e}"
    return str(v)


def table(summaries: Mapping[str, Mapping[str, Any]], columns: Sequence[str],
          groups: Mapping[str, str] | None = None) -> str:
    """Markdown table: one row per group (mean ± spread over its runs), one column per key."""
    groups = groups or {k: k for k in summaries}
    by_group: dict[str, list[str]] = {}
    for run, g in groups.items():
        if run in summaries:
            by_group.setdefault(g, []).append(run)
    lines = ["| run | n | " + " | ".join(columns) + " |",
             "|---|---|" + "---|" * len(columns)]
    for g, runs in by_group.items():
        cells = []
        for col in columns:
            vals = [lookup(summaries[r], col) for r in runs]
            nums = [float(v) for v in vals if isinstance(v, int | float) and not isinstance(v, bool)]
            if len(nums) > 1:
                mean = sum(nums) / len(nums)
                spread = (max(nums) - min(nums)) / 2
                cells.append(f"{_fmt(mean)} ± {_fmt(spread)}")
            elif nums:
                cells.append(_fmt(nums[0]))
            else:
                cells.append(_fmt(vals[0] if vals else None))
        lines.append(f"| {g} | {len(runs)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


RunFn = Callable[[BenchRun, Path], Path]


def run_overrides(run: BenchRun, out: Path) -> dict[str, Any]:
    """The run-config keys one configuration runs with (its folder is ``out/<name>``).

    Presets are pinned as ``bouquet run`` pins them (:func:`bouquet.apps.config.pin_presets`),
    so a key the configuration sets to its global default (``lr`` 0.1 where the method's preset
    says otherwise) reaches the nodes as set, instead of being refused by the runner.
    """
    from bouquet.apps.config import pin_presets

    return pin_presets({**run.config, "results-dir": str(out), "run-name": run.name})


#: What a run folder's ``bench.json`` records of its configuration beyond ``config.yaml``.
BENCH_FILE = "bench.json"


def run_setup(run: BenchRun) -> dict[str, Any]:
    """The settings of ``run`` that ``config.yaml`` does not hold: node count and faults."""
    return {"clients": run.clients,
            "faults": {str(pid): fault for pid, fault in sorted(run.faults.items())}}


def setup_differences(run: BenchRun, run_dir: Path) -> dict[str, tuple[Any, Any]]:
    """Key -> (this run's value, the folder's) where ``bench.json`` differs (none if absent)."""
    path = run_dir / BENCH_FILE
    if not path.is_file():  # a folder written before bench.json existed
        return {}
    before = json.loads(path.read_text())
    return {k: (now, before.get(k)) for k, now in run_setup(run).items() if before.get(k) != now}


def record_setup(run: BenchRun, out: Path, *, resumed: bool) -> None:
    """Write ``out/<run.name>/bench.json`` before the run starts or continues.

    A continued folder keeps the file :func:`earlier_run` matched; a new run's folder that
    holds rounds already is left alone (the runner refuses it).
    """
    from bouquet.apps.runner import used_run_files
    from bouquet.strategies.checkpoint import atomic_write

    run_dir = out / run.name
    keep = (run_dir / BENCH_FILE).is_file() if resumed else bool(used_run_files(run_dir))
    if keep:
        return
    atomic_write(run_dir / BENCH_FILE, json.dumps(run_setup(run)).encode())


#: Keys a reused folder may hold other values of: where it ran (its length is checked apart),
#: whether it drew plots, and how presets were spelled (their effect is in the values compared).
REUSE_MAY_DIFFER = frozenset({"num-server-rounds", "resume-from", "run-name", "results-dir",
                              "plots", "preset", "explicit-defaults"})


def earlier_run(run: BenchRun, out: Path) -> str:
    """What ``reuse`` does with the folder ``out/<run.name>``: ``run``, ``reuse`` or ``resume``.

    ``run``: the folder holds no round. ``reuse``: its ``summary.json`` covers every round the
    configuration asks for, or records that the run stopped at its target (``stop-at-target``;
    the option must match, as every key but :data:`REUSE_MAY_DIFFER`). ``resume``: it holds
    fewer rounds (a run stopped midway, or a finished run given more rounds now); the run
    continues from its checkpoint.

    Raises
    ------
    ValueError
        When the folder holds a run of another configuration (``config.yaml``, or the node
        count and faults of ``bench.json``), more rounds than asked for, or fewer that it
        cannot be extended to because its method planned its mechanism for its own number of
        rounds (:func:`bouquet.apps.resume.plan_change`: a DP-LoRA arm with
        ``dp.target-epsilon``, a LinUCB arm whose tree would deepen).
    CheckpointError
        When a run to continue has no readable checkpoint (killed before its first one was
        written, or a damaged file): before any run of the suite starts.

    """
    from bouquet.apps.config import full_run_config, resolve
    from bouquet.apps.recorder import CHECKPOINT_DIR
    from bouquet.apps.resume import config_differences, plan_change
    from bouquet.apps.runner import used_run_files
    from bouquet.apps.target_stop import STOP_KEY
    from bouquet.strategies.checkpoint import load_checkpoint

    run_dir = out / run.name
    if not used_run_files(run_dir):
        return "run"
    overrides = run_overrides(run, out)
    cfg = resolve(full_run_config(overrides), list(overrides))
    differ = {**config_differences(cfg, run_dir, REUSE_MAY_DIFFER),
              **setup_differences(run, run_dir)}
    if differ:
        keys = ", ".join(f"{k}={now!r} (there: {before!r})" for k, (now, before) in differ.items())
        raise ValueError(f"{run_dir} holds a run of another configuration: {keys}; "
                         "remove it or use another output folder")
    why = plan_change(cfg, run_dir)
    if why is not None:
        raise ValueError(f"{why} (or remove {run_dir}, or use another output folder)")
    summary = run_dir / "summary.json"
    data = json.loads(summary.read_text()) if summary.is_file() else {}
    done = int(data.get("rounds", 0))
    wanted = cfg.common.num_server_rounds
    if done > wanted:
        raise ValueError(f"{run_dir} holds {done} rounds, this configuration asks for {wanted}; "
                         "remove it or use another output folder")
    if done == wanted or STOP_KEY in data:  # every round, or stopped at its target (finished)
        return "reuse"
    load_checkpoint(run_dir / CHECKPOINT_DIR)  # a run that cannot continue stops the plan here
    return "resume"


def run_inprocess(run: BenchRun, out: Path) -> Path:
    """Run one configuration with the in-process grid; return its summary path."""
    from bouquet.apps.faults import FAULTS, apply_fault
    from bouquet.apps.local_grid import LocalGrid
    from bouquet.apps.runner import execute

    cfg = run_overrides(run, out)
    grid = LocalGrid(run.clients, cfg)
    for pid, fault in run.faults.items():
        grid.corrupt[pid] = partial(apply_fault, FAULTS[fault])
    return execute(grid, grid.run_config)


def _report_action(run: BenchRun, out: Path) -> str:
    """:func:`earlier_run` for a report, which continues nothing.

    A run that could not continue (no readable checkpoint) is unfinished there, not an error.
    """
    from bouquet.strategies.checkpoint import CheckpointError

    try:
        return earlier_run(run, out)
    except CheckpointError:
        return "resume"


def run_suite(name: str, out: Path, *, quick: bool, engine: str = "inprocess",
              only: Sequence[str] = (), reuse: bool = False, report_only: bool = False) -> Path:
    """Run every configuration of a suite; write ``table.md``; return its path.

    ``only`` keeps the configurations whose name contains one of its strings; ``reuse`` reads
    back the runs ``out`` already holds in full and continues the unfinished ones
    (:func:`earlier_run`). ``report_only`` trains nothing: the table, report and plots cover
    the runs ``out`` holds in full, and every other configuration is listed as not run.

    Raises
    ------
    ValueError
        With ``report_only``, when ``out`` holds no finished run of the configurations.

    """
    suite = load_suite(name)
    runs: list[BenchRun] = suite.runs(quick)
    if only:
        runs = [r for r in runs if any(o in r.name for o in only)]
    names = [r.name for r in runs]
    if len(set(names)) != len(names):
        raise ValueError(f"suite {name}: run names must be unique")
    out = out.resolve()
    out.mkdir(parents=True, exist_ok=True)
    if engine != "inprocess" and any(r.faults for r in runs):
        raise ValueError(f"suite {name} injects faults: only --engine inprocess can")
    if engine == "inprocess":
        runner: RunFn = run_inprocess
    else:
        from bouquet.apps.simulation import run_simulation_bench

        runner = run_simulation_bench
    summaries: dict[str, dict[str, Any]] = {}
    t0 = time.monotonic()
    actions = {r.name: _report_action(r, out) if report_only
               else earlier_run(r, out) if reuse else "run" for r in runs}
    skipped = [r.name for r in runs if report_only and actions[r.name] != "reuse"]
    if report_only:
        runs = [r for r in runs if actions[r.name] == "reuse"]
        if not runs:
            raise ValueError(f"report only: {out} holds no finished run of suite {name!r}"
                             + (f" matching {list(only)}" if only else ""))
    for i, run in enumerate(runs, 1):
        action = actions[run.name]
        note = "" if action == "run" else f" ({action})"
        print(f"[bench] {name} {i}/{len(runs)}: {run.name}{note}", flush=True)
        if action != "reuse":
            record_setup(run, out, resumed=action == "resume")
        if action == "reuse":
            path = out / run.name / "summary.json"
        elif action == "resume":
            path = runner(dataclasses.replace(
                run, config={**run.config, "resume-from": str(out / run.name)}), out)
        else:
            path = runner(run, out)
        summaries[run.name] = json.loads(path.read_text())
    columns = list(getattr(suite, "COLUMNS", DEFAULT_COLUMNS))
    groups = {r.name: r.group_name for r in runs}
    reused = sum(a == "reuse" for a in actions.values())
    count = f"{len(runs)} runs ({reused} read back)" if reused else f"{len(runs)} runs"
    text = [f"# Benchmark `{name}`{' (quick)' if quick else ''}", "",
            f"{count}, engine {engine}, {time.monotonic() - t0:.0f} s in all.", ""]
    if skipped:
        text += [f"Not run (report only, not in {out} in full): {', '.join(skipped)}.", ""]
    text += [table(summaries, columns, groups), ""]
    if hasattr(suite, "report"):
        text += [suite.report(summaries, out), ""]
    try:
        from bouquet.apps.plots import plot_curves

        metrics = getattr(suite, "PLOT_METRICS", ["accuracy"])
        plot_curves({r.name: read_metrics(out / r.name) for r in runs}, metrics, out / "plots",
                    groups=groups, tasks={n: str(s.get("task", "")) for n, s in summaries.items()},
                    title=f"benchmark {name}", family=method_family(runs))
    except Exception as exc:  # plots never lose a benchmark
        text.append(f"(plots skipped: {exc})")
    path = out / "table.md"
    path.write_text("\n".join(text))
    print(path.read_text(), flush=True)
    return path
