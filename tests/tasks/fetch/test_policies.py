"""Pure politeness policies: pacing, AIMD, backoff, retries, Retry-After (no sockets)."""

import random
from datetime import UTC, datetime

import pytest

from models.fetching.host_state import HostState, Signal
from models.fetching.politeness import (
    AimdLimit,
    PacingPolicy,
    RetryPolicy,
    ThrottleBackoff,
    is_retryable,
    parse_retry_after,
)


def test_pacing_gap_is_ten_times_the_last_fetch_within_bounds():
    pacing = PacingPolicy(factor=10.0, min_delay_s=1.0, max_delay_s=30.0)
    assert pacing.gap(0.05) == 1.0  # fast host: the floor
    assert pacing.gap(0.5) == pytest.approx(5.0)
    assert pacing.gap(10.0) == 30.0  # very slow host: the ceiling
    assert pacing.gap(0.05, crawl_delay_s=7.0) == 7.0  # Crawl-delay is a minimum


def test_pacing_rejects_inverted_bounds():
    with pytest.raises(ValueError, match="min <= max"):
        PacingPolicy(min_delay_s=5.0, max_delay_s=1.0)


def test_aimd_halves_on_throttle_and_grows_one_slot_per_round():
    limit = AimdLimit(limit=8.0, floor=0.125, ceiling=8.0)
    limit = limit.after_throttle()
    assert limit.limit == 4.0 and limit.slots == 4
    # Additive: four successes at limit 4 add one slot (one per full round).
    for _ in range(3):
        limit = limit.after_success()
        assert limit.slots == 4
    limit = limit.after_success()
    assert limit.limit == pytest.approx(5.0)
    # Back to the ceiling takes 5 + 6 + 7 more successes, never beyond it.
    for _ in range(5 + 6 + 7):
        limit = limit.after_success()
    assert limit.limit == pytest.approx(8.0)
    assert limit.after_success().limit == 8.0


def test_aimd_below_one_slot_stretches_the_gap_and_recovers_additively():
    limit = AimdLimit(limit=1.0, floor=0.125, ceiling=1.0)
    limit = limit.after_throttle().after_throttle()
    assert limit.limit == 0.25 and limit.slots == 1 and limit.gap_stretch == 4.0
    for _ in range(10):
        limit = limit.after_throttle()
    assert limit.limit == 0.125  # the floor holds
    steps = 0
    while limit.limit < 1.0:
        limit = limit.after_success()
        steps += 1
    assert steps == 7  # +floor per success: slow recovery
    with pytest.raises(ValueError, match="outside"):
        AimdLimit(limit=2.0, floor=0.5, ceiling=1.0)


def test_throttle_backoff_prefers_retry_after_capped_then_doubles_with_jitter():
    backoff = ThrottleBackoff(base_s=60.0, cap_s=3600.0, retry_after_cap_s=600.0, jitter=0.1)
    rng = random.Random(1)
    assert backoff.pause(1, 30.0, rng) == 30.0
    assert backoff.pause(1, 10_000.0, rng) == 600.0  # capped
    pauses = [backoff.pause(n, None, rng) for n in (1, 2, 3)]
    for n, pause in zip((1, 2, 3), pauses, strict=True):
        assert 0.9 * 60 * 2 ** (n - 1) <= pause <= 1.1 * 60 * 2 ** (n - 1)
    assert backoff.pause(50, None, rng) <= 3600.0 * 1.1


def test_retry_delay_is_exponential_with_jitter():
    policy = RetryPolicy(max_attempts=4, base_s=1.0, cap_s=10.0)
    rng = random.Random(2)
    for attempt, ceiling in ((1, 1.0), (2, 2.0), (3, 4.0), (6, 10.0)):
        delays = [policy.delay(attempt, rng) for _ in range(50)]
        assert all(ceiling / 2 <= d <= ceiling for d in delays)
        assert len(set(delays)) > 40  # jittered: a failed wave does not retry together


@pytest.mark.parametrize(
    ("outcome", "status", "expected"),
    [
        ("timeout", None, True),
        ("throttled", 429, True),
        ("throttled", 503, True),
        ("error", None, True),  # network error
        ("error", 500, True),
        ("error", 408, True),
        ("error", 403, False),
        ("error", 400, False),
        ("gone", 404, False),
        ("robots_denied", None, False),
        ("too_large", 200, False),
        ("bad_content_type", 200, False),
        ("decompression_bomb", 200, False),
        ("redirect_loop", 302, False),
        ("ok", 200, False),
    ],
)
def test_only_what_can_succeed_is_retried(outcome, status, expected):
    assert is_retryable(outcome, status) is expected


def test_retry_after_seconds_and_http_date():
    now = datetime(2026, 1, 1, 12, 0, 0, tzinfo=UTC)
    assert parse_retry_after("120") == 120.0
    assert parse_retry_after("Thu, 01 Jan 2026 12:00:30 GMT", now) == 30.0
    assert parse_retry_after("Thu, 01 Jan 2026 11:00:00 GMT", now) == 0.0
    assert parse_retry_after("soon") is None
    assert parse_retry_after(None) is None


def _finish(state, now, duration, signal, retry_after=None):
    state.finish(
        now,
        duration,
        signal,
        pacing=PacingPolicy(10.0, 0.5, 5.0),
        backoff=ThrottleBackoff(2.0, 60.0, 30.0, 0.0),
        slow_factor=2.0,
        retry_after_s=retry_after,
        rng=random.Random(0),
    )


def test_host_state_one_slot_waits_for_the_pacing_gap():
    state = HostState(AimdLimit(1.0, 0.125, 1.0))
    assert state.slot_free_at(0.0) == 0.0
    state.start()
    assert state.slot_free_at(0.1) is None  # in flight: only a completion frees the slot
    _finish(state, 0.2, 0.2, Signal.SUCCESS)
    assert state.slot_free_at(0.3) == pytest.approx(2.2)  # 10 x 0.2 s after the end
    assert state.slot_free_at(2.3) == 2.3


def test_host_state_throttle_pauses_halves_and_retry_after_wins():
    state = HostState(AimdLimit(4.0, 0.125, 4.0))
    state.start()
    _finish(state, 1.0, 0.01, Signal.THROTTLED, retry_after=7.0)
    assert state.limit.limit == 2.0
    assert state.paused_until == 8.0
    assert state.consecutive_throttles == 1
    state.start()
    _finish(state, 9.0, 0.01, Signal.THROTTLED)  # no header: base 2 s, doubled
    assert state.paused_until == pytest.approx(13.0)
    state.start()
    _finish(state, 14.0, 0.01, Signal.SUCCESS)
    assert state.consecutive_throttles == 0


def test_host_state_plan_refusal_touches_nothing():
    state = HostState(AimdLimit(2.0, 0.125, 2.0))
    state.start()
    _finish(state, 1.0, 0.5, Signal.NOT_SENT)
    assert state.limit.limit == 2.0 and state.paused_until == 0.0
    assert state.cooling == [] and state.requests == 0 and state.in_flight == 0


def test_rising_latency_stops_the_limit_from_growing():
    state = HostState(AimdLimit(1.0, 0.125, 4.0))
    for t in range(5):
        state.start()
        _finish(state, float(t), 0.01, Signal.SUCCESS)
    grown = state.limit.limit
    state.start()
    _finish(state, 10.0, 1.0, Signal.SUCCESS)  # 100x the usual latency
    assert state.limit.limit == grown


def test_one_congestion_event_halves_once():
    state = HostState(AimdLimit(8.0, 0.125, 8.0))
    for _ in range(4):
        state.start()
    _finish_sent(state, 1.0, Signal.THROTTLED, sent_at=0.5)
    _finish_sent(state, 1.1, Signal.THROTTLED, sent_at=0.5)  # sent before the decrease
    _finish_sent(state, 1.2, Signal.TIMEOUT, sent_at=0.6)
    assert state.limit.limit == 4.0
    assert state.consecutive_throttles == 1
    _finish_sent(state, 2.0, Signal.THROTTLED, sent_at=1.5)  # sent after it: a new event
    assert state.limit.limit == 2.0 and state.consecutive_throttles == 2


def _finish_sent(state, now, signal, sent_at):
    state.finish(
        now,
        0.01,
        signal,
        pacing=PacingPolicy(10.0, 0.5, 5.0),
        backoff=ThrottleBackoff(2.0, 60.0, 30.0, 0.0),
        slow_factor=2.0,
        retry_after_s=None,
        rng=random.Random(0),
        sent_at=sent_at,
    )
