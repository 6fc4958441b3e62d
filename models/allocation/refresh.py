"""A refresh: every page's frequency expanded to second order around its slot's centre.

For :mod:`models.allocation.local`. One pass over the pages (in blocks small enough for
the L2 cache, in the calling thread: see ``PASS_THREADS``) reads each page's f, f' and
f''/2 at its centre from :mod:`models.allocation.table` (in float32 while no box is
final), decides whether its
expansion can be trusted throughout the box (else it is a *boundary* page, evaluated
exactly by the model), and sums the trusted ones per slot into the moments
:class:`models.allocation.model.Model` is made of. :func:`evaluate` is the last pass: the
exact frequencies at the answer, with the sums the solution reports.
"""

from __future__ import annotations

import math
import os
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np
from numpy.typing import NDArray

from models.allocation.model import MOMENTS, Centres, SlotArray, slot_sums
from models.allocation.solver import weighted_sums
from models.allocation.table import PhiInverse, inside_bounds, inverse_of
from models.estimation.rate_solver import CHUNK_PAGES

if TYPE_CHECKING:
    from models.allocation.problem import AllocationProblem

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]
T = TypeVar("T")

_RATIO = 0.35  # smooth: the second-order term stays below this share of the first in the box
PAGE_TOLERANCE = 1e-12  # relative error a page's expansion may have at the answer
BLOCK_PAGES = 1 << 15  # pages per block of a refresh: its temporaries stay in L2 cache
#: Pages per group of blocks: the unit the per-host sums are taken over (one bincount a
#: group, not a block: each costs a pass over every host) and the unit of threads.
GROUP_PAGES = 1 << 18
#: Threads a refresh or evaluation runs its blocks in. One: a block is ~60 numpy calls on
#: 32k pages, each releasing and taking back the GIL, and two threads handing it over
#: cost ~40% more CPU for the same pass (10 M pages, 2 cores: an expansion 1.35 s CPU in
#: one thread, 1.6-1.7 s in two; the final evaluation 0.5 s against 0.7-1.0 s), for a
#: wall-time gain that only an idle machine sees. One thread also sums every host's load
#: in page order, the same floats on every run.
PASS_THREADS = 1


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
        if nothing.any():  # pinned at the minimum: scale 0 keeps t finite
            scale = np.where(nothing, 0.0, scale)
            f_max = np.where(nothing, problem.min_frequency, problem.max_frequency)
        else:
            f_max = problem.max_frequency
        return cls(
            None,
            problem.costs,
            scale,
            problem.rates,
            problem.min_frequency,
            f_max,
            problem.hosts,
            inverse_of(problem.objective),
        )

    def subset(self, index: IntArray) -> Pages:
        """The pages numbered ``index`` (of all pages)."""
        return self._gather(index, index)

    def pick(self, rows: IntArray) -> Pages:
        """The pages at positions ``rows`` of this subset."""
        assert self.index is not None
        return self._gather(rows, self.index[rows])

    def _gather(self, rows: IntArray, index: IntArray) -> Pages:
        """Each array at ``rows``: in threads when many (a gather is memory-bound)."""
        arrays = (self.cost, self.scale, self.rate, self.f_min, self.f_max, self.host)
        threads = os.cpu_count() or 1
        if threads > 1 and rows.shape[0] > CHUNK_PAGES:
            with ThreadPoolExecutor(max_workers=threads) as pool:
                out = list(pool.map(lambda a: a.take(rows), arrays))
        else:
            out = [a.take(rows) for a in arrays]
        cost, scale, rate, f_min, f_max, host = out
        return Pages(index, cost, scale, rate, f_min, f_max, host, self.inverse)

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
    slot: SlotArray,
    c: Centres,
    slots: int,
    n_hosts: int,
    single: bool = False,
    held: IntArray | None = None,
) -> Refresh:
    """Expand ``pages`` around their slots' centres: one pass, in parallel blocks.

    Every page's f, f' and f''/2 are summed per slot unless it is a boundary page (nothing
    per page is kept: the answer is evaluated exactly at the end, see :func:`evaluate`). A
    full refresh (all pages, in order) also sums every host's load.
    With ``single`` (wide boxes only: never a final one) the pages are read in float32
    (see :meth:`~models.allocation.table.PhiInverse.raw_expansion`): the answer then only
    has to land in the next box. Blocks of ``BLOCK_PAGES`` keep the temporaries in cache.
    ``held`` (a full refresh's option): the pages whose slot is not 0, in order; slot 0's
    pages then take slot 0's centre as scalars, without a lookup per page.
    """
    n = pages.size
    full = pages.index is None
    loads = HostSums(n_hosts if full else 0)
    risky = bool(c.final.any())
    assert not (single and risky), "a final box needs float64"
    dtype: type[np.floating[Any]] = np.float32 if single else np.float64
    # one centre in mu for every slot (always so in a full refresh): scalars suffice
    same = bool(np.all(c.mu == c.mu[0]) and np.all(c.mu_reach == c.mu_reach[0]))
    mu, mu_reach = float(c.mu[0]), float(c.mu_reach[0])
    inverse = pages.inverse
    # slot 0 at nu = 0 with nothing to follow (as always): its pages' m and reach are
    # cost x mu and cost x mu's reach, the same floats as through the lookups
    scalar = held is not None and full and same and slots > 1
    scalar = scalar and not (c.nu[0] or c.follow[0] or c.nu_reach[0])
    if scalar:
        assert held is not None and GROUP_PAGES % BLOCK_PAGES == 0
        held_slot = slot.take(held)
        ends = np.searchsorted(held, np.arange(0, n + BLOCK_PAGES, BLOCK_PAGES))

    def run(lo: int, out: NDArray[np.floating[Any]]) -> tuple[FloatArray, IntArray]:
        part = slice(lo, min(lo + BLOCK_PAGES, n))
        cost, s, scale = pages.cost[part], slot[part], pages.scale[part]
        mine: tuple[IntArray, SlotArray, FloatArray] | None = None
        if scalar:
            assert held is not None
            block = lo // BLOCK_PAGES
            a, b = int(ends[block]), int(ends[block + 1])
            rows, own = held[a:b] - lo, held_slot[a:b]
            own_cost = cost.take(rows)
            m0 = cost * mu
            dm = cost * mu_reach
            m0[rows] = own_cost * mu + c.nu.take(own)
            reach = own_cost + c.follow.take(own)  # the box is sheared along nu's follow
            np.abs(reach, out=reach)
            reach *= mu_reach
            reach += c.nu_reach.take(own)
            dm[rows] = reach
            mine = rows, own, own_cost
        elif slots > 1:
            m0 = cost * mu if same else c.mu[s] * cost
            m0 += c.nu.take(s)
            dm = cost + c.follow.take(s)  # the box is sheared along nu's follow
            np.abs(dm, out=dm)
            dm *= mu_reach if same else c.mu_reach[s]
            dm += c.nu_reach.take(s)
        else:
            m0 = cost * mu if same else c.mu[s] * cost
            dm = cost * mu_reach
        t = m0
        t *= scale
        dt = dm * scale
        rate, f_min, f_max = pages.rate[part], pages.f_min[part], pages.f_max[part]
        if dtype is np.float32:
            rate, scale = rate.astype(dtype), scale.astype(dtype)
            f_min, f_max = f_min.astype(dtype), f_max.astype(dtype)
            dm = dm.astype(dtype)
        raw, r1, r2 = inverse.raw_expansion(t, rate, scale, dtype=dtype)
        f = out[: raw.shape[0]]
        np.fmax(raw, f_min, out=f)  # NaN (0 x inf: nothing to gain) -> f_min
        np.fmin(f, f_max, out=f)
        inside = inside_bounds(raw, r1, f_min, f_max)
        boundary = _boundary(inverse, raw, r1, r2, t, dm, dt, f_min, f_max)
        # Masks are applied by multiplying (much cheaper than masked writes or np.where),
        # once the pages outside their bounds hold zeros: r1 and r2 times ``inside`` (a
        # -0 where one was negative: no sum or test below tells it from 0), and the NaN
        # this makes of an inf or NaN outside the bounds (pinned pages) set to 0.
        for values in (r1, r2):
            np.multiply(values, inside, out=values)
            bad = np.isnan(values)
            if bad.any():
                bad &= ~inside
                values[bad] = 0.0
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            kappa = r2 * r2
            kappa /= np.abs(r1) + (~inside).astype(dtype)  # 0 / 1 outside the bounds
            if risky:  # in a final box a page must be exact to 1e-12: else boundary
                risk = kappa * dm
                risk *= dm
                risk *= dm
                boundary |= inside & ~(risk <= PAGE_TOLERANCE * f)
        # the sums are over smooth pages: boundary pages' terms go (they are exact); the
        # loads take every page's f, from ``out``, once the group's blocks are done
        smooth = (~boundary).astype(dtype)
        f = f * smooth
        for values in (r1, r2, kappa):
            values *= smooth
        if full:
            cost_d = cost.astype(dtype, copy=False)
            moments = moments_of(s, cost_d, f, r1, r2, kappa, slots, mine)
        else:
            moments = slot_moments(s, cost, f, r1, r2, kappa, slots)
        return moments, np.flatnonzero(boundary) + lo

    def run_group(lo: int) -> list[tuple[FloatArray, IntArray]]:
        hi = min(lo + GROUP_PAGES, n)
        f = np.empty(min(BLOCK_PAGES, hi - lo), dtype=dtype)
        if not full:
            return [run(b, f) for b in range(lo, hi, BLOCK_PAGES)]
        group = np.empty(hi - lo, dtype=dtype)
        done = [run(b, group[b - lo :]) for b in range(lo, hi, BLOCK_PAGES)]
        loads.add(pages.host[lo:hi], group)
        return done

    parts = [part for group in chunked(run_group, n, GROUP_PAGES, PASS_THREADS) for part in group]
    sums = np.sum([m for m, _ in parts], axis=0)
    boundary = np.concatenate([b for _, b in parts])
    return Refresh(sums, boundary, loads.total() if full else None)


def evaluate(
    pages: Pages,
    slot: SlotArray,
    mu: float,
    nu: FloatArray,
    n_hosts: int,
    weights: FloatArray | None = None,
) -> tuple[FloatArray, FloatArray, float, tuple[float, float] | None]:
    """Every page's exact frequency at ``mu`` and its slot's ``nu``; host loads; spend.

    One pass in parallel blocks (frequencies only: no derivatives), the loads and the
    spend summed on the way, and with ``weights`` (all pages) the value-weighted
    freshness and objective too (see :func:`~models.allocation.solver.weighted_sums`).
    """
    n = pages.size
    f = np.empty(n)
    loads = HostSums(n_hosts)
    inverse = pages.inverse

    def run(lo: int) -> tuple[float, float, float]:
        part = slice(lo, min(lo + BLOCK_PAGES, n))
        cost, scale, rate = pages.cost[part], pages.scale[part], pages.rate[part]
        t = cost * mu
        t += nu.take(slot[part])
        t *= scale
        raw = inverse.raw_expansion(t, rate, scale, order=0)[0]
        out = f[part]
        np.fmax(raw, pages.f_min[part], out=out)  # NaN (0 x inf: nothing to gain) -> f_min
        np.fmin(out, pages.f_max[part], out=out)
        spend = float(np.einsum("i,i->", cost, out))
        if weights is None:
            return spend, 0.0, 0.0
        return spend, *weighted_sums(inverse.objective, rate, weights[part], out)

    def run_group(lo: int) -> list[tuple[float, float, float]]:
        hi = min(lo + GROUP_PAGES, n)
        done = [run(b) for b in range(lo, hi, BLOCK_PAGES)]
        loads.add(pages.host[lo:hi], f[lo:hi])
        return done

    parts = [part for group in chunked(run_group, n, GROUP_PAGES, PASS_THREADS) for part in group]
    spend = math.fsum(a for a, _, _ in parts)
    values = None
    if weights is not None:
        values = math.fsum(b for _, b, _ in parts), math.fsum(c for _, _, c in parts)
    return f, loads.total(), spend, values


class HostSums:
    """Per-host sums accumulated by the threads of a pass, one array per thread."""

    def __init__(self, n_hosts: int) -> None:
        self.n_hosts = n_hosts
        self.parts: dict[int, FloatArray] = {}

    def add(self, host: NDArray[np.int64], values: NDArray[np.floating[Any]]) -> None:
        if not self.n_hosts:
            return
        part = np.asarray(np.bincount(host, weights=values, minlength=self.n_hosts), np.float64)
        mine = self.parts.get(threading.get_ident())
        if mine is None:
            self.parts[threading.get_ident()] = part
        else:
            mine += part

    def total(self) -> FloatArray:
        if not self.parts:
            return np.zeros(self.n_hosts)
        return np.asarray(np.sum(list(self.parts.values()), axis=0), dtype=np.float64)


def chunked(
    run: Callable[[int], T], n: int, size: int = CHUNK_PAGES, threads: int | None = None
) -> list[T]:
    """``run(start)`` for every chunk of ``n`` pages, in ``threads`` (default: one a core)."""
    starts = range(0, n, size)
    threads = threads or os.cpu_count() or 1
    if threads == 1 or n <= size:
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
    slot: SlotArray,
    c: NDArray[np.floating[Any]],
    f: NDArray[np.floating[Any]],
    d1: NDArray[np.floating[Any]],
    d2: NDArray[np.floating[Any]],
    kappa: NDArray[np.floating[Any]],
    slots: int,
    mine: tuple[IntArray, SlotArray, FloatArray] | None = None,
) -> FloatArray:
    """Sums per slot of f {1, c}, f' {1, c, c^2}, f''/2 {1, ..., c^3}, kappa {1, ..., c^4}.

    Slot 0 (hosts held at 0: no nu to move) needs only its spend's rows, 1, 4, 8 and 13:
    dot products over all pages less the candidates' share. The candidates' terms are
    summed in float64 whatever the pages' dtype. ``mine``, when known: the candidates'
    positions, slots and (float64) costs.
    """
    if mine is None:
        held = np.flatnonzero(slot)
        held_slot, c_held = slot[held], np.asarray(c[held], dtype=np.float64)
    else:
        held, held_slot, own_cost = mine
        c_held = np.asarray(own_cost.astype(c.dtype, copy=False), dtype=np.float64)
    if held.size:
        pages = (f[held], d1[held], d2[held], kappa[held])
        out = slot_moments(held_slot, c_held, *pages, slots)
    else:
        out = np.zeros((MOMENTS, slots))
    weight = c.copy()
    for row, values in ((1, f), (4, d1), (8, d2), (13, kappa)):
        # einsum, not dot: BLAS would start threads of its own for every chunk
        out[row, 0] = float(np.einsum("i,i->", values, weight)) - float(np.sum(out[row, 1:]))
        if row != 13:
            weight *= c
    return out


def slot_moments(
    slot: SlotArray,
    c: FloatArray,
    f: NDArray[np.floating[Any]],
    d1: NDArray[np.floating[Any]],
    d2: NDArray[np.floating[Any]],
    kappa: NDArray[np.floating[Any]],
    slots: int,
) -> FloatArray:
    """:func:`moments_of` for pages of candidate hosts only: every row by slot."""
    out = np.zeros((MOMENTS, slots))
    arrays = (np.asarray(a, dtype=np.float64) for a in (f, d1, d2, kappa))
    for row, term in _series(c, *arrays):
        out[row] = slot_sums(slot, term, slots)
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
