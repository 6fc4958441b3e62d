"""Rendering in a recrawl cycle: a host batch of a JavaScript-only host, with its verdict in the
store, commits the rendered record (the truth's); a plain host's batch never starts a browser."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import pandas as pd
import pytest

from models.content.extract import extract
from models.discovery.render_need import RenderVerdict
from models.discovery.urls import normalize, url_id
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from sandbox.content import Noise, render_page
from tasks.cycle.work import commit_cycle, fixed_clock, run_host_batch, split_plan
from tasks.fetch.render import browser_executable
from tasks.render.hosts import RenderHosts
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore
from tests.tasks.cycle.conftest import SETTINGS

START = datetime(2026, 1, 1, tzinfo=UTC)
NOISE = Noise("2026-01-01T00:00:00+00:00", "0" * 16, "0" * 24, 1, 7)


def _server_side_hash(web: SandboxWeb, url: str) -> str:
    """The default record of the page's true fields as a plain host serves them."""
    i, j = web.locate(url)
    body = render_page(web.traits(i, j).key, web.version(url), j, (), NOISE)
    return extract(body, "text/html", normalize(url)).record_hash


@pytest.mark.skipif(
    browser_executable() is None, reason="no headless Chromium at /usr/bin/chromium"
)
def test_a_cycle_commits_the_rendered_record_of_a_javascript_host(tmp_path):
    web = SandboxWeb.generate(
        2,
        4,
        seed=9,
        default=HostBehaviour(cross_host_links=False),
        behaviours={1: HostBehaviour(rendering="inline_json", cross_host_links=False)},
        clock=SimClock(START),
    )
    with serve_sandbox(web) as running:
        urls = running.page_urls()
        hosts = [urlsplit(u).netloc for u in urls]
        CatalogStore(tmp_path).upsert(pd.DataFrame({"url": urls, "host": hosts}))
        ids = [url_id(normalize(u)) for u in urls]
        plan = tmp_path / "plan.parquet"
        pd.DataFrame({"url_id": ids, "host": hosts, "score": 1.0, "reason": "due"}).to_parquet(plan)
        js = urlsplit(running.base_url(1)).netloc
        RenderHosts({}, {}).merged({js: RenderVerdict(js, True, 3, 0.0, 900.0)}, START).write(
            tmp_path
        )
        for spec in split_plan(tmp_path, 0, str(plan)):
            run_host_batch(
                tmp_path, 0, spec.name, settings=SETTINGS, clock=fixed_clock(START), warc=False
            )
        commit_cycle(tmp_path, 0)
        browser = [e for e in running.log.entries() if "sec-fetch-mode" in e.headers]
    rows = {r["url_id"]: r for r in HistoryStore(tmp_path).read([0]).to_pylist()}
    for url in urls:
        row = rows[url_id(normalize(url))]
        assert row["outcome"] == "ok", row["reason"]
        # both hosts' rows hold the record of the true fields: rendered on the script host
        assert row["record_hash"] == _server_side_hash(web, url), url
    assert browser and {e.host for e in browser} == {js}  # the plain host never met it
    assert all(e.headers["user-agent"] == SETTINGS.user_agent for e in browser)
