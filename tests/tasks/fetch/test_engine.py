"""The engine end to end against the sandbox: robots.txt, retries, guard rails, shedding, rows."""

import gzip
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pyarrow as pa
import pytest

from models.schemas import HISTORY_SCHEMA
from sandbox import HostBehaviour
from tasks.fetch.engine import EngineState, FetchRequest
from tasks.store.history import HistoryStore
from tests.tasks.fetch.conftest import by_host, quick_settings, run, sandbox


def outcomes_of(result, urls):
    rows = {r["url_id"]: r for r in result.rows.to_pylist()}
    from models.discovery.urls import normalize, url_id

    return [rows[url_id(normalize(u))]["outcome"] for u in urls]


def test_robots_404_allows_500_and_timeout_disallow():
    behaviours = {
        0: HostBehaviour(robots="404"),
        1: HostBehaviour(robots="500"),
        2: HostBehaviour(robots="timeout", robots_timeout_s=5.0),
        3: HostBehaviour(robots="redirect", robots_redirects=3),
    }
    with sandbox(hosts=4, pages=3, behaviours=behaviours) as sb:
        settings = quick_settings(robots_timeout_s=0.3)
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    assert outcomes_of(result, sb.page_urls(0)) == ["ok"] * 3
    assert outcomes_of(result, sb.page_urls(1)) == ["robots_denied"] * 3
    assert outcomes_of(result, sb.page_urls(2)) == ["robots_denied"] * 3
    assert outcomes_of(result, sb.page_urls(3)) == ["ok"] * 3  # redirects followed
    reasons = {r["host"]: r["reason"] for r in result.rows.to_pylist()}
    assert "HTTP 500" in reasons[sb.host(1)] and "disallow all" in reasons[sb.host(1)]
    assert "timeout" in reasons[sb.host(2)]
    # From the hosts' side: no page request ever reached the disallowed hosts.
    for i in (1, 2):
        paths = [e.path for e in by_host(entries, sb.host(i))]
        assert all(p.startswith("/robots") for p in paths), paths
    # One robots.txt fetch per host (the timed-out one may be logged late), sent with the
    # descriptive User-Agent.
    robots = [e for e in entries if e.path == "/robots.txt"]
    assert {sb.host(0), sb.host(1), sb.host(3)} <= {e.host for e in robots}
    assert len(robots) == len({e.host for e in robots})
    assert all("+https://" in e.headers["user-agent"] for e in robots)


def test_robots_rules_and_cache_across_batches():
    with sandbox(hosts=1, pages=3) as sb:
        state = EngineState(quick_settings())
        private = sb.base_url(0) + "/private/7"
        first = run([*sb.page_urls(0), private], quick_settings(), state=state)
        second = run(sb.page_urls(0), quick_settings(), state=state)
        entries = sb.log.entries()
    assert outcomes_of(first, [private]) == ["robots_denied"]
    assert first.rows.to_pylist()[-1]["reason"] == "disallowed by robots.txt"
    assert all(o == "ok" for o in outcomes_of(second, sb.page_urls(0)))
    assert sum(e.path == "/robots.txt" for e in entries) == 1  # cached for the 2nd batch
    assert not any(e.path.startswith("/private/") for e in entries)


def test_no_retries_for_what_cannot_succeed():
    with sandbox(hosts=1, pages=2) as sb:
        base = sb.base_url(0)
        urls = [base + "/p/9999", base + "/nowhere", base + "/private/1", *sb.page_urls(0)]
        result = run(urls, quick_settings(max_attempts=5))
        entries = sb.log.entries()
    assert outcomes_of(result, urls) == ["gone", "gone", "robots_denied", "ok", "ok"]
    assert result.rows.column("retries").to_pylist() == [0] * 5
    paths = [e.path for e in entries]
    assert paths.count("/p/9999") == 1 and paths.count("/nowhere") == 1
    assert "/private/1" not in paths
    assert result.metrics.retries == 0 and result.metrics.retry_ratio == 0.0


def test_retry_budget_caps_retries_per_batch():
    failing = HostBehaviour(throttle_rate=0.5, throttle_burst=1.0, throttle_status=503)
    with sandbox(hosts=1, pages=6, behaviours={0: failing}) as sb:
        settings = quick_settings(
            retry_budget_min=2, retry_budget_ratio=0.0, max_attempts=10, throttle_backoff_s=0.02
        )
        result = run(sb.page_urls(), settings)
    metrics = result.metrics
    assert metrics.retries == 2 == metrics.retry_budget
    assert metrics.retries_refused >= 1
    assert metrics.outcomes.get("throttled", 0) >= 1
    throttled = [r for r in result.rows.to_pylist() if r["outcome"] == "throttled"]
    assert all(r["status"] == 503 for r in throttled)


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_guard_rails_give_distinct_outcomes_with_reasons(transport):
    with sandbox(hosts=2, pages=2, behaviours={1: HostBehaviour(huge_share=1.0)}) as sb:
        json_url = sb.base_url(0) + "/api/item/0.json"
        loop_url = sb.base_url(0) + "/loop/0"
        huge_url = sb.page_urls(1)[0]
        settings = quick_settings(
            accepted_content_types=("text/html",),
            max_body_bytes=100_000,
            max_redirects=5,
            http_transport=transport,
        )
        result = run([json_url, loop_url, huge_url, sb.page_urls(0)[0]], settings)
    rows = result.rows.to_pylist()
    assert [r["outcome"] for r in rows] == ["bad_content_type", "redirect_loop", "too_large", "ok"]
    assert "application/json" in rows[0]["reason"]
    assert "/loop/0" in rows[1]["reason"]
    assert "100000" in rows[2]["reason"]
    assert all(r["retries"] == 0 for r in rows)


class _BombHandler(BaseHTTPRequestHandler):
    bomb = gzip.compress(b"\0" * (64 * 1024 * 1024), compresslevel=9)

    def do_GET(self):
        if self.path != "/bomb":
            self.send_response(404)
            self.send_header("Content-Length", "0")
            self.end_headers()
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/html")
        self.send_header("Content-Encoding", "gzip")
        self.send_header("Content-Length", str(len(self.bomb)))
        self.end_headers()
        self.wfile.write(self.bomb)

    def log_message(self, *args):
        pass


@pytest.fixture
def bomb_server():
    server = ThreadingHTTPServer(("127.0.0.1", 0), _BombHandler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("transport", ["aiohttp", "httpx"])
def test_gzip_bomb_is_refused(bomb_server, transport):
    settings = quick_settings(max_body_bytes=5_000_000, http_transport=transport)
    result = run([bomb_server + "/bomb"], settings)
    row = result.rows.to_pylist()[0]
    assert row["outcome"] == "decompression_bomb"
    assert "inflates" in row["reason"]
    assert row["bytes"] < 200_000  # stopped long before 64 MiB were produced


def test_shedding_records_the_lowest_priorities_as_shed():
    slowish = HostBehaviour(latency_s=0.05)
    with sandbox(hosts=1, pages=20, default=slowish) as sb:
        urls = sb.page_urls(0)
        requests = [FetchRequest(u, priority=float(i)) for i, u in enumerate(urls)]
        settings = quick_settings(min_delay_s=0.15, max_delay_s=0.15)
        result = run(requests, settings, window_s=1.2)
        entries = sb.log.entries()
    rows = result.rows.to_pylist()
    fetched = [i for i, r in enumerate(rows) if r["outcome"] == "ok"]
    shed = [i for i, r in enumerate(rows) if r["outcome"] == "shed"]
    assert len(fetched) + len(shed) == 20
    assert 2 <= len(fetched) <= 8 and shed
    assert min(fetched) > max(shed)  # only the lowest priorities were shed
    assert all(rows[i]["bytes"] == 0 and rows[i]["reason"] for i in shed)
    assert result.metrics.shed == len(shed)
    # Not fetched late: nothing reached the host after the window (plus one request).
    start = min(e.at for e in entries)
    assert max(e.done for e in entries) - start < 1.2 + 0.2


def test_rows_conform_to_the_history_schema_and_store(tmp_path):
    behaviours = {0: HostBehaviour(set_cookie=True), 1: HostBehaviour(robots="500")}
    with sandbox(hosts=2, pages=3, behaviours=behaviours) as sb:
        settings = quick_settings(concurrency=1)
        result = run([*sb.page_urls(), "not a url"], settings, cycle_id=5)
        entries = sb.log.entries()
    table = result.rows
    assert table.schema.equals(HISTORY_SCHEMA)
    assert table.num_rows == 7
    assert table.column("cycle_id").to_pylist() == [5] * 7
    ok = [r for r in table.to_pylist() if r["outcome"] == "ok"]
    assert all(r["record_hash"] and r["bytes"] > 1000 and r["etag"] for r in ok)
    assert all(r["latency_s"] > 0 and r["cost"] > 0 for r in ok)
    # Pages set a session cookie; a crawler never sends it back.
    assert not any("cookie" in e.headers for e in entries)
    assert table.to_pylist()[-1]["outcome"] == "error"
    assert "bad URL" in table.to_pylist()[-1]["reason"]
    store = HistoryStore(tmp_path)
    commit = store.write_cycle(5, table)
    assert commit.rows == 7 and commit.observations == 3
    back = store.read([5])
    assert back.num_rows == 7
    assert sorted(back.column("reason").drop_null().to_pylist())[0]
    assert pa.compute.sum(back.column("bytes")).as_py() == pa.compute.sum(table["bytes"]).as_py()


def test_proxy_mode_goes_through_the_forward_proxy():
    with sandbox(hosts=2, pages=2) as sb:
        settings = quick_settings(mode="proxy", proxy_url=sb.proxy_url)
        result = run(sb.page_urls(), settings)
        entries = sb.log.entries()
    assert result.metrics.outcomes == {"ok": 4}
    assert {e.via for e in entries} == {"proxy"}


def test_total_timeout_is_an_outcome_retried_once_and_halves_the_host():
    slow = HostBehaviour(slow_share=1.0, slow_extra_s=3.0)
    with sandbox(hosts=1, pages=1, behaviours={0: slow}) as sb:
        settings = quick_settings(
            request_timeout_s=0.3,
            max_attempts=2,
            host_concurrency_start=2.0,
            host_concurrency_ceiling=2.0,
        )
        result = run(sb.page_urls(), settings)
    row = result.rows.to_pylist()[0]
    assert row["outcome"] == "timeout" and row["retries"] == 1
    assert "0.3 s" in row["reason"]
    assert 0.3 <= row["latency_s"] < 1.0  # the attempt was cut, not waited out
    assert result.metrics.hosts[sb.host(0)].lowest_limit == 0.5  # halved by each timeout


def test_loopback_is_refused_unless_allowed():
    settings = quick_settings(allowed_networks=())  # the default: no allow-list
    result = run(["http://127.0.0.1:9/x", "http://localhost:9/y"], settings)
    rows = result.rows.to_pylist()
    assert [r["outcome"] for r in rows] == ["refused_address", "refused_address"]
    assert all("loopback" in r["reason"] for r in rows)
    assert result.metrics.requests == 0 and result.metrics.refused == 2
