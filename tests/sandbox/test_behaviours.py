"""Each host behaviour does what it says, seen from a client and from the request log."""

from __future__ import annotations

import asyncio
import time
from datetime import timedelta

import httpx
import pytest

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox
from sandbox.http import parse_request
from sandbox.responder import Responder
from tests.sandbox.conftest import START, extract_record


def _serve_one(clock, behaviour: HostBehaviour, pages: int = 40, seed: int = 1):
    web = SandboxWeb.generate(
        hosts=1, pages_per_host=pages, seed=seed, default=behaviour, clock=clock
    )
    return web, serve_sandbox(web)


def _fast_page(web, running) -> tuple[str, object]:
    """The fastest-changing page and the time just after its next real change."""
    url = max(running.page_urls(0), key=web.true_rate)
    change = web.changes_between(url, START, START + timedelta(days=30))[0]
    return url, change + timedelta(seconds=1)


def test_honest_validators_answer_304_until_a_real_change(clock):
    web, serving = _serve_one(clock, HostBehaviour(validators="honest"))
    with serving as running, httpx.Client() as client:
        url, after_change = _fast_page(web, running)
        first = client.get(url)
        etag, modified = first.headers["etag"], first.headers["last-modified"]
        assert client.get(url, headers={"If-None-Match": etag}).status_code == 304
        assert client.get(url, headers={"If-Modified-Since": modified}).status_code == 304
        assert client.get(url, headers={"If-None-Match": '"other"'}).status_code == 200
        clock.set(after_change)
        changed = client.get(url, headers={"If-None-Match": etag})
        assert changed.status_code == 200 and changed.headers["etag"] != etag
        assert client.get(url, headers={"If-Modified-Since": modified}).status_code == 200
        # If-None-Match wins over If-Modified-Since (RFC 9110 13.2.2)
        both = {"If-None-Match": etag, "If-Modified-Since": changed.headers["last-modified"]}
        assert client.get(url, headers=both).status_code == 200
        assert [r.headers.get("if-none-match") for r in running.log.entries()][1] == etag


@pytest.mark.parametrize("mode", ["none", "ignored", "volatile"])
def test_validators_that_never_give_a_304(clock, mode):
    _, serving = _serve_one(clock, HostBehaviour(validators=mode))
    with serving as running, httpx.Client() as client:
        url = running.page_urls(0)[0]
        first = client.get(url)
        if mode == "none":
            assert "etag" not in first.headers and "last-modified" not in first.headers
            conditional = {"If-None-Match": "*"}
        else:
            conditional = {
                "If-None-Match": first.headers["etag"],
                "If-Modified-Since": first.headers["last-modified"],
            }
        again = client.get(url, headers=conditional)
        assert again.status_code == 200
        assert extract_record(again.text) == extract_record(first.text)  # nothing changed
        if mode == "volatile":
            assert again.headers["etag"] != first.headers["etag"]
        if mode == "ignored":
            assert again.headers["etag"] == first.headers["etag"]


def test_lying_validators_answer_304_after_a_real_change(clock):
    web, serving = _serve_one(clock, HostBehaviour(validators="lying"))
    with serving as running, httpx.Client() as client:
        url, after_change = _fast_page(web, running)
        first = client.get(url)
        clock.set(after_change)
        conditional = {"If-None-Match": first.headers["etag"]}
        assert client.get(url, headers=conditional).status_code == 304  # a lie
        fresh = client.get(url)
        assert extract_record(fresh.text) != extract_record(first.text)  # it did change
        assert fresh.headers["etag"] == first.headers["etag"]


def test_rate_throttle_without_retry_after(clock):
    behaviour = HostBehaviour(throttle_rate=2.0, throttle_status=429)
    _, serving = _serve_one(clock, behaviour)
    with serving as running, httpx.Client() as client:
        url = running.page_urls(0)[0]
        statuses = [client.get(url) for _ in range(4)]
        assert statuses[0].status_code == 200
        refused = [r for r in statuses if r.status_code == 429]
        assert refused and all("retry-after" not in r.headers for r in refused)
        time.sleep(0.6)  # one token is back after 0.5 s
        assert client.get(url).status_code == 200
        assert client.get(running.base_url(0) + "/robots.txt").status_code == 200  # exempt
    strict = HostBehaviour(throttle_rate=0.5, throttle_robots=True)
    _, serving = _serve_one(clock, strict)
    with serving as running, httpx.Client() as client:
        robots = running.base_url(0) + "/robots.txt"
        assert [client.get(robots).status_code for _ in range(2)] == [200, 429]


def test_throttle_with_retry_after_is_enforced_until_it_passes(clock):
    behaviour = HostBehaviour(throttle_rate=2.0, throttle_status=503, retry_after_s=1.0)
    _, serving = _serve_one(clock, behaviour)
    with serving as running, httpx.Client() as client:
        url = running.page_urls(0)[0]
        assert client.get(url).status_code == 200
        refused = client.get(url)
        assert refused.status_code == 503 and refused.headers["retry-after"] == "1"
        time.sleep(0.6)  # the bucket has a token again, but Retry-After has not passed
        assert client.get(url).status_code == 503
        time.sleep(0.7)
        assert client.get(url).status_code == 200


def test_concurrency_throttle_and_challenge_page(clock):
    behaviour = HostBehaviour(latency_s=0.3, throttle_concurrency=2)
    web = SandboxWeb.generate(
        hosts=2,
        pages_per_host=5,
        seed=1,
        default=behaviour,
        behaviours={1: HostBehaviour(throttle_rate=1.0, challenge_when_throttled=True)},
        clock=clock,
    )

    async def burst(urls):
        async with httpx.AsyncClient() as client:
            return await asyncio.gather(*(client.get(u) for u in urls))

    with serving_web(web) as running:
        responses = asyncio.run(burst(running.page_urls(0)[:4]))
        assert sorted(r.status_code for r in responses) == [200, 200, 429, 429]
        refused = [e for e in running.log.entries() if e.status == 429]
        assert all(e.in_flight > 2 for e in refused)
        with httpx.Client() as client:
            url = running.page_urls(1)[0]
            assert "Just a moment" not in client.get(url).text
            challenged = client.get(url)
            assert challenged.status_code == 200 and "bot-challenge" in challenged.text


def serving_web(web):
    return serve_sandbox(web)


@pytest.mark.parametrize(("mode", "status"), [("404", 404), ("500", 500)])
def test_robots_error_statuses(clock, mode, status):
    _, serving = _serve_one(clock, HostBehaviour(robots=mode))
    with serving as running:
        assert httpx.get(running.base_url(0) + "/robots.txt").status_code == status


def test_robots_text_crawl_delay_and_redirects(clock):
    web = SandboxWeb.generate(
        hosts=3,
        pages_per_host=3,
        behaviours={
            0: HostBehaviour(crawl_delay_s=5),
            1: HostBehaviour(robots_text="User-agent: *\nDisallow: /\n"),
            2: HostBehaviour(robots="redirect", robots_redirects=3),
        },
        clock=clock,
    )
    with serve_sandbox(web) as running, httpx.Client(follow_redirects=True) as client:
        default = client.get(running.base_url(0) + "/robots.txt").text
        assert "Disallow: /private/" in default and "Crawl-delay: 5" in default
        assert (
            client.get(running.base_url(1) + "/robots.txt").text == "User-agent: *\nDisallow: /\n"
        )
        redirected = client.get(running.base_url(2) + "/robots.txt")
        assert redirected.status_code == 200 and len(redirected.history) == 3
        assert "Disallow: /private/" in redirected.text


def test_robots_timeout_outlasts_the_client_and_not_the_shutdown(clock):
    _, serving = _serve_one(clock, HostBehaviour(robots="timeout"))  # 30 s
    started = time.monotonic()
    with serving as running:
        with pytest.raises(httpx.ReadTimeout):
            httpx.get(running.base_url(0) + "/robots.txt", timeout=0.5)
        time.sleep(0.1)
        assert [e.status for e in running.log.entries()] == [499]  # the client gave up
        with pytest.raises(httpx.ReadTimeout):  # a second one is pending at shutdown
            httpx.get(running.base_url(0) + "/robots.txt", timeout=0.2)
    assert time.monotonic() - started < 5


def test_redirect_chains_end_on_a_page_and_loops_loop(clock):
    web, serving = _serve_one(clock, HostBehaviour(redirect_share=0.5), pages=60)
    with serving as running, httpx.Client() as client:
        redirecting = [
            u
            for u in running.page_urls(0)
            if web.traits(0, int(u.rsplit("/", 1)[1])).redirect_to is not None
        ]
        assert redirecting
        for url in redirecting[:10]:
            first = client.get(url)
            assert first.status_code in (301, 302) and first.headers["location"].endswith(
                "/p/" + str(int(url.rsplit("/", 1)[1]) + 1)
            )
            final = client.get(url, follow_redirects=True)
            assert final.status_code == 200
            assert extract_record(final.text) == web.record(url)
        with pytest.raises(httpx.TooManyRedirects):
            client.get(running.base_url(0) + "/loop/0", follow_redirects=True)


def test_latency_slow_and_huge_pages(clock):
    web = SandboxWeb.generate(
        hosts=3,
        pages_per_host=3,
        behaviours={
            0: HostBehaviour(latency_s=0.2, latency_jitter_s=0.1),
            1: HostBehaviour(slow_share=1.0, slow_extra_s=0.3),
            2: HostBehaviour(huge_share=1.0, huge_bytes=300_000),
        },
        clock=clock,
    )
    with serve_sandbox(web) as running, httpx.Client() as client:
        for i, least in ((0, 0.2), (0, 0.2), (1, 0.3)):
            started = time.monotonic()
            client.get(running.page_urls(i)[0])
            assert time.monotonic() - started >= least
            assert running.log.entries()[-1].duration >= least
        # jitter, read where it is decided (the responder's delay, before any timing noise)
        responder = Responder(web, running.port)
        request = parse_request(bytearray(b"GET /p/0 HTTP/1.1\r\n\r\n"))[0]
        delays = [responder.respond(0, request, time.monotonic()).delay for _ in range(20)]
        assert all(0.2 <= d < 0.3 for d in delays) and len(set(delays)) == 20
        huge = client.get(running.page_urls(2)[0])
        assert len(huge.content) >= 300_000
        assert extract_record(huge.text) == web.record(running.page_urls(2)[0])
