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
bounds. ``phi`` is inverted for all pages at once from one table
(:mod:`models.allocation_table`). Small problems are solved by exact passes over the pages
(:mod:`models.allocation_solver`: ``mu`` by safeguarded Newton/secant, each binding host's
``nu`` by a vectorized search); big ones from local second-order models of the spend and
the loads, refreshed in a few passes (:mod:`models.allocation_local`). Under the
freshness objective a page whose rate is too high for its value and cost gets ``f = 0``:
the optimum gives up on pages it cannot keep fresh.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.allocation_local import DIRECT_PAGES, solve_local
from models.allocation_solver import (
    AllocationInputError,
    free_spend,
    page_scale,
    solve_direct,
    weighted_sums,
)
from models.freshness import FRESHNESS, Objective
from models.rate_solver import CHUNK_PAGES, bincount

__all__ = [
    "Allocation",
    "AllocationInputError",
    "AllocationProblem",
    "allocate",
    "proportional_allocation",
    "solve",
    "uniform_allocation",
]

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


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
            codes = _host_codes(h)
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
    """Solve an allocation problem exactly (to ~1e-11 relative on the binding constraints).

    Big problems whose budget binds go through local models of the spend
    (:mod:`models.allocation_local`, a few passes over the pages); the rest, and any big
    problem those cannot settle, through the direct solver (:mod:`models.allocation_solver`).
    """
    p = problem
    scale = page_scale(p)
    floor_cost = float(np.sum(p.costs * p.min_frequency))
    big = p.size > DIRECT_PAGES
    if big and free_spend(p, scale) > p.budget * (1 + 1e-12) and p.budget > floor_cost * 1.001:
        solution = solve_local(p, scale)
    else:
        solution = solve_direct(p, scale)
    frequencies = solution.frequencies
    total_weight = float(p.weights.sum())
    fresh, value = solution.values or _weighted_values(p, frequencies)
    return Allocation(
        frequencies=frequencies,
        multiplier=solution.multiplier,
        host_multipliers=solution.host_multipliers,
        expected_freshness=fresh / total_weight if total_weight else 1.0,
        objective_value=value,
        spent=solution.spent,
        objective=p.objective.name,
    )


def _weighted_values(p: AllocationProblem, frequencies: FloatArray) -> tuple[float, float]:
    """Value-weighted freshness and objective, summed in chunks (in threads when big)."""

    def chunk(lo: int) -> tuple[float, float]:
        part = slice(lo, lo + CHUNK_PAGES)
        return weighted_sums(p.objective, p.rates[part], p.weights[part], frequencies[part])

    n = p.size
    if n <= CHUNK_PAGES:
        return chunk(0)
    starts = range(0, n, CHUNK_PAGES)
    with ThreadPoolExecutor(max_workers=os.cpu_count() or 1) as pool:
        parts = list(pool.map(chunk, starts))
    return math.fsum(a for a, _ in parts), math.fsum(b for _, b in parts)


def uniform_allocation(problem: AllocationProblem) -> FloatArray:
    """The same frequency for every page, spending the budget (within the per-page caps)."""
    f = np.full(problem.size, problem.budget / float(problem.costs.sum()))
    return np.asarray(np.clip(f, problem.min_frequency, problem.max_frequency), dtype=np.float64)


def proportional_allocation(problem: AllocationProblem) -> FloatArray:
    """Frequencies proportional to the change rate, spending the budget."""
    total = float(np.sum(problem.costs * problem.rates))
    f = problem.rates * (problem.budget / total) if total > 0 else np.zeros(problem.size)
    return np.asarray(np.clip(f, problem.min_frequency, problem.max_frequency), dtype=np.float64)


# --------------------------------------------------------------------------- input


def _host_codes(hosts: NDArray[Any]) -> IntArray:
    """Dense codes 0..k-1 for host labels, in sorted order of the labels.

    Small non-negative integers (the usual host ids) are coded in two linear passes; other
    labels by sorting (``np.unique``).
    """
    n = hosts.shape[0]
    if n and hosts.dtype.kind in "iu":
        low, high = int(hosts.min()), int(hosts.max())
        if low >= 0 and high <= 4 * n + 1024:
            present = np.zeros(high + 1, dtype=bool)
            present[hosts] = True
            code = np.cumsum(present) - 1
            return np.asarray(code[hosts], dtype=np.int64)
    _, codes = np.unique(hosts, return_inverse=True)
    return np.asarray(codes, dtype=np.int64)


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
