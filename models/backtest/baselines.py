"""Baselines a learning planner must beat from scratch (issue 18).

* :class:`HostPoolingLearner` - the "40-line learner": each page's censored maximum
  likelihood rate shrunk toward its host's pooled rate, by how many intervals the page has
  (``log r = (n log r_page + k log r_host) / (n + k)``); a page never revisited gets its
  host's rate. Plugged into the planner's allocation and selection (``PlannerPolicy``), so
  it differs from the planner by its estimator alone.
* :class:`LambdaLearnAndCrawlPolicy` - after Kolobov, Peres, Lu and Horvitz (NeurIPS 2019,
  "Staying up to date with online content changes using reinforcement learning for
  scheduling", LambdaLearnAndCrawl): per page a smoothed MLE (one imaginary half-day
  interval that saw a change and one that did not, so a page never observed is estimated
  at ``ln 2 / 0.5`` changes a day: optimistic, which is its exploration; estimates kept
  within 0.0005..7 a day), and crawl rates minimizing the harmonic staleness penalty
  (``rho = (-r + sqrt(r^2 + 4 v r / (lambda c))) / 2``, ``lambda`` spending the budget;
  every page keeps a positive rate), re-learned and re-solved every day (one-day epochs).
  Visits follow each page's interval, as the proportional policy's do.
"""

from __future__ import annotations

import numpy as np

from models.backtest.learning import Estimate, PageObservations
from models.backtest.policies import ProportionalPolicy
from models.backtest.web import FloatArray, IntArray, PublicWeb
from models.estimation.change_rate import MAX_RATE, MIN_RATE, estimate_from_moments
from models.estimation.rate_data import PageMoments

#: pseudo-intervals of page evidence the host's pooled rate counts for
HOST_WEIGHT = 2.0


class HostPoolingLearner:
    """Each page's MLE shrunk toward its host's pooled MLE (in log-rate)."""

    name = "host pooling"

    def __init__(self, hosts: IntArray, weight: float = HOST_WEIGHT) -> None:
        self.hosts = hosts
        self.weight = weight

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        m = observations.censored_moments()
        n_hosts = int(self.hosts.max()) + 1

        def pooled(values: FloatArray) -> FloatArray:
            out = np.bincount(self.hosts, weights=values, minlength=n_hosts).astype(np.float64)
            return out

        host = PageMoments(
            np.arange(n_hosts, dtype=np.int64),
            pooled(m.n_intervals.astype(np.float64)).astype(np.int64),
            pooled(m.n_changed.astype(np.float64)).astype(np.int64),
            pooled(m.unchanged_days),
            pooled(m.changed_sum),
            pooled(m.changed_sum_sq),
            pooled(m.changed_sum_cube),
        )
        host_rate = estimate_from_moments(host, prior="none").rate
        seen = host.n_intervals > 0
        overall = float(np.exp(np.mean(np.log(host_rate[seen])))) if seen.any() else 0.1
        host_rate = np.where(seen, host_rate, overall)
        page_rate = estimate_from_moments(m, prior="none").rate
        n = m.n_intervals.astype(np.float64)
        log_rate = (n * np.log(page_rate) + self.weight * np.log(host_rate[self.hosts])) / (
            n + self.weight
        )
        rate = np.clip(np.exp(log_rate), MIN_RATE, MAX_RATE)
        return Estimate(rate, 1.0 / np.sqrt(n + self.weight))


#: Kolobov et al.'s smoothing interval (days) and estimate bounds (changes/day)
_SMOOTHING_DAYS = 0.5
_RATE_BOUNDS = (0.0005, 7.0)


class SmoothedMleLearner:
    """Per page MLE with one changed and one unchanged imaginary half-day interval."""

    name = "smoothed MLE"

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        m = observations.censored_moments()
        t = _SMOOTHING_DAYS
        smoothed = PageMoments(
            m.page_ids,
            m.n_intervals + 2,
            m.n_changed + 1,
            m.unchanged_days + t,
            m.changed_sum + t,
            m.changed_sum_sq + t * t,
            m.changed_sum_cube + t * t * t,
        )
        rate = estimate_from_moments(smoothed, prior="none").rate
        return Estimate(np.clip(rate, *_RATE_BOUNDS), np.zeros(m.size))


class LambdaLearnAndCrawlPolicy(ProportionalPolicy):
    """Smoothed MLE rates, harmonic-penalty crawl rates, re-solved daily (see the module)."""

    name = "lambda-learn-crawl"

    def __init__(self, web: PublicWeb, budget: float, *, seed: int = 0) -> None:
        super().__init__(web, budget, SmoothedMleLearner(), solve_every=1, seed=seed)

    def frequencies(self, rate: FloatArray) -> FloatArray:
        return harmonic_crawl_rates(rate, self.web.value, self.web.cost, self.budget)


def harmonic_crawl_rates(
    rate: FloatArray, value: FloatArray, cost: FloatArray, budget: float
) -> FloatArray:
    """``min(rho, 1)`` per page, ``rho = (-r + sqrt(r^2 + 4 v r / (lam c))) / 2``, with ``lam``
    found by bisection (in log space) so that ``sum(c * min(rho, 1)) = budget``."""
    if float(cost.sum()) <= budget:
        return np.ones(rate.shape[0])

    def rho(lam: float) -> FloatArray:
        out: FloatArray = np.minimum(
            0.5 * (-rate + np.sqrt(rate * rate + 4.0 * value * rate / (lam * cost))), 1.0
        )
        return out

    lo, hi = -60.0, 60.0  # log lambda: spend falls as lambda grows
    for _ in range(100):
        mid = 0.5 * (lo + hi)
        lo, hi = (mid, hi) if float(np.dot(cost, rho(np.exp(mid)))) > budget else (lo, mid)
    return rho(np.exp(hi))
