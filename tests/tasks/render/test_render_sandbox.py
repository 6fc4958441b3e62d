"""A real headless Chromium on JavaScript-only sandbox hosts: probed, rendered, bounded.

Skipped (with the reason) where no Chromium is installed; ``.ci/run`` installs Debian's
``chromium``. One browser per test, a few pages each, so the module takes seconds; every
browser process is gone when a pool closes (checked).
"""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime
from urllib.parse import urlsplit

import pytest

from models.content.extract import extract
from models.content.extract_rules import CssRule, ExtractionRules, UrlPattern
from models.planning.cost import MIB
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from sandbox.content import article_html
from tasks.cycle.work import default_record_hasher
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.render import BrowserPool, RenderSettings, browser_executable, group_pids
from tasks.render.hosts import RenderHosts, probe_render_need
from tasks.render.rows import render_rows
from tests.tasks.fetch.conftest import quick_settings

pytestmark = pytest.mark.skipif(
    browser_executable() is None,
    reason="no headless Chromium at /usr/bin/chromium: apt-get install -y chromium",
)

START = datetime(2026, 1, 1, tzinfo=UTC)
UA = "recrawler-render-test/1.0"
#: The sandbox's real fields, read by CSS (the body's paragraphs one per line).
FIELDS = CssRule(
    {
        "title": "h1.title",
        "price": "p.price::attr(content)",
        "availability": "p.availability",
        "body": "div.description p",
    }
)
RULES = ExtractionRules([(UrlPattern("*"), FIELDS)])


def _web() -> SandboxWeb:
    return SandboxWeb.generate(
        hosts=3,
        pages_per_host=4,
        seed=11,
        behaviours={
            1: HostBehaviour(rendering="inline_json"),
            2: HostBehaviour(rendering="fetch_json"),
        },
        clock=SimClock(start=START),
    )


def _settings(**overrides: object) -> RenderSettings:
    base: dict[str, object] = {
        "allowed_networks": SANDBOX_NETWORKS,
        "user_agent": UA,
        "page_timeout_s": 10.0,
    }
    base.update(overrides)
    return RenderSettings(**base)  # type: ignore[arg-type]


def _host(running, i: int) -> str:
    return urlsplit(running.base_url(i)).netloc


def _truth_record(web: SandboxWeb, url: str):
    """The record of the server-side markup of the page's true fields (a plain host's)."""
    i, j = web.locate(url)
    _, article = article_html(web.traits(i, j).key, web.version(url), j, ())
    record = extract(
        f"<html><body><main>{article}</main></body></html>".encode(), "text/html", url, RULES
    )
    assert _as_truth(record.fields) == web.record(url)
    return record


def _as_truth(fields: dict[str, str]) -> dict[str, object]:
    return {
        "title": fields["title"],
        "price": float(fields["price"]),
        "availability": fields["availability"],
        "body": "\n\n".join(fields["body"].split("\n")),
    }


def test_rendered_records_equal_the_truth_and_plain_hosts_are_never_rendered():
    web = _web()
    with serve_sandbox(web) as running:
        by_host = {_host(running, i): running.page_urls(i) for i in range(3)}

        async def scenario():
            async with BrowserPool(_settings(slots=2, queue_size=2)) as pool:
                verdicts = await probe_render_need(
                    by_host, pool, settings=quick_settings(), rules=RULES, sample=2
                )
                hosts = RenderHosts({}, {}).merged(verdicts, START).rendered
                fetched = await fetch_batch(
                    [FetchRequest(u) for u in urls],
                    cycle_id=1,
                    settings=quick_settings(),
                    record_hasher=default_record_hasher(RULES),
                )
                log_start = len(running.log.entries())
                done = await render_rows(
                    fetched.rows, urls, hosts, rules=RULES, cost_model="bandwidth", pool=pool
                )
                direct = await pool.render_all(picked)
                return verdicts, hosts, fetched.rows, done, direct, log_start, pool.stats, pool.pid

        urls = [u for i in range(3) for u in running.page_urls(i)]
        picked = [running.page_urls(1)[3], running.page_urls(2)[3]]  # one of each mode
        verdicts, hosts, raw_rows, done, direct, log_start, stats, pid = asyncio.run(scenario())
        entries = running.log.entries()

    names = [_host(running, i) for i in range(3)]
    assert [verdicts[h].needs_rendering for h in names] == [False, True, True]
    assert hosts == {names[1], names[2]}
    # the rendered pages' records are the truth, field for field
    for page, url in zip(direct, picked, strict=True):
        assert page.outcome == "ok" and page.status == 200
        assert _as_truth(extract(page.html, "text/html", url, RULES).fields) == web.record(url)
    # ... and every rendered row carries the hash of the truth's record
    rows = done.rows.to_pylist()
    raw = raw_rows.to_pylist()
    assert done.rendered == 8 and done.failed == 0
    for row, before in zip(rows, raw, strict=True):
        assert row["outcome"] == "ok"
        if row["host"] == names[0]:
            assert row == before  # plain host: untouched
        else:
            assert row["record_hash"] != before["record_hash"]  # the shell's record was poor
            assert row["bytes"] > before["bytes"]  # the browser's bytes are billed too
            render_bytes = row["bytes"] - before["bytes"]
            assert row["cost"] == pytest.approx(before["cost"] + render_bytes / MIB, rel=1e-9)
    for row, url in zip(rows[4:], urls[4:], strict=True):
        assert row["record_hash"] == _truth_record(web, url).record_hash
    # the pool was a bounded stage: 8 rows through 2 slots and 2 places to wait
    assert stats.peak_rendering <= 2 and stats.peak_waiting <= 2 and stats.shed == 0
    # memory: the renderer processes do not grow with the pages rendered (16 on 2 slots):
    # at most one more per slot (a page and the about:blank it leaves for) than at start
    assert stats.start_renderers >= 1 and stats.peak_renderers <= stats.start_renderers + 2
    assert stats.peak_rss_bytes > 0
    # the plain host met the browser only in the probe's sample (2 pages); once judged, every
    # browser request went to the hosts that need it
    probe = [e for e in entries[:log_start] if e.headers.get("user-agent") == UA]
    assert sorted({e.path for e in probe if e.host == names[0]}) == ["/p/0", "/p/1"]
    after = [e for e in entries[log_start:] if e.headers.get("user-agent") == UA]
    assert after and {e.host for e in after} == {names[1], names[2]}
    assert group_pids(pid) == []  # every browser process is gone


def test_a_full_pool_sheds_and_only_loopback_is_reached():
    web = _web()
    with serve_sandbox(web) as running:
        urls = running.page_urls(2) * 2  # 8 renders asked at once, each fetching its JSON

        async def scenario(when_full):
            settings = _settings(slots=2, queue_size=2, when_full=when_full)  # room for 4
            async with BrowserPool(settings) as pool:
                results = await pool.render_all(urls)
                refused = await pool.render("http://example.com/")  # names never resolve
                private = await pool.render("http://10.1.2.3/")
                return results, refused, private, pool.stats, pool.pid

        shed, refused, private, shed_stats, shed_pid = asyncio.run(scenario("shed"))
        entries = running.log.entries()

    outcomes = [r.outcome for r in shed]
    assert outcomes.count("ok") == 4 and outcomes.count("shed") == 4  # 2 slots + 2 waiting
    assert shed_stats.peak_rendering <= 2 and shed_stats.shed == 4
    assert shed_stats.peak_renderers <= shed_stats.start_renderers + 2
    print(
        f"browser pool peak PSS {shed_stats.peak_rss_bytes / MIB:.0f} MiB, "
        f"{shed_stats.peak_renderers} renderer processes, 2 slots"
    )
    # only loopback: the refused targets were never contacted, not even resolved
    assert refused.outcome == "error" and "resolves no names" in (refused.reason or "")
    assert private.outcome == "error" and "private" in (private.reason or "")
    assert {e.host for e in entries} == {_host(running, 2)}
    assert group_pids(shed_pid) == []


def test_memory_is_sampled_after_the_first_render_and_then_at_most_as_often_as_set():
    """Reading every browser process's smaps_rollup after every render cost 12% of a cycle's
    flow process, and at every browser's start ~3% more: the first sample is taken after the
    first render, the next ones only once measure_every_s has passed."""
    web = _web()
    with serve_sandbox(web) as running:
        urls = running.page_urls(1)

        async def scenario(every):
            async with BrowserPool(_settings(measure_every_s=every)) as pool:
                results = await pool.render_all(urls)
                assert pool._folder is not None
                scratch = [p.name for p in (pool._folder / "tmp").iterdir()]
                # Chromium's singleton folder is in the pool's own TMPDIR (removed at close;
                # in /tmp, every killed browser left one behind)
                assert any(name.startswith("org.chromium.Chromium") for name in scratch)
                return [r.outcome for r in results], pool.stats, pool._folder

        each, each_stats, folder = asyncio.run(scenario(0.0))
        rare, rare_stats, _ = asyncio.run(scenario(1e9))
    assert not folder.exists()
    assert each == rare == ["ok"] * len(urls)
    assert len(urls) > 1
    assert each_stats.measurements == len(urls)  # after every render
    assert rare_stats.measurements == 1 and rare_stats.peak_rss_bytes > 0  # after the first
    assert rare_stats.start_renderers >= 1  # counted at the start, without a memory sample
    with pytest.raises(ValueError, match="measure_every_s"):
        RenderSettings(measure_every_s=-1)
