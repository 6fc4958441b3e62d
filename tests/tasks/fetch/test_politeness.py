"""Politeness proven from the sandbox's own request log (what the hosts actually saw)."""

import itertools

import pytest

from sandbox import HostBehaviour
from tests.tasks.fetch.conftest import by_host, quick_settings, run, sandbox

TOLERANCE_S = 0.003  # both sides read the same monotonic clock; allow scheduling noise


def test_concurrency_per_host_never_exceeds_its_limit():
    with sandbox(hosts=3, pages=24, default=HostBehaviour(latency_s=0.03)) as sb:
        settings = quick_settings(  # no pacing gap: only the concurrency limit holds
            concurrency=12,
            host_concurrency_start=3.0,
            host_concurrency_ceiling=3.0,
            delay_factor=0.0,
        )
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    assert result.metrics.outcomes == {"ok": 72}
    for i in range(3):
        seen = by_host(entries, sb.host(i))
        assert len(seen) == 25  # robots.txt + 24 pages, nothing twice
        assert max(e.in_flight for e in seen) <= 3
        assert max(e.in_flight for e in seen) == 3  # the allowance was used
        assert result.metrics.hosts[sb.host(i)].max_in_flight == 3


def test_default_is_one_request_at_a_time_with_a_gap_of_ten_fetch_durations():
    behaviours = {0: HostBehaviour(latency_s=0.02), 1: HostBehaviour(latency_s=0.005)}
    with sandbox(hosts=2, pages=6, behaviours=behaviours) as sb:
        settings = quick_settings(concurrency=8, min_delay_s=0.1, max_delay_s=1.0)
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    assert result.metrics.outcomes == {"ok": 12}
    for i in range(2):
        seen = by_host(entries, sb.host(i))
        assert all(e.in_flight == 1 for e in seen)
        for before, after in itertools.pairwise(seen):
            gap = after.at - before.done
            # The client measures at least what the server spent, so its 10x is at least
            # 10x the server's duration; never below the configured minimum.
            assert gap >= max(0.1, 10 * before.duration) - TOLERANCE_S, (before, after)


def test_crawl_delay_is_honoured_and_capped():
    behaviours = {0: HostBehaviour(crawl_delay_s=0.3), 1: HostBehaviour(crawl_delay_s=60)}
    with sandbox(hosts=2, pages=3, behaviours=behaviours) as sb:
        settings = quick_settings(crawl_delay_cap_s=0.4, max_delay_s=0.05)
        run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    for i, expected in ((0, 0.3), (1, 0.4)):
        seen = by_host(entries, sb.host(i))
        assert len(seen) == 4
        gaps = [b.at - a.done for a, b in itertools.pairwise(seen)]
        assert min(gaps) >= expected - TOLERANCE_S
        assert max(gaps) < expected + 0.3  # capped: a 60 s Crawl-delay is not honoured


def test_retry_after_is_respected_and_the_page_is_retried():
    throttled = HostBehaviour(throttle_rate=2.0, throttle_burst=1.0, retry_after_s=1.0)
    with sandbox(hosts=2, pages=3, behaviours={0: throttled}) as sb:
        settings = quick_settings(concurrency=4, retry_budget_min=10, max_attempts=4)
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    seen = by_host(entries, sb.host(0))
    refusals = [e for e in seen if e.status == 429]
    assert refusals, "the host never throttled: the test proves nothing"
    for refusal in refusals:
        later = [e for e in seen if e.at > refusal.at]
        if later:
            assert later[0].at - refusal.done >= 1.0 - TOLERANCE_S
    rows = result.rows.to_pylist()
    assert all(r["outcome"] == "ok" for r in rows)
    assert sum(r["retries"] for r in rows) == len(refusals)  # each refusal cost one retry
    assert result.metrics.retries == len(refusals)
    assert result.metrics.retry_ratio == pytest.approx(len(refusals) / result.metrics.requests)
    # Routing: only the throttling host paid for it.
    assert result.metrics.hosts[sb.host(0)].throttles == len(refusals)
    assert result.metrics.hosts[sb.host(1)].throttles == 0


def test_aimd_halves_under_throttling_and_recovers_slowly():
    fussy = HostBehaviour(latency_s=0.05, throttle_concurrency=2)
    with sandbox(hosts=2, pages=30, behaviours={0: fussy}) as sb:
        settings = quick_settings(
            concurrency=16,
            delay_factor=1.0,
            host_concurrency_start=8.0,
            host_concurrency_ceiling=8.0,
            throttle_backoff_s=0.05,
            throttle_backoff_cap_s=0.2,
            max_attempts=6,
            retry_budget_ratio=1.0,
        )
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
        entries = sb.log.entries()
    assert result.metrics.outcomes == {"ok": 60}
    fussy_pressure = result.metrics.hosts[sb.host(0)]
    assert fussy_pressure.lowest_limit <= 4.0  # halved from 8 (the arithmetic: unit tests)
    assert fussy_pressure.throttles >= 2
    seen = by_host(entries, sb.host(0))
    first_refusal = next(i for i, e in enumerate(seen) if e.status == 429)
    assert max(e.in_flight for e in seen[: first_refusal + 1]) > 2  # it started above 2
    after = seen[first_refusal + 1 :]
    # Additive increase: back above 4 in flight would take many rounds of successes,
    # so the host is never hammered at the old level again.
    assert max(e.in_flight for e in after) <= 4
    # After the first burst the limit saw-tooths just under what the host tolerates: most
    # requests succeed, and the limit climbed back above its lowest point.
    assert sum(e.status == 429 for e in after) <= len(after) // 2
    assert fussy_pressure.limit > fussy_pressure.lowest_limit
    healthy = result.metrics.hosts[sb.host(1)]
    assert healthy.throttles == 0 and healthy.lowest_limit == 8.0


def test_a_slow_host_does_not_hold_up_the_others():
    behaviours = {0: HostBehaviour(latency_s=0.3)}
    with sandbox(hosts=4, pages=4, behaviours=behaviours) as sb:
        settings = quick_settings(concurrency=2, max_delay_s=0.2)
        urls = sb.page_urls(0) + sb.page_urls(1) + sb.page_urls(2) + sb.page_urls(3)
        result = run(urls, settings, clock=sb.clock.now)
        entries = sb.log.entries()
    assert result.metrics.outcomes == {"ok": 16}
    slow = by_host(entries, sb.host(0))
    fast_done = max(e.done for i in (1, 2, 3) for e in by_host(entries, sb.host(i)))
    # With two workers, the fast hosts' 15 requests finish while the slow host is still
    # on its third request: one worker is all the slow host ever holds.
    assert fast_done < slow[3].done
    assert all(e.in_flight == 1 for e in slow)
    # Pressure metrics: everything was queued at the start (16 pages + 4 robots.txt), the
    # slow host's pages waited for seconds, and ready hosts waited for one of two workers.
    metrics = result.metrics
    assert metrics.max_queue_depth == 20
    assert metrics.max_oldest_age_s >= 1.0
    assert metrics.max_dispatch_lag_s > 0.0
    assert metrics.hosts[sb.host(0)].requests == 5 and metrics.hosts[sb.host(1)].requests == 5


def test_challenge_pages_slow_down_only_that_host():
    challenger = HostBehaviour(throttle_rate=3.0, throttle_burst=1.0, challenge_when_throttled=True)
    with sandbox(hosts=2, pages=5, behaviours={0: challenger}) as sb:
        settings = quick_settings(max_attempts=5, retry_budget_min=20)
        result = run(sb.page_urls(), settings, clock=sb.clock.now)
    pressure = result.metrics.hosts[sb.host(0)]
    assert pressure.throttles >= 1
    rows = result.rows.to_pylist()
    assert all(r["outcome"] == "ok" for r in rows)  # retried after backing off
    assert result.metrics.hosts[sb.host(1)].throttles == 0
