"""Every command README.md and docs/ show is checked, so that none can rot.

Commands are taken from fenced code blocks and from inline code spans: ``bouquet ...`` (parsed by
the real CLI parser, with its methods, tasks, suites and ``--set`` keys resolved), ``flwr run``
(the app folder exists, or the same page writes it with ``write_app``; ``--run-config`` keys
resolve), ``make`` (the target is in the Makefile) and ``python -m`` (the module is found).
Placeholders (``METHOD``, ``DIR``, ``<app-dir>``, ``key=value``, ``...``, ``[--task T]``) are
left unchecked; everything around them is checked.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import re
import shlex
from pathlib import Path

import pytest
from flwr.common.config import parse_config_args

from bouquet.apps.bench import suite_path
from bouquet.apps.cli import build_parser, parse_sets
from bouquet.apps.config import ConfigError, resolve
from bouquet.apps.registry import get_method, get_task

ROOT = Path(__file__).resolve().parents[1]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
FENCE = re.compile(r"^\s*```")
INLINE = re.compile(r"`([^`\n]+)`")
STARTS = re.compile(r"^(bouquet |flwr run |make |python3? -m )")
PLACEHOLDER = re.compile(r"^(\.\.\.|[A-Z][A-Z_]*|<[^>]*>|key|KEY=VALUE|key=value.*)$")
#: Commands a page shows as mistakes that are refused (the check is that they are).
SHOWN_AS_REFUSED = {"bouquet run scafcom --set dp.enabled=true"}


@dataclasses.dataclass(frozen=True)
class Shown:
    """A command as a page shows it."""

    page: Path
    line: int
    text: str

    def __str__(self) -> str:
        return f"{self.page.relative_to(ROOT)}:{self.line}: {self.text}"


def commands_of(page: Path) -> list[Shown]:
    """The commands of ``page``: code-block lines (``\\`` continuations joined) and inline spans."""
    found: list[Shown] = []
    inside, pending, start = False, "", 0
    for number, line in enumerate(page.read_text().splitlines(), 1):
        if FENCE.match(line):
            inside, pending = not inside, ""
            continue
        if inside:
            text = line.strip()
            text = text[2:] if text.startswith("$ ") else text
            start = start if pending else number
            pending = f"{pending} {text}".strip()
            if pending.endswith("\\"):
                pending = pending[:-1].rstrip()
                continue
            if STARTS.match(pending):
                found.append(Shown(page, start, pending))
            pending = ""
        else:
            found += [Shown(page, number, m.group(1).strip()) for m in INLINE.finditer(line)
                      if STARTS.match(m.group(1).strip())]
    return found


SHOWN = [c for page in PAGES for c in commands_of(page)]


def words(text: str) -> list[str]:
    """Shell words without comments, brackets of optional parts, or a trailing ``&&`` chain."""
    out = shlex.split(text.replace("[", " ").replace("]", " "), comments=True)
    return out[:out.index("&&")] if "&&" in out else out


def is_placeholder(word: str) -> bool:
    return bool(PLACEHOLDER.match(word)) or "..." in word


def check_bouquet(argv: list[str], shown: Shown) -> None:
    """Parse with the real parser; resolve the method, task, suite and ``--set`` keys named."""
    argv = [w for w in argv if w != "..."]
    try:
        args = build_parser().parse_args(argv)
    except SystemExit as exc:
        raise AssertionError(f"the bouquet parser refuses it: {shown}") from exc
    method = getattr(args, "method", None)
    if method and f'name="{method}"' in shown.page.read_text():
        return  # a plugin the page itself declares (installed separately): parsing is the check
    if method and not is_placeholder(method):
        get_method(method)
    task = getattr(args, "task", None)
    if isinstance(task, str) and not is_placeholder(task):
        get_task(task)
    if args.command == "bench" and not is_placeholder(args.suite):
        suite_path(args.suite, ROOT)
    sets = [s for s in getattr(args, "set", None) or [] if not is_placeholder(s)
            and not is_placeholder(s.partition("=")[2])]
    if sets:
        overrides = parse_sets(sets)
        if method and not is_placeholder(method):
            overrides["method"] = method
        resolve(overrides, list(overrides))


def app_dir_exists(name: str, page: Path) -> bool:
    """The folder is a Flower App here, or the page writes it (``write_app(Path('<name>'))``)."""
    folder = ROOT / name
    if (folder / "pyproject.toml").is_file() and \
            "[tool.flwr.app]" in (folder / "pyproject.toml").read_text():
        return True
    return f"write_app(Path('{name}'))" in page.read_text()


def check_flwr_run(argv: list[str], shown: Shown) -> None:
    """The app folder exists (or is written on the page); the ``--run-config`` keys resolve."""
    app = argv[2] if len(argv) > 2 else ""
    if app and not app.startswith("-") and not is_placeholder(app):
        assert app_dir_exists(app, shown.page), f"no Flower App {app!r}: {shown}"
    if "--run-config" in argv:
        text = argv[argv.index("--run-config") + 1]
        if "..." not in text and "key=value" not in text:
            run_config = parse_config_args([text])
            resolve(run_config, list(run_config))


def make_targets() -> set[str]:
    return set(re.findall(r"^([A-Za-z][\w.-]*):", (ROOT / "Makefile").read_text(), re.M))


def check(shown: Shown) -> None:
    argv = words(shown.text)
    if argv[0] == "bouquet":
        check_bouquet(argv[1:], shown)
    elif argv[:2] == ["flwr", "run"]:
        check_flwr_run(argv, shown)
    elif argv[0] == "make":
        missing = [t for t in argv[1:] if not t.startswith("-") and t not in make_targets()]
        assert not missing, f"no Makefile target {missing}: {shown}"
    else:  # python -m MODULE
        module = argv[2]
        assert importlib.util.find_spec(module) is not None, f"no module {module}: {shown}"


def test_the_pages_show_commands_of_every_kind() -> None:
    """The extraction works: each kind the pages use is found (README's own commands first)."""
    kinds = {words(c.text)[0] + (" run" if c.text.startswith("flwr") else "") for c in SHOWN}
    assert {"bouquet", "flwr run", "make", "python", "python3"} <= kinds
    readme = [c.text for c in SHOWN if c.page.name == "README.md"]
    assert any(t.startswith("make demo") for t in readme)


@pytest.mark.parametrize("shown", SHOWN, ids=str)
def test_shown_command_works(shown: Shown) -> None:
    if shown.text in SHOWN_AS_REFUSED:
        with pytest.raises(ConfigError):
            check(shown)
    else:
        check(shown)


def test_a_rotten_command_is_caught(tmp_path: Path) -> None:
    """The checks can fail: the option the scafcom page once showed, and other rot."""
    page = tmp_path / "page.md"
    page.write_text("Run `bouquet run scafcom --run-config \"scafcom.beta=0.2\"`.\n\n```bash\n"
                    "make no-such-target\nbouquet run no-such-method\n"
                    "bouquet run fedavg --set no-such-key=1\npython -m bouquet.no_such_module\n"
                    "flwr run no-such-app --stream\n```\n")
    shown = commands_of(page)
    assert len(shown) == 6
    for c in shown:
        with pytest.raises(Exception):  # noqa: B017 - every kind of refusal counts
            check(c)
