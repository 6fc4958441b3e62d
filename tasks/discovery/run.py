"""Discovery: new URLs from seeds, sitemaps and fetched pages into the page catalog.

One run gathers candidates (seeds; the sitemaps named by the seeds' robots.txt and any given
explicitly; the links of the seed pages), screens them with ``models.discovery.admission``
(normalized,
trap defenses, exact de-duplication against the catalog, the Bloom filter of links seen
before, robots.txt, per-host caps by importance) and lands the new ones in the catalog with
their source, discovery time and the sitemap's ``lastmod``/``changefreq``; the feeds the seed
pages declare are remembered for the cycle's feed readings (``tasks.discovery.feeds``). Pages
already in the catalog keep their row; a sitemap's newer ``lastmod``/``changefreq`` updates
it (a change signal for the planner). The planner's discovery slice picks the new pages up.

``add_links`` is the same landing for links of pages already fetched (no network); the
recrawl cycle reads its pages' links in each host batch and lands them with ``land`` after
the commit (``tasks.cycle.content``). New links of a URL shape whose fetched pages keep
being near-duplicates of pages already held get a lower catalog value
(``models.discovery.admission.pattern_multipliers`` over the history's simhashes,
``models.content.simhash.SimhashIndex``), so the planner visits them later.

State: ``<root>/pages/catalog.parquet`` and ``<root>/pages/seen_links.bloom`` (the Bloom
filter, replaced atomically after each run).
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from pathlib import Path

import httpx
import numpy as np
import pandas as pd
import pyarrow as pa

from models.content.simhash import SimhashIndex
from models.discovery.admission import (
    Candidate,
    HostCaps,
    NewPage,
    Screened,
    Tally,
    TrapLimits,
    pattern_multipliers,
    screen_candidates,
    url_pattern,
)
from models.discovery.feeds import feed_links
from models.discovery.links import links_from_html
from models.discovery.seen import BloomFilter, ExactSeenSet
from models.discovery.urls import InvalidURLError, normalize
from models.fetching.robots_policy import RobotsVerdict
from models.outcomes import WITH_BODY, sql_list
from tasks.discovery.feeds import remember_feeds
from tasks.discovery.sitemaps import (
    DEADLINE_REASONS,
    SitemapReader,
    SitemapSettings,
    SitemapSource,
    make_sitemap_client,
    origin_of,
)
from tasks.fetch.robots import RobotsRules
from tasks.fetch.run_sync import run_coroutine
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_bytes
from tasks.store.history import HistoryStore, connect

log = logging.getLogger(__name__)

BLOOM_FILE = "seen_links.bloom"
SEED_PAGE_BYTES = 5 * 1024 * 1024  # of a seed page read for its links


@dataclass(frozen=True)
class DiscoverySettings:
    sitemaps: SitemapSettings = field(default_factory=SitemapSettings)
    caps: HostCaps = field(default_factory=HostCaps)
    traps: TrapLimits = field(default_factory=TrapLimits)
    bloom_expected: int = 10_000_000  # links; 9.6 bits each at 1%: about 12 MB
    bloom_false_positive_rate: float = 0.01
    follow_seed_links: bool = True  # fetch each seed page once and take its links
    value: float = 1.0  # catalog value of a new page (before the near-duplicate multiplier)
    cost: float = 1.0


@dataclass(frozen=True)
class DiscoveryReport:
    found: int  # candidate URLs offered (with repeats)
    added: int
    known: int  # already in the catalog
    signals_updated: int  # known pages whose sitemap lastmod/changefreq changed
    seen_links: int  # links the Bloom filter had seen in an earlier run
    duplicates: int  # repeats within this run
    sitemaps_read: int
    rejected: dict[str, int]
    examples: dict[str, str]  # first rejected example per reason
    catalog_size: int
    unread: dict[str, str] = field(default_factory=dict)  # URL -> deadline that left it

    #: Unread URLs named one by one in the summary; the rest are counted.
    UNREAD_SHOWN = 20

    def summary_lines(self) -> list[str]:
        lines = [
            f"found {self.found:,} URLs ({self.duplicates:,} repeats) in "
            f"{self.sitemaps_read:,} sitemaps, seeds and links",
            f"added {self.added:,} new pages; {self.known:,} already in the catalog "
            f"({self.signals_updated:,} with new sitemap signals); "
            f"{self.seen_links:,} links seen before",
            f"rejected {sum(self.rejected.values()):,}",
        ]
        for reason, n in sorted(self.rejected.items(), key=lambda kv: -kv[1]):
            lines.append(f"  {reason:<20} {n:>8,}  e.g. {self.examples.get(reason, '')[:120]}")
        if self.unread:
            lines.append(f"deadline hit: {len(self.unread):,} not read")
            for url, detail in list(self.unread.items())[: self.UNREAD_SHOWN]:
                lines.append(f"  {url}  ({detail})")
            if len(self.unread) > self.UNREAD_SHOWN:
                lines.append(f"  ... and {len(self.unread) - self.UNREAD_SHOWN:,} more")
        lines.append(f"catalog now has {self.catalog_size:,} pages")
        return lines

    @property
    def deadline_hit(self) -> bool:
        return any(self.rejected.get(reason) for reason in DEADLINE_REASONS)


async def discover(
    root: str | Path,
    *,
    seeds: Iterable[str] = (),
    sitemaps: Iterable[str] = (),
    max_pages: int | None = None,
    settings: DiscoverySettings | None = None,
    now: datetime | None = None,
) -> DiscoveryReport:
    """Run discovery from seed URLs and/or sitemap URLs (see the module docstring)."""
    settings = settings or DiscoverySettings()
    tally = Tally()
    seed_urls = []
    for raw in seeds:
        try:
            seed_urls.append(normalize(raw))
        except InvalidURLError as exc:
            tally.add("bad_url", f"seed {raw!r}: {exc}")
    candidates = [Candidate(u, "seed") for u in seed_urls]
    async with make_sitemap_client(settings.sitemaps) as client:
        reader = SitemapReader(client, settings.sitemaps)
        sources = await reader.sources_from_robots(origin_of(u) for u in seed_urls)
        sources += [SitemapSource(u) for u in sitemaps]
        report = await reader.read(sources)
        candidates += report.candidates
        feeds: list[str] = []
        if settings.follow_seed_links:
            sitemap_urls = reader.sitemap_urls
            links = await _seed_links(reader, seed_urls, tally, feeds)
            candidates += [c for c in links if c.url not in sitemap_urls]
    tally.merge(report.rejected)
    landed = land(
        root,
        candidates,
        settings=settings,
        now=now,
        max_pages=max_pages,
        robots=report.robots,
        tally=tally,
        sitemaps_read=report.sitemaps_read,
    )
    if feeds:
        remember_feeds(root, feeds, now or datetime.now(UTC))
    return replace(landed, unread=dict(report.unread))


def discover_sync(root: str | Path, **kwargs: object) -> DiscoveryReport:
    """``discover`` for synchronous callers (the CLI)."""
    return run_coroutine(discover(root, **kwargs))  # type: ignore[arg-type]


def add_links(
    root: str | Path,
    pages: Iterable[tuple[str, bytes, str | None]],
    *,
    settings: DiscoverySettings | None = None,
    now: datetime | None = None,
    max_pages: int | None = None,
) -> DiscoveryReport:
    """Land the links of fetched pages, given as ``(final URL, body, content type)``."""
    settings = settings or DiscoverySettings()
    candidates = [
        Candidate(link, "link")
        for url, body, content_type in pages
        for link in links_from_html(url, body, content_type)
    ]
    return land(root, candidates, settings=settings, now=now, max_pages=max_pages)


def land(
    root: str | Path,
    candidates: list[Candidate],
    *,
    settings: DiscoverySettings,
    now: datetime | None = None,
    max_pages: int | None = None,
    robots: dict[str, RobotsRules] | None = None,
    tally: Tally | None = None,
    sitemaps_read: int = 0,
) -> DiscoveryReport:
    """Screen candidates against the catalog and the seen links, write the new ones."""
    now = now or datetime.now(UTC)
    catalog = CatalogStore(root)
    known_ids, host_value = _catalog_view(catalog)
    bloom = load_seen_links(root, settings)
    screened = screen_candidates(
        candidates,
        known=known_ids,
        seen_links=bloom,
        host_value=host_value,
        caps=settings.caps,
        traps=settings.traps,
        max_pages=max_pages,
        robots_denial=_robots_denial(robots or {}, settings.sitemaps.robots_token),
    )
    rejected = tally or Tally()
    rejected.merge(screened.rejected)
    size = len(known_ids)
    if screened.new:
        size = catalog.upsert(_new_rows(root, screened.new, settings, now))
    updated = catalog.update_sitemap_signals(_signals(screened))
    save_seen_links(root, bloom)
    log.info(
        "discovery: %d found, %d added, %d rejected",
        screened.found,
        len(screened.new),
        rejected.total,
    )
    return DiscoveryReport(
        found=screened.found,
        added=len(screened.new),
        known=len(screened.known),
        signals_updated=updated,
        seen_links=screened.seen_links,
        duplicates=screened.duplicates,
        sitemaps_read=sitemaps_read,
        rejected=dict(rejected.counts),
        examples=dict(rejected.examples),
        catalog_size=size,
    )


async def _seed_links(
    reader: SitemapReader, seeds: list[str], tally: Tally, feeds: list[str]
) -> list[Candidate]:
    """Fetch each seed page once (robots.txt permitting) and take its links (and the feeds it
    declares, into ``feeds``), until the run deadline (a seed it leaves is recorded by the
    reader, ``run_deadline``)."""
    found: list[Candidate] = []
    for url in seeds:
        rules = await reader.robots_by_deadline(origin_of(url))
        if rules is None:
            continue
        denial = rules.denial(url, reader.settings.robots_token)
        if denial is not None:
            tally.add("robots_denied", f"seed {url}: {denial}")
            continue
        try:
            async with asyncio.timeout_at(reader.run_ends()):
                await reader.pace(origin_of(url), rules)
                status, content_type, body = await _get_page(reader, url)
        except TimeoutError:
            reader.left_unread(url, "run_deadline", "seed page")
            continue
        except (httpx.HTTPError, OSError) as exc:  # only costs this seed's links
            tally.add("seed_unreachable", f"{url}: {type(exc).__name__}")
            continue
        if status != 200:
            tally.add("seed_unreachable", f"{url}: HTTP {status}")
            continue
        found += [Candidate(link, "link") for link in links_from_html(url, body, content_type)]
        feeds += feed_links(url, body)
    return found


async def _get_page(reader: SitemapReader, url: str) -> tuple[int, str | None, bytes]:
    """GET a page uncompressed, keeping at most SEED_PAGE_BYTES of its body."""
    headers = {"Accept-Encoding": "identity", "Accept": "text/html,*/*;q=0.5"}
    async with reader.client.stream("GET", url, headers=headers) as response:
        chunks: list[bytes] = []
        size = 0
        if response.status_code == 200:
            async for chunk in response.aiter_raw():
                chunks.append(chunk)
                size += len(chunk)
                if size >= SEED_PAGE_BYTES:
                    break
        body = b"".join(chunks)[:SEED_PAGE_BYTES]
        return response.status_code, response.headers.get("content-type"), body


def _robots_denial(robots: dict[str, RobotsRules], token: str) -> Callable[[str], str | None]:
    """Denial by the robots.txt rules this run already holds (other hosts: the fetcher's job)."""

    def denial(url: str) -> str | None:
        rules = robots.get(origin_of(url))
        if rules is None or rules.verdict is RobotsVerdict.DISALLOW_ALL:
            return None  # unknown or unreachable now: let the fetcher decide at fetch time
        return rules.denial(url, token)

    return denial


def _catalog_view(catalog: CatalogStore) -> tuple[ExactSeenSet, dict[str, float]]:
    """The catalog's url ids (exact) and value sum per host, by DuckDB."""
    con = connect()
    rel = catalog.relation(con)
    ids = rel.project("url_id").fetchnumpy()["url_id"]
    sums = rel.aggregate("host, sum(value) AS value", "host").fetchall()
    return ExactSeenSet.of(np.asarray(ids, dtype=np.int64)), {h: float(v) for h, v in sums}


def _new_rows(
    root: str | Path, pages: list[NewPage], settings: DiscoverySettings, now: datetime
) -> pd.DataFrame:
    multipliers = (
        near_duplicate_multipliers(root) if any(p.candidate.source == "link" for p in pages) else {}
    )
    values = [
        settings.value * multipliers.get(url_pattern(p.url), 1.0)
        if p.candidate.source == "link"
        else settings.value
        for p in pages
    ]
    return pd.DataFrame(
        {
            "url": [p.url for p in pages],
            "host": [p.host for p in pages],
            "value": values,
            "cost": settings.cost,
            "source": [p.candidate.source for p in pages],
            "discovered_at": pd.Timestamp(now),
            "lastmod": pd.array([p.candidate.lastmod for p in pages], dtype="datetime64[us, UTC]"),
            "changefreq": [p.candidate.changefreq for p in pages],
        }
    )


def _signals(screened: Screened) -> pa.Table:
    known = [p for p in screened.known if p.candidate.lastmod is not None or p.candidate.changefreq]
    return pa.table(
        {
            "url_id": pa.array([p.url_id for p in known], pa.int64()),
            "lastmod": pa.array([p.candidate.lastmod for p in known], pa.timestamp("us", tz="UTC")),
            "changefreq": pa.array([p.candidate.changefreq for p in known], pa.string()),
        }
    )


def near_duplicate_multipliers(root: str | Path) -> dict[str, float]:
    """Value multiplier per URL shape from the near-duplicates among fetched pages.

    Each catalog page's latest simhash (history) is looked up in a ``SimhashIndex`` of all
    of them: a page within 3 bits of another page is a near-duplicate report for its shape.
    """
    store = HistoryStore(root)
    catalog = CatalogStore(root)
    if not store.files() or not catalog.path.exists():
        return {}
    con = connect()
    con.register("history_rows", store.relation(con))
    con.register("catalog_rows", catalog.relation(con))
    rows = con.sql(
        """SELECT h.url_id, c.url, h.simhash FROM (
               SELECT url_id, arg_max(simhash, fetched_at) AS simhash FROM history_rows
               WHERE simhash IS NOT NULL AND outcome IN (SELECT unnest($with_body))
               GROUP BY url_id) h
           JOIN catalog_rows c USING (url_id)""",
        params={"with_body": sql_list(WITH_BODY)},
    ).fetchnumpy()
    if len(rows["url_id"]) < 2:
        return {}
    index = SimhashIndex.build(rows["url_id"], rows["simhash"])
    near = index.count_near(rows["simhash"]) > 1  # the page itself is one
    return pattern_multipliers((url_pattern(u) for u in rows["url"]), near.tolist())


def load_seen_links(root: str | Path, settings: DiscoverySettings) -> BloomFilter:
    path = Path(root) / "pages" / BLOOM_FILE
    if path.exists():
        try:
            return BloomFilter.from_bytes(path.read_bytes())
        except ValueError as exc:
            log.warning("seen-links filter %s unreadable (%s): starting a new one", path, exc)
    return BloomFilter(settings.bloom_expected, settings.bloom_false_positive_rate)


def save_seen_links(root: str | Path, bloom: BloomFilter) -> None:
    path = Path(root) / "pages" / BLOOM_FILE
    durable_write_bytes(path, bloom.to_bytes())
