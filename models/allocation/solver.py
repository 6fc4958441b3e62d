"""The direct allocation solver: every evaluation is an exact pass over the pages.

At a budget multiplier ``mu`` every page's frequency follows from phi^-1 (see
:mod:`models.allocation.table`), and each host whose capacity binds gets its own
multiplier ``nu`` so its load meets the capacity exactly. ``nu`` is found per binding host
by a vectorized safeguarded search (Newton until bracketed, then false position with the
Illinois modification); ``mu`` by safeguarded Newton/secant on log mu over the spend.
Exact and robust, it costs tens of passes over the pages: big problems go through
:mod:`models.allocation.local`, which uses this solver on a sample for its start and as
its fallback.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from typing import TYPE_CHECKING, Any

import numpy as np
from numpy.typing import NDArray

from models.allocation.freshness import FRESHNESS, Objective, freshness
from models.allocation.problem import AllocationInputError
from models.allocation.table import inverse_of
from models.estimation.rate_solver import bincount, map_chunks

if TYPE_CHECKING:
    from models.allocation.problem import AllocationProblem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

TOLERANCE = 1e-11  # relative gap accepted on the budget and on each binding capacity
_SMALL_R = 1e-3  # models.allocation.freshness's threshold for its series (r = rate / f)
_SAMPLE = 1 << 16  # pages of the random sample that finds a start for the budget multiplier


@dataclass
class _Point:
    """Frequencies at one budget multiplier, with each binding host's multiplier solved."""

    frequencies: FloatArray
    host_nu: FloatArray
    spend: float
    slope: float  # d spend / d mu, host multipliers following


@dataclass(frozen=True)
class _Sample:
    """Host capacities ignored, the spend of a sample of pages at a budget multiplier."""

    solver: _HostSolver
    pages: tuple[NDArray[Any], ...]
    budget: float

    def evaluate(self, mu: float) -> _Point:
        cost = self.pages[6]
        f, s = self.solver.page_frequencies(mu * cost, self.pages)
        return _Point(f, np.zeros(0), float(np.sum(cost * f)), float(np.sum(cost * cost * s)))


class _HostSolver:
    """Frequencies at a budget multiplier, with each binding host's multiplier solved."""

    def __init__(
        self, problem: AllocationProblem, scale: FloatArray, tolerance: float = TOLERANCE
    ) -> None:
        self.p = problem
        self.tolerance = tolerance
        # a page with nothing to gain (infinite scale) is pinned at its minimum: scale 0
        # keeps t = m * scale finite (no 0 x inf) and its upper bound is its minimum
        nothing = np.isinf(scale)
        self.scale = np.where(nothing, 0.0, scale)
        self.f_max = np.where(nothing, problem.min_frequency, problem.max_frequency)
        self.inverse = inverse_of(problem.objective)
        n_hosts = problem.host_capacity.shape[0]
        self.limited = np.isfinite(problem.host_capacity)
        # warm start: the last solution's host multipliers and how they move with mu
        self.mu = 0.0
        self.nu = np.zeros(n_hosts)
        self.nu_slope = np.zeros(n_hosts)
        self._subset_key: bytes = b""
        self._subset: tuple[NDArray[Any], ...] = ()
        self._bounds_key: bytes | None = None  # no key: packbits may give any byte string
        self._bounds: tuple[FloatArray, FloatArray] = (np.zeros(0), np.zeros(0))

    def page_frequencies(
        self, m: FloatArray, pages: tuple[NDArray[Any], ...] | None = None
    ) -> tuple[FloatArray, FloatArray]:
        """f and df/dm at total multipliers ``m`` (all pages, or a cached subset)."""
        p = self.p
        if pages is None:
            scale, rates, f_min, f_max = self.scale, p.rates, p.min_frequency, self.f_max
        else:
            scale, rates, f_min, f_max = pages[2:6]
        f, slope = map_chunks(self.inverse.frequency, 2, m * scale, rates, scale, f_min, f_max)
        return f, slope

    def sample(self, size: int) -> _Sample:
        """A seeded random sample of pages, with the budget scaled to its share of pages."""
        p = self.p
        pages = np.sort(np.random.default_rng(0).choice(p.size, size, replace=False))
        return _Sample(self, self._gather(pages), p.budget * size / p.size)

    def _gather(self, pages: IntArray) -> tuple[NDArray[Any], ...]:
        """Index, host code, scale, rate, bounds and cost of ``pages``."""
        p = self.p
        return (
            pages,
            p.hosts[pages],
            self.scale[pages],
            p.rates[pages],
            p.min_frequency[pages],
            self.f_max[pages],
            p.costs[pages],
        )

    def _pages_of(self, binding: NDArray[np.bool_]) -> tuple[NDArray[Any], ...]:
        """The binding hosts' pages (see ``_gather``), cached while the set is the same.

        One more array at the end: each page's host as a position among the binding hosts
        (the host searches run over those only, not over every host).
        """
        key = np.packbits(binding).tobytes()
        if key != self._subset_key:
            sub = self._gather(np.flatnonzero(binding[self.p.hosts]))
            position = np.cumsum(binding) - 1
            self._subset = (*sub, position[sub[1]])
            self._subset_key = key
        return self._subset

    def evaluate(self, mu: float, *, with_hosts: bool = True) -> _Point:
        """The point at budget multiplier ``mu`` (host capacities ignored if not ``with_hosts``)."""
        p = self.p
        f, s = self.page_frequencies(mu * p.costs)
        nu = np.zeros_like(self.nu)
        nu_slope = np.zeros_like(self.nu)
        if with_hosts and self.limited.any():
            load = bincount(p.hosts, f, nu.shape[0])
            binding = self.limited & (load > p.host_capacity * (1 + self.tolerance))
            if binding.any():
                sub = self._pages_of(binding)
                g, gs, nu, nu_slope = self._solve_hosts(mu, binding, sub)
                f[sub[0]] = g
                s[sub[0]] = gs
                self.mu, self.nu, self.nu_slope = mu, nu, nu_slope
        c = p.costs
        # d spend / d mu = sum c s (c + d nu_h / d mu), with d nu_h / d mu = -a_h / d_h
        slope = float(np.sum(c * c * s)) + float(
            np.sum(nu_slope * bincount(p.hosts, c * s, nu.shape[0]))
        )
        return _Point(f, nu, float(np.sum(c * f)), slope)

    def _solve_hosts(
        self, mu: float, binding: NDArray[np.bool_], sub: tuple[NDArray[Any], ...]
    ) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
        """Each binding host's multiplier, all hosts at once.

        Newton steps until the root is bracketed, then false position with the Illinois
        modification: the load can fall steeply where pages are about to be given up (the
        slope at one end says nothing of a page about to re-enter), which defeats Newton and
        makes bisection slow. Hosts that are done drop out, and their pages with them.
        Per-host arrays hold the binding hosts only (a few of many, typically).
        """
        n_all = binding.shape[0]
        which = np.flatnonzero(binding)
        n_hosts = which.shape[0]
        cap = self.p.host_capacity[which]
        tol = self.tolerance * np.maximum(cap, 1e-300)
        host_of, cost = sub[7], sub[6]
        # bracket [lo, hi] of each host's multiplier, with the load gaps at both ends
        lo, gap_lo = np.zeros(n_hosts), np.full(n_hosts, np.nan)
        hi, gap_hi = self._upper_bounds(sub, n_hosts, cap)
        predicted = self.nu[which] + self.nu_slope[which] * (mu - self.mu)
        guess = np.clip(predicted, 0.0, hi)
        seen_hi = np.zeros(n_hosts, dtype=bool)  # hi evaluated (not just the a-priori bound)
        kept = np.zeros(n_hosts, dtype=np.int8)  # end the last step kept: 1 lo, -1 hi (Illinois)
        secants = np.zeros(n_hosts, dtype=np.int8)  # false-position steps since a bisection
        live = np.ones(n_hosts, dtype=bool)
        g_all, dg_all = np.empty(host_of.shape[0]), np.empty(host_of.shape[0])
        gap = np.zeros(n_hosts)
        pos = np.arange(host_of.shape[0])
        work = sub
        for _ in range(200):
            w_host = work[7]
            g, dg = self.page_frequencies(mu * work[6] + guess[w_host], work)
            g_all[pos], dg_all[pos] = g, dg
            gap = np.where(live, bincount(w_host, g, n_hosts) - cap, gap)
            slope = bincount(w_host, dg, n_hosts)
            above = live & (gap > 0)
            below = live & (gap <= 0)
            # Illinois: an end kept twice in a row has its gap halved
            gap_hi = np.where(above & (kept == -1), 0.5 * gap_hi, gap_hi)
            gap_lo = np.where(below & (kept == 1), 0.5 * gap_lo, gap_lo)
            lo, gap_lo = np.where(above, guess, lo), np.where(above, gap, gap_lo)
            hi, gap_hi = np.where(below, guess, hi), np.where(below, gap, gap_hi)
            seen_hi |= below
            kept = np.where(above, -1, np.where(below, 1, kept))
            narrow = np.isfinite(hi) & (hi - lo <= 4e-16 * hi)  # float64 cannot resolve further
            live &= ~(narrow | (np.abs(gap) <= tol))
            if not live.any():
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                newton = guess - gap / slope
                secant = (lo * gap_hi - hi * gap_lo) / (gap_hi - gap_lo)
            # bisect in logs: an a-priori upper bound can be orders of magnitude off
            with np.errstate(invalid="ignore"):
                middle = np.where(lo > 0, np.sqrt(lo * hi), 0.01 * hi)
            middle = np.where(np.isfinite(hi), middle, np.maximum(2 * guess, 1e-12))
            # Newton until the root is bracketed by evaluated points, then false position
            # (bisecting every fourth step, so a stalled end cannot hold it up for long)
            bracketed = np.isfinite(gap_lo) & seen_hi
            use_secant = bracketed & (secants < 3) & np.isfinite(secant)
            use_secant &= (secant > lo) & (secant < hi)
            use_newton = ~bracketed & np.isfinite(newton) & (newton > lo) & (newton < hi)
            step = np.where(use_secant, secant, np.where(use_newton, newton, middle))
            guess = np.where(live, step, guess)
            secants = np.where(live, np.where(use_secant, secants + 1, 0), secants)
            keep = live[w_host]
            if keep.sum() < 0.5 * keep.shape[0]:  # drop the pages of finished hosts
                pos = pos[keep]
                work = tuple(a[keep] for a in work)
        # Where float64 cannot resolve the multiplier (pages on the steep ramp at the edge
        # of being given up), mix the solutions at both ends of the bracket so the
        # capacity is used exactly.
        unresolved = (np.abs(gap) > tol) & np.isfinite(hi)
        if unresolved.any():
            g_lo, _ = self.page_frequencies(mu * cost + lo[host_of], sub)
            g_hi, _ = self.page_frequencies(mu * cost + hi[host_of], sub)
            load_lo = bincount(host_of, g_lo, n_hosts)
            load_hi = bincount(host_of, g_hi, n_hosts)
            with np.errstate(divide="ignore", invalid="ignore"):
                theta = np.clip((cap - load_hi) / (load_lo - load_hi), 0.0, 1.0)
                mixed = g_hi + theta[host_of] * (g_lo - g_hi)
            g_all = np.where(unresolved[host_of], mixed, g_all)
            guess = np.where(unresolved, hi, guess)
        slope = bincount(host_of, dg_all, n_hosts)
        a = bincount(host_of, cost * dg_all, n_hosts)
        nu, nu_slope = np.zeros(n_all), np.zeros(n_all)
        nu[which] = guess
        with np.errstate(divide="ignore", invalid="ignore"):
            nu_slope[which] = np.where(slope < 0, -a / slope, 0.0)
        return g_all, dg_all, nu, nu_slope

    def _upper_bounds(
        self, sub: tuple[NDArray[Any], ...], n_hosts: int, cap: FloatArray
    ) -> tuple[FloatArray, FloatArray]:
        """A host multiplier at which every page of the host is at its minimum, and the gap.

        Only where phi is bounded (past ``limit / scale`` a page is given up); inf else.
        Per binding host (``sub``'s last array numbers them).
        """
        if self._bounds_key != self._subset_key:
            limit = self.inverse.limit
            host_of, scale = sub[7], sub[2]
            hi = np.full(n_hosts, np.inf)
            if np.isfinite(limit):
                hi = np.zeros(n_hosts)
                with np.errstate(divide="ignore"):
                    np.maximum.at(hi, host_of, np.where(scale > 0, limit / scale, 0.0))
                hi = np.where(hi > 0, hi, np.inf)
            floor = bincount(host_of, sub[4], n_hosts) - cap
            self._bounds = (hi, np.where(np.isfinite(hi), floor, np.nan))
            self._bounds_key = self._subset_key
        return self._bounds[0].copy(), self._bounds[1].copy()


@dataclass(frozen=True)
class Solution:
    """Frequencies with the multipliers that produce them and the budget they use."""

    frequencies: FloatArray
    multiplier: float
    host_multipliers: FloatArray
    spent: float
    # value-weighted freshness and objective summed on the way (None: not summed yet)
    values: tuple[float, float] | None = None


def weighted_sums(
    objective: Objective, rates: FloatArray, weights: FloatArray, f: FloatArray
) -> tuple[float, float]:
    """Sums of weight x freshness and of weight x the objective's value (weight 0: none)."""
    if objective.value is FRESHNESS.value:  # one evaluation serves both
        total = float(np.einsum("i,i->", weights, fresh_values(rates, f)))
        return total, total
    fresh = freshness(rates, f)
    value = objective.value(rates, f)
    with np.errstate(invalid="ignore"):
        counted = np.where(weights > 0, weights * value, 0.0)
    return float(np.einsum("i,i->", weights, fresh)), float(np.sum(counted))


def fresh_values(rates: FloatArray, f: FloatArray) -> FloatArray:
    """:func:`models.allocation.freshness.freshness` for frequencies >= 0, the same floats, cheaper.

    The closed form everywhere, then the series only where it is used (small r), instead
    of both everywhere and a choice between them.
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        r = rates / f
        out = np.expm1(-r)
        np.negative(out, out=out)
        out /= r  # f = 0: 1 / inf = 0
    small = np.flatnonzero(r < _SMALL_R)
    if small.size:
        r = r[small]
        out[small] = 1.0 - r / 2.0 + r * r / 6.0
    still = rates <= 0
    if still.any():
        out[still] = 1.0
    return out


def page_scale(problem: AllocationProblem) -> FloatArray:
    """Each page's scale in ``phi(rate / f) = m * scale``; inf where a visit gains nothing."""
    p = problem
    useless = p.weights <= 0
    useless |= p.rates <= 0
    any_useless = bool(useless.any())
    weights = np.maximum(p.weights, 1e-300) if any_useless else p.weights
    scale = np.asarray(p.objective.scale(p.rates, weights), dtype=np.float64)
    if any_useless:
        scale[useless] = np.inf
    return scale


def floor_cost(problem: AllocationProblem) -> float:
    """The spend with every page at its minimum frequency (a dot product: no 10 M-page
    temporary, whose page faults alone cost ~0.2 s at 10 M pages)."""
    return float(np.einsum("i,i->", problem.costs, problem.min_frequency))


def free_spend(problem: AllocationProblem, scale: FloatArray) -> float:
    """The spend at multiplier 0 without host capacities: every useful page at its maximum."""
    p = problem
    nothing = np.isinf(scale)
    if nothing.any():
        top = np.where(nothing, p.min_frequency, p.max_frequency)
        return float(np.sum(p.costs * top))
    return float(np.einsum("i,i->", p.costs, p.max_frequency))


def solve_direct(
    problem: AllocationProblem, scale: FloatArray, tolerance: float = TOLERANCE
) -> Solution:
    """Solve with exact passes only (to ``tolerance`` relative on the binding constraints)."""
    p = problem
    hosts = _HostSolver(p, scale, tolerance)
    floor = floor_cost(p)
    if free_spend(p, scale) <= p.budget * (1 + 1e-12):  # the budget does not bind
        point, mu = hosts.evaluate(0.0), 0.0
    elif p.budget <= floor * (1 + 1e-12):
        # Nothing beyond the minimums can be afforded (a zero budget, typically).
        point = _Point(p.min_frequency.copy(), np.zeros_like(p.host_capacity), floor, 0.0)
        mu = np.inf
    else:
        free = hosts.evaluate(0.0, with_hosts=False)
        point, mu = _solve_budget(hosts, scale, free, tolerance)
    return Solution(point.frequencies, mu, point.host_nu, point.spend)


def one_pass(problem: AllocationProblem, multiplier: float) -> FloatArray:
    """Every page's frequency at one budget multiplier, host capacities ignored.

    The unit of work of every solver here (the benchmark reports solves in these passes).
    """
    hosts = _HostSolver(problem, page_scale(problem))
    return hosts.page_frequencies(multiplier * problem.costs)[0]


def _solve_budget(
    hosts: _HostSolver, scale: FloatArray, free: _Point, tolerance: float
) -> tuple[_Point, float]:
    """The budget multiplier, from a start found without host capacities.

    Host capacities only lower the spend at any multiplier, so the root without them
    (cheap: no host multipliers to solve; on a random sample of pages for big problems)
    is an upper bound and a close start for the real one. ``free`` is the point at
    mu = 0 without capacities.
    """
    p = hosts.p
    useful = np.isfinite(scale) & (scale > 0)
    if not useful.any():
        raise AllocationInputError("no page can gain from a visit (all rates or weights are 0)")
    if np.isfinite(free.spend) and free.slope < 0:  # one Newton step in mu from mu = 0
        x = float(np.log((free.spend - p.budget) / -free.slope))
    else:  # mu * cost * scale near 1 is where a typical page stops being worth a visit
        x = float(np.log(np.median(1.0 / (p.costs[useful] * scale[useful]))))
    if p.size > 4 * _SAMPLE:  # the root of a random sample, without capacities: cheap
        sample = hosts.sample(_SAMPLE)
        _, mu = _spend_root(sample.evaluate, sample.budget, x, x_floor=-np.inf, tolerance=1e-4)
        x = float(np.log(mu)) if mu > 0 else x
    elif hosts.limited.any():  # the root without capacities, an upper bound of the real one
        free_evaluate = partial(hosts.evaluate, with_hosts=False)
        _, mu = _spend_root(free_evaluate, p.budget, x, x_floor=-np.inf, tolerance=1e-6)
        x = float(np.log(mu)) if mu > 0 else x
    if not hosts.limited.any():
        return _spend_root(hosts.evaluate, p.budget, x, x_floor=-np.inf, tolerance=tolerance)
    # below x_floor, try mu = 0: host capacities alone may keep the spend within budget
    return _spend_root(hosts.evaluate, p.budget, x, x_floor=x - 40.0, tolerance=tolerance)


def _spend_root(
    evaluate: Callable[[float], _Point],
    budget: float,
    x: float,
    x_floor: float,
    tolerance: float = TOLERANCE,
) -> tuple[_Point, float]:
    """The multiplier at which ``evaluate`` spends the budget: safeguarded Newton on log mu.

    Spend falls continuously as mu rises; Newton steps use its exact slope (host
    multipliers following), bisection takes over when a step leaves the bracket or
    stalls. If float64 cannot resolve mu any further, the solutions at both ends of the
    bracket are mixed so the budget is spent exactly.
    """
    lo, hi = -np.inf, np.inf
    above: _Point | None = None  # the last point spending too much (at lo)
    below: _Point | None = None  # the last point spending too little (at hi)
    last_gap = np.inf
    previous: tuple[float, float] | None = None  # (log mu, gap) of the last step
    for _ in range(300):
        mu = float(np.exp(x)) if x > x_floor else 0.0
        point = evaluate(mu)
        gap = point.spend / budget - 1.0
        if abs(gap) <= tolerance or (mu == 0.0 and gap < 0):
            return point, mu
        if gap > 0:
            lo, above = x, point
        else:
            hi, below = x, point
        bracketed = np.isfinite(lo) and np.isfinite(hi)
        if bracketed and hi - lo <= 4e-16 * max(1.0, abs(x)):
            break
        slope = mu * point.slope / budget  # d gap / d log mu
        if previous is not None and previous[1] != gap and mu > 0:
            # secant through the last two points: immune to kinks in the exact slope
            slope = (gap - previous[1]) / (x - previous[0])
        previous = (x, gap)
        step = -gap / slope if slope < 0 else (4.0 if gap > 0 else -4.0)
        target = x + float(np.clip(step, -8.0, 8.0))
        if bracketed and (not lo < target < hi or abs(gap) > 0.5 * last_gap):
            target = 0.5 * (lo + hi)
        elif not bracketed and not lo < target < hi:
            target = x + (4.0 if gap > 0 else -4.0)
        last_gap = abs(gap)
        x = max(target, x_floor)
    if above is None or below is None:
        raise AllocationInputError("could not bracket the budget multiplier")
    theta = (budget - below.spend) / (above.spend - below.spend)
    theta = min(max(theta, 0.0), 1.0)
    mixed = _Point(
        below.frequencies + theta * (above.frequencies - below.frequencies),
        below.host_nu + theta * (above.host_nu - below.host_nu),
        below.spend + theta * (above.spend - below.spend),
        below.slope,
    )
    return mixed, float(np.exp(hi))
