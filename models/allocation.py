"""Budgeted revisit allocation: how often to visit each page so the budget buys the most.

Problem (Cho & Garcia-Molina, TODS 2003, with costs and politeness): choose a revisit
frequency ``f_i`` (visits per day) for every page to maximize ``sum_i w_i V(rate_i, f_i)``
for an :class:`~models.freshness.Objective` ``V`` (freshness by default), subject to

* the budget ``sum_i c_i f_i <= B`` (``c_i`` the cost of one visit),
* per-page bounds ``min_frequency <= f_i <= max_frequency`` (at most one visit a cycle),
* per-host capacity ``sum_{i in host h} f_i <= H_h`` (politeness).

The objective is concave and separable, so the optimum is characterized by multipliers:
a global ``mu`` for the budget and ``nu_h >= 0`` for each host whose capacity binds, with
``phi(rate_i / f_i) = (mu c_i + nu_h) * scale_i`` for every page strictly inside its
bounds. ``phi`` is inverted with a table and one Newton step for all pages at once; ``nu``
is found per binding host by a vectorized safeguarded Newton; ``mu`` by Brent's method
on the budget. Under the freshness objective a page whose rate is too high for its value
and cost gets ``f = 0``: the optimum gives up on pages it cannot keep fresh.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.freshness import FRESHNESS, Objective, freshness
from models.rate_solver import bincount, map_chunks

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


class AllocationInputError(ValueError):
    """An allocation problem that cannot be solved as given; the message says why."""


@dataclass(frozen=True)
class AllocationProblem:
    """A budgeted allocation problem: arrays per page, validated by :meth:`build`."""

    rates: FloatArray
    budget: float
    costs: FloatArray
    weights: FloatArray
    min_frequency: FloatArray
    max_frequency: FloatArray
    hosts: IntArray  # dense host codes 0..n_hosts-1 (all 0 without hosts)
    host_capacity: FloatArray  # per host; inf where unconstrained
    objective: Objective = FRESHNESS

    @property
    def size(self) -> int:
        return int(self.rates.shape[0])

    @classmethod
    def build(
        cls,
        rates: ArrayLike,
        budget: float,
        *,
        weights: ArrayLike | None = None,
        costs: ArrayLike | None = None,
        hosts: ArrayLike | None = None,
        host_capacity: ArrayLike | float | None = None,
        min_frequency: ArrayLike | float = 0.0,
        max_frequency: ArrayLike | float | None = None,
        objective: Objective = FRESHNESS,
    ) -> AllocationProblem:
        lam = _vector(rates, "rates")
        n = lam.shape[0]
        if (lam < 0).any():
            raise AllocationInputError("rates must be non-negative")
        w = _per_page(weights, n, "weights", 1.0)
        c = _per_page(costs, n, "costs", 1.0)
        if (w < 0).any():
            raise AllocationInputError("weights must be non-negative")
        if not (c > 0).all():
            raise AllocationInputError("costs must be positive")
        f_min = _per_page(min_frequency, n, "min_frequency", 0.0)
        f_max = _per_page(max_frequency, n, "max_frequency", np.inf)
        if (f_min < 0).any() or (f_max < f_min).any():
            raise AllocationInputError("need 0 <= min_frequency <= max_frequency")
        if not np.isfinite(budget) or budget < 0:
            raise AllocationInputError(f"budget must be a finite non-negative number, got {budget}")
        if hosts is None:
            codes = np.zeros(n, dtype=np.int64)
        else:
            h = np.asarray(hosts)
            if h.shape != (n,):
                raise AllocationInputError("hosts must have one entry per page")
            _, codes = np.unique(h, return_inverse=True)
            codes = codes.astype(np.int64)
        n_hosts = int(codes.max()) + 1 if n else 0
        if host_capacity is None:
            cap = np.full(n_hosts, np.inf)
        else:
            if hosts is None:
                raise AllocationInputError("host_capacity needs hosts")
            cap = _per_page(host_capacity, n_hosts, "host_capacity (one per distinct host)", np.inf)
            if (cap < 0).any():
                raise AllocationInputError("host capacities must be non-negative")
        floor = bincount(codes, f_min, n_hosts)
        if (floor > cap * (1 + 1e-12)).any():
            raise AllocationInputError("min_frequency alone exceeds some host's capacity")
        floor_cost = float(np.sum(c * f_min))
        if floor_cost > budget * (1 + 1e-12):
            raise AllocationInputError(
                f"min_frequency alone costs {floor_cost:.6g}, over the budget {budget}"
            )
        return cls(lam, float(budget), c, w, f_min, f_max, codes, cap, objective)


@dataclass(frozen=True)
class Allocation:
    """The solution: ``frequencies`` per page (visits per unit of time of the rates).

    ``multiplier`` is the budget's shadow price (value per unit of budget at the margin; 0
    when the budget does not bind); ``host_multipliers`` the hosts' (0 where capacity does
    not bind). ``expected_freshness`` is the value-weighted mean time-averaged freshness,
    ``objective_value`` the weighted sum of the problem's objective, ``spent`` the budget used.
    """

    frequencies: FloatArray
    multiplier: float
    host_multipliers: FloatArray
    expected_freshness: float
    objective_value: float
    spent: float
    objective: str = field(default="freshness")


def allocate(
    rates: ArrayLike,
    budget: float,
    *,
    weights: ArrayLike | None = None,
    costs: ArrayLike | None = None,
    hosts: ArrayLike | None = None,
    host_capacity: ArrayLike | float | None = None,
    min_frequency: ArrayLike | float = 0.0,
    max_frequency: ArrayLike | float | None = None,
    objective: Objective = FRESHNESS,
) -> Allocation:
    """Optimal revisit frequencies for ``rates`` under ``budget`` (see the module docstring).

    ``rates`` are changes per unit of time (per day here); ``budget`` is cost per unit of
    time; ``hosts`` labels each page's host and ``host_capacity`` gives each distinct host's
    visits per unit of time (in sorted order of the labels, or one number for all).
    """
    problem = AllocationProblem.build(
        rates,
        budget,
        weights=weights,
        costs=costs,
        hosts=hosts,
        host_capacity=host_capacity,
        min_frequency=min_frequency,
        max_frequency=max_frequency,
        objective=objective,
    )
    return solve(problem)


def solve(problem: AllocationProblem) -> Allocation:
    """Solve an allocation problem exactly (to ~1e-10 relative on the binding constraints)."""
    p = problem
    scale = np.where(
        p.weights > 0, p.objective.scale(p.rates, np.maximum(p.weights, 1e-300)), np.inf
    )
    scale = np.where(p.rates > 0, scale, np.inf)  # a page that never changes gains nothing
    hosts = _HostSolver(p, scale)
    floor_cost = float(np.sum(p.costs * p.min_frequency))
    free = hosts.evaluate(0.0, with_hosts=False)  # what the pages would take for free
    if free.spend <= p.budget * (1 + 1e-12):  # the budget does not bind
        point, mu = hosts.evaluate(0.0), 0.0
    elif p.budget <= floor_cost * (1 + 1e-12):
        # Nothing beyond the minimums can be afforded (a zero budget, typically).
        point = _Point(p.min_frequency.copy(), np.zeros_like(p.host_capacity), floor_cost, 0.0)
        mu = np.inf
    else:
        point, mu = _solve_budget(hosts, scale, free)
    frequencies, host_nu, spent = point.frequencies, point.host_nu, point.spend
    total_weight = float(p.weights.sum())
    fresh = freshness(p.rates, frequencies)
    value = p.objective.value(p.rates, frequencies)
    return Allocation(
        frequencies=frequencies,
        multiplier=mu,
        host_multipliers=host_nu,
        expected_freshness=float(np.sum(p.weights * fresh) / total_weight) if total_weight else 1.0,
        objective_value=float(np.sum(np.where(p.weights > 0, p.weights * value, 0.0))),
        spent=spent,
        objective=p.objective.name,
    )


def uniform_allocation(problem: AllocationProblem) -> FloatArray:
    """The same frequency for every page, spending the budget (within the per-page caps)."""
    f = np.full(problem.size, problem.budget / float(problem.costs.sum()))
    return np.asarray(np.clip(f, problem.min_frequency, problem.max_frequency), dtype=np.float64)


def proportional_allocation(problem: AllocationProblem) -> FloatArray:
    """Frequencies proportional to the change rate, spending the budget."""
    total = float(np.sum(problem.costs * problem.rates))
    f = problem.rates * (problem.budget / total) if total > 0 else np.zeros(problem.size)
    return np.asarray(np.clip(f, problem.min_frequency, problem.max_frequency), dtype=np.float64)


# --------------------------------------------------------------------------- internals

#: Width of the ramp just below phi's limit, relative to the limit. In floating point the
#: frequency that solves ``phi(rate / f) = t`` falls from ~rate/37 to 0 within one ulp of
#: the limit (f ~ rate / log(1 / (limit - t))), so the spend would jump there; a linear
#: ramp over the last 1e-9 of t keeps every load continuous, at the price of an optimality
#: error below 1e-9 in the multipliers of pages on it.
_EDGE = 1e-9
_TOLERANCE = 1e-11  # relative gap accepted on the budget and on each binding capacity
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

    def __init__(self, problem: AllocationProblem, scale: FloatArray) -> None:
        self.p = problem
        # a page with nothing to gain (infinite scale) is pinned at its minimum: scale 0
        # keeps t = m * scale finite (no 0 x inf) and its upper bound is its minimum
        nothing = np.isinf(scale)
        self.scale = np.where(nothing, 0.0, scale)
        self.f_max = np.where(nothing, problem.min_frequency, problem.max_frequency)
        self.inverse = _PhiInverse(problem.objective)
        n_hosts = problem.host_capacity.shape[0]
        self.limited = np.isfinite(problem.host_capacity)
        # warm start: the last solution's host multipliers and how they move with mu
        self.mu = 0.0
        self.nu = np.zeros(n_hosts)
        self.nu_slope = np.zeros(n_hosts)
        self._subset_key: bytes = b""
        self._subset: tuple[NDArray[Any], ...] = ()
        self._bounds_key: bytes = b"-"
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
        """The binding hosts' pages (see ``_gather``), cached while the set is the same."""
        key = np.packbits(binding).tobytes()
        if key != self._subset_key:
            self._subset = self._gather(np.flatnonzero(binding[self.p.hosts]))
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
            binding = self.limited & (load > p.host_capacity * (1 + _TOLERANCE))
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
        """
        p = self.p
        n_hosts = binding.shape[0]
        cap = p.host_capacity
        tol = _TOLERANCE * np.maximum(cap, 1e-300)
        host_of, cost = sub[1], sub[6]
        # bracket [lo, hi] of each host's multiplier, with the load gaps at both ends
        lo, gap_lo = np.zeros(n_hosts), np.full(n_hosts, np.nan)
        hi, gap_hi = self._upper_bounds(sub, n_hosts)
        predicted = self.nu + self.nu_slope * (mu - self.mu)
        guess = np.where(binding, np.clip(predicted, 0.0, hi), 0.0)
        seen_hi = np.zeros(n_hosts, dtype=bool)  # hi evaluated (not just the a-priori bound)
        kept = np.zeros(n_hosts, dtype=np.int8)  # end the last step kept: 1 lo, -1 hi (Illinois)
        secants = np.zeros(n_hosts, dtype=np.int8)  # false-position steps since a bisection
        live = binding.copy()
        g_all, dg_all = np.empty(host_of.shape[0]), np.empty(host_of.shape[0])
        gap = np.zeros(n_hosts)
        pos = np.arange(host_of.shape[0])
        work = sub
        for _ in range(200):
            w_host = work[1]
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
        unresolved = binding & (np.abs(gap) > tol) & np.isfinite(hi)
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
        with np.errstate(divide="ignore", invalid="ignore"):
            nu_slope = np.where(binding & (slope < 0), -a / slope, 0.0)
        return g_all, dg_all, np.where(binding, guess, 0.0), nu_slope

    def _upper_bounds(
        self, sub: tuple[NDArray[Any], ...], n_hosts: int
    ) -> tuple[FloatArray, FloatArray]:
        """A host multiplier at which every page of the host is at its minimum, and the gap.

        Only where phi is bounded (past ``limit / scale`` a page is given up); inf else.
        """
        if self._bounds_key != self._subset_key:
            limit = self.inverse.limit
            hi = np.full(n_hosts, np.inf)
            if np.isfinite(limit):
                host_of, scale = sub[1], sub[2]
                hi = np.zeros(n_hosts)
                with np.errstate(divide="ignore"):
                    np.maximum.at(hi, host_of, np.where(scale > 0, limit / scale, 0.0))
                hi = np.where(hi > 0, hi, np.inf)
            floor = bincount(sub[1], sub[4], n_hosts) - self.p.host_capacity
            self._bounds = (hi, np.where(np.isfinite(hi), floor, np.nan))
            self._bounds_key = self._subset_key
        return self._bounds[0].copy(), self._bounds[1].copy()


class _PhiInverse:
    """f(t) = rate / r(t) with phi(r(t)) = t, for all pages at once, from one table.

    ``log r`` is tabulated with its derivative on a fine uniform grid of
    ``u = log(t / (1 - t / limit))`` (``log t`` when phi is unbounded), where it is
    smooth at both ends, and read back by linear interpolation (relative error ~1e-9):
    one log and one exp per page, no search. Past the table's low end it is
    extrapolated along the power law phi ~ r^k; between ``edge`` and the limit f falls
    linearly to 0 (see ``_EDGE``).
    """

    def __init__(self, objective: Objective, points: int = 1 << 16) -> None:
        self.objective = objective
        self.limit = objective.phi_limit
        self.edge = self.limit * (1 - _EDGE)  # inf when phi is unbounded: no ramp
        dense = np.linspace(np.log(1e-7), np.log(1e6), 200_001)
        phi = objective.phi(np.exp(dense))
        inside = phi < self.edge
        u_dense = self._u(phi[inside])
        top = float(self._u(np.array([self.edge]))[0]) if np.isfinite(self.edge) else u_dense[-1]
        grid = np.linspace(u_dense[0], min(top, u_dense[-1]) if np.isinf(top) else top, points)
        log_r = np.interp(grid, u_dense, dense[inside])
        for _ in range(4):  # Newton polish on u(phi(r)) = grid, in log r
            r = np.exp(log_r)
            phi = objective.phi(r)
            log_r -= (self._u(phi) - grid) / (r * objective.phi_slope(r) * self._du(phi))
        r = np.exp(log_r)
        phi = objective.phi(r)
        self.u0 = float(grid[0])
        self.h = float(grid[1] - grid[0])
        self.y = log_r
        self.dy = 1.0 / (r * objective.phi_slope(r) * self._du(phi))  # d log r / du
        self.edge_r = float(r[-1]) if np.isfinite(self.edge) else 0.0

    def _u(self, t: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore"):
            if np.isfinite(self.limit):
                return np.asarray(np.log(t * self.limit / (self.limit - t)), dtype=np.float64)
            return np.asarray(np.log(t), dtype=np.float64)

    def _du(self, t: FloatArray) -> FloatArray:
        """du/dt."""
        if np.isfinite(self.limit):
            return np.asarray(self.limit / (t * (self.limit - t)), dtype=np.float64)
        return np.asarray(1.0 / t, dtype=np.float64)

    def log_radius(self, t: FloatArray) -> tuple[FloatArray, FloatArray]:
        """log r(t) and d log r / du, for t below ``edge``."""
        s = (self._u(t) - self.u0) / self.h
        last = self.y.shape[0] - 1
        inner = np.clip(s, 0.0, float(last))
        i = np.minimum(inner.astype(np.int64), last - 1)
        w = inner - i
        y0 = self.y[i]
        dy = self.dy[i]
        y = y0 + w * (self.y[i + 1] - y0)
        # beyond the table: along the end's slope (the power law at the low end)
        beyond = s - inner
        if beyond.any():
            end_slope = np.where(s < 0, self.dy[0], self.dy[last])
            y = y + beyond * self.h * end_slope
            dy = np.where(beyond != 0, end_slope, dy)
        return y, dy

    def frequency(
        self,
        t: FloatArray,
        rate: FloatArray,
        scale: FloatArray,
        f_min: FloatArray,
        f_max: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """f = clip(rate / r(t)) and df/dm (t = m * scale), 0 where clipped."""
        ramp = t > self.edge
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            below = np.minimum(t, self.edge)
            log_r, dlog_r = self.log_radius(below)
            raw = rate * np.exp(-log_r)
            # df/dm = -f (d log r / du) (du / dt) scale
            slope = -raw * dlog_r * self._du(below) * scale
            if ramp.any():
                width = self.limit - self.edge
                share = np.clip((self.limit - t) / width, 0.0, 1.0)
                top = rate / self.edge_r
                raw = np.where(ramp, top * share, raw)
                slope = np.where(ramp, np.where(share > 0, -top * scale / width, 0.0), slope)
        f = np.fmin(np.fmax(raw, f_min), f_max)  # NaN (0 x inf: nothing to gain) -> f_min
        inside = (raw > f_min) & (raw < f_max) & np.isfinite(slope)
        return f, np.where(inside, slope, 0.0)


def _solve_budget(hosts: _HostSolver, scale: FloatArray, free: _Point) -> tuple[_Point, float]:
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
        return _spend_root(hosts.evaluate, p.budget, x, x_floor=-np.inf)
    # below x_floor, try mu = 0: host capacities alone may keep the spend within budget
    return _spend_root(hosts.evaluate, p.budget, x, x_floor=x - 40.0)


def _spend_root(
    evaluate: Callable[[float], _Point],
    budget: float,
    x: float,
    x_floor: float,
    tolerance: float = _TOLERANCE,
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


def _vector(values: ArrayLike, name: str) -> FloatArray:
    try:
        arr = np.asarray(values, dtype=np.float64)
    except (TypeError, ValueError) as exc:
        raise AllocationInputError(f"{name} must be numeric: {exc}") from None
    if arr.ndim != 1:
        raise AllocationInputError(f"{name} must be a 1-D array")
    if not np.isfinite(arr).all():
        raise AllocationInputError(f"{name} contains NaN or infinite values")
    return arr


def _per_page(values: ArrayLike | float | None, n: int, name: str, default: float) -> FloatArray:
    if values is None:
        return np.full(n, default)
    arr = np.asarray(values, dtype=np.float64)
    if arr.ndim == 0:
        arr = np.full(n, float(arr))
    if arr.shape != (n,):
        raise AllocationInputError(f"{name} must be a number or have {n} entries, got {arr.shape}")
    if np.isnan(arr).any():
        raise AllocationInputError(f"{name} contains NaN")
    return arr
