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

import numpy as np
from numpy.typing import ArrayLike, NDArray
from scipy import optimize

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

    frequencies, host_nu = hosts.frequencies(0.0)
    spent = float(np.sum(p.costs * frequencies))
    mu = 0.0
    floor_cost = float(np.sum(p.costs * p.min_frequency))
    if spent > p.budget * (1 + 1e-12) and p.budget <= floor_cost * (1 + 1e-12):
        # Nothing beyond the minimums can be afforded (a zero budget, typically).
        frequencies, mu, spent = p.min_frequency.copy(), np.inf, floor_cost
    elif spent > p.budget * (1 + 1e-12):

        def excess(log_mu: float) -> float:
            f, _ = hosts.frequencies(float(np.exp(log_mu)))
            return float(np.sum(p.costs * f)) / p.budget - 1.0

        lo, hi = _bracket(excess, p, scale)
        log_mu = optimize.brentq(excess, lo, hi, xtol=1e-15, rtol=1e-15, maxiter=300)
        # Spend can jump across the budget between adjacent multipliers (pages at the edge
        # of being given up, whose value per visit is flat there): mix the solutions just
        # below and above the root so the budget is spent exactly.
        below, nu_below = hosts.frequencies(float(np.exp(log_mu - 1e-13)))
        above, nu_above = hosts.frequencies(float(np.exp(log_mu + 1e-13)))
        spend_below = float(np.sum(p.costs * below))
        spend_above = float(np.sum(p.costs * above))
        theta = 1.0
        if spend_below > spend_above:
            theta = min(max((p.budget - spend_above) / (spend_below - spend_above), 0.0), 1.0)
        frequencies = above + theta * (below - above)
        host_nu = nu_above + theta * (nu_below - nu_above)
        mu = float(np.exp(log_mu))
        spent = float(np.sum(p.costs * frequencies))
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


class _HostSolver:
    """Frequencies at a budget multiplier, with each binding host's multiplier solved."""

    def __init__(self, problem: AllocationProblem, scale: FloatArray) -> None:
        self.p = problem
        self.scale = scale
        self.inverse = _PhiInverse(problem.objective)
        self.nu = np.zeros(problem.host_capacity.shape[0])
        self.limited = np.isfinite(problem.host_capacity)

    def page_frequencies(
        self, m: FloatArray, pages: slice | IntArray = slice(None)
    ) -> tuple[FloatArray, FloatArray]:
        """f and df/dm for the given pages at total multipliers ``m`` (one per page)."""
        p = self.p
        scale = self.scale[pages]
        with np.errstate(invalid="ignore"):
            t = np.where(np.isinf(scale), np.inf, m * scale)  # 0 x inf: nothing to gain
        f, slope = map_chunks(
            self.inverse.frequency,
            2,
            t,
            p.rates[pages],
            scale,
            p.min_frequency[pages],
            p.max_frequency[pages],
        )
        return f, slope

    def frequencies(self, mu: float) -> tuple[FloatArray, FloatArray]:
        p = self.p
        f, _ = self.page_frequencies(mu * p.costs)
        nu = np.zeros_like(self.nu)
        if not self.limited.any():
            return f, nu
        n_hosts = nu.shape[0]
        load = bincount(p.hosts, f, n_hosts)
        binding = self.limited & (load > p.host_capacity * (1 + 1e-12))
        if not binding.any():
            return f, nu
        pages = np.flatnonzero(binding[p.hosts])
        host_of = p.hosts[pages]
        cap = p.host_capacity
        lo = np.zeros(n_hosts)
        hi = np.full(n_hosts, np.inf)
        guess = np.where(binding, self.nu, 0.0)
        base = mu * p.costs[pages]
        for _ in range(200):
            g, dg = self.page_frequencies(base + guess[host_of], pages)
            total = bincount(host_of, g, n_hosts)
            slope = bincount(host_of, dg, n_hosts)
            gap = total - cap
            lo = np.where(binding & (gap > 0), guess, lo)
            hi = np.where(binding & (gap <= 0), guess, hi)
            narrow = np.isfinite(hi) & (hi - lo <= 4e-16 * hi)  # float64 cannot resolve further
            done = ~binding | narrow | (np.abs(gap) <= 1e-11 * np.maximum(cap, 1e-300))
            if done.all():
                break
            with np.errstate(divide="ignore", invalid="ignore"):
                newton = guess - gap / slope
            fallback = np.where(np.isfinite(hi), 0.5 * (lo + hi), np.maximum(2 * guess, 1e-12))
            ok = np.isfinite(newton) & (newton > lo) & (newton < hi)
            guess = np.where(done, guess, np.where(ok, newton, fallback))
        # Where the load jumps across the capacity between two adjacent multipliers (pages
        # at the edge of being given up, whose value per visit is flat there), mix the
        # solutions at both ends of the bracket so the capacity is used exactly.
        unresolved = binding & (np.abs(gap) > 1e-11 * np.maximum(cap, 1e-300)) & np.isfinite(hi)
        if unresolved.any():
            g_lo, _ = self.page_frequencies(base + lo[host_of], pages)
            g_hi, _ = self.page_frequencies(base + hi[host_of], pages)
            load_lo = bincount(host_of, g_lo, n_hosts)
            load_hi = bincount(host_of, g_hi, n_hosts)
            with np.errstate(divide="ignore", invalid="ignore"):
                theta = np.clip((cap - load_hi) / (load_lo - load_hi), 0.0, 1.0)
            mixed = g_hi + theta[host_of] * (g_lo - g_hi)
            g = np.where(unresolved[host_of], mixed, g)
            guess = np.where(unresolved, hi, guess)
        f[pages] = g
        nu[binding] = guess[binding]
        self.nu = np.where(binding, guess, self.nu)  # warm start for the next multiplier
        return f, nu


class _PhiInverse:
    """r with phi(r) = t, for all pages at once: a log-log table and one Newton step."""

    def __init__(self, objective: Objective) -> None:
        self.objective = objective
        log_r = np.linspace(np.log(1e-7), np.log(2e3), 4000)
        r = np.exp(log_r)
        phi = objective.phi(r)
        keep = phi < objective.phi_limit * (1 - 1e-15)
        self.log_r = log_r[keep]
        self.log_phi = np.log(phi[keep])

    def radius(self, t: FloatArray) -> FloatArray:
        """r(t); inf where t reaches phi's limit, 0 where t = 0."""
        obj = self.objective
        with np.errstate(divide="ignore"):
            log_t = np.log(t)
        log_r = np.interp(log_t, self.log_phi, self.log_r)
        r = np.exp(log_r)
        # one Newton step on log phi(r) = log t, in log r
        phi = obj.phi(r)
        with np.errstate(divide="ignore", invalid="ignore"):
            step = (np.log(phi) - log_t) / (r * obj.phi_slope(r) / phi)
        with np.errstate(over="ignore"):
            r = np.exp(log_r - np.where(np.isfinite(step), step, 0.0))
        r = np.where(t >= obj.phi_limit, np.inf, r)
        return np.asarray(np.where(t <= 0, 0.0, r), dtype=np.float64)

    def frequency(
        self,
        t: FloatArray,
        rate: FloatArray,
        scale: FloatArray,
        f_min: FloatArray,
        f_max: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """f = clip(rate / r(t)) and df/dm (t = m * scale), 0 where clipped."""
        r = self.radius(t)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            raw = np.where(r > 0, rate / r, np.inf)
            slope = -(rate / (r * r)) * scale / self.objective.phi_slope(r)
        raw = np.where(np.isinf(scale), 0.0, raw)  # nothing to gain: no visits beyond the minimum
        f = np.minimum(np.maximum(raw, f_min), f_max)
        inside = (raw > f_min) & (raw < f_max) & np.isfinite(slope)
        return f, np.where(inside, slope, 0.0)


def _bracket(
    excess: Callable[[float], float], problem: AllocationProblem, scale: FloatArray
) -> tuple[float, float]:
    """log mu bounds with excess(lo) > 0 > excess(hi) (excess decreasing in mu)."""
    useful = np.isfinite(scale) & (scale > 0)
    if not useful.any():
        raise AllocationInputError("no page can gain from a visit (all rates or weights are 0)")
    # mu * cost * scale near 1 is where a typical page stops being worth a visit
    centre = float(np.log(np.median(1.0 / (problem.costs[useful] * scale[useful]))))
    lo, hi = centre - 1.0, centre + 1.0
    for _ in range(100):
        if excess(lo) > 0:
            break
        lo -= 4.0
    for _ in range(100):
        if excess(hi) < 0:
            break
        hi += 4.0
    if not (excess(lo) > 0 > excess(hi)):
        raise AllocationInputError("could not bracket the budget multiplier")
    return lo, hi


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
