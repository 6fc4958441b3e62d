"""Signals through the store on the sandbox: sitemaps and feeds re-read before a plan, evidence
after the fetches, and the plan that follows reordering only the honest host's revisits."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from models.discovery.urls import normalize, url_id
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.planning import plan_cycle
from tasks.discovery.feeds import known_feeds
from tasks.discovery.lastmod_trust import (
    read_feed_entries,
    read_lastmod_evidence,
    record_signal_evidence,
)
from tasks.discovery.run import discover_sync
from tasks.discovery.signals import SignalSchedule, due_hosts, refresh_signals_sync
from tasks.store.history import HistoryStore
from tests.tasks.discovery.conftest import FAST, KINDS, START, fetch_rows
from tests.tasks.fetch.conftest import quick_settings


def test_the_cycle_reads_signals_learns_trust_and_reorders_the_honest_host(tmp_path):
    web = SandboxWeb.generate(
        hosts=3,
        pages_per_host=30,
        seed=11,
        default=HostBehaviour(rate_scale=0.7, cross_host_links=False, feed_entries=0),
        behaviours={
            i: HostBehaviour(
                sitemap_lastmod=k, rate_scale=0.7, cross_host_links=False, feed_entries=0
            )
            for i, k in enumerate(KINDS)
        },
        clock=SimClock(start=START),
    )
    days = [START + timedelta(days=2 * k) for k in range(4)]
    fetch = quick_settings()
    with serve_sandbox(web) as running:
        seeds = [running.base_url(i) + "/" for i in range(3)]
        urls = [u for i in range(3) for u in running.page_urls(i)]
        hosts = [running.base_url(i)[7:] for i in range(3)]
        discover_sync(tmp_path, seeds=seeds, settings=FAST, now=START)
        store = HistoryStore(tmp_path)
        store.write_cycle(0, fetch_rows(urls, days[0], 0))
        for cycle in (1, 2):  # signals read, every page fetched, evidence recorded
            web.clock.set(days[cycle])
            refreshed = refresh_signals_sync(tmp_path, days[cycle], fetch=fetch)
            store.write_cycle(cycle, fetch_rows(urls, days[cycle], cycle))
            counts = record_signal_evidence(tmp_path, cycle)
            assert counts["feed"] == 0  # no feeds here
            if cycle == 1:
                assert refreshed.due == 3 and refreshed.sitemaps_read >= 3
                assert counts["lastmod"] == 90
            else:  # "now" and stale were constant over changed and unchanged pages: weekly
                assert refreshed.due == 1
                assert counts["lastmod"] == 30  # only the host read since the last visits
        web.clock.set(days[3])
        refresh_signals_sync(tmp_path, days[3], fetch=fetch)
        plan = plan_cycle(tmp_path, 3, budget=15, now=days[3], seed=1, host_capacity=10)
        without = plan_cycle(
            tmp_path,
            3,
            budget=15,
            now=days[3],
            seed=1,
            host_capacity=10,
            signals=False,
            adhoc_name="without-signals",
        )
    evidence = read_lastmod_evidence(tmp_path).to_pandas()
    assert sorted(evidence["cycle_id"].unique()) == [1, 2]
    chosen = pd.read_parquet(plan.path)
    plain = pd.read_parquet(without.path)
    # the honest host's 30 pages carry a signal the fetches proved; the liars' none
    assert 0 < plan.summary["signalled_pages"] <= 30
    for liar in hosts[1:]:
        assert sorted(chosen[chosen.host == liar].url_id) == sorted(
            plain[plain.host == liar].url_id
        )
    honest = chosen[chosen.host == hosts[0]]
    assert len(honest) == len(plain[plain.host == hosts[0]])
    truth = {
        url_id(normalize(u)): bool(web.changes_between(u, days[2], days[3]))
        for u in running.page_urls(0)
    }
    mine = [i for i in honest.url_id if i in truth]  # (the home page has no truth)
    theirs = [i for i in plain[plain.host == hosts[0]].url_id if i in truth]
    changed_share = sum(truth[i] for i in mine) / max(len(mine), 1)
    plain_share = sum(truth[i] for i in theirs) / max(len(theirs), 1)
    # its revisits went to the pages that changed, as many as the host's share allows
    assert changed_share == 1.0 and plain_share < 1.0, (changed_share, plain_share, len(mine))


def test_feeds_are_found_on_home_pages_read_and_settled_hosts_wait(tmp_path):
    web = SandboxWeb.generate(
        1, 20, seed=4, default=HostBehaviour(feed_entries=5), clock=SimClock(START)
    )
    with serve_sandbox(web) as running:
        discover_sync(tmp_path, seeds=[running.base_url(0) + "/"], settings=FAST, now=START)
        assert known_feeds(tmp_path).num_rows == 1
        web.clock.advance(days=3)
        later = START + timedelta(days=3)
        refreshed = refresh_signals_sync(tmp_path, later, fetch=quick_settings())
    assert refreshed.feeds.read == 1 and refreshed.feeds.entries == 5
    entries = read_feed_entries(tmp_path)
    assert entries.num_rows == 5
    host = running.base_url(0)[7:]
    schedule = SignalSchedule()
    # read just now: not due again within the cycle; due a day later
    assert due_hosts(tmp_path, [host], later + timedelta(hours=2), schedule) == []
    assert due_hosts(tmp_path, [host], later + timedelta(days=1), schedule) == [host]


def test_a_host_whose_signal_tells_nothing_is_read_weekly(tmp_path):
    from datetime import UTC, datetime

    import pyarrow as pa

    from tasks.discovery.lastmod_trust import EVIDENCE_FILE, EVIDENCE_SCHEMA
    from tasks.discovery.signals import _note_reads
    from tasks.store.catalog import CatalogStore
    from tasks.store.durable import durable_write_parquet

    stamp = datetime(2026, 1, 1, tzinfo=UTC)
    CatalogStore(tmp_path).upsert(
        pd.DataFrame(
            {
                "url": ["http://now.test/a", "http://honest.test/a", "http://none.test/a"],
                "host": ["now.test", "honest.test", "none.test"],
                "lastmod": pd.array([stamp, stamp, None], dtype="datetime64[us, UTC]"),
            }
        )
    )
    counts = {  # "now": every revisit signalled, changed or not; honest: signal = change
        "cycle_id": [1, 1],
        "host": ["now.test", "honest.test"],
        "signaled_changed": [6, 6],
        "signaled_unchanged": [9, 0],
        "quiet_changed": [0, 0],
        "quiet_unchanged": [0, 9],
    }
    durable_write_parquet(pa.table(counts, EVIDENCE_SCHEMA), tmp_path / EVIDENCE_FILE)
    hosts = ["honest.test", "none.test", "now.test", "new.test"]
    _note_reads(tmp_path, hosts[:3], stamp)
    schedule = SignalSchedule()
    # a day later: the honest host again, the never-read one; "now" and no-lastmod wait
    assert due_hosts(tmp_path, hosts, stamp + timedelta(days=1), schedule) == [
        "honest.test",
        "new.test",
    ]
    assert due_hosts(tmp_path, hosts, stamp + timedelta(days=7), schedule) == hosts
