"""The numerical core of change-rate estimation: per-page posterior modes, all pages at once.

For a page with changed intervals given as weighted nodes ``(t_k, w_k)``, unchanged days
``U`` and a Gamma(a, b) prior (a = b = 0 for plain maximum likelihood), the posterior
mode in log-rate solves ``sum_k w_k t_k / (exp(r t_k) - 1) + a / r = U + b``. Multiplying
by r: ``S(r) + a = (U + b) r`` with ``S = sum_k w_k phi(r t_k)`` and
``phi(u) = u / (exp(u) - 1)``, which falls from 1 to 0. In logs,
``F = log(S + a) - log r - log(U + b)`` has slope ``D / (S + a) - 1`` in log r, where
``D = sum_k w_k u phi'(u) <= 0``: always <= -1, so Newton in log r is safe from any start
and takes a handful of steps from the closed form for one node. Pages are iterated as
one vector; converged pages drop out, and the arrays shrink with them.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


#: Pages handled together by chunked callers: chunks bound memory, stay in cache and run
#: in parallel threads (numpy releases the GIL inside its array loops).
CHUNK_PAGES = 1 << 18


def solve_posterior_mode(
    node_page: IntArray,
    node_days: FloatArray,
    node_weight: FloatArray,
    target: FloatArray,
    shape: FloatArray,
    *,
    start: FloatArray | None = None,
    tolerance: float = 1e-10,
    max_iterations: int = 60,
) -> tuple[FloatArray, FloatArray]:
    """Rates and log-posterior curvature ``J = a + S - D`` (in log r) for every page.

    ``target`` is ``U + b`` per page, ``shape`` is ``a``. Nodes may come in any order.
    Pages with no root (nothing unchanged and no prior rate, or no change and no prior
    shape) get NaN rate. Callers with millions of pages solve them in chunks of
    ``CHUNK_PAGES`` (see ``models.estimation.change_rate``): the temporaries then stay in cache.
    """
    if node_page.shape[0] and (np.diff(node_page) < 0).any():
        order = np.argsort(node_page, kind="stable")
        node_page, node_days, node_weight = node_page[order], node_days[order], node_weight[order]
    return _solve_sorted(
        node_page, node_days, node_weight, target, shape, start, tolerance, max_iterations
    )


def _solve_sorted(
    node_page: IntArray,
    node_days: FloatArray,
    node_weight: FloatArray,
    target: FloatArray,
    shape: FloatArray,
    start: FloatArray | None,
    tolerance: float,
    max_iterations: int,
) -> tuple[FloatArray, FloatArray]:
    """``solve_posterior_mode`` once the nodes are sorted by page."""
    p = target.shape[0]
    mass = bincount(node_page, node_weight, p)
    solvable = (target > 0) & ((mass > 0) | (shape > 0))
    safe_target = np.where(solvable, target, 1.0)
    with np.errstate(invalid="ignore", divide="ignore"):
        t_bar = np.where(mass > 0, bincount(node_page, node_weight * node_days, p) / mass, 1.0)
    # One node at the mean changed interval: (W + a) t / (exp(r t) - 1) = U + b exactly.
    guess = np.where(
        mass > 0, np.log1p((mass + shape) * t_bar / safe_target) / t_bar, shape / safe_target
    )
    if start is not None:
        guess = np.where(np.isfinite(start) & (start > 0), start, guess)

    rate = np.full(p, np.nan)
    s_out = np.zeros(p)
    d_out = np.zeros(p)
    # Pages with no changed interval but a prior: shape / (U + b), exactly.
    closed = solvable & ~(mass > 0)
    rate[closed] = shape[closed] / safe_target[closed]
    iterate = solvable & (mass > 0)
    active = np.flatnonzero(iterate)
    keep_nodes = iterate[node_page]
    local = (np.cumsum(iterate) - 1)[node_page[keep_nodes]]
    days = node_days[keep_nodes]
    weight = node_weight[keep_nodes]
    log_r = np.log(np.maximum(guess[active], 1e-300))
    a = shape[active]
    log_target = np.log(safe_target[active])
    s_val = d_val = np.zeros(0)
    for _ in range(max_iterations):
        if active.shape[0] == 0:
            break
        r = np.exp(np.maximum(log_r, -690.0))
        phi, u_dphi = phi_terms(r[local] * days)
        n = active.shape[0]
        s_val = bincount(local, weight * phi, n)
        d_val = bincount(local, weight * u_dphi, n)
        total = s_val + a
        step = (np.log(total) - log_r - log_target) / (1.0 - d_val / total)
        step = np.minimum(np.maximum(step, -10.0), 10.0)
        done = ~(np.abs(step) >= tolerance)
        n_done = int(done.sum())
        if n_done == n:
            break
        log_r = np.where(done, log_r, log_r + step)
        if n_done * 2 >= n:
            # Record the converged pages and shrink the arrays to those still moving.
            finished = active[done]
            rate[finished] = r[done]
            s_out[finished] = s_val[done]
            d_out[finished] = d_val[done]
            going = ~done
            node_going = going[local]
            local = (np.cumsum(going) - 1)[local[node_going]]
            days, weight = days[node_going], weight[node_going]
            active, a, log_target, log_r = active[going], a[going], log_target[going], log_r[going]
    # Converged (or out of iterations): S and D were evaluated at exp(log_r) for those done.
    rate[active] = np.exp(log_r)
    s_out[active], d_out[active] = s_val, d_val
    return rate, shape + s_out - d_out


def phi_terms(u: FloatArray) -> tuple[FloatArray, FloatArray]:
    """``phi(u) = u / (exp(u) - 1)`` and ``u phi'(u) = phi (1 - u - phi)`` for u >= 0."""
    u = np.minimum(u, 700.0)
    phi = u / np.expm1(u)
    return phi, phi * (1.0 - u - phi)


def map_chunks(
    func: Callable[..., tuple[FloatArray, ...]],
    n_out: int,
    *arrays: NDArray[Any],
    threads: int | None = None,
) -> tuple[FloatArray, ...]:
    """Apply an elementwise ``func`` to aligned slices of ``arrays``, in parallel chunks.

    Whole-array numpy at millions of elements spends most of its time allocating and
    faulting in temporaries; chunks of ``CHUNK_PAGES`` stay in cache and run on all cores
    (numpy releases the GIL in its loops).
    """
    n = arrays[0].shape[0]
    if n <= CHUNK_PAGES:
        return func(*arrays)
    out = tuple(np.empty(n) for _ in range(n_out))

    def run(lo: int) -> None:
        hi = min(lo + CHUNK_PAGES, n)
        parts = func(*(a[lo:hi] for a in arrays))
        for target, part in zip(out, parts, strict=True):
            target[lo:hi] = part

    with ThreadPoolExecutor(max_workers=threads or os.cpu_count() or 1) as pool:
        list(pool.map(run, range(0, n, CHUNK_PAGES)))
    return out


def two_point_quadrature(
    count: FloatArray, s1: FloatArray, s2: FloatArray, s3: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Two nodes and weights per page matching its changed intervals' first three moments.

    See ``_two_point_quadrature_chunk``.
    """
    t1, w1, t2, w2 = map_chunks(_two_point_quadrature_chunk, 4, count, s1, s2, s3)
    return t1, w1, t2, w2


def _two_point_quadrature_chunk(
    count: FloatArray, s1: FloatArray, s2: FloatArray, s3: FloatArray
) -> tuple[FloatArray, FloatArray, FloatArray, FloatArray]:
    """Two nodes and weights matching a count and its first three raw moment sums.

    The distribution of a page's changed intervals is replaced by the unique two-point
    distribution with the same mean, variance and skewness (Gauss quadrature for it):
    exact for any function when there are at most two distinct lengths. Zero variance
    gives one node carrying the whole weight (the second weight is 0).
    """
    with np.errstate(divide="ignore", invalid="ignore"):
        mean = np.where(count > 0, s1 / count, 0.0)
        var = np.where(count > 0, s2 / count - mean**2, 0.0)
        third = np.where(
            count > 0, s3 / count - 3 * mean * s2 / count + 2 * mean * mean * mean, 0.0
        )
        flat = var <= 1e-12 * mean * mean
        sd = np.sqrt(np.where(flat, 1.0, var))
        skew = np.where(flat, 0.0, third / (sd * sd * sd))
    root = np.sqrt(skew**2 + 4.0)
    z1, z2 = (skew - root) / 2.0, (skew + root) / 2.0  # z1 < 0 < z2, z1 * z2 = -1
    p1 = z2 / (z2 - z1)
    t1 = np.where(flat, mean, mean + sd * z1)
    t2 = np.where(flat, mean, mean + sd * z2)
    w1 = np.where(flat, count, count * p1)
    w2 = np.where(flat, 0.0, count * (1.0 - p1))
    # Rounding in the sums can push a node just below zero for very skewed tiny spreads.
    t1 = np.maximum(t1, np.where(count > 0, 1e-9 * mean, 0.0))
    return t1, w1, t2, w2


def bincount(index: IntArray, weights: FloatArray, size: int) -> FloatArray:
    """Sum of ``weights`` per value of ``index`` (0..size-1), as float64."""
    return np.asarray(np.bincount(index, weights=weights, minlength=size), dtype=np.float64)
