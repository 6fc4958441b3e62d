"""Cheap change signals re-read before a cycle: the catalog hosts' sitemaps and their feeds.

``refresh_signals(root, now)`` runs before the cycle's plan. Sitemaps and feeds are pages with
a rate too (a host's sitemap changes whenever any of its pages does), so each host's are read
on a schedule of their own (``SignalSchedule``): every cycle while the host's trust is still
being learned or has proved the signal informative, and only every ``recheck`` once enough
revisits showed it tells nothing (a sitemap that always says "now", or never changes): reading
it daily would cost a request a day for a ratio of 1. When each host was last read is kept in
``<root>/signals/signal_reads.parquet``.

* Sitemaps: the due hosts' robots.txt ``Sitemap:`` lines and sitemaps are read by the
  discovery reader (``tasks.discovery.run.discover``, no new pages: ``max_pages=0``; new URLs
  are the discovery flow's job) and a known page's newer ``lastmod`` lands in the catalog.
* Feeds: every feed discovery found on a due host is read (``tasks.discovery.feeds``).

After the cycle's commit, ``record_signal_evidence`` (``tasks.discovery.lastmod_trust``)
labels what the planner saw with what the fetches found.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from models.discovery.lastmod import signal_z
from tasks.discovery.feeds import FeedReading, known_feeds, read_feeds
from tasks.discovery.lastmod_trust import EVIDENCE_FILES, host_evidence
from tasks.discovery.run import DiscoverySettings, discover
from tasks.discovery.sitemaps import SitemapSettings
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet
from tasks.store.history import connect

READS_FILE = Path("signals") / "signal_reads.parquet"
READS_SCHEMA = pa.schema([("host", pa.string()), ("read_at", pa.timestamp("us", tz="UTC"))])


@dataclass(frozen=True)
class SignalSchedule:
    """When a host's sitemap and feeds are due to be read again."""

    #: read at most this often (a cycle: every cycle)
    every: timedelta = timedelta(hours=20)
    #: once this many labelled revisits left the signal unproven (z below ``min_z``) ...
    settled_examples: int = 100
    min_z: float = 3.0
    #: ... read it only this often, to notice a site that starts telling the truth
    recheck: timedelta = timedelta(days=7)


@dataclass(frozen=True)
class SignalRefresh:
    hosts: int  # catalog hosts
    due: int  # hosts whose signals were read
    sitemap_pages_updated: int
    sitemaps_read: int
    feeds: FeedReading


def due_hosts(
    root: str | Path, hosts: list[str], now: datetime, schedule: SignalSchedule
) -> list[str]:
    """The hosts whose sitemap and feeds are due (see ``SignalSchedule``)."""
    last = _last_reads(root)
    settled: set[str] = set()
    for source in EVIDENCE_FILES:
        names, evidence = host_evidence(root, source)
        total = (
            evidence.signaled_changed
            + evidence.signaled_unchanged
            + evidence.quiet_changed
            + evidence.quiet_unchanged
        )
        quiet = (total >= schedule.settled_examples) & (signal_z(evidence) < schedule.min_z)
        settled |= {h for h, q in zip(names, quiet.tolist(), strict=True) if q}
    due = []
    for host in hosts:
        seen = last.get(host)
        wait = schedule.recheck if host in settled else schedule.every
        if seen is None or now - seen >= wait:
            due.append(host)
    return due


async def refresh_signals(
    root: str | Path,
    now: datetime,
    *,
    fetch: FetchSettings | None = None,
    schedule: SignalSchedule | None = None,
    deadline_s: float = 300.0,
) -> SignalRefresh:
    """Read the due hosts' sitemaps (lastmod into the catalog) and feeds (see the module)."""
    schedule = schedule or SignalSchedule()
    fetch = fetch or FetchSettings()
    origins = _catalog_origins(root)
    due = due_hosts(root, sorted(origins), now, schedule)
    updated = sitemaps_read = 0
    if due:
        sitemap_settings = replace(
            SitemapSettings(),
            allowed_networks=tuple(fetch.allowed_networks),
            user_agent=fetch.user_agent,
            run_deadline_s=deadline_s,
        )
        report = await discover(
            root,
            seeds=[origins[h] + "/" for h in due],
            settings=DiscoverySettings(sitemaps=sitemap_settings, follow_seed_links=False),
            max_pages=0,
            now=now,
        )
        updated, sitemaps_read = report.signals_updated, report.sitemaps_read
    feeds = known_feeds(root)
    wanted = set(due)
    mine = [
        f
        for f, h in zip(feeds["feed"].to_pylist(), feeds["host"].to_pylist(), strict=True)
        if h in wanted
    ]
    reading = await read_feeds(root, now, settings=fetch, only=mine)
    _note_reads(root, due, now)
    return SignalRefresh(len(origins), len(due), updated, sitemaps_read, reading)


def refresh_signals_sync(root: str | Path, now: datetime, **kwargs: object) -> SignalRefresh:
    return asyncio.run(refresh_signals(root, now, **kwargs))  # type: ignore[arg-type]


def _catalog_origins(root: str | Path) -> dict[str, str]:
    """Each catalog host's origin (scheme://host[:port]), from one of its URLs."""
    catalog = CatalogStore(root)
    if not catalog.path.exists():
        return {}
    con = connect()
    rows = catalog.relation(con).aggregate("host, any_value(url) AS url", "host").fetchall()
    out = {}
    for host, url in rows:
        scheme = url.split("://", 1)[0]
        out[host] = f"{scheme}://{host}"
    return out


def _last_reads(root: str | Path) -> dict[str, datetime]:
    path = Path(root) / READS_FILE
    if not path.exists():
        return {}
    try:
        table = pq.read_table(path).cast(READS_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable signal reads at {path}: {exc}") from None
    return dict(zip(table["host"].to_pylist(), table["read_at"].to_pylist(), strict=True))


def _note_reads(root: str | Path, hosts: list[str], now: datetime) -> None:
    if not hosts:
        return
    reads = {**_last_reads(root), **dict.fromkeys(hosts, now)}
    names = sorted(reads)
    table = pa.table(
        {
            "host": pa.array(names, pa.string()),
            "read_at": pa.array([reads[h] for h in names], pa.timestamp("us", tz="UTC")),
        }
    )
    durable_write_parquet(table, Path(root) / READS_FILE)
