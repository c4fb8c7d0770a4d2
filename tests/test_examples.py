"""The examples are Flower apps a Flower user recognises; each runs through ``flwr run``."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bouquet.apps.simulation import flower_env, flower_home, free_port, live_pids, pids_mentioning

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"
#: A printed metric value: a decimal or ``nan``/``inf`` (the latter two fail the finiteness check).
NUMBER = r"(?:[-+]?(?:\d+\.?\d*(?:[eE][-+]?\d+)?|nan|inf))"


def flwr_run(app: Path, nodes: int, timeout: float = 600) -> str:
    """``flwr run APP --stream`` in simulation with a private FLWR_HOME; return its output."""
    with flower_home() as home:
        copy = shutil.copytree(app, home / app.name)  # flwr may touch the app folder
        env = flower_env(home)
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(free_port())
        env["FLWR_LOCAL_CONTROL_API_PORT"] = str(free_port())
        # Ray is told of one CPU, so one actor process (torch and the app imported once) runs
        # every client in turn: about 4-8 s of CPU less per example than an actor per core
        # (benchmarks/RESULTS.md, perf-tests). Clients of one simulation running concurrently
        # are tested by tests/test_simulation.py (bouquet's app, an actor per core).
        cmd = [str(Path(sys.executable).parent / "flwr"), "run", str(copy), "--stream",
               "--federation-config",
               f"num-supernodes={nodes} client-resources-num-cpus=1 init-args-num-cpus=1"]
        proc = subprocess.run(cmd, cwd=home, env=env, timeout=timeout, check=False,
                              stdout=subprocess.PIPE, stderr=subprocess.STDOUT)
        out = proc.stdout.decode(errors="replace")
        assert proc.returncode == 0, out[-3000:]
    assert live_pids(pids_mentioning(str(home))) == []
    return out


def test_quickstart_fedavg_is_a_one_line_swap() -> None:
    app = EXAMPLES / "quickstart-fedavg"
    bouquet_lines = [ln for f in sorted(app.rglob("*.py")) for ln in f.read_text().splitlines()
                     if "bouquet" in ln and ln.startswith(("import", "from"))]
    assert bouquet_lines == ["from bouquet.strategies import FedAvg"]
    out = flwr_run(app, nodes=3)
    assert "quickstart-fedavg: round 3 eval_acc=" in out, out[-3000:]
    acc = float(out.split("quickstart-fedavg: round 3 eval_acc=")[1].split()[0])
    assert acc > 0.6
    assert "train_train_loss" not in out


def final_metrics(out: str, name: str) -> dict[int, dict[str, float]]:
    """The ``NAME: round R key=value ...`` lines a ServerApp printed, by round.

    Only whole metric lines count (a number after every ``=``): a traceback that quotes the
    app's ``print(f"NAME: round {rnd} ...")`` source must fail as a crash, with the output shown,
    not as a parse error.
    """
    assert "Traceback (most recent call last)" not in out, out[-4000:]
    line_re = re.compile(rf"{re.escape(name)}: round (\d+)((?:\s+\w+={NUMBER})+)\s*$")
    rounds: dict[int, dict[str, float]] = {}
    for line in out.splitlines():
        match = line_re.search(line)
        if match:
            pairs = (w.split("=", 1) for w in match.group(2).split())
            rounds[int(match.group(1))] = {k: float(v) for k, v in pairs}
    assert rounds, out[-4000:]
    for metrics in rounds.values():
        assert all(np.isfinite(v) for v in metrics.values()), rounds
    return rounds


#: (example folder, the strategy its ServerApp imports); each prints ``FOLDER: round R k=v ...``
EXAMPLE_APPS = [
    ("scafcom", "Scafcom"),
    ("fed-ef", "FedEF"),
    ("fedcg", "FedCG"),
    ("fedkseed", "FedKSeed"),
    ("lora", "FFALoRA"),
    ("bandits", "FedLinUCB"),
]
LEARNS = {"scafcom", "fed-ef", "fedcg"}


@pytest.mark.parametrize(("example", "strategy"), EXAMPLE_APPS, ids=[e[0] for e in EXAMPLE_APPS])
def test_example_runs_through_flwr_run(example: str, strategy: str) -> None:
    app = EXAMPLES / example
    server = next(app.glob("*/server_app.py")).read_text()
    assert f"from bouquet.strategies import {strategy}\n" in server
    assert "flwr.serverapp.strategy import FedAvg" in server  # the one-line swap is said
    assert "flwr run" in (app / "README.md").read_text()
    rounds = final_metrics(flwr_run(app, nodes=2), example)
    print(example, rounds)  # shown with pytest -s
    if example in LEARNS:
        first, last = rounds[min(rounds)], rounds[max(rounds)]
        assert max(rounds) > min(rounds)
        assert last["eval_loss"] < first["eval_loss"] and last["eval_acc"] > 0.3, rounds
