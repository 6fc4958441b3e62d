"""Estimation never fails on statistics the history store can hold, under every prior.

Histories are drawn page by page: intervals from a microsecond to 270 years (what two
fetch timestamps can be apart), changed at every visit, never, or at random; Last-Modified
ages absent, recent, or beyond the first-age horizon (older than
``models.fetching.validators.FIRST_AGE_HORIZON_DAYS``: the page then tells only that it did not
change within the horizon); pages never observed; one page, one host, none at all. A date
in the future is no age at all (``judge_last_modified`` rejects it), so at this level it is
the "absent" case; ``tests/tasks/cycle/test_estimation_robust.py`` sends such headers through
the store.

Each result must be finite and inside the documented clamps (``MIN_RATE`` up to
``MAX_RATE``, or ``MAX_AGED_RATE`` for a page with a trusted age), and name the prior it
came from: the one asked for or a weaker one of ``models.estimation.change_rate.FALLBACKS``.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from models.estimation.change_rate import (
    FALLBACKS,
    MAX_AGED_RATE,
    MAX_RATE,
    MIN_RATE,
    estimate_from_moments,
    estimate_from_stats,
)
from models.estimation.mixture_prior import fit_mixture_prior
from models.estimation.rate_data import PageAges, PageMoments, RateEstimates, with_trusted_ages
from models.fetching.validators import FIRST_AGE_HORIZON_DAYS

PRIORS = ("mixture", "empirical", "none")

#: log10 of an interval in days: 1e-6 days (0.09 s) to 1e5 days (270 years)
log_days = st.floats(-6.0, 5.0, allow_nan=False)


@dataclasses.dataclass(frozen=True)
class Page:
    group: int
    intervals: tuple[float, ...]  # days
    changed: tuple[bool, ...]
    aged: tuple[bool, ...]  # per interval: a changed one whose age a trusted date told
    first_age: float | None  # days since the last change at the first observation
    trusted: bool


@st.composite
def pages(draw: st.DrawFn) -> Page:
    n = draw(st.integers(0, 5))
    mode = draw(st.sampled_from(["random", "never", "always"]))
    intervals = tuple(10.0 ** draw(log_days) for _ in range(n))
    if mode == "random":
        changed = tuple(draw(st.booleans()) for _ in range(n))
    else:
        changed = (mode == "always",) * n
    aged = tuple(c and draw(st.booleans()) for c in changed)
    first = draw(
        st.one_of(
            st.none(),
            st.floats(1e-6, FIRST_AGE_HORIZON_DAYS),  # recent: a dated change
            st.floats(FIRST_AGE_HORIZON_DAYS, 1e5),  # far in the past: the horizon only
        )
    )
    return Page(draw(st.integers(0, 3)), intervals, changed, aged, first, draw(st.booleans()))


def store_statistics(web: list[Page], age_share: float) -> tuple[PageMoments, np.ndarray]:
    """The per-page sums the store keeps, with trusted hosts' ages applied
    (``with_trusted_ages``, the production step), and each page's group."""
    n = len(web)
    rows = [
        (p, t, c, a)
        for p, page in enumerate(web)
        for t, c, a in zip(page.intervals, page.changed, page.aged, strict=True)
    ]
    page = np.array([r[0] for r in rows], dtype=np.int64)
    days = np.array([r[1] for r in rows], dtype=np.float64)
    changed = np.array([r[2] for r in rows], dtype=bool)
    aged = np.array([r[3] for r in rows], dtype=bool)

    def per_page(values: np.ndarray) -> np.ndarray:
        return np.bincount(page, weights=values, minlength=n).astype(np.float64)

    t = np.where(changed, days, 0.0)
    moments = PageMoments.checked(
        np.arange(n, dtype=np.int64) * 7 + 3,
        np.bincount(page, minlength=n),
        np.bincount(page, weights=changed, minlength=n).astype(np.int64),
        per_page(np.where(changed, 0.0, days)),
        per_page(t),
        per_page(t * t),
        per_page(t**3),
    )
    # a changed interval's age is a share of its length (the change fell inside it)
    ta = np.where(aged, days, 0.0)
    first = np.array([np.nan if p.first_age is None else p.first_age for p in web])
    recent = first <= FIRST_AGE_HORIZON_DAYS
    ages = PageAges(
        per_page(aged.astype(np.float64)) + recent,
        per_page(ta * age_share)
        + np.where(np.isnan(first), 0.0, np.minimum(first, FIRST_AGE_HORIZON_DAYS)),
        np.bincount(page, weights=aged, minlength=n).astype(np.int64),
        per_page(ta),
        per_page(ta * ta),
        per_page(ta**3),
    )
    trusted = np.array([p.trusted for p in web], dtype=bool)
    groups = np.array([p.group for p in web], dtype=np.int64)
    return with_trusted_ages(moments, ages, trusted), groups


def assert_sound(est: RateEstimates, moments: PageMoments, prior: str) -> None:
    """Finite, clamped, aligned, and from the prior asked for."""
    assert est.page_ids.tolist() == moments.page_ids.tolist()
    cap = np.where(moments.ages()[0] > 0, MAX_AGED_RATE, MAX_RATE)
    for name in ("rate", "log_std", "rate_low", "rate_high"):
        values = getattr(est, name)
        assert values.shape == (moments.size,), name
        assert np.isfinite(values).all(), (name, values)
    assert (est.rate >= MIN_RATE).all() and (est.rate <= cap).all(), est.rate
    assert (est.log_std >= 0).all()
    assert (est.rate_low >= 0).all() and (est.rate_low <= est.rate_high).all()
    assert est.prior_used in FALLBACKS[prior]
    assert (est.prior_used == prior) == (est.prior_fallback == "")
    # every cause of a failed fit these histories found is fixed: each prior fits itself
    assert est.prior_used == prior, est.prior_fallback


@pytest.mark.parametrize("prior", PRIORS)
@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(web=st.lists(pages(), max_size=10), age_share=st.floats(0.0, 1.0))
@example(web=[], age_share=0.5)  # no page at all
@example(web=[Page(0, (), (), (), None, False)], age_share=0.5)  # one page, never observed
@example(  # the catalog: every page's last change beyond the first-age horizon
    web=[Page(g % 3, (), (), (), 400.0, True) for g in range(12)], age_share=0.5
)
@example(web=[Page(0, (1e-6,) * 4, (True,) * 4, (False,) * 4, None, False)] * 3, age_share=0.5)
@example(web=[Page(0, (1e5,) * 3, (False,) * 3, (False,) * 3, 1e5, True)] * 3, age_share=0.5)
@example(web=[Page(0, (1e5, 1e-6), (True, True), (True, False), 1e-6, True)], age_share=1.0)
@example(  # a flat likelihood (a long changed interval, a tiny unchanged one): the Laplace
    # interval's end overflows; it is clipped to the cap like the rate
    web=[Page(0, (100.0, 1e-6), (True, False), (False, False), None, False)],
    age_share=0.5,
)
def test_estimates_are_finite_and_clamped(prior, web, age_share):
    moments, groups = store_statistics(web, age_share)
    est = estimate_from_moments(moments, groups=groups, prior=prior)
    assert_sound(est, moments, prior)


@pytest.mark.parametrize("prior", ["empirical", "none"])
@settings(max_examples=25, deadline=None)
@given(web=st.lists(pages(), max_size=10), age_share=st.floats(0.0, 1.0))
def test_node_form_statistics_are_estimated_soundly_too(prior, web, age_share):
    moments, groups = store_statistics(web, age_share)
    est = estimate_from_stats(moments.to_stats(), groups=groups, prior=prior)
    assert_sound(est, moments, prior)


def test_the_mixture_prior_fits_a_catalog_whose_every_page_is_stale():
    """The issue's history, item 2: one first cycle, every Last-Modified older than the
    first-age horizon. The mixture itself fits (no fallback): its level distribution has
    no group with a change or an interval to learn from and keeps its flat start."""
    web = [Page(g % 3, (), (), (), days, True) for g in range(30) for days in (61.0, 400.0)]
    moments, groups = store_statistics(web, 0.5)
    prior = fit_mixture_prior(moments, groups)
    assert np.isfinite(prior.group_log_rate).all() and np.isfinite(prior.level_prior).all()
    est = estimate_from_moments(moments, groups=groups, prior="mixture")
    assert_sound(est, moments, "mixture")
    assert est.prior_used == "mixture" and est.prior_fallback == ""


def broken(*args, **kwargs):
    raise FloatingPointError("broken on purpose")


def nan_rates(stats):
    return np.full(stats.size, np.nan), np.ones(stats.size)


@pytest.mark.parametrize(
    ("prior", "target", "replacement", "used"),
    [
        ("mixture", "models.estimation.mixture_prior.fit_mixture_prior", broken, "empirical"),
        ("empirical", "models.estimation.change_rate.fit_group_priors", broken, "weak"),
        ("none", "models.estimation.gamma_core._smoothed_mle", nan_rates, "weak"),
    ],
)
def test_a_prior_that_cannot_be_fitted_gives_way_to_a_weaker_one(
    monkeypatch, caplog, prior, target, replacement, used
):
    web = [Page(g % 2, (1.0, 2.0), (True, False), (False, False), None, False) for g in range(6)]
    web.append(Page(0, (), (), (), None, False))  # a page never observed
    moments, groups = store_statistics(web, 0.5)
    monkeypatch.setattr(target, replacement)
    with caplog.at_level("WARNING", logger="models.estimation.change_rate"):
        est = estimate_from_moments(moments, groups=groups, prior=prior)
    assert est.prior_used == used
    assert est.prior_fallback.startswith(f"{prior} prior could not be fitted (")
    assert est.prior_description() == f"prior: {used} (fallback: {est.prior_fallback})"
    assert [r.getMessage() for r in caplog.records] == [
        f"estimated under the {used} prior: {est.prior_fallback}"
    ]  # once, not per page
    cap = np.where(moments.ages()[0] > 0, MAX_AGED_RATE, MAX_RATE)
    assert np.isfinite(est.rate).all() and (est.rate >= MIN_RATE).all() and (est.rate <= cap).all()
