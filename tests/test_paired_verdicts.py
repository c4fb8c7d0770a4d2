"""Paired per-row comparisons and their verdicts (bouquet.apps.verdicts; issue 14, item 1)."""

from __future__ import annotations

import math

import pytest

from bouquet.apps.verdicts import (
    FAILS,
    HOLDS,
    INCONCLUSIVE,
    NOT_MEASURED,
    PairedChange,
    improvement_check,
    paired_change,
    sign_test_check,
)


def test_paired_change_is_the_mean_and_standard_error_of_the_row_differences() -> None:
    change = paired_change([1.0, 2.0, 3.0, 4.0], [0.5, 2.0, 2.0, 4.5])
    diffs = [-0.5, 0.0, -1.0, 0.5]
    mean = sum(diffs) / 4
    sd = math.sqrt(sum((d - mean) ** 2 for d in diffs) / 3)
    assert change == PairedChange(mean, pytest.approx(sd / 2), 4)


def test_pairing_resolves_a_small_consistent_change_that_varied_rows_would_hide() -> None:
    # rows of very different difficulty, each 0.01 easier afterwards: the unpaired standard
    # error of the two means (~0.2) swamps 0.01, the paired one (rows' own spread removed) does not
    before = [0.1 + 0.05 * i for i in range(40)]
    after = [b - 0.01 + (0.001 if i % 2 else -0.001) for i, b in enumerate(before)]
    change = paired_change(before, after)
    assert change.mean == pytest.approx(-0.01)
    assert change.se < 0.001
    check = improvement_check("loss falls", change, lower_is_better=True)
    assert check.verdict == HOLDS
    assert "-0.0100" in check.measured and "40 rows" in check.measured


def test_a_change_within_two_standard_errors_is_inconclusive_and_a_worsening_fails() -> None:
    noisy = paired_change([0.5] * 4, [0.4, 0.6, 0.45, 0.58])  # mean +0.0075, se ~0.05
    assert improvement_check("c", noisy, lower_is_better=True).verdict == INCONCLUSIVE
    worse = paired_change([0.5] * 4, [0.6, 0.61, 0.59, 0.6])
    assert improvement_check("c", worse, lower_is_better=True).verdict == FAILS
    # the same rows read as accuracy (higher is better): a rise holds
    assert improvement_check("c", worse, lower_is_better=False).verdict == HOLDS


def test_no_change_is_inconclusive_and_too_few_rows_are_not_measured() -> None:
    assert improvement_check("c", paired_change([1, 0, 1], [1, 0, 1]),
                             lower_is_better=False).verdict == INCONCLUSIVE
    assert improvement_check("c", paired_change([1.0], [0.0]),
                             lower_is_better=True).verdict == NOT_MEASURED
    assert improvement_check("c", None, lower_is_better=True).verdict == NOT_MEASURED


def test_the_rows_must_be_the_same_rows() -> None:
    with pytest.raises(ValueError, match="differ in number"):
        paired_change([1.0, 2.0], [1.0])


def test_a_few_changed_answers_are_judged_by_the_exact_sign_test() -> None:
    # 4 of 400 rows turn right and none wrong: 2 paired SE by the normal approximation, but
    # p = 0.125 exactly, so the sign test calls it inconclusive
    before = [0.0] * 4 + [1.0] * 396
    after = [1.0] * 400
    assert improvement_check("c", paired_change(before, after),
                             lower_is_better=False).verdict == HOLDS
    check = sign_test_check("c", before, after)
    assert check.verdict == INCONCLUSIVE and "p = 0.125" in check.measured
    # 12 right, 1 wrong: p = 0.0034 < 0.0455 holds; the reverse does not hold
    before = [0.0] * 12 + [1.0] * 1 + [1.0] * 87
    after = [1.0] * 12 + [0.0] * 1 + [1.0] * 87
    assert sign_test_check("c", before, after).verdict == HOLDS
    assert sign_test_check("c", after, before).verdict == FAILS
    assert sign_test_check("c", [1.0, 0.0], [1.0, 0.0]).verdict == INCONCLUSIVE
    assert sign_test_check("c", [1.0], [0.0]).verdict == NOT_MEASURED
    with pytest.raises(ValueError, match="0/1"):
        sign_test_check("c", [0.5, 1.0], [1.0, 1.0])
