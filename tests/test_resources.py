"""Packaged data/model files: the extras bring them, and a missing one is named with its pip command."""

from __future__ import annotations

import tomllib
from pathlib import Path

import pytest

from bouquet.apps.local_grid import LocalGrid
from bouquet.apps.runner import execute
from bouquet.strategies.base import NotEnoughNodes
from bouquet.tasks import resources

ROOT = Path(__file__).resolve().parents[1]
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


@pytest.mark.parametrize("res", resources.ALL, ids=lambda r: r.module)
def test_install_hints_match_the_extras(res: resources.PackagedFiles) -> None:
    if res.extra:  # the extra named in the hint really pins this requirement
        assert res.requirement in EXTRAS[res.extra]
    else:  # not in any extra: the README documents the one-line command instead
        assert all(res.requirement not in reqs for reqs in EXTRAS.values())
        assert res.install.split("  (")[0] in (ROOT / "README.md").read_text()


def test_default_text_tasks_are_in_both_text_extras() -> None:
    for extra in ("lora", "fedkseed"):
        for res in (resources.ROTTEN_TOMATOES, resources.MINILM):
            assert res.requirement in EXTRAS[extra]


def test_missing_package_raises_one_line_with_the_command() -> None:
    res = resources.PackagedFiles("the widgets", "no_such_module_xyz", "widgets==1.0")
    with pytest.raises(ImportError) as info:
        res.folder("some-task")
    msg = str(info.value)
    assert msg == ("some-task needs the widgets (widgets==1.0), which is not installed: "
                   "pip install widgets==1.0")
    assert "\n" not in msg and info.value.name == "no_such_module_xyz"


def test_run_without_the_rt_wheel_stops_naming_it(no_rt_data: None, tmp_path: Path,
                                                   capsys: pytest.CaptureFixture[str]) -> None:
    """The issue's case: nodes lack the data wheel; the stop message says what to install."""
    grid = LocalGrid(2, {"method": "fedit", "task": "tiny-bert-cls", "results-dir": str(tmp_path),
                         "run-name": "r", "sample-deadline": 0.5, "num-server-rounds": 1})
    with pytest.raises(NotEnoughNodes) as info:
        execute(grid, grid.run_config)
    msg = str(info.value)
    assert "2 of 2 node(s) failed the" in msg
    assert "ImportError: tiny-bert-cls needs the Rotten Tomatoes snippets" in msg
    assert 'pip install "flwr-bouquet[lora]"' in msg
    # the server (it has torch, not the wheel) says the same line about itself
    assert "not usable on the server (tiny-bert-cls needs" in capsys.readouterr().out
