"""robots.txt per RFC 9309: fetch (up to five redirects), interpret, cache per host, match.

The fetch is ordinary I/O through the same client and route as pages (so it is paced like
any other request to the host); what a status means and for how long to believe it is the
pure policy of ``models.fetching.robots_policy``; matching is protego's, against the bare product
token (``recrawler``), never the full User-Agent header.
"""

from __future__ import annotations

import asyncio
import logging
import time
from dataclasses import dataclass
from datetime import datetime, timedelta
from urllib.parse import urlsplit

import httpx
from protego import Protego

from models.discovery.urls import InvalidURLError, normalize, resolve, shown_url
from models.fetching.robots_policy import (
    RobotsCachePolicy,
    RobotsVerdict,
    capped_crawl_delay,
    robots_text,
    verdict_for_status,
)
from models.outcomes import HOST_UNREACHABLE
from tasks.fetch.attempt import REDIRECT_STATUS, BodyLimits, Route, exchange
from tasks.fetch.client import PageClient
from tasks.fetch.transport_errors import classify_failure, stray_cancellation

log = logging.getLogger(__name__)
#: Failures of a host's own robots.txt request that doom every page of it: the pages are
#: recorded with this outcome rather than denied (``models.outcomes.HOST_UNREACHABLE``).
HOST_FAILURES = HOST_UNREACHABLE


@dataclass(frozen=True)
class RobotsRules:
    """What one host's robots.txt allows, and until when (on the caller's clock) to trust it."""

    verdict: RobotsVerdict
    expires_at: datetime
    status: int | None
    detail: str
    parser: Protego | None = None
    crawl_delay_s: float = 0.0
    failure: str | None = None  # the fetch's failure outcome (``refused_address``...), if any

    def denial(self, url: str, token: str) -> str | None:
        """Why ``url`` may not be fetched, or None when it may."""
        if self.verdict is RobotsVerdict.ALLOW_ALL:
            return None
        if self.verdict is RobotsVerdict.DISALLOW_ALL:
            return f"robots.txt unreachable ({self.detail}): disallow all for now"
        assert self.parser is not None
        if self.parser.can_fetch(url, token):
            return None
        return "disallowed by robots.txt"


@dataclass(frozen=True, slots=True)
class RobotsFetch:
    """The raw result of fetching one robots.txt (before interpretation)."""

    status: int | None
    body: bytes
    detail: str
    wire_bytes: int
    duration_s: float
    too_many_redirects: bool = False
    plan_limit: str | None = None  # the scraping API refused it (not the host's answer)
    failure: str | None = None  # outcome of a failed exchange (tasks.fetch.transport_errors)


def robots_url(page_url: str) -> str:
    parts = urlsplit(page_url)
    return f"{parts.scheme}://{parts.netloc}/robots.txt"


async def fetch_robots(
    client: PageClient | httpx.AsyncClient,
    route: Route,
    page_url: str,
    *,
    max_bytes: int,
    max_redirects: int,
    timeout_s: float,
) -> RobotsFetch:
    """GET /robots.txt of the page's host, following up to ``max_redirects`` redirects.

    Never raises for what the request meets: any exception of the transport (a client
    library's ``ValueError`` included) is a failed fetch (``tasks.fetch.transport_errors``), which
    makes robots.txt unreachable for the cache's error TTL; so a page is never left asking
    for robots.txt again and again.
    """
    started = time.monotonic()
    url = robots_url(page_url)
    wire = 0
    limits = BodyLimits(max_bytes, float("inf"), truncate=True)
    hop = 0
    try:
        async with asyncio.timeout(timeout_s):
            for hop in range(max_redirects + 1):  # noqa: B007 - read after the loop
                ex = await exchange(client, route, url, {}, limits)
                wire += ex.wire_bytes
                if ex.plan_limit:
                    detail = f"scraping API plan limit: {ex.plan_limit}"
                    duration = time.monotonic() - started
                    return RobotsFetch(None, b"", detail, wire, duration, plan_limit=ex.plan_limit)
                location = ex.headers.get("location")
                if ex.status in REDIRECT_STATUS and location:
                    try:  # normalized: a userinfo in the Location is dropped, never sent
                        url = normalize(resolve(url, location))
                    except InvalidURLError as exc:
                        detail = f"redirect to a bad URL: {exc}"
                        duration = time.monotonic() - started
                        return RobotsFetch(None, b"", detail, wire, duration, failure="error")
                    continue
                if ex.failure is not None:
                    detail = ex.failure.reason
                    return RobotsFetch(None, b"", detail, wire, time.monotonic() - started)
                return RobotsFetch(
                    ex.status, ex.body, f"HTTP {ex.status}", wire, time.monotonic() - started
                )
            detail = f"more than {max_redirects} redirects"
            duration = time.monotonic() - started
            return RobotsFetch(ex.status, b"", detail, wire, duration, too_many_redirects=True)
    except TimeoutError:
        detail = f"timeout after {timeout_s:g} s"
        return RobotsFetch(None, b"", detail, wire, time.monotonic() - started, failure="timeout")
    except asyncio.CancelledError as exc:
        if not stray_cancellation():
            raise
        caught: BaseException = exc
    except Exception as exc:  # any failure of this request is its outcome, never the batch's
        caught = exc
    failure = classify_failure(caught)
    if failure.unexpected:
        log.warning("robots.txt request to %s failed: %s", shown_url(url), failure.reason)
    duration = time.monotonic() - started
    outcome, detail = failure.outcome, failure.reason
    if hop:  # a redirect target failed, not the host itself: robots.txt is unreachable
        detail = f"redirect to {shown_url(url)}: {detail}"
        outcome = "error" if outcome in HOST_FAILURES else outcome
    return RobotsFetch(None, b"", detail, wire, duration, failure=outcome)


def interpret_robots(
    fetched: RobotsFetch,
    *,
    now: datetime,
    policy: RobotsCachePolicy,
    token: str,
    max_bytes: int,
    crawl_delay_cap_s: float | None,
) -> RobotsRules:
    """Turn a fetch into rules (RFC 9309 status handling; 429 counts as unreachable)."""
    status = fetched.status
    # Like Google, treat 429 as "unreachable" rather than "unavailable": a host that is
    # throttling us has not said its rules are absent.
    verdict = RobotsVerdict.DISALLOW_ALL if status == 429 else verdict_for_status(status)
    if fetched.too_many_redirects:  # unavailable (RFC 9309 section 2.3.1.2)
        verdict = RobotsVerdict.ALLOW_ALL
    expires = now + timedelta(seconds=policy.ttl(verdict))
    if verdict is not RobotsVerdict.PARSE:
        return RobotsRules(verdict, expires, status, fetched.detail, failure=fetched.failure)
    parser = Protego.parse(robots_text(fetched.body, max_bytes))
    delay = 0.0
    if crawl_delay_cap_s is not None:
        delay = capped_crawl_delay(parser.crawl_delay(token), crawl_delay_cap_s)
    return RobotsRules(verdict, expires, status, fetched.detail, parser, delay)


class RobotsCache:
    """Rules per host (``scheme://netloc``), kept until they expire on the caller's clock."""

    def __init__(self) -> None:
        self._rules: dict[str, RobotsRules] = {}

    @staticmethod
    def key(url: str) -> str:
        """``scheme://netloc`` of an absolute URL (sliced: this runs for every page)."""
        start = url.find("//") + 2
        end = len(url)
        for separator in "/?#":
            found = url.find(separator, start, end)
            if found >= 0:
                end = found
        return url[:end]

    def get(self, url: str, now: datetime) -> RobotsRules | None:
        rules = self._rules.get(self.key(url))
        if rules is None or rules.expires_at <= now:
            return None
        return rules

    def held(self, origin: str) -> RobotsRules | None:
        """The rules kept for ``origin`` (``key`` of a URL), expired or not."""
        return self._rules.get(origin)

    def put(self, url: str, rules: RobotsRules) -> None:
        self._rules[self.key(url)] = rules

    def __len__(self) -> int:
        return len(self._rules)
