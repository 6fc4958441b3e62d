"""The fake scraping API (plan limits: 429 concurrency, 509 credits) and the forward proxy."""

from __future__ import annotations

import asyncio

import httpx

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox
from tests.sandbox.conftest import extract_record


def _web(clock, **behaviour):
    return SandboxWeb.generate(
        hosts=3, pages_per_host=10, seed=1, default=HostBehaviour(**behaviour), clock=clock
    )


def test_api_returns_the_target_and_charges_one_credit_per_success(clock):
    web = _web(clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        running.api.credits = 10
        url = running.page_urls(1)[2]
        answer = client.get(running.api_url + "/fetch", params={"url": url})
        assert answer.status_code == 200 and answer.headers["x-target-status"] == "200"
        assert extract_record(answer.text) == web.record(url)
        assert running.api.credits == 9 and answer.headers["x-credits-remaining"] == "9"
        etag = answer.headers["etag"]
        again = client.get(
            running.api_url + "/fetch", params={"url": url}, headers={"If-None-Match": etag}
        )
        assert again.status_code == 304 and running.api.credits == 8  # 304s are charged
        missing = client.get(running.api_url + "/fetch", params={"url": url + "999"})
        assert missing.status_code == 404 and running.api.credits == 8  # failures are free
        entries = running.log.entries()
        assert [e.via for e in entries] == ["api", "api", "api"]
        assert entries[1].headers["if-none-match"] == etag
        assert {e.host for e in entries} == {running.host(1)}


def test_api_concurrency_cap_answers_429_with_plan_limit(clock):
    web = _web(clock, latency_s=0.3)

    async def burst(running, n):
        async with httpx.AsyncClient() as client:
            calls = [
                client.get(running.api_url + "/fetch", params={"url": running.page_urls(i % 3)[i]})
                for i in range(n)
            ]
            return await asyncio.gather(*calls)

    with serve_sandbox(web) as running:
        running.api.concurrency = 4
        responses = asyncio.run(burst(running, 7))
        refused = [r for r in responses if r.status_code == 429]
        assert len(refused) == 3 and sum(r.status_code == 200 for r in responses) == 4
        assert all(r.headers["x-plan-limit"] == "concurrency" for r in refused)
        assert all(r.headers["retry-after"] == "1" for r in refused)
        assert len(running.log.entries()) == 4  # refused calls never reach a host
        assert running.api.stats().rejected_concurrency == 3


def test_api_credits_exhausted_answers_509(clock):
    web = _web(clock, latency_s=0.1)

    async def burst(running, n):
        async with httpx.AsyncClient() as client:
            calls = [
                client.get(running.api_url + "/fetch", params={"url": running.page_urls(0)[i]})
                for i in range(n)
            ]
            return await asyncio.gather(*calls)

    with serve_sandbox(web) as running:
        running.api.credits = 3
        statuses = sorted(r.status_code for r in asyncio.run(burst(running, 5)))
        assert statuses == [200, 200, 200, 509, 509]  # in flight at once: never overspent
        assert running.api.credits == 0
        later = httpx.get(running.api_url + "/fetch", params={"url": running.page_urls(0)[0]})
        assert later.status_code == 509 and later.headers["x-plan-limit"] == "credits"


def test_api_and_proxy_reach_only_sandbox_hosts(clock):
    web = _web(clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        outside = client.get(running.api_url + "/fetch", params={"url": "http://example.com/"})
        assert outside.status_code == 502
        assert client.get(running.api_url + "/fetch").status_code == 400
        assert client.get(running.api_url + "/other").status_code == 404
    with serve_sandbox(web) as running, httpx.Client(proxy=running.proxy_url) as client:
        assert client.get("http://127.0.1.1:1/p/0").status_code == 502  # wrong port
        assert running.log.entries() == []


def test_proxy_forwards_absolute_form_requests_with_the_host_behaviour(clock):
    web = _web(clock, throttle_concurrency=1, latency_s=0.2)

    async def through_proxy(running):
        async with httpx.AsyncClient(proxy=running.proxy_url) as client:
            urls = [running.page_urls(0)[0], running.page_urls(0)[1], running.page_urls(2)[0]]
            return await asyncio.gather(*(client.get(u) for u in urls))

    with serve_sandbox(web) as running:
        running.api.concurrency = 1  # plan limits are the API's, not the proxy's
        responses = asyncio.run(through_proxy(running))
        assert sorted(r.status_code for r in responses) == [200, 200, 429]  # host 0 throttles
        assert extract_record(responses[2].text) == web.record(running.page_urls(2)[0])
        entries = running.log.entries()
        assert {e.via for e in entries} == {"proxy"}
        assert sorted(e.path for e in entries) == ["/p/0", "/p/0", "/p/1"]
        assert max(e.in_flight for e in entries if e.host == running.host(0)) == 2
