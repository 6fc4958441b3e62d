"""The request log sees politeness from the server's side: in-flight counts, headers, times."""

from __future__ import annotations

import asyncio
import socket

import httpx

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox


async def _get_all(urls: list[str]) -> list[int]:
    async with httpx.AsyncClient() as client:  # one connection per concurrent request
        return [r.status_code for r in await asyncio.gather(*(client.get(u) for u in urls))]


def test_in_flight_counts_concurrent_requests_per_host(clock):
    web = SandboxWeb.generate(
        hosts=5, pages_per_host=8, default=HostBehaviour(latency_s=0.3), clock=clock
    )
    with serve_sandbox(web) as running:
        assert asyncio.run(_get_all(running.page_urls(0)[:4])) == [200] * 4
        one_host = running.log.entries()
        assert sorted(e.in_flight for e in one_host) == [1, 2, 3, 4]
        assert {e.host for e in one_host} == {running.host(0)}
        running.log.clear()
        assert asyncio.run(_get_all([running.page_urls(i)[0] for i in range(1, 5)])) == [200] * 4
        four_hosts = running.log.entries()
        assert [e.in_flight for e in four_hosts] == [1, 1, 1, 1]
        assert {e.host for e in four_hosts} == {running.host(i) for i in range(1, 5)}
        for e in four_hosts:  # they overlapped in time, and each took its latency
            assert e.done - e.at >= 0.3
            assert max(x.at for x in four_hosts) < e.done


def test_records_carry_the_request_as_sent(clock):
    web = SandboxWeb.generate(hosts=1, pages_per_host=3, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        client.get(running.base_url(0) + "/p/1?ref=x", headers={"User-Agent": "testbot/1.0"})
        client.head(running.base_url(0) + "/robots.txt")
        first, second = running.log.entries()
        assert (first.method, first.path, first.status, first.via) == (
            "GET",
            "/p/1?ref=x",
            200,
            "direct",
        )
        assert first.headers["user-agent"] == "testbot/1.0"
        assert (second.method, second.path) == ("HEAD", "/robots.txt")
        assert first.at <= first.done <= second.at


def test_pipelined_requests_are_answered_in_order_on_one_connection(clock):
    web = SandboxWeb.generate(
        hosts=1, pages_per_host=3, default=HostBehaviour(latency_s=0.05), clock=clock
    )
    with serve_sandbox(web) as running:
        with socket.create_connection(running.host(0).split(":")) as sock:
            request = "GET /p/{} HTTP/1.1\r\nHost: x\r\nAccept-Encoding: identity\r\n\r\n"
            sock.sendall((request.format(0) + request.format(1) + request.format(2)).encode())
            sock.settimeout(5)
            data = b""
            while data.count(b"</html>") < 3:
                data += sock.recv(65536)
        assert data.count(b"HTTP/1.1 200 OK") == 3
        assert (
            data.index(b'data-page="0"')
            < data.index(b'data-page="1"')
            < data.index(b'data-page="2"')
        )
        assert [e.path for e in running.log.entries()] == ["/p/0", "/p/1", "/p/2"]
        assert [e.in_flight for e in running.log.entries()] == [1, 1, 1]


def test_malformed_requests_get_400_and_the_connection_closes(clock):
    web = SandboxWeb.generate(hosts=1, pages_per_host=3, clock=clock)
    with serve_sandbox(web) as running:
        with socket.create_connection(running.host(0).split(":")) as sock:
            sock.sendall(b"NONSENSE\r\n\r\n")
            sock.settimeout(5)
            reply = sock.recv(65536)
            assert reply.startswith(b"HTTP/1.1 400 ")
            assert sock.recv(65536) == b""  # closed
        assert running.log.entries() == []  # never reached the host


def test_held_requests_are_answered_only_once_released(clock):
    """hold() lets a test catch a client mid-request without racing it: requests arrive and
    wait (counted by n_held, not logged) until release(); a client gone meanwhile is dropped."""
    import threading
    import time

    web = SandboxWeb.generate(hosts=2, pages_per_host=4, clock=clock)
    with serve_sandbox(web) as running:
        running.hold()
        statuses: list[int] = []
        urls = running.page_urls(0)[:3]
        client = threading.Thread(target=lambda: statuses.extend(asyncio.run(_get_all(urls))))
        client.start()
        deadline = time.monotonic() + 60
        while running.n_held < 3 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert running.n_held == 3
        assert statuses == [] and len(running.log) == 0  # nothing answered while held
        with httpx.Client() as robots:  # robots.txt is answered, unless hold(robots=True)
            assert robots.get(running.base_url(1) + "/robots.txt").status_code in (200, 404)
        assert len(running.log) == 1
        with socket.create_connection((running.host(1).split(":")[0], running.port)) as sock:
            sock.sendall(b"GET /p/0 HTTP/1.1\r\nHost: x\r\n\r\n")
            while running.n_held < 4 and time.monotonic() < deadline:
                time.sleep(0.01)
        while running.n_held > 3 and time.monotonic() < deadline:  # the client went away
            time.sleep(0.01)
        assert running.n_held == 3
        running.release()
        client.join(60)
        assert statuses == [200] * 3 and running.n_held == 0
        assert sorted(e.path for e in running.log.entries()[1:]) == sorted(
            u.split(str(running.port))[1] for u in urls
        )
