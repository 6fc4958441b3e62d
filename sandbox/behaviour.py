"""How one sandbox host behaves: latency, validators, throttling, robots.txt, redirects, sizes.

The defaults describe a healthy, honest, fast host. Every field is one misbehaviour seen on
the real web, so a test can switch on exactly the one it is about:

- ``validators``: ``"honest"`` (ETag = hash of the real version, Last-Modified = time of the
  last real change, 304 when they match), ``"none"`` (no validators), ``"ignored"`` (honest
  validators, never a 304), ``"volatile"`` (a new ETag and Last-Modified = now on every
  response, so never a 304), ``"lying"`` (validators that never change, so the host answers
  304 after real changes: a 304 that hides a change).
- throttling: a token bucket of ``throttle_rate`` requests/s (burst ``throttle_burst``) and/or
  a cap of ``throttle_concurrency`` requests being served at once; beyond either the host
  answers ``throttle_status`` (429 or 503) with ``Retry-After: <retry_after_s>`` if set, and
  (``enforce_retry_after``) keeps refusing until that time has passed. With
  ``challenge_when_throttled`` it answers 200 with a bot-challenge page instead.
- ``robots``: ``"ok"`` (``robots_text``, or by default a file disallowing ``/private/`` with
  an optional ``Crawl-delay`` and the sitemap), ``"404"``, ``"500"``, ``"timeout"`` (answers
  after ``robots_timeout_s``), ``"redirect"`` (``robots_redirects`` hops before the file).
- ``redirect_share`` of pages answer 301/302 to another page (chains when the target also
  redirects); ``/loop/<i>`` always redirects in a circle.
- ``slow_share`` of pages take ``slow_extra_s`` more; ``huge_share`` of pages are padded to
  ``huge_bytes``.
- ``sitemap_lastmod``: ``"honest"`` (time of the last real change), ``"missing"``, ``"now"``
  (every entry claims to have changed now), ``"stale"`` (the page's creation time).
- ``set_cookie`` sends a fresh ``Set-Cookie: session=...`` with every page. Off by default:
  httpx's cookie jar scans every stored cookie on each request, which over 1,000 hosts cost
  ~5 ms of client CPU per page and would swamp any throughput comparison.
- ``rate_scale`` multiplies the true change rates of the host's pages.
- ``feed_entries``: ``/feed.xml`` is an Atom feed of the host's most recently changed pages
  (``<updated>`` = the page's last real change), linked from the home page's head; 0: no feed.
- ``rendering``: ``"server"`` (the fields are in the HTML), ``"inline_json"`` (the HTML is an
  empty shell whose script builds the article from a JSON state object inlined in the page)
  or ``"fetch_json"`` (the script fetches ``/api/item/<j>.json`` and builds the article from
  it). Both script modes build the same markup the server would have sent, so an extractor
  sees the same record in the rendered page as on a ``"server"`` host, and nothing without
  JavaScript.
- ``listing_size``: a shop-like host. Category pages ``/c/<k>`` list ``listing_size`` items each
  (items ``k * listing_size`` to ``(k + 1) * listing_size - 1``) with a per-item summary (name,
  price, availability, link to the item page) taken from the item's record, so a summary
  changes exactly when the item's record does (a real change always moves the price); a
  listing changes when any of its items does, and its validators say so. 0: no listings.
- ``json_link``: item pages declare their JSON endpoint in the head
  (``<link rel="alternate" type="application/json" href="/api/item/<j>.json">``), whose fields
  are the page's record (the endpoint is served either way).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

Validators = Literal["honest", "none", "ignored", "volatile", "lying"]
RobotsMode = Literal["ok", "404", "500", "timeout", "redirect"]
SitemapLastmod = Literal["honest", "missing", "now", "stale"]
Rendering = Literal["server", "inline_json", "fetch_json"]

_VALIDATORS = ("honest", "none", "ignored", "volatile", "lying")
_ROBOTS = ("ok", "404", "500", "timeout", "redirect")
_SITEMAP_LASTMOD = ("honest", "missing", "now", "stale")
_RENDERING = ("server", "inline_json", "fetch_json")


@dataclass(frozen=True)
class HostBehaviour:
    """Everything configurable about one host (frozen; defaults = healthy, honest, fast)."""

    latency_s: float = 0.0
    latency_jitter_s: float = 0.0  # extra uniform [0, jitter) seconds per response
    validators: Validators = "honest"
    gzip: bool = True  # gzip the body when the client accepts it
    set_cookie: bool = False  # a new session cookie on every page (costly for cookie jars)
    throttle_rate: float | None = None  # requests/s over the token bucket
    throttle_burst: float = 1.0  # bucket size in requests
    throttle_concurrency: int | None = None  # more concurrent requests than this are refused
    throttle_status: int = 429  # 429 or 503
    retry_after_s: float | None = None  # Retry-After header value (seconds), None = no header
    enforce_retry_after: bool = True  # keep refusing until Retry-After has passed
    challenge_when_throttled: bool = False  # answer 200 with a bot challenge instead
    throttle_robots: bool = False  # whether robots.txt requests are throttled too
    robots: RobotsMode = "ok"
    robots_text: str | None = None  # None: disallow /private/, the sitemap, crawl_delay_s
    crawl_delay_s: float | None = None
    robots_timeout_s: float = 30.0
    robots_redirects: int = 1
    redirect_share: float = 0.0  # share of pages answering 301/302 to another page
    slow_share: float = 0.0
    slow_extra_s: float = 1.0
    huge_share: float = 0.0
    huge_bytes: int = 2_000_000
    sitemap_max_urls: int = 1_000  # URLs per child sitemap (the protocol allows 50,000)
    sitemap_lastmod: SitemapLastmod = "honest"
    rate_scale: float = 1.0
    cross_host_links: bool = True  # pages occasionally link to other hosts
    rendering: Rendering = "server"  # where a page's fields are built: server or script
    feed_entries: int = 20  # /feed.xml lists this many most recently changed pages (0: none)
    listing_size: int = 0  # items per category page /c/<k> (0: the host has no listings)
    json_link: bool = False  # item pages declare /api/item/<j>.json in their head

    def __post_init__(self) -> None:
        _check_choice("validators", self.validators, _VALIDATORS)
        _check_choice("robots", self.robots, _ROBOTS)
        _check_choice("sitemap_lastmod", self.sitemap_lastmod, _SITEMAP_LASTMOD)
        _check_choice("rendering", self.rendering, _RENDERING)
        if self.throttle_status not in (429, 503):
            raise ValueError(f"throttle_status must be 429 or 503, got {self.throttle_status}")
        for name in ("latency_s", "latency_jitter_s", "slow_extra_s", "robots_timeout_s"):
            _check_non_negative(name, getattr(self, name))
        for name in ("redirect_share", "slow_share", "huge_share"):
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be within [0, 1], got {value}")
        if self.throttle_rate is not None and not self.throttle_rate > 0:
            raise ValueError(f"throttle_rate must be > 0 requests/s, got {self.throttle_rate}")
        if not self.throttle_burst >= 1:
            raise ValueError(f"throttle_burst must be >= 1 request, got {self.throttle_burst}")
        if self.throttle_concurrency is not None and self.throttle_concurrency < 1:
            raise ValueError(f"throttle_concurrency must be >= 1, got {self.throttle_concurrency}")
        if self.retry_after_s is not None:
            _check_non_negative("retry_after_s", self.retry_after_s)
        if self.crawl_delay_s is not None:
            _check_non_negative("crawl_delay_s", self.crawl_delay_s)
        if self.robots_redirects < 1:
            raise ValueError(f"robots_redirects must be >= 1, got {self.robots_redirects}")
        if self.huge_bytes < 1:
            raise ValueError(f"huge_bytes must be >= 1, got {self.huge_bytes}")
        if self.sitemap_max_urls < 1 or self.sitemap_max_urls > 50_000:
            raise ValueError(
                f"sitemap_max_urls must be within [1, 50000], got {self.sitemap_max_urls}"
            )
        if self.listing_size < 0:
            raise ValueError(f"listing_size must be >= 0, got {self.listing_size}")
        if self.feed_entries < 0:
            raise ValueError(f"feed_entries must be >= 0, got {self.feed_entries}")
        if not self.rate_scale > 0:
            raise ValueError(f"rate_scale must be > 0, got {self.rate_scale}")

    @property
    def throttles(self) -> bool:
        return self.throttle_rate is not None or self.throttle_concurrency is not None

    @property
    def needs_javascript(self) -> bool:
        """Ground truth: the host's pages carry their fields only once a script has run."""
        return self.rendering != "server"


def _check_choice(name: str, value: str, allowed: tuple[str, ...]) -> None:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}; got {value!r}")


def _check_non_negative(name: str, value: float) -> None:
    if not value >= 0:
        raise ValueError(f"{name} must be >= 0 seconds, got {value}")
