"""The sandbox web as a pure model: change processes, rates, ground truth, clock."""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta

import numpy as np
import pytest

from sandbox import HostBehaviour, SandboxWeb, SimClock, host_address, host_index
from sandbox.changes import ChangeProcess, draw_rate, page_key
from tests.sandbox.conftest import START


def _url(i: int, j: int, port: int = 8080) -> str:
    return f"http://{host_address(i)}:{port}/p/{j}"


def test_host_addresses_follow_the_rule_and_round_trip():
    assert host_address(0) == "127.0.1.1"
    assert host_address(249) == "127.0.1.250"
    assert host_address(250) == "127.0.2.1"
    assert all(host_index(host_address(i)) == i for i in (0, 1, 249, 250, 999, 63_000))
    assert host_index("127.0.0.1") is None  # the API/proxy address is no host
    assert host_index("10.0.0.1") is None


def test_version_counts_changes_and_matches_the_change_times(clock):
    web = SandboxWeb.generate(hosts=2, pages_per_host=30, seed=3, clock=clock)
    end = START + timedelta(days=60)
    for j in range(30):
        url = _url(1, j)
        changes = web.changes_between(url, START, end)
        assert web.version(url, end) - web.version(url, START) == len(changes)
        assert changes == sorted(changes)
        if changes:  # the version steps exactly at each change
            t, ms = changes[0], timedelta(milliseconds=1)
            assert web.version(url, t + ms) == web.version(url, t - ms) + 1
            assert web.last_change(url, t + timedelta(seconds=1)) == t


def test_truth_does_not_depend_on_query_order_or_other_pages():
    times = [START + timedelta(days=d) for d in (400, 3, 90, 0.5, 200)]
    a = SandboxWeb.generate(hosts=3, pages_per_host=20, seed=7)
    b = SandboxWeb.generate(hosts=5, pages_per_host=40, seed=7)  # more pages, same seed
    forward = [a.version(_url(2, 5), t) for t in times]
    backward = [b.version(_url(2, 5), t) for t in reversed(times)][::-1]
    assert forward == backward
    assert a.true_rate(_url(2, 5)) == b.true_rate(_url(2, 5))
    assert a.record(_url(2, 5), times[0]) == b.record(_url(2, 5), times[0])
    other = SandboxWeb.generate(hosts=3, pages_per_host=20, seed=8)
    assert other.record(_url(2, 5), times[0]) != a.record(_url(2, 5), times[0])


def test_records_differ_between_versions_and_agree_within_one():
    web = SandboxWeb.generate(hosts=1, pages_per_host=200, seed=1)
    fast = max(range(200), key=lambda j: web.true_rate(_url(0, j)))
    url = _url(0, fast)
    changes = web.changes_between(url, START, START + timedelta(days=10))
    assert len(changes) >= 3
    before = web.record(url, changes[1] - timedelta(seconds=1))
    assert before == web.record(url, changes[0] + timedelta(seconds=1))  # same version
    assert before != web.record(url, changes[1] + timedelta(seconds=1))  # next version
    assert set(before) == {"title", "price", "availability", "body"}


def test_empirical_change_counts_over_a_year_match_the_true_rates():
    """Per band of true rate, the changes counted over 365 days are Poisson(rate x 365)."""
    web = SandboxWeb.generate(hosts=20, pages_per_host=40, seed=11)
    urls = [_url(i, j) for i in range(20) for j in range(40)]
    rates = np.array([web.true_rate(u) for u in urls])
    end = START + timedelta(days=365)
    counts = np.array([web.version(u, end) - web.version(u, START) for u in urls])
    expected = rates * 365
    for low, high in ((0, 0.01), (0.01, 0.1), (0.1, 1.0), (1.0, 100.0)):
        band = (rates >= low) & (rates < high)
        assert band.sum() >= 20, f"too few pages in band [{low}, {high})"
        mean, seen = expected[band].sum(), counts[band].sum()
        assert abs(seen - mean) < 4.5 * math.sqrt(mean) + 2, (low, high, seen, mean)
    # Poisson, not just the right mean: the share of pages without a change in 30 days.
    quiet = np.array(
        [web.version(u, START + timedelta(days=30)) == web.version(u, START) for u in urls]
    )
    p_quiet = np.exp(-rates * 30)
    assert abs(quiet.sum() - p_quiet.sum()) < 4.5 * math.sqrt((p_quiet * (1 - p_quiet)).sum())


def test_rates_look_like_the_measured_web():
    rates = np.array([draw_rate(page_key(0, 0, j)) for j in range(4000)])
    assert 0.35 < np.mean(rates < 1 / 100) < 0.55  # practically static
    assert 0.12 < np.mean(rates >= 1.0) < 0.30  # daily or faster
    assert rates.min() > 0 and rates.max() <= 48


def test_change_process_is_exact_poisson_across_blocks():
    process = ChangeProcess(key=12345, rate=5.0)  # blocks of 3.2 days
    times = process.changes_between(0.0, 2_000.0)
    gaps = np.diff(times)
    assert abs(len(times) - 10_000) < 4.5 * 100
    assert abs(gaps.mean() - 0.2) < 0.01 and abs(gaps.std() - 0.2) < 0.01  # exponential
    assert process.count(1_000.0) == sum(t <= 1_000.0 for t in times)
    assert process.last_change(1_000.0) == max(t for t in times if t <= 1_000.0)


def test_traits_follow_the_behaviour_shares():
    behaviour = HostBehaviour(redirect_share=0.3, slow_share=0.5, huge_share=1.0, rate_scale=2.0)
    web = SandboxWeb.generate(hosts=2, pages_per_host=200, seed=2, behaviours={1: behaviour})
    traits = [web.traits(1, j) for j in range(200)]
    assert 0.15 < np.mean([t.redirect_to is not None for t in traits]) < 0.45
    assert 0.35 < np.mean([t.slow for t in traits]) < 0.65
    assert all(t.huge for t in traits)
    assert traits[-1].redirect_to is None  # chains always end
    assert not any(web.traits(0, j).redirect_to or web.traits(0, j).slow for j in range(200))
    plain = SandboxWeb.generate(hosts=2, pages_per_host=200, seed=2)
    assert web.traits(1, 7).rate == pytest.approx(2 * plain.traits(1, 7).rate)
    chained = next(t for t in traits if t.redirect_to is not None)
    final = web.final_page(1, chained.page)
    assert web.traits(1, final).redirect_to is None and final > chained.page
    assert web.true_rate(_url(1, chained.page)) == web.traits(1, final).rate


def test_bad_input_is_refused_with_a_clear_error():
    with pytest.raises(ValueError, match="validators"):
        HostBehaviour(validators="sometimes")  # type: ignore[arg-type]
    with pytest.raises(ValueError, match="throttle_status"):
        HostBehaviour(throttle_status=500)
    with pytest.raises(ValueError, match="hosts that do not exist"):
        SandboxWeb.generate(hosts=2, pages_per_host=3, behaviours={5: HostBehaviour()})
    web = SandboxWeb.generate(hosts=2, pages_per_host=3)
    with pytest.raises(ValueError, match="unknown host"):
        web.version("http://example.com/p/1")
    with pytest.raises(ValueError, match="not a page URL"):
        web.version(_url(0, 3))
    with pytest.raises(ValueError, match="timezone-aware"):
        SimClock(start=datetime(2026, 1, 1))


def test_clock_moves_only_when_told_or_with_its_speed():
    clock = SimClock(start=START)
    assert clock.now() == START
    assert clock.advance(days=1, hours=2) == START + timedelta(days=1, hours=2)
    clock.set(START)
    assert clock.now() == START
    with pytest.raises(ValueError):
        clock.advance(days=-1)
    flowing = SimClock(start=START, speed=86_400 * 1000)  # 1000 days per second
    later = flowing.now()
    assert later > START
    assert later.tzinfo == UTC
