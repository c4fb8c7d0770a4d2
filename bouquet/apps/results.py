"""The results files of a run (DESIGN §4): config.yaml, metrics.jsonl, summary.json, plots/.

Benchmarks and tests read these files; the key names are a contract.
"""

from __future__ import annotations

import datetime as dt
import json
import math
import os
import shutil
import time
from collections.abc import Mapping
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from bouquet.strategies.checkpoint import atomic_write

#: Keys every metrics.jsonl line has besides the task's and the method's metrics.
ROUND_KEYS = ("round", "up_bytes", "down_bytes", "clients", "rejected", "errors", "missing",
              "wall_s")
#: Metrics where lower is better (for ``best`` in summary.json).
LOWER_IS_BETTER = ("loss", "regret", "perplexity")
#: Folder of a run folder where nodes without a ``state-dir`` keep their saved state (simulation).
CLIENT_STATE_DIR = "client-state"


def default_results_dir() -> Path:
    """``$BOUQUET_RESULTS_DIR`` or ``~/bouquet-results`` (absolute: the SuperLink's cwd is not ours)."""
    return Path(os.environ.get("BOUQUET_RESULTS_DIR", Path.home() / "bouquet-results")).resolve()


def default_run_name(method: str, task: str, seed: int, run_id: int | None = None,
                     now: dt.datetime | None = None) -> str:
    """The folder name of a run without ``run-name``: the one naming rule of every entry point.

    Inside a run (the ServerApp, the nodes) it is ``<method>-<task>-s<seed>-run<run_id>``: nodes
    file their state under the run's name, and built from what every node also knows (the config
    and Flower's run id) it lets node state follow a server resume of an unnamed run. Before a run
    exists (``bouquet run``, ``deploy-local`` and the simulation helpers name it in advance, to
    find its folder), the start time stands in for the run id:
    ``<method>-<task>-s<seed>-<YYYYmmdd-HHMMSS>``.

    Parameters
    ----------
    method, task : str
        The method and the *resolved* task (the method's default when ``task`` is empty).
    seed : int
        The run's seed.
    run_id : int, optional
        Flower's run id; without it, the time ``now`` stands in.
    now : datetime, optional
        The start time used without a run id (default: the current local time).

    """
    if run_id is not None:
        return f"{method}-{task}-s{seed}-run{run_id}"
    return f"{method}-{task}-s{seed}-{(now or dt.datetime.now()).strftime('%Y%m%d-%H%M%S')}"


def package_versions() -> dict[str, str]:
    """Versions of bouquet, flwr and torch, read from metadata (torch is never imported)."""
    out = {}
    for name, dist in (("bouquet", "flwr-bouquet"), ("flwr", "flwr"), ("torch", "torch")):
        try:
            out[name] = version(dist)
        except PackageNotFoundError:
            out[name] = ""
    return out


def lower_is_better(metric: str) -> bool:
    """True for loss-like metrics."""
    return any(word in metric for word in LOWER_IS_BETTER)


def strict_json(obj: Any, **kwargs: Any) -> str:
    """JSON text with every non-finite float written as ``null`` (standard JSON has no NaN).

    A value a node reported can be NaN or infinite; ``json.dumps`` would write a bare ``NaN``
    that no strict reader accepts.
    """
    def clean(x: Any) -> Any:
        if isinstance(x, float) and not math.isfinite(x):
            return None
        if isinstance(x, Mapping):
            return {k: clean(val) for k, val in x.items()}
        if isinstance(x, list | tuple):
            return [clean(val) for val in x]
        return x

    return json.dumps(clean(obj), allow_nan=False, **kwargs)


def read_metrics(run_dir: Path) -> list[dict[str, Any]]:
    """All lines of a run's metrics.jsonl."""
    path = run_dir / "metrics.jsonl"
    if not path.is_file():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


class ResultsWriter:
    """Writes one run's folder.

    Parameters
    ----------
    run_dir : Path
        The run's folder (created).
    config_yaml : str
        The resolved configuration.
    meta : Mapping[str, Any]
        ``method``, ``task`` and ``seed`` for ``summary.json``.
    plots : bool
        Draw ``plots/`` in :meth:`finish` (false: no matplotlib; ``bouquet report`` draws the same
        curves from ``metrics.jsonl`` later).

    """

    def __init__(self, run_dir: Path, config_yaml: str, meta: Mapping[str, Any], *,
                 plots: bool = True) -> None:
        self.run_dir = run_dir
        self.plots = plots
        self.meta = dict(meta)
        run_dir.mkdir(parents=True, exist_ok=True)
        atomic_write(run_dir / "config.yaml", config_yaml.encode())
        self.records: list[dict[str, Any]] = []
        self.started = time.monotonic()
        self.wall_before = 0.0

    def resume(self, upto_round: int) -> None:
        """Keep the lines of rounds <= ``upto_round`` (a resumed run continues after them)."""
        self.records = [r for r in read_metrics(self.run_dir) if r["round"] <= upto_round]
        self.wall_before = sum(float(r.get("wall_s", 0.0)) for r in self.records)
        self._rewrite()

    def _rewrite(self) -> None:
        text = "".join(strict_json(r) + "\n" for r in self.records)
        atomic_write(self.run_dir / "metrics.jsonl", text.encode())

    def append(self, record: Mapping[str, Any]) -> None:
        """Add one round's line (flushed to disk at once)."""
        self.records.append(dict(record))
        with open(self.run_dir / "metrics.jsonl", "a") as f:
            f.write(strict_json(record) + "\n")

    def summary(self, headline: list[str], extras: Mapping[str, Mapping[str, Any]],
                target_accuracy: float = 0.0) -> dict[str, Any]:
        """Build the ``summary.json`` dict from the records so far."""
        recs = self.records
        final: dict[str, float] = {}
        best: dict[str, float] = {}
        for key in headline:
            values = [r[key] for r in recs if isinstance(r.get(key), int | float)]
            if values:
                final[key] = values[-1]
                best[key] = min(values) if lower_is_better(key) else max(values)
        up = sum(int(r["up_bytes"]) for r in recs)
        down = sum(int(r["down_bytes"]) for r in recs)
        replies = sum(int(r["clients"]) + int(r["rejected"]) for r in recs)
        sent = sum(int(r.get("sampled", r["clients"])) for r in recs)
        eps = [r for r in recs if isinstance(r.get("epsilon"), int | float)]
        privacy = ({"epsilon": eps[-1]["epsilon"], "delta": eps[-1].get("delta", 0.0)}
                   if eps else None)
        out: dict[str, Any] = {
            **{k: self.meta[k] for k in ("method", "task", "seed")},
            "rounds": len(recs),
            "final": final,
            "best": best,
            "comm": {
                "up_bytes_total": up,
                "down_bytes_total": down,
                "up_bytes_per_client_round": up / replies if replies else 0.0,
                "down_bytes_per_client_round": down / sent if sent else 0.0,
            },
            "privacy": privacy,
            "time": {"wall_s": round(sum(float(r.get("wall_s", 0.0)) for r in recs), 3)},
            "failures": {k: sum(int(r[k]) for r in recs) for k in ("errors", "rejected", "missing")},
            "versions": package_versions(),
        }
        if target_accuracy > 0:
            out["target"] = to_target(recs, target_accuracy)
        for section, entries in extras.items():
            if isinstance(out.get(section), dict):
                out[section].update(entries)
            else:
                out[section] = dict(entries)
        return out

    def finish(self, headline: list[str], extras: Mapping[str, Mapping[str, Any]],
               target_accuracy: float = 0.0) -> Path:
        """Write summary.json and the plots (where :attr:`plots`); return the summary's path."""
        summary = self.summary(headline, extras, target_accuracy)
        path = self.run_dir / "summary.json"
        atomic_write(path, strict_json(summary, indent=2).encode())
        if not self.plots:  # a resumed run's earlier curves would stop short of metrics.jsonl
            shutil.rmtree(self.run_dir / "plots", ignore_errors=True)
            return path
        try:
            from bouquet.apps.plots import plot_run

            plot_run(self.run_dir, self.records, headline)
        except Exception as exc:  # plots are a convenience; never lose a run over them
            print(f"[bouquet] plots skipped: {exc}", flush=True)
        return path


def reached(record: Mapping[str, Any], target: float, key: str = "accuracy") -> bool:
    """Whether one round's metrics reach ``target`` in ``key`` (a number ``>= target``)."""
    value = record.get(key)
    return isinstance(value, int | float) and not isinstance(value, bool) and value >= target


def to_target(records: list[dict[str, Any]], target: float, key: str = "accuracy") -> dict[str, Any]:
    """Round, cumulative uplink bytes and wall time when ``key`` first reached ``target``."""
    up, wall = 0, 0.0
    for r in records:
        up += int(r["up_bytes"])
        wall += float(r.get("wall_s", 0.0))
        if reached(r, target, key):
            return {"accuracy": target, "round": r["round"], "up_bytes": up,
                    "wall_s": round(wall, 3), "sim_time_s": r.get("sim_time_cum_s")}
    return {"accuracy": target, "round": None, "up_bytes": None, "wall_s": None,
            "sim_time_s": None}
