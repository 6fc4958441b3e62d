"""Budgeted revisit allocation: how often to visit each page so the budget buys the most.

Problem (Cho & Garcia-Molina, TODS 2003, with costs and politeness): choose a revisit
frequency ``f_i`` (visits per day) for every page to maximize ``sum_i w_i V(rate_i, f_i)``
for an :class:`~models.allocation.freshness.Objective` ``V`` (freshness by default), subject to

* the budget ``sum_i c_i f_i <= B`` (``c_i`` the cost of one visit),
* per-page bounds ``min_frequency <= f_i <= max_frequency`` (at most one visit a cycle),
* per-host capacity ``sum_{i in host h} f_i <= H_h`` (politeness).

The objective is concave and separable, so the optimum is characterized by multipliers:
a global ``mu`` for the budget and ``nu_h >= 0`` for each host whose capacity binds, with
``phi(rate_i / f_i) = (mu c_i + nu_h) * scale_i`` for every page strictly inside its
bounds. ``phi`` is inverted for all pages at once from one table
(:mod:`models.allocation.table`). Small problems are solved by exact passes over the pages
(:mod:`models.allocation.solver`: ``mu`` by safeguarded Newton/secant, each binding host's
``nu`` by a vectorized search); big ones from local second-order models of the spend and
the loads, refreshed in a few passes (:mod:`models.allocation.local`). Under the
freshness objective a page whose rate is too high for its value and cost gets ``f = 0``:
the optimum gives up on pages it cannot keep fresh.
"""

from __future__ import annotations

import math
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.allocation.freshness import FRESHNESS, Objective
from models.allocation.local import DIRECT_PAGES, solve_local
from models.allocation.problem import AllocationInputError, AllocationProblem
from models.allocation.solver import (
    floor_cost,
    free_spend,
    page_scale,
    solve_direct,
    weighted_sums,
)
from models.estimation.rate_solver import CHUNK_PAGES

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
    (:mod:`models.allocation.local`, a few passes over the pages); the rest, and any big
    problem those cannot settle, through the direct solver (:mod:`models.allocation.solver`).
    """
    p = problem
    scale = page_scale(p)
    big = p.size > DIRECT_PAGES
    binds = big and free_spend(p, scale) > p.budget * (1 + 1e-12)
    if binds and p.budget > floor_cost(p) * 1.001:
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
