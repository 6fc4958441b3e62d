"""Discovery against loopback servers: the sandbox web's sitemaps, and hostile sitemap files."""

from __future__ import annotations

import dataclasses
import gzip
from collections import Counter
from datetime import timedelta

import pandas as pd
import pytest

from flows.cli import main
from models.discovery.admission import HostCaps
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.discovery.run import DiscoverySettings, add_links, discover_sync
from tasks.store.catalog import CatalogStore
from tests.tasks.discovery.conftest import FAST, START

PAGES = [30, 2_500, 12, 40]  # host 1 has an index of three gzip sitemaps


@pytest.fixture
def sandbox():
    web = SandboxWeb.generate(
        hosts=len(PAGES),
        pages_per_host=PAGES,
        seed=5,
        clock=SimClock(start=START),
        behaviours={
            2: HostBehaviour(sitemap_lastmod="missing"),
            3: HostBehaviour(
                robots_text="User-agent: *\nDisallow: /sitemaps/\n\nSitemap: /sitemap.xml\n"
            ),
        },
    )
    with serve_sandbox(web, port=0) as running:
        yield running


def _catalog(root) -> pd.DataFrame:
    return CatalogStore(root).read().to_pandas()


def test_every_sandbox_page_is_discovered_from_its_sitemaps_exactly_once(sandbox, tmp_path):
    seeds = [sandbox.base_url(i) + "/" for i in range(3)]
    report = discover_sync(tmp_path, seeds=seeds, settings=FAST)
    catalog = _catalog(tmp_path)
    assert catalog["url"].is_unique
    from_sitemaps = catalog[catalog["source"] == "sitemap"]
    expected = {u for i in range(3) for u in sandbox.page_urls(i)}
    assert set(from_sitemaps["url"]) == expected and len(from_sitemaps) == len(expected)
    assert set(catalog.loc[catalog["source"] == "seed", "url"]) == set(seeds)
    assert report.sitemaps_read == 2 + 4 + 2  # an index each; host 1 has three sitemaps
    assert report.rejected == {}
    # lastmod is the page's last real change (honest hosts), absent where the host omits it
    web = sandbox.web
    for row in from_sitemaps.itertuples():
        if row.host == sandbox.host(2):
            assert pd.isna(row.lastmod)
        else:
            assert row.lastmod.to_pydatetime() == web.last_change(row.url).replace(microsecond=0)
    # each sitemap and robots.txt was fetched once, with a descriptive User-Agent
    log = [r for r in sandbox.log.entries() if not r.path.startswith("/p/") and r.path != "/"]
    counts = Counter((r.host, r.path) for r in log)
    assert set(counts.values()) == {1}
    assert all("recrawler" in r.headers.get("user-agent", "") for r in log)
    assert all("+http" in r.headers.get("user-agent", "") for r in log)  # a contact URL


def test_a_second_run_adds_nothing_and_updates_changed_lastmods(sandbox, tmp_path):
    seed = sandbox.base_url(0) + "/"
    first = discover_sync(tmp_path, seeds=[seed], settings=FAST)
    before = _catalog(tmp_path).set_index("url")
    again = discover_sync(tmp_path, seeds=[seed], settings=FAST)
    assert again.added == 0 and again.known == first.added and again.signals_updated == 0
    sandbox.clock.advance(days=30)  # pages change; the sitemap's lastmods follow
    later = discover_sync(tmp_path, seeds=[seed], settings=FAST)
    after = _catalog(tmp_path).set_index("url")
    moved = (after["lastmod"] != before["lastmod"]) & after["lastmod"].notna()
    assert later.added == 0 and later.signals_updated == int(moved.sum()) > 0
    assert (after["discovered_at"] == before["discovered_at"]).all()
    assert (after["source"] == before["source"]).all()
    for url in after.index[moved]:
        assert sandbox.web.changes_between(url, START, START + timedelta(days=30))


def test_robots_txt_is_respected_for_sitemaps(sandbox, tmp_path):
    report = discover_sync(tmp_path, seeds=[sandbox.base_url(3) + "/"], settings=FAST)
    assert report.rejected["robots_denied"] == 1
    assert "/sitemaps/0.xml.gz" in report.examples["robots_denied"]
    paths = {r.path for r in sandbox.log.entries() if r.host.startswith("127.0.1.4")}
    assert "/sitemap.xml" in paths and not any(p.startswith("/sitemaps/") for p in paths)


def test_max_pages_and_cli(sandbox, tmp_path, capsys):
    code = main(
        [
            "discover",
            "--root",
            str(tmp_path),
            "--sitemap",
            sandbox.base_url(1) + "/sitemap.xml",
            "--max-pages",
            "100",
            "--min-delay",
            "0",
            "--allow-network",
            "127.0.0.0/8",  # the sandbox is on loopback
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "added 100 new pages" in out and "max_pages" in out
    assert len(_catalog(tmp_path)) == 100
    assert main(["discover", "--root", str(tmp_path)]) == 2
    assert "--seed" in capsys.readouterr().err


def _urlset(base: str, paths) -> bytes:
    body = "".join(f"<url><loc>{base}{p}</loc><lastmod>2026-01-01</lastmod></url>" for p in paths)
    return (
        '<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        f"{body}</urlset>"
    ).encode()


def _stream_oversized():
    yield b'<?xml version="1.0"?><urlset><!--'
    for _ in range(60):
        yield b" " * (1 << 20)
    yield b"--></urlset>"


def test_hostile_sitemaps_are_rejected_by_name_and_nothing_else_is_lost(fixture_server, tmp_path):
    base = fixture_server.base
    xml = {"Content-Type": "application/xml"}
    gz = {"Content-Type": "application/gzip"}
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE urlset [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><urlset><url><loc>'
        + base.encode()
        + b"/&b;</loc></url></urlset>"
    )
    files = {
        "/good.xml": (200, xml, _urlset(base, ["/good/1", "/good/2"])),
        "/good.xml.gz": (200, gz, gzip.compress(_urlset(base, ["/good/3"]))),
        "/entities.xml": (200, xml, laughs),
        "/many.xml.gz": (200, gz, gzip.compress(_urlset(base, [f"/m/{i}" for i in range(50_001)]))),
        "/huge.xml": (200, xml, _stream_oversized),
        "/invalid.xml": (200, xml, b"<urlset><url><loc>" + base.encode() + b"/x</loc></urlset>"),
        "/bomb.xml.gz": (200, gz, gzip.compress(b"<urlset>" + b" " * (60 << 20), 9)),
        "/mixed.xml": (
            200,
            xml,
            _urlset(base, ["/ok/1"]).replace(
                b"</urlset>", b"<url><loc>http://127.0.0.2:9/elsewhere</loc></url></urlset>"
            ),
        ),
        "/missing.xml": (404, xml, b"no"),
    }
    index = "".join(f"<sitemap><loc>{base}{p}</loc></sitemap>" for p in files)
    files["/index.xml"] = (200, xml, f"<sitemapindex>{index}</sitemapindex>".encode())
    files["/robots.txt"] = (200, {}, f"User-agent: *\nSitemap: {base}/index.xml\n".encode())
    fixture_server.routes.update(files)

    # The oversized sitemap streams 60 MiB from a Python server: on a loaded machine that took
    # longer than FAST's 20 s and was rejected as an http_error (a timeout) before its size
    # was reached. The deadline here is far above the stream's time (28 s at load 8), so the
    # size guard, not the clock, decides.
    patient = dataclasses.replace(
        FAST, sitemaps=dataclasses.replace(FAST.sitemaps, timeout_s=300.0)
    )
    report = discover_sync(tmp_path, seeds=[base + "/"], settings=patient)
    assert report.rejected == {
        "xml_entities": 1,
        "too_many_urls": 1,
        "too_large": 1,
        "invalid_xml": 1,
        "gzip_bomb": 1,
        "cross_host": 1,
        "http_error": 1,
        "seed_unreachable": 1,  # the seed page itself is a 404 here
    }
    for reason, where in [
        ("xml_entities", "/entities.xml"),
        ("too_many_urls", "/many.xml.gz"),
        ("too_large", "/huge.xml"),
        ("invalid_xml", "/invalid.xml"),
        ("gzip_bomb", "/bomb.xml.gz"),
        ("cross_host", "http://127.0.0.2:9/elsewhere"),
        ("http_error", "/missing.xml"),
    ]:
        assert where in report.examples[reason]
    urls = set(_catalog(tmp_path)["url"])
    assert urls == {base + "/"} | {base + p for p in ("/good/1", "/good/2", "/good/3", "/ok/1")}
    # nothing past the limits was downloaded: every file was asked for once
    assert Counter(p for p, _ in fixture_server.requests).most_common(1)[0][1] == 1


def test_links_from_fetched_pages_traps_caps_and_the_bloom_filter(tmp_path):
    page = b"""<html><body>
    <a href="/p/1">1</a><a href="/p/2">2</a><a href="./p/3">3</a>
    <a href="/a/b/a/b/a/b">loop</a><a href="/x/%s">long</a>
    <a href="http://other.test/q">other</a></body></html>""" % (b"y" * 3000)
    pages = [("http://shop.test/", page, "text/html")]
    settings = DiscoverySettings(caps=HostCaps(floor=2, per_value=0.0))
    first = add_links(tmp_path, pages, settings=settings)
    assert first.added == 3  # two of shop.test (the cap), one of other.test
    assert first.rejected == {"trap": 2, "host_cap": 1}
    second = add_links(tmp_path, pages, settings=settings)
    # added pages and traps are skipped by the filter; the capped page comes back
    assert second.seen_links == 5 and second.added == 1 and second.rejected == {}
    catalog = _catalog(tmp_path)
    assert set(catalog["source"]) == {"link"} and len(catalog) == 4
