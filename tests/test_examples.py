"""The examples are Flower apps a Flower user recognises; each runs through ``flwr run``."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from bouquet.apps.simulation import flower_env, flower_home, free_port, live_pids, pids_mentioning

pytestmark = pytest.mark.slow

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def flwr_run(app: Path, nodes: int, timeout: float = 600) -> str:
    """``flwr run APP --stream`` in simulation with a private FLWR_HOME; return its output."""
    with flower_home() as home:
        copy = shutil.copytree(app, home / app.name)  # flwr may touch the app folder
        env = flower_env(home)
        env["FLWR_LOCAL_SUPERLINK_HTTP_API_PORT"] = str(free_port())
        env["FLWR_LOCAL_CONTROL_API_PORT"] = str(free_port())
        cmd = [str(Path(sys.executable).parent / "flwr"), "run", str(copy), "--stream",
               "--federation-config",
               f"num-supernodes={nodes} client-resources-num-cpus=1"]
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
