"""Reading sitemaps over HTTP: robots.txt ``Sitemap:`` lines, indexes, gzip, all bounded.

The parsing and the limits are ``models.discovery.sitemap`` (pure); this module fetches. One
``httpx.AsyncClient`` with a descriptive User-Agent; hosts are read concurrently, one request
at a time per host with a pause between requests (at least the host's ``Crawl-delay``).
robots.txt is fetched and interpreted by ``tasks.fetch.robots`` (RFC 9309), its ``Sitemap:``
lines come from protego, and a sitemap the rules disallow is not fetched.

Bodies are streamed: never more than 50 MB are read off the wire, and gzip (a ``.xml.gz``
file, or ``Content-Encoding: gzip``) is inflated chunk by chunk into the parser, stopped at
50 MB of XML. Each sitemap that fails is recorded with its reason (``http_error``,
``robots_denied``, ``too_deep``, ``cross_host_sitemap``, ``too_many_sitemaps``,
``refused_address``, or one of the parser's) and the others are read as usual; entries
outside a sitemap's scope are dropped one by one (``cross_host``, ``outside_path``,
``bad_url``). Every request passes the address policy (``tasks.fetch.net_guard``; loopback and
private networks only if ``allowed_networks`` lists them).

The run is bounded in total, not only per file: each host's reading (its robots.txt, its
sitemaps, an index's children) ends at ``host_deadline_s`` after it starts, and everything
ends at ``run_deadline_s`` after the reader is made. Children of an index are read
``host_connections`` at a time, the requests to one host still started ``min_delay_s`` (or the
host's Crawl-delay) apart; different hosts are read in parallel. What a deadline left unread
(in flight or still queued) is recorded, never raised: reason ``host_deadline`` or
``run_deadline`` in ``rejected`` and every such URL in ``SitemapReport.unread``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import time
from collections import defaultdict, deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

import httpx

from models.discovery.admission import Candidate, Tally
from models.discovery.sitemap import (
    GZIP_MAGIC,
    MAX_BYTES,
    MAX_URLS,
    BoundedGunzip,
    ParsedSitemap,
    SitemapParser,
    SitemapRejectedError,
    SitemapScope,
)
from models.discovery.urls import InvalidURLError, normalize, resolve
from models.fetching.net_policy import AddressPolicy, parse_networks
from models.fetching.robots_policy import RobotsCachePolicy, RobotsVerdict
from tasks.fetch.attempt import Route
from tasks.fetch.net_guard import (
    AddressGuard,
    GuardedTransport,
    guarded_httpx_transport,
    networks_from_env,
    refusal_in,
)
from tasks.fetch.robots import RobotsRules, fetch_robots, interpret_robots
from tasks.fetch.settings import DEFAULT_USER_AGENT

log = logging.getLogger(__name__)

#: Bytes of XML handed to the parser at once. expat rescans a token that spans two feeds
#: (expat < 2.6), so one 50 MB comment fed in 64 KB pieces costs minutes of CPU; in 4 MB
#: pieces, well under a second.
_PARSE_CHUNK = 4 << 20
#: A sitemap waiting to be read: URL, index depth, scope granted by robots.txt and parents.
_Queued = tuple[str, int, SitemapScope | None]


@dataclass(frozen=True)
class SitemapSettings:
    user_agent: str = DEFAULT_USER_AGENT
    robots_token: str = "recrawler"
    respect_robots: bool = True
    max_depth: int = 2  # index -> sitemap; one more level of index tolerated
    max_sitemaps: int = 2_000  # files read per run
    max_urls: int = MAX_URLS
    max_bytes: int = MAX_BYTES
    timeout_s: float = 60.0  # per file, whole body
    # hosts read at once: each mostly waits out its own min_delay_s between requests (at 16, a
    # 1,000-host catalog's signals took 40 s of a daily cycle's wall); bodies are streamed
    host_concurrency: int = 64
    min_delay_s: float = 0.5  # between the starts of two requests to one host
    crawl_delay_cap_s: float = 30.0
    host_connections: int = 4  # requests in flight to one host at once (starts still paced)
    host_deadline_s: float = 120.0  # one host's robots.txt and sitemaps, from its first request
    run_deadline_s: float = 600.0  # the whole reading, from the reader's creation
    # Address policy (models.fetching.net_policy): CIDR networks reachable although loopback,
    # private
    # or reserved; default: RECRAWL_ALLOWED_NETWORKS, else none (the sandbox passes its own).
    allowed_networks: tuple[str, ...] = field(default_factory=networks_from_env)

    def __post_init__(self) -> None:
        if self.max_depth < 0 or self.max_sitemaps < 1 or self.host_concurrency < 1:
            raise ValueError("max_depth >= 0, max_sitemaps >= 1, host_concurrency >= 1 required")
        if self.host_connections < 1:
            raise ValueError(f"host_connections must be >= 1, got {self.host_connections}")
        for name in ("host_deadline_s", "run_deadline_s"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value > 0):
                raise ValueError(f"{name} must be a finite number of seconds > 0, got {value}")
        parse_networks(self.allowed_networks)  # ValueError naming a bad network


@dataclass(frozen=True)
class SitemapSource:
    """A sitemap to read and the origins (``scheme://netloc``) whose robots.txt named it."""

    url: str
    authorized: tuple[str, ...] = ()


@dataclass
class SitemapReport:
    candidates: list[Candidate] = field(default_factory=list)
    sitemaps_read: int = 0
    rejected: Tally = field(default_factory=Tally)
    robots: dict[str, RobotsRules] = field(default_factory=dict)  # by origin
    unread: dict[str, str] = field(default_factory=dict)  # URL -> which deadline left it


#: The two reasons a deadline leaves a sitemap (or robots.txt, or seed page) unread.
DEADLINE_REASONS = ("host_deadline", "run_deadline")


def origin_of(url: str) -> str:
    scheme, _, rest = url.partition("://")
    return f"{scheme}://{rest.split('/', 1)[0]}"


#: Connections the sitemap client keeps at most (hosts are read this many at a time).
POOL_CONNECTIONS = 16


def make_sitemap_client(settings: SitemapSettings) -> httpx.AsyncClient:
    """httpx with its own transport under the address policy (every redirect hop judged,
    every name resolved once and connected to at the judged address)."""
    policy = AddressPolicy.from_strings(settings.allowed_networks)
    # A small pool: httpcore scans every pooled connection (and every queued request) on
    # each request, so one pool of ~200 hosts' connections cost 2/3 of a 200-host refresh's
    # CPU (measured); hosts beyond the pool wait for a connection instead.
    limits = httpx.Limits(max_connections=POOL_CONNECTIONS, max_keepalive_connections=8)
    transport = guarded_httpx_transport(policy, limits=limits)
    return httpx.AsyncClient(
        headers={"User-Agent": settings.user_agent, "Accept-Encoding": "gzip"},
        timeout=httpx.Timeout(settings.timeout_s, connect=10.0),
        follow_redirects=True,
        max_redirects=5,
        trust_env=False,
        transport=GuardedTransport(transport, AddressGuard(policy)),
    )


class SitemapReader:
    """Reads sitemaps (and robots.txt files) for one discovery run; see the module."""

    def __init__(self, client: httpx.AsyncClient, settings: SitemapSettings | None = None):
        self.client = client
        self.settings = settings or SitemapSettings()
        self.report = SitemapReport()
        self._robots_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._pace_locks: dict[str, asyncio.Lock] = defaultdict(asyncio.Lock)
        self._last_request: dict[str, float] = {}
        self._seen: set[str] = set()
        self._scheduled = 0
        self._run_ends_mono = time.monotonic() + self.settings.run_deadline_s

    # ------------------------------------------------------------------ deadlines

    def run_ends(self) -> float:
        """The run deadline on the running loop's clock (``loop.time()``)."""
        loop = asyncio.get_running_loop()
        return loop.time() + (self._run_ends_mono - time.monotonic())

    def left_unread(self, url: str, reason: str, what: str = "sitemap") -> None:
        """Record a URL a deadline left unread (``reason`` one of DEADLINE_REASONS)."""
        settings = self.settings
        seconds = settings.host_deadline_s if reason == "host_deadline" else settings.run_deadline_s
        detail = f"{reason.replace('_', ' ')} of {seconds:g} s hit"
        self.report.rejected.add(reason, f"{what} {url}: not read, {detail}")
        self.report.unread[url] = detail

    async def robots_by_deadline(self, origin: str) -> RobotsRules | None:
        """``robots`` bounded by the run deadline: None (recorded) if it hit first."""
        try:
            async with asyncio.timeout_at(self.run_ends()):
                return await self.robots(origin)
        except TimeoutError:
            self.left_unread(origin + "/robots.txt", "run_deadline", "robots.txt")
            return None

    # ------------------------------------------------------------------ robots.txt

    async def robots(self, origin: str) -> RobotsRules:
        """The robots.txt rules of an origin, fetched once per run."""
        async with self._robots_locks[origin]:
            rules = self.report.robots.get(origin)
            if rules is None:
                await self.pace(origin, None)
                fetched = await fetch_robots(
                    self.client,
                    Route(),
                    origin + "/",
                    max_bytes=500 * 1024,
                    max_redirects=5,
                    timeout_s=self.settings.timeout_s,
                )
                rules = interpret_robots(
                    fetched,
                    now=datetime.now(UTC),
                    policy=RobotsCachePolicy(),
                    token=self.settings.robots_token,
                    max_bytes=500 * 1024,
                    crawl_delay_cap_s=self.settings.crawl_delay_cap_s,
                )
                self.report.robots[origin] = rules
            return rules

    async def sources_from_robots(self, origins: Iterable[str]) -> list[SitemapSource]:
        """The sitemaps named by the ``Sitemap:`` lines of these origins' robots.txt."""
        found: dict[str, list[str]] = {}
        unique = list(dict.fromkeys(origin_of(normalize(o)) for o in origins))
        rules = await asyncio.gather(*(self.robots_by_deadline(o) for o in unique))
        for origin, rule in zip(unique, rules, strict=True):
            if rule is None or rule.verdict is not RobotsVerdict.PARSE or rule.parser is None:
                continue
            for line in rule.parser.sitemaps:
                try:
                    url = normalize(resolve(origin + "/robots.txt", line.strip()))
                except InvalidURLError as exc:
                    self.report.rejected.add("bad_url", f"robots.txt of {origin}: {exc}")
                    continue
                found.setdefault(url, []).append(origin)
        return [SitemapSource(url, tuple(origins)) for url, origins in found.items()]

    # ------------------------------------------------------------------ sitemaps

    async def read(self, sources: Iterable[SitemapSource]) -> SitemapReport:
        """Read every source (and the sitemaps their indexes list); returns the report."""
        by_host: dict[str, list[_Queued]] = defaultdict(list)
        for source in sources:
            try:
                url = normalize(source.url)
            except InvalidURLError as exc:
                self.report.rejected.add("bad_url", f"sitemap {source.url!r}: {exc}")
                continue
            if self._claim(url):
                granted = SitemapScope.of(url, source.authorized) if source.authorized else None
                by_host[origin_of(url)].append((url, 0, granted))
        gate = asyncio.Semaphore(self.settings.host_concurrency)

        async def host_worker(origin: str, queue: list[_Queued]) -> None:
            async with gate:
                await self._read_host(origin, queue)

        await asyncio.gather(*(host_worker(o, q) for o, q in by_host.items()))
        return self.report

    async def _read_host(self, origin: str, queue: list[_Queued]) -> None:
        """Read one host's sitemaps and their children, ``host_connections`` at a time,
        until done or until the host's (or the run's) deadline; the rest is recorded."""
        settings = self.settings
        loop = asyncio.get_running_loop()
        host_ends, run_ends = loop.time() + settings.host_deadline_s, self.run_ends()
        ends = min(host_ends, run_ends)
        reason = "host_deadline" if host_ends <= run_ends else "run_deadline"
        pending: deque[_Queued] = deque(queue)
        running: dict[asyncio.Task[list[_Queued]], str] = {}
        while pending or running:
            while pending and len(running) < settings.host_connections and loop.time() < ends:
                url, depth, granted = pending.popleft()
                running[asyncio.create_task(self._read_one(origin, url, depth, granted))] = url
            if not running:
                break  # the deadline passed before anything more could start
            done, _ = await asyncio.wait(
                running, timeout=max(0.0, ends - loop.time()), return_when="FIRST_COMPLETED"
            )
            if not done:
                break
            for task in done:
                del running[task]
                pending.extend(task.result())
        for task in running:
            task.cancel()
        await asyncio.gather(*running, return_exceptions=True)
        for url in [*running.values(), *(url for url, _, _ in pending)]:
            self.left_unread(url, reason)
        if running or pending:
            log.info("%s: %s, %d sitemaps left unread", origin, reason, len(running) + len(pending))

    @property
    def sitemap_urls(self) -> frozenset[str]:
        """Every sitemap URL this reader scheduled (normalized): not pages to catalog."""
        return frozenset(self._seen)

    def _claim(self, url: str) -> bool:
        """True the first time a sitemap URL is scheduled (loops in indexes end here)."""
        if url in self._seen:
            return False
        self._seen.add(url)
        return True

    async def _read_one(
        self, origin: str, url: str, depth: int, granted: SitemapScope | None
    ) -> list[_Queued]:
        """Read one sitemap; returns the child sitemaps to read next (same host)."""
        settings = self.settings
        if self._scheduled >= settings.max_sitemaps:
            self.report.rejected.add("too_many_sitemaps", f"{url}: {settings.max_sitemaps} read")
            return []
        self._scheduled += 1
        rules = await self.robots(origin) if settings.respect_robots else None
        if rules is not None and rules.failure == "refused_address":
            self.report.rejected.add("refused_address", f"sitemap {url}: {rules.detail}")
            return []
        if rules is not None:
            denial = rules.denial(url, settings.robots_token)
            if denial is not None:
                self.report.rejected.add("robots_denied", f"sitemap {url}: {denial}")
                return []
        await self.pace(origin, rules)
        try:
            parsed = await self._fetch(url)
        except SitemapRejectedError as exc:
            self.report.rejected.add(exc.reason, f"sitemap {url}: {exc.detail}")
            log.debug("sitemap %s rejected: %s", url, exc)
            return []
        self.report.sitemaps_read += 1
        own_robots = () if rules is None or not _lists(rules, url) else (origin,)
        scope = SitemapScope.of(url, own_robots, granted)
        if parsed.is_index:
            return self._children(url, depth, scope, parsed)
        for entry in parsed.entries:
            try:
                loc = normalize(entry.loc)
            except InvalidURLError as exc:
                self.report.rejected.add("bad_url", f"in sitemap {url}: {exc}")
                continue
            outside = scope.reason_outside(loc)
            if outside is not None:
                self.report.rejected.add(outside, f"{loc} listed by sitemap {url}")
                continue
            self.report.candidates.append(
                Candidate(loc, "sitemap", entry.lastmod, entry.changefreq, entry.priority)
            )
        return []

    def _children(
        self, url: str, depth: int, scope: SitemapScope, parsed: ParsedSitemap
    ) -> list[_Queued]:
        children: list[_Queued] = []
        for entry in parsed.entries:
            try:
                child = normalize(resolve(url, entry.loc))
            except InvalidURLError as exc:
                self.report.rejected.add("bad_url", f"in sitemap index {url}: {exc}")
                continue
            if origin_of(child) != origin_of(url):
                self.report.rejected.add(
                    "cross_host_sitemap", f"index {url} lists {child} on another host"
                )
                continue
            if depth + 1 > self.settings.max_depth:
                self.report.rejected.add(
                    "too_deep", f"{child}: index nesting beyond {self.settings.max_depth}"
                )
                continue
            if self._claim(child):
                children.append((child, depth + 1, scope))
        return children

    async def _fetch(self, url: str) -> ParsedSitemap:
        """GET one sitemap and parse it while it streams in (raises SitemapRejectedError)."""
        settings = self.settings
        try:
            async with asyncio.timeout(settings.timeout_s):
                return await self._stream(url)
        except TimeoutError:
            raise SitemapRejectedError(
                "http_error", f"no complete answer within {settings.timeout_s:g} s"
            ) from None
        except httpx.HTTPError as exc:
            refused = refusal_in(exc)
            if refused is not None:
                raise SitemapRejectedError("refused_address", refused.reason) from None
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            raise SitemapRejectedError("http_error", detail) from None
        except SitemapRejectedError:
            raise
        except Exception as exc:  # any other failure of this request is this sitemap's outcome
            detail = f"{type(exc).__name__}: {exc}".rstrip(": ")
            raise SitemapRejectedError("http_error", detail) from None

    async def _stream(self, url: str) -> ParsedSitemap:
        settings = self.settings
        async with self.client.stream("GET", url) as response:
            if response.status_code != 200:
                raise SitemapRejectedError("http_error", f"HTTP {response.status_code}")
            if origin_of(normalize(str(response.url))) != origin_of(url):
                raise SitemapRejectedError(
                    "cross_host_sitemap", f"redirected to another host: {response.url}"
                )
            declared = response.headers.get("content-length", "")
            if declared.isdigit() and int(declared) > settings.max_bytes:
                raise SitemapRejectedError(
                    "too_large", f"Content-Length {int(declared):,} exceeds {settings.max_bytes:,}"
                )
            coding = response.headers.get("content-encoding", "identity").strip().lower()
            if coding not in ("identity", "gzip", "x-gzip"):
                raise SitemapRejectedError("http_error", f"unsupported Content-Encoding {coding!r}")
            transfer = BoundedGunzip(settings.max_bytes) if coding != "identity" else None
            parser = SitemapParser(max_urls=settings.max_urls, max_bytes=settings.max_bytes)
            file_gunzip: BoundedGunzip | None = None
            head: bytes | None = b""  # first bytes, to tell a gzip file from XML
            wire = 0
            pending: list[bytes] = []  # parsed in large pieces (see _PARSE_CHUNK)
            pending_bytes = 0
            async for chunk in response.aiter_raw():
                wire += len(chunk)
                if wire > settings.max_bytes:
                    raise SitemapRejectedError(
                        "too_large", f"more than {settings.max_bytes:,} bytes on the wire"
                    )
                data = transfer.feed(chunk) if transfer is not None else chunk
                if head is not None:
                    head += data
                    if len(head) < 2:
                        continue
                    if head[:2] == GZIP_MAGIC:
                        file_gunzip = BoundedGunzip(settings.max_bytes)
                    data, head = head, None
                pending.append(file_gunzip.feed(data) if file_gunzip is not None else data)
                pending_bytes += len(pending[-1])
                if pending_bytes >= _PARSE_CHUNK:
                    parser.feed(b"".join(pending))
                    pending, pending_bytes = [], 0
            parser.feed(b"".join(pending) + (head or b""))
            if transfer is not None:
                transfer.close()
            if file_gunzip is not None:
                file_gunzip.close()
            return parser.close()

    async def pace(self, origin: str, rules: RobotsRules | None) -> None:
        """Wait until this host may get another request (min delay, Crawl-delay).

        One waiter at a time per host, so requests in flight together still start at
        least the delay apart."""
        loop = asyncio.get_running_loop()
        delay = max(self.settings.min_delay_s, rules.crawl_delay_s if rules else 0.0)
        async with self._pace_locks[origin]:
            last = self._last_request.get(origin)
            if last is not None:
                wait = last + delay - loop.time()
                if wait > 0:
                    await asyncio.sleep(wait)
            self._last_request[origin] = loop.time()


def _lists(rules: RobotsRules, sitemap_url: str) -> bool:
    """Whether the host's robots.txt names this sitemap (then it may list the whole host)."""
    if rules.parser is None:
        return False
    origin = origin_of(sitemap_url)
    for line in rules.parser.sitemaps:
        try:
            if normalize(resolve(origin + "/robots.txt", line.strip())) == sitemap_url:
                return True
        except InvalidURLError:
            continue
    return False
