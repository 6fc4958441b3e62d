"""Fast kernels for the mixture prior's log-rate grid (``models/estimation/mixture_prior.py``).

The mixture prior integrates every observed page's likelihood over a log-rate grid twice a
fit (once to pool group levels over every page, once to estimate). Done directly, each
grid point of each page costs an ``expm1`` and a ``log`` per changed-interval node and an
``exp`` per marginal; these kernels get the same numbers with far fewer transcendentals:

* ``changed_loglik``: ``w log(1 - exp(-t r_j))`` on a geometric grid ``r_j = r_0 q^j`` is a
  function of ``log t + log r_j`` alone, ``L(y) = log(-expm1(-e^y))``; it is read from a
  table of ``L`` on a sub-grid (``_SUB`` points per grid step), linearly interpolated:
  the error is at most ``h^2/8 max|L''| = 1.4e-9`` per unit of node weight (``h`` the
  sub-step; ``max|L''| = 0.4125`` at ``y = 0.62``), so a page's log-likelihood is off by at
  most ``1.4e-9`` times its changed intervals at every grid point (``CHANGED_LOGLIK_ERROR``).
* ``gamma_log_marginal``: ``log sum_j exp(l_j + a g_j - b r_j)`` is
  ``log sum_j W_j Q_j + top + c`` with ``W_j = exp(l_j - top)`` (one exp per page and grid
  point, shared with the histogram posterior) and ``Q_j = exp(a g_j - b r_j - c)`` per
  distinct ``(a, b)``: pages of one group share their row. Exact up to rounding (~1e-15
  relative); a page whose sum underflows (its likelihood and its prior ~700 nats apart)
  is computed directly.
* ``histogram_moments``: the marginal, mean and second moment of the log rate under a grid
  prior are three dot products of ``W`` (one matrix product).
* Quiet pages (no censored changed interval, no trusted age: likelihood ``exp(-E r)``)
  under a grid prior depend on ``s = log E`` alone: ``quiet_histogram`` reads them from a
  cubic-Hermite table in ``s`` (exact derivatives), cached per prior; the error is below
  1e-12 (tested against the direct sums), pages outside the table's range are summed directly.

Pure numpy; nothing here knows about priors or groups beyond the arrays it is given.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property, lru_cache

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view
from numpy.typing import NDArray
from scipy import special

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]

#: sub-grid points per grid step in the table of ``L(y) = log(-expm1(-e^y))``
_SUB = 1024
#: ``h^2 / 8 * max|L''|`` for the grid's step: the bound per unit of node weight
_MAX_L2 = 0.41253161886308504
#: ``max|d^2/dy^2 s(e^y)|`` for ``s(x) = (1 - exp(-x)) / x`` (0.15899 at y = 1.546), rounded up
_MAX_S2 = 0.1590
#: below this ``e^y``, ``L(y) = y - e^y / 2`` to ~1e-17 (the next term is ``x^2 / 24``)
_SMALL_X = 1e-8
#: pages per sub-block: the ``(pages, grid)`` temporaries stay in the L2/L3 caches
_BLOCK = 1024
#: a Gamma marginal's scaled sum below this is recomputed directly (no underflow)
_TINY = 1e-280


def changed_loglik_error(grid: FloatArray) -> float:
    """The bound of ``changed_loglik``'s error per unit of node weight (see the module)."""
    h = float(grid[1] - grid[0]) / _SUB
    return h * h / 8.0 * _MAX_L2


def fresh_share_error(grid: FloatArray) -> float:
    """The bound of ``posterior_fresh_share``'s table error (absolute, on a share in [0, 1])."""
    h = float(grid[1] - grid[0]) / _SUB
    return h * h / 8.0 * _MAX_S2


def _l_of_y(y: FloatArray) -> FloatArray:
    x = np.exp(y)
    with np.errstate(divide="ignore"):
        exact = np.log(-np.expm1(-x))
    return np.where(x < _SMALL_X, y - 0.5 * x, exact)


def _fresh_share_of_y(y: FloatArray) -> FloatArray:
    """``s(x) = (1 - exp(-x)) / x`` at ``x = e^y`` (1 - x/2 below ``_SMALL_X``)."""
    x = np.exp(y)
    return np.where(x < _SMALL_X, 1.0 - 0.5 * x, -np.expm1(-x) / np.maximum(x, 1e-300))


def _fresh_deficit_of_y(y: FloatArray) -> FloatArray:
    """``1 - s(x) = (x - 1 + exp(-x)) / x`` at ``x = e^y``, to full relative precision: its
    series ``x/2 - x^2/6 + x^3/24 - x^4/120`` below 1e-3 (next term ``x^5/720``: below
    ``3e-15`` of ``x/2``), the closed form above (cancellation: ``~2 eps / x <= 5e-13``)."""
    x = np.exp(y)
    series = x * (0.5 - x * (1.0 / 6.0 - x * (1.0 / 24.0 - x / 120.0)))
    closed = (x + np.expm1(-x)) / np.maximum(x, 1e-300)
    return np.where(x < 1e-3, series, closed)


_TABLE_FUNCTIONS = {
    "changed": _l_of_y,
    "fresh_share": _fresh_share_of_y,
    "fresh_deficit": _fresh_deficit_of_y,
}


@lru_cache(maxsize=8)
def _table(
    y0: float, step: float, columns: int, kind: str = "changed"
) -> tuple[FloatArray, FloatArray]:
    """``L`` (or the ``kind`` of ``_TABLE_FUNCTIONS``) at ``y0 + c step + k step / _SUB``
    (rows k = 0.._SUB, columns c), flattened row-major, and each row's difference to the
    next (for linear interpolation)."""
    k = np.arange(_SUB + 1)[:, None] * (step / _SUB)
    c = np.arange(columns)[None, :] * step
    values = _TABLE_FUNCTIONS[kind](y0 + c + k)
    return values[:-1].ravel(), np.diff(values, axis=0).ravel()


@lru_cache(maxsize=8)
def _table32(
    y0: float, step: float, columns: int, kind: str
) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
    """``_table(y0, step, columns, kind)`` rounded to float32."""
    values, diffs = _table(y0, step, columns, kind)
    return values.astype(np.float32), diffs.astype(np.float32)


@dataclass(frozen=True)
class _GridRows:
    """``F(log t + grid_j)`` for every ``t`` of a batch, read from ``_table`` rows.

    A ``t``'s ``n_grid`` values sit in one table row, columns ``q .. q + n_grid - 1``; they
    are gathered as one row of a sliding window (a copy, no index array) and linearly
    interpolated between sub-rows ``k`` and ``k + 1`` with weight ``alpha``.
    """

    base: IntArray
    alpha: FloatArray
    values: FloatArray  # (table rows x columns, n_grid) sliding windows
    diffs: FloatArray
    key: tuple[float, float, int, str]  # the ``_table`` they are read from

    @classmethod
    def of(cls, log_t: FloatArray, grid: FloatArray, kind: str) -> _GridRows:
        n_grid = grid.shape[0]
        step = float(grid[1] - grid[0])
        # y = log t + grid_j = y0 + (q + j) step + (k + alpha) step / _SUB
        z_low = float(np.floor((log_t.min() + grid[0]) / step)) - 1.0
        y0 = z_low * step
        z = (log_t + grid[0] - y0) / step
        q = np.floor(z)
        frac = (z - q) * _SUB
        k = np.minimum(np.floor(frac), _SUB - 1)
        columns = int(q.max()) + n_grid + 1
        values, diffs = _table(y0, step, columns, kind)
        return cls(
            (k * columns + q).astype(np.int64),
            frac - k,
            sliding_window_view(values, n_grid),
            sliding_window_view(diffs, n_grid),
            (y0, step, columns, kind),
        )

    def values32(self) -> tuple[NDArray[np.float32], NDArray[np.float32]]:
        """``values`` and ``diffs`` in float32, as sliding windows of the same shape."""
        n_grid = self.values.shape[1]
        values, diffs = _table32(*self.key)
        return sliding_window_view(values, n_grid), sliding_window_view(diffs, n_grid)

    def rows(self, part: IntArray | slice) -> FloatArray:
        """The interpolated rows of the ``t``s at ``part`` (a new array)."""
        at = self.base[part]
        out: FloatArray = self.diffs[at]
        out *= self.alpha[part, None]
        out += self.values[at]
        return out

    def rows_into(self, part: IntArray, out: FloatArray) -> None:
        """``rows(part)`` written into ``out`` (C-contiguous, one row per ``t``)."""
        at = self.base[part]
        np.multiply(self.diffs[at], self.alpha[part, None], out=out)
        out += self.values[at]


def changed_loglik(
    rows: IntArray,
    days: FloatArray,
    weight: FloatArray,
    n_rows: int,
    grid: FloatArray,
    *,
    finish: Callable[[int, int, FloatArray], None] | None = None,
) -> FloatArray:
    """``sum_nodes weight log(1 - exp(-days exp(grid)))`` per row: ``(n_rows, grid)``.

    ``rows`` (node -> output row) need not be sorted; ``grid`` is an evenly spaced log-rate
    grid. Off by at most ``changed_loglik_error(grid)`` per unit of weight. ``finish(lo,
    hi, block)``, if given, is called once for each block of rows ``lo .. hi - 1`` (the
    view ``out[lo:hi]``) once its sums are complete, to finish it in place while it is in
    the cache (every element gets the same operations as a pass over ``out`` after it).
    """
    if rows.shape[0] == 0:
        out = np.zeros((n_rows, grid.shape[0]))
        _finish_blocks(out, finish)
        return out
    table = _GridRows.of(np.log(np.maximum(days, 1e-300)), grid, "changed")
    # nodes of one page are added rank by rank, so each rank's rows are distinct (the
    # first rank is written, not added: its rows are distinct and the table starts at 0)
    ordered = bool((rows[1:] >= rows[:-1]).all())  # as _PageGrid.build gives them
    order = np.arange(rows.shape[0]) if ordered else np.argsort(rows, kind="stable")
    sorted_rows = rows[order]
    first = np.r_[True, sorted_rows[1:] != sorted_rows[:-1]]
    start_of = np.maximum.accumulate(np.where(first, np.arange(first.shape[0]), 0))
    rank = np.arange(first.shape[0]) - start_of
    # every row has a node and the nodes come row by row (a _PageGrid's busy pages): the
    # first rank's rows are 0 .. n_rows - 1 in order, written in place, block by block,
    # each block's later ranks added (their rows, in order, found by bisection) and the
    # block finished before the next (one pass over the rows, not one per rank and step)
    covered = ordered and int(first.sum()) == n_rows and int(sorted_rows[-1]) == n_rows - 1
    out = np.empty((n_rows, grid.shape[0])) if covered else np.zeros((n_rows, grid.shape[0]))
    ranks = [order[rank == r] for r in range(int(rank.max()) + 1)]
    if covered:
        later = [(nodes, rows[nodes]) for nodes in ranks[1:]]
        first_nodes = ranks[0]
        for lo in range(0, n_rows, _BLOCK):
            hi = min(lo + _BLOCK, n_rows)
            part = first_nodes[lo:hi]
            block = out[lo:hi]
            table.rows_into(part, block)
            block *= weight[part, None]
            for nodes, node_rows in later:
                start, stop = np.searchsorted(node_rows, (lo, hi))
                if stop > start:
                    _add_nodes(table, nodes[start:stop], rows, weight, out)
            if finish is not None:
                finish(lo, hi, block)
        return out
    for r, nodes in enumerate(ranks):
        for lo in range(0, nodes.shape[0], _BLOCK):
            part = nodes[lo : lo + _BLOCK]
            if r == 0:
                contrib = table.rows(part)
                contrib *= weight[part, None]
                out[rows[part]] = contrib
            else:
                _add_nodes(table, part, rows, weight, out)
    _finish_blocks(out, finish)
    return out


def _add_nodes(
    table: _GridRows, part: IntArray, rows: IntArray, weight: FloatArray, out: FloatArray
) -> None:
    """Add the nodes ``part`` (distinct rows) to their rows of ``out``."""
    contrib = table.rows(part)
    contrib *= weight[part, None]
    out[rows[part]] += contrib


def _finish_blocks(out: FloatArray, finish: Callable[[int, int, FloatArray], None] | None) -> None:
    if finish is not None:
        for lo in range(0, out.shape[0], _BLOCK):
            hi = min(lo + _BLOCK, out.shape[0])
            finish(lo, hi, out[lo:hi])


def grid_weights(loglik: FloatArray, *, in_place: bool = False) -> tuple[FloatArray, FloatArray]:
    """``(top, W)``: each row's maximum and ``exp(loglik - top)`` (entries in [0, 1]);
    ``in_place`` writes ``W`` over ``loglik`` (the same numbers, no second array)."""
    top = loglik.max(axis=1)
    if in_place:
        weights = loglik
        weights -= top[:, None]
    else:
        weights = loglik - top[:, None]
    np.exp(weights, out=weights)
    return top, weights


@dataclass(frozen=True)
class GammaRows:
    """Per Gamma ``(a, b)`` (a group's), the row ``exp(a g_j - b r_j - offset)`` on the grid
    (its maximum 1) and its offset: what every page of the group shares in its marginal and
    its fresh share. Built once per prior (``GammaRows.of``), not once per block of pages."""

    shape: FloatArray
    rate: FloatArray
    factors: FloatArray  # (rows, grid)
    offset: FloatArray

    @cached_property
    def factors32(self) -> NDArray[np.float32]:
        """``factors`` in float32 (``quiet_fresh_share``)."""
        return self.factors.astype(np.float32)

    @classmethod
    def of(cls, shape: FloatArray, rate: FloatArray, grid: FloatArray) -> GammaRows:
        shape = np.asarray(shape, dtype=np.float64)
        rate = np.asarray(rate, dtype=np.float64)
        factors = np.multiply.outer(shape, grid)
        factors -= np.multiply.outer(rate, np.exp(grid))
        offset = factors.max(axis=1)
        factors -= offset[:, None]
        np.exp(factors, out=factors)
        return cls(shape, rate, factors, offset)


def _gamma_factors(
    shape: FloatArray, rate: FloatArray, grid: FloatArray
) -> tuple[IntArray, FloatArray, FloatArray]:
    """One row ``exp(a g_j - b r_j - offset)`` per distinct ``(a, b)`` (its maximum 1), the
    row of each page and each row's offset."""
    distinct, which = np.unique(shape + 1j * rate, return_inverse=True)
    rows = GammaRows.of(distinct.real, distinct.imag, grid)
    return which.reshape(-1), rows.factors, rows.offset


def gamma_log_marginal(
    weights: FloatArray,
    top: FloatArray,
    shape: FloatArray,
    rate: FloatArray,
    grid: FloatArray,
    loglik: FloatArray,
) -> FloatArray:
    """Per row: ``log sum_j exp(loglik_j + shape g_j - rate r_j)`` (without the Gamma's
    normalization), from ``grid_weights`` and one row of factors per distinct (shape, rate).
    Rows whose sum would underflow are summed directly from ``loglik``."""
    which, factors, offset = _gamma_factors(shape, rate, grid)

    def loglik_of(at: IntArray) -> FloatArray:
        return loglik[at]

    return _gamma_log_marginal(weights, top, which, factors, offset, shape, rate, grid, loglik_of)


def gamma_rows_log_marginal(
    weights: FloatArray,
    top: FloatArray,
    rows: GammaRows,
    which: IntArray,
    grid: FloatArray,
    loglik_of: Callable[[IntArray], FloatArray],
) -> FloatArray:
    """``gamma_log_marginal`` with each row's Gamma given as its row ``which`` of ``rows``
    (the same numbers, without finding the distinct pairs again); ``loglik_of(at)`` gives
    some rows' log-likelihoods (only rows whose sum underflows)."""
    return _gamma_log_marginal(
        weights,
        top,
        which,
        rows.factors,
        rows.offset,
        rows.shape[which],
        rows.rate[which],
        grid,
        loglik_of,
    )


def _gamma_log_marginal(
    weights: FloatArray,
    top: FloatArray,
    which: IntArray,
    factors: FloatArray,
    offset: FloatArray,
    shape: FloatArray,
    rate: FloatArray,
    grid: FloatArray,
    loglik_of: Callable[[IntArray], FloatArray],
) -> FloatArray:
    n = weights.shape[0]
    out = np.empty(n)
    if n == 0:
        return out
    rates = np.exp(grid)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        rows = which[lo:hi]
        total = np.einsum("ij,ij->i", weights[lo:hi], factors[rows])
        with np.errstate(divide="ignore"):
            out[lo:hi] = np.log(total) + top[lo:hi] + offset[rows]
        small = np.flatnonzero(~(total > _TINY))
        if small.shape[0]:
            pages = lo + small
            log_post = loglik_of(pages) + shape[pages, None] * grid - rate[pages, None] * rates
            peak = log_post.max(axis=1)
            out[pages] = np.log(np.exp(log_post - peak[:, None]).sum(axis=1)) + peak
    return out


def _dot_rows(weights: FloatArray, rows: FloatArray) -> FloatArray:
    """``weights @ rows.T`` by ``np.einsum``: OpenBLAS would start (and spin) threads of its
    own for every block, which costs several times the product's CPU on a shared machine."""
    return np.asarray(np.einsum("ij,kj->ik", weights, np.ascontiguousarray(rows)))


def weighted_total(weights: FloatArray, values: FloatArray) -> float:
    """``sum_i weights_i values_i`` in this thread (numpy's einsum), not by ``np.dot``: at
    tens of thousands of entries OpenBLAS's ``ddot`` wakes its threads, which then spin
    (measured: ~16 ms of CPU a call at 50,000 entries, against ~0.1 ms summed here); its
    rounding also depends on that thread count, this one does not."""
    return float(np.einsum("i,i->", weights, values))


def histogram_moments(
    weights: FloatArray, top: FloatArray, prior: FloatArray, grid: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Per row under a grid ``prior``: log marginal likelihood, mean and sd of the log rate."""
    log_prior = np.log(prior)
    shift = float(log_prior.max())
    scaled = np.exp(log_prior - shift)
    sums = _dot_rows(weights, np.stack([scaled, scaled * grid, scaled * grid * grid]))
    total = sums[:, 0]
    mean = sums[:, 1] / total
    var = sums[:, 2] / total - mean * mean
    return np.log(total) + top + shift, mean, np.sqrt(np.maximum(var, 0.0))


def posterior_fresh_share(
    loglik: FloatArray,
    shape: FloatArray,
    rate: FloatArray,
    prior: FloatArray,
    odd: FloatArray,
    interval: FloatArray,
    grid: FloatArray,
) -> FloatArray:
    """Per row, the posterior mean of ``s(interval r) = (1 - exp(-interval r)) / (interval r)``
    (the share of an interval a copy stays fresh) under the two-component posterior
    ``(1 - odd) post_gamma + odd post_prior``: ``post_gamma ~ exp(loglik) r^shape
    exp(-rate r)`` and ``post_prior ~ exp(loglik) prior``, both normalized on the grid.

    One exp per row and grid point (``exp(loglik - top)``, shared by both components); the
    Gamma's factors one row per distinct ``(shape, rate)``; ``s`` read from a table in
    ``log interval + g`` (within ``fresh_share_error(grid)``, so the share is too: it is a
    convex combination of those values). Rows whose Gamma sum underflows are summed directly.
    """
    n = loglik.shape[0]
    if n == 0:
        return np.empty(0)
    which, factors, _ = _gamma_factors(shape, rate, grid)

    def weights_of(lo: int, hi: int) -> FloatArray:
        weights = loglik[lo:hi] - loglik[lo:hi].max(axis=1)[:, None]
        np.exp(weights, out=weights)
        return np.asarray(weights, dtype=np.float64)

    def loglik_of(rows: IntArray) -> FloatArray:
        return loglik[rows]

    return _fresh_share(
        weights_of,
        loglik_of,
        which,
        factors,
        shape,
        rate,
        prior,
        odd,
        interval,
        grid,
        n,
    )


def fresh_share_from_weights(
    weights: FloatArray,
    loglik_of: Callable[[IntArray], FloatArray],
    rows: GammaRows,
    which: IntArray,
    prior: FloatArray,
    odd: FloatArray,
    interval: FloatArray,
    grid: FloatArray,
) -> FloatArray:
    """``posterior_fresh_share`` from the rows' ``grid_weights`` (``exp(loglik - max)``,
    kept from the marginals) and each row's Gamma as its row ``which`` of ``rows``: the same
    numbers without a second exp pass. ``loglik_of(rows)`` gives some rows' log-likelihoods
    (only for rows whose Gamma sum underflows)."""
    n = weights.shape[0]
    if n == 0:
        return np.empty(0)
    return _fresh_share(
        lambda lo, hi: weights[lo:hi],
        loglik_of,
        which,
        rows.factors,
        rows.shape[which],
        rows.rate[which],
        prior,
        odd,
        interval,
        grid,
        n,
    )


def _fresh_share(
    weights_of: Callable[[int, int], FloatArray],
    loglik_of: Callable[[IntArray], FloatArray],
    which: IntArray,
    factors: FloatArray,
    shape: FloatArray,
    rate: FloatArray,
    prior: FloatArray,
    odd: FloatArray,
    interval: FloatArray,
    grid: FloatArray,
    n: int,
) -> FloatArray:
    out = np.empty(n)
    rates = np.exp(grid)
    log_prior = np.log(np.maximum(prior, 1e-300))
    scaled = np.exp(log_prior - log_prior.max())[None, :]
    shares = _GridRows.of(np.log(np.maximum(interval, 1e-300)), grid, "fresh_share")
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        weights = weights_of(lo, hi)
        s_rows = shares.rows(slice(lo, hi))
        q = factors[which[lo:hi]]
        total = np.einsum("ij,ij->i", weights, q)
        odd_total = _dot_rows(weights, scaled)[:, 0]
        s_rows *= weights  # W s
        with np.errstate(divide="ignore", invalid="ignore"):
            regular = np.einsum("ij,ij->i", s_rows, q) / total
        odd_share = _dot_rows(s_rows, scaled)[:, 0] / odd_total
        small = np.flatnonzero(~(total > _TINY))
        if small.shape[0]:
            rows = lo + small
            log_post = loglik_of(rows) + shape[rows, None] * grid - rate[rows, None] * rates
            post = np.exp(log_post - log_post.max(axis=1)[:, None])
            s_small = shares.rows(rows)
            regular[small] = np.einsum("ij,ij->i", post, s_small) / post.sum(axis=1)
        p = odd[lo:hi]
        out[lo:hi] = (1.0 - p) * regular + p * odd_share
    return out


def fresh_share_from_loglik(
    loglik_of: Callable[[IntArray], FloatArray],
    rows: GammaRows,
    which: IntArray,
    prior: FloatArray,
    odd: FloatArray,
    interval: FloatArray,
    grid: FloatArray,
) -> FloatArray:
    """``posterior_fresh_share`` of rows whose log-likelihood ``loglik_of(positions)``
    gives, a block of rows at a time (their ``grid_weights`` made block by block and
    dropped: the same numbers as from one array of every row's weights, without it)."""
    n = which.shape[0]
    if n == 0:
        return np.empty(0)

    def weights_of(lo: int, hi: int) -> FloatArray:
        return grid_weights(loglik_of(np.arange(lo, hi)), in_place=True)[1]

    return _fresh_share(
        weights_of,
        loglik_of,
        which,
        rows.factors,
        rows.shape[which],
        rows.rate[which],
        prior,
        odd,
        interval,
        grid,
        n,
    )


#: float32's unit roundoff
_EPS32 = float(np.finfo(np.float32).eps) / 2.0
#: a quiet row whose float32 sums fall below this is summed in float64 (no term there is
#: within ``2^-126`` of underflow relative to its sum: the flushed ones weigh < 1e-18)
_TINY32 = 1e-25
#: a quiet row whose deficit is above this is summed in float64 (its rate is then near or
#: above its interval's inverse, where the share's inversion amplifies the error)
_MAX_DEFICIT32 = 0.5
#: below ``exp(-104)`` float32's exp gives 0 (its smallest subnormal is ``2^-149``)
_MIN_EXP32 = 104.0


def quiet_fresh_share_error(grid: FloatArray) -> float:
    """Bound on the relative error of ``1 - quiet_fresh_share`` (the deficit) against the
    same sums in exact arithmetic (see ``quiet_fresh_share``)."""
    n = grid.shape[0]
    # each term's factors: W = exp of an argument rounded once (<= 104 eps absolute) plus
    # exp's own error (<= 4 ulp), the Gamma or prior row and the deficit table rounded to
    # float32 (eps each; the interpolation adds 2 roundings), the products (2 roundings)
    per_term = (_MIN_EXP32 + 4.0 + 1.0 + 3.0 + 2.0) * _EPS32
    # a ratio of sums of positive terms: twice the terms' error, plus (n - 1) eps per sum
    ratio = 2.0 * per_term + 2.0 * (n - 1) * _EPS32
    # the float64 table's own interpolation (h^2 / 8 max|u''| / u relative, with u'' in
    # log x at most 1.0014 u, numerically) and the flushed terms (< 1e-18 of a sum above
    # _TINY32)
    h = float(grid[1] - grid[0]) / _SUB
    return float(ratio * (1.0 + 1e-3) + h * h / 8.0 * 1.01 + 1e-18)


def quiet_fresh_share(
    exposure: FloatArray,
    rows: GammaRows,
    which: IntArray,
    prior: FloatArray,
    odd: FloatArray,
    interval: FloatArray,
    grid: FloatArray,
) -> FloatArray:
    """``fresh_share_from_loglik`` of rows whose log-likelihood is ``-exposure r`` (a quiet
    page without a trusted age), summed in float32: the posterior mean of the deficit
    ``u = 1 - s`` (which keeps its relative precision where ``s`` is near 1, i.e. for a
    rate slow against the interval), returned as ``1 - u``. The deficit is within
    ``quiet_fresh_share_error(grid)`` (relative, ~2.5e-5) of the exact sums; rows whose
    sums would come near float32's underflow, or whose deficit exceeds 0.5, are summed in
    float64 by ``fresh_share_from_loglik`` instead.

    A row's weights are ``exp(E r_0 - E r_j)`` (its maximum is at the first grid point),
    the argument made in float64 and rounded once (an argument made in float32 would be
    off by 3 eps of itself, up to 104 times over)."""
    n = which.shape[0]
    if n == 0:
        return np.empty(0)
    rates = np.exp(grid)
    step_back = -(rates - rates[0])
    log_prior = np.log(np.maximum(prior, 1e-300))
    scaled = np.exp(log_prior - log_prior.max())[None, :].astype(np.float32)
    factors = rows.factors32
    table = _GridRows.of(np.log(np.maximum(interval, 1e-300)), grid, "fresh_deficit")
    values, diffs = table.values32()
    out = np.empty(n)
    again = []
    block = np.empty((min(n, _BLOCK), grid.shape[0]), dtype=np.float32)
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        # the product in float64, rounded once into float32 (no float64 block in between)
        weights = block[: hi - lo]
        np.multiply(exposure[lo:hi, None], step_back, out=weights, dtype=np.float64)
        np.exp(weights, out=weights)
        at = table.base[lo:hi]
        u_rows = diffs[at]
        u_rows *= table.alpha[lo:hi, None].astype(np.float32)
        u_rows += values[at]
        q = factors[which[lo:hi]]
        total = np.einsum("ij,ij->i", weights, q)
        odd_total = np.einsum("ij,kj->ik", weights, scaled)[:, 0]
        u_rows *= weights  # W u
        with np.errstate(divide="ignore", invalid="ignore"):
            regular = np.einsum("ij,ij->i", u_rows, q) / total
            odd_deficit = np.einsum("ij,kj->ik", u_rows, scaled)[:, 0] / odd_total
        p = odd[lo:hi]
        deficit = (1.0 - p) * regular.astype(np.float64) + p * odd_deficit.astype(np.float64)
        out[lo:hi] = 1.0 - deficit
        wide = ~((total > _TINY32) & (odd_total > _TINY32) & (deficit <= _MAX_DEFICIT32))
        again.append(lo + np.flatnonzero(wide))
    redo = np.concatenate(again)
    if redo.shape[0]:

        def loglik_of(at: IntArray) -> FloatArray:
            exact = np.multiply.outer(exposure[redo[at]], rates)
            np.negative(exact, out=exact)
            return exact

        out[redo] = fresh_share_from_loglik(
            loglik_of, rows, which[redo], prior, odd[redo], interval[redo], grid
        )
    return out


@dataclass(frozen=True)
class GridPosterior:
    """Per row of ``grid_posterior``: both components' marginals, the grid prior's
    posterior moments of the log rate and (asked for) both components' fresh shares."""

    log_gamma: FloatArray  # log sum_j exp(loglik_j + a g_j - b r_j), no normalization
    log_odd: FloatArray  # histogram_moments: log marginal likelihood under the grid prior
    mean_log: FloatArray
    sd_log: FloatArray
    gamma_share: FloatArray | None  # posterior mean fresh share under the Gamma component
    odd_share: FloatArray | None  # ... under the grid prior


def grid_posterior(
    weights: FloatArray,
    top: FloatArray,
    loglik_of: Callable[[IntArray], FloatArray],
    rows: GammaRows,
    which: IntArray,
    prior: FloatArray,
    grid: FloatArray,
    interval: FloatArray | None = None,
) -> GridPosterior:
    """``gamma_rows_log_marginal``, ``histogram_moments`` and (with ``interval``) both parts
    of ``posterior_fresh_share`` in one pass over the rows' ``grid_weights``: each block's
    weights and Gamma rows are read once while they sit in the cache, and the sums the
    three share (``sum W Q``, ``sum W prior``) are made once. The same numbers as the three
    functions (each element is the same dot product)."""
    n = weights.shape[0]
    log_gamma, log_odd, mean, sd = (np.empty(n) for _ in range(4))
    shares = interval is not None
    gamma_share, odd_share = (np.empty(n), np.empty(n)) if shares else (None, None)
    if n == 0:
        return GridPosterior(log_gamma, log_odd, mean, sd, gamma_share, odd_share)
    rates = np.exp(grid)
    log_prior = np.log(prior)
    shift = float(log_prior.max())
    scaled = np.exp(log_prior - shift)
    moment_rows = np.ascontiguousarray(np.stack([scaled, scaled * grid, scaled * grid * grid]))
    share_rows = scaled[None, :]
    table = None
    if interval is not None:
        table = _GridRows.of(np.log(np.maximum(interval, 1e-300)), grid, "fresh_share")
    shape, rate = rows.shape[which], rows.rate[which]
    for lo in range(0, n, _BLOCK):
        hi = min(lo + _BLOCK, n)
        at = which[lo:hi]
        w = weights[lo:hi]
        q = rows.factors[at]
        total = np.einsum("ij,ij->i", w, q)
        with np.errstate(divide="ignore"):
            log_gamma[lo:hi] = np.log(total) + top[lo:hi] + rows.offset[at]
        sums = np.einsum("ij,kj->ik", w, moment_rows)
        z = sums[:, 0]
        m = sums[:, 1] / z
        log_odd[lo:hi] = np.log(z) + top[lo:hi] + shift
        mean[lo:hi] = m
        sd[lo:hi] = np.sqrt(np.maximum(sums[:, 2] / z - m * m, 0.0))
        if table is not None and gamma_share is not None and odd_share is not None:
            s_rows = table.rows(slice(lo, hi))
            s_rows *= w  # W s
            with np.errstate(divide="ignore", invalid="ignore"):
                gamma_share[lo:hi] = np.einsum("ij,ij->i", s_rows, q) / total
            odd_share[lo:hi] = np.einsum("ij,kj->ik", s_rows, share_rows)[:, 0] / z
        small = np.flatnonzero(~(total > _TINY))
        if small.shape[0]:
            pages = lo + small
            log_post = loglik_of(pages) + shape[pages, None] * grid - rate[pages, None] * rates
            peak = log_post.max(axis=1)
            post = np.exp(log_post - peak[:, None])
            mass = post.sum(axis=1)
            log_gamma[pages] = np.log(mass) + peak
            if table is not None and gamma_share is not None:
                gamma_share[pages] = np.einsum("ij,ij->i", post, table.rows(pages)) / mass
    return GridPosterior(log_gamma, log_odd, mean, sd, gamma_share, odd_share)


# ------------------------------------------------------------------ quiet pages

#: the quiet table's range in s = log(exposure days) and its points
_S_LOW, _S_HIGH, _S_POINTS = -10.0, 16.0, 8193


def _quiet_direct(
    exposure: FloatArray, prior: FloatArray, grid: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``histogram_moments`` of likelihoods ``exp(-exposure r)``, summed directly."""
    top, weights = grid_weights(-exposure[:, None] * np.exp(grid))
    return histogram_moments(weights, top, prior, grid)


@lru_cache(maxsize=16)
def _quiet_table(prior_bytes: bytes, grid_bytes: bytes) -> tuple[FloatArray, ...]:
    """Values and s-derivatives of log Z, <g> and <g^2> on the quiet table's points."""
    prior = np.frombuffer(prior_bytes)
    grid = np.frombuffer(grid_bytes)
    rates = np.exp(grid)
    s = np.linspace(_S_LOW, _S_HIGH, _S_POINTS)
    exposure = np.exp(s)
    loglik = -exposure[:, None] * rates
    top, weights = grid_weights(loglik)
    log_prior = np.log(prior)
    shift = float(log_prior.max())
    scaled = np.exp(log_prior - shift)
    rows = np.stack(
        [
            scaled,
            scaled * grid,
            scaled * grid**2,
            scaled * rates,
            scaled * grid * rates,
            scaled * grid**2 * rates,
        ],
    )
    sums = _dot_rows(weights, rows)
    z = sums[:, 0]
    g1, g2, r0, r1, r2 = (sums[:, i] / z for i in range(1, 6))
    log_z = np.log(z) + top + shift
    # d/ds of a posterior mean <h> under exp(-E r) is -E (<h r> - <h><r>)
    return log_z, -exposure * r0, g1, -exposure * (r1 - g1 * r0), g2, -exposure * (r2 - g2 * r0)


def quiet_histogram(
    exposure: FloatArray, prior: FloatArray, grid: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``histogram_moments`` for pages whose log-likelihood is ``-exposure r`` (exposure > 0)."""
    n = exposure.shape[0]
    log_z, mean, sd = np.empty(n), np.empty(n), np.empty(n)
    if n == 0:
        return log_z, mean, sd
    table = _quiet_table(np.ascontiguousarray(prior, np.float64).tobytes(), grid.tobytes())
    with np.errstate(divide="ignore"):
        s = np.log(exposure)
    inside = (s >= _S_LOW) & (s < _S_HIGH)
    h = (_S_HIGH - _S_LOW) / (_S_POINTS - 1)
    pos = (s[inside] - _S_LOW) / h
    i = np.minimum(np.floor(pos), _S_POINTS - 2).astype(np.int64)
    t = pos - i
    t2, t3 = t * t, t * t * t
    h00, h10, h01, h11 = 2 * t3 - 3 * t2 + 1, t3 - 2 * t2 + t, 3 * t2 - 2 * t3, t3 - t2

    def hermite(value: FloatArray, slope: FloatArray) -> FloatArray:
        return h00 * value[i] + h10 * h * slope[i] + h01 * value[i + 1] + h11 * h * slope[i + 1]

    log_z[inside] = hermite(table[0], table[1])
    m1 = hermite(table[2], table[3])
    m2 = hermite(table[4], table[5])
    mean[inside] = m1
    sd[inside] = np.sqrt(np.maximum(m2 - m1 * m1, 0.0))
    outside = np.flatnonzero(~inside)
    if outside.shape[0]:
        lz, mu, sigma = _quiet_direct(exposure[outside], prior, grid)
        log_z[outside], mean[outside], sd[outside] = lz, mu, sigma
    return log_z, mean, sd


def gamma_normalization(shape: FloatArray, rate: FloatArray, step: float) -> FloatArray:
    """``a log b - log Gamma(a) + log(step)``: a Gamma's density on the log grid."""
    return np.asarray(shape * np.log(rate) - special.gammaln(shape) + np.log(step))


def page_histogram(
    quiet: NDArray[np.bool_],
    aged: FloatArray,
    exposure: FloatArray,
    busy: tuple[FloatArray, FloatArray],
    prior: FloatArray,
    grid: FloatArray,
) -> tuple[FloatArray, FloatArray, FloatArray]:
    """``histogram_moments`` for every page of a ``_PageGrid``: the busy pages from their
    ``grid_weights`` (``busy``), the quiet ones without an age from ``quiet_histogram``,
    the other quiet ones (``aged log r - exposure r``) summed directly."""
    n = quiet.shape[0]
    log_z, mean, sd = np.empty(n), np.empty(n), np.empty(n)
    top, weights = busy
    rows = np.flatnonzero(~quiet)
    if rows.shape[0]:
        log_z[rows], mean[rows], sd[rows] = histogram_moments(weights, top, prior, grid)
    quiet_pages_histogram(quiet, aged, exposure, prior, grid, (log_z, mean, sd))
    return log_z, mean, sd


def quiet_pages_histogram(
    quiet: NDArray[np.bool_],
    aged: FloatArray,
    exposure: FloatArray,
    prior: FloatArray,
    grid: FloatArray,
    out: tuple[FloatArray, FloatArray, FloatArray],
) -> None:
    """``page_histogram``'s quiet pages, written into ``out`` (log_z, mean, sd) at them."""
    log_z, mean, sd = out
    plain = quiet & (aged == 0) & (exposure > 0)
    rows = np.flatnonzero(plain)
    if rows.shape[0]:
        log_z[rows], mean[rows], sd[rows] = quiet_histogram(exposure[rows], prior, grid)
    rows = np.flatnonzero(quiet & ~plain)
    if rows.shape[0]:
        loglik = aged[rows, None] * grid - exposure[rows, None] * np.exp(grid)
        top_q, weights_q = grid_weights(loglik)
        log_z[rows], mean[rows], sd[rows] = histogram_moments(weights_q, top_q, prior, grid)
