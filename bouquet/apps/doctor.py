"""``bouquet doctor``: can this machine serve a method (and its task), and if not, what to install.

On a node (the default) it checks, in order, stopping at the first failure: the packages of the
method's extra (from this package's own metadata), that the strategy and the client procedure
import, that the task imports, that the task's packaged data/model files are installed (its
``require()``), and that the task's data and initial model actually load (offline, as the
node's first hello would). With ``--server`` it checks what a server needs (the base install and
the strategy) and reports whether the task is usable there: without it a run still works, with
the initial model from a node and federated evaluation.

Without a method it lists every extra and what of it is missing. Every failure is printed with
the command that installs what is missing; the exit status is 1 when a needed check failed.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from importlib import metadata
from typing import Any

from bouquet.apps.registry import Method, RegistryError, TaskSpec, get_method, get_task, methods

DIST = "flwr-bouquet"


@dataclasses.dataclass
class Check:
    """One line of the report: ``status`` is OK, MISSING, NOTE or SKIPPED."""

    status: str
    what: str
    detail: str = ""

    def line(self) -> str:
        """The printed line."""
        return f"  {self.status:<8} {self.what}" + (f": {self.detail}" if self.detail else "")


def install_hint(extra: str) -> str:
    """The pip command for an extra of this project ("" for the base install)."""
    return f'pip install "{DIST}[{extra}]"' if extra else f"pip install {DIST}"


def extra_requirements(extra: str) -> list[Any]:
    """Requirements (``packaging`` objects) of ``extra`` plus the base ones, self-references expanded."""
    from packaging.requirements import Requirement

    reqs = [Requirement(r) for r in metadata.requires(DIST) or []]
    out = [r for r in reqs if r.marker is None]
    todo, seen = ([extra] if extra else []), set()
    while todo:
        e = todo.pop()
        if e in seen:
            continue
        seen.add(e)
        for r in reqs:
            if r.marker is not None and r.marker.evaluate({"extra": e}):
                if r.name == DIST:
                    todo += sorted(r.extras)
                else:
                    out.append(r)
    return out


def missing_packages(extra: str) -> list[str]:
    """``["scattertext==0.2.1 (not installed)", ...]`` for the requirements of ``extra``."""
    missing = []
    for r in {str(r): r for r in extra_requirements(extra)}.values():
        try:
            have = metadata.version(r.name)
        except metadata.PackageNotFoundError:
            missing.append(f"{r.name}{r.specifier} (not installed)")
            continue
        if r.specifier and not r.specifier.contains(have, prereleases=True):
            missing.append(f"{r.name}{r.specifier} (have {have})")
    return sorted(missing)


def package_check(extra: str) -> Check:
    """Whether every package of ``extra`` is installed at a version it allows."""
    label = f"packages of {DIST}[{extra}]" if extra else f"packages of {DIST}"
    try:
        missing = missing_packages(extra)
    except metadata.PackageNotFoundError:
        return Check("NOTE", label, f"{DIST} is not installed as a package (a source tree on "
                                    "PYTHONPATH?); package versions not checked")
    if missing:
        return Check("MISSING", label, f"{', '.join(missing)}; install: {install_hint(extra)}")
    return Check("OK", label)


def attempt(what: str, fn: Callable[[], Any], hint: str = "") -> tuple[Check, Any]:
    """Run ``fn``; OK with the time taken, or MISSING with the error (and ``hint``)."""
    t0 = time.monotonic()
    try:
        value = fn()
    except Exception as exc:
        text = f"{type(exc).__name__}: {exc}"
        if hint and "pip install" not in text:
            text += f"; install: {hint}"
        return Check("MISSING", what, text), None
    return Check("OK", what, f"{time.monotonic() - t0:.1f}s"), value


def task_checks(spec: TaskSpec, extra: str) -> list[Check]:
    """Import the task, check its packaged files, load its data and initial model (a node's view)."""
    from bouquet.apps.config import resolve

    hint = install_hint(spec.extra or extra)
    check, task = attempt(f"task {spec.name} imports", spec.load, hint)
    out = [check]
    if task is None:
        return out
    if hasattr(task, "require"):
        out.append(attempt(f"task {spec.name} data/model packages", task.require, hint)[0])
        if out[-1].status != "OK":
            return out
    common = resolve({"task": spec.name}).common
    if hasattr(task, "num_examples"):
        check, n = attempt(f"task {spec.name} data loads",
                           lambda: task.num_examples(0, 2, common), hint)
        if n is not None:
            check.detail += f", {n} examples in partition 0 of 2"
        out.append(check)
    if hasattr(task, "initial_arrays") and out[-1].status == "OK":
        check, arrays = attempt(f"task {spec.name} model loads",
                                lambda: task.initial_arrays(common.seed), hint)
        if arrays is not None:
            check.detail += f", {sum(int(a.size) for a in arrays.values()):,} parameters"
        out.append(check)
    return out


def method_checks(method: Method, spec: TaskSpec, server: bool) -> list[Check]:
    """The checks of ``bouquet doctor METHOD`` (see the module docstring)."""
    out = [package_check("" if server else method.extra)]
    out.append(attempt(f"strategy {method.strategy} imports", method.load_strategy_factory,
                       install_hint("" if server else method.extra))[0])
    if server:
        node = task_checks(spec, method.extra)[:2]  # import + packaged files: no loading
        if all(c.status == "OK" for c in node):
            out.append(Check("OK", f"task {spec.name} is usable on this server",
                             "central evaluation possible"))
        else:
            why = next(c for c in node if c.status != "OK").detail
            out.append(Check("NOTE", f"task {spec.name} is not usable on this server",
                             f"{why}. Runs still work: the initial model comes from a node and "
                             f"evaluation is federated; for central evaluation: "
                             f"{install_hint(spec.extra or method.extra)}"))
        return out
    out.append(attempt(f"client procedure {method.client} imports", method.load_client,
                       install_hint(method.extra))[0])
    if any(c.status == "MISSING" for c in out):
        out.append(Check("SKIPPED", f"task {spec.name}", "fix the lines above first"))
        return out
    return out + task_checks(spec, method.extra)


def extras_overview() -> list[Check]:
    """One package check per extra a method names (``bouquet doctor`` without a method)."""
    extras = sorted({m.extra for m in methods().values() if m.extra} | {""})
    return [package_check(e) for e in extras]


def run(method_name: str | None, task_name: str | None, server: bool,
        say: Callable[[str], None] = print) -> int:
    """Print the report; 0 when everything needed is there, 1 otherwise."""
    if not method_name:
        say("bouquet doctor: the extras installed here (bouquet doctor METHOD checks one fully)")
        for c in extras_overview():
            say(c.line())
        return 0
    try:
        method = get_method(method_name)
        spec = get_task(task_name or method.default_task)
    except RegistryError as exc:
        say(f"bouquet doctor: {exc}")
        return 2
    role = "server" if server else "node"
    say(f"bouquet doctor: {method.name} on {spec.name} ({role})")
    checks = method_checks(method, spec, server)
    for c in checks:
        say(c.line())
    bad = [c for c in checks if c.status in ("MISSING", "SKIPPED")]
    say("everything needed is there" if not bad else f"{len(bad)} problem(s); install what the "
        "MISSING lines say, then run bouquet doctor again")
    return 1 if bad else 0
