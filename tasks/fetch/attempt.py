"""One fetch attempt over HTTP: route, redirects, guard rails, and what the answer means.

``fetch_page`` sends one GET (directly, through a forward proxy, or through a scraping API,
see ``Route``), follows same-host redirects itself, reads the body through the guard rails of
``tasks.fetch.response_guard`` within one total timeout, and returns an ``Attempt``: the outcome
for the history row, the reason, and the signals the scheduler routes (a host's throttle or a
plan limit of the API). It never raises for anything the network, the server or the client
library does: a failed exchange, whatever it raised, is named by ``tasks.fetch.transport_errors``
(``tls_error``, ``bad_response``, ``truncated``, ``refused_address``, ``timeout``,
``error``; an exception no network library should raise is an ``unexpected`` error, not
retried).

With an ``Archiver`` (the engine's WARC hook) every exchange that got an answer and whose body
was read within the limits is handed over as it completes, redirect hops included; the
location of the last one travels in ``Attempt.warc``.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections import deque
from collections.abc import Callable, Collection, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any
from urllib.parse import quote, urlsplit

import aiohttp
import httpx

from models.discovery.urls import InvalidURLError, normalize, resolve, shown_url
from models.fetching.net_policy import ALLOWED_SCHEMES
from models.fetching.politeness import RETRYABLE_STATUS, is_retryable, parse_retry_after
from tasks.fetch.client import TRANSPORT_ERRORS, Answer, PageClient, as_page_client
from tasks.fetch.response_guard import (
    BodyLimitError,
    BoundedDecoder,
    check_content_type,
    check_declared_length,
    looks_like_challenge,
)
from tasks.fetch.transport_errors import BodyInterruptedError, classify_failure, stray_cancellation

if TYPE_CHECKING:
    from tasks.archive.warc import WarcLocation

log = logging.getLogger(__name__)

#: ``archive(answer, body, target)``: store one answered exchange (``target`` is the page,
#: also when the request went to a scraping API); returns where, or None if not stored.
Archiver = Callable[[Answer, bytes, str], "WarcLocation | None"]

#: Bytes of a non-2xx body read (for challenge detection and to keep the connection).
ERROR_BODY_BYTES = 64 * 1024
REDIRECT_STATUS = frozenset({301, 302, 303, 307, 308})
PLAN_LIMIT_HEADER = "x-plan-limit"


@dataclass(frozen=True, slots=True)
class Route:
    """How a request leaves the process: ``direct``, ``proxy`` (set on the client) or ``api``.

    Through the API the target URL travels as a query parameter, the answer carries the
    target's status, and ``X-Plan-Limit`` marks the API's own refusals (429 concurrency,
    509 credits), which are about our plan and never about the target host.
    """

    mode: str = "direct"
    api_url: str | None = None
    api_key_header: str = "X-Api-Key"
    api_key: str | None = field(default=None, repr=False)  # a secret: never printed

    def request_url(self, target: str) -> str:
        if self.mode != "api":
            return target
        assert self.api_url is not None
        return f"{self.api_url.rstrip('/')}/fetch?url={quote(target, safe='')}"

    def request_headers(self, headers: dict[str, str]) -> dict[str, str]:
        """``headers`` plus the API key, on requests to the scraping API only."""
        if self.mode != "api" or not self.api_key:
            return headers
        return {**headers, self.api_key_header: self.api_key}

    def plan_limit(self, status: int, headers: dict[str, str]) -> str | None:
        if self.mode != "api" or status not in (429, 509):
            return None
        return headers.get(PLAN_LIMIT_HEADER, "unknown").strip().lower()


@dataclass(slots=True)  # not frozen: a frozen __init__ sets each field through object.__setattr__
class Exchange:
    """One request/response, body read within limits (``failure`` set if a limit broke)."""

    status: int
    headers: dict[str, str]  # lower-case names, repeated headers joined with ", "
    body: bytes
    wire_bytes: int
    failure: BodyLimitError | None
    plan_limit: str | None
    warc: WarcLocation | None = None


@dataclass(frozen=True, slots=True)
class BodyLimits:
    max_bytes: int
    max_ratio: float
    accepted_types: Collection[str] | None = None  # None: any type (robots.txt)
    accept_missing_type: bool = True
    truncate: bool = False  # robots.txt: keep the first max_bytes instead of failing


async def exchange(
    client: PageClient | httpx.AsyncClient,
    route: Route,
    url: str,
    headers: dict[str, str],
    limits: BodyLimits,
    archive: Archiver | None = None,
) -> Exchange:
    """Send one GET and read its body through the guard rails (may raise transport errors).

    ``archive`` gets the exchange once its body is read, unless a guard rail broke (no
    partial body is stored) or the answer is a scraping API's own refusal (not the page's).
    An ``httpx.AsyncClient`` (the sitemap reader's) is used through ``HttpxPageClient``.
    """
    answer = await as_page_client(client).get(
        route.request_url(url), route.request_headers(headers)
    )
    try:
        status = answer.status
        headers, head_bytes = _header_dict(answer.raw_headers)
        failure: BodyLimitError | None = None
        body = b""
        success = 200 <= status < 300
        try:
            if success and limits.accepted_types is not None:
                check_content_type(
                    headers.get("content-type"),
                    limits.accepted_types,
                    accept_missing=limits.accept_missing_type,
                )
            if success and not limits.truncate:
                check_declared_length(headers.get("content-length"), limits.max_bytes)
            decoder = BoundedDecoder(
                headers.get("content-encoding"),
                limits.max_bytes if success else ERROR_BODY_BYTES,
                limits.max_ratio,
                truncate=limits.truncate or not success,
            )
            try:
                while not decoder.done:
                    chunk = await answer.read_chunk()
                    if not chunk:
                        break
                    decoder.feed(chunk)
            except TRANSPORT_ERRORS as exc:  # the headers came: this failure is mid-body
                raise BodyInterruptedError(decoder.raw, exc) from exc
            body = decoder.body()
        except BodyLimitError as exc:
            failure = exc
        # The head: "HTTP/1.1 " + status + " " + reason + CRLF, the headers, the final CRLF.
        received = 10 + len(str(status)) + len(answer.reason) + 2 + head_bytes + 2
        received += answer.downloaded
        plan = route.plan_limit(status, headers)
        stored = None
        if archive is not None and failure is None and plan is None:
            stored = archive(answer, body, url)
        return Exchange(status, headers, body, answer.sent_bytes + received, failure, plan, stored)
    finally:
        await answer.aclose()


def _header_dict(raw: Sequence[tuple[bytes, bytes]]) -> tuple[dict[str, str], int]:
    """Response headers as one dict, built once (httpx.Headers.get scans every header), and
    their size on the wire (name + ": " + value + CRLF each, as ``head_size`` counts)."""
    size = 4 * len(raw)
    headers = {}
    for key, value in raw:  # one loop: a comprehension for each cost more than the work
        size += len(key) + len(value)
        headers[key.decode("latin-1").lower()] = value.decode("latin-1")
    if len(headers) == len(raw):
        return headers, size
    headers = {}  # a repeated header: its values joined, in order
    for key, value in raw:
        name = key.decode("latin-1").lower()
        text = value.decode("latin-1")
        headers[name] = f"{headers[name]}, {text}" if name in headers else text
    return headers, size


@dataclass(slots=True)  # not frozen, like Exchange: built for every attempt
class Attempt:
    """What one attempt at one URL found (redirect hops included)."""

    outcome: str
    status: int | None
    reason: str | None = None
    body: bytes | None = None
    content_type: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    retry_after_s: float | None = None
    wire_bytes: int = 0
    duration_s: float = 0.0
    final_url: str | None = None
    plan_limit: str | None = None  # "concurrency" (plan 429) or "credits" (509)
    challenge: bool = False
    retryable: bool = False
    warc: WarcLocation | None = None  # the archived last exchange, if archiving is on


@dataclass(frozen=True, slots=True)
class PageLimits:
    body: BodyLimits
    timeout_s: float
    max_redirects: int


class Deadlines:
    """The attempts' total time limits on one timer, for a batch of attempts.

    ``asyncio.timeout`` arms and cancels a timer for every attempt (about 3.5 us of CPU each:
    its handle, the loop's timer heap, the cancellation's bookkeeping). Here an attempt's
    ``watch()`` appends its deadline to a queue in start order (every deadline is
    ``timeout_s`` after its start, so the queue is in deadline order) and one timer, re-armed
    at most every ``slack_s``, cancels the attempts still running past their deadline: an
    attempt ends within ``timeout_s + slack_s`` (``slack_s`` is at most 0.25 s and at most an
    eighth of the timeout). Inside the watch the cancellation becomes ``TimeoutError``, as
    with ``asyncio.timeout``; a cancellation from elsewhere stays a cancellation. One event
    loop: make and use it inside the loop that runs the attempts, and ``close()`` it after.
    """

    __slots__ = ("_handle", "_loop", "_queue", "slack_s", "timeout_s")

    def __init__(self, timeout_s: float) -> None:
        self.timeout_s = timeout_s
        self.slack_s = min(0.25, timeout_s / 8)
        self._loop = asyncio.get_running_loop()
        self._queue: deque[_Watch] = deque()
        self._handle: asyncio.TimerHandle | None = None

    def watch(self) -> _Watch:
        """A context manager for one attempt, in the running task."""
        queue = self._queue
        while queue and queue[0].done:  # finished attempts leave from the front
            queue.popleft()
        task = asyncio.current_task()
        if task is None:
            raise RuntimeError("Deadlines.watch outside a task")
        entry = _Watch(self._loop.time() + self.timeout_s, task, task.cancelling())
        queue.append(entry)
        if self._handle is None:
            self._handle = self._loop.call_at(entry.deadline, self._expire)
        return entry

    def _expire(self) -> None:
        now = self._loop.time()
        queue = self._queue
        while queue and (queue[0].done or queue[0].deadline <= now):
            entry = queue.popleft()
            if not entry.done:
                entry.expired = True
                entry.task.cancel()
        self._handle = (
            self._loop.call_at(max(queue[0].deadline, now + self.slack_s), self._expire)
            if queue
            else None
        )

    def close(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None
        self._queue.clear()


class _Watch:
    """One attempt's deadline (``Deadlines.watch``)."""

    __slots__ = ("cancelling", "deadline", "done", "expired", "task")

    def __init__(self, deadline: float, task: asyncio.Task[Any], cancelling: int) -> None:
        self.deadline = deadline
        self.task = task
        self.cancelling = cancelling  # cancellations already pending when the attempt began
        self.done = False
        self.expired = False

    def __enter__(self) -> _Watch:
        return self

    def __exit__(self, exc_type: type[BaseException] | None, exc: object, tb: object) -> None:
        self.done = True
        if (
            self.expired
            and self.task.uncancel() <= self.cancelling
            and exc_type is asyncio.CancelledError
        ):
            raise TimeoutError  # this attempt's deadline, and nobody else's cancellation


async def fetch_page(
    client: PageClient | httpx.AsyncClient,
    route: Route,
    url: str,
    conditional: dict[str, str],
    limits: PageLimits,
    robots_reason: Callable[[str], str | None],
    *,
    close: bool = False,
    archive: Archiver | None = None,
    deadlines: Deadlines | None = None,
) -> Attempt:
    """Fetch ``url`` once (following same-host redirects); never raises for network trouble.

    ``conditional`` headers go on the first hop only (they belong to this URL);
    ``robots_reason(url)`` names the rule that denies a redirect target, or None; ``close``
    asks the server to close the connection after the answer (the host's last request);
    ``archive`` stores every answered exchange (see ``exchange``). The whole attempt gets
    ``limits.timeout_s``: on ``deadlines`` (a batch's shared timer, whose ``timeout_s`` is
    that limit) or, without it, on a timer of its own.
    """
    started = time.monotonic()
    wire = 0
    own = deadlines is None
    watch = Deadlines(limits.timeout_s) if deadlines is None else deadlines
    try:
        with watch.watch():
            current = url
            visited = {url}
            headers = {**conditional, "Connection": "close"} if close else conditional
            sent_conditional = bool(conditional)
            for _hop in range(limits.max_redirects + 1):
                ex = await exchange(client, route, current, headers, limits.body, archive)
                wire += ex.wire_bytes
                if ex.status not in REDIRECT_STATUS or ex.plan_limit or ex.failure:
                    duration = time.monotonic() - started
                    return _judge(ex, sent_conditional, current, wire, duration)
                location = ex.headers.get("location")
                if not location:
                    return _finish(
                        "error", ex.status, "redirect without Location", wire, started, ex
                    )
                target, problem = _redirect_target(current, location, visited)
                if problem is not None:
                    outcome, why = problem
                    return _finish(outcome, ex.status, why, wire, started, ex)
                denied = robots_reason(target)
                if denied is not None:
                    return _finish(
                        "robots_denied", ex.status, f"redirect target {denied}", wire, started, ex
                    )
                visited.add(target)
                current = target
                headers = {"Connection": "close"} if close else {}
                sent_conditional = False
            too_many = f"more than {limits.max_redirects} redirects"
            return _finish("redirect", ex.status, too_many, wire, started, ex)
    except TimeoutError:
        return _failure(
            "timeout", f"no complete answer within {limits.timeout_s:g} s", wire, started
        )
    except (httpx.InvalidURL, httpx.UnsupportedProtocol, aiohttp.InvalidURL) as exc:
        return _failure("error", f"bad URL: {exc}", wire, started, retryable=False)
    except asyncio.CancelledError as exc:
        if not stray_cancellation():
            raise  # the batch is being cancelled: not this request's outcome
        caught: BaseException = exc
    except Exception as exc:  # any failure of this request is its outcome, never the batch's
        caught = exc
    finally:
        if own:
            watch.close()
    failure = classify_failure(caught)
    if failure.unexpected:
        log.warning("request to %s failed: %s", shown_url(url), failure.reason)
    return _failure(failure.outcome, failure.reason, wire, started, retryable=failure.retryable)


def _redirect_target(
    current: str, location: str, visited: set[str]
) -> tuple[str, tuple[str, str] | None]:
    """The normalized redirect target, or the outcome and reason for not following it."""
    try:
        resolved = resolve(current, location)
    except InvalidURLError as exc:
        return location, ("redirect", f"redirect to a bad URL: {exc}")
    scheme = resolved.split(":", 1)[0].lower() if ":" in resolved else ""
    if scheme not in ALLOWED_SCHEMES:
        return resolved, ("refused_address", f"redirect to a refused scheme {scheme!r}")
    try:
        target = normalize(resolved)
    except InvalidURLError as exc:
        return location, ("redirect", f"redirect to a bad URL: {exc}")
    if urlsplit(target).netloc != urlsplit(current).netloc:
        return target, ("redirect", f"redirect to another host, not followed: {target}")
    if target in visited:
        return target, ("redirect_loop", f"loop: redirect back to {target}")
    return target, None


def _judge(ex: Exchange, conditional: bool, url: str, wire: int, duration: float) -> Attempt:
    """The outcome of a final (non-redirect) answer."""
    status = ex.status
    headers = ex.headers
    if (
        200 <= status < 300
        and not ex.plan_limit
        and ex.failure is None
        and not looks_like_challenge(status, headers.get("cf-mitigated"), ex.body)
    ):  # the common answer, built without the keyword dictionary below
        return Attempt(
            "ok",
            status,
            body=ex.body,
            content_type=headers.get("content-type"),
            etag=headers.get("etag"),
            last_modified=headers.get("last-modified"),
            wire_bytes=wire,
            duration_s=duration,
            final_url=url,
            warc=ex.warc,
        )
    common: dict[str, Any] = {
        "wire_bytes": wire,
        "duration_s": duration,
        "final_url": url,
        "etag": headers.get("etag"),
        "last_modified": headers.get("last-modified"),
        "content_type": headers.get("content-type"),
        "warc": ex.warc,
    }
    if ex.plan_limit == "credits" or (ex.plan_limit and status == 509):
        return Attempt("api_exhausted", status, "scraping API credits exhausted (509)", **common)
    if ex.plan_limit:
        return Attempt(
            "throttled",
            status,
            f"scraping API plan limit: {ex.plan_limit}",
            plan_limit=ex.plan_limit,
            retry_after_s=parse_retry_after(headers.get("retry-after")),
            retryable=True,
            **common,
        )
    if ex.failure is not None:
        return Attempt(ex.failure.outcome, status, ex.failure.reason, **common)
    if looks_like_challenge(status, headers.get("cf-mitigated"), ex.body):
        return Attempt(
            "throttled", status, "bot challenge page", challenge=True, retryable=True, **common
        )
    if 200 <= status < 300:
        return Attempt("ok", status, body=ex.body, **common)
    if status == 304:
        if conditional:
            return Attempt("not_modified", status, **common)
        return Attempt("error", status, "304 to an unconditional request", **common)
    if status in (429, 503):
        retry_after = parse_retry_after(headers.get("retry-after"))
        why = f"HTTP {status}" + (f", Retry-After {retry_after:g} s" if retry_after else "")
        return Attempt(
            "throttled", status, why, retry_after_s=retry_after, retryable=True, **common
        )
    if status in (404, 410):
        return Attempt("gone", status, f"HTTP {status}", **common)
    if status in REDIRECT_STATUS:
        return Attempt("redirect", status, "redirect not followed", **common)
    return Attempt(
        "error", status, f"HTTP {status}", retryable=status in RETRYABLE_STATUS, **common
    )


def _finish(
    outcome: str,
    status: int | None,
    reason: str,
    wire: int,
    started: float,
    ex: Exchange | None = None,
) -> Attempt:
    return Attempt(
        outcome,
        status,
        reason,
        wire_bytes=wire,
        duration_s=time.monotonic() - started,
        retryable=is_retryable(outcome, status),
        content_type=None if ex is None else ex.headers.get("content-type"),
        warc=None if ex is None else ex.warc,
    )


def _failure(
    outcome: str, reason: str, wire: int, started: float, *, retryable: bool = True
) -> Attempt:
    return Attempt(
        outcome,
        None,
        reason,
        wire_bytes=wire,
        duration_s=time.monotonic() - started,
        retryable=retryable,
    )
