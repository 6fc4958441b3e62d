"""Feeds on a store: the feeds hosts declare, and each reading's entries for the planner.

``remember_feeds(root, feeds, now)`` keeps the feeds discovery found (a page's
``<link rel="alternate">`` of a feed type, ``models.discovery.feeds.feed_links``) in
``<root>/signals/feeds.parquet`` (feed URL, host, when found). ``read_feeds(root, now)``
fetches the known feeds (or those of the hosts due) through the fetch engine (robots.txt,
pacing, the address policy; the bodies kept by its record-hasher hook), parses them
(``parse_feed``) and replaces
the feeds' entries in ``<root>/signals/feed_entries.parquet`` with this reading's: each listed
page's url id and update time. A feed that failed contributes nothing this time (a page it listed
before has no feed signal until the next good reading: an old entry would claim "no change"
of a page that has changed and left the feed since).

A feed is a page with a rate (it changes whenever any page it lists does): it is read once
before each cycle whose plan uses it, like the sitemaps (``tasks.discovery.signals``).
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from models.discovery.feeds import FeedRejectedError, parse_feed
from models.discovery.urls import InvalidURLError, normalize, url_host, url_id
from tasks.discovery.lastmod_trust import (
    FEED_ENTRIES_FILE,
    FEED_ENTRIES_SCHEMA,
    read_feed_entries,
)
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.rows import record_hash
from tasks.fetch.run_sync import run_coroutine
from tasks.fetch.settings import FetchSettings
from tasks.store.durable import durable_write_parquet

log = logging.getLogger(__name__)

FEEDS_FILE = Path("signals") / "feeds.parquet"
FEEDS_SCHEMA = pa.schema(
    [("feed", pa.string()), ("host", pa.string()), ("found_at", pa.timestamp("us", tz="UTC"))]
)


@dataclass(frozen=True)
class FeedReading:
    feeds: int  # known feeds
    read: int  # read and parsed
    failed: int
    entries: int  # entries with a link and an update time


def known_feeds(root: str | Path) -> pa.Table:
    """The feeds discovery found (an empty table when none)."""
    path = Path(root) / FEEDS_FILE
    if not path.exists():
        return FEEDS_SCHEMA.empty_table()
    try:
        return pq.read_table(path).cast(FEEDS_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable feed list at {path}: {exc}") from None


def remember_feeds(root: str | Path, feeds: Iterable[str], now: datetime) -> int:
    """Add feeds not known yet; the number of feeds known afterwards."""
    kept = known_feeds(root)
    have = set(kept["feed"].to_pylist())
    new = []
    for raw in feeds:
        try:
            feed = normalize(raw)
        except InvalidURLError:
            continue
        if feed not in have:
            have.add(feed)
            new.append(feed)
    if not new:
        return int(kept.num_rows)
    added = pa.table(
        {
            "feed": new,
            "host": [url_host(f) for f in new],
            "found_at": pa.array([now] * len(new), pa.timestamp("us", tz="UTC")),
        },
        schema=FEEDS_SCHEMA,
    )
    table = pa.concat_tables([kept, added])
    durable_write_parquet(table, Path(root) / FEEDS_FILE)
    return int(table.num_rows)


def feed_entry_table(bodies: dict[str, tuple[bytes, str]], now: datetime) -> tuple[pa.Table, int]:
    """Entries of fetched feeds (feed URL -> body, content type); and how many failed to parse."""
    ids: list[int] = []
    names: list[str] = []
    updated: list[datetime] = []
    failed = 0
    for feed, (body, content_type) in bodies.items():
        try:
            entries = parse_feed(body, content_type, feed)
        except FeedRejectedError as exc:
            log.warning("feed %s unreadable (%s): no feed signal from it", feed, exc.reason)
            failed += 1
            continue
        for entry in entries:
            if entry.updated is not None:
                ids.append(url_id(entry.link))
                names.append(feed)
                updated.append(entry.updated)
    stamp = pa.array([now] * len(ids), pa.timestamp("us", tz="UTC"))
    table = pa.table(
        {
            "url_id": pa.array(ids, pa.int64()),
            "feed": pa.array(names, pa.string()),
            "updated": pa.array(updated, pa.timestamp("us", tz="UTC")),
            "read_at": stamp,
        },
        schema=FEED_ENTRIES_SCHEMA,
    )
    return table, failed


async def read_feeds(
    root: str | Path,
    now: datetime,
    *,
    settings: FetchSettings | None = None,
    only: Iterable[str] | None = None,
) -> FeedReading:
    """Fetch every known feed (or the ``only`` ones) once; the stored entries become this
    reading's, those of feeds not read this time kept as they were."""
    known = known_feeds(root)["feed"].to_pylist()
    feeds = known if only is None else [f for f in known if f in set(only)]
    if not feeds:
        return FeedReading(len(known), 0, 0, 0)
    bodies: dict[str, tuple[bytes, str]] = {}

    def keep(body: bytes, content_type: str | None, url: str) -> str:
        bodies[url] = (bytes(body), content_type or "")
        return record_hash(body, content_type, url)

    # the engine's politeness, robots.txt and address policy; bodies kept by the hasher hook
    # (keyed by the final URL, which the entries' relative links resolve against)
    await fetch_batch(
        [FetchRequest(f) for f in feeds],
        settings=settings or FetchSettings(),
        clock=lambda: now,
        record_hasher=keep,
    )
    ok = bodies
    table, failed = feed_entry_table(ok, now)
    kept = read_feed_entries(root)
    mask = pa.array([f not in set(feeds) for f in kept["feed"].to_pylist()], pa.bool_())
    table = pa.concat_tables([kept.filter(mask), table])
    durable_write_parquet(table, Path(root) / FEED_ENTRIES_FILE)
    read = len(ok) - failed
    return FeedReading(len(feeds), read, len(feeds) - read, table.num_rows)


def read_feeds_sync(root: str | Path, now: datetime, **kwargs: object) -> FeedReading:
    return run_coroutine(read_feeds(root, now, **kwargs))  # type: ignore[arg-type]
