"""Last-Modified ages in the rate likelihood, and how a host's Last-Modified is judged."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from scipy import integrate, special

from models.estimation.change_rate import MAX_RATE, estimate_from_moments
from models.estimation.mixture_prior import _PageGrid
from models.estimation.rate_data import (
    EstimationInputError,
    PageAges,
    PageMoments,
    moments_with_last_modified,
    with_trusted_ages,
)
from models.fetching.validators import (
    FIRST_AGE_HORIZON_DAYS,
    LM_CODES,
    LM_CONSISTENT,
    LM_DATED,
    LM_HIDDEN_CHANGE,
    LM_NOW,
    LM_VOLATILE,
    judge_last_modified,
    last_modified_trusted,
)


def busy_pages(n: int = 40, visits: int = 10, rate: float = 20.0, seed: int = 0):
    """Pages changed at every daily visit, and the ages an honest Last-Modified tells."""
    ones = np.full(n, visits)
    moments = PageMoments.checked(
        np.arange(n), ones, ones, np.zeros(n), ones * 1.0, ones * 1.0, ones * 1.0
    )
    age = np.random.default_rng(seed).exponential(1.0 / rate, (n, visits)).sum(axis=1)
    ages = PageAges(np.full(n, float(visits)), age, ones, ones * 1.0, ones * 1.0, ones * 1.0)
    return moments, ages


@pytest.mark.parametrize("prior", ["mixture", "empirical", "none"])
def test_a_page_changed_at_every_visit_gets_a_higher_finite_rate_with_trusted_ages(prior):
    moments, ages = busy_pages()
    blind = estimate_from_moments(moments, prior=prior)
    aged = estimate_from_moments(with_trusted_ages(moments, ages, np.ones(40, bool)), prior=prior)
    assert np.isfinite(aged.rate).all() and np.isfinite(aged.log_std).all()
    assert (aged.rate > blind.rate).all()
    assert (aged.rate > MAX_RATE).all()  # above what daily visits alone may claim
    assert np.median(aged.rate) == pytest.approx(20.0, rel=0.35)
    assert (aged.n_changed == blind.n_changed).all()  # reports still count every change
    np.testing.assert_allclose(aged.observed_days, blind.observed_days)


def test_untrusted_pages_keep_their_censored_statistics():
    moments, ages = busy_pages(n=4)
    trusted = np.array([True, False, True, False])
    out = with_trusted_ages(moments, ages, trusted)
    assert (out.n_changed == np.where(trusted, 0, 10)).all()
    assert (out.ages()[0] == np.where(trusted, 10.0, 0.0)).all()
    np.testing.assert_allclose(out.changed_sum, np.where(trusted, 0.0, 10.0))
    with pytest.raises(EstimationInputError, match="one entry per page"):
        with_trusted_ages(moments, ages, np.ones(3, bool))


def test_the_grid_marginal_of_an_aged_page_is_the_exact_gamma_integral():
    n = 3
    moments = PageMoments.checked(
        np.arange(n),
        np.array([4, 4, 4]),
        np.array([0, 1, 0]),
        np.array([4.0, 3.0, 4.0]),
        np.array([0.0, 1.0, 0.0]),
        np.array([0.0, 1.0, 0.0]),
        np.array([0.0, 1.0, 0.0]),
    )
    aged = dataclasses.replace(
        moments, aged_count=np.array([2.0, 1.0, 0.0]), aged_days=np.array([0.7, 0.2, 0.0])
    )
    grid = _PageGrid.build(aged.to_stats())
    a, b = np.full(n, 1.5), np.full(n, 2.0)
    got = grid.log_marginal(a, b)
    for page, (k, s, changed) in enumerate([(2, 0.7, 0), (1, 0.2, 1), (0, 0.0, 0)]):
        unchanged = float(aged.unchanged_days[page])

        def density(r: float, k=k, s=s, changed=changed, unchanged=unchanged) -> float:
            like = r**k * np.exp(-r * (s + unchanged)) * (-np.expm1(-r)) ** changed
            return like * np.exp(1.5 * np.log(2.0) - special.gammaln(1.5)) * r**0.5 * np.exp(-2 * r)

        exact = np.log(integrate.quad(density, 0, np.inf, limit=200)[0])
        assert got[page] == pytest.approx(exact, abs=0.02 if changed else 1e-9)


def test_last_modified_is_judged_per_observation():
    nan = np.nan
    at = np.full(8, 100.0)
    lm = np.array([99.5, 100.0, 101.0, 99.5, 99.5, 98.0, 93.0, 20.0])
    prev_at = np.array([99.0, 99.0, 99.0, 99.0, 99.0, 99.0, nan, nan])
    prev_lm = np.array([98.0, 99.0, 99.0, 99.5, 98.0, 98.0, nan, nan])
    changed = np.array([1, 1, 1, 1, 0, 1, -1, -1], dtype=np.int8)
    days, dated, code = judge_last_modified(at, lm, prev_at, prev_lm, changed)
    # honest change; "now"; future; did not move though changed; moved though unchanged;
    # changed but Last-Modified before the previous visit; first observations, recent and old
    assert code.tolist() == [
        LM_CONSISTENT,
        LM_NOW,
        LM_NOW,
        LM_HIDDEN_CHANGE,
        LM_VOLATILE,
        LM_HIDDEN_CHANGE,
        LM_DATED,
        LM_DATED,
    ]
    np.testing.assert_allclose(days, [0.5, nan, nan, nan, nan, nan, 7.0, FIRST_AGE_HORIZON_DAYS])
    assert dated.tolist() == [True, False, False, False, False, False, True, False]


def test_a_dishonest_host_is_not_trusted():
    counts = np.zeros((4, LM_CODES), dtype=np.int64)
    counts[0, LM_CONSISTENT] = 50  # honest
    counts[1, LM_NOW], counts[1, LM_CONSISTENT] = 30, 20  # stamps every answer "now"
    counts[2, LM_CONSISTENT], counts[2, LM_HIDDEN_CHANGE] = 50, 1  # hid a change
    counts[3, LM_VOLATILE], counts[3, LM_CONSISTENT] = 10, 2  # moves without changes
    assert last_modified_trusted(counts).tolist() == [True, False, False, False]


def test_only_trusted_hosts_ages_reach_the_moments():
    moments, ages = busy_pages(n=4)
    evidence = np.zeros((2, LM_CODES), dtype=np.int64)
    evidence[0, LM_CONSISTENT] = 10
    evidence[1, LM_NOW] = 10
    out = moments_with_last_modified(moments, ages, evidence, np.array([0, 1, 0, 1]))
    assert out.ages()[0].tolist() == [10.0, 0.0, 10.0, 0.0]
