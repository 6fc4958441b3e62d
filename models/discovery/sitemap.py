"""Sitemaps (sitemaps.org protocol 0.9) parsed safely and within the protocol's limits.

Pure: bytes in, entries or a rejection out; ``tasks.discovery.sitemaps`` does the fetching. A
sitemap
lists at most 50,000 URLs and is at most 50 MB (52,428,800 bytes) uncompressed; a sitemap
index lists sitemaps. Hostile or broken files are rejected as a whole with a reason code
(``SitemapRejectedError.reason``) and a sentence naming what was wrong:

- ``xml_entities``: a DOCTYPE or entity declaration. Sitemaps never need one, and entity
  expansion ("billion laughs", external entities) is the classic XML attack, so the parser
  refuses any DTD before an entity can be declared, let alone expanded.
- ``invalid_xml``: not well-formed XML (expat's message and position are given).
- ``not_a_sitemap``: the root element is neither ``urlset`` nor ``sitemapindex``.
- ``too_many_urls``: more than 50,000 entries (checked while parsing: it stops at 50,001).
- ``too_large``: more than 50 MB of XML.
- ``gzip_bomb``: a gzip file that expands beyond 50 MB (decompression is streamed and
  stopped there, whatever the file claims); ``bad_gzip``: a corrupt gzip stream.

Parsing is expat driven directly (entities off, no tree built: only the four fields of
each entry are kept), fed incrementally, so memory stays bounded by the entries themselves.

Which URLs a sitemap may list (``SitemapScope``): those on its own host and scheme, under
its directory; plus any URL of a host whose robots.txt names the sitemap (sitemaps.org,
"Sitemaps & Cross Submits": the robots.txt proves the host owner wants it). Entries outside
the scope are dropped one by one (``cross_host``, ``outside_path``) and the rest is kept.
"""

from __future__ import annotations

import re
import zlib
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta, timezone
from typing import Any
from xml.parsers import expat

MAX_URLS = 50_000
MAX_BYTES = 50 * 1024 * 1024  # 52,428,800 bytes uncompressed (sitemaps.org)
SITEMAP_NS = "http://www.sitemaps.org/schemas/sitemap/0.9"
GZIP_MAGIC = b"\x1f\x8b"
_INFLATE_STEP = 1 << 20  # bytes inflated per zlib call (BoundedGunzip)

#: Changes per day a ``<changefreq>`` suggests: a prior for a new page's rate, nothing more
#: (search engines treat it as a hint; the estimator replaces it once the page has history).
CHANGEFREQ_RATES: dict[str, float] = {
    "always": 48.0,
    "hourly": 24.0,
    "daily": 1.0,
    "weekly": 1.0 / 7,
    "monthly": 1.0 / 30,
    "yearly": 1.0 / 365,
    "never": 0.0005,  # the estimator's floor
}

_FIELDS = ("loc", "lastmod", "changefreq", "priority")
_W3C_DATETIME = re.compile(
    r"(\d{4})(?:-(\d{2})(?:-(\d{2})(?:T(\d{2}):(\d{2})(?::(\d{2})(?:\.(\d+))?)?"
    r"(Z|[+-]\d{2}:\d{2})?)?)?)?"
)


class SitemapRejectedError(ValueError):
    """A whole sitemap was refused; ``reason`` is a short code, the message says why."""

    def __init__(self, reason: str, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason = reason
        self.detail = detail


@dataclass(frozen=True, slots=True)
class SitemapEntry:
    """One ``<url>`` (or ``<sitemap>`` of an index) as written in the file."""

    loc: str
    lastmod: datetime | None = None
    changefreq: str | None = None
    priority: float | None = None


@dataclass(frozen=True)
class ParsedSitemap:
    kind: str  # "urlset" or "sitemapindex"
    entries: tuple[SitemapEntry, ...]
    bad_fields: int  # lastmod/changefreq/priority values that were not understood (ignored)

    @property
    def is_index(self) -> bool:
        return self.kind == "sitemapindex"


def parse_lastmod(text: str) -> datetime | None:
    """A W3C datetime (``YYYY``, ``YYYY-MM``, ``YYYY-MM-DD``, ``...Thh:mm[:ss[.s]]TZD``) in UTC.

    A time without a zone designator is read as UTC; anything else returns None, including
    a time whose UTC equivalent falls outside years 1-9999 (``0001-01-01T00:00+01:00``).
    """
    text = text.strip()
    if len(text) >= 10 and text[4] == "-" and text[7] == "-":  # the common full forms
        try:
            value = datetime.fromisoformat(text)
        except ValueError:
            return None
        if value.tzinfo is None:
            return value.replace(tzinfo=UTC)
        return _in_utc(value)
    match = _W3C_DATETIME.fullmatch(text)
    if match is None:
        return None
    year, month, day, hour, minute, second, fraction, zone = match.groups()
    try:
        tz = UTC
        if zone and zone != "Z":
            sign = 1 if zone[0] == "+" else -1
            tz = timezone(sign * timedelta(hours=int(zone[1:3]), minutes=int(zone[4:6])))
        micros = int((fraction or "0")[:6].ljust(6, "0"))
        value = datetime(
            int(year),
            int(month or 1),
            int(day or 1),
            int(hour or 0),
            int(minute or 0),
            int(second or 0),
            micros,
            tzinfo=tz,
        )
    except ValueError:
        return None
    return _in_utc(value)


def _in_utc(value: datetime) -> datetime | None:
    try:
        return value.astimezone(UTC)
    except OverflowError:  # the shift to UTC leaves datetime's range
        return None


class SitemapParser:
    """Incremental parser of one sitemap or sitemap index: ``feed`` bytes, then ``close``."""

    def __init__(self, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES) -> None:
        self.max_urls = max_urls
        self.max_bytes = max_bytes
        self.kind: str | None = None
        self.entries: list[SitemapEntry] = []
        self.bad_fields = 0
        self._bytes = 0
        self._depth = 0
        self._entry_depth = 0  # depth of the open <url>/<sitemap>, 0 when none is open
        self._field: str | None = None
        self._text: list[str] = []
        self._values: dict[str, str] = {}
        parser = expat.ParserCreate(namespace_separator=" ")
        parser.buffer_text = True
        parser.StartDoctypeDeclHandler = self._forbid_dtd
        parser.EntityDeclHandler = self._forbid_entity
        parser.StartElementHandler = self._start
        parser.EndElementHandler = self._end
        parser.CharacterDataHandler = self._chars
        self._parser = parser
        self._names: dict[str, str] = {}
        for local in (*_FIELDS, "url", "sitemap", "urlset", "sitemapindex"):
            self._names[f"{SITEMAP_NS} {local}"] = local
            self._names[local] = local  # files that forget the namespace are common

    def feed(self, data: bytes) -> None:
        self._bytes += len(data)
        if self._bytes > self.max_bytes:
            raise SitemapRejectedError(
                "too_large", f"sitemap is larger than {self.max_bytes:,} bytes uncompressed"
            )
        self._parse(data, final=False)

    def close(self) -> ParsedSitemap:
        self._parse(b"", final=True)
        if self.kind is None:
            raise SitemapRejectedError("invalid_xml", "empty document")
        return ParsedSitemap(self.kind, tuple(self.entries), self.bad_fields)

    def _parse(self, data: bytes, *, final: bool) -> None:
        try:
            self._parser.Parse(data, final)
        except expat.ExpatError as exc:
            raise SitemapRejectedError("invalid_xml", f"not well-formed XML ({exc})") from None

    # -- expat handlers ---------------------------------------------------------------

    def _forbid_dtd(self, name: str, *_: Any) -> None:
        raise SitemapRejectedError(
            "xml_entities",
            f"DOCTYPE declaration ({name!r}) refused: sitemaps need no DTD and entity "
            "expansion is an attack",
        )

    def _forbid_entity(self, name: str, *_: Any) -> None:
        raise SitemapRejectedError("xml_entities", f"entity declaration {name!r} refused")

    def _start(self, name: str, _attrs: Any) -> None:
        self._depth += 1
        local = self._names.get(name)
        if self._depth == 1:
            if local not in ("urlset", "sitemapindex"):
                raise SitemapRejectedError(
                    "not_a_sitemap", f"root element is <{name}>, not <urlset> or <sitemapindex>"
                )
            self.kind = local
            return
        if self._depth == 2 and local == ("url" if self.kind == "urlset" else "sitemap"):
            self._entry_depth = 2
            self._values = {}
        elif self._entry_depth and self._depth == 3 and local in _FIELDS:
            self._field = local
            self._text = []

    def _end(self, name: str) -> None:
        depth = self._depth
        self._depth -= 1
        if self._field is not None and depth == 3:
            self._values[self._field] = "".join(self._text).strip()
            self._field = None
        elif depth == 2 and self._entry_depth:
            self._entry_depth = 0
            self._add_entry(self._values)

    def _chars(self, text: str) -> None:
        if self._field is not None:
            self._text.append(text)

    def _add_entry(self, values: dict[str, str]) -> None:
        loc = values.get("loc")
        if not loc:
            self.bad_fields += 1
            return
        if len(self.entries) >= self.max_urls:
            raise SitemapRejectedError(
                "too_many_urls", f"sitemap lists more than {self.max_urls:,} entries"
            )
        lastmod = changefreq = priority = None
        if "lastmod" in values:
            lastmod = parse_lastmod(values["lastmod"])
            self.bad_fields += lastmod is None
        if "changefreq" in values:
            changefreq = values["changefreq"].lower()
            if changefreq not in CHANGEFREQ_RATES:
                changefreq = None
                self.bad_fields += 1
        if "priority" in values:
            priority = _priority(values["priority"])
            self.bad_fields += priority is None
        self.entries.append(SitemapEntry(loc, lastmod, changefreq, priority))


def _priority(text: str) -> float | None:
    try:
        value = float(text)
    except ValueError:
        return None
    return value if 0.0 <= value <= 1.0 else None


class BoundedGunzip:
    """Streaming gzip decompression that stops past ``limit`` output bytes (multi-member)."""

    def __init__(self, limit: int = MAX_BYTES) -> None:
        self.limit = limit
        self.produced = 0
        self.consumed = 0
        self._inflater = zlib.decompressobj(31)
        self._in_member = False

    def feed(self, data: bytes) -> bytes:
        """Decompress one chunk; raises ``SitemapRejectedError`` (gzip_bomb, bad_gzip)."""
        if not data:
            return b""
        self.consumed += len(data)
        out: list[bytes] = []
        pending = data
        try:
            while True:
                # At most _INFLATE_STEP per call: one call asked for 50 MB builds its result
                # in blocks and then copies them, holding twice the limit for a moment.
                room = min(self.limit - self.produced + 1, _INFLATE_STEP)
                chunk = self._inflater.decompress(pending, room)
                self._in_member = True
                self._count(chunk)
                out.append(chunk)
                if self._inflater.eof:  # first: at a member's end the tail is stale
                    pending = self._inflater.unused_data  # another member may follow
                    self._inflater = zlib.decompressobj(31)
                    self._in_member = False
                    if pending:
                        continue
                    break
                if self._inflater.unconsumed_tail:
                    pending = self._inflater.unconsumed_tail
                    continue
                if len(chunk) < room:
                    break  # every input byte used, no output left inside zlib
                pending = b""  # the output was full: zlib may still hold some
        except zlib.error as exc:
            raise SitemapRejectedError("bad_gzip", f"corrupt gzip data ({exc})") from None
        return b"".join(out)

    def close(self) -> None:
        if self._in_member:
            raise SitemapRejectedError("bad_gzip", "gzip data ends in the middle of a member")

    def _count(self, chunk: bytes) -> None:
        self.produced += len(chunk)
        if self.produced > self.limit:
            raise SitemapRejectedError(
                "gzip_bomb",
                f"gzip data expands beyond {self.limit:,} bytes "
                f"(after {self.consumed:,} compressed bytes)",
            )


def parse_sitemap(
    data: bytes, *, max_urls: int = MAX_URLS, max_bytes: int = MAX_BYTES, chunk: int = 4 << 20
) -> ParsedSitemap:
    """Parse a whole sitemap body, gunzipping it (bounded) if it is gzip data.

    Feed large pieces: expat (< 2.6) rescans a token that spans two feeds, so a giant
    comment or text node fed in small pieces costs quadratic time.
    """
    parser = SitemapParser(max_urls=max_urls, max_bytes=max_bytes)
    if data[:2] == GZIP_MAGIC:
        gunzip = BoundedGunzip(max_bytes)
        for start in range(0, len(data), chunk):
            parser.feed(gunzip.feed(data[start : start + chunk]))
        gunzip.close()
    else:
        for start in range(0, len(data), chunk):
            parser.feed(data[start : start + chunk])
    return parser.close()


@dataclass(frozen=True)
class SitemapScope:
    """Where a sitemap's URLs may point: ``(scheme, netloc, path prefix)`` triples."""

    allowed: tuple[tuple[str, str, str], ...]

    @classmethod
    def of(
        cls,
        sitemap_url: str,
        authorized_hosts: tuple[str, ...] = (),
        inherited: SitemapScope | None = None,
    ) -> SitemapScope:
        """The scope of a sitemap at ``sitemap_url`` (normalized): its directory, the hosts
        (``scheme://netloc`` of robots.txt files) that named it, and the scope of the index
        that listed it (an index at a site's root vouches for its children, as search
        engines read it, wherever the children are stored on that host)."""
        scheme, netloc, path = _split(sitemap_url)
        allowed = [(scheme, netloc, path[: path.rfind("/") + 1] or "/")]
        for origin in authorized_hosts:
            o_scheme, o_netloc, _ = _split(origin)
            allowed.append((o_scheme, o_netloc, "/"))
        if inherited is not None:
            allowed.extend(inherited.allowed)
        return cls(tuple(dict.fromkeys(allowed)))

    def reason_outside(self, url: str) -> str | None:
        """None if a (normalized) URL may be listed, else ``cross_host`` or ``outside_path``."""
        scheme, netloc, path = _split(url)
        on_host = False
        for a_scheme, a_netloc, prefix in self.allowed:
            if a_netloc == netloc and a_scheme == scheme:
                on_host = True
                if path.startswith(prefix):
                    return None
        return "outside_path" if on_host else "cross_host"


def _split(url: str) -> tuple[str, str, str]:
    scheme, _, rest = url.partition("://")
    netloc, slash, path = rest.partition("/")
    netloc = netloc.rpartition("@")[2].lower()
    return scheme.lower(), netloc, slash + path.split("?", 1)[0].split("#", 1)[0]
