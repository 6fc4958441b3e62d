"""Sitemap lastmod and feeds given to the deployed planner in the backtest
(``models.backtest.signals.compare_signals``): liars never move it, honest signals pay."""

import numpy as np
import pytest

from models.backtest.signals import SignalClock, SignalMix, compare_signals
from models.backtest.web import DayChanges

LIARS = SignalMix(honest=0.0, noisy=0.0, stale=0.4, now=0.4)  # and 20% without lastmod
HONEST = SignalMix(honest=1.0, noisy=0.0, stale=0.0, now=0.0)
LYING_KINDS = ("stale", "now", "missing")


def test_a_web_whose_sitemaps_all_lie_is_planned_exactly_as_without_them():
    runs = compare_signals(
        "tight", 600, mix=LIARS, days=20, seed=3, variants=("planner", "planner+lastmod")
    )
    off, on = runs["planner"], runs["planner+lastmod"]
    assert on.freshness == off.freshness and on.cost_per_change == off.cost_per_change
    assert on.freshness_by_kind == off.freshness_by_kind
    assert on.reads_per_day > 0  # the sitemaps were read (and their reads are counted)
    assert on.cost_per_change_with_reads > on.cost_per_change


def test_an_honest_sitemap_buys_freshness_beyond_the_planners_own_noise():
    """The bound: the freshness two signal-off runs differ by when only the planner's
    verification seed differs (the planner's own noise on this web), ten times over."""
    runs = compare_signals(
        "tight", 1000, mix=HONEST, days=30, seed=0, variants=("planner", "planner+lastmod")
    )
    again = compare_signals(
        "tight", 1000, mix=HONEST, days=30, seed=0, variants=("planner",), planner_seed=1000
    )
    noise = abs(again["planner"].freshness - runs["planner"].freshness)
    gain = runs["planner+lastmod"].freshness - runs["planner"].freshness
    assert gain > 10 * noise and gain > 0.02


def test_the_feed_lists_each_hosts_newest_changes_and_sitemaps_follow_their_kind():
    hosts = np.array([0, 0, 0, 1, 1, 1], dtype=np.int64)
    kinds = np.array([0, 3], dtype=np.int64)  # honest, "now"
    clock = SignalClock(
        hosts, np.full(6, 0.5), kinds, np.array([True, False]), feed_entries=2, seed=1
    )
    first = np.array([0.2, np.inf, 0.7, 0.1, np.inf, np.inf])
    clock.advance(4, DayChanges(first, np.isfinite(first).astype(np.int64), first))
    feed = clock.feed()
    assert feed[0] == pytest.approx(4.2) and feed[2] == pytest.approx(4.7)
    assert np.isnan(feed[1]) and np.isnan(feed[3:]).all()  # not among the 2 newest; no feed
    lastmod = clock.sitemap(5.0)
    assert lastmod[0] == pytest.approx(4.2) and lastmod[1] < 0  # honest: the last change
    assert lastmod[3:].tolist() == [5.0, 5.0, 5.0]  # "now": the reading's time


@pytest.mark.long_backtest
def test_lastmod_never_makes_the_planner_worse_on_hosts_where_it_lies():
    """Mixed webs (honest, noisy, stale, "now", none), paired on the same seeds: on the hosts
    whose lastmod lies or is absent, the freshness with the signal on minus off, averaged
    over the seeds, is not below minus three standard errors of the planner's own noise
    (two signal-off runs differing only in the verification seed, one pair per seed)."""
    seeds = range(4)
    deltas, noise = [], []
    for seed in seeds:
        runs = compare_signals(
            "tight", 2000, seed=seed, days=40, variants=("planner", "planner+lastmod")
        )
        again = compare_signals(
            "tight", 2000, seed=seed, days=40, variants=("planner",), planner_seed=seed + 1000
        )
        off, on, off2 = runs["planner"], runs["planner+lastmod"], again["planner"]
        liars = [k for k in LYING_KINDS if k in off.freshness_by_kind]
        deltas.append(np.mean([on.freshness_by_kind[k] - off.freshness_by_kind[k] for k in liars]))
        noise.append(np.mean([off2.freshness_by_kind[k] - off.freshness_by_kind[k] for k in liars]))
    sigma = float(np.sqrt(np.mean(np.square(noise))))
    assert float(np.mean(deltas)) >= -3 * sigma / np.sqrt(len(deltas)), (deltas, noise)
