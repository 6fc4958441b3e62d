"""The local model of a big allocation problem, and the root-finder that solves it.

A refresh (see :mod:`models.allocation.local`) leaves, per *slot* (slot 0: every page
whose host's multiplier is held at 0; slot k: the k-th candidate host), the sums over its
smooth pages of each page's second-order expansion around the slot's centre (and of an
estimate of its third-order term), plus a list of boundary pages to evaluate exactly.
With ``d = mu - mu_c`` and ``e = nu - nu_c`` (the slot's centre) and ``dm = c d + e`` per
page, a slot's load and spend are

    load  = F + Dc d + D e + Ecc d^2 + 2 Ec d e + E e^2
    spend = Fc + Dcc d + Dc e + Eccc d^2 + 2 Ecc d e + Ec e^2

(``F = sum f``, ``Dc = sum c f'``, ``Ecc = sum c^2 f''/2`` and so on) plus the boundary
pages' exact frequencies. The model is solved nested: for a trial ``mu`` every candidate
host's ``nu`` at once, then ``mu`` on the total spend, both by :func:`decreasing_roots`,
inside the boxes the expansions are trusted in.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from functools import partial
from typing import Any

import numpy as np
from numpy.typing import NDArray

from models.allocation.solver import TOLERANCE
from models.allocation.table import PhiInverse

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
SlotArray = NDArray[np.integer[Any]]  # slot numbers (int32 over all pages)
BoolArray = NDArray[np.bool_]

#: Rows of the moments array: f {1, c}, f' {1, c, c^2}, f''/2 {1, c, c^2, c^3}, and
#: kappa = (f''/2)^2 / |f'| {1, c, c^2, c^3, c^4} (the size of the third-order term).
MOMENTS = 14
_THREAD_PAGES = 1 << 15  # boundary pages per thread, at least, when split between threads


def slot_sums(slot: SlotArray, values: NDArray[Any], slots: int) -> FloatArray:
    """Sum of ``values`` per slot (0..slots-1), as float64."""
    return np.asarray(np.bincount(slot, weights=values, minlength=slots), dtype=np.float64)


class UnresolvedError(Exception):
    """float64 cannot resolve a multiplier of the model: leave it to the direct solver."""


@dataclass
class Centres:
    """Per slot: the centre its pages were expanded around and the box they hold in."""

    mu: FloatArray
    nu: FloatArray
    mu_reach: FloatArray  # half-width of the box in mu
    nu_reach: FloatArray  # half-width in nu, about nu + follow (mu - mu_c); cut at 0
    follow: FloatArray  # how nu is expected to move with mu (the box is sheared along it)
    final: BoolArray  # small enough for the answer to be read from the expansions


@dataclass(frozen=True)
class BoundaryPages:
    """The pages evaluated exactly, with what their frequencies depend on."""

    index: IntArray
    cost: FloatArray
    scale: FloatArray
    rate: FloatArray
    f_min: FloatArray
    f_max: FloatArray
    slot: SlotArray


@dataclass(frozen=True)
class Answer:
    """The model's multipliers, and what held them (per slot; mu's own box)."""

    mu: float
    nu: FloatArray
    host_clamped: BoolArray
    mu_clamped: bool
    load_nu: FloatArray  # d load / d nu per slot at the answer
    spend_mu: float  # d spend / d mu, host multipliers following
    follow: FloatArray  # d nu / d mu per slot (0 where a host does not bind)
    spend_nu: FloatArray  # d spend / d nu per slot
    load: FloatArray  # per slot at the answer
    mu_beyond: float  # where held at its box, how much further Newton would take mu
    nu_beyond: FloatArray  # ... and each nu
    other: FloatArray  # where float64 cannot resolve nu, the neighbour above the root


class Model:
    """Spend and candidate loads: per-slot polynomials plus exactly evaluated pages."""

    def __init__(
        self,
        centres: Centres,
        moments: FloatArray,
        boundary: BoundaryPages,
        cap: FloatArray,
        budget: float,
        inverse: PhiInverse,
        tolerance: float,
    ) -> None:
        self.c = centres
        self.k = moments
        self.b = boundary
        self.cap = cap
        self.budget = budget
        self.inverse = inverse
        self.tolerance = tolerance
        # how close a host's root must be pinned where its load jumps across capacity
        self.resolution = 1e-14 if tolerance < 1e-10 else 1e-11
        self.slots = cap.shape[0]
        self.other = centres.nu.copy()
        self.lo_nu = np.zeros_like(cap)
        held = boundary.slot > 0
        self.free = _pick(boundary, ~held)  # boundary pages of hosts held at 0
        self.held = _pick(boundary, held)  # ... and of candidate hosts
        self._live = self.held  # the held pages of the hosts a root search still runs for

    def boundary_frequencies(self, mu: float, nu: FloatArray) -> FloatArray:
        b = self.b
        m = mu * b.cost + nu[b.slot]
        return self.inverse.frequency(m * b.scale, b.rate, b.scale, b.f_min, b.f_max)[0]

    def terms(
        self, mu: float, nu: FloatArray, only: BoolArray | None = None
    ) -> tuple[FloatArray, ...]:
        """Per slot: load, d load/d nu, d load/d mu, spend, d spend/d nu, d spend/d mu.

        With ``only`` (candidate slots), only those slots' values are asked for.
        """
        k = self.k
        d = mu - self.c.mu
        e = nu - self.c.nu
        de = d * e
        load = k[0] + k[3] * d + k[2] * e + k[7] * d * d + 2 * k[6] * de + k[5] * e * e
        load_nu = k[2] + 2 * k[6] * d + 2 * k[5] * e
        load_mu = k[3] + 2 * k[7] * d + 2 * k[6] * e
        spend = k[1] + k[4] * d + k[3] * e + k[8] * d * d + 2 * k[7] * de + k[6] * e * e
        spend_mu = k[4] + 2 * k[8] * d + 2 * k[7] * e
        # third order, estimated: f''' / 6 ~ (f''/2)^2 / f' = -kappa per page
        e2, d2 = e * e, d * d
        load -= k[9] * e2 * e + 3 * k[10] * de * e + 3 * k[11] * d2 * e + k[12] * d2 * d
        load_nu -= 3 * k[9] * e2 + 6 * k[10] * de + 3 * k[11] * d2
        load_mu -= 3 * k[10] * e2 + 6 * k[11] * de + 3 * k[12] * d2
        spend -= k[10] * e2 * e + 3 * k[11] * de * e + 3 * k[12] * d2 * e + k[13] * d2 * d
        spend_mu -= 3 * k[11] * e2 + 6 * k[12] * de + 3 * k[13] * d2
        spend_nu = load_mu.copy()
        pages = (
            (self.held, self.free) if only is None else (_pick(self.held, only[self.held.slot]),)
        )
        for b in pages:
            if not b.index.shape[0]:
                continue
            f, d1 = self._exact(b, mu, nu)
            n = self.slots
            cd1 = b.cost * d1
            load += slot_sums(b.slot, f, n)
            load_nu += slot_sums(b.slot, d1, n)
            load_mu += slot_sums(b.slot, cd1, n)
            spend += slot_sums(b.slot, b.cost * f, n)
            spend_nu += slot_sums(b.slot, cd1, n)
            spend_mu += slot_sums(b.slot, b.cost * cd1, n)
        return load, load_nu, load_mu, spend, spend_nu, spend_mu

    def loads(self, mu: float, nu: FloatArray, live: BoolArray) -> tuple[FloatArray, FloatArray]:
        """Per slot: load and d load/d nu (only the live slots' are asked for).

        The held boundary pages evaluated are those of the live hosts: a root search's live
        hosts only ever shrink, so each pick is taken from the last one.
        """
        k = self.k
        d = mu - self.c.mu
        e = nu - self.c.nu
        de = d * e
        e2, d2 = e * e, d * d
        load = k[0] + k[3] * d + k[2] * e + k[7] * d2 + 2 * k[6] * de + k[5] * e2
        load -= k[9] * e2 * e + 3 * k[10] * de * e + 3 * k[11] * d2 * e + k[12] * d2 * d
        load_nu = k[2] + 2 * k[6] * d + 2 * k[5] * e
        load_nu -= 3 * k[9] * e2 + 6 * k[10] * de + 3 * k[11] * d2
        rows = live[self._live.slot]
        if np.count_nonzero(rows) < 0.7 * rows.shape[0]:
            self._live = _pick(self._live, rows)
        b = self._live
        if b.index.shape[0]:
            f, d1 = self._exact(b, mu, nu)
            load += slot_sums(b.slot, f, self.slots)
            load_nu += slot_sums(b.slot, d1, self.slots)
        return load, load_nu

    def _exact(self, b: BoundaryPages, mu: float, nu: FloatArray) -> tuple[FloatArray, FloatArray]:
        """Boundary pages' frequencies and slopes (the smooth slope on the ramp).

        Many pages (the spend's evaluations after a wide box) are split between threads.
        """
        n = b.index.shape[0]
        threads = min(os.cpu_count() or 1, n // _THREAD_PAGES)
        if threads < 2:
            return self._exact_part(b, mu, nu, slice(None))
        f, d1 = np.empty(n), np.empty(n)
        step = -(-n // threads)

        def run(lo: int) -> None:
            part = slice(lo, min(lo + step, n))
            f[part], d1[part] = self._exact_part(b, mu, nu, part)

        with ThreadPoolExecutor(max_workers=threads) as pool:
            list(pool.map(run, range(0, n, step)))
        return f, d1

    def _exact_part(
        self, b: BoundaryPages, mu: float, nu: FloatArray, part: slice
    ) -> tuple[FloatArray, FloatArray]:
        cost, scale = b.cost[part], b.scale[part]
        t = mu * cost
        t += nu.take(b.slot[part])
        t *= scale
        f, d1 = self.inverse.frequency(t, b.rate[part], scale, b.f_min[part], b.f_max[part])
        if self.inverse.bounded:
            # A page on the ramp below phi's limit has a slope ~1e9 times its neighbours'
            # over 1e-9 of t: it would make Newton crawl and every error look small.
            # Steps and error estimates take the smooth slope; the ramp is crossed by
            # bracketing.
            np.copyto(d1, 0.0, where=t > self.inverse.edge)
        return f, d1

    def nu_box(self, mu: float) -> tuple[FloatArray, FloatArray]:
        middle = self.c.nu + self.c.follow * (mu - self.c.mu)
        lo = np.maximum(middle - self.c.nu_reach, 0.0)
        hi = np.maximum(middle + self.c.nu_reach, 0.0)
        lo[0] = hi[0] = 0.0
        return lo, hi

    def hosts(self, mu: float, guess: FloatArray) -> tuple[FloatArray, NDArray[np.int8]]:
        """Every candidate host's multiplier at ``mu`` (and how each root ended)."""
        limited = np.isfinite(self.cap)
        tol = self.tolerance * np.where(limited, self.cap, 1.0)
        lo, hi = self.nu_box(mu)
        self.lo_nu = lo

        self._live = self.held

        def gap(x: FloatArray, live: BoolArray) -> tuple[FloatArray, FloatArray]:
            load, load_nu = self.loads(mu, x, live)
            return np.where(limited, load - self.cap, -1.0), load_nu

        nu, state, other = decreasing_roots(
            gap,
            lo,
            hi,
            np.clip(guess, lo, hi),
            tol,
            self.resolution,
            split=partial(self._ramp_ends, mu) if self.inverse.bounded else None,
        )
        self.other = np.where(state == 2, other, nu)
        return nu, state

    def _ramp_ends(self, mu: float, a: FloatArray, b: FloatArray, live: BoolArray) -> FloatArray:
        """Per live host, the end of a boundary page's ramp inside (a, b) nearest the middle.

        A host's load is smooth in nu except across its pages' ramps below phi's limit
        (steep: a page drops from ~rate/37 to 0 within 1e-9 of t). Bisecting at their ends
        isolates the ramp the root lies on in a few steps, where the load is linear (NaN
        where no ramp ends inside).
        """
        out = np.full(a.shape, np.nan)
        h = self._live
        if not h.index.shape[0]:
            return out
        rows = np.flatnonzero(live[h.slot])
        if not rows.size:
            return out
        slot = h.slot[rows]
        scale, base = h.scale[rows], mu * h.cost[rows]
        with np.errstate(divide="ignore"):
            ends = np.concatenate(
                [self.inverse.edge / scale - base, self.inverse.limit / scale - base]
            )
        slot = np.concatenate([slot, slot])
        keep = (ends > a[slot]) & (ends < b[slot])
        ends, slot = ends[keep], slot[keep]
        if not ends.size:
            return out
        order = np.lexsort((np.abs(ends - 0.5 * (a + b)[slot]), slot))
        slot = slot[order]
        first = order[np.concatenate([[True], slot[1:] != slot[:-1]])]
        out[slot[np.concatenate([[True], slot[1:] != slot[:-1]])]] = ends[first]
        return out

    def solve(self, mu_lo: float, mu_hi: float, start: float) -> Answer:
        """The model's multipliers within ``mu_lo <= mu <= mu_hi`` and the host boxes."""
        guess = self.c.nu.copy()
        follow = np.zeros_like(guess)
        seen: dict[str, object] = {}

        def gap(x: FloatArray, live: BoolArray) -> tuple[FloatArray, FloatArray]:
            mu = float(np.exp(x[0]))
            last = float(seen.get("mu", mu))  # type: ignore[arg-type]
            nu, state = self.hosts(mu, guess + follow * (mu - last))
            load, load_nu, load_mu, spend, spend_nu, spend_mu = self.terms(mu, nu)
            jump = state == 2
            if jump.any():
                # Such a host's pages on the ramp are mixed to fill its capacity exactly (see
                # allocation_local's _mix): its spend is the same mix of both ends'.
                load_up, _, _, spend_up, *_ = self.terms(mu, self.other, jump)
                with np.errstate(divide="ignore", invalid="ignore"):
                    share = np.clip((self.cap - load) / (load_up - load), 0.0, 1.0)
                share = np.where(jump, np.nan_to_num(share), 0.0)
                spend = spend + share * (spend_up - spend)
            # a host mixed across its capacity (state 2) binds too: without its d nu / d mu
            # its next box would not follow mu, and would hold it as soon as mu moved
            binding = ((state == 0) | (state == 2)) & np.isfinite(self.cap)
            with np.errstate(divide="ignore", invalid="ignore"):
                follow[:] = np.where(binding & (load_nu < 0), -load_mu / load_nu, 0.0)
            guess[:] = nu
            slope = float(np.sum(spend_mu) + np.sum(spend_nu * follow))
            seen.update(mu=mu, nu=nu, state=state, load_nu=load_nu, slope=slope, nu_s=spend_nu)
            seen["load"] = load
            with np.errstate(divide="ignore", invalid="ignore"):
                seen["nu_beyond"] = np.nan_to_num(-(load - self.cap) / load_nu)
            gap_now = float(np.sum(spend)) / self.budget - 1.0
            seen["mu_beyond"] = -gap_now * self.budget / slope if slope < 0 else 0.0
            seen["follow"] = follow.copy()
            seen["gap"] = gap_now
            return (
                np.array([float(np.sum(spend)) / self.budget - 1.0]),
                np.array([mu * slope / self.budget]),
            )

        x, where, above = decreasing_roots(
            gap,
            np.array([np.log(mu_lo)]),
            np.array([np.log(mu_hi)]),
            np.array([np.log(start)]),
            np.array([self.tolerance]),
        )
        # Where the spend jumps across the budget between two floats of mu: in a wider box
        # the jump need not be the problem's (a host held at its box's edge), and its foot
        # is the next centre; in a final box the end nearer the budget will do if float64
        # leaves it within the budget's tolerance (a steep spend: one float of mu moving
        # it by ~1e-11), else a page on its ramp holds the root: the direct solver mixes.
        everywhere = np.ones(1, dtype=bool)
        if where[0] == 2 and self.c.final[0]:
            gap(above, everywhere)
            high = seen["gap"]
            assert isinstance(high, float)
            if abs(high) <= 0.5 * TOLERANCE:
                x = above
        mu = float(np.exp(x[0]))
        if mu != seen.get("mu"):
            gap(x, everywhere)
        near = seen["gap"]
        assert isinstance(near, float)
        if where[0] == 2 and self.c.final[0] and abs(near) > 0.5 * TOLERANCE:
            raise UnresolvedError
        state, nu, load_nu, slope = seen["state"], seen["nu"], seen["load_nu"], seen["slope"]
        follow_mu, spend_nu = seen["follow"], seen["nu_s"]
        assert isinstance(spend_nu, np.ndarray)
        assert isinstance(state, np.ndarray) and isinstance(nu, np.ndarray)
        assert isinstance(load_nu, np.ndarray) and isinstance(follow_mu, np.ndarray)
        assert isinstance(slope, float)
        host_clamped = (state == 1) | ((state == -1) & (self.lo_nu > 0))
        mu_beyond, nu_beyond = seen["mu_beyond"], seen["nu_beyond"]
        assert isinstance(mu_beyond, float) and isinstance(nu_beyond, np.ndarray)
        return Answer(
            mu,
            nu,
            host_clamped,
            bool(where[0] in (-1, 1)),
            load_nu,
            slope,
            follow_mu,
            spend_nu,
            seen["load"],  # type: ignore[arg-type]
            mu_beyond,
            np.where(host_clamped, nu_beyond, 0.0),
            self.other,
        )

    def error(self, answer: Answer) -> tuple[float, FloatArray]:
        """How far the answer may be off in mu and in each nu.

        A host's load error moves mu through the spend, and mu's error every host.
        """
        own, spend = self._truncation(answer.mu, answer.nu, answer.load_nu, answer.load)
        spend_error = spend + float(np.sum(np.abs(answer.spend_nu) * own))
        mu_error = spend_error / max(abs(answer.spend_mu), 1e-300)
        # mu's error reaches only the hosts that follow mu (0 x inf would be NaN: an
        # overflowing third-order estimate far from the centre must widen, not poison)
        with np.errstate(invalid="ignore"):
            nu_error = own + np.where(answer.follow != 0, np.abs(answer.follow) * mu_error, 0.0)
        nu_error[0] = 0.0
        return mu_error, nu_error

    def host_error(self, mu: float, nu: FloatArray) -> FloatArray:
        """How far each host's multiplier at ``mu`` may be off (mu itself held)."""
        load, load_nu, *_ = self.terms(mu, nu)
        return self._truncation(mu, nu, load_nu, load)[0]

    def _truncation(
        self, mu: float, nu: FloatArray, load_nu: FloatArray, load_now: FloatArray
    ) -> tuple[FloatArray, float]:
        """Per slot nu's error from its own load, and the spend's error, from truncation.

        The third-order terms are only estimated (exact for a geometric series): half of
        them, a twentieth of their worst case (every page's step of one sign) and the
        fourth-order term the same series implies are taken for the error they leave.
        """
        k = self.k
        d = mu - self.c.mu
        e = nu - self.c.nu
        third = k[9] * e**3 + 3 * k[10] * d * e * e + 3 * k[11] * d * d * e + k[12] * d**3
        third_spend = k[10] * e**3 + 3 * k[11] * d * e * e + 3 * k[12] * d * d * e + k[13] * d**3
        second = np.abs(k[5] * e * e + 2 * k[6] * d * e + k[7] * d * d)
        second_spend = np.abs(k[6] * e * e + 2 * k[7] * d * e + k[8] * d * d)
        d, e = np.abs(d), np.abs(e)
        worst = k[9] * e**3 + 3 * k[10] * d * e * e + 3 * k[11] * d * d * e + k[12] * d**3
        worst_spend = k[10] * e**3 + 3 * k[11] * d * e * e + 3 * k[12] * d * d * e + k[13] * d**3
        with np.errstate(divide="ignore", invalid="ignore"):
            # the series' ratio third / second, taken at most 1: where the second-order
            # terms cancel (second ~ 0) the ratio says nothing, and inf would make the
            # error (and every box after it) the largest float
            fourth = np.nan_to_num(third * third / np.maximum(second, np.abs(third)))
            fourth_spend = np.nan_to_num(
                third_spend * third_spend / np.maximum(second_spend, np.abs(third_spend))
            )
            load = 0.5 * np.abs(third) + 0.05 * worst + fourth
            spend = 0.5 * np.abs(third_spend) + 0.05 * worst_spend + fourth_spend
            own = np.where(load_nu < 0, load / -load_nu, 0.0)
        # a host held at 0 whose load stays clear of capacity whatever the error: no error
        own[(nu == 0) & (load_now + 10 * load < self.cap)] = 0.0
        own[0] = 0.0
        return own, float(np.sum(spend))


def _pick(b: BoundaryPages, rows: BoolArray) -> BoundaryPages:
    return BoundaryPages(
        b.index[rows],
        b.cost[rows],
        b.scale[rows],
        b.rate[rows],
        b.f_min[rows],
        b.f_max[rows],
        b.slot[rows],
    )


def decreasing_roots(
    gap: Callable[[FloatArray, BoolArray], tuple[FloatArray, FloatArray]],
    lo: FloatArray,
    hi: FloatArray,
    start: FloatArray,
    tol: FloatArray,
    resolution: float = 1e-14,
    steps: int = 200,
    split: Callable[[FloatArray, FloatArray, BoolArray], FloatArray] | None = None,
) -> tuple[FloatArray, NDArray[np.int8], FloatArray]:
    """Roots in [lo, hi] of many decreasing functions at once.

    Newton steps while they stay inside what is known and halve the gap, else false
    position with the Illinois modification, else bisection (always when the bracket has
    not halved in two steps: a jump would otherwise hold false position up). ``gap(x,
    live)`` returns the values and slopes (only live entries matter). Returns the roots
    and, per entry, 0 if found inside, -1 if the root lies below ``lo`` (x = lo), +1 above
    ``hi`` (x = hi), 2 if the function jumps across 0 within ``resolution`` (relative) of
    x: x is then the point below 0 and ``other`` the one above. ``split(a, b, live)``, if
    given, names a point inside each bracket where the function has a kink (NaN if none):
    bisection takes it instead of the middle.
    """
    x = np.clip(start, lo, hi)
    a, ga = lo.copy(), np.full(x.shape, np.nan)  # the largest point known below the root
    b, gb = hi.copy(), np.full(x.shape, np.nan)  # the smallest point known above it
    side = np.zeros(x.shape, dtype=np.int8)
    state = np.zeros(x.shape, dtype=np.int8)
    live = np.ones(x.shape, dtype=bool)
    last = np.full(x.shape, np.inf)
    widths = [np.full(x.shape, np.inf)] * 2
    for _ in range(steps):
        g, s = gap(x, live)
        live &= ~(np.abs(g) <= tol)
        up, down = live & (g > 0), live & (g < 0)
        top, bottom = up & (x >= hi), down & (x <= lo)
        state[top], state[bottom] = 1, -1
        live &= ~(top | bottom)
        up &= live
        down &= live
        gb = np.where(up & (side == 1), 0.5 * gb, gb)  # Illinois: the kept end's gap halves
        ga = np.where(down & (side == -1), 0.5 * ga, ga)
        a, ga = np.where(up, x, a), np.where(up, g, ga)
        b, gb = np.where(down, x, b), np.where(down, g, gb)
        side = np.where(up, 1, np.where(down, -1, side)).astype(np.int8)
        narrow = live & (b - a <= resolution * np.maximum(np.abs(a), np.abs(b)))
        narrow &= np.isfinite(ga) & np.isfinite(gb)
        state[narrow] = 2
        x = np.where(narrow, b, x)
        live &= ~narrow
        if not live.any():
            break
        with np.errstate(divide="ignore", invalid="ignore", over="ignore"):
            newton = x - g / s
            secant = (a * gb - b * ga) / (gb - ga)
        known = np.isfinite(ga) & np.isfinite(gb)
        use_newton = (s < 0) & (newton > a) & (newton < b) & (np.abs(g) <= 0.5 * last)
        use_secant = known & (secant > a) & (secant < b)
        middle = np.where(known, 0.5 * (a + b), np.where(np.isfinite(ga), b, a))
        if split is not None and known.any():  # bisect at a kink where the bracket has one
            kink = split(a, b, live & known)
            middle = np.where(known & np.isfinite(kink), kink, middle)
        width = np.where(known, b - a, np.inf)
        slow = known & (width > 0.5 * widths[0])
        widths = [widths[1], width]
        step = np.where(use_newton, newton, np.where(use_secant, secant, middle))
        step = np.where(slow, middle, step)
        last = np.where(live, np.abs(g), last)
        x = np.where(live, step, x)
    return x, state, a
