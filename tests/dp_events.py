"""dp-accounting events of DP-SGD, shared by the independent privacy checks (tests/privacy)."""

from __future__ import annotations

from dp_accounting import dp_event


def dpsgd_step(rate: float, sigma: float) -> dp_event.DpEvent:
    """One DP-SGD release: a Gaussian on a Poisson sample at ``rate``, or on all rows (rate 1,
    where subsampling does not amplify: fixed-size shuffled batches count one per epoch)."""
    gauss = dp_event.GaussianDpEvent(sigma)
    return gauss if rate >= 1.0 else dp_event.PoissonSampledDpEvent(rate, gauss)
