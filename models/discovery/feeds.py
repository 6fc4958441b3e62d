"""Feeds (Atom, RSS 2.0, JSON Feed) as change signals: entries with updated times say which
items changed without fetching them.

``feed_links(base_url, html)`` finds a page's feeds (``<link rel="alternate">`` of a feed type,
resolved and normalized); ``parse_feed(body, content_type)`` reads a feed's entries as
``FeedEntry(link, updated)`` (the item's URL, normalized; its update time in UTC, or None);
``changed_since(entries, url, since)`` is the signal: the newest entry of ``url`` updated after
``since`` (a visit) says it changed. A feed is itself a page with a rate: the planner fetches
it like any other.

XML is read with expat with DTDs and entities refused (as sitemaps are) and a size limit;
JSON with the standard parser. Pure: no I/O.
"""

from __future__ import annotations

import contextlib
import json
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime
from typing import Any
from xml.parsers import expat

from selectolax.lexbor import LexborHTMLParser

from models.discovery.sitemap import parse_lastmod
from models.discovery.urls import InvalidURLError, normalize, resolve

FEED_TYPES = (
    "application/atom+xml",
    "application/rss+xml",
    "application/feed+json",
    "application/json",
)
MAX_FEED_BYTES = 10 << 20
_ATOM = "http://www.w3.org/2005/Atom"


class FeedRejectedError(ValueError):
    """A feed that cannot be read; ``reason`` names why (``too_large``, ``invalid``...)."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason


@dataclass(frozen=True, slots=True)
class FeedEntry:
    link: str
    updated: datetime | None


def feed_links(base_url: str, html: bytes | str) -> list[str]:
    """The feeds a page declares (``<link rel="alternate" type=<feed type> href>``), once each."""
    tree = LexborHTMLParser(html)
    found: list[str] = []
    for node in tree.css("link[rel][href]"):
        rel = (node.attributes.get("rel") or "").lower().split()
        kind = (node.attributes.get("type") or "").split(";")[0].strip().lower()
        if "alternate" not in rel or kind not in FEED_TYPES:
            continue
        with contextlib.suppress(InvalidURLError, ValueError):
            url = normalize(resolve(base_url, node.attributes.get("href") or ""))
            if url not in found:
                found.append(url)
    return found


def parse_feed(body: bytes, content_type: str = "", base_url: str | None = None) -> list[FeedEntry]:
    """The entries of an Atom, RSS 2.0 or JSON feed (links normalized, times in UTC)."""
    if len(body) > MAX_FEED_BYTES:
        raise FeedRejectedError("too_large", f"feed is larger than {MAX_FEED_BYTES:,} bytes")
    head = body.lstrip()[:1]
    if "json" in content_type.lower() or head in (b"{", b"["):
        return _json_feed(body, base_url)
    return _xml_feed(body, base_url)


def changed_since(entries: Iterable[FeedEntry], url: str, since: datetime) -> bool | None:
    """Whether the feed says ``url`` changed after ``since``: None when it does not list it
    (or lists it without a time): no signal, not "unchanged"."""
    times = [e.updated for e in entries if e.link == url and e.updated is not None]
    if not times:
        return None
    return max(times) > since


def _link(raw: str, base_url: str | None) -> str | None:
    try:
        return normalize(resolve(base_url, raw) if base_url else raw.strip())
    except (InvalidURLError, ValueError):
        return None


def _rfc822(text: str) -> datetime | None:
    try:
        value = parsedate_to_datetime(text.strip())
    except (TypeError, ValueError, IndexError):
        return parse_lastmod(text)
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value.astimezone(UTC)


def _json_feed(body: bytes, base_url: str | None) -> list[FeedEntry]:
    try:
        doc = json.loads(body)
    except (ValueError, UnicodeDecodeError) as exc:
        raise FeedRejectedError("invalid", f"not a JSON feed ({exc})") from None
    items = doc.get("items") if isinstance(doc, dict) else None
    if not isinstance(items, list):
        raise FeedRejectedError("not_a_feed", "a JSON feed needs an items list")
    entries = []
    for item in items:
        if not isinstance(item, dict) or not isinstance(item.get("url"), str):
            continue
        link = _link(item["url"], base_url)
        stamp = item.get("date_modified") or item.get("date_published")
        if link is not None:
            updated = parse_lastmod(stamp) if isinstance(stamp, str) else None
            entries.append(FeedEntry(link, updated))
    return entries


class _XmlFeed:
    """Atom ``entry`` (link href, updated or published) and RSS ``item`` (link, pubDate)."""

    def __init__(self, base_url: str | None) -> None:
        self.base_url = base_url
        self.entries: list[FeedEntry] = []
        self.kind: str | None = None
        self._item: dict[str, str] | None = None
        self._field: str | None = None
        self._text: list[str] = []

    def start(self, name: str, attrs: dict[str, str]) -> None:
        local = name.rsplit(" ", 1)[-1]
        if self.kind is None:
            self.kind = local
        if local in ("entry", "item"):
            self._item = {}
        elif self._item is not None:
            if local == "link" and "href" in attrs:
                if attrs.get("rel", "alternate") == "alternate" and "link" not in self._item:
                    self._item["link"] = attrs["href"]
            elif local in ("link", "updated", "published", "pubDate", "modified"):
                self._field, self._text = local, []

    def chars(self, data: str) -> None:
        if self._field is not None:
            self._text.append(data)

    def end(self, name: str) -> None:
        local = name.rsplit(" ", 1)[-1]
        if self._item is not None and self._field == local:
            self._item.setdefault(local, "".join(self._text).strip())
            self._field = None
        elif local in ("entry", "item") and self._item is not None:
            item, self._item = self._item, None
            link = _link(item.get("link", ""), self.base_url) if item.get("link") else None
            if link is None:
                return
            if "updated" in item or "modified" in item:
                updated = parse_lastmod(item.get("updated") or item["modified"])
            elif "pubDate" in item:
                updated = _rfc822(item["pubDate"])
            else:
                updated = parse_lastmod(item["published"]) if "published" in item else None
            self.entries.append(FeedEntry(link, updated))


def _xml_feed(body: bytes, base_url: str | None) -> list[FeedEntry]:
    reader = _XmlFeed(base_url)
    parser = expat.ParserCreate(namespace_separator=" ")
    parser.buffer_text = True

    def refuse(name: str, *_: Any) -> None:
        raise FeedRejectedError("xml_entities", f"DTD or entity {name!r} refused in a feed")

    parser.StartDoctypeDeclHandler = refuse
    parser.EntityDeclHandler = refuse
    parser.StartElementHandler = reader.start
    parser.EndElementHandler = reader.end
    parser.CharacterDataHandler = reader.chars
    try:
        parser.Parse(body, True)
    except expat.ExpatError as exc:
        raise FeedRejectedError("invalid", f"not well-formed XML ({exc})") from None
    if reader.kind not in ("feed", "rss", "RDF"):
        raise FeedRejectedError("not_a_feed", f"root element {reader.kind!r} is not a feed")
    return reader.entries
