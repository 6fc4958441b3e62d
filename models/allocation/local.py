"""Big allocation problems in a few passes: local models of the spend and the host loads.

The direct solver (:mod:`models.allocation.solver`) pays an exact pass over every page
for each trial multiplier, and the spend is not smooth enough for its root-finders to
need few: pages about to be given up make it fall like ``d / log(1/d)``, which defeats
Newton and secant alike. Here one pass (a *refresh*) expands every page's frequency to
second order around a centre ``(mu, nu)`` and sums the expansions per host into
polynomials in ``(mu, nu_h)`` (:mod:`models.allocation.model`). Inside a box around the
centre those polynomials are accurate except for the few pages near a kink (a bound about
to bind, a page about to be given up, a Taylor series that converges slowly): those
*boundary* pages are kept apart and evaluated exactly. The model is solved for the
budget's and the hosts' multipliers at the cost of the boundary pages only, and its
third-order terms say how far the answer may be off, which sizes the next box. Once a
box is small enough that every smooth page's expansion is exact to 1e-12 (a relative
half-width of 1e-4), the model's answer is the problem's: every page's frequency is then
evaluated exactly at it, in one pass that also sums the spend, the loads and the
objective, and checked (the budget and every capacity to 1e-11). Refreshes whose boxes
are not final read the pages in float32 (the model's answer only has to land in the next
box); nothing per page is kept between passes.

Candidate hosts (those that may bind) keep their own centres: when only their
multipliers are unsettled, only their pages are refreshed. The start comes from a reduced
problem (a uniform sample of pages plus a sample of each host likely to bind, reweighted
to have the same multipliers) solved by the direct solver, then from the candidate hosts'
pages alone with mu held. Hosts that bind although the sample said otherwise are found at
a full refresh (every host's load is exact there) and become candidates.

If the refreshes do not settle (or float64 cannot resolve the budget's root, which takes a
page on its give-up ramp at the root of a small problem), the direct solver takes over:
the answer is the same, only slower.
"""

from __future__ import annotations

import dataclasses
import logging
from typing import TYPE_CHECKING

import numpy as np
from numpy.typing import NDArray

from models.allocation.model import (
    MOMENTS,
    Answer,
    BoundaryPages,
    Centres,
    Model,
    SlotArray,
    UnresolvedError,
    slot_sums,
)
from models.allocation.refresh import Pages, Refresh, evaluate, expand
from models.allocation.solver import (
    TOLERANCE,
    Solution,
    page_scale,
    solve_direct,
    weighted_sums,
)
from models.estimation.rate_solver import bincount

if TYPE_CHECKING:
    from models.allocation.problem import AllocationProblem

log = logging.getLogger(__name__)

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.intp]
BoolArray = NDArray[np.bool_]

DIRECT_PAGES = 1 << 18  # problems up to this size are solved directly
_SAMPLE = 1 << 16  # uniform sample of the reduced problem (at most; 1/32 of the pages)
_SAMPLE_MIN = 4096
_HOST_SAMPLE = 256  # pages of each likely-binding host in the reduced problem
_HOST_SEEN = 16  # sampled pages a host needs before the sample can call it likely-binding
_LIKELY = 0.7  # ... and the share of its capacity its sampled load must reach
_FINAL = 1e-4  # relative half-width of a box in which expansions are exact to 1e-12
_FIRST_BOX = 0.04  # relative half-width of the first box in mu
_FIRST_HOST_BOX = 0.1  # ... and in each candidate host's total multiplier
_REFRESHES = 12  # full refreshes count 1, host refreshes their share of the pages
_SINGLE_BOX = 1e-3  # refreshes whose boxes reach this far (relative) may read float32
_SPEND_ROWS = [1, 4, 8, 13]  # the moments rows slot 0 needs (see refresh.moments_of)


def solve_local(problem: AllocationProblem, scale: FloatArray) -> Solution:
    """Solve a big problem whose budget binds (see the module docstring)."""
    pages = Pages.of(problem, scale)
    start = _start(problem)
    if start is not None:
        mu, nu_host, candidates = start
        solver = _LocalSolver(problem, pages, candidates)
        try:
            solution = solver.run(mu, nu_host)
        except UnresolvedError:
            solution = None
        if solution is not None:
            log.debug("allocation solved in %.2f refreshes' worth", solver.work)
            return solution
        log.info("local models did not settle after %.2f refreshes: direct solve", solver.work)
    return solve_direct(problem, scale)


# --------------------------------------------------------------------------- pages


# --------------------------------------------------------------------------- start


def _start(problem: AllocationProblem) -> tuple[float, FloatArray, BoolArray] | None:
    """Budget and host multipliers of a reduced problem, and the hosts likely to bind.

    The reduced problem keeps a uniform sample of pages and, for each host the sample
    says may bind, a sample of that host's own pages. A page kept with probability ``p``
    stands for ``1/p`` pages: its cost and weight are divided by ``p`` and its host's
    capacity multiplied by it, which leaves the budget multiplier unchanged and scales
    the host's by ``p`` (objectives whose scale is inversely proportional to the weight,
    as all of :mod:`models.allocation.freshness`'s are).
    """
    p = problem
    n, n_hosts = p.size, p.host_capacity.shape[0]
    rng = np.random.default_rng(0)
    if n <= 4 * _SAMPLE_MIN:  # small enough to be its own reduced problem
        exact = solve_direct(p, page_scale(p), tolerance=1e-4)
        if not 0 < exact.multiplier < np.inf:
            return None
        nu = exact.host_multipliers
        return exact.multiplier, nu, np.isfinite(p.host_capacity) & (nu > 0)
    size = min(_SAMPLE, max(_SAMPLE_MIN, n // 32))
    share = size / n
    uniform = np.sort(rng.choice(n, size, replace=False))
    free = _reduced(p, uniform, np.full(size, share), np.full(n_hosts, np.inf))
    first = solve_direct(free, page_scale(free), tolerance=1e-2)
    if not 0 < first.multiplier < np.inf:
        return None
    limited = np.isfinite(p.host_capacity)
    if not limited.any():
        return first.multiplier, np.zeros(n_hosts), limited
    seen = np.bincount(p.hosts[uniform], minlength=n_hosts)
    load = bincount(p.hosts[uniform], first.frequencies, n_hosts) / share
    likely = limited & (seen >= _HOST_SEEN) & (load >= _LIKELY * p.host_capacity)
    if not likely.any():
        return first.multiplier, np.zeros(n_hosts), likely
    in_likely = np.flatnonzero(likely[p.hosts])
    likely_host = p.hosts[in_likely]  # gathered once: a fifth of the pages, typically
    pages = np.bincount(likely_host, minlength=n_hosts)
    keep = np.where(likely, np.minimum(1.0, _HOST_SAMPLE / np.maximum(pages, 1)), 1.0)
    drawn = rng.random(in_likely.shape[0]) < keep[likely_host]
    chosen = in_likely[drawn]
    others = uniform[~likely[p.hosts[uniform]]]
    sample = np.concatenate([others, chosen])
    probability = np.concatenate([np.full(others.shape[0], share), keep[likely_host[drawn]]])
    capacity = np.where(likely, p.host_capacity * keep, np.inf)
    reduced = _reduced(p, sample, probability, capacity)
    second = solve_direct(reduced, page_scale(reduced), tolerance=1e-4)
    if not 0 < second.multiplier < np.inf:
        return None
    return second.multiplier, np.where(likely, second.host_multipliers * keep, 0.0), likely


def _reduced(
    p: AllocationProblem, sample: IntArray, probability: FloatArray, capacity: FloatArray
) -> AllocationProblem:
    """The problem restricted to ``sample``, each page standing for 1/probability pages."""
    return dataclasses.replace(
        p,
        rates=p.rates[sample],
        costs=p.costs[sample] / probability,
        weights=p.weights[sample] / probability,
        min_frequency=p.min_frequency[sample],
        max_frequency=p.max_frequency[sample],
        hosts=p.hosts[sample],
        host_capacity=capacity,
    )


# --------------------------------------------------------------------------- solver


class _LocalSolver:
    """Refresh, solve the model, repeat until the model's answer is the problem's."""

    def __init__(self, problem: AllocationProblem, pages: Pages, candidates: BoolArray) -> None:
        self.p = problem
        self.pages = pages
        self.work = 0.0
        self.mean_cost = float(np.mean(pages.cost))
        self.cand_hosts = np.flatnonzero(candidates)
        # int32 slot numbers: half the memory traffic of intp over every page
        self.slot_of_host = np.zeros(problem.host_capacity.shape[0], dtype=np.int32)
        self.slot_of_host[self.cand_hosts] = np.arange(1, self.cand_hosts.shape[0] + 1)
        self.slot = self.slot_of_host[pages.host]
        self.held = np.flatnonzero(self.slot)  # the candidate hosts' pages, in order
        self.cap = np.concatenate([[np.inf], problem.host_capacity[self.cand_hosts]])
        # the candidate hosts' pages with their slots, in parts (see candidate_parts)
        self._candidates: list[tuple[Pages, SlotArray]] = []

    @property
    def slots(self) -> int:
        return int(self.cap.shape[0])

    def candidate_parts(self) -> list[tuple[Pages, SlotArray]]:
        """The candidate hosts' pages and their slots: gathered in one sweep (in page
        order), and the pages of hosts promoted later as parts of their own."""
        if not self._candidates:
            index = self.held
            self._candidates = [(self.pages.subset(index), self.slot[index])]
        return self._candidates

    # ----------------------------------------------------------------- the loop

    def run(self, mu: float, nu_host: FloatArray) -> Solution | None:
        s = self.slots
        nu = np.concatenate([[0.0], nu_host[self.cand_hosts]])
        reach = np.zeros(s)
        follow = np.zeros(s)
        if s > 1:
            nu, reach, follow = self._hosts_first(mu, nu)
        # nu follows mu along ``follow`` only to first order: the box takes the rest
        reach = np.maximum(reach, 2 * _FIRST_BOX**2 * (nu + mu * self.mean_cost))
        reach[0] = 0.0
        centres = Centres(
            np.full(s, mu),
            nu,
            np.full(s, _FIRST_BOX * mu),
            reach,
            follow,
            np.zeros(s, dtype=bool),
        )
        centres.final[:] = self._is_final(centres)
        moments = np.zeros((MOMENTS, s))
        boundary = np.zeros(0, dtype=np.intp)
        full = True
        moving = np.ones(s, dtype=bool)
        while self.work < _REFRESHES:
            if full:
                done = self._refresh(self.pages, centres)
                moments, boundary = done.moments, done.boundary
                assert done.host_load is not None
                centres, moments, boundary = self._promote(centres, moments, boundary, done)
            else:
                moments, boundary = self._refresh_hosts(centres, moving, moments, boundary)
            model = self._model(centres, moments, boundary)
            answer = self._solve(model, centres)
            if answer is None:
                return None
            settled = self._settled(centres, answer)
            if settled.all():
                solution = self._finish(centres, model, answer)
                if solution is not None:
                    return solution
                settled[:] = False  # the check failed: refresh everything around the answer
            # Hosts held at the edge of their boxes move first, alone (their pages only),
            # as long as mu stays inside the free pages' box.
            full = answer.mu_clamped or not (answer.host_clamped.any() or settled[0])
            moving = ~settled
            centres = self._next(centres, model, answer, moving, full)
        return None

    def _hosts_first(self, mu: float, nu: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
        """The candidate hosts' multipliers at the start's mu, from their own pages.

        The sample knows them to ~10% only: a box that wide in a full refresh would make
        much of the hosts' pages boundary pages. Their pages alone, refreshed with mu held,
        settle them first. Returns nu, the reach its error calls for, and d nu / d mu.
        """
        s = self.slots
        m = nu + mu * self.mean_cost
        reach = _FIRST_HOST_BOX * m
        reach[0] = 0.0
        none = np.zeros(s)
        centre = nu.copy()
        clamped = np.ones(s, dtype=bool)
        moments = np.zeros((MOMENTS, s))
        boundary = np.zeros(0, dtype=np.intp)
        for _ in range(3):  # the hosts the last box held are refreshed again, alone
            c = Centres(np.full(s, mu), centre, none, reach, none, np.zeros(s, dtype=bool))
            moments, boundary = self._refresh_hosts(c, clamped, moments, boundary)
            model = self._model(c, moments, boundary, 1e-9)
            found, state = model.hosts(mu, nu)
            clamped = (state == 1) | ((state == -1) & (model.lo_nu > 0))
            load, load_nu, load_mu, *_ = model.terms(mu, found)
            binding = ((state == 0) | (state == 2)) & np.isfinite(self.cap)  # see Model.solve
            with np.errstate(divide="ignore", invalid="ignore"):
                follow = np.where(binding & (load_nu < 0), -load_mu / load_nu, 0.0)
            error = model.host_error(mu, found)
            with np.errstate(divide="ignore", invalid="ignore"):
                beyond = np.where(clamped, np.nan_to_num(-(load - self.cap) / load_nu), 0.0)
            m = found + mu * self.mean_cost
            wide = np.array(
                [
                    _reach(float(e), float(x), float(r), bool(h), float(b))
                    for e, x, r, h, b in zip(error, m, reach, clamped, beyond, strict=True)
                ]
            )
            wide[0] = 0.0
            nu = found
            centre = np.where(clamped, found, centre)
            reach = np.where(clamped, wide, reach)
            if not clamped.any():
                break
        return nu, wide, follow

    def _is_final(self, c: Centres) -> BoolArray:
        m = c.nu + c.mu * self.mean_cost
        final = _FINAL * (1 + 1e-6)
        return (c.mu_reach <= final * c.mu) & (c.nu_reach <= final * m)

    def _settled(self, c: Centres, answer: Answer) -> BoolArray:
        """Slots whose expansions can give the answer: not clamped, and a final box.

        A host held at 0 at its centre and in the answer moves with mu only, like slot 0:
        mu's box is the one that must be final.
        """
        idle = (c.nu == 0) & (answer.nu == 0)
        ok: BoolArray = (c.final | (idle & (c.mu_reach <= _FINAL * c.mu))) & ~answer.host_clamped
        ok[0] = bool(c.final[0]) and not answer.mu_clamped
        return ok

    def _model(
        self, c: Centres, moments: FloatArray, boundary: IntArray, tolerance: float = 0.0
    ) -> Model:
        pg = self.pages
        b = BoundaryPages(
            boundary,
            pg.cost[boundary],
            pg.scale[boundary],
            pg.rate[boundary],
            pg.f_min[boundary],
            pg.f_max[boundary],
            self.slot[boundary],
        )
        if not tolerance:  # a model may be far more accurate than its box: solve it tightly
            tolerance = 0.1 * TOLERANCE if c.final.all() else 1e-10
        return Model(c, moments, b, self.cap, self.p.budget, pg.inverse, tolerance)

    def _solve(self, model: Model, c: Centres) -> Answer | None:
        lo = float(np.max(c.mu - c.mu_reach))
        hi = float(np.min(c.mu + c.mu_reach))
        if not 0 < lo <= hi:
            return None
        return model.solve(lo, hi, float(np.clip(c.mu[0], lo, hi)))

    def _next(
        self, c: Centres, model: Model, answer: Answer, moving: BoolArray, full: bool
    ) -> Centres:
        """Centres and boxes of the next refresh: around the answer, sized from its error.

        Only the ``moving`` slots (all in a full refresh) take new ones. A box is four
        times the error the third-order terms predict (at least 1e-9 relative), the largest
        final box if that covers twice the error, and four times the old box where the
        answer was held at its edge.
        """
        mu_error, nu_error = model.error(answer)
        mu = answer.mu
        m = answer.nu + mu * self.mean_cost
        mu_reach = _reach(mu_error, mu, float(c.mu_reach[0]), answer.mu_clamped, answer.mu_beyond)
        nu_reach = np.array(
            [
                _reach(float(err), float(scale), float(old), bool(held), float(far))
                for err, scale, old, held, far in zip(
                    nu_error, m, c.nu_reach, answer.host_clamped, answer.nu_beyond, strict=True
                )
            ]
        )
        fresh = np.ones(self.slots, dtype=bool) if full else moving.copy()
        if not full:  # hosts move alone: mu may follow as far as the free pages' box allows
            fresh[0] = False
            mu_reach = max(mu_reach, float(c.mu_reach[0]))
        # nu follows mu along ``follow`` only to first order: the box takes the rest, over
        # as far as mu may move (the free pages' box when hosts move alone; see run())
        nu_reach = np.maximum(nu_reach, 2 * (mu_reach / mu) ** 2 * m)
        nu_reach[0] = 0.0
        out = Centres(
            np.where(fresh, mu, c.mu),
            np.where(fresh, answer.nu, c.nu),
            np.where(fresh, mu_reach, c.mu_reach),
            np.where(fresh, nu_reach, c.nu_reach),
            np.where(fresh, answer.follow, c.follow),
            c.final.copy(),
        )
        out.final[:] = self._is_final(out)
        return out

    # ----------------------------------------------------------------- refresh

    def _single(self, c: Centres) -> bool:
        """Whether a refresh around ``c`` reads the pages in float32: while some box is
        still wide (1e-3 relative or more) and none is final.

        Their sums are then good to ~1e-7, far inside such boxes' truncation errors
        (~1e-5 in the first box). Narrower boxes are read in float64, so the next box can
        always become final (a float32 answer held at a box's edge makes it wider by 4,
        not more than the 1e-3 that brings float32 back).
        """
        if c.final.any():
            return False
        m = c.nu + c.mu * self.mean_cost
        with np.errstate(divide="ignore", invalid="ignore"):
            wide = np.maximum(c.mu_reach / c.mu, np.where(m > 0, c.nu_reach / m, 0.0))
        return bool(np.max(wide) >= _SINGLE_BOX)

    def _refresh_hosts(
        self, c: Centres, fresh: BoolArray, moments: FloatArray, boundary: IntArray
    ) -> tuple[FloatArray, IntArray]:
        """Refresh the pages of the candidate hosts in ``fresh`` only; the rest stand."""
        fresh = fresh.copy()
        fresh[0] = False
        sums = np.zeros_like(moments)
        found = [np.zeros(0, dtype=np.intp)]
        for cand, cand_slot in self.candidate_parts():
            rows = np.flatnonzero(fresh[cand_slot])
            if not rows.size:
                continue
            some, slot = (
                (cand, cand_slot) if rows.size == cand.size else (cand.pick(rows), cand_slot[rows])
            )
            done = self._refresh(some, c, slot)
            sums += done.moments
            found.append(done.boundary)
        moments = moments.copy()
        moments[:, fresh] = sums[:, fresh]
        stay = boundary[~fresh[self.slot[boundary]]]
        return moments, _merge(stay, np.concatenate(found))

    def _refresh(self, pages: Pages, c: Centres, slot: SlotArray | None = None) -> Refresh:
        """Expand ``pages`` (all, or a subset with its ``slot``s) around their slots' centres."""
        full = pages.index is None
        self.work += pages.size / self.pages.size
        if slot is None:
            slot = self.slot if pages.index is None else self.slot[pages.index]
        single = self._single(c)
        held = self.held if full else None
        done = expand(pages, slot, c, self.slots, self.p.host_capacity.shape[0], single, held)
        if not full:
            assert pages.index is not None
            done.boundary = pages.index[done.boundary]
        return done

    def _promote(
        self, c: Centres, moments: FloatArray, boundary: IntArray, done: Refresh
    ) -> tuple[Centres, FloatArray, IntArray]:
        """Hosts held at 0 whose load may reach capacity in the box become candidates.

        Their pages' share of slot 0's sums comes off, and they are refreshed again (their
        pages only) in a box that lets their own multiplier move.
        """
        p, pg = self.p, self.pages
        assert done.host_load is not None
        margin = 1.5 * float(c.mu_reach[0] / c.mu[0]) + 1e-6
        held = np.isfinite(p.host_capacity)
        held[self.cand_hosts] = False
        new = np.flatnonzero(held & (done.host_load >= p.host_capacity * (1 - margin)))
        if new.size == 0:
            return c, moments, boundary
        log.debug("%d hosts may bind although the start did not say so", new.size)
        first, k = self.slots, new.size
        promoted = np.zeros(p.host_capacity.shape[0], dtype=bool)
        promoted[new] = True
        moved = np.flatnonzero(promoted[pg.host])
        # their share of slot 0's spend, as the refresh summed it (the same pages, centre
        # and box give the same terms): only slot 0's spend rows hold sums
        moved_pages = pg.subset(moved)
        zero = np.zeros(moved.size, dtype=np.int32)
        gone = expand(moved_pages, zero, c, self.slots, 0, self._single(c))
        moments = np.concatenate([moments, np.zeros((MOMENTS, k))], axis=1)
        moments[_SPEND_ROWS, 0] -= gone.moments[_SPEND_ROWS, 0]
        boundary = boundary[~promoted[pg.host[boundary]]]
        self.slot_of_host[new] = np.arange(first, first + k)
        self.slot[moved] = self.slot_of_host[pg.host[moved]]
        self.held = np.insert(self.held, np.searchsorted(self.held, moved), moved)
        self.cand_hosts = np.concatenate([self.cand_hosts, new])
        self.cap = np.concatenate([self.cap, p.host_capacity[new]])
        if self._candidates:  # a part of their own: the others are not gathered again
            self._candidates.append((moved_pages, self.slot[moved]))
        mu = float(c.mu[0])
        c = Centres(
            np.concatenate([c.mu, np.full(k, mu)]),
            np.concatenate([c.nu, np.zeros(k)]),
            np.concatenate([c.mu_reach, np.full(k, c.mu_reach[0])]),
            np.concatenate([c.nu_reach, np.full(k, _FIRST_HOST_BOX * mu * self.mean_cost)]),
            np.concatenate([c.follow, np.zeros(k)]),
            np.concatenate([c.final, np.zeros(k, dtype=bool)]),
        )
        again = self._refresh(moved_pages, c)
        moments[:, first:] = again.moments[:, first:]
        return c, moments, _merge(boundary, again.boundary)

    # ----------------------------------------------------------------- finish

    def _finish(self, c: Centres, model: Model, answer: Answer) -> Solution | None:
        """Frequencies at the answer, evaluated exactly (one pass), and checked.

        Within final boxes every smooth page's expansion is exact to 1e-12, so the exact
        frequencies meet the budget and the capacities as the model's answer does.
        """
        pg, p = self.pages, self.p
        mu, nu = answer.mu, answer.nu
        n_hosts = p.host_capacity.shape[0]
        f, load, spent, values = evaluate(pg, self.slot, mu, nu, n_hosts, p.weights)
        changed, before = self._mix(model, answer, f, load)
        if changed.size:  # the sums follow the mixed pages
            spent += float(np.dot(pg.cost[changed], f[changed] - before))
            if values is not None:
                rates, weights = p.rates[changed], p.weights[changed]
                old = weighted_sums(p.objective, rates, weights, before)
                new = weighted_sums(p.objective, rates, weights, f[changed])
                values = values[0] + new[0] - old[0], values[1] + new[1] - old[1]
        nu_host = np.zeros(p.host_capacity.shape[0])
        nu_host[self.cand_hosts] = nu[1:]
        binding = nu_host > 0
        over = load > p.host_capacity * (1 + TOLERANCE)
        short = binding & (np.abs(load - p.host_capacity) > TOLERANCE * p.host_capacity)
        if abs(spent - p.budget) > TOLERANCE * p.budget or over.any() or short.any():
            log.debug(
                "the answer evaluated exactly is off: budget %.3g, %d hosts over, %d short",
                spent / p.budget - 1,
                int(over.sum()),
                int(short.sum()),
            )
            return None
        return Solution(f, mu, nu_host, spent, values)

    def _mix(
        self, model: Model, answer: Answer, f: FloatArray, load: FloatArray
    ) -> tuple[IntArray, FloatArray]:
        """Meet the capacity of hosts whose multiplier float64 cannot resolve.

        Their load jumps between two neighbouring multipliers (a page on the ramp below
        phi's limit): their boundary pages take the mix of both ends that fills the
        capacity exactly (the smooth pages do not move across one float). Returns the
        pages changed and their frequencies before.
        """
        jump = np.flatnonzero(answer.other != answer.nu)
        if jump.size == 0:
            return np.zeros(0, dtype=np.intp), np.zeros(0)
        b = model.b
        chosen = np.zeros(self.slots, dtype=bool)
        chosen[jump] = True
        rows = chosen[b.slot]
        pages, slot = b.index[rows], b.slot[rows]
        up = answer.nu.copy()
        up[jump] = answer.other[jump]
        low = model.boundary_frequencies(answer.mu, answer.nu)[rows]
        high = model.boundary_frequencies(answer.mu, up)[rows]
        n = self.slots
        rest = load[self.cand_hosts[jump - 1]] - slot_sums(slot, f[pages], n)[jump]
        below, above = slot_sums(slot, low, n)[jump], slot_sums(slot, high, n)[jump]
        with np.errstate(divide="ignore", invalid="ignore"):
            theta = np.clip((self.cap[jump] - rest - below) / (above - below), 0.0, 1.0)
        share = np.zeros(n)
        share[jump] = np.nan_to_num(theta)
        mixed = low + share[slot] * (high - low)
        before = f[pages]
        f[pages] = mixed
        load[self.cand_hosts[jump - 1]] = rest + slot_sums(slot, mixed, n)[jump]
        return pages, before


def _reach(error: float, scale: float, old: float, held: bool, beyond: float = 0.0) -> float:
    """A box's half-width for a multiplier of size ``scale`` known to within ``error``.

    Where the last box held the answer at its edge, four times that box, or twice the
    step Newton would still take, whichever is more.
    """
    final = 0.99 * _FINAL * scale
    if held:
        wide = max(4.0 * old, 2.0 * abs(beyond), 1e-5 * scale)
        return float(min(wide, 0.75 * scale if scale > 0 else np.inf))
    if np.isnan(error):  # an error estimate that overflowed: the widest box
        error = np.inf
    reach = max(8.0 * error, 1e-6 * scale)
    if reach > final and 2.0 * error <= final:
        reach = final
    return float(min(reach, 0.5 * scale)) if scale > 0 else reach


def _merge(a: IntArray, b: IntArray) -> IntArray:
    """The union of two page lists, sorted (boundary pages: a few 1e5 at most).

    Sorting the concatenation (mostly sorted runs) is much cheaper than ``np.union1d``'s
    hashing at this size.
    """
    out = np.concatenate([a, b])
    out.sort()
    if out.size > 1:
        out = out[np.concatenate([[True], out[1:] != out[:-1]])]
    return out
