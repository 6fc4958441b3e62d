"""Periodic pages: which pages change exactly once every P cycles, and at which phase.

A Poisson model sees a page that changes every 7 days as a rate of 1/7 and visits it at
random moments of its week; a crawler that knows the period and the phase visits it on the
first cycle after each change and keeps it fresh for the whole period. This module detects
such pages from what the history already records: each visit's time and whether the page
"changed since the last visit" (no Last-Modified needed).

Time is counted in whole cycles (a visit at time ``t`` days, cycles of ``cycle_days``, is at
cycle boundary ``b = round(t / cycle_days)``; the backtest's visits are at whole days). For a
candidate period ``P`` (whole cycles) the *phase* is the cell ``a`` in ``0..P-1`` such that the
page changes once in every cycle ``j`` with ``j = a (mod P)`` (cycle ``j`` is the time from
boundary ``j - 1`` to ``j``: the first visit boundary at or after the change). An interval
between visits at boundaries ``b0 < b1`` covers the cells ``b0 + 1 .. b1``:

* changed: some covered cell is ``a`` mod P, so ``a`` is among the covered cells (all of
  them when ``b1 - b0 >= P``: no information);
* unchanged: no covered cell is ``a`` mod P, so ``a`` is outside them (none left when
  ``b1 - b0 >= P``: the period is refuted).

So each observation allows a set of phases, and the phases consistent with a whole history
are the intersection of those sets: one ``P``-bit mask per page and period
(:func:`interval_masks`), AND-ed observation by observation (:meth:`PhaseHistory.record`,
the backtest's daily updates) or over a history's rows at once
(:meth:`PhaseHistory.from_rows`, the same masks: AND is associative). Candidate periods are
the whole cycles 2..30 (:data:`PERIODS`, 29 masks of at most 30 bits, one ``uint64`` each):
every schedule from "every other day" to "monthly" with daily cycles, not only the ones a
simulator uses. One cycle is left out on purpose: a page changing every cycle is seen
changed at every visit, as a Poisson page changing several times a cycle is, and no visit
time can do better than once a cycle for either; periods beyond 30 cycles are left out
because a history of a few months cannot test them.

:func:`detect` believes a period only on evidence (:class:`DetectionRule`): the history's
probability under "one change every P cycles at a phase uniform over the P cells" (the share
of phases still consistent) against its probability under the page's best Poisson fit (kept
per page at the rates of :data:`RATE_GRID`), less the log of the number of periods tried.
A Poisson page changing at random seldom lines its changes up with one phase, and when its
visits are too sparse to tell (every interval as long as the period, say) both hypotheses
explain the history equally and nothing is believed. The false-positive share on webs
without periodic pages is measured by ``benchmarks/bench_backtest_learning.py`` (the
planner's report) and bounded in the tests. :func:`outlook` turns the detected periods and
phases into what a planner needs at a given cycle: the chance the expected change has
happened since the last visit (the share of consistent phases passed since then) and the
fresh days a visit now buys (until the next change, averaged over the consistent phases).

Pure numpy: no I/O; every function is vectorized over pages.
"""

from __future__ import annotations

import itertools
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike, NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]
MaskArray = NDArray[np.uint64]

#: Candidate periods, in whole cycles (see the module docstring for why 2..30).
PERIODS: IntArray = np.arange(2, 31, dtype=np.int64)
#: Poisson rates (changes a day) the alternative hypothesis is scored at: the best of them
#: stands for a page's Poisson fit (1.35x apart: the best is within ~0.01 nats an
#: observation of the fit's maximum).
RATE_GRID: FloatArray = np.geomspace(1e-3, 10.0, 32)
#: Rows :meth:`PhaseHistory.from_rows` works on at a time.
CHUNK_ROWS = 1 << 18


class PeriodicInputError(ValueError):
    """Inputs of the periodicity detector that do not fit together; says which."""


_FULL: MaskArray = (np.uint64(1) << PERIODS.astype(np.uint64)) - np.uint64(1)


def full_masks(n_pages: int) -> MaskArray:
    """Masks of pages with no observation yet: every phase of every period consistent."""
    return np.tile(_FULL, (n_pages, 1))


def covered_cells(start: ArrayLike, end: ArrayLike) -> MaskArray:
    """Per interval ``(start, end]`` (cycle boundaries) and period, the phases it covers:
    the cells ``start + 1 .. end`` mod P as a P-bit mask (all P bits from P cells on)."""
    b0 = np.asarray(start, dtype=np.int64)
    b1 = np.asarray(end, dtype=np.int64)
    if b0.ndim != 1 or b0.shape != b1.shape:
        raise PeriodicInputError("interval starts and ends must be aligned 1-D arrays")
    if (b1 < b0).any():
        raise PeriodicInputError("an interval ends before it starts")
    p = PERIODS[None, :]
    length = np.minimum((b1 - b0)[:, None], p).astype(np.uint64)
    run = (np.uint64(1) << length) - np.uint64(1)
    shift = ((b0[:, None] + 1) % p).astype(np.uint64)
    rotated = (run << shift) | (run >> (p.astype(np.uint64) - shift))
    out: MaskArray = rotated & _FULL[None, :]
    return out


def interval_masks(start: ArrayLike, end: ArrayLike, changed: ArrayLike) -> MaskArray:
    """The phases each observation allows, per period (rows: observations): the covered
    cells if it changed, the others if not (none if it saw no change over P cells or more)."""
    cover = covered_cells(start, end)
    hit = np.asarray(changed, dtype=bool)
    if hit.shape != (cover.shape[0],):
        raise PeriodicInputError("one changed flag per interval")
    out: MaskArray = np.where(hit[:, None], cover, _FULL[None, :] & ~cover)
    return out


def poisson_loglik(interval_days: ArrayLike, changed: ArrayLike) -> FloatArray:
    """Per observation (rows) and rate of :data:`RATE_GRID`, the log-probability of what it
    saw under a Poisson page: ``log(1 - e^(-r L))`` if it changed, ``-r L`` if not."""
    length = np.asarray(interval_days, dtype=np.float64)
    hit = np.asarray(changed, dtype=bool)
    if length.ndim != 1 or hit.shape != length.shape or (length <= 0).any():
        raise PeriodicInputError("one positive interval length per changed flag")
    x = RATE_GRID[None, :] * length[:, None]
    with np.errstate(divide="ignore"):
        out: FloatArray = np.where(hit[:, None], np.log(-np.expm1(-x)), -x)
    return out


@dataclass
class PhaseHistory:
    """What the detector keeps per page: the phase masks of every candidate period
    (``masks``, pages x :data:`PERIODS`) and the Poisson log-likelihood of the same
    observations at every rate of :data:`RATE_GRID` (``loglik``, pages x rates)."""

    masks: MaskArray
    loglik: FloatArray

    def __post_init__(self) -> None:
        n = self.masks.shape[0]
        if self.masks.shape != (n, PERIODS.shape[0]) or self.loglik.shape != (
            n,
            RATE_GRID.shape[0],
        ):
            raise PeriodicInputError("a phase history needs one mask a period, one value a rate")

    @classmethod
    def empty(cls, n_pages: int) -> PhaseHistory:
        """Pages with no observation yet."""
        return cls(full_masks(n_pages), np.zeros((n_pages, RATE_GRID.shape[0])))

    @property
    def size(self) -> int:
        return int(self.masks.shape[0])

    def record(
        self,
        pages: IntArray,
        start: ArrayLike,
        end: ArrayLike,
        interval_days: ArrayLike,
        changed: ArrayLike,
    ) -> None:
        """Add one observation of each of ``pages`` (distinct), in place: visits at cycle
        boundaries ``start`` and ``end``, ``interval_days`` apart, and whether it changed."""
        self.masks[pages] &= interval_masks(start, end, changed)
        self.loglik[pages] += poisson_loglik(interval_days, changed)

    @classmethod
    def from_rows(
        cls,
        page: IntArray,
        start: ArrayLike,
        end: ArrayLike,
        interval_days: ArrayLike,
        changed: ArrayLike,
        n_pages: int,
    ) -> PhaseHistory:
        """The history of ``n_pages`` pages from all their observations at once (rows in
        any order, ``page`` their positions): what :meth:`record` leaves after recording
        them one by one (an AND and a sum per page: the order does not matter)."""
        page = np.asarray(page, dtype=np.int64)
        out = cls.empty(n_pages)
        if page.shape[0] == 0:
            return out
        if page.min() < 0 or page.max() >= n_pages:
            raise PeriodicInputError("observation pages must index the pages")
        order = np.argsort(page, kind="stable")
        sorted_pages = page[order]
        b0, b1 = np.asarray(start)[order], np.asarray(end)[order]
        days, hit = np.asarray(interval_days)[order], np.asarray(changed)[order]
        starts = np.r_[0, np.flatnonzero(np.diff(sorted_pages)) + 1]
        # a few pages' rows at a time (whole pages: ~CHUNK_ROWS rows), so the per-row
        # masks and log-likelihoods (488 bytes a row) stay small whatever the history
        bounds = starts[np.searchsorted(starts, np.arange(0, page.shape[0], CHUNK_ROWS))]
        bounds = np.unique(np.r_[bounds, page.shape[0]])
        for lo, hi in itertools.pairwise(bounds):
            first = starts[(starts >= lo) & (starts < hi)]
            local = first - lo
            rows = sorted_pages[first]
            part = slice(int(lo), int(hi))
            allowed = interval_masks(b0[part], b1[part], hit[part])
            out.masks[rows] = np.bitwise_and.reduceat(allowed, local, axis=0)
            ll = poisson_loglik(days[part], hit[part])
            out.loglik[rows] = np.add.reduceat(ll, local, axis=0)
        return out


@dataclass(frozen=True)
class DetectionRule:
    """When a period is believed (see the module docstring).

    The evidence is the log Bayes factor of "changes once every P cycles, at a phase
    uniform over the P cells" (the history's probability: consistent phases / P) against
    the page's best Poisson fit (the best rate of :data:`RATE_GRID`: a fit to the same
    history, so the comparison leans towards Poisson), less the log of the number of
    candidate periods (the best of 29 is picked). A period is believed from
    ``min_log_odds`` nats on, after ``min_changes`` changes seen, while at most
    ``max_phases`` phases are left (a window the planner's visits then narrow). At 3 nats
    0.13% of the test's Poisson pages are believed periodic and 0.05-0.1% of the backtest's
    webs without periodic pages; at 1.5 nats those few pinned pages cost the planner 1-4
    points of gap at 0.2 N there (the session-15 report of the ``periodic`` helper).
    """

    min_log_odds: float = 3.0
    min_changes: int = 2
    max_phases: int = 4
    #: pages not believed whose best period has this much evidence or more are candidates
    #: the planner probes (``planning_outlook``; infinite: no probes) ...
    probe_log_odds: float = -4.0
    #: ... once this share of the pages with ``min_changes`` changes is believed periodic
    #: (a web that has shown none is not worth the probes' visits)
    probe_share: float = 0.005

    def __post_init__(self) -> None:
        if self.min_changes < 1 or self.max_phases < 1 or not np.isfinite(self.min_log_odds):
            raise PeriodicInputError("detection rule: changes and phases at least 1, odds finite")


#: The rule the planner runs by default (``plan_cycle``, the backtest's deployed planner).
DEFAULT_RULE = DetectionRule()


@dataclass(frozen=True)
class PeriodicPages:
    """Detected pages: ``period`` in cycles (0 where none is believed), ``phases`` the mask
    of the phases (cells mod period) still consistent with the page's history, and the
    evidence (``log_odds``, :class:`DetectionRule`; 0 where none is believed)."""

    period: IntArray
    phases: MaskArray
    log_odds: FloatArray

    @property
    def detected(self) -> NDArray[np.bool_]:
        out: NDArray[np.bool_] = self.period > 0
        return out

    def width(self) -> IntArray:
        """Consistent phases per page (0 where nothing is detected)."""
        out: IntArray = np.bitwise_count(self.phases).astype(np.int64)
        return out


def detect(
    history: PhaseHistory, n_changed: ArrayLike, rule: DetectionRule | None = None
) -> PeriodicPages:
    """Each page's believed period (the best supported, if ``rule`` believes it) and its
    consistent phases; ``n_changed`` counts each page's changed intervals."""
    rule = rule or DetectionRule()
    changes = np.asarray(n_changed, dtype=np.int64)
    if changes.shape != (history.size,):
        raise PeriodicInputError("one count of changes per page of the history")
    width = np.bitwise_count(history.masks).astype(np.float64)
    with np.errstate(divide="ignore"):
        support = np.log(width) - np.log(PERIODS.astype(np.float64))[None, :]
    best = np.argmax(support, axis=1)  # ties: the smallest period (a divisor of the others)
    rows = np.arange(history.size)
    odds = support[rows, best] - np.log(PERIODS.shape[0]) - history.loglik.max(axis=1)
    believed = (
        (odds >= rule.min_log_odds)
        & (width[rows, best] <= rule.max_phases)
        & (changes >= rule.min_changes)
    )
    period = np.where(believed, PERIODS[best], 0).astype(np.int64)
    phases = np.where(believed, history.masks[rows, best], np.uint64(0)).astype(np.uint64)
    return PeriodicPages(period, phases, np.where(believed, odds, 0.0))


@dataclass(frozen=True)
class PeriodicOutlook:
    """What planning needs of each page at one cycle (aligned with the planned pages).

    ``period`` in days (0: not periodic, planned as a Poisson page); ``p_changed`` the share
    of its consistent phases passed since its last visit (the chance the copy is stale);
    ``gain`` the fresh days a visit now buys, expected over the consistent phases (0 for a
    phase that has not passed: the copy is still fresh)."""

    period: FloatArray
    p_changed: FloatArray
    gain: FloatArray
    #: candidates (pages not believed periodic whose best period has some support): the
    #: period in days (0 where none) and the share of its consistent phases passed since
    #: the last visit (what it predicts for a visit now; the planner probes a candidate
    #: where that is most uncertain or most unlike its Poisson estimate's prediction)
    probe_period: FloatArray | None = None
    probe_p_changed: FloatArray | None = None

    @property
    def size(self) -> int:
        return int(self.period.shape[0])

    def only(self, keep: NDArray[np.bool_]) -> PeriodicOutlook:
        """The same outlook with the pages outside ``keep`` planned as Poisson pages (the
        probes stay)."""
        return PeriodicOutlook(
            np.where(keep, self.period, 0.0),
            np.where(keep, self.p_changed, 0.0),
            np.where(keep, self.gain, 0.0),
            self.probe_period,
            self.probe_p_changed,
        )


def outlook(
    detected: PeriodicPages, last_visit: ArrayLike, now: ArrayLike, *, cycle_days: float = 1.0
) -> PeriodicOutlook:
    """Each detected page's chance of a change since ``last_visit`` and the fresh days a
    visit at ``now`` buys (both cycle boundaries; a page never visited is not periodic).

    A phase ``a`` has passed when a cell ``a`` mod P lies in ``last_visit + 1 .. now``; the
    next change after ``now`` is then in the first such cell after ``now``, on average half a
    cycle before its end, so a visit now keeps the copy fresh until then."""
    period = detected.period
    n = period.shape[0]
    b0 = np.asarray(last_visit, dtype=np.float64)
    b1 = np.broadcast_to(np.asarray(now, dtype=np.float64), (n,))
    on = detected.detected & np.isfinite(b0) & (b1 > b0)
    p_changed, gain = np.zeros(n), np.zeros(n)
    if on.any():
        idx = np.flatnonzero(on)
        p = period[idx]
        start, end = b0[idx].astype(np.int64), b1[idx].astype(np.int64)
        cells = np.arange(int(p.max()), dtype=np.int64)[None, :]
        bits = ((detected.phases[idx][:, None] >> cells.astype(np.uint64)) & np.uint64(1)) > 0
        bits &= cells < p[:, None]
        # cells passed: (start, end] mod P, all of them from P cells on
        offset = (cells - start[:, None] - 1) % p[:, None]  # cell a is start + 1 + offset
        passed = bits & (offset < (end - start)[:, None])
        # next change after ``end`` at phase a: the first cell j > end with j = a mod P
        ahead = (cells - end[:, None] - 1) % p[:, None] + 1  # j - end, in 1..P
        fresh = (ahead - 0.5) * cycle_days
        width = bits.sum(axis=1)
        p_changed[idx] = passed.sum(axis=1) / np.maximum(width, 1)
        gain[idx] = np.where(passed, fresh, 0.0).sum(axis=1) / np.maximum(width, 1)
    return PeriodicOutlook(np.where(on, period * cycle_days, 0.0), p_changed, gain)


def to_cells(days: ArrayLike, cycle_days: float = 1.0) -> FloatArray:
    """Times in days (NaN: never) as cycle boundaries (rounded to the nearest)."""
    if not cycle_days > 0:
        raise PeriodicInputError(f"cycle_days must be positive, got {cycle_days}")
    out: FloatArray = np.rint(np.asarray(days, dtype=np.float64) / cycle_days)
    return out


def planning_outlook(
    history: PhaseHistory,
    n_changed: ArrayLike,
    last_visit: ArrayLike,
    now: float,
    *,
    rule: DetectionRule | None = None,
    cycle_days: float = 1.0,
) -> PeriodicOutlook:
    """What the planner is told of periodic pages at the cycle boundary ``now``: the
    believed ones (:func:`detect`, :func:`outlook`), and the candidates: pages whose best
    period has some support (``rule.probe_log_odds``, ``rule.min_changes`` changes or more)
    but not enough, with what that period predicts for a visit now, once a share of the
    pages (``rule.probe_share``) is believed periodic (one home for the
    backtest's deployed planner and ``plan_cycle``; ``models.planning.select`` probes
    them)."""
    rule = rule or DetectionRule()
    believed = detect(history, n_changed, rule)
    seen = outlook(believed, last_visit, now, cycle_days=cycle_days)
    changes = np.asarray(n_changed)
    shown = np.count_nonzero(believed.detected) >= rule.probe_share * np.count_nonzero(
        changes >= rule.min_changes
    )
    if not np.isfinite(rule.probe_log_odds) or not shown:
        return seen
    loose = DetectionRule(rule.probe_log_odds, rule.min_changes, int(PERIODS.max()))
    maybe = detect(history, n_changed, loose)
    candidate = maybe.detected & ~believed.detected
    trial = outlook(
        PeriodicPages(np.where(candidate, maybe.period, 0), maybe.phases, maybe.log_odds),
        last_visit,
        now,
        cycle_days=cycle_days,
    )
    on = trial.period > 0
    return PeriodicOutlook(
        seen.period,
        seen.p_changed,
        seen.gain,
        trial.period,
        np.where(on, trial.p_changed, np.nan),
    )
