"""Checks of a benchmark against a paper's predictions, in one machine-readable format.

A suite's ``report`` builds :class:`Check` values, puts their :meth:`Check.markdown` lines in its
text, and writes them with :func:`write_checks` to ``DIR/verdicts.json``::

    {"suite": "robust",
     "checks": [{"claim": "the robust rules cost at most 0.05 without a rogue",
                 "verdict": "holds", "measured": "0.883, 0.885"}]}

``bouquet report`` shows them. ``verdict`` is one of :data:`VERDICTS`.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from pathlib import Path

HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED = "holds", "does not hold", "inconclusive", "not measured"
VERDICTS = (HOLDS, FAILS, INCONCLUSIVE, NOT_MEASURED)
FILENAME = "verdicts.json"


@dataclasses.dataclass(frozen=True)
class Check:
    """One prediction, what was measured, and whether the prediction holds.

    Attributes
    ----------
    claim : str
        The prediction, as the paper (or the suite's docstring) states it.
    verdict : str
        One of :data:`VERDICTS`.
    measured : str
        The numbers behind the verdict (free text).

    """

    claim: str
    verdict: str
    measured: str = ""

    def __post_init__(self) -> None:
        if self.verdict not in VERDICTS:
            raise ValueError(f"verdict must be one of {VERDICTS}, got {self.verdict!r}")

    @classmethod
    def of(cls, claim: str, ok: bool | None, measured: str = "") -> Check:
        """A check whose verdict is ``holds`` / ``does not hold`` (``not measured`` for None)."""
        return cls(claim, NOT_MEASURED if ok is None else HOLDS if ok else FAILS, measured)

    def markdown(self) -> str:
        """``- claim: measured -> holds`` (a verdict other than "holds" in bold)."""
        mark = self.verdict if self.verdict == HOLDS else f"**{self.verdict}**"
        return f"- {self.claim}: {mark}" + (f" ({self.measured})" if self.measured else "")


def write_checks(out_dir: Path, suite: str, checks: Sequence[Check]) -> Path:
    """Write ``out_dir/verdicts.json``; return its path."""
    path = out_dir / FILENAME
    data = {"suite": suite, "checks": [dataclasses.asdict(c) for c in checks]}
    path.write_text(json.dumps(data, indent=1) + "\n")
    return path


def read_checks(folder: Path) -> tuple[str, list[Check]] | None:
    """The suite name and checks of ``folder/verdicts.json`` (None if there is none)."""
    path = folder / FILENAME
    if not path.is_file():
        return None
    data = json.loads(path.read_text())
    checks = [Check(str(c["claim"]), str(c["verdict"]), str(c.get("measured", "")))
              for c in data.get("checks", [])]
    return str(data.get("suite", "")), checks
