"""A refresh: every page's frequency expanded to second order around its slot's centre.

For :mod:`models.allocation_local`. One pass over the pages (in chunks, in threads)
reads each page's f, f' and f''/2 at its centre from :mod:`models.allocation_table`,
decides whether its expansion can be trusted throughout the box (else it is a *boundary*
page, evaluated exactly by the model), and sums the trusted ones per slot into the
moments :class:`models.allocation_model.Model` is made of.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, TypeVar

import numpy as np
from numpy.typing import NDArray

from models.allocation_model import MOMENTS, Centres
from models.allocation_table import PhiInverse, inside_bounds, inverse_of
from models.rate_solver import CHUNK_PAGES, bincount

if TYPE_CHECKING:
    from models.allocation import AllocationProblem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]
T = TypeVar("T")

_RATIO = 0.35  # smooth: the second-order term stays below this share of the first in the box
PAGE_TOLERANCE = 1e-12  # relative error a page's expansion may have at the answer


@dataclass(frozen=True)
class Pages:
    """The per-page arrays a refresh reads: all pages, or a gathered subset of them."""

    index: IntArray | None  # page numbers (None: all pages, in order)
    cost: FloatArray
    scale: FloatArray  # 0 where a visit gains nothing (the page stays at its minimum)
    rate: FloatArray
    f_min: FloatArray
    f_max: FloatArray
    host: NDArray[np.int64]
    inverse: PhiInverse

    @classmethod
    def of(cls, problem: AllocationProblem, scale: FloatArray) -> Pages:
        nothing = np.isinf(scale)
        return cls(
            None,
            problem.costs,
            np.where(nothing, 0.0, scale),
            problem.rates,
            problem.min_frequency,
            np.where(nothing, problem.min_frequency, problem.max_frequency),
            problem.hosts,
            inverse_of(problem.objective),
        )

    def subset(self, index: IntArray) -> Pages:
        return Pages(
            index,
            self.cost[index],
            self.scale[index],
            self.rate[index],
            self.f_min[index],
            self.f_max[index],
            self.host[index],
            self.inverse,
        )

    @property
    def size(self) -> int:
        return int(self.cost.shape[0])


@dataclass
class Refresh:
    """What one refresh of some pages yields."""

    moments: FloatArray  # (MOMENTS, slots)
    boundary: IntArray  # page numbers
    host_load: FloatArray | None  # every host's exact load at the centres (full refreshes)


def expand(
    pages: Pages,
    slot: IntArray,
    c: Centres,
    slots: int,
    n_hosts: int,
    out: tuple[FloatArray, FloatArray, FloatArray],
) -> Refresh:
    """Expand ``pages`` around their slots' centres: one pass, in parallel chunks.

    Every page's f, f' and f''/2 go to ``out``; its terms are summed per slot unless it
    is a boundary page. A full refresh (all pages, in order) also sums every host's load.
    Candidate pages come in runs of one slot.
    """
    n = pages.size
    full = pages.index is None
    f0, d1, d2 = out
    risky = bool(c.final.any())
    # one centre in mu for every slot (always so in a full refresh): scalars suffice
    same = bool(np.all(c.mu == c.mu[0]) and np.all(c.mu_reach == c.mu_reach[0]))
    mu, mu_reach = float(c.mu[0]), float(c.mu_reach[0])

    def run(lo: int) -> tuple[FloatArray, IntArray, FloatArray | None]:
        part = slice(lo, min(lo + CHUNK_PAGES, n))
        cost, s, scale = pages.cost[part], slot[part], pages.scale[part]
        m0 = mu * cost if same else c.mu[s] * cost
        if slots > 1:
            m0 += c.nu[s]
            dm = np.abs(cost + c.follow[s])  # the box is sheared along nu's follow
            dm *= mu_reach if same else c.mu_reach[s]
            dm += c.nu_reach[s]
        else:
            dm = mu_reach * cost
        t = m0 * scale
        raw, r1, r2 = pages.inverse.raw_expansion(t, pages.rate[part], scale)
        f_min, f_max = pages.f_min[part], pages.f_max[part]
        f = f0[part]
        np.fmax(raw, f_min, out=f)  # NaN (0 x inf: nothing to gain) -> f_min
        np.fmin(f, f_max, out=f)
        inside = inside_bounds(raw, r1, f_min, f_max)
        dt = dm * scale
        boundary = _boundary(pages.inverse, raw, r1, r2, t, dm, dt, f_min, f_max)
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kappa = r2 * r2
            kappa /= np.abs(r1)
            if risky:  # in a final box a page must be exact to 1e-12: else boundary
                risk = kappa * dm
                risk *= dm
                risk *= dm
                boundary |= inside & ~(risk <= PAGE_TOLERANCE * f)
        load = bincount(pages.host[part], f, n_hosts) if full else None
        outside = ~inside
        np.copyto(r1, 0.0, where=outside)
        np.copyto(r2, 0.0, where=outside)
        d1[part], d2[part] = r1, r2
        # the sums are over smooth pages: boundary pages' terms go (they are exact)
        outside |= boundary
        for values in (r1, r2, kappa):
            np.copyto(values, 0.0, where=outside)
        smooth_f = np.where(boundary, 0.0, f)
        if full:
            moments = moments_of(s, cost, smooth_f, r1, r2, kappa, slots)
        else:
            moments = sorted_moments(s, cost, smooth_f, r1, r2, kappa, slots)
        return moments, np.flatnonzero(boundary) + lo, load

    parts = chunked(run, n)
    sums = np.sum([m for m, _, _ in parts], axis=0)
    boundary = np.concatenate([b for _, b, _ in parts])
    host_load = np.sum([h for _, _, h in parts if h is not None], axis=0) if full else None
    return Refresh(sums, boundary, host_load)


def chunked(run: Callable[[int], T], n: int) -> list[T]:
    """``run(start)`` for every chunk of ``n`` pages, in threads where there are cores."""
    starts = range(0, n, CHUNK_PAGES)
    threads = os.cpu_count() or 1
    if threads == 1 or n <= CHUNK_PAGES:
        return [run(lo) for lo in starts]
    with ThreadPoolExecutor(max_workers=threads) as pool:
        return list(pool.map(run, starts))


def _boundary(
    inverse: PhiInverse,
    raw: FloatArray,
    r1: FloatArray,
    r2: FloatArray,
    t: FloatArray,
    dm: FloatArray,
    dt: FloatArray,
    f_min: FloatArray,
    f_max: FloatArray,
) -> BoolArray:
    """Pages whose second-order expansion cannot be trusted everywhere in the box.

    A bound may start or stop binding in the box (the unclipped frequency's reach, with a
    margin for curvature, crosses it), the page may reach the ramp below phi's limit, or
    its Taylor series converges too slowly (|f''/2| dm above ``_RATIO`` |f'|). ``dt`` is
    the box's reach in t.
    """
    with np.errstate(invalid="ignore", over="ignore"):
        reach = np.abs(r1)
        slow = np.abs(r2) * dm > _RATIO * reach
        reach *= dm
        reach *= 1.5
        # one side of both bounds all along (an inside page fails the last two tests)
        low = raw - reach
        high = raw + reach
        trusted = (low > f_min) & (high < f_max)
        trusted |= low >= f_max
        trusted |= high <= f_min
        trusted &= ~slow
        if inverse.bounded:  # the ramp below phi's limit is out of the box
            trusted &= (t + dt < inverse.edge) | (t - dt > inverse.limit)
    trusted |= dt == 0  # nothing to gain: pinned at the minimum
    return ~trusted


def moments_of(
    slot: IntArray,
    c: FloatArray,
    f: FloatArray,
    d1: FloatArray,
    d2: FloatArray,
    kappa: FloatArray,
    slots: int,
) -> FloatArray:
    """Sums per slot of f {1, c}, f' {1, c, c^2}, f''/2 {1, ..., c^3}, kappa {1, ..., c^4}.

    Slot 0 (hosts held at 0: no nu to move) needs only its spend's rows, 1, 4, 8 and 13:
    dot products over all pages less the candidates' share.
    """
    out = np.zeros((MOMENTS, slots))
    held = np.flatnonzero(slot)
    if held.size:
        s = slot[held]
        for row, term in _series(c[held], f[held], d1[held], d2[held], kappa[held]):
            out[row] = bincount(s, term, slots)
    weight = c.copy()
    for row, values in ((1, f), (4, d1), (8, d2), (13, kappa)):
        # einsum, not dot: BLAS would start threads of its own for every chunk
        out[row, 0] = float(np.einsum("i,i->", values, weight)) - float(np.sum(out[row, 1:]))
        if row != 13:
            weight *= c
    return out


def sorted_moments(
    slot: IntArray,
    c: FloatArray,
    f: FloatArray,
    d1: FloatArray,
    d2: FloatArray,
    kappa: FloatArray,
    slots: int,
) -> FloatArray:
    """:func:`moments_of` for pages of candidate hosts in runs of one slot: run sums."""
    out = np.zeros((MOMENTS, slots))
    starts = np.concatenate([[0], np.flatnonzero(slot[1:] != slot[:-1]) + 1])
    which = slot[starts]
    for row, term in _series(c, f, d1, d2, kappa):
        np.add.at(out[row], which, np.add.reduceat(term, starts))
    return out


def _series(
    c: FloatArray, f: FloatArray, d1: FloatArray, d2: FloatArray, kappa: FloatArray
) -> Iterator[tuple[int, FloatArray]]:
    """The ``MOMENTS`` per-page terms in row order: f {1, c}, f' {1, c, c^2}, f''/2
    {1, ..., c^3}, kappa {1, ..., c^4} (each power one multiplication from the last)."""
    row = 0
    for values, powers in ((f, 2), (d1, 3), (d2, 4), (kappa, 5)):
        term = values
        for power in range(powers):
            yield row, term
            row += 1
            if power + 1 < powers:
                term = term * c
