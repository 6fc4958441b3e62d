"""Which discovered URLs enter the catalog: normalization, trap defenses, de-duplication, caps.

Pure: candidate URLs in, a decision per URL out; ``tasks.discovery.run`` does the I/O. The rules
are the crawler-design article's defenses against crawler traps and duplicates:

1. Normalize (``models.discovery.urls.normalize``); a URL that does not normalize is ``bad_url``.
2. De-duplicate: the first occurrence in this run wins (callers pass seeds, then sitemap
   entries, then links). A link, and only a link, is then checked against the Bloom filter
   of links settled in earlier runs (added, or rejected for good as a trap or by
   robots.txt): a hit is skipped at once and counted as ``seen_links``. About 1% of truly
   new links are lost to false positives, the price the article accepts; seeds and sitemap
   entries must never be lost, so they only meet the exact checks.
3. ``models.discovery.urls.url_trap_reason``: too long, too deep, or repeated path segments
   (``/a/b/a/b/a/b``): ``trap``.
4. A URL already in the catalog (exact set of url ids) is ``known``, not new, and keeps its
   catalog row (a sitemap's newer lastmod still updates it).
5. ``robots_denied`` when the host's known robots.txt rules forbid the URL.
6. Per-host caps per run, in proportion to the host's importance: ``cap = max(floor,
   per_value x (sum of the host's catalog values))``; a trap that survives the URL checks
   can add at most ``floor`` pages a cycle to a host nobody values. Beyond: ``host_cap``. A
   global ``max_pages`` gives ``max_pages``. Capped URLs are not marked as seen, so they
   come back next cycle.

Down-ranking near-duplicates: ``url_pattern`` maps a URL to its shape (digits -> ``N``,
query values dropped) and ``pattern_multipliers`` turns near-duplicate reports of fetched
pages into a value multiplier per shape, applied to new URLs of that shape. Known pages in
a near-duplicate cluster other than the one it keeps (``cluster_keepers``) are planned at
``NEAR_DUPLICATE_VALUE`` times their value.

``rel="canonical"`` after fetching (the crawler-design article): ``honoured_canonicals``
decides which fetched pages are known by another URL from now on. Candidates found that
way have the source ``canonical`` (exact checks only, like sitemap entries).
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

import numpy as np

from models.discovery.seen import BloomFilter, ExactSeenSet
from models.discovery.urls import (
    MAX_URL_LENGTH,
    InvalidURLError,
    normalize,
    shown_url,
    url_host,
    url_id,
    url_trap_reason,
)

SOURCES = ("seed", "sitemap", "link", "canonical")
#: Share of its value a known near-duplicate keeps when planned (the cluster's kept page
#: keeps all of it): "lower the priority of URLs whose content keeps matching pages held".
NEAR_DUPLICATE_VALUE = 0.25


@dataclass(frozen=True, slots=True)
class Candidate:
    """A URL found by discovery, as found (normalized during screening)."""

    url: str
    source: str  # seed | sitemap | link | canonical
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float | None = None


@dataclass(frozen=True, slots=True)
class NewPage:
    """A candidate that passed screening: normalized URL, its id and host."""

    url: str
    url_id: int
    host: str
    candidate: Candidate


@dataclass(frozen=True)
class TrapLimits:
    max_length: int = MAX_URL_LENGTH  # the catalog's limit too (one home: models.discovery.urls)
    max_depth: int = 16
    max_repeats: int = 3


@dataclass(frozen=True)
class HostCaps:
    """Pages a host may add per run: ``max(floor, per_value x host value sum)``."""

    floor: int = 2_000
    per_value: float = 10.0

    def __post_init__(self) -> None:
        if self.floor < 0 or self.per_value < 0:
            raise ValueError("host caps must be >= 0")

    def cap(self, value_sum: float) -> int:
        return max(self.floor, int(self.per_value * value_sum))


@dataclass
class Tally:
    """Counts by reason, with the first example of each (URL and detail)."""

    counts: Counter[str] = field(default_factory=Counter)
    examples: dict[str, str] = field(default_factory=dict)

    def add(self, reason: str, example: str, n: int = 1) -> None:
        self.counts[reason] += n
        self.examples.setdefault(reason, example)

    def merge(self, other: Tally) -> None:
        self.counts.update(other.counts)
        for reason, example in other.examples.items():
            self.examples.setdefault(reason, example)

    @property
    def total(self) -> int:
        return sum(self.counts.values())


@dataclass
class Screened:
    """The outcome of screening one run's candidates."""

    new: list[NewPage]
    known: list[NewPage]  # already in the catalog (sitemap signals may update them)
    rejected: Tally
    found: int  # candidates offered
    duplicates: int  # repeats within the run
    seen_links: int  # links the Bloom filter had seen before


def screen_candidates(
    candidates: Iterable[Candidate],
    *,
    known: ExactSeenSet,
    seen_links: BloomFilter | None = None,
    host_value: Mapping[str, float] | None = None,
    caps: HostCaps | None = None,
    traps: TrapLimits | None = None,
    max_pages: int | None = None,
    robots_denial: Callable[[str], str | None] | None = None,
) -> Screened:
    """Decide for each candidate (see the module docstring); updates ``seen_links``."""
    caps = caps or HostCaps()
    traps = traps or TrapLimits()
    host_value = host_value or {}
    rejected = Tally()
    found = 0
    pages: list[NewPage] = []
    for cand in candidates:
        found += 1
        if cand.source not in SOURCES:
            raise ValueError(f"unknown discovery source {cand.source!r}; one of {SOURCES}")
        try:
            url = normalize(cand.url)
        except InvalidURLError as exc:
            rejected.add("bad_url", f"{shown_url(cand.url)!r}: {exc}")  # no password
            continue
        pages.append(NewPage(url, url_id(url), url_host(url), cand))
    ids = np.fromiter((p.url_id for p in pages), dtype=np.int64, count=len(pages))
    first = np.zeros(ids.size, dtype=bool)
    if ids.size:
        first[np.unique(ids, return_index=True)[1]] = True
    is_link = np.fromiter((p.candidate.source == "link" for p in pages), bool, len(pages))
    seen_before = np.zeros(ids.size, dtype=bool)
    if seen_links is not None and is_link.any():
        seen_before[is_link] = seen_links.contains(ids[is_link])
    in_catalog = known.contains(ids)
    new: list[NewPage] = []
    known_pages: list[NewPage] = []
    settled: list[int] = []  # links decided for good: marked as seen
    per_host: Counter[str] = Counter()
    for i, page in enumerate(pages):
        if not first[i] or seen_before[i]:
            continue
        trap = url_trap_reason(
            page.url,
            max_length=traps.max_length,
            max_depth=traps.max_depth,
            max_repeats=traps.max_repeats,
        )
        if trap is not None:
            rejected.add("trap", f"{page.url}: {trap}")
            settled.append(i)
            continue
        if in_catalog[i]:
            known_pages.append(page)
            settled.append(i)
            continue
        denial = robots_denial(page.url) if robots_denial is not None else None
        if denial is not None:
            rejected.add("robots_denied", f"{page.url}: {denial}")
            settled.append(i)
            continue
        if per_host[page.host] >= caps.cap(host_value.get(page.host, 0.0)):
            rejected.add("host_cap", f"{page.url}: host {page.host} reached its cap")
            continue
        if max_pages is not None and len(new) >= max_pages:
            rejected.add("max_pages", f"{page.url}: {max_pages} pages added already")
            continue
        per_host[page.host] += 1
        new.append(page)
        settled.append(i)
    if seen_links is not None and settled:
        chosen = np.asarray(settled, dtype=np.int64)
        seen_links.add(ids[chosen[is_link[chosen]]])
    return Screened(
        new=new,
        known=known_pages,
        rejected=rejected,
        found=found,
        duplicates=int((~first).sum()),
        seen_links=int((seen_before & first).sum()),
    )


_DIGITS = re.compile(r"\d+")


def url_pattern(url: str) -> str:
    """The shape of a normalized URL: host and path with digit runs as ``N``, query names
    only (sorted). ``/calendar/2026/01?day=3`` and ``/calendar/2031/12?day=9`` share one."""
    rest = url.partition("://")[2]
    host_path, _, query = rest.partition("?")
    host, slash, path = host_path.partition("/")
    names = sorted({pair.split("=", 1)[0] for pair in query.split("&") if pair})
    shape = host + slash + _DIGITS.sub("N", path)
    return f"{shape}?{'&'.join(names)}" if names else shape


def pattern_multipliers(
    patterns: Iterable[str],
    near_duplicate: Iterable[bool],
    *,
    prior: float = 4.0,
    floor: float = 0.1,
    min_pages: int = 5,
) -> dict[str, float]:
    """Value multiplier per URL shape: ``max(floor, 1 - dup share)``, the share smoothed
    toward zero by ``prior`` pseudo-pages; shapes with fewer than ``min_pages`` reports are
    left alone (multiplier 1, not listed)."""
    total: Counter[str] = Counter()
    dups: Counter[str] = Counter()
    for pattern, dup in zip(patterns, near_duplicate, strict=True):
        total[pattern] += 1
        dups[pattern] += bool(dup)
    out: dict[str, float] = {}
    for pattern, n in total.items():
        if n < min_pages or not dups[pattern]:
            continue
        out[pattern] = max(floor, 1.0 - dups[pattern] / (n + prior))
    return out


def honoured_canonicals(
    declared: Mapping[str, str | None], demoted: Callable[[str], bool]
) -> dict[str, str | None]:
    """For each fetched page (normalized URL), the URL it is known by from now on, or None.

    ``declared`` maps a page to the canonical URL its latest fetch named (already limited
    to its site by ``models.discovery.urls.canonical``), or None. A canonical is honoured only if it
    names another page that is itself canonical: not declared elsewhere in this cycle,
    and not ``demoted(url)`` (the catalog already knows it by another URL). Chains are not
    followed and two pages naming each other both stay, rather than both disappearing.
    """
    out: dict[str, str | None] = {}
    for page, target in declared.items():
        if target is None or target == page:
            out[page] = None
            continue
        target_names = declared.get(target)
        elsewhere = target_names is not None and target_names != target
        out[page] = None if elsewhere or demoted(target) else target
    return out


def cluster_keepers(
    url_ids: np.ndarray,
    cluster: np.ndarray,
    value: np.ndarray,
    demoted: np.ndarray,
) -> np.ndarray:
    """The url id each near-duplicate cluster keeps at full value, for each of its pages.

    Arrays are aligned by page (``cluster``: small non-negative labels, ``models.content.simhash``);
    the kept page is the one not known by another URL (``demoted``: it has a canonical),
    then of highest value, then of smallest url id, so the choice is stable across cycles.
    """
    if url_ids.size == 0:
        return np.empty(0, dtype=np.int64)
    order = np.lexsort((url_ids, -value, demoted.astype(np.int8), cluster))
    first = np.ones(order.size, dtype=bool)
    first[1:] = cluster[order][1:] != cluster[order][:-1]
    keeper = np.zeros(int(cluster.max()) + 1, dtype=np.int64)
    keeper[cluster[order][first]] = url_ids[order][first]
    out: np.ndarray = keeper[cluster]
    return out
