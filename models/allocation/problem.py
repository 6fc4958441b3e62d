"""The allocation problem: per-page arrays, validated once (``AllocationProblem.build``).

Its own module so that the solvers (:mod:`models.allocation.solver`, ``.local``,
``.refresh``) and the entry point (:mod:`models.allocation.allocate`) all import it from
here, and none of them from another: no circle.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
from numpy.typing import ArrayLike, NDArray

from models.allocation.freshness import FRESHNESS, Objective
from models.estimation.rate_solver import bincount

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
