"""The drift detector of the backtest's planner variants (``models/backtest/drift.py``): its
likelihood-ratio surprise, which pages it re-opens, and what re-opening does to a page's sums.
"""

from __future__ import annotations

import numpy as np
import pytest

from models.backtest.drift import DriftInputError, DriftRule, surprise, surprised_pages
from models.backtest.learning import PageObservations
from models.backtest.web import BacktestInputError
from models.estimation.mixture_prior import DecayedMoments

#: the grid is 4.0 points an e-fold (step h = ln(1e7) / 64 = 0.252): the best grid point is
#: within h / 2 of the maximum in log-rate, so the maximum is missed by at most
#: |L''| (h / 2)^2 / 2; for 2 changed and 2 unchanged one-day intervals |L''| = 1.92 at
#: the maximum (log-rate scale), so at most 0.0152
GRID_ERROR = 0.02


def _page(unchanged: list[float], changed: list[float]) -> DecayedMoments:
    t = np.asarray(changed, dtype=np.float64)
    return DecayedMoments(
        n_intervals=np.array([float(len(unchanged) + len(changed))]),
        n_changed=np.array([float(len(changed))]),
        unchanged_days=np.array([float(sum(unchanged))]),
        changed_sum=np.array([t.sum()]),
        changed_sum_sq=np.array([(t**2).sum()]),
        changed_sum_cube=np.array([(t**3).sum()]),
    )


def test_surprise_is_the_log_likelihood_ratio_to_the_best_rate() -> None:
    # 2 changed, 2 unchanged one-day intervals: the best rate is ln 2 (half the days
    # changed), where L = 2 ln(1/2) - 2 ln 2; at 0.1 a day L = 2 ln(1 - e^-0.1) - 0.2
    page = _page([1.0, 1.0], [1.0, 1.0])
    best = -4.0 * np.log(2.0)
    at = 2.0 * np.log(-np.expm1(-0.1)) - 0.2
    assert surprise(page, np.array([0.1]))[0] == pytest.approx(best - at, abs=GRID_ERROR)
    assert surprise(page, np.array([np.log(2.0)]))[0] == pytest.approx(0.0, abs=1e-12)


def test_unchanged_pages_surprise_a_fast_estimate_and_changed_ones_a_slow_one() -> None:
    quiet = _page([10.0], [])  # ten days, no change: L(r) = -10 r, best at the grid's 1e-5
    assert surprise(quiet, np.array([1.0]))[0] == pytest.approx(10.0, abs=1e-3)
    busy = _page([], [1.0] * 4)  # four one-day intervals, all changed: best at the top
    slow = 4.0 * np.log(-np.expm1(-0.01))
    assert surprise(busy, np.array([0.01]))[0] == pytest.approx(-slow, abs=1e-3)
    assert surprise(_page([], []), np.array([0.01]))[0] == 0.0  # nothing observed


def test_surprised_pages_are_the_candidates_over_the_threshold() -> None:
    pages = [_page([10.0], []), _page([1.0, 1.0], [1.0, 1.0]), _page([], [1.0] * 4)]
    columns = zip(*(p.arrays() for p in pages), strict=True)
    recent = DecayedMoments(*(np.concatenate(c) for c in columns))
    rate = np.array([1.0, np.log(2.0), 0.01])
    rule = DriftRule(half_life=14.0, threshold=3.0)
    assert surprised_pages(recent, rate, np.array([0, 1, 2]), rule).tolist() == [0, 2]
    assert surprised_pages(recent, rate, np.array([1, 2]), rule).tolist() == [2]
    assert surprised_pages(recent, rate, np.zeros(0, dtype=np.int64), rule).shape == (0,)


@pytest.mark.parametrize("bad", [{"half_life": 0.0}, {"half_life": np.inf}, {"threshold": -1.0}])
def test_bad_rules_are_refused(bad: dict[str, float]) -> None:
    with pytest.raises(DriftInputError):
        DriftRule(**bad)


def test_reopening_replaces_a_pages_sums_by_its_discounted_ones() -> None:
    obs = PageObservations(2, recent_half_life=10.0)
    obs.start_cold()
    obs.record(0.0, np.array([0, 1]), np.array([False, False]))
    obs.record(10.0, np.array([0, 1]), np.array([False, False]))  # 10 unchanged days each
    obs.record(20.0, np.array([0, 1]), np.array([True, True]))  # then a change in 10
    obs.reopen(np.array([0]))
    # page 0: the first interval weighs 0.5 (one half-life old at the re-opening)
    assert obs.n_intervals.tolist() == [1.5, 2.0]
    assert obs.unchanged_days.tolist() == [5.0, 10.0]
    assert obs.changed_sum.tolist() == [10.0, 10.0]
    assert obs.n_changed.tolist() == [1.0, 1.0]
    with pytest.raises(BacktestInputError):
        PageObservations(2).reopen(np.array([0]))
