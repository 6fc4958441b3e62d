"""Which listing pages to read this cycle, and in which order the items they show changed are
fetched: one rule for the backtest and the daily cycle.

A listing read costs its own credit(s), and what it reveals is only worth something once the
changed items it shows are fetched. So a read "buys" its expected changed items at the price
of the read plus their fetches: ``expected / (listing_cost + expected x item_cost)`` changes
per credit. A listing is read only when:

- its expected changes reach ``threshold`` per credit of the read (what the read adds to each
  change it finds is then at most ``1 / threshold`` of a read), and
- the reads and the fetches they call for fit the budget, best changes per credit first (the
  cap on the listings' share: at a small budget only the reads the budget can follow up).

``expected`` counts only the items whose state a read would tell: items already known to have
changed (shown changed and not fetched yet) are not counted again. An item a read shows
changed is known stale until a fetch observes it; known-stale items are fetched cheapest to
keep fresh first (``stale_fetch_order``: the value a found change keeps fresh,
``kept_value``, per credit). Both the backtest (``models.backtest.listings.ListingPlannerPolicy``)
and the daily cycle's listing pass (``tasks.listings.cycle``) use these functions. Pure numpy,
no loop over pages.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

#: A fetch that finds a change keeps the page's value fresh for about ``1 / (rate + 1/H)``
#: days: known-stale items are fetched cheapest-to-keep-fresh first, value / (cost x (rate +
#: 1/H)), in the backtest and the daily cycle alike.
HORIZON_DAYS = 30.0

FloatArray = npt.NDArray[np.float64]
BoolArray = npt.NDArray[np.bool_]
IntArray = npt.NDArray[np.int64]


def kept_value(value: FloatArray, rate: FloatArray) -> FloatArray:
    """What a fetch that finds a change is worth: the value it keeps fresh for about
    ``1 / (rate + 1/HORIZON_DAYS)`` days (a page with no rate estimate: give 0)."""
    out: FloatArray = np.asarray(value, dtype=np.float64) / (
        np.asarray(rate, dtype=np.float64) + 1.0 / HORIZON_DAYS
    )
    return out


def stale_fetch_order(
    value: FloatArray,
    cost: FloatArray,
    rate: FloatArray,
    *,
    ties: tuple[npt.NDArray[np.generic], ...] = (),
) -> IntArray:
    """The order in which known-stale pages are fetched: best kept value per credit
    (``kept_value / cost``) first; ``ties``: further sort keys, most significant first,
    ascending; then the pages' order."""
    worth = kept_value(value, rate) / np.asarray(cost, dtype=np.float64)
    # np.lexsort sorts by its last key first
    order: IntArray = np.lexsort((np.arange(worth.shape[0]), *reversed(ties), -worth))
    return order


def listings_to_read(
    expected: FloatArray,
    listing_cost: FloatArray,
    item_cost: FloatArray,
    *,
    budget: float,
    threshold: float = 4.0,
) -> BoolArray:
    """The listings worth reading (module docstring), one flag per listing.

    ``expected``: per listing, its items' expected changes since their last observation,
    known-stale items left out (NaN: unknown, always worth a read if it fits);
    ``listing_cost``: what a read costs; ``item_cost``: what fetching one of its items costs
    (their mean); ``budget``: the credits the reads and their follow-up fetches may use.
    """
    k = np.asarray(expected, dtype=np.float64)
    cost = np.asarray(listing_cost, dtype=np.float64)
    items = np.asarray(item_cost, dtype=np.float64)
    if not (k.shape == cost.shape == items.shape):
        raise ValueError("expected, listing_cost and item_cost must have one entry per listing")
    unknown = np.isnan(k)
    k_known = np.where(unknown, 0.0, k)
    act = cost + k_known * items  # the read and the fetches it calls for
    worth = unknown | (k_known >= threshold * cost)
    rank = np.where(unknown, np.inf, k_known / act)
    order = np.flatnonzero(worth)
    order = order[np.argsort(-rank[order], kind="stable")]
    fits = np.cumsum(act[order]) <= budget * (1 + 1e-12)
    out = np.zeros(k.shape[0], dtype=bool)
    out[order[fits]] = True
    return out
