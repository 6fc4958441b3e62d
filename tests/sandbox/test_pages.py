"""Pages over HTTP: real fields follow the version, noise changes on every response."""

from __future__ import annotations

import gzip
import xml.etree.ElementTree as ET
from datetime import timedelta

import httpx

from sandbox import HostBehaviour, SandboxWeb, serve_sandbox
from tests.sandbox.conftest import START, extract_record, json_record

_SM = "{http://www.sitemaps.org/schemas/sitemap/0.9}"


def test_same_version_same_fields_while_the_noise_differs(clock):
    web = SandboxWeb.generate(hosts=2, pages_per_host=20, seed=1, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = running.page_urls(1)[4]
        first, second = client.get(url), client.get(url)
        assert first.status_code == second.status_code == 200
        assert first.text != second.text  # noise: time, ad slot, session, viewers
        assert extract_record(first.text) == extract_record(second.text) == web.record(url)
        for marker in ('class="session"', 'name="csrf-token"', 'class="ad"', "people viewing"):
            assert marker in first.text
        item = client.get(running.base_url(1) + "/api/item/4.json")
        assert json_record(item.text) == web.record(url)
        assert (
            item.json()["meta"]["request_id"] != client.get(item.url).json()["meta"]["request_id"]
        )


def test_advancing_past_a_change_changes_the_fields(clock):
    web = SandboxWeb.generate(hosts=1, pages_per_host=100, seed=2, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = max(running.page_urls(0), key=web.true_rate)
        nxt = web.changes_between(url, START, START + timedelta(days=30))[0]
        before = extract_record(client.get(url).text)
        clock.set(nxt + timedelta(seconds=1))
        after = extract_record(client.get(url).text)
        assert before != after
        assert after == web.record(url) and before == web.record(url, START)
        assert web.version(url) == web.version(url, START) + 1


def test_pages_link_within_the_host_and_sometimes_beyond(clock):
    web = SandboxWeb.generate(hosts=3, pages_per_host=30, seed=4, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        hrefs = []
        for url in running.page_urls(0):
            text = client.get(url).text
            nav = text.split('<nav class="related">')[1].split("</nav>")[0]
            hrefs += [h.split('"')[0] for h in nav.split('href="')[1:]]
        assert "/p/1" in hrefs  # root-relative: every page links to the next one
        assert any(h.startswith("./") for h in hrefs)  # relative
        assert any(h.startswith(running.base_url(0) + "/p/") for h in hrefs)  # absolute
        others = (running.base_url(1), running.base_url(2))
        assert any(h.startswith(others) for h in hrefs)  # another host
        assert any(h.startswith("/private/") for h in hrefs)  # disallowed by robots.txt


def test_sitemaps_are_gzip_and_list_every_page_with_its_last_change(clock):
    web = SandboxWeb.generate(hosts=2, pages_per_host=[5, 2_500], seed=5, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        robots = client.get(running.base_url(1) + "/robots.txt").text
        assert f"Sitemap: {running.base_url(1)}/sitemap.xml" in robots
        index = ET.fromstring(client.get(running.base_url(1) + "/sitemap.xml").content)
        children = [e.findtext(f"{_SM}loc") for e in index.iter(f"{_SM}sitemap")]
        assert len(children) == 3  # 2,500 pages split at 1,000 URLs per sitemap
        listed = {}
        for child in children:
            response = client.get(child)
            assert response.headers["content-type"] == "application/gzip"
            urlset = ET.fromstring(gzip.decompress(response.content))
            for entry in urlset.iter(f"{_SM}url"):
                listed[entry.findtext(f"{_SM}loc")] = entry.findtext(f"{_SM}lastmod")
        assert sorted(listed) == sorted(running.page_urls(1))
        for url in running.page_urls(1)[:50]:
            expected = web.last_change(url).strftime("%Y-%m-%dT%H:%M:%S+00:00")
            assert listed[url] == expected


def test_gzip_content_encoding_when_accepted(clock):
    web = SandboxWeb.generate(hosts=1, pages_per_host=3, seed=1, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        url = running.page_urls(0)[0]
        zipped = client.get(url, headers={"Accept-Encoding": "gzip"})
        plain = client.get(url, headers={"Accept-Encoding": "identity"})
        assert zipped.headers["content-encoding"] == "gzip"
        assert "content-encoding" not in plain.headers
        assert extract_record(zipped.text) == extract_record(plain.text)
        head = client.head(url, headers={"Accept-Encoding": "identity"})
        assert head.status_code == 200 and head.content == b""
        assert abs(int(head.headers["content-length"]) - len(plain.content)) < 200  # noise


def test_unknown_paths_and_methods(clock):
    web = SandboxWeb.generate(hosts=1, pages_per_host=3, seed=1, clock=clock)
    with serve_sandbox(web) as running, httpx.Client() as client:
        base = running.base_url(0)
        assert client.get(base + "/p/3").status_code == 404  # only pages 0..2
        assert client.get(base + "/nothing").status_code == 404
        assert client.post(base + "/p/1", content=b"x").status_code == 405
        assert client.get(base + "/").status_code == 200
        assert client.get(base + "/private/1").status_code == 200


def test_sitemap_lastmod_can_be_missing_now_or_stale(clock):
    modes = ("missing", "now", "stale")
    web = SandboxWeb.generate(
        hosts=3,
        pages_per_host=30,
        seed=6,
        behaviours={i: HostBehaviour(sitemap_lastmod=m) for i, m in enumerate(modes)},
        clock=clock,
    )
    clock.advance(days=3)
    now = clock.now().strftime("%Y-%m-%dT%H:%M:%S+00:00")
    with serve_sandbox(web) as running, httpx.Client() as client:
        lastmods = []
        for i in range(3):
            urlset = ET.fromstring(
                gzip.decompress(client.get(running.base_url(i) + "/sitemaps/0.xml.gz").content)
            )
            lastmods.append([e.findtext(f"{_SM}lastmod") for e in urlset.iter(f"{_SM}url")])
        missing, at_now, stale = lastmods
        assert missing == [None] * 30
        assert at_now == [now] * 30
        origin = web.origin.strftime("%Y-%m-%dT%H:%M:%S+00:00")
        assert all(m < origin for m in stale)  # creation times, before any real change
