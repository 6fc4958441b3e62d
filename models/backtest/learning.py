"""What a backtest crawler learns from its own fetches, and the rate estimators it can use.

:class:`PageObservations` keeps, per page, exactly the sufficient statistics the history
store keeps (``PageMoments``: observed intervals, those that saw a change, unchanged days,
sums of the first three powers of the changed intervals) plus the time of the last visit,
updated in place from each day's fetches. A learner turns them into rates:

* :class:`MixturePriorLearner` - the planner's estimator (``models/estimation/mixture_prior.py``:
the
  robust group prior, "like its group, or like the web at large");
* :class:`EmpiricalBayesLearner` - the earlier estimator (``estimate_from_moments``: MLE
  with one empirical-Bayes Gamma prior per group), kept as a variant for comparison;
* :class:`NaiveLearner` - changes / time observed (Cho & Garcia-Molina's naive estimator);
* :class:`OracleLearner` - the true rates (the oracle bound only; it is the one learner
  built from the ground truth).

No learner but the oracle ever holds a reference to the truth.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Protocol

import numpy as np
from numpy.typing import NDArray

from models.backtest.web import BacktestInputError, FloatArray, IntArray, RateSchedule
from models.estimation.change_rate import MAX_RATE, MIN_RATE, estimate_from_moments
from models.estimation.mixture_prior import DecayedMoments, MixturePrior, fit_mixture_prior
from models.estimation.periodic import PhaseHistory, to_cells
from models.estimation.rate_data import (
    GammaPrior,
    PageAges,
    PageMoments,
    moments_with_last_modified,
)
from models.estimation.rate_prior import fit_group_priors
from models.fetching.validators import LM_CODES, judge_last_modified

BoolArray = NDArray[np.bool_]


class PageObservations:
    """Per-page sufficient statistics of a crawler's own observations (updated in place).

    Every page starts with one observation at day 0 (the seed crawl every policy shares),
    so the first revisit of a page yields its first interval; after :meth:`start_cold`
    (a backtest from an empty history) no page has been fetched (``last_fetch`` NaN) and a
    page's first fetch only dates its last visit (and judges its Last-Modified, as the
    seed crawl does): it yields no interval. Where fetches come with a
    Last-Modified header, each is judged as the product judges stored history
    (``models.fetching.validators.judge_last_modified``): the ages it tells are summed per page and
    its evidence per host, and :meth:`moments` lets in the ages of trusted hosts only.
    """

    def __init__(
        self,
        n_pages: int,
        *,
        recent_half_life: float | None = None,
        hosts: IntArray | None = None,
    ) -> None:
        self.size = n_pages
        self.hosts = hosts if hosts is not None else np.zeros(n_pages, dtype=np.int64)
        n_hosts = int(self.hosts.max()) + 1 if n_pages else 1
        self.host_evidence = np.zeros((n_hosts, LM_CODES), dtype=np.int64)
        self.ages = PageAges.zeros(n_pages)
        self.last_modified = np.full(n_pages, np.nan)
        self.recent = DecayedMoments.zeros(n_pages) if recent_half_life else None
        self._half_life = recent_half_life or np.inf
        self._decayed_to = 0.0
        self.last_fetch = np.zeros(n_pages)
        self.n_intervals = np.zeros(n_pages, dtype=np.int64)
        self.n_changed = np.zeros(n_pages, dtype=np.int64)
        self.unchanged_days = np.zeros(n_pages)
        self.changed_sum = np.zeros(n_pages)
        self.changed_sum_sq = np.zeros(n_pages)
        self.changed_sum_cube = np.zeros(n_pages)
        # the phases of each candidate period consistent with each page's history
        # (``models.estimation.periodic``), and the observations that narrowed them
        self.phases = PhaseHistory.empty(n_pages)

    def record_seed(self, last_modified: FloatArray) -> None:
        """The seed crawl's Last-Modified headers (every page fetched at day 0)."""
        if last_modified.shape != (self.size,):
            raise BacktestInputError("the seed crawl needs one Last-Modified per page")
        pages = np.arange(self.size, dtype=np.int64)
        first = np.full(self.size, -1, dtype=np.int8)
        none = np.full(self.size, np.nan)
        self._judge(pages, np.zeros(self.size), last_modified, none, first, np.zeros(self.size))

    def start_cold(self) -> None:
        """No page fetched yet: the history is empty (instead of the seed crawl at day 0)."""
        if self.n_intervals.any() or self.ages.count.any():
            raise BacktestInputError("a cold start needs observations that saw nothing yet")
        self.last_fetch[:] = np.nan

    def never_fetched(self, pages: IntArray) -> BoolArray:
        """Which of ``pages`` this crawler has never fetched (only after a cold start)."""
        return np.isnan(self.last_fetch[pages])

    def record(
        self,
        day: float,
        pages: IntArray,
        changed: BoolArray,
        last_modified: FloatArray | None = None,
    ) -> FloatArray:
        """Add the observations of ``pages`` fetched at ``day``; returns their intervals.

        A page never fetched before gets interval NaN and adds no interval: its first
        fetch only sets its last visit (``changed`` is not read for it) and its
        Last-Modified is judged as the seed crawl's are.
        """
        first = self.never_fetched(pages)
        if first.any():
            new, pages = pages[first], pages[~first]
            changed = np.asarray(changed, dtype=bool)[~first]
            if last_modified is not None:
                self._judge(
                    new,
                    np.full(new.shape[0], float(day)),
                    last_modified[first],
                    np.full(new.shape[0], np.nan),
                    np.full(new.shape[0], -1, dtype=np.int8),
                    np.zeros(new.shape[0]),
                )
                last_modified = last_modified[~first]
            self.last_fetch[new] = day
            out = np.full(first.shape[0], np.nan)
            out[~first] = self.record(day, pages, changed, last_modified)
            return out
        interval = day - self.last_fetch[pages]
        if pages.shape[0] and not (interval > 0).all():
            raise BacktestInputError("a page was observed twice at the same time")
        hit = np.asarray(changed, dtype=bool)
        if last_modified is not None:
            self._judge(
                pages,
                np.full(pages.shape[0], float(day)),
                last_modified,
                self.last_fetch[pages],
                hit.astype(np.int8),
                interval,
            )
        self.phases.record(
            pages,
            to_cells(self.last_fetch[pages]),
            to_cells(np.full(pages.shape[0], float(day))),
            interval,
            hit,
        )
        t_changed = np.where(hit, interval, 0.0)
        self.n_intervals[pages] += 1
        self.n_changed[pages] += hit
        self.unchanged_days[pages] += np.where(hit, 0.0, interval)
        self.changed_sum[pages] += t_changed
        self.changed_sum_sq[pages] += t_changed**2
        self.changed_sum_cube[pages] += t_changed**3
        self.last_fetch[pages] = day
        if self.recent is not None:
            self.recent.decay(0.5 ** ((day - self._decayed_to) / self._half_life))
            self._decayed_to = day
            self.recent.add(pages, hit, interval)
        return interval

    def _judge(
        self,
        pages: IntArray,
        fetched: FloatArray,
        last_modified: FloatArray,
        previous_fetch: FloatArray,
        changed: NDArray[np.int8],
        interval: FloatArray,
    ) -> None:
        days, dated, evidence = judge_last_modified(
            fetched, last_modified, previous_fetch, self.last_modified[pages], changed
        )
        np.add.at(self.host_evidence, (self.hosts[pages], evidence), 1)
        aged = np.isfinite(days)
        a, page = self.ages, pages[aged]
        a.count[page] += dated[aged]
        a.days[page] += days[aged]
        t = np.where(changed[aged] == 1, interval[aged], 0.0)
        a.n_changed[page] += changed[aged] == 1
        a.changed_sum[page] += t
        a.changed_sum_sq[page] += t * t
        a.changed_sum_cube[page] += t * t * t
        self.last_modified[pages] = last_modified

    def days_since(self, day: float) -> FloatArray:
        return day - self.last_fetch

    def reopen(self, pages: IntArray) -> None:
        """Replace the sums of ``pages`` by their discounted ones (``recent``): from now on
        their older intervals count by their age now (``models.planning.drift``). The
        interval counts become float weights."""
        if self.recent is None:
            raise BacktestInputError("re-opening a page's history needs recent_half_life")
        if pages.shape[0] == 0:
            return
        if self.n_intervals.dtype != np.float64:
            self.n_intervals = self.n_intervals.astype(np.float64)
            self.n_changed = self.n_changed.astype(np.float64)
        r = self.recent
        self.n_intervals[pages] = r.n_intervals[pages]
        self.n_changed[pages] = r.n_changed[pages]
        self.unchanged_days[pages] = r.unchanged_days[pages]
        self.changed_sum[pages] = r.changed_sum[pages]
        self.changed_sum_sq[pages] = r.changed_sum_sq[pages]
        self.changed_sum_cube[pages] = r.changed_sum_cube[pages]

    def moments(self) -> PageMoments:
        """The statistics as the planner's estimator takes them: the censored sums, and the
        Last-Modified ages of trusted hosts (``moments_with_last_modified``, the product's)."""
        return moments_with_last_modified(
            self.censored_moments(), self.ages, self.host_evidence, self.hosts
        )

    def censored_moments(self) -> PageMoments:
        """ "Changed since the last visit" alone (views, not copies)."""
        return PageMoments(
            np.arange(self.size, dtype=np.int64),
            self.n_intervals,
            self.n_changed,
            self.unchanged_days,
            self.changed_sum,
            self.changed_sum_sq,
            self.changed_sum_cube,
        )


@dataclass(frozen=True)
class Estimate:
    """Per-page rates (changes/day) and the standard error of their logarithm."""

    rate: FloatArray
    log_std: FloatArray


class RateLearner(Protocol):
    """Turns a crawler's observations into per-page rate estimates on a given day."""

    name: str

    def estimate(self, observations: PageObservations, day: int) -> Estimate: ...


#: Days on which the empirical-Bayes prior is refitted: daily in the first week (when it
#: moves most), then weekly. Between refits the last prior is reused (the per-page
#: posteriors are still recomputed from all observations).
def default_refit_days(day: int) -> bool:
    """Daily in the first week, then weekly (cheaper; for experiments and baselines)."""
    return day <= 7 or day % 7 == 1


def every_day(day: int) -> bool:
    """Refit on every planning day, as ``tasks/planning.plan_cycle`` does."""
    return True


PriorFitter = Callable[[PageMoments, IntArray], GammaPrior]


class EmpiricalBayesLearner:
    """Posterior modes under Gamma priors fitted per group (the earlier planner's estimator)."""

    def __init__(
        self,
        groups: IntArray,
        *,
        refit: Callable[[int], bool] = default_refit_days,
        fit_prior: PriorFitter | None = None,
        name: str = "empirical Bayes",
    ) -> None:
        self.name = name
        self._groups = groups
        self._refit = refit
        self._fit_prior: PriorFitter = fit_prior or _fit_shared_library_prior
        self._prior: GammaPrior | None = None

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        moments = observations.moments()
        if self._prior is None or self._refit(day):
            self._prior = self._fit_prior(moments, self._groups)
        est = estimate_from_moments(moments, prior=self._prior)
        return Estimate(est.rate, est.log_std)


def _fit_shared_library_prior(moments: PageMoments, groups: IntArray) -> GammaPrior:
    return fit_group_priors(moments, groups)


class MixturePriorLearner:
    """Posterior modes under the robust group prior of ``models/estimation/mixture_prior.py``.

    The mixture is refitted on ``refit`` days (warm-started from the last fit); every day
    each page gets the component its observations make more probable. With
    ``recent_half_life`` (days) the policy also keeps discounted sums, and group levels are
    fitted on those: a group that wakes up is noticed within days, not months (those
    discounted sums are "changed since the last visit" only, without Last-Modified ages).
    """

    def __init__(
        self,
        groups: IntArray,
        *,
        refit: Callable[[int], bool] = default_refit_days,
        recent_half_life: float | None = None,
        name: str = "mixture prior",
    ) -> None:
        self.name = name
        self._groups = groups
        self._refit = refit
        self.recent_half_life = recent_half_life
        self.prior: MixturePrior | None = None

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        moments = observations.moments()
        if self.prior is None or self._refit(day):
            self.prior = fit_mixture_prior(
                moments, self._groups, start=self.prior, recent=observations.recent
            )
        rate, log_std, _ = self.prior.estimate(moments, self._groups)
        return Estimate(rate, log_std)


class NaiveLearner:
    """Changes seen / days observed, clamped like the planner's estimates.

    Pages never revisited get the overall naive rate of all observed pages; ``log_std`` is
    0 (the naive estimator has no notion of its uncertainty).
    """

    name = "naive"

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        o = observations
        days = o.unchanged_days + o.changed_sum
        overall = float(o.n_changed.sum()) / float(days.sum()) if days.sum() > 0 else 0.1
        with np.errstate(divide="ignore", invalid="ignore"):
            rate = np.where(o.n_intervals > 0, o.n_changed / days, overall)
        return Estimate(np.clip(rate, MIN_RATE, MAX_RATE), np.zeros(o.size))


class OracleLearner:
    """The true rates of the day (the oracle bound): the only learner that sees the truth."""

    name = "oracle"

    def __init__(self, truth: RateSchedule) -> None:
        self._truth = truth

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        rate = self._truth.on_day(day)
        return Estimate(np.maximum(rate, 1e-9), np.zeros(rate.shape[0]))
