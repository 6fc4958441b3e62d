"""Cheap change signals re-read before a cycle: the catalog hosts' sitemaps and their feeds.

``refresh_signals(root, now)`` runs before the cycle's plan. Sitemaps and feeds are pages with
a rate too (a host's sitemap changes whenever any of its pages does), so each host's are read
on a schedule of their own (``SignalSchedule``, ``due_hosts``): every cycle while the host's
trust is still being learned or has proved the signal informative, and only every ``recheck``
once reading it is known to tell nothing (no lastmod and no feed; a sitemap that always says
"now", or never changes; a signal enough revisits left unproven): reading it daily would cost
requests every day for a ratio of 1. When each host was last read is kept in
``<root>/signals/signal_reads.parquet``.

* Sitemaps: the due hosts' robots.txt ``Sitemap:`` lines and sitemaps are read by the
  discovery reader (``tasks.discovery.run.discover``, no new pages: ``max_pages=0``; new URLs
  are the discovery flow's job) and a known page's newer ``lastmod`` lands in the catalog.
* Feeds: every feed discovery found on a due host is read (``tasks.discovery.feeds``).

After the cycle's commit, ``record_signal_evidence`` (``tasks.discovery.lastmod_trust``)
labels what the planner saw with what the fetches found.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from pathlib import Path

import pyarrow as pa

from models.discovery.lastmod import signal_z
from models.discovery.urls import url_host
from tasks.discovery.feeds import FeedReading, known_feeds, read_feeds
from tasks.discovery.lastmod_trust import (
    EVIDENCE_FILES,
    READS_FILE,
    host_evidence,
    read_feed_entries,
    read_signal_reads,
)
from tasks.discovery.run import DiscoverySettings, discover
from tasks.discovery.sitemaps import SitemapSettings
from tasks.fetch.run_sync import run_coroutine
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet
from tasks.store.history import connect


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
    """The hosts whose sitemap and feeds are due (see ``SignalSchedule``).

    A host waits ``recheck`` instead of ``every`` once reading it is known to tell nothing:
    read before and no page of it has a lastmod and its feed (if any) gave no entry; or its
    signal constant over revisits that found both changed and unchanged pages (always "now",
    or stale: a ratio of exactly 1, whatever more revisits say); or ``settled_examples``
    revisits left it unproven (a z below ``min_z``), for every source it has.
    """
    last = _last_reads(root)
    quiet_sources: dict[str, set[str]] = {}
    for source in EVIDENCE_FILES:
        names, e = host_evidence(root, source)
        changed = e.signaled_changed + e.quiet_changed
        unchanged = e.signaled_unchanged + e.quiet_unchanged
        signaled = e.signaled_changed + e.signaled_unchanged
        quiet = e.quiet_changed + e.quiet_unchanged
        constant = (changed > 0) & (unchanged > 0) & ((signaled == 0) | (quiet == 0))
        total = changed + unchanged
        unproven = (total >= schedule.settled_examples) & (signal_z(e) < schedule.min_z)
        settled = (constant & (total >= 10)) | unproven
        quiet_sources[source] = {h for h, q in zip(names, settled.tolist(), strict=True) if q}
    with_lastmod, with_feed = _hosts_with_signals(root)
    due = []
    for host in hosts:
        seen = last.get(host)
        silent = seen is not None and host not in with_lastmod and host not in with_feed
        told_nothing = (host not in with_lastmod or host in quiet_sources["lastmod"]) and (
            host not in with_feed or host in quiet_sources["feed"]
        )
        wait = schedule.recheck if silent or told_nothing else schedule.every
        if seen is None or now - seen >= wait:
            due.append(host)
    return due


def _hosts_with_signals(root: str | Path) -> tuple[set[str], set[str]]:
    """Hosts with a page whose catalog row has a lastmod; hosts whose feed gave entries at
    its last reading (a declared feed that answers nothing, or nothing dated, tells nothing)."""
    feeds = {url_host(f) for f in set(read_feed_entries(root)["feed"].to_pylist())}
    catalog = CatalogStore(root)
    if not catalog.path.exists():
        return set(), feeds
    con = connect()
    rows = catalog.relation(con).filter("lastmod IS NOT NULL").aggregate("host", "host")
    return {h for (h,) in rows.fetchall()}, feeds


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
    return run_coroutine(refresh_signals(root, now, **kwargs))  # type: ignore[arg-type]


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
    table = read_signal_reads(root)
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
