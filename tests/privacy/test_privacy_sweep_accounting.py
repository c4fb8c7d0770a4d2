"""The epsilon of a hyperparameter sweep (:func:`bouquet.privacy.accountant.sweep_epsilon`),
checked with Google's ``dp-accounting`` rather than with the code under test (Opacus' RDP).

Runs that read the same rows compose (Papernot and Steinke, ICLR 2022): the sweep's epsilon is
that of every run's worst client, composed. dp-accounting's own RDP accountant must agree with
it, and its PLD accountant (tighter) must not exceed it: the printed bound is an upper bound.
"""

from __future__ import annotations

import dp_accounting
import pytest
from dp_accounting.pld import PLDAccountant
from dp_accounting.rdp import RdpAccountant
from dp_events import dpsgd_step

from bouquet.privacy.accountant import ClientAccountant, sweep_epsilon

DELTA = 1e-5
#: One client's history in a private rt-smollm grid run (sigma, Poisson rate, steps).
RUN = [(0.65765380859375, 0.00936768149882904, 20)]


def _event(history: list[tuple[float, float, int]]) -> dp_accounting.DpEvent:
    return dp_accounting.ComposedDpEvent([
        dp_accounting.SelfComposedDpEvent(dpsgd_step(q, s), n) for s, q, n in history])


def _second(history: list[tuple[float, float, int]]) -> tuple[float, float]:
    """(RDP, PLD) epsilon of ``history`` by dp-accounting."""
    rdp, pld = RdpAccountant(), PLDAccountant()
    rdp.compose(_event(history))
    pld.compose(_event(history))
    return rdp.get_epsilon(DELTA), pld.get_epsilon(DELTA)


@pytest.mark.parametrize("runs", [1, 5, 8])
def test_a_sweep_of_identical_runs_composes_like_one_run_of_all_their_steps(runs: int) -> None:
    got = sweep_epsilon([[RUN, RUN, RUN]] * runs, DELTA)
    rdp, pld = _second([(RUN[0][0], RUN[0][1], RUN[0][2] * runs)])
    assert got == pytest.approx(rdp, rel=1e-3)
    assert pld <= got
    if runs > 1:  # more than one run's epsilon: the sweep is not free
        assert got > ClientAccountant.epsilon_of(RUN, DELTA) + 0.1


def test_a_sweep_counts_each_runs_worst_client_even_when_it_is_another_client() -> None:
    """A row may sit on another client in each run: each run counts with its worst client."""
    low, high = [(1.0, 0.01, 50)], [(1.0, 0.05, 50)]
    got = sweep_epsilon([[low, high], [high, low]], DELTA)
    rdp, pld = _second(high + high)
    assert got == pytest.approx(rdp, rel=1e-3) and pld <= got
    assert got > sweep_epsilon([[low, high], [low, low]], DELTA)


def test_a_run_counts_its_clients_worst_divergence_order_by_order() -> None:
    """Clients whose RDP curves cross: the run costs more than either client alone (the larger
    epsilon of the two would under-count), and no more than both composed."""
    a, b = [(0.5, 0.001, 200)], [(2.0, 0.2, 20)]
    got = sweep_epsilon([[a, b]], DELTA)
    alone = max(ClientAccountant.epsilon_of(a, DELTA), ClientAccountant.epsilon_of(b, DELTA))
    assert got > alone + 0.05
    assert got <= _second(a + b)[0] * (1 + 1e-3)


def test_a_sweep_without_releases_spends_nothing_and_refuses_a_bad_delta() -> None:
    assert sweep_epsilon([], DELTA) == 0.0
    assert sweep_epsilon([[[], []]], DELTA) == 0.0
    with pytest.raises(ValueError, match="delta"):
        sweep_epsilon([[RUN]], 0.0)
