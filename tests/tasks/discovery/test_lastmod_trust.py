"""Sitemap lastmod trust learned on the sandbox: honest, "now" and stale sitemaps, against the
ground truth of which pages changed (``tasks.discovery.lastmod_trust``)."""

from __future__ import annotations

from datetime import timedelta

import numpy as np
import pytest

from models.discovery.urls import normalize, url_id
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.discovery.lastmod_trust import (
    lastmod_likelihood_ratios,
    read_lastmod_evidence,
    record_lastmod_evidence,
)
from tasks.discovery.run import discover_sync
from tasks.store.history import HistoryStore
from tests.tasks.discovery.conftest import FAST, KINDS, START, fetch_rows


def test_lastmod_trust_follows_what_the_fetches_found(tmp_path):
    web = SandboxWeb.generate(
        hosts=3,
        pages_per_host=20,
        seed=5,
        default=HostBehaviour(rate_scale=3.0, cross_host_links=False),
        behaviours={
            i: HostBehaviour(sitemap_lastmod=k, rate_scale=3.0, cross_host_links=False)
            for i, k in enumerate(KINDS)
        },
        clock=SimClock(start=START),
    )
    later = START + timedelta(days=2)
    with serve_sandbox(web) as running:
        seeds = [running.base_url(i) + "/" for i in range(3)]
        urls = [u for i in range(3) for u in running.page_urls(i)]
        discover_sync(tmp_path, seeds=seeds, settings=FAST)
        store = HistoryStore(tmp_path)
        store.write_cycle(0, fetch_rows(urls, START, 0))
        web.clock.set(later)
        discover_sync(tmp_path, seeds=seeds, settings=FAST)  # the sitemaps read again
        store.write_cycle(1, fetch_rows(urls, later, 1))
    counts = record_lastmod_evidence(tmp_path, 1).to_pylist()
    assert [c["host"] for c in counts] == [running.base_url(i)[7:] for i in range(3)]
    truth = [
        sum(bool(web.changes_between(u, START, later)) for u in running.page_urls(i))
        for i in range(3)
    ]
    honest, now, stale = counts
    assert 0 < truth[0] < 20  # some pages changed, some did not
    # honest: the signal is exactly the truth; "now": every page signalled; stale: none
    assert (honest["signaled_changed"], honest["signaled_unchanged"]) == (truth[0], 0)
    assert (honest["quiet_changed"], honest["quiet_unchanged"]) == (0, 20 - truth[0])
    assert now["quiet_changed"] == now["quiet_unchanged"] == 0
    assert now["signaled_changed"] == truth[1]
    assert stale["signaled_changed"] == stale["signaled_unchanged"] == 0
    assert stale["quiet_changed"] == truth[2]

    # re-recording a cycle replaces its counts
    record_lastmod_evidence(tmp_path, 1)
    assert read_lastmod_evidence(tmp_path).num_rows == 3

    ids = [url_id(normalize(u)) for u in urls]
    ratio = lastmod_likelihood_ratios(tmp_path, ids, later + timedelta(hours=1))
    # the pages' signals now (lastmod vs the visit of cycle 1): no change since, so the
    # honest host says "no change" (a ratio below 1, learned), the others move nothing
    # recall and false alarm: Beta means with 10 pseudo-examples at the host's signalled share
    c, n = truth[0], 20
    recall = (c + 10 * c / n) / (c + 10)
    false_alarm = (10 * c / n) / (n - c + 10)
    expected = (1 - recall) / (1 - false_alarm)
    assert expected < 0.7
    np.testing.assert_allclose(ratio[:20], expected, rtol=1e-12)
    assert ratio[20:].tolist() == [1.0] * 40


def test_unreadable_evidence_is_a_one_line_error(tmp_path):
    (tmp_path / "signals").mkdir()
    (tmp_path / "signals" / "lastmod_evidence.parquet").write_bytes(b"not parquet")
    with pytest.raises(ValueError, match="unreadable lastmod evidence"):
        read_lastmod_evidence(tmp_path)
