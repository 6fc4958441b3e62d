"""Data types of change-rate estimation: per-page statistics, priors, estimates."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import special

from models.estimation.rate_solver import bincount, two_point_quadrature

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class EstimationInputError(ValueError):
    """The arrays given to an estimator are malformed; the message says which and how."""


@dataclass(frozen=True)
class IntervalStats:
    """Per-page sufficient statistics of the observed intervals.

    ``page_ids`` are unique. ``n_intervals`` and ``n_changed`` count observed intervals
    and those that saw a change; ``unchanged_days`` sums the intervals without a change.
    The changed intervals are given as weighted nodes: ``node_page`` indexes into
    ``page_ids``, ``node_days`` is the interval length and ``node_weight`` how many
    intervals the node stands for.
    """

    page_ids: IntArray
    n_intervals: IntArray
    n_changed: IntArray
    unchanged_days: FloatArray
    changed_days: FloatArray
    node_page: IntArray
    node_days: FloatArray
    node_weight: FloatArray
    #: observations whose age (time since the last change) a trusted Last-Modified told,
    #: and the sum of those ages: the likelihood gains ``count log r - r days`` (None: none)
    aged_count: FloatArray | None = None
    aged_days: FloatArray | None = None

    @property
    def size(self) -> int:
        return int(self.page_ids.shape[0])

    def ages(self) -> tuple[FloatArray, FloatArray]:
        """``(aged_count, aged_days)`` per page, zeros when there are none."""
        return _ages(self.aged_count, self.aged_days, self.size)

    @classmethod
    def from_intervals(
        cls, page_ids: ArrayLike, intervals: ArrayLike, changed: ArrayLike
    ) -> IntervalStats:
        """Exact statistics from flat arrays, one row per observed interval (any order)."""
        ids = _as_int(page_ids, "page_ids")
        days = _as_float(intervals, "intervals")
        flags = np.asarray(changed)
        if not (ids.shape == days.shape == flags.shape) or ids.ndim != 1:
            raise EstimationInputError(
                "page_ids, intervals and changed must be 1-D arrays of equal length; got "
                f"shapes {ids.shape}, {days.shape}, {flags.shape}"
            )
        if flags.dtype != np.bool_:
            if flags.dtype == object or not np.isin(flags, (0, 1)).all():
                raise EstimationInputError("changed must hold booleans (True/False), no nulls")
            flags = flags.astype(bool)
        _check_positive(days, "intervals")
        uniq, page = np.unique(ids, return_inverse=True)
        p = uniq.shape[0]
        n_int = np.bincount(page, minlength=p).astype(np.int64)
        n_chg = np.bincount(page, weights=flags, minlength=p).astype(np.int64)
        unchanged = bincount(page, np.where(flags, 0.0, days), p)
        changed_days = bincount(page, np.where(flags, days, 0.0), p)
        node_page = page[flags].astype(np.int64)
        order = np.argsort(node_page, kind="stable")  # nodes sorted by page
        return cls(
            page_ids=uniq.astype(np.int64),
            n_intervals=n_int,
            n_changed=n_chg,
            unchanged_days=unchanged,
            changed_days=changed_days,
            node_page=node_page[order],
            node_days=days[flags][order],
            node_weight=np.ones(int(flags.sum())),
        )

    def take(self, pages: IntArray) -> IntervalStats:
        """The statistics of some pages (sorted positions)."""
        return select_pages(self, pages)

    def page_range(self, lo: int, hi: int) -> IntervalStats:
        """Pages ``lo`` to ``hi - 1`` (views; nodes renumbered from 0)."""
        start, stop = np.searchsorted(self.node_page, [lo, hi])
        return IntervalStats(
            page_ids=self.page_ids[lo:hi],
            n_intervals=self.n_intervals[lo:hi],
            n_changed=self.n_changed[lo:hi],
            unchanged_days=self.unchanged_days[lo:hi],
            changed_days=self.changed_days[lo:hi],
            node_page=self.node_page[start:stop] - lo,
            node_days=self.node_days[start:stop],
            node_weight=self.node_weight[start:stop],
            aged_count=None if self.aged_count is None else self.aged_count[lo:hi],
            aged_days=None if self.aged_days is None else self.aged_days[lo:hi],
        )


@dataclass(frozen=True)
class PageMoments:
    """Per-page sums as the history store keeps them: counts and powers of intervals.

    ``changed_sum``, ``changed_sum_sq`` and ``changed_sum_cube`` sum the first three powers
    of a page's changed intervals (days). The changed-interval term of the likelihood is
    evaluated by two-node Gauss quadrature matching those moments: exact when a page's
    changed intervals take at most two distinct lengths. Pages with no intervals (all
    zeros) are kept: they get their group's prior.
    """

    page_ids: IntArray
    n_intervals: IntArray
    n_changed: IntArray
    unchanged_days: FloatArray
    changed_sum: FloatArray
    changed_sum_sq: FloatArray
    changed_sum_cube: FloatArray
    #: observations with a trusted Last-Modified age and the sum of the ages (see
    #: :func:`with_trusted_ages`); ``aged_changed`` counts the changed intervals among them,
    #: which then left ``n_changed`` and the ``changed_sum*``, and ``aged_changed_days`` their
    #: length (for reports; None: no ages)
    aged_count: FloatArray | None = None
    aged_days: FloatArray | None = None
    aged_changed: IntArray | None = None
    aged_changed_days: FloatArray | None = None

    @property
    def size(self) -> int:
        return int(self.page_ids.shape[0])

    def ages(self) -> tuple[FloatArray, FloatArray]:
        """``(aged_count, aged_days)`` per page, zeros when there are none."""
        return _ages(self.aged_count, self.aged_days, self.size)

    # the derived per-page sums are computed once (the fields are never changed): callers
    # index them block by block, which would otherwise pay a pass over every page a block

    @cached_property
    def all_changed(self) -> IntArray:
        """Changed intervals, with or without an age (what a report calls changes seen)."""
        if self.aged_changed is None:
            return self.n_changed
        return self.n_changed + self.aged_changed

    @cached_property
    def observed_days(self) -> FloatArray:
        """Days between observations (the aged changed intervals included)."""
        if self.aged_changed_days is None:
            return self.unchanged_days + self.changed_sum
        return self.unchanged_days + self.changed_sum + self.aged_changed_days

    @classmethod
    def checked(
        cls,
        page_ids: ArrayLike,
        n_intervals: ArrayLike,
        n_changed: ArrayLike,
        unchanged_days: ArrayLike,
        changed_sum: ArrayLike,
        changed_sum_sq: ArrayLike,
        changed_sum_cube: ArrayLike,
        *,
        check_unique: bool = True,
    ) -> PageMoments:
        """Validated moments; raises EstimationInputError naming what is wrong."""
        out = cls(
            _as_int(page_ids, "page_ids"),
            _as_int(n_intervals, "n_intervals"),
            _as_int(n_changed, "n_changed"),
            _as_float(unchanged_days, "unchanged_days"),
            _as_float(changed_sum, "changed_sum"),
            _as_float(changed_sum_sq, "changed_sum_sq"),
            _as_float(changed_sum_cube, "changed_sum_cube"),
        )
        arrays = (
            out.page_ids,
            out.n_intervals,
            out.n_changed,
            out.unchanged_days,
            out.changed_sum,
            out.changed_sum_sq,
            out.changed_sum_cube,
        )
        if len({a.shape for a in arrays}) != 1 or out.page_ids.ndim != 1:
            raise EstimationInputError("per-page moment arrays must be 1-D and of equal length")
        if check_unique and np.unique(out.page_ids).shape[0] != out.size:
            raise EstimationInputError("page_ids must be unique in per-page statistics")
        n_int, n_chg = out.n_intervals, out.n_changed
        _check_counts(n_int, n_chg)
        if (out.unchanged_days < 0).any() or (out.changed_sum < 0).any():
            raise EstimationInputError("interval sums must be non-negative")
        if ((n_int > n_chg) & ~(out.unchanged_days > 0)).any() or (
            (n_chg > 0) & ~(out.changed_sum > 0)
        ).any():
            raise EstimationInputError("pages with intervals must have positive interval sums")
        return out

    @property
    def changed_days(self) -> FloatArray:
        return self.changed_sum

    def take(self, pages: IntArray) -> IntervalStats:
        """Node-form statistics of some pages (sorted positions).

        A run of consecutive positions (every page of a block observed, typically) is read
        as a slice: views, not a gather of every column.
        """
        n = pages.shape[0]
        if n and int(pages[-1]) - int(pages[0]) == n - 1 and bool((pages[1:] > pages[:-1]).all()):
            return self.rows(slice(int(pages[0]), int(pages[-1]) + 1)).to_stats()
        return self.rows(pages).to_stats()

    def page_range(self, lo: int, hi: int) -> IntervalStats:
        """Node-form statistics of pages ``lo`` to ``hi - 1``."""
        return self.rows(slice(lo, hi)).to_stats()

    def rows(self, index: IntArray | slice) -> PageMoments:
        return PageMoments(
            self.page_ids[index],
            self.n_intervals[index],
            self.n_changed[index],
            self.unchanged_days[index],
            self.changed_sum[index],
            self.changed_sum_sq[index],
            self.changed_sum_cube[index],
            None if self.aged_count is None else self.aged_count[index],
            None if self.aged_days is None else self.aged_days[index],
            None if self.aged_changed is None else self.aged_changed[index],
            None if self.aged_changed_days is None else self.aged_changed_days[index],
        )

    def to_stats(self) -> IntervalStats:
        """Node-form statistics: one or two quadrature nodes per page that changed."""
        n_chg = self.n_changed
        # Nodes page by page, first then second (sorted by page, as the solver wants); the
        # quadrature only for pages that changed (most pages of a large web did not)
        first = np.flatnonzero(n_chg > 0)
        t1, w1, t2, w2 = two_point_quadrature(
            n_chg[first].astype(np.float64),
            self.changed_sum[first],
            self.changed_sum_sq[first],
            self.changed_sum_cube[first],
        )
        has_second = w2 > 0
        second = first[has_second]
        slot_first = np.arange(first.shape[0]) + np.cumsum(has_second) - has_second
        slot_second = slot_first[has_second] + 1
        total = first.shape[0] + second.shape[0]
        node_page = np.empty(total, dtype=np.int64)
        node_days = np.empty(total)
        node_weight = np.empty(total)
        node_page[slot_first], node_page[slot_second] = first, second
        node_days[slot_first], node_days[slot_second] = t1, t2[has_second]
        node_weight[slot_first], node_weight[slot_second] = w1, w2[has_second]
        return IntervalStats(
            page_ids=self.page_ids,
            n_intervals=self.n_intervals,
            n_changed=n_chg,
            unchanged_days=self.unchanged_days,
            changed_days=self.changed_sum,
            node_page=node_page,
            node_days=node_days,
            node_weight=node_weight,
            aged_count=self.aged_count,
            aged_days=self.aged_days,
        )


@dataclass(frozen=True)
class PageAges:
    """Per page, what Last-Modified told about its changes (before judging its host).

    ``count`` observations came with a usable age (a recent first observation, or a changed
    one whose Last-Modified falls after the previous visit; ``models.fetching.validators.
    judge_last_modified``) and ``days`` sums those ages and the horizon of first
    observations whose last change is older. Of them, ``n_changed`` were changed
    intervals, whose lengths' first three powers sum to ``changed_sum*``: these are also in
    the page's censored statistics, and leave them when the page's host is trusted.
    """

    count: FloatArray
    days: FloatArray
    n_changed: IntArray
    changed_sum: FloatArray
    changed_sum_sq: FloatArray
    changed_sum_cube: FloatArray

    @classmethod
    def zeros(cls, size: int) -> PageAges:
        z = np.zeros(size)
        return cls(z, z.copy(), np.zeros(size, dtype=np.int64), z.copy(), z.copy(), z.copy())


def with_trusted_ages(
    moments: PageMoments, ages: PageAges, trusted: NDArray[np.bool_]
) -> PageMoments:
    """The moments with the ages of ``trusted`` pages in the likelihood (the production step).

    A changed visit with a trusted age ``A`` contributes ``log r - r A`` (the density of the
    last change at ``A`` before the visit, none since) instead of ``log(1 - exp(-r t))``;
    a first observation with a trusted age contributes ``log r - r A`` as well. Over a page,
    ``K log r - r S``: conjugate with a Gamma prior, whose shape gains ``K`` and rate ``S``.
    Untrusted pages keep their censored statistics. Shapes must match; ``trusted`` is per
    page (its host's verdict, ``models.fetching.validators.last_modified_trusted``).
    """
    size = moments.size
    for name, values in (("ages", ages.count), ("trusted", trusted)):
        if values.shape != (size,):
            raise EstimationInputError(f"{name} must have one entry per page ({size})")
    use = np.asarray(trusted, dtype=bool) & (ages.days > 0)
    k_changed = np.where(use, ages.n_changed, 0).astype(np.int64)
    n_changed = moments.n_changed - k_changed
    if (n_changed < 0).any():
        raise EstimationInputError("pages have more aged changed intervals than changed ones")
    left = n_changed > 0

    def minus(total: FloatArray, part: FloatArray) -> FloatArray:
        return np.where(left, np.maximum(total - np.where(use, part, 0.0), 0.0), 0.0)

    return PageMoments(
        moments.page_ids,
        moments.n_intervals,
        n_changed,
        moments.unchanged_days,
        minus(moments.changed_sum, ages.changed_sum),
        minus(moments.changed_sum_sq, ages.changed_sum_sq),
        minus(moments.changed_sum_cube, ages.changed_sum_cube),
        np.where(use, ages.count, 0.0),
        np.where(use, ages.days, 0.0),
        k_changed,
        np.where(use, ages.changed_sum, 0.0),
    )


def _ages(
    count: FloatArray | None, days: FloatArray | None, size: int
) -> tuple[FloatArray, FloatArray]:
    if count is None or days is None:
        return np.zeros(size), np.zeros(size)
    return count, days


@dataclass(frozen=True)
class GammaPrior:
    """Gamma(shape, rate) priors on change rates: one pair per group, ``index`` maps pages.

    A prior's mean is ``shape / rate`` changes/day; ``rate`` acts as pseudo-days of
    observation without change and ``shape`` as pseudo-changes. ``index`` (one entry per
    page) names each page's group; with ``index=None`` the pairs are per page.
    """

    shape: FloatArray
    rate: FloatArray
    index: IntArray | None = None

    def per_page(self, size: int) -> tuple[FloatArray, FloatArray]:
        shape = np.asarray(self.shape, dtype=np.float64)
        rate = np.asarray(self.rate, dtype=np.float64)
        if self.index is None:
            return np.broadcast_to(shape, (size,)).copy(), np.broadcast_to(rate, (size,)).copy()
        return shape[self.index], rate[self.index]

    def page_range(self, lo: int, hi: int, size: int) -> GammaPrior:
        """The priors of pages ``lo`` to ``hi - 1`` (of ``size`` pages)."""
        if self.index is not None:
            return GammaPrior(self.shape, self.rate, self.index[lo:hi])
        shape = np.broadcast_to(np.asarray(self.shape, dtype=np.float64), (size,))
        rate = np.broadcast_to(np.asarray(self.rate, dtype=np.float64), (size,))
        return GammaPrior(shape[lo:hi], rate[lo:hi])

    def quantile(self, q: float, extra_days: FloatArray) -> FloatArray:
        """Per-page q-quantile of Gamma(shape, rate + extra_days)."""
        shape = np.asarray(self.shape, dtype=np.float64)
        rate = np.asarray(self.rate, dtype=np.float64)
        values, which = np.unique(shape, return_inverse=True)  # the special function is slow
        base = special.gammaincinv(values, q)[which.reshape(shape.shape)]
        if self.index is None:
            out: FloatArray = np.broadcast_to(base, extra_days.shape) / (rate + extra_days)
            return out
        return base[self.index] / (rate[self.index] + extra_days)


@dataclass(frozen=True)
class RateEstimates:
    """Per-page change-rate estimates, aligned with ``page_ids``.

    ``rate`` is the estimate (changes/day); ``log_std`` the standard error of its
    logarithm (Laplace approximation), ``rate_low``/``rate_high`` a 90% interval (for
    pages that never changed under a prior, the exact Gamma posterior's quantiles);
    ``prior_rate`` the group prior's mean the page was smoothed toward (NaN without one).

    ``prior_used`` names the prior the estimates come from (``"mixture"``, ``"empirical"``,
    ``"none"``, ``"weak"``: the fixed :func:`weak_prior`, or ``"given"``: a
    :class:`GammaPrior` the caller passed); ``prior_fallback`` says why a stronger prior
    asked for was not used ("" when it was).
    """

    page_ids: IntArray
    rate: FloatArray
    log_std: FloatArray
    rate_low: FloatArray
    rate_high: FloatArray
    n_intervals: IntArray
    n_changed: IntArray
    observed_days: FloatArray
    prior_rate: FloatArray
    prior_used: str = "given"
    prior_fallback: str = ""

    def prior_description(self) -> str:
        """One line naming the prior used, and why if it is not the one asked for."""
        if not self.prior_fallback:
            return f"prior: {self.prior_used}"
        return f"prior: {self.prior_used} (fallback: {self.prior_fallback})"


#: The fixed weak prior, Gamma(0.5, 15): vague, centred on one change a month. What pages
#: get when no prior can be fitted (no observed page, or a fit that failed), and the pages
#: without any observation under ``prior="none"``.
WEAK_PRIOR_SHAPE = 0.5
WEAK_PRIOR_RATE = 15.0


def weak_prior(codes: IntArray, n_groups: int) -> GammaPrior:
    """:data:`WEAK_PRIOR_SHAPE` / :data:`WEAK_PRIOR_RATE` for each of ``n_groups`` groups."""
    return GammaPrior(
        np.full(n_groups, WEAK_PRIOR_SHAPE), np.full(n_groups, WEAK_PRIOR_RATE), codes
    )


def group_codes(groups: ArrayLike | None, size: int) -> IntArray:
    """Dense integer codes for per-page group labels (used as-is if already small ints)."""
    if groups is None:
        return np.zeros(size, dtype=np.int64)
    g = np.asarray(groups)
    if g.shape != (size,):
        raise EstimationInputError(f"groups must have one entry per page ({size}), got {g.shape}")
    if g.dtype.kind in "iu" and size and g.min() >= 0 and g.max() < 2 * size:
        return g.astype(np.int64)
    _, inverse = np.unique(g, return_inverse=True)
    return inverse.astype(np.int64)


def select_pages(stats: IntervalStats, pages: IntArray) -> IntervalStats:
    """The statistics of some pages (sorted indices), nodes renumbered."""
    keep = np.zeros(stats.size, dtype=bool)
    keep[pages] = True
    new_index = np.cumsum(keep) - 1
    node_keep = keep[stats.node_page]
    return IntervalStats(
        page_ids=stats.page_ids[pages],
        n_intervals=stats.n_intervals[pages],
        n_changed=stats.n_changed[pages],
        unchanged_days=stats.unchanged_days[pages],
        changed_days=stats.changed_days[pages],
        node_page=new_index[stats.node_page[node_keep]],
        node_days=stats.node_days[node_keep],
        node_weight=stats.node_weight[node_keep],
        aged_count=None if stats.aged_count is None else stats.aged_count[pages],
        aged_days=None if stats.aged_days is None else stats.aged_days[pages],
    )


def _as_float(values: ArrayLike, name: str) -> FloatArray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise EstimationInputError(f"{name} must be numeric: {exc}") from None
    if np.isnan(arr).any():
        raise EstimationInputError(f"{name} contains NaN/missing values")
    return arr


def _as_int(values: ArrayLike, name: str) -> IntArray:
    arr = np.asarray(values)
    if arr.dtype.kind not in "iu":
        raise EstimationInputError(f"{name} must be integers, got dtype {arr.dtype}")
    return arr.astype(np.int64, copy=False)


def _check_counts(n: NDArray[Any], x: NDArray[Any]) -> None:
    if (n < 0).any() or (x < 0).any() or (x > n).any():
        raise EstimationInputError("need 0 <= changes <= n for every page")


def _check_positive(values: FloatArray, name: str) -> None:
    bad = ~(values > 0) | ~np.isfinite(values)
    if bad.any():
        raise EstimationInputError(
            f"{name} must be positive and finite; {int(bad.sum())} value(s) are not "
            f"(first: {values[bad].ravel()[0]!r})"
        )


def moments_with_last_modified(
    moments: PageMoments,
    ages: PageAges,
    host_evidence: IntArray,
    page_host: IntArray,
) -> PageMoments:
    """The planner's per-page statistics: censored sums, plus the ages of trusted hosts.

    ``host_evidence`` (hosts x ``LM_CODES``) counts what ``models.fetching.validators.
    judge_last_modified`` said of each host's observations; ``page_host`` codes each page's
    host. Hosts ``last_modified_trusted`` trusts get their pages' ages into the likelihood
    (:func:`with_trusted_ages`); the others keep "changed since the last visit" only. The
    backtest's planner and ``tasks/cycle/estimation.py`` both build their moments here.
    """
    from models.fetching.validators import last_modified_trusted

    if page_host.shape != (moments.size,):
        raise EstimationInputError(f"page_host must have one entry per page ({moments.size})")
    if not (ages.days > 0).any():
        return moments
    trusted = last_modified_trusted(host_evidence)
    return with_trusted_ages(moments, ages, trusted[page_host])
