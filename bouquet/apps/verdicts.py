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
import math
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


@dataclasses.dataclass(frozen=True)
class PairedChange:
    """The change of a per-row metric between two models evaluated on the same rows.

    Attributes
    ----------
    mean : float
        Mean over rows of ``after - before``.
    se : float
        Standard error of that mean: the sample standard deviation of the per-row differences
        over ``sqrt(n)``. Pairing removes the rows' own difficulty from the noise, so a small
        but consistent change is resolved where two unpaired means are not.
    n : int
        Number of rows.

    """

    mean: float
    se: float
    n: int

    def describe(self, name: str, z: float = 2.0) -> str:
        """``loss change -0.0123 +- 0.0040 (z SE, n rows)`` for a check's ``measured`` text."""
        return (f"{name} change {self.mean:+.4f} +- {z * self.se:.4f} ({z:g} paired SE, "
                f"{self.n} rows)")


def paired_change(before: Sequence[float], after: Sequence[float]) -> PairedChange:
    """Mean and standard error of the per-row differences ``after - before``.

    Raises
    ------
    ValueError
        If the two sequences differ in length (the rows must be the same rows).

    """
    if len(before) != len(after):
        raise ValueError(f"paired rows differ in number: {len(before)} vs {len(after)}")
    diffs = [float(a) - float(b) for a, b in zip(after, before, strict=True)]
    n = len(diffs)
    mean = sum(diffs) / n if n else 0.0
    var = sum((d - mean) ** 2 for d in diffs) / (n - 1) if n > 1 else 0.0
    return PairedChange(mean, math.sqrt(var / n) if n else 0.0, n)


def improvement_check(claim: str, change: PairedChange | None, *, lower_is_better: bool,
                      z: float = 2.0, name: str = "loss") -> Check:
    """``holds`` when the paired change improves by more than ``z`` standard errors.

    ``does not hold`` when it worsens by more than ``z`` standard errors, ``inconclusive`` in
    between (also for no change at all), ``not measured`` without a change or with fewer than two
    rows (no standard error).
    """
    if change is None or change.n < 2:
        return Check(claim, NOT_MEASURED, "" if change is None else f"{change.n} row(s)")
    gain = -change.mean if lower_is_better else change.mean
    measured = change.describe(name, z)
    if gain > z * change.se and gain > 0:
        return Check(claim, HOLDS, measured)
    if -gain > z * change.se and gain < 0:
        return Check(claim, FAILS, measured)
    return Check(claim, INCONCLUSIVE, measured)


def sign_counts(before: Sequence[float], after: Sequence[float]) -> tuple[int, int]:
    """How many paired 0/1 rows turned from 0 to 1 (``gained``) and from 1 to 0 (``lost``).

    Raises
    ------
    ValueError
        If the two sequences differ in length, or a value is not 0 or 1.

    """
    if len(before) != len(after):
        raise ValueError(f"paired rows differ in number: {len(before)} vs {len(after)}")
    pairs = [(float(b), float(a)) for b, a in zip(before, after, strict=True)]
    if any(v not in (0.0, 1.0) for pair in pairs for v in pair):
        raise ValueError("a sign test needs 0/1 rows")
    return sum(1 for b, a in pairs if a > b), sum(1 for b, a in pairs if a < b)


def sign_test_p(gained: int, lost: int) -> float:
    """Two-sided p value of the exact sign (McNemar) test: 1 when no row changed."""
    if not gained + lost:
        return 1.0
    from scipy.stats import binomtest  # only a report needs scipy here

    return float(binomtest(gained, gained + lost, 0.5).pvalue)


def sign_test_check(claim: str, before: Sequence[float], after: Sequence[float], *,
                    z: float = 2.0, name: str = "accuracy") -> Check:
    """Exact two-sided sign (McNemar) test of a per-row 0/1 metric, e.g. correctness.

    Only the rows whose value changed carry evidence; with few of them the normal approximation
    behind :func:`improvement_check` is too lenient (4 of 400 rows turning right and none wrong
    is 2 paired standard errors, but p = 0.125 exactly). The level is that of ``z`` standard
    errors of a normal test (0.0455 for ``z = 2``), so both verdicts use one threshold.
    ``holds`` when more rows turn right than wrong at that level, ``does not hold`` for the
    reverse, ``inconclusive`` otherwise (also when no row changed), ``not measured`` for fewer
    than two rows.

    Raises
    ------
    ValueError
        If the two sequences differ in length, or a value is not 0 or 1.

    """
    if len(before) != len(after):
        raise ValueError(f"paired rows differ in number: {len(before)} vs {len(after)}")
    if len(before) < 2:
        return Check(claim, NOT_MEASURED, f"{len(before)} row(s)")
    try:
        gained, lost = sign_counts(before, after)
    except ValueError as exc:
        raise ValueError(f"{name}: {exc}") from exc
    level = math.erfc(z / math.sqrt(2.0))
    p_value = sign_test_p(gained, lost)
    measured = (f"{name} change {(gained - lost) / len(before):+.4f}: {gained} rows turned right, "
                f"{lost} wrong, of {len(before)}; exact sign test p = {p_value:.3g} "
                f"(level {level:.4f}, as {z:g} SE)")
    if p_value < level:
        return Check(claim, HOLDS if gained > lost else FAILS, measured)
    return Check(claim, INCONCLUSIVE, measured)


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
