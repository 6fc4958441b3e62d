"""A sitemap's ``<lastmod>`` as a noisy change signal, trusted per host as far as it agreed.

The signal of a page is whether its sitemap lastmod is newer than the page's last visit:
``1`` (the site says it changed since), ``0`` (it says it did not), NaN (no lastmod, or
never visited: no signal). Sites lie both ways: a lastmod that is always "now" signals every
page, a stale one (the creation date) none, and published data found sitemaps reliable for
only about 4% of URLs (Kolobov et al., NeurIPS 2019). Busa-Fekete et al. (WWW 2025,
arXiv 2502.02430) schedule with such change-indicating signals that both miss changes and
raise false alarms; here the two error rates are learned per host from the fetches
themselves:

* each fetch of a page that carried a signal is a labelled example: ``changed`` (what the
  fetch found) against the signal the planner saw;
* ``recall`` = P(signal | changed) and ``false_alarm`` = P(signal | unchanged), each a Beta
  posterior mean with ``prior_strength`` pseudo-examples at the host's share of signalled
  fetches (1/2 before any): the prior is "the signal is independent of change", so an
  unproven signal has a likelihood ratio of 1 and changes nothing, and so does one that is
  constant on a host (it cannot tell its pages apart, whatever it says);
* until the fetches show the signal depending on change (a two-proportion z of at least
  ``min_z``), a host's ratio is exactly 1: an unproven signal, or one that is noise, moves
  nothing;
* the page's change probability from its rate and time since the visit, ``p``, becomes the
  posterior ``p * LR / (p * LR + 1 - p)`` with ``LR = recall / false_alarm`` for a signal of
  1 and ``(1 - recall) / (1 - false_alarm)`` for 0, clamped to ``[1/max_ratio, max_ratio]``.

A host whose lastmod is always "now" signals every page: recall = false alarm = 1, LR = 1
exactly. A stale host signals none: recall = false alarm = 0, LR = 1 exactly. (A prior at 1/2
instead would have given a "now" host whose fetches mostly found changes an LR above 1 and
moved budget to it from other hosts: measured in the backtest, ``models.backtest.signals``.)
Either way the planner sees what it saw without the signal; only a signal that separated
changed from unchanged pages moves it.
``effective_days`` turns the posterior back into days since the visit at the page's rate, so
a planner that ranks by rate and elapsed time takes the signal without another input.

Pure: numpy, vectorized over pages and hosts.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]


def lastmod_signal(lastmod_days: ArrayLike, last_visit_days: ArrayLike) -> FloatArray:
    """1 where lastmod is after the last visit, 0 where not, NaN where either is unknown.

    Both in the same time unit and origin (days, say); NaN marks an unknown time.
    """
    lastmod = np.asarray(lastmod_days, dtype=np.float64)
    visit = np.asarray(last_visit_days, dtype=np.float64)
    known = ~(np.isnan(lastmod) | np.isnan(visit))
    return np.where(known, (lastmod > visit).astype(np.float64), np.nan)


@dataclass(frozen=True)
class LastmodEvidence:
    """Per host (arrays aligned by host): fetches by signal seen and change found."""

    signaled_changed: FloatArray
    signaled_unchanged: FloatArray
    quiet_changed: FloatArray
    quiet_unchanged: FloatArray

    @classmethod
    def empty(cls, hosts: int) -> LastmodEvidence:
        zeros = np.zeros(hosts)
        return cls(zeros, zeros.copy(), zeros.copy(), zeros.copy())

    @classmethod
    def count(
        cls, host: ArrayLike, signal: ArrayLike, changed: ArrayLike, hosts: int
    ) -> LastmodEvidence:
        """The evidence of labelled fetches: ``host`` codes, ``signal`` (NaN: none), ``changed``."""
        codes = np.asarray(host, dtype=np.int64)
        s = np.asarray(signal, dtype=np.float64)
        c = np.asarray(changed, dtype=bool)
        known = ~np.isnan(s)
        sig = known & (s > 0.5)
        quiet = known & ~(s > 0.5)

        def tally(mask: NDArray[np.bool_]) -> FloatArray:
            return np.bincount(codes[mask], minlength=hosts).astype(np.float64)

        return cls(tally(sig & c), tally(sig & ~c), tally(quiet & c), tally(quiet & ~c))

    def __add__(self, other: LastmodEvidence) -> LastmodEvidence:
        return LastmodEvidence(
            self.signaled_changed + other.signaled_changed,
            self.signaled_unchanged + other.signaled_unchanged,
            self.quiet_changed + other.quiet_changed,
            self.quiet_unchanged + other.quiet_unchanged,
        )


@dataclass(frozen=True)
class LastmodTrust:
    """Per host: the learned recall and false-alarm rate of its lastmod signal."""

    recall: FloatArray
    false_alarm: FloatArray
    max_ratio: float

    def likelihood_ratio(self, host: ArrayLike, signal: ArrayLike) -> FloatArray:
        """LR of each page's signal (1 where there is none), clamped to the max ratio."""
        codes = np.asarray(host, dtype=np.int64)
        s = np.asarray(signal, dtype=np.float64)
        r, f = self.recall[codes], self.false_alarm[codes]
        with np.errstate(divide="ignore", invalid="ignore"):
            ratio = np.where(s > 0.5, r / f, (1.0 - r) / (1.0 - f))
        ratio = np.where(np.isnan(s) | np.isnan(ratio), 1.0, ratio)
        return np.asarray(np.clip(ratio, 1.0 / self.max_ratio, self.max_ratio))


def learn_trust(
    evidence: LastmodEvidence,
    *,
    prior_strength: float = 10.0,
    max_ratio: float = 20.0,
    min_z: float = 3.0,
) -> LastmodTrust:
    """Recall and false-alarm rate per host: Beta means with ``prior_strength`` pseudo-examples
    at the host's share of signalled fetches (1/2 for a host without evidence).

    A host whose evidence does not show the signal depending on change is given the same
    recall and false-alarm rate (its share), so a likelihood ratio of exactly 1: the two-sample
    z statistic of P(signal | changed) - P(signal | unchanged) on the raw counts must reach
    ``min_z`` (3 by default: a signal independent of change passes it about once in 700
    hosts). A signal that tells nothing thus moves nothing until the fetches prove it does.
    """
    if not prior_strength > 0 or not max_ratio >= 1 or not min_z >= 0:
        raise ValueError("need prior_strength > 0, max_ratio >= 1 and min_z >= 0")
    changed = evidence.signaled_changed + evidence.quiet_changed
    unchanged = evidence.signaled_unchanged + evidence.quiet_unchanged
    signaled = evidence.signaled_changed + evidence.signaled_unchanged
    total = changed + unchanged
    share = np.where(total > 0, signaled / np.maximum(total, 1.0), 0.5)
    prior = prior_strength * share
    recall = (evidence.signaled_changed + prior) / (changed + prior_strength)
    false_alarm = (evidence.signaled_unchanged + prior) / (unchanged + prior_strength)
    proven = signal_z(evidence) >= min_z
    recall = np.where(proven, recall, share)
    false_alarm = np.where(proven, false_alarm, share)
    return LastmodTrust(recall, false_alarm, float(max_ratio))


def signal_z(evidence: LastmodEvidence) -> FloatArray:
    """Per host, |z| of the difference between P(signal | changed) and P(signal | unchanged)
    (pooled two-proportion test on the counts); 0 where either side has no example or the
    signal is constant."""
    changed = evidence.signaled_changed + evidence.quiet_changed
    unchanged = evidence.signaled_unchanged + evidence.quiet_unchanged
    signaled = evidence.signaled_changed + evidence.signaled_unchanged
    total = changed + unchanged
    with np.errstate(divide="ignore", invalid="ignore"):
        pooled = signaled / total
        diff = evidence.signaled_changed / changed - evidence.signaled_unchanged / unchanged
        se = np.sqrt(pooled * (1.0 - pooled) * (1.0 / changed + 1.0 / unchanged))
        z = np.abs(diff) / se
    return np.asarray(np.where(np.isfinite(z), z, 0.0))


def posterior_change(p_changed: ArrayLike, likelihood_ratio: ArrayLike) -> FloatArray:
    """P(changed | signal) from the prior probability and the signal's likelihood ratio."""
    p = np.clip(np.asarray(p_changed, dtype=np.float64), 0.0, 1.0)
    lr = np.asarray(likelihood_ratio, dtype=np.float64)
    odds = p * lr
    moved = np.where(p >= 1.0, 1.0, odds / (odds + 1.0 - p))
    return np.asarray(np.where(lr == 1.0, p, moved))  # exactly p: no signal moves nothing


def effective_days(rate: ArrayLike, days: ArrayLike, p_changed: ArrayLike) -> FloatArray:
    """Days since the visit at which a Poisson page of ``rate`` would have ``p_changed``.

    Where the rate is 0 or the probability is unchanged, ``days`` itself; the probability is
    kept below 1 - 1e-12 so the days stay finite.
    """
    lam = np.asarray(rate, dtype=np.float64)
    t = np.asarray(days, dtype=np.float64)
    p = np.clip(np.asarray(p_changed, dtype=np.float64), 0.0, 1.0 - 1e-12)
    with np.errstate(divide="ignore", invalid="ignore"):
        shifted = -np.log1p(-p) / lam
    return np.asarray(np.where((lam > 0) & np.isfinite(shifted), shifted, t))
