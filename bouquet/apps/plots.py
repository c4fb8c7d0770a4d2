"""PNG curves of one run or of several (metric vs round, metric vs cumulative uplink bytes)."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402


def _series(records: Sequence[Mapping[str, Any]], key: str) -> tuple[list[int], list[float], list[float]]:
    rounds, values, uplink = [], [], []
    cum = 0
    for r in records:
        cum += int(r.get("up_bytes", 0))
        if isinstance(r.get(key), int | float):
            rounds.append(int(r["round"]))
            values.append(float(r[key]))
            uplink.append(float(cum))
    return rounds, values, uplink


def plot_curves(runs: Mapping[str, Sequence[Mapping[str, Any]]], metrics: Sequence[str],
                out_dir: Path) -> list[Path]:
    """One PNG per metric and x-axis, with one line per run; returns the files written."""
    out_dir.mkdir(parents=True, exist_ok=True)
    written = []
    for key in metrics:
        for xaxis in ("round", "uplink"):
            fig, ax = plt.subplots(figsize=(6, 4))
            drawn = False
            for label, records in runs.items():
                rounds, values, uplink = _series(records, key)
                if values:
                    ax.plot(rounds if xaxis == "round" else uplink, values, marker=".", label=label)
                    drawn = True
            if not drawn:
                plt.close(fig)
                continue
            ax.set_xlabel("round" if xaxis == "round" else "cumulative uplink bytes")
            if xaxis == "uplink":
                ax.set_xscale("symlog")
            ax.set_ylabel(key)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
            path = out_dir / f"{key}_vs_{xaxis}.png"
            fig.tight_layout()
            fig.savefig(path, dpi=100)
            plt.close(fig)
            written.append(path)
    return written


def plot_run(run_dir: Path, records: Sequence[Mapping[str, Any]], metrics: Sequence[str]) -> list[Path]:
    """The plots/ folder of a single run."""
    return plot_curves({run_dir.name: records}, metrics, run_dir / "plots")
