"""What a stopped run prints and writes: nothing claimed before round 1, the right resume command."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from flwr.app import ConfigRecord
from flwr.supercore.run import Run

from bouquet.apps.cli import build_parser, main
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import execute, resume_hint, stop_message
from bouquet.strategies.directory import NotEnoughNodes


class LeavingGrid(LocalGrid):
    """A grid whose node 1 goes offline before round 2 (so the run stops after round 1).

    ``task_type`` is what Flower's run object says: ``flwr-serverapp`` on a SuperLink.
    """

    def __init__(self, num_nodes: int, run_config: dict[str, Any], task_type: str | None) -> None:
        super().__init__(num_nodes, run_config)
        self.task_type = task_type

    @property
    def run(self) -> Run:
        run = super().run
        if self.task_type is not None:  # None: the in-process grid's own
            run.primary_task_type = self.task_type
        return run

    def push_messages(self, messages: Any) -> Any:
        messages = list(messages)
        for m in messages:
            cfg = m.content.get("config") if "config" in m.content else None
            if isinstance(cfg, ConfigRecord) and cfg.get("server-round") == 1:
                self.offline.add(1001)
        return super().push_messages(messages)


def stopped_run(tmp_path: Path, task_type: str | None) -> dict[str, Any]:
    cfg = {"method": "fedavg", "results-dir": str(tmp_path), "run-name": "r",
           "num-server-rounds": 2, "min-train-nodes": 2, "sample-deadline": 0.5,
           "local-steps": 1, "fraction-train": 1.0}
    grid = LeavingGrid(2, cfg, task_type)
    with pytest.raises(NotEnoughNodes):
        execute(grid, grid.run_config)
    return dict(json.loads((tmp_path / "r" / "summary.json").read_text())["stopped"])


def test_stop_before_round_1_says_nothing_was_saved() -> None:
    text = stop_message(NotEnoughNodes("only 1 node(s) online"), 0, Path("/runs/x"), "rerun")
    assert "Nothing was saved yet" in text and "Rounds 1-0" not in text
    assert "checkpoint of round" not in text


def test_stop_after_rounds_names_the_saved_rounds() -> None:
    text = stop_message(NotEnoughNodes("gone"), 2, Path("/runs/x"), "HINT")
    assert "STOPPED before round 3" in text and "Rounds 1-2 are saved" in text
    assert "checkpoint of round 2 in /runs/x/checkpoint" in text and text.endswith("HINT")
    assert "Round 1 is saved" in stop_message(NotEnoughNodes("gone"), 1, Path("/r"), "H")


def test_resume_hint_of_a_deployment_is_the_deployment_command() -> None:
    deployed = resume_hint(Path("/runs/x"), deployment=True)
    assert deployed.startswith("flwr run <app-dir> <connection>")
    assert "resume-from='/runs/x'" in deployed and "bouquet deploy-local --resume /runs/x" in deployed
    assert "bouquet run " not in deployed
    assert resume_hint(Path("/runs/x"), deployment=False).startswith("bouquet run --resume /runs/x")


@pytest.mark.parametrize(("task_type", "command"), [
    ("flwr-serverapp", "flwr run <app-dir> <connection>"),
    ("flwr-simulation", "bouquet run --resume"),
    (None, "bouquet run --resume"),  # bouquet run --engine inprocess
])
def test_a_stopped_run_writes_the_resume_command_of_its_engine(
        task_type: str | None, command: str, tmp_path: Path,
        capsys: pytest.CaptureFixture[str]) -> None:
    stopped = stopped_run(tmp_path, task_type)
    assert stopped["after_round"] == 1 and stopped["resume"].startswith(command)
    out = capsys.readouterr().out
    assert "Round 1 is saved" in out and command in out


def test_cli_says_a_rerun_starts_from_round_1(tmp_path: Path,
                                              capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "fedavg", "--engine", "inprocess", "--clients", "1", "--rounds", "1",
                 "--results-dir", str(tmp_path), "--set", "min-train-nodes=2",
                 "--set", "sample-deadline=0.2"]) == 1
    captured = capsys.readouterr()
    assert "run stopped before round 1" in captured.err
    assert "starts from round 1" in captured.err and "after round 0" not in captured.err
    assert "Nothing was saved yet" in captured.out


def test_deploy_local_takes_the_resume_it_prints() -> None:
    args = build_parser().parse_args(["deploy-local", "--resume", "/runs/x"])
    assert args.resume == "/runs/x"



def test_deploy_local_node_state_outlives_the_fleet_for_a_resume(tmp_path: Path) -> None:
    """``deploy-local --resume`` starts a new fleet (a new temporary folder): the nodes' state
    (accountants, control variates) must be where the first fleet left it, beside the runs."""
    from bouquet.apps.deploy import LocalFleet, fleet_state_root

    results = tmp_path / "results"
    first = fleet_state_root({"results-dir": str(results)})
    again = fleet_state_root({"resume-from": str(results / "scafcom-digits-mlp-s0-20261201")})
    assert first == again == (results / "fleet-state").resolve()
    fleet = LocalFleet(2, workdir=tmp_path / "fleet", state_root=first)
    assert fleet.state_dir(1) == first / "state-node1"
    assert not fleet.state_dir(1).is_relative_to(fleet.dir)  # removed with the fleet otherwise


def test_a_stopped_run_closes_its_progress_display(tmp_path: Path,
                                                   monkeypatch: pytest.MonkeyPatch) -> None:
    """A live bar left running would keep the terminal's cursor hidden after the stop."""
    from bouquet.apps import progress, runner

    closed: list[int] = []

    class Recording(progress.RunProgress):
        def close(self) -> None:
            closed.append(1)
            super().close()

    monkeypatch.setattr(runner, "RunProgress", Recording)
    stopped_run(tmp_path, None)
    assert closed
