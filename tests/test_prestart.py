"""Mistakes that can be found before start-up are one line, ``bouquet: error: ...``, exit 2."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from importlib import metadata
from pathlib import Path
from typing import Any

import pytest

from bouquet.apps.cli import main
from bouquet.apps.config import ConfigError
from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.prestart import StartupError, check_engine, check_writable
from bouquet.apps.runner import execute

ROOT = Path(__file__).resolve().parents[1]


def one_error_line(err: str, *needles: str) -> None:
    lines = [x for x in err.splitlines() if x.strip()]
    assert len(lines) == 1 and lines[0].startswith("bouquet: error: "), err
    assert "Traceback" not in err and all(n in lines[0] for n in needles), err


def blocked_folder(tmp_path: Path) -> Path:
    """A folder that cannot be created, even by root: its parent is a file."""
    (tmp_path / "a-file").write_text("")
    return tmp_path / "a-file" / "results"


def test_unwritable_results_dir_is_one_line_from_the_command(tmp_path: Path) -> None:
    """Through the real command (a subprocess): no traceback, exit 2, before any start-up."""
    proc = subprocess.run(
        [sys.executable, "-m", "bouquet.apps.cli", "run", "fedavg", "--rounds", "1",
         "--results-dir", str(blocked_folder(tmp_path))],
        capture_output=True, text=True, timeout=300, cwd=tmp_path,
        env={**__import__("os").environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 2
    one_error_line(proc.stderr, "results-dir: cannot create", str(blocked_folder(tmp_path)))
    assert proc.stdout == ""


def test_the_server_refuses_an_unwritable_results_dir_before_any_message(tmp_path: Path) -> None:
    grid = LocalGrid(2, {"method": "fedavg", "results-dir": str(blocked_folder(tmp_path)),
                         "num-server-rounds": 1})
    with pytest.raises(ConfigError, match="results-dir: cannot create"):
        execute(grid, grid.run_config)
    assert grid.sent == []


def test_probe_file_is_removed_and_a_read_only_folder_is_named(tmp_path: Path,
                                                                monkeypatch: pytest.MonkeyPatch
                                                                ) -> None:
    check_writable(tmp_path / "new" / "deep")
    assert (tmp_path / "new" / "deep").is_dir() and not list((tmp_path / "new" / "deep").iterdir())

    def refuse(*a: Any, **k: Any) -> Any:
        raise PermissionError(13, "Permission denied")

    monkeypatch.setattr("tempfile.NamedTemporaryFile", refuse)
    with pytest.raises(ConfigError, match=r"results-dir: cannot write in .*Permission denied"):
        check_writable(tmp_path)


@pytest.mark.parametrize(("args", "needles"), [
    (["run", "no-such-method"], ("no-such-method",)),
    (["run", "fedavg", "--set", "no-such-key=1"], ("no-such-key",)),
    (["run", "fedavg", "--set", "preset=no-such-preset"], ("no-such-preset",)),
    (["run", "fedavg", "--set", "task=no-such-task"], ("no-such-task",)),
    (["run", "--resume", "/no/such/run"], ("resume-from", "/no/such/run")),
])
def test_unknown_names_are_one_line(args: list[str], needles: tuple[str, ...], tmp_path: Path,
                                    capsys: pytest.CaptureFixture[str]) -> None:
    assert main([*args, "--engine", "inprocess", "--results-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, *needles)


def test_missing_extra_of_the_method_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                 capsys: pytest.CaptureFixture[str]) -> None:
    real = metadata.version

    def version(name: str) -> str:
        if name == "torch":
            raise metadata.PackageNotFoundError(name)
        return real(name)

    monkeypatch.setattr(metadata, "version", version)
    assert main(["run", "scafcom", "--engine", "inprocess", "--results-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, "needs torch", 'pip install "flwr-bouquet[scafcom]"')
    assert not list(tmp_path.iterdir())


def test_missing_data_files_are_one_line(no_rt_data: None, tmp_path: Path,
                                         capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["run", "fedit", "--engine", "inprocess", "--set", "task=tiny-bert-cls",
                 "--results-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, "Rotten Tomatoes", 'pip install "flwr-bouquet[lora]"')


def test_simulation_without_ray_is_one_line(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                            capsys: pytest.CaptureFixture[str]) -> None:
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "ray" else real(name, *a))
    with pytest.raises(StartupError, match="needs Ray"):
        check_engine("simulation")
    check_engine("inprocess")
    assert main(["run", "fedavg", "--results-dir", str(tmp_path)]) == 2
    one_error_line(capsys.readouterr().err, "needs Ray", "--engine inprocess")
