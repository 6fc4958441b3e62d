"""Realized freshness and changes caught, from visit times and true change times.

The sandbox knows when every page really changed; a crawler's history says when it
looked. A page's local copy is fresh at time ``t`` if it has been visited and no real
change happened between its last visit before ``t`` and ``t`` (Cho & Garcia-Molina's
freshness). A visit catches a change if at least one real change happened since the
page's previous visit. Everything is vectorized over (page, time) pairs with sorted keys
and ``searchsorted``; no per-page Python loop.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

FloatArray = NDArray[np.float64]
IntArray = NDArray[np.int64]


@dataclass(frozen=True)
class Events:
    """Times (days, any origin) of events per page: ``page`` codes in ``[0, n_pages)``."""

    page: IntArray
    time: FloatArray

    def __post_init__(self) -> None:
        if self.page.shape != self.time.shape:
            raise ValueError("page and time arrays must have the same shape")
        if self.page.size and (self.page.min() < 0):
            raise ValueError("page codes must be non-negative")
        if not np.isfinite(self.time).all():
            raise ValueError("event times must be finite")


def _keys(page: IntArray, time: FloatArray, span: float) -> FloatArray:
    """One sortable key per (page, time): pages are separated by more than the time span."""
    return page.astype(np.float64) * span + time


def _span(*times: FloatArray) -> tuple[float, float]:
    values = [t for t in times if t.size]
    if not values:
        return 0.0, 1.0
    low = min(float(t.min()) for t in values)
    high = max(float(t.max()) for t in values)
    # A power of two: page * span is exact and key / span divides exactly, so
    # floor(key / span) gives the page back even for a time equal to ``low`` (with any
    # other span, page * span / span can round to page - 1 and attach a page's first visit
    # to the previous page).
    return low, float(2.0 ** np.ceil(np.log2((high - low) * 2.0 + 2.0)))


def fresh_share(
    visits: Events, changes: Events, sample_times: FloatArray, n_pages: int
) -> FloatArray:
    """Share of the ``n_pages`` pages whose copy is fresh at each sample time.

    A page never visited before a sample time counts as not fresh (nothing is held).
    """
    samples = np.asarray(sample_times, dtype=np.float64)
    low, span = _span(visits.time, changes.time, samples)
    visit_keys = np.sort(_keys(visits.page, visits.time - low, span))
    change_keys = np.sort(_keys(changes.page, changes.time - low, span))
    pages = np.arange(n_pages, dtype=np.int64)
    # every (page, sample) pair, pages outer
    grid_keys = _keys(np.repeat(pages, samples.size), np.tile(samples - low, n_pages), span)
    page_start = pages.astype(np.float64) * span
    # the last visit at or before the sample, within the same page
    last = np.searchsorted(visit_keys, grid_keys, side="right") - 1
    has_visit = last >= 0
    last_key = np.where(has_visit, visit_keys[np.maximum(last, 0)], -np.inf)
    has_visit &= last_key >= np.repeat(page_start, samples.size)
    # changes in (last visit, sample]
    changed = np.searchsorted(change_keys, grid_keys, side="right") - np.searchsorted(
        change_keys, last_key, side="right"
    )
    fresh = has_visit & (changed == 0)
    return np.asarray(fresh.reshape(n_pages, samples.size).mean(axis=0), dtype=np.float64)


def changes_caught(visits: Events, changes: Events) -> tuple[int, int]:
    """``(visits that found a change, visits that found none)``, each page's first excluded.

    A visit "found a change" if a real change happened since the page's previous visit.
    """
    if visits.page.size == 0:
        return 0, 0
    low, span = _span(visits.time, changes.time)
    keys = np.sort(_keys(visits.page, visits.time - low, span))
    page_of = np.floor(keys / span).astype(np.int64)
    change_keys = np.sort(_keys(changes.page, changes.time - low, span))
    follows = np.r_[False, page_of[1:] == page_of[:-1]]  # has a previous visit, same page
    previous = np.r_[-np.inf, keys[:-1]]
    between = np.searchsorted(change_keys, keys, side="right") - np.searchsorted(
        change_keys, previous, side="right"
    )
    found = follows & (between > 0)
    return int(found.sum()), int((follows & (between == 0)).sum())
