"""JavaScript-only hosts: the HTML is a shell without the fields; its data is the truth."""

from __future__ import annotations

import json
import re

import httpx
import pytest

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox
from tests.sandbox.conftest import extract_record, json_record


def _web(clock, mode):
    return SandboxWeb.generate(
        hosts=2,
        pages_per_host=10,
        seed=3,
        behaviours={1: HostBehaviour(rendering=mode)},
        clock=clock,
    )


@pytest.mark.parametrize("mode", ["inline_json", "fetch_json"])
def test_script_pages_carry_no_fields_in_their_html(clock, mode):
    web = _web(clock, mode)
    assert web.behaviour(1).needs_javascript and not web.behaviour(0).needs_javascript
    with serve_sandbox(web) as running, httpx.Client() as client:
        plain = client.get(running.page_urls(0)[3])
        shell = client.get(running.page_urls(1)[3])
        assert extract_record(plain.text) == web.record(running.page_urls(0)[3])
        assert shell.status_code == 200 and "<script>" in shell.text
        with pytest.raises(AssertionError, match="not a sandbox product page"):
            extract_record(shell.text)
        record = web.record(running.page_urls(1)[3])
        assert str(record["title"]) not in shell.text.split('id="state"')[0]  # not in the DOM
        assert 'href="/p/4"' in shell.text  # the navigation stays in the shell


def test_inline_state_is_the_truth(clock):
    web = _web(clock, "inline_json")
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = running.page_urls(1)[5]
        shell = client.get(url).text
        state = re.search(r'<script type="application/json" id="state">(.*?)</script>', shell)
        assert state is not None
        assert json_record(state.group(1).replace("<\\/", "</")) == web.record(url)


def test_fetched_state_is_the_truth(clock):
    web = _web(clock, "fetch_json")
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = running.page_urls(1)[5]
        src = re.search(r'<div id="app" data-src="([^"]+)">', client.get(url).text)
        assert src is not None and src.group(1) == "/api/item/5.json"
        item = client.get(running.base_url(1) + src.group(1))
        assert json_record(item.text) == web.record(url)
        assert json.loads(item.text)["id"] == 5


def test_unknown_rendering_mode_is_refused():
    with pytest.raises(ValueError, match="rendering must be one of"):
        HostBehaviour(rendering="wasm")  # type: ignore[arg-type]


def test_the_feed_lists_the_most_recently_changed_pages_with_their_true_times(clock):
    from datetime import timedelta

    web = SandboxWeb.generate(
        hosts=1, pages_per_host=30, seed=6, default=HostBehaviour(feed_entries=5), clock=clock
    )
    clock.advance(days=3)
    with serve_sandbox(web) as running, httpx.Client() as client:
        home = client.get(running.base_url(0) + "/").text
        assert 'type="application/atom+xml"' in home and 'href="/feed.xml"' in home
        feed = client.get(running.base_url(0) + "/feed.xml")
        assert feed.headers["content-type"] == "application/atom+xml"
        urls = re.findall(r'<link href="([^"]+)"/>', feed.text)
        times = re.findall(r"<entry>.*?<updated>([^<]+)</updated>", feed.text)
    assert len(urls) == 5
    truth = sorted(running.page_urls(0), key=lambda u: web.last_change(u), reverse=True)[:5]
    assert urls == truth
    for url, stamp in zip(urls, times, strict=True):
        assert stamp == web.last_change(url).strftime("%Y-%m-%dT%H:%M:%S+00:00")
    assert web.last_change(truth[-1]) >= max(
        web.last_change(u) for u in running.page_urls(0) if u not in truth
    ) - timedelta(0)
