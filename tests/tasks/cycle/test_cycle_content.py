"""What a cycle learns from its pages: links become candidates, canonicals are honoured,
near-duplicates are reported and down-ranked (``tasks.cycle.content`` after the commit)."""

from __future__ import annotations

import json
from datetime import timedelta

import pandas as pd
import pytest

from models.discovery.admission import NEAR_DUPLICATE_VALUE
from models.discovery.urls import normalize, url_id
from models.planning.select import Slices
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.content import (
    ContentSettings,
    apply_cycle_content,
    content_pending,
    read_near_duplicate_report,
)
from tasks.cycle.planning import plan_cycle
from tasks.cycle.work import work_dir
from tasks.discovery.run import DiscoverySettings
from tasks.reports.cycle_report import near_duplicate_section
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore
from tests.tasks.cycle.conftest import CONTENT, START, add_to_catalog, run_cycle, write_plan

DAY = timedelta(days=1)
ONLY_DUE = Slices(discovery=0.0, reestimation=0.0, verification=0.0)


def _catalog(root) -> pd.DataFrame:
    return CatalogStore(root).read().to_pandas().set_index("url")


@pytest.fixture
def sandbox_web():
    web = SandboxWeb.generate(3, 12, seed=5, default=HostBehaviour(), clock=SimClock(START))
    with serve_sandbox(web) as running:
        yield running


def test_links_of_fetched_pages_land_in_the_catalog_for_the_discovery_slice(sandbox_web, tmp_path):
    web = sandbox_web.web
    held = sandbox_web.page_urls(0)[:6] + sandbox_web.page_urls(1) + sandbox_web.page_urls(2)
    add_to_catalog(tmp_path, held)
    result = run_cycle(tmp_path, 0, write_plan(tmp_path, 0, held))

    # what the fetched pages (after redirects) link to, robots.txt allowing
    by_id = {url_id(normalize(u)): u for u in held}
    linked = set()
    for row in HistoryStore(tmp_path).read([0]).to_pylist():
        if row["outcome"] != "ok":
            continue
        i, j = web.locate(by_id[row["url_id"]])
        for link in web.traits(i, web.final_page(i, j)).links:
            if link.kind != "private":
                linked.add(normalize(f"{sandbox_web.base_url(link.host)}/p/{link.page}"))
    expected = linked - {normalize(u) for u in held}
    assert expected  # host 0's pages 6.. are linked from the pages held

    catalog = _catalog(tmp_path)
    found = catalog[catalog["source"] == "link"]
    assert set(found.index) == expected
    assert result is not None and result.links_added == len(expected)
    assert (found["discovered_at"] == pd.Timestamp(START)).all()
    assert not any("/private/" in u for u in catalog.index)  # robots.txt denies them

    # the next plan's discovery slice picks them up (never fetched: value per cost)
    plan = plan_cycle(tmp_path, 1, 400.0, now=START + DAY)
    planned = pd.read_parquet(plan.path)
    discovery = set(planned.loc[planned["reason"] == "discovery", "url_id"])
    assert {url_id(u) for u in expected} <= discovery

    # applying the cycle again finds them known: nothing is added twice
    again = apply_cycle_content(tmp_path, 0, work_dir(tmp_path, 0), now=START, settings=CONTENT)
    assert again.links_added == 0 and len(CatalogStore(tmp_path).read()) == len(catalog)


def test_links_are_bounded_per_cycle_and_kept_within_the_catalog_hosts(page_server, tmp_path):
    new = [f"/new/{k}" for k in range(5)]
    links = "".join(f'<a href="{p}">{p}</a>' for p in new)
    page_server.html("/", links + '<a href="http://elsewhere.example/x">out</a>')
    add_to_catalog(tmp_path, [page_server.url("/")])
    bounded = ContentSettings(discovery=CONTENT.discovery, max_new_pages=2)
    result = run_cycle(
        tmp_path, 0, write_plan(tmp_path, 0, [page_server.url("/")]), content=bounded
    )
    assert result is not None
    assert result.links_found == 6 and result.links_out_of_scope == 1
    assert result.links_added == 2 and result.links_rejected == {"max_pages": 3}
    # capped links are not marked as seen: the next cycle's landing takes them
    later = apply_cycle_content(tmp_path, 0, work_dir(tmp_path, 0), now=START, settings=CONTENT)
    assert later.links_added == 3
    assert set(_catalog(tmp_path).index) == {page_server.url(p) for p in ["/", *new]}


def test_a_canonical_link_demotes_the_page_and_carries_its_value(page_server, tmp_path):
    s = page_server
    s.html("/a", "<p>print view of b</p>", head='<link rel="canonical" href="/b">')
    s.html("/b", "<p>the page</p>", head='<link rel="canonical" href="/b">')  # itself
    s.html("/c", "<p>session copy</p>", head='<link rel="canonical" href="/d?utm_source=x">')
    s.html("/e", "<p>e</p>", head='<link rel="canonical" href="/f">')  # e and f name
    s.html("/f", "<p>f</p>", head='<link rel="canonical" href="/e">')  # each other
    s.html("/g", "<p>g</p>", head='<link rel="canonical" href="http://other.example/g">')
    pages = ["/a", "/b", "/c", "/e", "/f", "/g"]
    add_to_catalog(tmp_path, [s.url(p) for p in pages], [5.0, 1.0, 2.0, 1.0, 1.0, 1.0])
    result = run_cycle(tmp_path, 0, write_plan(tmp_path, 0, [s.url(p) for p in pages]))

    catalog = _catalog(tmp_path)
    canonical = catalog["canonical"].to_dict()
    assert canonical[s.url("/a")] == s.url("/b")
    assert canonical[s.url("/c")] == s.url("/d")  # normalized: tracking parameter dropped
    for kept in ["/b", "/e", "/f", "/g"]:  # itself, a mutual pair, another site
        assert pd.isna(canonical[s.url(kept)]), kept
    assert catalog.loc[s.url("/b"), "value"] == 5.0  # a's value moved to its canonical
    added = catalog.loc[s.url("/d")]
    assert added["source"] == "canonical" and added["value"] == 2.0
    assert result is not None and (result.canonical_pages, result.canonical_added) == (2, 1)

    # the planner plans the canonical pages, never the demoted ones
    plan = pd.read_parquet(plan_cycle(tmp_path, 1, 100.0, now=START + DAY).path)
    planned = set(plan["url_id"])
    assert url_id(s.url("/a")) not in planned and url_id(s.url("/c")) not in planned
    assert {url_id(s.url(p)) for p in ["/b", "/d", "/e"]} <= planned

    # fetched again without its canonical link, a page is its own again
    s.html("/a", "<p>now a page of its own</p>")
    later = run_cycle(tmp_path, 1, write_plan(tmp_path, 1, [s.url("/a")]), START + DAY)
    assert later is not None and later.canonical_cleared == 1
    assert pd.isna(_catalog(tmp_path).loc[s.url("/a"), "canonical"])


def _article(words: int, variant: str) -> str:
    vocabulary = [
        "river",
        "stone",
        "market",
        "ladder",
        "violin",
        "orchard",
        "copper",
        "lantern",
        "meadow",
        "harbor",
    ]
    text = " ".join(vocabulary[(k * 7 + k // 10) % 10] + str(k % 13) for k in range(words))
    return f"<main><h1>Report</h1><p>{text} {variant}</p></main>"


def test_near_duplicates_are_reported_and_down_ranked(page_server, tmp_path):
    s = page_server
    s.html("/n1", _article(400, "printed on monday"))
    s.html("/n2", _article(400, "printed on tuesday"))
    s.html("/n3", _article(400, "shared by email"))
    s.html("/u", "<main><p>" + " ".join(f"unrelated{k} words{k % 5}" for k in range(300)))
    s.html("/empty", "")  # no words: a simhash of 0 says nothing, never a cluster
    s.html("/empty2", "")
    pages = ["/n1", "/n2", "/n3", "/u", "/empty", "/empty2"]
    urls = [s.url(p) for p in pages]
    add_to_catalog(tmp_path, urls, [1.0, 5.0, 1.0, 1.0, 1.0, 1.0])
    result = run_cycle(tmp_path, 0, write_plan(tmp_path, 0, urls))
    assert result is not None and (result.clusters, result.down_ranked) == (1, 2)

    report = read_near_duplicate_report(tmp_path, 0)
    assert report is not None
    assert report["clusters"] == 1 and report["pages_in_clusters"] == 3
    assert report["fetched_this_cycle_in_clusters"] == 3
    (top,) = report["largest_clusters"]
    assert top["size"] == 3 and top["kept"] == s.url("/n2")  # the most valuable
    text = "\n".join(near_duplicate_section(report))
    assert "Near-duplicate clusters: 1" in text and s.url("/n2") in text

    catalog = _catalog(tmp_path)
    kept = url_id(s.url("/n2"))
    assert catalog.loc[s.url("/n1"), "near_duplicate_of"] == kept
    assert catalog.loc[s.url("/n3"), "near_duplicate_of"] == kept
    assert catalog[["near_duplicate_of"]].drop([s.url("/n1"), s.url("/n3")]).isna().all().all()

    # the planner scores a near-duplicate at NEAR_DUPLICATE_VALUE of an equal page's score
    plan = pd.read_parquet(
        plan_cycle(tmp_path, 1, 100.0, now=START + 2 * DAY, slices=ONLY_DUE).path
    ).set_index("url_id")
    ratio = plan.loc[url_id(s.url("/n1")), "score"] / plan.loc[url_id(s.url("/u")), "score"]
    assert ratio == pytest.approx(NEAR_DUPLICATE_VALUE)

    # a page that stops matching loses its flag at the next cycle
    s.html("/n3", "<main><p>" + " ".join(f"fresh{k} text{k % 7}" for k in range(300)))
    later = run_cycle(tmp_path, 1, write_plan(tmp_path, 1, [s.url("/n3")]), START + DAY)
    assert later is not None and later.down_ranked == 1
    assert pd.isna(_catalog(tmp_path).loc[s.url("/n3"), "near_duplicate_of"])
    assert (
        json.loads((tmp_path / "reports" / "cycle=1" / "near_duplicates.json").read_text())[
            "pages_in_clusters"
        ]
        == 2
    )


def test_content_is_pending_until_applied(page_server, tmp_path):
    page_server.html("/", '<a href="/next">next</a>')
    add_to_catalog(tmp_path, [page_server.url("/")])
    run_cycle(tmp_path, 0, write_plan(tmp_path, 0, [page_server.url("/")]), content=None)
    folder = work_dir(tmp_path, 0)
    assert content_pending(folder)  # committed, content not applied: a crash came here
    apply_cycle_content(
        tmp_path,
        0,
        folder,
        now=START,
        settings=ContentSettings(discovery=DiscoverySettings(bloom_expected=1_000)),
    )
    assert not content_pending(folder)
    assert page_server.url("/next") in _catalog(tmp_path).index
