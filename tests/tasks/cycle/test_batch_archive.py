"""A host batch on the sandbox: per-URL extraction rules apply, and exchanges are archived."""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import pandas as pd
import pytest

from models.content.extract import extract
from models.content.extract_rules import CssRule, ExtractionRules, UrlPattern
from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.archive.read import read_record, read_warc_record
from tasks.archive.warc import PROFILE_NOT_MODIFIED
from tasks.cycle.work import (
    commit_cycle,
    default_record_hasher,
    fixed_clock,
    run_host_batch,
    split_plan,
)
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.05,
    delay_factor=1.0,
    request_timeout_s=5.0,
    robots_timeout_s=2.0,
    retry_base_s=0.05,
    retry_cap_s=0.2,
    seed=1,
    allowed_networks=SANDBOX_NETWORKS,  # the sandbox is on loopback
)
TITLE_ONLY = CssRule({"title": "h1.title"})


@pytest.fixture
def sandbox_web():
    web = SandboxWeb.generate(3, 8, seed=5, default=HostBehaviour(), clock=SimClock(START))
    with serve_sandbox(web) as running:
        yield running


def _plan(root, running) -> str:
    urls = running.page_urls()
    hosts = [urlsplit(u).netloc for u in urls]
    CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    ids = [url_id(normalize(u)) for u in urls]
    path = f"{root}/plan.parquet"
    pd.DataFrame({"url_id": ids, "host": hosts, "score": 1.0, "reason": "due"}).to_parquet(path)
    return path


def _cycle(root, cycle, plan, hasher, at=START, **kwargs):
    """Fetch every batch of the plan at ``at`` and commit; returns the cycle's rows."""
    for spec in split_plan(root, cycle, plan):
        run_host_batch(
            root,
            cycle,
            spec.name,
            settings=SETTINGS,
            clock=fixed_clock(at),
            record_hasher=hasher,
            **kwargs,
        )
    commit_cycle(root, cycle)
    return HistoryStore(root).read([cycle]).to_pylist()


def test_a_host_rule_decides_the_record_hash_in_a_cycle(sandbox_web, tmp_path):
    plan = _plan(tmp_path, sandbox_web)
    ruled = urlsplit(sandbox_web.page_urls(0)[0]).netloc
    rules = ExtractionRules(((UrlPattern(host=ruled), TITLE_ONLY),))
    rows = _cycle(tmp_path, 0, plan, default_record_hasher(rules), warc=False)
    by_id = {r["url_id"]: r for r in rows}
    checked = 0
    for url in sandbox_web.page_urls():
        row = by_id[url_id(normalize(url))]
        if row["outcome"] != "ok":
            continue
        title = str(sandbox_web.web.record(url, START)["title"])  # of the redirect's target too
        # The record of the title alone: what the host's CSS rule hashes.
        title_only = extract(
            f'<h1 class="title">{title}</h1>'.encode(), "text/html", url, rules
        ).record_hash
        assert row["simhash"] is not None
        assert (row["record_hash"] == title_only) == (urlsplit(url).netloc == ruled), url
        assert row["warc_file"] is None and row["warc_offset"] is None
        checked += 1
    assert checked >= 12


def test_archived_records_hold_what_the_engine_saw_and_304s_are_revisits(sandbox_web, tmp_path):
    plan = _plan(tmp_path, sandbox_web)
    seen: dict[str, list[bytes]] = defaultdict(list)
    extractor = default_record_hasher()

    def hasher(body, content_type, url):
        seen[url].append(body)
        return extractor(body, content_type, url)

    first = _cycle(tmp_path, 0, plan, hasher)
    ok = [r for r in first if r["outcome"] == "ok"]
    assert len(ok) >= 20
    for row in ok:
        record = read_warc_record(tmp_path, row["warc_file"], row["warc_offset"])
        assert record.record_type == "response"
        headers, body = read_record(tmp_path, row["warc_file"], row["warc_offset"])
        assert headers.get_statuscode() == "200"
        assert body in seen[record.header("WARC-Target-URI")]  # byte for byte
    assert not list((tmp_path / "warc").rglob("*.tmp"))  # every writer was closed

    later = START + timedelta(minutes=1)  # too soon for most pages to change
    sandbox_web.clock.set(later)
    second = _cycle(tmp_path, 1, plan, hasher, later)
    not_modified = [r for r in second if r["outcome"] == "not_modified"]
    assert len(not_modified) >= 5
    earlier = {r["url_id"]: r for r in ok}
    for row in not_modified:
        record = read_warc_record(tmp_path, row["warc_file"], row["warc_offset"])
        assert record.record_type == "revisit"
        assert record.header("WARC-Profile") == PROFILE_NOT_MODIFIED
        assert record.http_headers is not None and record.http_headers.get_statuscode() == "304"
        # it names the previous cycle's capture of the page (passed through the batch)
        before = earlier[row["url_id"]]
        original = read_warc_record(tmp_path, before["warc_file"], before["warc_offset"])
        assert record.header("WARC-Refers-To") == original.header("WARC-Record-ID")
        assert record.header("WARC-Refers-To-Date") == original.header("WARC-Date")
