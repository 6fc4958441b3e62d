"""The fetch engine against hostile input, round two (issue 16), on loopback only.

What an outside review found: a URL with userinfo looped forever on the aiohttp transport
(its ``ValueError`` on the robots.txt request was not a per-request outcome, so the page asked
for robots.txt again and again) and printed the password in every log line; an exception of
any other type from the transport could do the same; ``Retry-After: ²`` turned a 429 into an
``error`` and forgot the throttle; a far-future Retry-After made a one-URL fetch sleep twice
an hour, silently. Each test here ends its batch in a thread with a generous bound, so a hang
fails instead of hanging the suite (a liveness bound, not a speed assertion).
"""

from __future__ import annotations

import asyncio
import logging
import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import httpx
import pytest

import tasks.fetch.engine
from models.discovery.urls import normalize, url_id
from tasks.fetch.engine import fetch_batch
from tasks.fetch.settings import FetchSettings
from tests.reliability.hostile import servers as hs
from tests.reliability.hostile.test_hostile_fetch import hostile_settings, run_bounded

pytestmark = pytest.mark.reliability

PASSWORD = "s3cr3t-PW"


# ---------------------------------------------------------------------- a recording server


@dataclass
class Recorder:
    """What the server was asked: (path, request head) per request, in arrival order."""

    requests: list[tuple[str, str]] = field(default_factory=list)
    lock: threading.Lock = field(default_factory=threading.Lock)

    def paths(self, path: str) -> int:
        with self.lock:
            return sum(1 for p, _ in self.requests if p == path)

    def heads(self) -> list[str]:
        with self.lock:
            return [h for _, h in self.requests]


def recording(recorder: Recorder, answer: Callable[[str], bytes]) -> hs.Behaviour:
    """A behaviour that records every request head and answers ``answer(path)``."""

    async def handler(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, _: str) -> None:
        request = (await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)).decode("latin-1")
        path = request.split(" ", 2)[1]
        with recorder.lock:
            recorder.requests.append((path, request))
        await hs.send(writer, answer(path))

    return hs.Behaviour(handler, own_robots=True, eager=True)


def page_or_404(path: str) -> bytes:
    if path == "/robots.txt":
        return hs.head("404 Not Found", "Content-Length: 0")
    body = hs.HEALTHY_PAGE % len(path)
    return hs.head("200 OK", "Content-Type: text/html", f"Content-Length: {len(body)}") + body


def throttle(retry_after: str) -> Callable[[str], bytes]:
    def answer(path: str) -> bytes:
        if path == "/robots.txt":
            return hs.head("404 Not Found", "Content-Length: 0")
        line = f"Retry-After: {retry_after}"
        try:  # one byte per character (², ¹, ³ are Latin-1) as a server would send them
            line.encode("latin-1")
        except UnicodeEncodeError:  # else as UTF-8 (the client reads Latin-1 mojibake)
            line = line.encode("utf-8").decode("latin-1")
        return hs.head("429 Too Many Requests", line, "Content-Length: 0")

    return answer


def row_of(result, url: str) -> dict:
    rows = {r["url_id"]: r for r in result.rows.to_pylist()}
    return rows[url_id(normalize(url))]


# ---------------------------------------------------------------------- 1. userinfo


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_a_url_with_userinfo_is_fetched_once_without_it_and_the_password_is_never_logged(
    transport, loopback_only, caplog
):
    recorder = Recorder()
    with hs.serve_hostile({"site": recording(recorder, page_or_404)}) as running:
        base = running.url("site")
        url = base.replace("http://", f"http://user:{PASSWORD}@") + "/page"
        with caplog.at_level(logging.DEBUG):
            result = run_bounded([url], hostile_settings(http_transport=transport), limit_s=60)
    rows = result.rows.to_pylist()
    assert len(rows) == 1
    row = rows[0]
    assert row["outcome"] == "ok", row["reason"]
    assert row["url_id"] == url_id(base + "/page")  # the page, not a second spelling of it
    assert recorder.paths("/page") == 1 and recorder.paths("/robots.txt") == 1
    assert not any("authorization" in h.lower() for h in recorder.heads()), "credentials sent"
    assert PASSWORD not in caplog.text
    assert PASSWORD not in repr(rows)
    assert not loopback_only.blocked


def test_a_userinfo_url_that_does_not_normalize_keeps_its_password_out_of_the_row(
    loopback_only, caplog
):
    url = f"http://user:{PASSWORD}@127.0.0.1:99999/page"  # port out of range
    with caplog.at_level(logging.DEBUG):
        result = run_bounded([url], hostile_settings(), limit_s=60)
    (row,) = result.rows.to_pylist()
    assert row["outcome"] == "error" and "port 99999 out of range" in row["reason"]
    assert PASSWORD not in repr(row) and PASSWORD not in caplog.text


# ---------------------------------------------------------------------- 2. any exception


class RaisingTransport(httpx.AsyncBaseTransport):
    """Raises ``make()`` for the requests ``fails(path)`` picks; answers the others (robots.txt
    404, pages 200), counting every call by path."""

    def __init__(self, make: Callable[[], BaseException], fails: Callable[[str], bool]) -> None:
        self.make = make
        self.fails = fails
        self.calls: dict[str, int] = {}

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        path = request.url.path
        self.calls[path] = self.calls.get(path, 0) + 1
        await asyncio.sleep(0)
        if self.fails(path):
            raise self.make()
        if path == "/robots.txt":
            return httpx.Response(404, stream=httpx.ByteStream(b""))
        ctype = {"content-type": "text/html"}
        return httpx.Response(200, headers=ctype, stream=httpx.ByteStream(b"<p>fine</p>"))


EXCEPTIONS: dict[str, Callable[[], BaseException]] = {
    "ValueError (aiohttp's userinfo)": lambda: ValueError(
        "Cannot combine AUTHORIZATION header with AUTH argument or credentials encoded in URL"
    ),
    "RuntimeError": lambda: RuntimeError("Session is closed"),
    "KeyError": lambda: KeyError("content-length"),
    "ZeroDivisionError": lambda: ZeroDivisionError("division by zero"),
    "AssertionError": lambda: AssertionError(),
    "stray CancelledError": lambda: asyncio.CancelledError(),
    "httpx.ConnectError": lambda: httpx.ConnectError("connection refused"),
}
WHERE: dict[str, Callable[[str], bool]] = {
    "robots.txt": lambda path: path == "/robots.txt",
    "page": lambda path: path != "/robots.txt",
    "both": lambda path: True,
}
URLS = [f"http://h{h}.test/p/{i}" for h in range(2) for i in range(3)]


def fetch_with(transport: httpx.AsyncBaseTransport, settings: FetchSettings, monkeypatch):
    """One batch of ``URLS`` through ``transport`` (nothing leaves the process)."""

    def client(_: FetchSettings) -> httpx.AsyncClient:
        return httpx.AsyncClient(transport=transport, follow_redirects=False)

    monkeypatch.setattr(tasks.fetch.engine, "make_client", client)
    box: dict[str, object] = {}

    def target() -> None:
        try:
            box["result"] = asyncio.run(fetch_batch(URLS, settings=settings))
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, daemon=True)
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the batch did not end: a request is being asked again and again"
    if "error" in box:
        raise box["error"]  # type: ignore[misc]
    return box["result"]


@pytest.mark.parametrize("where", WHERE)
@pytest.mark.parametrize("name", EXCEPTIONS)
def test_any_exception_of_the_transport_is_one_outcome_per_url_with_bounded_attempts(
    name, where, monkeypatch
):
    settings = hostile_settings(max_attempts=3, retry_budget_min=100)
    transport = RaisingTransport(EXCEPTIONS[name], WHERE[where])
    result = fetch_with(transport, settings, monkeypatch)
    rows = result.rows.to_pylist()
    assert sorted(r["url_id"] for r in rows) == sorted(url_id(u) for u in URLS)
    robots_calls = transport.calls.get("/robots.txt", 0)
    page_calls = sum(n for path, n in transport.calls.items() if path != "/robots.txt")
    assert robots_calls <= 2  # once per host: an unreachable robots.txt is cached
    assert page_calls <= len(URLS) * settings.max_attempts
    outcomes = {r["outcome"] for r in rows}
    unexpected = name != "httpx.ConnectError"
    if where == "page":
        assert outcomes == {"error"}
        if unexpected:  # the same failure every time: not retried
            assert page_calls == len(URLS)
            assert all(r["reason"].startswith("unexpected ") for r in rows), rows
    else:  # robots.txt unreachable: every page denied, none sent
        assert outcomes == {"robots_denied"}
        assert page_calls == 0
        assert all("unreachable" in r["reason"] for r in rows), rows


def test_cancelling_the_batch_still_cancels_it(monkeypatch):
    """Only a CancelledError the transport raises by itself is a request's outcome: one that
    cancels the batch ends it, and no request starts after it."""
    started: list[str] = []
    first_page = asyncio.Event()

    class HangingPages(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            if request.url.path == "/robots.txt":
                return httpx.Response(404, stream=httpx.ByteStream(b""))
            started.append(str(request.url))
            first_page.set()
            await asyncio.sleep(3600)
            raise AssertionError("not reached")

    monkeypatch.setattr(
        tasks.fetch.engine, "make_client", lambda _: httpx.AsyncClient(transport=HangingPages())
    )

    async def scenario() -> tuple[str, int, int]:
        batch = asyncio.create_task(fetch_batch(URLS, settings=hostile_settings()))
        await asyncio.wait_for(first_page.wait(), 30)
        await asyncio.sleep(0.2)  # both hosts' first pages in flight
        in_flight = len(started)
        batch.cancel()
        done, _ = await asyncio.wait({batch}, timeout=30)
        if not done:
            return "still running", in_flight, len(started)
        return ("cancelled" if batch.cancelled() else "finished"), in_flight, len(started)

    ended, in_flight, sent = asyncio.run(scenario())
    assert ended == "cancelled"
    assert sent == in_flight, "requests went out after the batch was cancelled"


# ---------------------------------------------------------------------- 3, 4. Retry-After


@pytest.mark.parametrize("value", ["²", "¹", "³", "٣", "１２", "-1", "1.5", "soon"])
def test_a_retry_after_that_is_no_number_or_date_is_ignored_and_the_429_still_counts(
    value, loopback_only
):
    recorder = Recorder()
    with hs.serve_hostile({"site": recording(recorder, throttle(value))}) as running:
        url = running.url("site") + "/page"
        settings = hostile_settings(max_attempts=1, throttle_backoff_s=0.05)
        result = run_bounded([url], settings, limit_s=60)
    row = row_of(result, url)
    assert (row["outcome"], row["status"]) == ("throttled", 429), row["reason"]
    assert row["reason"] == "HTTP 429"  # no Retry-After taken from it
    host = next(iter(result.metrics.hosts.values()))
    assert host.throttles == 1  # the host was told to slow down, not forgotten


def test_a_far_future_retry_after_defers_the_hosts_pages_instead_of_sleeping(loopback_only, caplog):
    recorder = Recorder()
    when = "Fri, 31 Dec 9999 23:59:59 GMT"
    with hs.serve_hostile({"site": recording(recorder, throttle(when))}) as running:
        urls = [running.url("site") + f"/p/{i}" for i in range(3)]
        with caplog.at_level(logging.WARNING):
            result = run_bounded(urls, hostile_settings(), limit_s=60)  # no window
    rows = [row_of(result, u) for u in urls]
    assert {r["outcome"] for r in rows} == {"throttled"}
    for row in rows:
        assert (
            "deferred: the host asks for no request before 9999-12-31T23:59:59" in (row["reason"])
        ), row["reason"]
        assert "retry_after_cap_s" in row["reason"]
    sent = sum(1 for p, _ in recorder.requests if p != "/robots.txt")
    assert sent == 1  # one 429, then nothing more to a host that said "not before 9999"
    assert "page(s) deferred" in caplog.text


def test_a_retry_after_within_the_cap_is_waited_and_retried(loopback_only):
    recorder = Recorder()

    def answer(path: str) -> bytes:  # a 429 asking for 1 s, then the page
        first = recorder.paths(path) == 1
        return throttle("1")(path) if first and path != "/robots.txt" else page_or_404(path)

    with hs.serve_hostile({"site": recording(recorder, answer)}) as running:
        url = running.url("site") + "/page"
        result = run_bounded([url], hostile_settings(retry_after_cap_s=30.0), limit_s=60)
    row = row_of(result, url)
    assert row["outcome"] == "ok" and row["retries"] == 1, row["reason"]
    assert recorder.paths("/page") == 2


def test_a_far_future_retry_after_of_the_scraping_api_is_not_waited_for_either(monkeypatch):
    """The API's own 429 (X-Plan-Limit) with Retry-After in 9999: no retry an hour later."""
    calls: list[str] = []

    class PlanLimited(httpx.AsyncBaseTransport):
        async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
            target = request.url.params["url"]
            calls.append(target)
            if target.endswith("/robots.txt"):
                return httpx.Response(404, stream=httpx.ByteStream(b""))
            headers = {
                "x-plan-limit": "concurrency",
                "retry-after": "Fri, 31 Dec 9999 23:59:59 GMT",
            }
            return httpx.Response(429, headers=headers, stream=httpx.ByteStream(b""))

    settings = hostile_settings(mode="api", api_url="http://api.test")
    monkeypatch.setattr(
        tasks.fetch.engine, "make_client", lambda _: httpx.AsyncClient(transport=PlanLimited())
    )
    box: dict[str, object] = {}
    url = "http://a.test/page"
    thread = threading.Thread(
        target=lambda: box.update(result=asyncio.run(fetch_batch([url], settings=settings))),
        daemon=True,
    )
    thread.start()
    thread.join(60)
    assert not thread.is_alive(), "the batch waited for the API's Retry-After"
    (row,) = box["result"].rows.to_pylist()  # type: ignore[union-attr]
    assert row["outcome"] == "throttled", row["reason"]
    assert "deferred: the scraping API asks for no request before 9999-12-31" in row["reason"]
    assert calls.count(url) == 1
