"""What a resumed run must share with the run it continues, and how it gets it.

A run folder keeps the resolved configuration (``config.yaml``) and, in its checkpoint, the
run's identity (method, task, seed) and its headline metrics. A resume:

- takes the whole saved configuration back (:func:`resume_overrides`, what ``bouquet run --resume``
  does before anything starts); the keys of :data:`MAY_CHANGE` may be given anew;
- is refused (:func:`check_resume`, on the server, before any node is contacted) when its
  configuration differs from the saved one in any other key, or its checkpoint was written by
  another method, task or seed. Plain ``flwr run --run-config "resume-from='DIR'"`` gets the same
  check, so a resume never silently continues with other settings;
- is refused as well when its ``num-server-rounds`` would change what the method planned for
  the run's rounds (:func:`plan_change`, from the method's ``planned_rounds`` declaration): a
  noise calibrated for the planned number of rounds (LoRA's ``dp.target-epsilon``) or a tree's
  depth (LinUCB). Other methods may be given more rounds (a finished run is then extended).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping
from pathlib import Path
from typing import Any

from omegaconf import OmegaConf

from bouquet.apps.config import ConfigError, RunConfig, all_keys
from bouquet.apps.simulation import run_config_arg

CONFIG_FILE = "config.yaml"

#: Keys a resume may set to another value than the run it continues: where it runs, how long it
#: waits, how many rounds in all, whether it draws plots, and how presets were spelled
#: (``preset``, ``explicit-defaults``: their effect is in the values compared). Everything else
#: shapes the numbers and must match.
MAY_CHANGE = frozenset({
    "num-server-rounds", "resume-from", "run-name", "results-dir", "round-timeout",
    "sample-deadline", "min-train-nodes", "target-accuracy", "stop-at-target", "plots", "preset",
    "explicit-defaults",
})

#: The checkpoint ``extra`` entries that name the run (checked on resume).
IDENTITY = ("method", "task", "seed")


def saved_config(run_dir: Path) -> dict[str, Any]:
    """The flat configuration a run folder was started with (``config.yaml``).

    Raises
    ------
    ConfigError
        When the folder has no readable ``config.yaml``.

    """
    path = run_dir / CONFIG_FILE
    if not path.is_file():
        raise ConfigError(f"resume-from: {run_dir} has no {CONFIG_FILE}; is it a run folder?")
    try:
        data = OmegaConf.to_container(OmegaConf.load(path), resolve=True)
    except Exception as exc:
        raise ConfigError(f"resume-from: cannot read {path} ({exc})") from exc
    if not isinstance(data, dict):
        raise ConfigError(f"resume-from: {path} does not hold a mapping")
    return {str(k): v for k, v in data.items()}


def resume_overrides(run_dir: Path, overrides: Mapping[str, Any]) -> dict[str, Any]:
    """The saved configuration of ``run_dir`` with ``overrides`` on top (the keys to send).

    Every saved key comes back but ``resume-from`` (the folder given now) and ``preset`` (its
    values are saved as keys already); keys the schema no longer has are dropped.
    """
    specs = all_keys()
    saved = saved_config(run_dir)
    out = {k: v for k, v in saved.items() if k in specs and k not in ("resume-from", "preset")}
    out.update(overrides)
    out["resume-from"] = str(run_dir)
    return out


def checkpoint_identity(cfg: RunConfig) -> dict[str, Any]:
    """The entries of a checkpoint's ``extra`` that name this run."""
    return {"method": cfg.method.name, "task": cfg.task_name, "seed": cfg.common.seed}


def config_differences(cfg: RunConfig, run_dir: Path,
                       may_change: Collection[str] = MAY_CHANGE) -> dict[str, tuple[Any, Any]]:
    """Key -> (this run's value, the saved value) for every key that differs, but ``may_change``.

    A key missing on one side counts at its default; a folder written before ``config.yaml``
    held the task counts as the method's default task.

    Raises
    ------
    ConfigError
        When ``run_dir`` has no readable ``config.yaml``.

    """
    saved = saved_config(run_dir)
    specs = all_keys()
    differ: dict[str, tuple[Any, Any]] = {}
    for k in sorted(set(saved) | set(cfg.flat)):
        if k in may_change:
            continue
        now = cfg.flat.get(k, specs[k].default if k in specs else None)
        before = saved.get(k, specs[k].default if k in specs else None)
        if k == "task" and before == "":  # folders written before config.yaml held the task
            before = cfg.method.default_task
        if now != before:
            differ[k] = (now, before)
    return differ


def plan_change(cfg: RunConfig, run_dir: Path) -> str | None:
    """Why continuing ``run_dir`` with ``cfg``'s ``num-server-rounds`` would change its plan.

    None when the method declares no :class:`~bouquet.registration.PlannedRounds` for this
    configuration, or the new number of rounds fixes the same as the saved one. Only
    ``num-server-rounds`` may differ between the two (:func:`config_differences` refuses the
    rest), so the saved plan is the method's plan for ``cfg`` at the saved number of rounds.

    Raises
    ------
    ConfigError
        When ``run_dir`` has no readable ``config.yaml``.

    """
    specs = all_keys()
    saved = saved_config(run_dir)
    before_rounds = int(saved.get("num-server-rounds", specs["num-server-rounds"].default))
    now = cfg.method.plan(cfg.sections, cfg.common.num_server_rounds)
    before = cfg.method.plan(cfg.sections, before_rounds)
    if now is None or before is None or now.fixes == before.fixes:
        return None
    pin = (f" (a run started with {now.pinned_by} set to the most rounds it may need can be "
           "extended up to them)" if now.pinned_by and now.pinned_by != now.key else "")
    became = "" if now.key == "num-server-rounds" else f" (so {now.key}={now.rounds})"
    return (f"{cfg.method.name} plans its mechanism for the run's rounds: {run_dir} was started "
            f"with {before.key}={before.rounds}, which fixes {before.fixes}; "
            f"num-server-rounds={cfg.common.num_server_rounds}{became} fixes {now.fixes}: the "
            f"rounds still to come would run another mechanism than the rounds already done "
            f"(docs/privacy.md, \"Resuming or extending a private run\"). Continue it with "
            f"num-server-rounds={before_rounds}, or start a new run{pin}")


def check_resume(cfg: RunConfig, run_dir: Path, extra: Mapping[str, Any]) -> None:
    """Refuse to resume ``run_dir`` with a configuration that differs from the saved one.

    Parameters
    ----------
    cfg : RunConfig
        The resolved configuration of the resuming run.
    run_dir : Path
        The folder being resumed.
    extra : Mapping[str, Any]
        The checkpoint's ``extra`` (older checkpoints have no identity entries).

    Raises
    ------
    ConfigError
        Naming every key that differs, or the key whose new value would change the method's
        planned rounds (:func:`plan_change`), before anything in the folder changes.

    """
    ident = checkpoint_identity(cfg)
    for k in IDENTITY:
        if k in extra and extra[k] != ident[k]:
            raise ConfigError(
                f"resume-from: the checkpoint in {run_dir} is of {k}={extra[k]!r}, this run has "
                f"{k}={ident[k]!r}; a checkpoint only continues the run that wrote it"
            )
    changed = config_differences(cfg, run_dir)
    if changed:
        saved = saved_config(run_dir)
        differ = [f"{k}={now!r} (saved: {before!r})" for k, (now, before) in changed.items()]
        keep = {k: saved[k] for k in changed if k in saved}
        raise ConfigError(
            f"resume-from: this run's configuration differs from the one {run_dir} was started "
            f"with: {', '.join(differ)}. `bouquet run --resume DIR` restores the saved "
            f"configuration; with flwr run add --run-config \"{run_config_arg(keep)}\". Only "
            f"{', '.join(sorted(MAY_CHANGE - {'resume-from'}))} may change"
        )
    why = plan_change(cfg, run_dir)
    if why is not None:
        raise ConfigError(f"resume-from: {why}")
