"""The recrawl cycle's rendering probe (``probe_cycle_hosts``): the cycle's hosts due for a
verdict, on pages it fetched; nothing without a Chromium; a real one judges a JavaScript host."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pandas as pd
import pyarrow as pa
import pytest

from models.discovery.render_need import RenderVerdict
from models.discovery.urls import normalize, url_id
from models.schemas import HISTORY_SCHEMA
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.fetch.render import browser_executable
from tasks.render import hosts as render_hosts
from tasks.render.hosts import RenderHosts, cycle_pages_by_host, probe_cycle_hosts
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore
from tests.tasks.cycle.conftest import SETTINGS

START = datetime(2026, 1, 1, tzinfo=UTC)


def _store(root, urls, outcomes):
    CatalogStore(root).upsert(
        pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
    )
    n = len(urls)
    rows = {
        "url_id": [url_id(normalize(u)) for u in urls],
        "host": [urlsplit(u).netloc for u in urls],
        "cycle_id": [0] * n,
        "fetched_at": [START] * n,
        "outcome": outcomes,
    }
    table = pa.table(
        {f.name: rows.get(f.name, pa.nulls(n, f.type)) for f in HISTORY_SCHEMA}, HISTORY_SCHEMA
    )
    HistoryStore(root).write_cycle(0, table)


def test_only_due_hosts_pages_the_cycle_fetched_are_probed(tmp_path, monkeypatch):
    urls = [f"http://a.test/p/{i}" for i in range(5)] + [f"http://b.test/p/{i}" for i in range(2)]
    _store(tmp_path, urls, ["ok"] * 4 + ["error"] + ["ok"] * 2)
    pages = cycle_pages_by_host(tmp_path, 0, per_host=3)
    assert sorted(pages) == ["a.test", "b.test"] and len(pages["a.test"]) == 3
    assert len(pages["b.test"]) == 2
    asked = {}

    def fake_probe(root, urls_by_host, now, **kwargs):
        asked.update(urls_by_host)
        verdicts = {h: RenderVerdict(h, False, 3, 1.0, 0.0) for h in urls_by_host}
        updated = RenderHosts.read(root).merged(verdicts, now)
        updated.write(root)
        return updated

    monkeypatch.setattr(render_hosts, "probe_due_hosts", fake_probe)
    monkeypatch.setattr(render_hosts, "browser_executable", lambda: "/usr/bin/chromium")
    # b.test was judged a week ago: not due; a.test never was
    RenderHosts({}, {}).merged(
        {"b.test": RenderVerdict("b.test", False, 3, 1.0, 0.0)}, START
    ).write(tmp_path)
    probe = probe_cycle_hosts(tmp_path, 0, START + timedelta(days=7))
    assert (probe.hosts, probe.due, probe.probed) == (2, 1, 1)
    assert list(asked) == ["a.test"] and "http://a.test/p/4" not in asked["a.test"]
    # the next cycle finds nothing due: nothing probed
    asked.clear()
    again = probe_cycle_hosts(tmp_path, 0, START + timedelta(days=8))
    assert (again.due, again.probed) == (0, 0) and asked == {}


def test_without_a_browser_nothing_is_probed_and_it_says_why(tmp_path, monkeypatch):
    _store(tmp_path, ["http://a.test/p/1", "http://a.test/p/2"], ["ok", "ok"])
    monkeypatch.setattr(render_hosts, "browser_executable", lambda: None)
    probe = probe_cycle_hosts(tmp_path, 0, START)
    assert (probe.due, probe.probed) == (1, 0) and "Chromium" in probe.skipped
    assert RenderHosts.read(tmp_path).verdicts == {}


@pytest.mark.skipif(
    browser_executable() is None, reason="no headless Chromium at /usr/bin/chromium"
)
def test_a_real_probe_after_a_cycle_finds_the_javascript_host(tmp_path):
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
        _store(tmp_path, urls, ["ok"] * len(urls))
        probe = probe_cycle_hosts(tmp_path, 0, START, settings=SETTINGS)
    assert probe.probed == 2
    assert RenderHosts.read(tmp_path).rendered == {urlsplit(running.base_url(1)).netloc}
