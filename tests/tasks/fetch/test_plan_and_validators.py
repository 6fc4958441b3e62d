"""Scraping API plan limits (429 concurrency, 509 credits) and conditional requests."""

from datetime import timedelta

from sandbox import HostBehaviour, ScrapingApi, SimClock
from tasks.fetch.engine import EngineState, FetchRequest
from tests.tasks.fetch.conftest import article_hash, by_host, quick_settings, run, sandbox


def test_plan_level_429_slows_the_api_lane_but_no_host():
    api = ScrapingApi(concurrency=2)
    slow = HostBehaviour(latency_s=0.05)
    with sandbox(hosts=4, pages=6, api=api, default=slow) as sb:
        settings = quick_settings(
            mode="api",
            api_url=sb.api_url,
            api_concurrency=8,
            concurrency=8,
            host_concurrency_start=2.0,
            host_concurrency_ceiling=2.0,
            delay_factor=0.0,
            api_plan_backoff_s=0.05,
            max_attempts=3,
            retry_budget_ratio=2.0,
        )
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
        stats = api.stats()
    metrics = result.metrics
    assert metrics.outcomes == {"ok": 24}
    assert stats.rejected_concurrency >= 1 and metrics.plan_throttles >= 1
    assert metrics.plan_limit is not None and metrics.plan_limit < 8  # the API lane slowed
    for pressure in metrics.hosts.values():  # ...and not one host limiter did
        assert pressure.throttles == 0
        assert pressure.lowest_limit == 2.0 and pressure.limit == 2.0
        assert pressure.paused_s == 0.0
    assert {e.via for e in entries} == {"api"}
    assert all(e.status == 200 for e in entries)  # no host ever refused anything


def test_509_stops_the_batch_and_records_every_unsent_url():
    api = ScrapingApi(credits=6)
    with sandbox(hosts=3, pages=5, api=api) as sb:
        settings = quick_settings(mode="api", api_url=sb.api_url, concurrency=2)
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        stats = api.stats()
        entries = sb.log.entries()
    rows = result.rows.to_pylist()
    assert len(rows) == 15  # every URL has its row
    outcomes = result.metrics.outcomes
    robots_charged = sum(e.path == "/robots.txt" and e.status == 200 for e in entries)
    assert outcomes.get("ok", 0) + robots_charged == stats.charged == 6
    assert outcomes.get("api_exhausted", 0) >= 1
    assert outcomes.get("ok", 0) + outcomes.get("api_exhausted", 0) + outcomes["shed"] == 15
    assert result.metrics.plan_stopped
    shed = [r for r in rows if r["outcome"] == "shed"]
    assert all("509" in r["reason"] and r["bytes"] == 0 for r in shed)
    # Stopped cleanly: only requests already in flight met the 509, nothing was sent after.
    assert stats.rejected_credits <= settings.concurrency


def test_conditional_requests_get_304_and_carry_the_record(engine_state):
    clock = SimClock()
    with sandbox(hosts=1, pages=8, clock=clock) as sb:
        settings = quick_settings(validator_min_probes=2, validator_probe_rate=0.0)
        state = EngineState(settings)
        first = run(sb.page_urls(), settings, state=state, clock=clock.now)
        clock.advance(seconds=60)  # a minute later: (almost surely) nothing changed
        previous = first.rows.to_pylist()
        requests = [
            FetchRequest(
                u, etag=r["etag"], last_modified=r["last_modified"], record_hash=r["record_hash"]
            )
            for u, r in zip(sb.page_urls(), previous, strict=True)
        ]
        sb.log.clear()
        second = run(requests, settings, state=state, clock=clock.now)
        entries = by_host(sb.log.entries(), sb.host(0))
    rows = second.rows.to_pylist()
    assert [r["outcome"] for r in rows].count("ok") == 2  # the two probes
    assert [r["outcome"] for r in rows].count("not_modified") == 6
    for old, new in zip(previous, rows, strict=True):
        assert new["record_hash"] == old["record_hash"]  # unchanged, carried over
        if new["outcome"] == "not_modified":
            assert new["status"] == 304 and new["changed"] is False and new["etag"]
    conditional = [e for e in entries if "if-none-match" in e.headers]
    assert len(conditional) == 6
    assert all("if-modified-since" in e.headers for e in conditional)
    assert second.metrics.hosts[sb.host(0)].validators_trusted


def _second_visit(behaviour, *, pages=12, days=400, probes=4):
    clock = SimClock()
    with sandbox(hosts=1, pages=pages, default=behaviour, clock=clock) as sb:
        settings = quick_settings(validator_min_probes=probes, validator_probe_rate=0.0)
        state = EngineState(settings)
        first = run(sb.page_urls(), settings, state=state, clock=clock.now)
        clock.advance(days=days)
        requests = [
            FetchRequest(
                u, etag=r["etag"], last_modified=r["last_modified"], record_hash=r["record_hash"]
            )
            for u, r in zip(sb.page_urls(), first.rows.to_pylist(), strict=True)
        ]
        changed = [
            sb.web.version(u, clock.now() - timedelta(days=days)) != sb.web.version(u)
            for u in sb.page_urls()
        ]
        sb.log.clear()
        second = run(requests, settings, state=state, clock=clock.now)
        entries = by_host(sb.log.entries(), sb.host(0))
    return second, entries, changed, sb.host(0)


def assert_conditional_headers_dropped(entries):
    """Page requests carried If-None-Match for a while, then never again."""
    flags = ["if-none-match" in e.headers for e in entries if e.path.startswith("/p/")]
    assert True in flags, "no conditional request was ever sent: the test proves nothing"
    stopped = flags.index(False, flags.index(True))
    assert not any(flags[stopped:])


def test_lying_validators_are_detected_and_no_longer_trusted():
    second, entries, changed, host = _second_visit(HostBehaviour(validators="lying"))
    assert sum(changed[:4]) >= 1, "no probed page changed: the test proves nothing"
    pressure = second.metrics.hosts[host]
    assert not pressure.validators_trusted
    assert "unchanged validator" in pressure.validator_doubt
    # After the first hidden change, no conditional header went to that host again.
    first_lie = next(i for i, c in enumerate(changed) if c)
    assert not any("if-none-match" in e.headers for e in entries[first_lie + 1 :])
    # Every page that changed was observed as changed (no 304 hid it).
    rows = second.rows.to_pylist()
    for row, did_change in zip(rows, changed, strict=True):
        assert row["outcome"] in ("ok", "not_modified")
        if did_change and row["outcome"] == "not_modified":
            raise AssertionError("a 304 hid a real change")


def test_volatile_and_ignored_validators_are_dropped_honest_ones_kept():
    volatile, entries_v, _, host = _second_visit(
        HostBehaviour(validators="volatile"), days=0, probes=1
    )
    assert not volatile.metrics.hosts[host].validators_trusted
    assert "without a record change" in volatile.metrics.hosts[host].validator_doubt
    assert_conditional_headers_dropped(entries_v)
    ignored, entries_i, _, host = _second_visit(HostBehaviour(validators="ignored"), days=0)
    assert not ignored.metrics.hosts[host].validators_trusted
    assert "ignored" in ignored.metrics.hosts[host].validator_doubt
    assert_conditional_headers_dropped(entries_i)
    honest, _entries_h, changed, host = _second_visit(HostBehaviour(validators="honest"))
    assert honest.metrics.hosts[host].validators_trusted
    rows = honest.rows.to_pylist()
    for row, did_change in zip(rows[4:], changed[4:], strict=True):
        assert row["outcome"] == ("ok" if did_change else "not_modified")


def test_article_hash_ignores_noise():
    body = b'<p>served 1</p><article class="product">x</article><aside>ad 7</aside>'
    other = b'<p>served 2</p><article class="product">x</article><aside>ad 9</aside>'
    assert article_hash(body, "text/html") == article_hash(other, "text/html")
