"""What a sandbox host answers to one request: routing and every host behaviour, no sockets.

The server hands in a parsed request, the host index and the real (monotonic) time; the
responder returns a :class:`~sandbox.http.Reply` with the delay the host imposes. Simulated
time (from the web's clock) decides page content and validators; real time drives the token
bucket, the Retry-After window and latency. Per-host mutable state (in-flight count, bucket,
request counter) lives in :class:`HostState`; the server keeps ``in_flight`` up to date.

Throttled answers (429/503 or the challenge page) are sent at once: a refusal is cheap for a
server, which is also why a crawler must not read a fast 429 as "the host is fast".
"""

from __future__ import annotations

import gzip
import hashlib
import math
import random
import zlib
from datetime import UTC, datetime
from email.utils import formatdate, parsedate_to_datetime

from sandbox.behaviour import HostBehaviour
from sandbox.content import (
    Link,
    Noise,
    article_html,
    huge_padding,
    listing_item_html,
    render_atom_feed,
    render_challenge,
    render_home,
    render_item_json,
    render_listing,
    render_page,
    render_robots,
    render_script_page,
    render_sitemap_index,
    render_urlset,
)
from sandbox.http import Reply, Request
from sandbox.web import LinkTarget, SandboxWeb, host_address, page_number

_HTML = ("Content-Type", "text/html; charset=utf-8")
_TEXT = ("Content-Type", "text/plain; charset=utf-8")
_JSON = ("Content-Type", "application/json")
_XML = ("Content-Type", "application/xml")
_ATOM = ("Content-Type", "application/atom+xml")
_GZIP_FILE = ("Content-Type", "application/gzip")
_SERVER = ("Server", "sandbox")


class HostState:
    """Mutable per-host state: requests being served, token bucket, Retry-After window."""

    __slots__ = ("blocked_until", "in_flight", "refilled_at", "served", "tokens")

    def __init__(self, burst: float) -> None:
        self.in_flight = 0
        self.tokens = burst
        self.refilled_at = -math.inf
        self.blocked_until = -math.inf
        self.served = 0


class Responder:
    """Answers requests for every host of ``web`` as served on ``port``."""

    def __init__(self, web: SandboxWeb, port: int) -> None:
        self.web = web
        self.port = port
        self.states = [HostState(b.throttle_burst) for b in web.behaviours]
        self._rng = random.Random(web.seed ^ 0x4E015E)
        self._links: dict[tuple[int, int], tuple[Link, ...]] = {}

    def warm(self) -> int:
        """Render every page's current version once (fills the caches); returns pages done.

        A page's first request draws its traits, its changes since the origin and its text
        (about 0.3 ms); a benchmark warms the server first so it measures the steady state.
        """
        now_ts = self.web.clock.timestamp()
        done = 0
        for i, n in enumerate(self.web.page_counts):
            for j in range(n):
                key = self.web.traits(i, j).key
                version = self.web.page_version(i, j, now_ts)
                self.web.page_last_change(i, j, now_ts)
                article_html(key, version, j, self._page_links(i, j))
                done += 1
        return done

    def base_url(self, i: int) -> str:
        return f"http://{host_address(i)}:{self.port}"

    def respond(self, i: int, request: Request, now: float) -> Reply:
        """The reply of host ``i`` to ``request`` arriving at monotonic time ``now``."""
        behaviour = self.web.behaviours[i]
        state = self.states[i]
        state.served += 1
        if request.method not in ("GET", "HEAD"):
            return Reply(405, [_SERVER, ("Allow", "GET, HEAD"), _TEXT], b"method not allowed\n")
        path = request.path
        is_robots = path == "/robots.txt" or path.startswith("/robots-hop/")
        if behaviour.throttles and (behaviour.throttle_robots or not is_robots):
            refusal = self._throttle(behaviour, state, now)
            if refusal is not None:
                return refusal
        if is_robots:
            return self._robots(i, behaviour, path)
        j = page_number(path)
        if j is not None and j < self.web.page_counts[i]:
            if path.startswith("/p/"):
                return self._page(i, j, behaviour, request)
            return self._item_json(i, j, behaviour, request)
        if path == "/sitemap.xml":
            return self._sitemap_index(i, behaviour)
        if path == "/feed.xml" and behaviour.feed_entries > 0:
            return self._feed(i, behaviour)
        if path.startswith("/sitemaps/") and path.endswith(".xml.gz"):
            return self._sitemap(i, behaviour, path[10:-7])
        if path == "/":
            first = list(range(min(20, self.web.page_counts[i])))
            home = render_home(self.base_url(i), first, self.web.listing_count(i))
            return self._ok(behaviour, _HTML, home)
        if path.startswith("/c/") and behaviour.listing_size > 0:
            k = _number(path[3:])
            if k is not None and k < self.web.listing_count(i):
                return self._listing(i, k, behaviour, request)
        if path.startswith("/private/"):
            return self._ok(behaviour, _HTML, b"<html><body>private area</body></html>\n")
        if path.startswith("/loop/") and path[6:].isdigit():
            nxt = (int(path[6:]) + 1) % 3
            return Reply(
                302, [_SERVER, ("Location", f"/loop/{nxt}")], delay=self._latency(behaviour)
            )
        return Reply(404, [_SERVER, _TEXT], b"not found\n", delay=self._latency(behaviour))

    # -- behaviours -------------------------------------------------------------------

    def _throttle(self, b: HostBehaviour, state: HostState, now: float) -> Reply | None:
        refuse = now < state.blocked_until
        if not refuse and b.throttle_concurrency is not None:
            refuse = state.in_flight > b.throttle_concurrency
        if not refuse and b.throttle_rate is not None:
            state.tokens = min(
                b.throttle_burst, state.tokens + (now - state.refilled_at) * b.throttle_rate
            )
            state.refilled_at = now
            if state.tokens >= 1.0:
                state.tokens -= 1.0
            else:
                refuse = True
        if not refuse:
            return None
        headers = [_SERVER, ("Date", self._date())]
        if b.retry_after_s is not None:
            headers.append(("Retry-After", str(math.ceil(b.retry_after_s))))
            if b.enforce_retry_after and now >= state.blocked_until:
                state.blocked_until = now + b.retry_after_s
        if b.challenge_when_throttled:
            return Reply(200, [*headers, _HTML], render_challenge(self._noise(state)))
        return Reply(b.throttle_status, [*headers, _TEXT], b"slow down\n")

    def _robots(self, i: int, b: HostBehaviour, path: str) -> Reply:
        delay = self._latency(b)
        if path != "/robots.txt" and (b.robots != "redirect" or not path[12:].isdigit()):
            return Reply(404, [_SERVER, _TEXT], b"not found\n", delay=delay)
        if b.robots == "404":
            return Reply(404, [_SERVER, _TEXT], b"not found\n", delay=delay)
        if b.robots == "500":
            return Reply(500, [_SERVER, _TEXT], b"internal error\n", delay=delay)
        if b.robots == "redirect":
            hop = 0 if path == "/robots.txt" else int(path[12:])
            if hop < b.robots_redirects:
                location = f"/robots-hop/{hop + 1}"
                return Reply(301, [_SERVER, ("Location", location)], delay=delay)
        if b.robots == "timeout":
            delay += b.robots_timeout_s
        if b.robots_text is not None:
            body = b.robots_text.encode()
        else:
            body = render_robots(self.base_url(i), b.crawl_delay_s)
        return Reply(200, [_SERVER, ("Date", self._date()), _TEXT], body, delay=delay)

    def _page(self, i: int, j: int, b: HostBehaviour, request: Request) -> Reply:
        traits = self.web.traits(i, j)
        delay = self._latency(b) + (b.slow_extra_s if traits.slow else 0.0)
        if traits.redirect_to is not None:
            target = f"/p/{traits.redirect_to}"
            if traits.redirect_status == 301:
                target = self.base_url(i) + target
            headers = [_SERVER, ("Location", target), _TEXT]
            return Reply(traits.redirect_status, headers, b"moved\n", delay=delay)
        return self._representation(i, j, b, request, "html", delay)

    def _item_json(self, i: int, j: int, b: HostBehaviour, request: Request) -> Reply:
        return self._representation(i, j, b, request, "json", self._latency(b))

    def _representation(
        self, i: int, j: int, b: HostBehaviour, request: Request, kind: str, delay: float
    ) -> Reply:
        state = self.states[i]
        now_ts = self.web.clock.timestamp()
        key = self.web.traits(i, j).key
        version = self.web.page_version(i, j, now_ts)
        headers = [_SERVER, ("Date", formatdate(now_ts, usegmt=True))]
        validators = self._validators(b, i, j, key, version, kind, now_ts)
        headers.extend(validators)
        if b.validators in ("honest", "lying") and _not_modified(request, validators):
            return Reply(304, headers, delay=delay)
        noise = self._noise(state, now_ts)
        if kind == "html" and b.needs_javascript:
            body = render_script_page(key, version, j, self._page_links(i, j), noise, b.rendering)
            headers.append(_HTML)
        elif kind == "html":
            padding = huge_padding(key, b.huge_bytes) if self.web.traits(i, j).huge else ""
            body = render_page(key, version, j, self._page_links(i, j), noise, padding, b.json_link)
            headers.append(_HTML)
        else:
            body = render_item_json(key, version, j, noise)
            headers.append(_JSON)
        if b.set_cookie:
            headers.append(("Set-Cookie", f"session={noise.session}; Path=/; HttpOnly"))
        headers.append(("Cache-Control", "private, max-age=0"))
        if b.gzip and "gzip" in request.headers.get("accept-encoding", ""):
            body = _gzip(body)
            headers.append(("Content-Encoding", "gzip"))
            headers.append(("Vary", "Accept-Encoding"))
        return Reply(200, headers, body, delay=delay)

    def _listing(self, i: int, k: int, b: HostBehaviour, request: Request) -> Reply:
        """Category page ``k``: its items' summaries; validators of their versions together."""
        now_ts = self.web.clock.timestamp()
        items = self.web.listing_items(i, k)
        finals = [self.web.final_page(i, j) for j in items]
        keys = [self.web.traits(i, f).key for f in finals]
        versions = [self.web.page_version(i, f, now_ts) for f in finals]
        headers = [_SERVER, ("Date", formatdate(now_ts, usegmt=True))]
        validators: list[tuple[str, str]] = []
        if b.validators in ("honest", "ignored"):
            state = hashlib.blake2b(repr((k, versions)).encode(), digest_size=8).hexdigest()
            last = max(self.web.page_last_change(i, f, now_ts) for f in finals)
            validators = [("ETag", f'"{state}"'), ("Last-Modified", formatdate(last, usegmt=True))]
        headers.extend(validators)
        if b.validators == "honest" and _not_modified(request, validators):
            return Reply(304, headers, delay=self._latency(b))
        summaries = [
            listing_item_html(key, version, j)
            for key, version, j in zip(keys, versions, items, strict=True)
        ]
        body = render_listing(k, summaries, self.web.listing_count(i), self._noise(self.states[i]))
        headers.append(_HTML)
        headers.append(("Cache-Control", "private, max-age=0"))
        if b.gzip and "gzip" in request.headers.get("accept-encoding", ""):
            body = _gzip(body)
            headers.append(("Content-Encoding", "gzip"))
            headers.append(("Vary", "Accept-Encoding"))
        return Reply(200, headers, body, delay=self._latency(b))

    def _validators(
        self, b: HostBehaviour, i: int, j: int, key: int, version: int, kind: str, now_ts: float
    ) -> list[tuple[str, str]]:
        mode = b.validators
        if mode == "none":
            return []
        if mode == "volatile":
            tag = f'"{self._rng.getrandbits(64):016x}"'
            return [("ETag", tag), ("Last-Modified", formatdate(now_ts, usegmt=True))]
        if mode == "lying":  # validators of the page's creation: they never change
            tag = _etag(key, -1, kind)
            last = self.web.traits(i, j).created
        else:
            tag = _etag(key, version, kind)
            last = self.web.page_last_change(i, j, now_ts)
        return [("ETag", tag), ("Last-Modified", formatdate(last, usegmt=True))]

    def _sitemap_index(self, i: int, b: HostBehaviour) -> Reply:
        n = self.web.page_counts[i]
        size = b.sitemap_max_urls
        now_ts = self.web.clock.timestamp()
        entries = []
        for k in range(math.ceil(n / size)):
            mods = [self._lastmod(i, j, b, now_ts) for j in range(k * size, min(n, (k + 1) * size))]
            known = [m for m in mods if m is not None]
            lastmod = _w3c(max(known)) if known else None
            entries.append((f"{self.base_url(i)}/sitemaps/{k}.xml.gz", lastmod))
        headers = [_SERVER, ("Date", formatdate(now_ts, usegmt=True)), _XML]
        return Reply(200, headers, render_sitemap_index(entries), delay=self._latency(b))

    def _sitemap(self, i: int, b: HostBehaviour, name: str) -> Reply:
        n = self.web.page_counts[i]
        size = b.sitemap_max_urls
        if not name.isdigit() or int(name) * size >= n:
            return Reply(404, [_SERVER, _TEXT], b"not found\n", delay=self._latency(b))
        k = int(name)
        now_ts = self.web.clock.timestamp()
        base = self.base_url(i)
        entries = []
        for j in range(k * size, min(n, (k + 1) * size)):
            mod = self._lastmod(i, j, b, now_ts)
            entries.append((f"{base}/p/{j}", None if mod is None else _w3c(mod)))
        body = gzip.compress(render_urlset(entries), compresslevel=6, mtime=0)
        headers = [_SERVER, ("Date", formatdate(now_ts, usegmt=True)), _GZIP_FILE]
        return Reply(200, headers, body, delay=self._latency(b))

    def _feed(self, i: int, b: HostBehaviour) -> Reply:
        """The ``feed_entries`` most recently changed pages, newest first, with their times."""
        now_ts = self.web.clock.timestamp()
        changed = [
            (self.web.page_last_change(i, j, now_ts), j) for j in range(self.web.page_counts[i])
        ]
        newest = sorted(changed, reverse=True)[: b.feed_entries]
        entries = [(j, _w3c(ts)) for ts, j in newest]
        body = render_atom_feed(self.base_url(i), entries, _w3c(now_ts))
        headers = [_SERVER, ("Date", formatdate(now_ts, usegmt=True)), _ATOM]
        return Reply(200, headers, body, delay=self._latency(b))

    def _lastmod(self, i: int, j: int, b: HostBehaviour, now_ts: float) -> float | None:
        mode = b.sitemap_lastmod
        if mode == "missing":
            return None
        if mode == "now":
            return now_ts
        final = self.web.final_page(i, j)
        if mode == "stale":
            return self.web.traits(i, final).created
        return self.web.page_last_change(i, final, now_ts)

    # -- helpers ----------------------------------------------------------------------

    def _ok(self, b: HostBehaviour, content_type: tuple[str, str], body: bytes) -> Reply:
        return Reply(200, [_SERVER, ("Date", self._date()), content_type], body, self._latency(b))

    def _latency(self, b: HostBehaviour) -> float:
        if b.latency_jitter_s > 0:
            return b.latency_s + self._rng.random() * b.latency_jitter_s
        return b.latency_s

    def _date(self) -> str:
        return formatdate(self.web.clock.timestamp(), usegmt=True)

    def _noise(self, state: HostState, now_ts: float | None = None) -> Noise:
        ts = self.web.clock.timestamp() if now_ts is None else now_ts
        rng = self._rng
        return Noise(
            served_at=datetime.fromtimestamp(ts, tz=UTC).isoformat(timespec="seconds"),
            session=f"{rng.getrandbits(64):016x}",
            csrf=f"{rng.getrandbits(96):024x}",
            ad_slot=state.served,
            viewers=rng.randint(1, 250),
        )

    def _page_links(self, i: int, j: int) -> tuple[Link, ...]:
        found = self._links.get((i, j))
        if found is None:
            found = tuple(self._link(t) for t in self.web.traits(i, j).links)
            self._links[(i, j)] = found
        return found

    def _link(self, target: LinkTarget) -> Link:
        if target.kind == "root":
            return Link(f"/p/{target.page}", f"Item {target.page}")
        if target.kind == "relative":
            return Link(f"./{target.page}", f"Item {target.page}")
        if target.kind == "private":
            return Link(f"/private/{target.page}", "Members area")
        return Link(f"{self.base_url(target.host)}/p/{target.page}", f"Item {target.page}")


def _number(text: str) -> int | None:
    if not text.isdigit() or (len(text) > 1 and text[0] == "0"):
        return None
    return int(text)


def _etag(key: int, version: int, kind: str) -> str:
    digest = hashlib.blake2b(f"{key}:{version}:{kind}".encode(), digest_size=8).hexdigest()
    return f'"{digest}"'


def _not_modified(request: Request, validators: list[tuple[str, str]]) -> bool:
    """RFC 9110 section 13.2.2: If-None-Match decides when present, else If-Modified-Since."""
    if not validators:
        return False
    current = dict(validators)
    inm = request.headers.get("if-none-match")
    if inm is not None:
        tags = {t.strip().removeprefix("W/") for t in inm.split(",")}
        return "*" in tags or current["ETag"] in tags
    ims = request.headers.get("if-modified-since")
    if ims is None:
        return False
    try:
        since = parsedate_to_datetime(ims)
        last = parsedate_to_datetime(current["Last-Modified"])
    except (TypeError, ValueError):
        return False
    if since.tzinfo is None:  # "-0000" or no zone: RFC 9110 dates are GMT
        since = since.replace(tzinfo=UTC)
    return last <= since


def _gzip(body: bytes) -> bytes:
    compressor = zlib.compressobj(1, zlib.DEFLATED, 31)
    return compressor.compress(body) + compressor.flush()


def _w3c(ts: float) -> str:
    return datetime.fromtimestamp(ts, tz=UTC).strftime("%Y-%m-%dT%H:%M:%S+00:00")
