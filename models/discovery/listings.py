"""Listing pages as change detectors: a category page's per-item summaries, and what changed.

A category or search page often shows, for dozens of items, the fields that change most
(name, price, availability) and a link to each item's page. Fetching the listing and hashing
each item's summary says, for every listed item at once, whether it changed since the
listing was last read: the items whose summary changed are worth a fetch, the others are not
fetched just to confirm. Pure (no I/O); the recrawl cycle's use is ``tasks.listings``.

- ``parse_listing(body, content_type, url, rule)``: the page's item blocks as
  ``ListingItems`` (each item's normalized URL, ``url_id`` and summary hash, in page order).
  Which blocks are items is declared (``ListingRule(item_css="li.item")``) or learned from
  the page: the largest set of repeated sibling elements (same tag and classes) under one
  parent that each hold a link to another page (``min_items`` of them at least). An item's
  summary is its block's text without volatile noise (``models.content.noise``), collapsed;
  its link is the block's first ``<a href>``.
- ``compare_summaries(previous, seen)``: vectorized (numpy, sort and search over the url ids,
  no loop over items) comparison of the summaries just read against the last ones kept:
  per item seen, ``changed`` (True, False) or new (no summary kept before).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt
from selectolax.lexbor import LexborHTMLParser, LexborNode, SelectolaxError

from models.content.extract import decode_body
from models.content.noise import strip_volatile_text
from models.discovery.urls import InvalidURLError, normalize, resolve, url_id

#: Fewer repeated blocks than this are not a listing (a page's navigation has a few).
MIN_ITEMS = 5
_HTML_TYPES = ("text/html", "application/xhtml+xml", "")
#: Summary hashes are the first 8 bytes of BLAKE2b-128 of the summary text, as int64.
_HASH_BYTES = 8

Int64Array = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


class ListingRuleError(ValueError):
    """A listing rule that cannot be used (its selector is not valid CSS)."""


@dataclass(frozen=True)
class ListingRule:
    """How to read a host's listings: the CSS of one item block (None: learn it per page)."""

    item_css: str | None = None
    min_items: int = MIN_ITEMS

    def __post_init__(self) -> None:
        if self.min_items < 1:
            raise ListingRuleError(f"min_items must be >= 1, got {self.min_items}")
        if self.item_css is not None:
            try:
                LexborHTMLParser("<p></p>").css(self.item_css)
            except SelectolaxError as exc:
                raise ListingRuleError(
                    f"invalid CSS selector for listing items {self.item_css!r}: {exc}"
                ) from None


LEARNED = ListingRule()


@dataclass(frozen=True)
class ListingItems:
    """The items one listing shows, in page order (one entry per distinct item URL)."""

    urls: list[str]
    url_ids: Int64Array
    summary_hashes: Int64Array
    summaries: list[str]

    def __len__(self) -> int:
        return len(self.urls)


def summary_hash(text: str) -> int:
    """The int64 hash of one item's summary text (already noise-free and collapsed)."""
    digest = hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).digest()
    return int.from_bytes(digest[:_HASH_BYTES], "big", signed=True)


def parse_listing(
    body: bytes, content_type: str | None, url: str, rule: ListingRule = LEARNED
) -> ListingItems:
    """The item summaries of a listing page fetched from ``url`` (see the module docstring).

    A body that is not HTML, or a page with fewer than ``rule.min_items`` item blocks, has
    no items (an empty ``ListingItems``): it is not (or no longer) a listing.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in _HTML_TYPES:
        return _items([], [])
    tree = LexborHTMLParser(decode_body(body, content_type or "", html=True))
    if rule.item_css is not None:
        blocks = [b for b in tree.css(rule.item_css) if b.css_first("a[href]") is not None]
    else:
        blocks = _learned_blocks(tree)
    if len(blocks) < rule.min_items:
        return _items([], [])
    base = _base(tree, url)
    urls: list[str] = []
    summaries: list[str] = []
    seen: set[str] = set()
    for block in blocks:
        link = block.css_first("a[href]")
        if link is None:
            continue
        try:
            target = normalize(resolve(base, (link.attributes.get("href") or "").strip()))
        except InvalidURLError:
            continue
        if target in seen or target == url:
            continue
        seen.add(target)
        urls.append(target)
        summaries.append(strip_volatile_text(block.text(separator=" ")))
    return _items(urls, summaries)


def _items(urls: list[str], summaries: list[str]) -> ListingItems:
    return ListingItems(
        urls=urls,
        url_ids=np.array([url_id(u) for u in urls], dtype=np.int64),
        summary_hashes=np.array([summary_hash(s) for s in summaries], dtype=np.int64),
        summaries=summaries,
    )


def _base(tree: LexborHTMLParser, url: str) -> str:
    node = tree.head.css_first("base[href]") if tree.head is not None else None
    if node is None:
        return url
    try:
        return resolve(url, (node.attributes.get("href") or "").strip())
    except InvalidURLError:
        return url


def _learned_blocks(tree: LexborHTMLParser) -> list[LexborNode]:
    """The largest group of same-shaped siblings (tag and classes) that each hold a link."""
    groups: dict[tuple[int, str, str], list[LexborNode]] = {}
    root = tree.body
    if root is None:
        return []
    for link in root.css("a[href]"):
        # the link's ancestors up to the body: the item block is one of them (or the link)
        node: LexborNode | None = link
        while node is not None and node.tag not in ("body", "html"):
            parent = node.parent
            if parent is None:
                break
            shape = (parent.mem_id, node.tag or "", node.attributes.get("class") or "")
            members = groups.setdefault(shape, [])
            if not members or members[-1].mem_id != node.mem_id:
                members.append(node)
            node = parent
    if not groups:
        return []
    # the most blocks wins; among equals, the outermost (more summary per block)
    best = max(groups.values(), key=lambda g: (len(g), -_depth(g[0])))
    return best


def _depth(node: LexborNode) -> int:
    depth = 0
    parent = node.parent
    while parent is not None:
        depth += 1
        parent = parent.parent
    return depth


@dataclass(frozen=True)
class SummaryComparison:
    """Per item just seen: whether its summary changed since the one kept (``known``)."""

    url_ids: Int64Array
    summary_hashes: Int64Array
    known: BoolArray  # a summary was kept for the item before
    changed: BoolArray  # known and different (False where not known)


def compare_summaries(
    previous_ids: Int64Array,
    previous_hashes: Int64Array,
    seen_ids: Int64Array,
    seen_hashes: Int64Array,
) -> SummaryComparison:
    """Compare the summaries just seen with the last ones kept (vectorized).

    ``previous_*`` hold one kept summary per item (unique ids, any order); ``seen_*`` the
    summaries a cycle's listings showed (an item on two listings shows the same summary:
    the last occurrence counts).
    """
    prev_ids = np.asarray(previous_ids, dtype=np.int64)
    prev_hashes = np.asarray(previous_hashes, dtype=np.int64)
    ids = np.asarray(seen_ids, dtype=np.int64)
    hashes = np.asarray(seen_hashes, dtype=np.int64)
    if prev_ids.shape != prev_hashes.shape or ids.shape != hashes.shape:
        raise ValueError("ids and summary hashes must have one entry each")
    # one entry per seen item: the last occurrence
    _, last_rev = np.unique(ids[::-1], return_index=True)
    keep = np.sort(ids.shape[0] - 1 - last_rev)
    ids, hashes = ids[keep], hashes[keep]
    order = np.argsort(prev_ids, kind="stable")
    sorted_ids = prev_ids[order]
    at = np.searchsorted(sorted_ids, ids)
    inside = at < sorted_ids.shape[0]
    at_clipped = np.where(inside, at, 0)
    known = inside & (sorted_ids[at_clipped] == ids) if sorted_ids.shape[0] else inside
    before = prev_hashes[order][at_clipped] if sorted_ids.shape[0] else hashes
    changed = known & (before != hashes)
    return SummaryComparison(ids, hashes, known, changed)
