"""The fake scraping API and forward proxy in front of the sandbox hosts (no sockets here).

Both live on 127.0.0.1 at the hosts' port and reach the target host *in process*: the host's
behaviour (latency, throttling, validators...) applies and is logged with ``via="api"`` or
``via="proxy"``, but no socket is opened, and a target that is not a sandbox host is refused
with 502 (nothing outside the sandbox is ever contacted).

- API: ``GET /fetch?url=<url-encoded target>`` answers the target's status and body, with
  its ``Content-Type``, validators, ``Location`` and ``Retry-After``, plus ``X-Target-Status``
  and (when credits are limited) ``X-Credits-Remaining``. Conditional headers and the
  User-Agent are passed on, so conditional requests work through it. Plan limits, like a
  commercial scraping API: more concurrent API requests than ``concurrency`` get 429 with
  ``X-Plan-Limit: concurrency`` and ``Retry-After: 1``; with no credits left, 509 with
  ``X-Plan-Limit: credits``. A target's 2xx or 304 costs one credit; failures are free. A
  credit is reserved while a request is in flight, so concurrent requests never overspend.
  With an ``api_key``, requests without it in ``X-Api-Key`` get 401.
- Proxy: absolute-form requests (``GET http://127.0.x.y:port/p/1 HTTP/1.1``, as httpx sends
  them through ``proxy=``) are answered with the target's response as is, without plan
  limits. ``CONNECT`` (HTTPS tunnels) is refused with 501.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from sandbox.http import Reply, Request
from sandbox.web import host_index

PLAN_LIMIT_HEADER = "X-Plan-Limit"
API_KEY_HEADER = "X-Api-Key"
_FORWARDED_TO_TARGET = (
    "user-agent",
    "accept",
    "accept-language",
    "if-none-match",
    "if-modified-since",
)
_HOP_BY_HOP = frozenset(
    {"connection", "keep-alive", "proxy-connection", "proxy-authorization", "te", "upgrade"}
)
_PASSED_BACK = ("content-type", "etag", "last-modified", "location", "retry-after")


@dataclass(frozen=True, slots=True)
class ApiStats:
    """Counters of the fake API since the server started."""

    requests: int
    charged: int
    rejected_concurrency: int
    rejected_credits: int
    max_in_flight: int


class ScrapingApi:
    """The plan limits and accounting of the fake scraping API.

    ``credits`` and ``concurrency`` may be set from any thread at any time (None = unlimited).
    """

    def __init__(
        self,
        credits: int | None = None,
        concurrency: int | None = None,
        api_key: str | None = None,
    ) -> None:
        self.credits = credits
        self.concurrency = concurrency
        self.api_key = api_key  # None: no key needed; else X-Api-Key must carry it
        self.in_flight = 0
        self._reserved = 0
        self._requests = 0
        self._charged = 0
        self._rejected_concurrency = 0
        self._rejected_credits = 0
        self._max_in_flight = 0

    def stats(self) -> ApiStats:
        return ApiStats(
            self._requests,
            self._charged,
            self._rejected_concurrency,
            self._rejected_credits,
            self._max_in_flight,
        )

    def authorize(self, headers: dict[str, str]) -> Reply | None:
        """401 unless the request carries the API key (when one is set)."""
        if self.api_key is None or headers.get(API_KEY_HEADER.lower()) == self.api_key:
            return None
        return _error(401, f"missing or wrong API key (send it in {API_KEY_HEADER})")

    def admit(self) -> Reply | None:
        """Take a concurrency slot and reserve a credit, or the plan-limit refusal."""
        self._requests += 1
        if self.concurrency is not None and self.in_flight >= self.concurrency:
            self._rejected_concurrency += 1
            return _plan_limit(429, "concurrency", "plan concurrency limit reached")
        credits = self.credits
        if credits is not None and credits - self._reserved <= 0:
            self._rejected_credits += 1
            return _plan_limit(509, "credits", "plan credits exhausted")
        self.in_flight += 1
        self._max_in_flight = max(self._max_in_flight, self.in_flight)
        self._reserved += credits is not None
        return None

    def settle(self, target_status: int | None) -> None:
        """Release the slot; charge a credit if the target answered 2xx or 304."""
        self.in_flight -= 1
        if self._reserved:
            self._reserved -= 1
        if target_status is not None and (200 <= target_status < 300 or target_status == 304):
            self._charged += 1
            if self.credits is not None:
                self.credits -= 1

    def reply(self, target: Reply) -> Reply:
        """The API's answer carrying the target's reply."""
        headers = [(n, v) for n, v in target.headers if n.lower() in _PASSED_BACK]
        headers.append(("X-Target-Status", str(target.status)))
        if self.credits is not None:
            headers.append(("X-Credits-Remaining", str(self.credits)))
        return Reply(target.status, headers, target.body)


def api_target(request: Request) -> str | Reply:
    """The target URL of an API request, or the error reply (400/404) if there is none."""
    if request.path != "/fetch":
        return _error(404, "the fake scraping API serves GET /fetch?url=<target>")
    urls = parse_qs(request.query).get("url")
    if not urls:
        return _error(400, "missing url parameter: GET /fetch?url=<url-encoded target>")
    return urls[0]


def locate_target(url: str, port: int, n_hosts: int) -> tuple[int, str, str] | Reply:
    """``(host index, path, query)`` of a sandbox URL, or a 400/502 reply for anything else."""
    parts = urlsplit(url)
    if parts.scheme != "http" or not parts.hostname:
        return _error(400, f"only http:// URLs of sandbox hosts are served: {url[:200]!r}")
    i = host_index(parts.hostname)
    try:
        target_port = parts.port or 80
    except ValueError:
        return _error(400, f"bad port in {url[:200]!r}")
    if i is None or i >= n_hosts or target_port != port:
        return _error(502, f"not a sandbox host (nothing else is reachable): {parts.netloc!r}")
    return i, parts.path or "/", parts.query


def target_request(original: Request, path: str, query: str, *, via: str) -> Request:
    """The request the target host sees: the proxy passes headers on, the API a few."""
    if via == "api":
        headers = {n: original.headers[n] for n in _FORWARDED_TO_TARGET if n in original.headers}
    else:
        headers = {n: v for n, v in original.headers.items() if n not in _HOP_BY_HOP}
    target = f"{path}?{query}" if query else path
    return Request(original.method, target, path, query, "HTTP/1.1", headers, keep_alive=True)


def _plan_limit(status: int, limit: str, message: str) -> Reply:
    headers = [(PLAN_LIMIT_HEADER, limit), ("Content-Type", "application/json")]
    if status == 429:
        headers.append(("Retry-After", "1"))
    return Reply(status, headers, json.dumps({"error": message, "limit": limit}).encode())


def _error(status: int, message: str) -> Reply:
    body = json.dumps({"error": message}).encode()
    return Reply(status, [("Content-Type", "application/json")], body)
