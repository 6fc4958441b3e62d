"""phi^-1 for every page at once: the frequency that meets a multiplier, and its derivatives.

At the optimum a page strictly inside its bounds has ``phi(rate / f) = t`` with
``t = m * scale`` (``m`` the page's total multiplier). :class:`PhiInverse` inverts phi
from one table of ``y = log r`` on a uniform grid of ``u = log(t / (1 - t / limit))``
(``log t`` when phi is unbounded), where ``y`` is smooth at both ends. Each node keeps the
Taylor coefficients of ``y`` to second order, so a page reads ``y`` from its nearest node
with one gather per coefficient and a Horner step: ~1e-11 relative, no search, and the
first and second derivatives come out of the same polynomial. Those derivatives are what
the local models of :mod:`models.allocation.local` are made of.

Between ``edge`` (a relative 1e-9 below phi's limit) and the limit, f falls linearly to 0:
in float64 f would fall from ~rate/37 to 0 within one ulp of the limit, and the loads
would jump there; the ramp keeps every load continuous, at the price of an optimality
error below 1e-9 in the multipliers of the pages on it.
"""

from __future__ import annotations

from typing import Any

import numpy as np
from numpy.typing import NDArray

from models.allocation.freshness import Objective

FloatArray = NDArray[np.float64]

#: Width of the ramp just below phi's limit, relative to the limit.
EDGE = 1e-9
_POINTS = 1 << 16  # table nodes
_R_LOW, _R_HIGH = 1e-17, 1e6  # r range of the table; beyond it phi is a power law


class PhiInverse:
    """``f = clip(rate / r(t))`` with ``phi(r(t)) = t``, and its derivatives in ``m``.

    Build one with :func:`inverse_of` (tables are cached per objective).
    """

    def __init__(self, objective: Objective, points: int = _POINTS) -> None:
        self.objective = objective
        self.limit = float(objective.phi_limit)
        self.bounded = bool(np.isfinite(self.limit))
        self.edge = self.limit * (1 - EDGE) if self.bounded else np.inf
        dense = np.linspace(np.log(_R_LOW), np.log(_R_HIGH), 100_001)
        phi = objective.phi(np.exp(dense))
        inside = phi < self.edge
        u_dense = self._u(phi[inside])
        top = float(self._u(np.array([self.edge]))[0]) if self.bounded else float(u_dense[-1])
        # Nodes exactly where a read puts them, u0 + i h: grid[1] - grid[0] of a linspace
        # is h rounded at u0's scale (6e-12 relative), 65535 steps off by 1.5e-10 in u.
        h = (top - float(u_dense[0])) / (points - 1)
        grid = float(u_dense[0]) + np.arange(points) * h
        log_r = np.interp(grid, u_dense, dense[inside])
        for _ in range(4):  # Newton polish on u(phi(r)) = grid, in log r
            r = np.exp(log_r)
            u, du = self._u_of_r(r)
            log_r -= (u - grid) / (r * objective.phi_slope(r) * du)
        r = np.exp(log_r)
        slope = h / (r * objective.phi_slope(r) * self._u_of_r(r)[1])  # dy/du, in grid steps
        second = _stencil(slope)  # d2y/du2 in grid steps
        # Beyond the ends phi is a power law (y linear in u): the end nodes extrapolate
        # along their slope. At the top of a bounded phi no page goes past the edge node.
        second[0] = 0.0
        if not self.bounded:
            second[-1] = 0.0
        self.u0 = float(grid[0])
        self.inv_h = 1.0 / h
        self.last = points - 1
        self.c0 = log_r
        self.c1 = slope
        self.c2 = second / 2.0
        self.edge_r = float(r[-1]) if self.bounded else 0.0
        # u = log(x) + log(limit) for bounded phi, x = t / (limit - t): fold the constant
        self.shift = self.u0 - (np.log(self.limit) if self.bounded else 0.0)
        # float32 copies for cheap refreshes: exp(-y) at the nodes, and the coefficients
        self.e0_single = np.exp(-log_r).astype(np.float32)
        self.c1_single = self.c1.astype(np.float32)
        self.c2_single = self.c2.astype(np.float32)

    def _u(self, t: FloatArray) -> FloatArray:
        with np.errstate(divide="ignore"):
            if self.bounded:
                return np.asarray(np.log(t * self.limit / (self.limit - t)), dtype=np.float64)
            return np.asarray(np.log(t), dtype=np.float64)

    def _u_of_r(self, r: FloatArray) -> tuple[FloatArray, FloatArray]:
        """u(phi(r)) and du/dphi there, with ``limit - phi`` from the objective's ``phi_gap``
        where it has one: near the limit the subtraction would leave ~eps / gap relative
        (2e-7 at the edge) in u, and as much times dy/du in the table."""
        phi = self.objective.phi(r)
        if not self.bounded:
            return np.log(phi), 1.0 / phi
        gap_of = self.objective.phi_gap
        gap = gap_of(r) if gap_of is not None else self.limit - phi
        return np.log(phi * self.limit / gap), self.limit / (phi * gap)

    def frequency(
        self,
        t: FloatArray,
        rate: FloatArray,
        scale: FloatArray,
        f_min: FloatArray,
        f_max: FloatArray,
    ) -> tuple[FloatArray, FloatArray]:
        """f = clip(rate / r(t)) and df/dm (t = m * scale), 0 where clipped."""
        raw, d1, _ = self.raw_expansion(t, rate, scale, order=1)
        f = np.fmin(np.fmax(raw, f_min), f_max)  # NaN (0 x inf: nothing to gain) -> f_min
        np.copyto(d1, 0.0, where=~inside_bounds(raw, d1, f_min, f_max))
        return f, d1

    def raw_expansion(
        self,
        t: FloatArray,
        rate: NDArray[np.floating[Any]],
        scale: NDArray[np.floating[Any]],
        order: int = 2,
        dtype: type[np.floating[Any]] = np.float64,
    ) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """Unclipped f, df/dm and d2f/dm2 / 2 at t = m * scale (up to ``order``; empty beyond).

        ``t`` is float64; the rest is computed in ``dtype`` (``rate`` and ``scale`` must
        be of it). float32 is good to a few 1e-7 relative: for refreshes whose boxes are
        not final (the offset from the node is exact, and the node's own ``exp(-y)``
        comes from a float32 table of its own rather than from a float32 ``y``).

        With ``x = t / (limit - t)`` (0 for unbounded phi), ``u = log x + const`` and
        ``A = dy/du``: ``m df/dm = -f A (1 + x)`` and ``m^2 d2f/dm2 = f (1 + x)
        ((A^2 - y'') (1 + x) - A (x - 1))``. On the ramp below phi's limit f is linear in
        m (second coefficient 0).
        """
        single = dtype is np.float32
        if self.bounded:
            below = np.minimum(t, self.edge)
            x = self.limit - below
            np.divide(below, x, out=x)
        else:
            below = t
            x = t
        with np.errstate(divide="ignore", invalid="ignore"):
            s = np.log(x)
            inv_m = np.divide(scale, below, dtype=dtype) if order >= 1 else x  # 1 / m
        s -= self.shift
        s *= self.inv_h
        np.clip(s, -1e300, 1e300, out=s)  # t = 0 (or inf): far along the end node's slope
        nearest = s + 0.5
        np.clip(nearest, 0.0, float(self.last), out=nearest)
        index = nearest.astype(np.intp)  # the nearest node (the end node beyond the table)
        s -= index  # the offset from it, in grid steps
        with np.errstate(over="ignore"):  # t = 0 (pinned pages): inf, and f goes to f_min
            offset: NDArray[Any] = s.astype(np.float32) if single else s
        c1: NDArray[Any] = (self.c1_single if single else self.c1).take(index)
        c2: NDArray[Any] = (self.c2_single if single else self.c2).take(index)
        empty = np.zeros(0, dtype=dtype)
        with np.errstate(over="ignore", invalid="ignore"):
            raw = c2 * offset
            slope = raw + raw if order >= 1 else empty
            raw += c1
            raw *= offset
            if single:
                np.negative(raw, out=raw)
                np.exp(raw, out=raw)
                raw *= self.e0_single.take(index)
            else:
                raw += self.c0.take(index)
                np.negative(raw, out=raw)
                np.exp(raw, out=raw)
            raw *= rate
            # NaN anywhere: no page is taken for given up or on the ramp (max is NaN)
            highest = float(np.max(t)) if self.bounded and t.size else 0.0
            if highest >= self.limit:  # given up: f 0, and f' and f'' with it (both are f x
                # finite factors of the edge's node, where t is held: see ``below``)
                np.multiply(raw, t < self.limit, out=raw)
            if order < 1:
                return self._ramp(t, rate, scale, raw, empty, empty, highest)
            slope += c1  # dy/du in grid steps
            slope *= self.inv_h  # A
            if self.bounded:
                g: NDArray[Any] = x.astype(dtype) if single else x
                less = g - 1.0
                g += 1.0
            else:
                g = np.ones_like(raw)
                less = -g
            d1 = slope * g
            d2 = empty
            if order >= 2:
                d2 = slope * slope
                c2 *= 2.0 * self.inv_h * self.inv_h  # y''
                d2 -= c2
                d2 *= g
                less *= slope
                d2 -= less
                d2 *= g
                d2 *= raw
            d1 *= raw
            d1 *= inv_m
            np.negative(d1, out=d1)
            if order >= 2:
                inv_m *= inv_m
                inv_m *= 0.5
                d2 *= inv_m
        return self._ramp(t, rate, scale, raw, d1, d2, highest)

    def _ramp(
        self,
        t: FloatArray,
        rate: NDArray[Any],
        scale: NDArray[Any],
        raw: NDArray[Any],
        d1: NDArray[Any],
        d2: NDArray[Any],
        highest: float,
    ) -> tuple[NDArray[Any], NDArray[Any], NDArray[Any]]:
        """Pages strictly on the ramp below phi's limit (few), one by one: f linear in m
        (computed ones are empty). ``highest``: the largest t (NaN if any is).

        Pages at or past the limit are zero already (given up: f, f' and f'' all 0; the
        derivatives may be -0, which no caller tells from 0: each replaces them outside
        the bounds, and f = 0 is never inside).
        """
        if highest > self.edge:
            on = t > self.edge
            on &= t < self.limit
            if not on.any():
                return raw, d1, d2
            ramp = np.flatnonzero(on)
            width = self.limit - self.edge
            share = np.clip((self.limit - t[ramp]) / width, 0.0, 1.0)
            top = rate[ramp] / self.edge_r
            raw[ramp] = top * share
            if d1.size:
                d1[ramp] = np.where(share > 0, -top * scale[ramp] / width, 0.0)
            if d2.size:
                d2[ramp] = 0.0
        return raw, d1, d2


_TABLES: dict[tuple[str, int], PhiInverse] = {}


def inverse_of(objective: Objective) -> PhiInverse:
    """The table for ``objective``, built once per objective (keyed by name and identity)."""
    key = (objective.name, id(objective))
    table = _TABLES.get(key)
    if table is None or table.objective is not objective:
        table = _TABLES[key] = PhiInverse(objective)
    return table


def inside_bounds(
    raw: FloatArray, slope: FloatArray, f_min: FloatArray, f_max: FloatArray
) -> NDArray[np.bool_]:
    """Where the unclipped frequency lies strictly between the bounds (and is usable)."""
    inside = raw > f_min
    inside &= raw < f_max
    inside &= np.isfinite(slope)
    return inside


def _stencil(values: FloatArray) -> FloatArray:
    """The derivative of a smooth tabulated function, per grid step (five-point stencil)."""
    out = np.empty_like(values)
    out[2:-2] = (values[:-4] - 8.0 * values[1:-3] + 8.0 * values[3:-1] - values[4:]) / 12.0
    out[:2] = values[1:3] - values[:2]
    out[-2:] = values[-2:] - values[-3:-1]
    return out
