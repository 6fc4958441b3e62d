"""Which listing pages to read this cycle, and in which order the items they show changed are
fetched: one rule for the backtest and the daily cycle.

A listing read costs its own credit(s), and what it reveals is only worth something once the
changed items it shows are fetched. An item a read shows changed is known stale until a fetch
observes it; known-stale items are fetched in one order (``stale_fetch_order``): best
``fetch_worth`` first, the value a found change keeps fresh (``kept_value``) per credit, per
credit again (each such fetch finds one change, so a cheaper one is also more changes per
credit: ranked by kept value per credit alone, a 5-credit rendered page went before a 1-credit
one that keeps a third of its value fresh, and the listings bench on webs with rendering
shops lost up to x1.69 -> x1.27 in credits per change at the same freshness).

A listing is read only when:

- its expected changes reach ``threshold`` per credit of the read (what the read adds to each
  change it finds is then at most ``1 / threshold`` of a read), and
- the read fits the budget with the fetches it calls for, counted as the fetch order makes
  them (``listings_to_read``): its follow-ups are only the items ranked above the worth at
  which the budget runs out, and the known-stale items ranked above that point come out of
  the budget first. So at a small budget only the reads whose changes would be fetched: a
  listing of flash-sale items (each changes several times a day, keeps little fresh, and is
  fetched last) no longer takes the budget of reads whose items are fetched first.

Expected changes count only the items whose state a read would tell: items already known
stale are not counted again. Both the backtest (``models.backtest.listings.ListingPlannerPolicy``)
and the daily cycle's listing pass (``tasks.listings.cycle``) use these functions. Pure numpy,
no loop over pages.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

#: A fetch that finds a change keeps the page's value fresh for about ``1 / (rate + 1/H)``
#: days: known-stale items are fetched by value / (cost^2 x (rate + 1/H)) (``fetch_worth``),
#: in the backtest and the daily cycle alike.
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


def fetch_worth(value: FloatArray, cost: FloatArray, rate: FloatArray) -> FloatArray:
    """A known-stale page's rank in the fetch order: its kept value per credit, times the
    changes a credit finds (one a fetch: 1 / cost), so ``kept_value / cost**2``."""
    cost = np.asarray(cost, dtype=np.float64)
    out: FloatArray = kept_value(value, rate) / (cost * cost)
    return out


def stale_fetch_order(
    value: FloatArray,
    cost: FloatArray,
    rate: FloatArray,
    *,
    ties: tuple[npt.NDArray[np.generic], ...] = (),
) -> IntArray:
    """The order in which known-stale pages are fetched: best ``fetch_worth`` first;
    ``ties``: further sort keys, most significant first,
    ascending; then the pages' order."""
    worth = fetch_worth(value, cost, rate)
    # np.lexsort sorts by its last key first
    order: IntArray = np.lexsort((np.arange(worth.shape[0]), *reversed(ties), -worth))
    return order


@dataclass(frozen=True)
class ListedItems:
    """The items the candidate listings show, one entry per item and listing it is on.

    ``listing``: the listing's index (into ``listing_cost`` of ``listings_to_read``);
    ``changed``: the probability a read shows it changed since its last observation (its
    expected change); ``pending``: already known stale (a listing showed it changed and no
    fetch observed it since): fetched whether or not a listing is read, and not counted in
    its listing's expected changes; ``cost``: what fetching it costs; ``worth``: its rank in
    the fetch order (``fetch_worth``, highest fetched first).
    """

    listing: IntArray
    changed: FloatArray
    pending: BoolArray
    cost: FloatArray
    worth: FloatArray

    def __post_init__(self) -> None:
        n = np.shape(self.listing)
        for name in ("changed", "pending", "cost", "worth"):
            if np.shape(getattr(self, name)) != n:
                raise ValueError(f"ListedItems.{name} must have one entry per item")


def listed_items(
    listing: IntArray,
    changed: FloatArray,
    pending: BoolArray,
    value: FloatArray,
    cost: FloatArray,
    rate: FloatArray,
) -> ListedItems:
    """``ListedItems`` ranked as ``stale_fetch_order`` fetches them (``fetch_worth``)."""
    cost = np.asarray(cost, dtype=np.float64)
    return ListedItems(
        np.asarray(listing, dtype=np.int64),
        np.asarray(changed, dtype=np.float64),
        np.asarray(pending, dtype=np.bool_),
        cost,
        fetch_worth(value, cost, rate),
    )


def listings_to_read(
    listing_cost: FloatArray,
    items: ListedItems,
    *,
    budget: float,
    threshold: float = 4.0,
) -> BoolArray:
    """The listings worth reading (module docstring), one flag per listing.

    A listing is worth a read when its items' expected changes (pending items left out)
    reach ``threshold`` per credit of the read; a listing with no item known (never read)
    always is, and is read first. The reads must fit ``budget`` with the fetches they call
    for, counted as the fetch order makes them: known-stale items are fetched best
    ``worth`` first, so a read's follow-ups are only those ranked above the point where the
    budget runs out, and the pending items ranked above that point come out of it too. So
    the fit is a cut-off worth ``w``: every worth listing whose expected changes ranked at
    or above ``w`` reach the threshold is read, at the price of the read, the expected
    fetches of its items ranked at or above ``w`` and the pending items ranked at or above
    ``w``; the lowest ``w`` (most reads) whose price fits the budget. At a budget everything
    fits in, every listing worth a read is read.
    """
    cost = np.asarray(listing_cost, dtype=np.float64)
    n = cost.shape[0]
    at = items.listing
    if at.shape[0] and (at.min() < 0 or at.max() >= n):
        raise ValueError("ListedItems.listing must index listing_cost")
    worth = np.where(np.isnan(items.worth), -np.inf, items.worth)
    fresh = ~items.pending
    p = np.where(fresh, items.changed, 0.0)
    need = threshold * cost
    known = np.bincount(at, minlength=n) > 0
    # worth a read at all: every expected change counted
    expected = np.bincount(at, weights=p, minlength=n)
    wanted = ~known | (expected >= need)
    # per listing, the worth at which its expected changes ranked above reach the threshold
    # (its entry: at a cut-off below it, the read is worth it on the follow-ups made)
    idx = np.flatnonzero(fresh & wanted[at])
    idx = idx[np.lexsort((-worth[idx], at[idx]))]  # by listing, best worth first
    entry = np.where(known, -np.inf, np.inf)
    if idx.shape[0]:
        seg = at[idx]
        first = np.r_[True, seg[1:] != seg[:-1]]
        cum = np.cumsum(p[idx])
        base = np.repeat(
            cum[first] - p[idx][first], np.diff(np.r_[np.flatnonzero(first), seg.shape[0]])
        )
        reached = (cum - base) >= need[seg]
        # a listing worth a read reaches the threshold by its last item, whatever the
        # rounding of the running sums
        reached |= np.r_[first[1:], True]
        hit = np.flatnonzero(reached)
        hit = hit[np.r_[True, seg[hit][1:] != seg[hit][:-1]]]  # the first crossing each
        entry[seg[hit]] = worth[idx][hit]
    # what the budget pays, each with the cut-off at which it starts to count: the reads,
    # their items' expected fetches (from the lower of the item's and its listing's entry),
    # and the pending items (from their own worth). At equal cut-offs: pending items first,
    # then listing by listing its items and then its read, so a read is taken only with the
    # fetches it calls for, and a tie of many listings (items of equal worth) is not all
    # items first and no read
    counted = idx
    reads = np.flatnonzero(wanted)
    pend = np.flatnonzero(items.pending)
    keys = np.concatenate(
        [np.minimum(worth[counted], entry[at[counted]]), worth[pend], entry[reads]]
    )
    price = np.concatenate([p[counted] * items.cost[counted], items.cost[pend], cost[reads]])
    group = np.concatenate([at[counted], np.full(pend.shape[0], -1), reads])
    kind = np.r_[np.zeros(counted.shape[0] + pend.shape[0]), np.ones(reads.shape[0])]
    order = np.lexsort((kind, group, -keys))
    fits = np.cumsum(price[order]) <= budget * (1 + 1e-12)
    taken = order[fits] - (counted.shape[0] + pend.shape[0])
    out = np.zeros(n, dtype=bool)
    out[reads[taken[taken >= 0]]] = True
    return out
