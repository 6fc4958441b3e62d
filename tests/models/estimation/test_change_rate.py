import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.estimation.change_rate import (
    EstimationInputError,
    GammaPrior,
    IntervalStats,
    PageMoments,
    estimate_from_moments,
    estimate_from_stats,
    estimate_rates,
    improved_rate,
    naive_rate,
)


def moments_to_stats(*columns):
    return PageMoments.checked(*columns).to_stats()


def regular(n: int, changes: int, interval: float = 1.0):
    ids = np.zeros(n, dtype=np.int64)
    return ids, np.full(n, interval), np.arange(n) < changes


# ---------------------------------------------------------------- known answers


@pytest.mark.parametrize(
    ("n", "x", "expected"), [(10, 5, 0.646627), (10, 10, 3.044522), (100, 50, 0.688184)]
)
def test_improved_estimator_known_answers(n, x, expected):
    # a closed form (a few eps); the expected values are printed to 6 decimals: +-5e-7
    assert improved_rate(n, x, 1.0)[()] == pytest.approx(expected, abs=1e-6)


def test_improved_estimator_scales_with_interval():
    assert improved_rate(10, 5, 7.0)[()] == pytest.approx(0.646627 / 7, abs=1e-6)


def test_mle_known_answer_equal_intervals():
    est = estimate_rates(*regular(10, 3), prior="none")
    # log(10 / 7) printed to 6 decimals (+-5e-7); the solver stops at a Newton step in
    # log r below 1e-10 (rate_solver's tolerance), so 3.6e-11 more at most
    assert est.rate[0] == pytest.approx(0.356675, abs=1e-6)


def test_mle_irregular_intervals_satisfies_likelihood_equation():
    t = np.array([0.5, 1.0, 2.0, 3.0, 1.5, 4.0])
    changed = np.array([True, False, True, False, True, False])
    rate = estimate_rates(np.zeros(6, dtype=np.int64), t, changed, prior="none").rate[0]
    lhs = np.sum(t[changed] / np.expm1(rate * t[changed]))
    # the rate is within one last Newton step (< 1e-10 in log r) of the root, and
    # |dlog lhs / dlog r| = r t e^(rt) / (e^(rt) - 1) < 4 here: 4e-10, plus a few eps
    assert lhs == pytest.approx(t[~changed].sum(), rel=1e-9)


# ---------------------------------------------------------------- convergence and bias


def simulate(rates, n, interval, rng):
    p = rates.shape[0]
    ids = np.repeat(np.arange(p), n)
    t = np.full(p * n, interval)
    changed = rng.random(p * n) < -np.expm1(-np.repeat(rates, n) * t)
    return ids, t, changed


def test_naive_saturates_and_mle_does_not():
    rng = np.random.default_rng(1)
    rates = np.full(2000, 2.0)
    ids, t, changed = simulate(rates, 200, 1.0, rng)
    mle = estimate_rates(ids, t, changed, prior="none").rate
    x = np.bincount(ids, changed)
    naive = naive_rate(np.full(2000, 200), x, 1.0)
    # The naive estimate converges to 1 - e^-r, not to r.
    assert naive.mean() == pytest.approx(1 - np.exp(-2.0), rel=0.01)
    assert np.median(mle) == pytest.approx(2.0, rel=0.03)


def test_estimates_converge_to_true_rates():
    rng = np.random.default_rng(2)
    # 1,000 pages (3,000 cost 4x the CPU): the median |log error| is 0.067-0.069 over seeds
    # 2-4, its sampling spread about 0.003, so 0.08 is 4 spreads away; the coverage is
    # 0.90 +- sqrt(0.9 0.1 / 1000) = 0.0095, so 0.85 is 5 of those away.
    rates = rng.lognormal(np.log(0.3), 1.0, 1000).clip(0.01, 3)
    ids, t, changed = simulate(rates, 400, 1.0, rng)
    est = estimate_rates(ids, t, changed)
    assert np.median(np.abs(np.log(est.rate / rates))) < 0.08
    inside = (rates >= est.rate_low) & (rates <= est.rate_high)
    assert inside.mean() > 0.85


def test_empirical_bayes_beats_plain_mle_with_few_observations():
    rng = np.random.default_rng(3)
    groups = np.repeat(np.arange(20), 200)
    rates = np.exp(rng.normal(np.log(0.5), 0.5, 20))[groups] * rng.lognormal(0, 0.3, 4000)
    ids, t, changed = simulate(rates, 3, 1.0, rng)
    eb = estimate_rates(ids, t, changed, groups=np.repeat(groups, 3))
    mle = estimate_rates(ids, t, changed, prior="none")
    err_eb = np.mean(np.log(eb.rate / rates) ** 2)
    err_mle = np.mean(np.log(mle.rate / rates) ** 2)
    assert err_eb < 0.7 * err_mle


def test_extremes_get_finite_ordered_estimates():
    never = estimate_rates(*regular(10, 0), prior="none")
    always = estimate_rates(*regular(10, 10), prior="none")
    for est in (never, always):
        assert np.isfinite(est.rate).all() and (est.rate > 0).all()
        assert est.rate_low[0] < est.rate[0] < est.rate_high[0]
    assert never.rate[0] < 0.2 < 2.0 < always.rate[0] <= 7.0


def test_page_without_history_gets_group_prior():
    stats = moments_to_stats([1, 2], [0, 10], [0, 3], [0.0, 7.0], [0, 3.0], [0, 3.0], [0, 3.0])
    prior = GammaPrior(shape=np.array([2.0]), rate=np.array([4.0]), index=np.array([0, 0]))
    est = estimate_from_stats(stats, prior=prior)
    assert est.rate[0] == pytest.approx(0.5)
    assert est.prior_rate[0] == pytest.approx(0.5)
    assert est.rate_low[0] < 0.5 < est.rate_high[0]


# ---------------------------------------------------------------- fast path vs exact


def moments_of(ids, t, changed):
    s = IntervalStats.from_intervals(ids, t, changed)
    tc = np.where(changed, t, 0.0)
    p = s.size
    return s, moments_to_stats(
        s.page_ids,
        s.n_intervals,
        s.n_changed,
        s.unchanged_days,
        np.bincount(ids, tc, p),
        np.bincount(ids, tc**2, p),
        np.bincount(ids, tc**3, p),
    )


def test_moment_quadrature_exact_for_two_interval_lengths():
    rng = np.random.default_rng(4)
    ids = np.repeat(np.arange(500), 12)
    t = rng.choice([1.0, 3.0], size=ids.shape[0])
    changed = rng.random(ids.shape[0]) < 0.4
    exact, moments = moments_of(ids, t, changed)
    a = estimate_from_stats(exact, prior="none").rate
    b = estimate_from_stats(moments, prior="none").rate
    np.testing.assert_allclose(a, b, rtol=1e-6)


def test_moment_quadrature_close_for_jittered_revisits():
    rng = np.random.default_rng(5)
    p, n = 3000, 10
    ids = np.repeat(np.arange(p), n)
    base = np.repeat(rng.choice([0.5, 1.0, 2.0, 7.0], p), n)
    t = base * rng.uniform(0.8, 1.2, p * n) * np.where(rng.random(p * n) < 0.1, 2, 1)
    rates = np.repeat(rng.lognormal(-1, 1.5, p), n)
    changed = rng.random(p * n) < -np.expm1(-rates * t)
    exact, moments = moments_of(ids, t, changed)
    a = estimate_from_stats(exact, prior="none").rate
    b = estimate_from_stats(moments, prior="none").rate
    assert np.max(np.abs(b / a - 1)) < 0.01


# ---------------------------------------------------------------- properties


@settings(max_examples=60, deadline=None)
@given(
    n=st.integers(1, 40),
    data=st.data(),
    interval=st.floats(0.01, 30.0),
)
def test_more_changes_never_lower_the_estimate(n, data, interval):
    x = data.draw(st.integers(0, n - 1))
    lo = estimate_rates(*regular(n, x, interval), prior="none").rate[0]
    hi = estimate_rates(*regular(n, x + 1, interval), prior="none").rate[0]
    assert np.isfinite(lo) and np.isfinite(hi)
    assert hi >= lo


# ---------------------------------------------------------------- bad input


def test_empty_input_gives_empty_result():
    est = estimate_rates(np.array([], dtype=np.int64), np.array([]), np.array([], dtype=bool))
    assert est.rate.shape == (0,)


def test_single_observation_page_is_sensible():
    est = estimate_rates([7], [1.0], [True])
    assert np.isfinite(est.rate[0]) and est.rate[0] > 0


def test_row_order_does_not_matter():
    rng = np.random.default_rng(6)
    ids = rng.integers(0, 50, 1000)
    t = rng.uniform(0.5, 2, 1000)
    changed = rng.random(1000) < 0.3
    order = rng.permutation(1000)
    a = estimate_rates(ids, t, changed)
    b = estimate_rates(ids[order], t[order], changed[order])
    np.testing.assert_array_equal(a.page_ids, b.page_ids)
    # each run stops within one Newton step (< 1e-10 in log r) of the root, at a point that
    # depends on the sums' order: 2e-10 apart at most, plus the sums' rounding (n eps)
    np.testing.assert_allclose(a.rate, b.rate, rtol=1e-9)


@pytest.mark.parametrize(
    ("ids", "t", "changed", "message"),
    [
        ([1, 1], [1.0, 0.0], [True, False], "intervals must be positive"),
        ([1, 1], [1.0, -2.0], [True, False], "intervals must be positive"),
        ([1, 1], [1.0, np.nan], [True, False], "NaN"),
        ([1, 1], [1.0, np.inf], [True, False], "positive and finite"),
        ([1, 1], [1.0], [True, False], "equal length"),
        ([1, 1], [1.0, 1.0], [True, None], "booleans"),
        ([1.5, 1], [1.0, 1.0], [True, False], "integers"),
    ],
)
def test_bad_input_is_named(ids, t, changed, message):
    with pytest.raises(EstimationInputError, match=message):
        estimate_rates(
            np.asarray(ids),
            np.asarray(t),
            np.asarray(changed, dtype=object if None in changed else None),
        )


def test_page_in_two_groups_is_rejected():
    with pytest.raises(EstimationInputError, match="more than one group"):
        estimate_rates([1, 1], [1.0, 1.0], [True, False], groups=["a", "b"])


def test_duplicate_pages_in_per_page_stats_are_rejected():
    with pytest.raises(EstimationInputError, match="unique"):
        moments_to_stats([1, 1], [1, 1], [0, 0], [1.0, 1.0], [0, 0], [0, 0], [0, 0])


def test_per_page_prior_gives_exact_interval_for_pages_without_change():
    stats = moments_to_stats(
        [1, 2, 3], [4, 4, 0], [0, 2, 0], [4.0, 2.0, 0.0], [0, 2.0, 0], [0, 2.0, 0], [0, 2.0, 0]
    )
    prior = GammaPrior(shape=np.array([2.0, 1.0, 3.0]), rate=np.array([1.0, 1.0, 6.0]))
    est = estimate_from_stats(stats, prior=prior)
    from scipy import stats as st

    # page 1 never changed in 4 days: posterior Gamma(2, 1 + 4) exactly
    assert est.rate[0] == pytest.approx(2 / 5)
    assert est.rate_low[0] == pytest.approx(st.gamma(2, scale=1 / 5).ppf(0.05))
    assert est.rate_high[0] == pytest.approx(st.gamma(2, scale=1 / 5).ppf(0.95))
    # page 3 has no history: its prior, Gamma(3, 6)
    assert est.rate[2] == pytest.approx(0.5)
    assert est.rate_high[2] == pytest.approx(st.gamma(3, scale=1 / 6).ppf(0.95))


def test_chunked_moment_path_matches_unchunked_node_path(monkeypatch):
    import models.estimation.gamma_core as gamma_core
    import models.estimation.rate_solver as rate_solver

    rng = np.random.default_rng(8)
    p, n = 5000, 6
    ids = np.repeat(np.arange(p), n)
    t = rng.choice([1.0, 2.0], size=p * n)
    changed = rng.random(p * n) < -np.expm1(-np.repeat(rng.lognormal(-1, 1, p), n) * t)
    groups = np.arange(p) % 7
    exact = IntervalStats.from_intervals(ids, t, changed)
    tc = np.where(changed, t, 0.0)
    moments = PageMoments.checked(
        exact.page_ids,
        exact.n_intervals,
        exact.n_changed,
        exact.unchanged_days,
        *[np.bincount(ids, tc**k, p) for k in (1, 2, 3)],
    )
    whole = estimate_from_stats(exact, groups=groups)
    monkeypatch.setattr(gamma_core, "CHUNK_PAGES", 700)
    monkeypatch.setattr(rate_solver, "CHUNK_PAGES", 700)
    chunked = estimate_from_moments(moments, groups=groups)
    for field in ("rate", "rate_low", "rate_high", "log_std", "prior_rate"):
        np.testing.assert_allclose(getattr(chunked, field), getattr(whole, field), rtol=1e-6)
    assert np.isfinite(chunked.rate).all()
