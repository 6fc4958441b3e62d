"""A sandbox host's feed read as a change signal: what it says matches the ground truth."""

from __future__ import annotations

from datetime import timedelta

import httpx

from models.discovery.feeds import changed_since, feed_links, parse_feed
from models.discovery.urls import normalize
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tests.tasks.discovery.conftest import START


def test_feed_entries_mark_exactly_the_pages_changed_since_a_visit():
    web = SandboxWeb.generate(
        1, 40, seed=8, default=HostBehaviour(feed_entries=15), clock=SimClock(START)
    )
    visit = START
    web.clock.advance(days=2)
    with serve_sandbox(web) as running, httpx.Client() as client:
        home = running.base_url(0) + "/"
        [feed_url] = feed_links(home, client.get(home).content)
        answer = client.get(feed_url)
    entries = parse_feed(answer.content, answer.headers["content-type"], feed_url)
    assert len(entries) == 15
    said = 0
    for url in running.page_urls(0):
        signal = changed_since(entries, normalize(url), visit)
        truth = bool(web.changes_between(url, visit, START + timedelta(days=2)))
        if signal is None:  # not listed: no signal (only the 15 newest are)
            continue
        assert signal == truth, url
        said += signal
    assert said > 0
