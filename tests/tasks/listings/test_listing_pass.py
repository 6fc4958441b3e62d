"""The listing pass on the sandbox: listings read first, only what they show changed fetched,
the rest recorded unchanged; endpoint hosts fetched through their JSON (no Prefect here)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from urllib.parse import urlsplit

import httpx
import pandas as pd
import pyarrow.compute as pc
import pytest

from models.discovery.endpoints import record_of
from models.discovery.urls import normalize, url_id
from models.planning.select import Slices
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.planning import plan_cycle
from tasks.cycle.work import commit_cycle, fixed_clock, run_host_batch, split_plan
from tasks.fetch.settings import FetchSettings
from tasks.listings import (
    EndpointRoute,
    ListingInputError,
    ListingPass,
    apply_listing_summaries,
    declare_endpoints,
    declare_listings,
    run_listing_pass,
)
from tasks.listings.cycle import UNCHANGED_REASON
from tasks.listings.store import read_summaries
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
FAST = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.01,
    delay_factor=1.0,
    request_timeout_s=5.0,
    robots_timeout_s=2.0,
    retry_base_s=0.05,
    retry_cap_s=0.2,
    seed=1,
    allowed_networks=list(SANDBOX_NETWORKS),
)
BOOTSTRAP = Slices(discovery=1.0, reestimation=0.0, verification=0.0)


@pytest.fixture
def shop():
    clock = SimClock(START)
    web = SandboxWeb.generate(
        2, 60, seed=5, behaviours={0: HostBehaviour(listing_size=20, json_link=True)}, clock=clock
    )
    with serve_sandbox(web) as running:
        yield running


def _catalog(root, running):
    urls = running.page_urls()
    CatalogStore(root).upsert(
        pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
    )
    return urls


def _cycle(root, running, cycle, budget, slices=None, cap=False, threshold=0.0, at=None):
    at = START + timedelta(days=cycle) if at is None else at
    running.web.clock.set(at)
    plan = plan_cycle(root, cycle, budget, now=at, slices=slices, seed=cycle)
    specs = split_plan(root, cycle, plan.path)
    done = run_listing_pass(
        root,
        cycle,
        settings=FAST,
        clock=fixed_clock(at),
        budget=budget if cap else None,
        threshold=threshold,
    )
    for spec in specs:
        run_host_batch(root, cycle, spec.name, settings=FAST, clock=fixed_clock(at))
    commit_cycle(root, cycle, clock=fixed_clock(at))
    apply_listing_summaries(root, cycle)
    return done, HistoryStore(root).read([cycle]).to_pandas()


def test_the_endpoint_gives_the_pages_record_hash_on_every_sandbox_page(shop):
    with httpx.Client() as client:
        for at in (START, START + timedelta(days=3)):
            shop.web.clock.set(at)
            for j, url in enumerate(shop.page_urls(0)):
                page = client.get(url, follow_redirects=True)
                final = normalize(str(page.url))
                endpoint = client.get(f"{shop.base_url(0)}/api/item/{final.rsplit('/', 1)[1]}.json")
                a = record_of(page.content, page.headers["content-type"], final)
                b = record_of(endpoint.content, endpoint.headers["content-type"], str(endpoint.url))
                assert a.record_hash == b.record_hash, f"page {j}"
                assert a.missing == ()


def test_changed_items_are_fetched_and_unchanged_ones_recorded_without_a_fetch(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_listings(root, shop.listing_urls(0))
    first, _ = _cycle(root, shop, 0, len(urls), BOOTSTRAP)
    assert first.new == 60 and first.unchanged == 0  # nothing kept yet: every item fetched
    assert read_summaries(root).num_rows == 60

    log_start = len(shop.log.entries())
    second, rows = _cycle(root, shop, 1, budget=40)
    items = {url_id(normalize(u)): u for u in shop.page_urls(0)}
    truly = {
        uid: shop.web.version(u, START + timedelta(days=1)) != shop.web.version(u, START)
        for uid, u in items.items()
    }
    mine = rows[rows["url_id"].isin(list(items))]
    assert sorted(mine["url_id"]) == sorted(items)  # every listed item observed once
    quiet = mine[mine["reason"] == UNCHANGED_REASON]
    fetched = mine[mine["outcome"] == "ok"]
    assert len(quiet) + len(fetched) == 60 and len(fetched) == second.changed > 0
    assert all(not truly[u] for u in quiet["url_id"])  # recorded unchanged: truly unchanged
    assert all(truly[u] for u in fetched["url_id"])  # fetched: truly changed
    assert fetched["changed"].all() and not quiet["changed"].any()
    assert (quiet["outcome"] == "listing_unchanged").all() and (quiet["cost"] == 0).all()
    # the server saw only the listings and the changed items of host 0
    paths = {
        e.path
        for e in shop.log.entries()[log_start:]
        if e.host.startswith(shop.host(0).split(":")[0])
    }
    changed_paths = {urlsplit(items[u]).path for u in fetched["url_id"]}
    assert {p for p in paths if p.startswith("/p/")} == changed_paths
    assert {p for p in paths if p.startswith("/c/")} == {"/c/0", "/c/1", "/c/2"}


def test_a_listing_is_read_when_its_items_expected_changes_reach_the_threshold(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_listings(root, shop.listing_urls(0))
    first, _ = _cycle(root, shop, 0, len(urls), BOOTSTRAP, threshold=1e9)
    assert first.listings == 3  # nothing kept yet: every listing is read whatever the rule
    log_start = len(shop.log.entries())
    never, rows = _cycle(root, shop, 1, budget=40, threshold=1e9)
    assert never.listings == 0 and never.unchanged == 0
    assert not any(e.path.startswith("/c/") for e in shop.log.entries()[log_start:])
    assert not (rows["reason"] == UNCHANGED_REASON).any()  # the planner had the items
    always, _ = _cycle(root, shop, 2, budget=40, threshold=0.0)
    assert always.listings == 3


def test_with_a_budget_the_pass_and_the_planner_share_it(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_listings(root, shop.listing_urls(0))
    _cycle(root, shop, 0, len(urls), BOOTSTRAP)
    budget = 12
    done, rows = _cycle(root, shop, 1, budget, cap=True)
    assert rows["cost"].sum() <= budget  # credits: listings and items, the planner's included
    assert done.changed + done.new > budget - 3  # the listings left too little for them all
    fetched = rows[
        (rows["outcome"] == "ok") & rows["url_id"].isin([url_id(normalize(u)) for u in urls])
    ]
    assert len(fetched) == budget - 3  # 3 listings read, the rest went to changed items
    assert done.taken_from_plan > 0  # the planner's pages did not fit


def test_an_item_shown_changed_but_not_fetched_stays_known_stale_until_fetched(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_listings(root, shop.listing_urls(0))
    _cycle(root, shop, 0, len(urls), BOOTSTRAP)
    day1 = START + timedelta(days=1)
    done, rows = _cycle(root, shop, 1, 12, cap=True)
    items = {url_id(normalize(u)): u for u in shop.page_urls(0)}
    fetched = set(rows.loc[rows["outcome"] == "ok", "url_id"])
    moved = {
        u for u, url in items.items() if shop.web.version(url, day1) != shop.web.version(url, START)
    }
    left = moved - fetched
    assert done.changed > 0 and left  # the budget left changed items unfetched
    kept = read_summaries(root)
    # nothing changes before the next cycle: every listing answers 304, which says its
    # items show what the last read showed, not that they are unchanged since observed
    again, rows = _cycle(root, shop, 2, len(urls), cap=True, at=day1 + timedelta(seconds=1))
    listing_ids = {url_id(normalize(u)) for u in shop.listing_urls(0)}
    assert set(rows.loc[rows["url_id"].isin(listing_ids), "outcome"]) == {"not_modified"}
    # the left items are neither recorded unchanged nor forgotten: fetched, at last
    assert not left & set(rows.loc[rows["reason"] == UNCHANGED_REASON, "url_id"])
    assert left <= set(rows.loc[rows["outcome"] == "ok", "url_id"])
    assert left <= set(kept.filter(pc.field("pending"))["item_url_id"].to_pylist())
    assert again.pending >= len(left)
    assert not pc.any(read_summaries(root)["pending"]).as_py()  # all known again


def test_an_endpoint_host_is_fetched_through_its_json(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_endpoints(root, {shop.host(0): EndpointRoute(r"/p/(\d+)", "/api/item/{0}.json")})
    first, rows = _cycle(root, shop, 0, len(urls), BOOTSTRAP)
    assert first.through_endpoint == 60
    host0 = rows[rows["host"] == shop.host(0)]
    assert sorted(host0["url_id"]) == sorted(url_id(normalize(u)) for u in shop.page_urls(0))
    requested = {e.path for e in shop.log.entries() if e.host.startswith("127.0.1.1")}
    assert all(p.startswith("/api/item/") for p in requested if p not in ("/robots.txt",))
    # the next cycle's endpoint visits compare with the endpoint's own records
    _, rows = _cycle(root, shop, 1, budget=60)
    at, before = START + timedelta(days=1), START
    host0 = rows[(rows["host"] == shop.host(0)) & rows["changed"].notna()]
    ids = {url_id(normalize(u)): u for u in shop.page_urls(0)}
    for uid, changed in zip(host0["url_id"], host0["changed"], strict=True):
        u = ids[uid]
        assert changed == (shop.web.version(u, at) != shop.web.version(u, before))


def test_without_declarations_the_pass_does_nothing(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    plan = plan_cycle(root, 0, len(urls), now=START, slices=BOOTSTRAP)
    specs = split_plan(root, 0, plan.path)
    assert run_listing_pass(root, 0, settings=FAST) == ListingPass()
    assert [s.urls for s in specs] == [len(urls)]
    assert shop.log.entries() == []


def test_a_pass_that_ran_is_not_run_again(shop, tmp_path):
    root = str(tmp_path)
    urls = _catalog(root, shop)
    declare_listings(root, shop.listing_urls(0))
    plan = plan_cycle(root, 0, len(urls), now=START, slices=BOOTSTRAP)
    split_plan(root, 0, plan.path)
    once = run_listing_pass(root, 0, settings=FAST, clock=fixed_clock(START))
    requests = len(shop.log.entries())
    assert run_listing_pass(root, 0, settings=FAST, clock=fixed_clock(START)) == once
    assert len(shop.log.entries()) == requests


def test_bad_declarations_are_refused():
    with pytest.raises(ListingInputError, match="page_regex"):
        EndpointRoute("/p/(", "/api/{0}.json")
    with pytest.raises(ListingInputError, match="does not fit"):
        EndpointRoute(r"/p/(\d+)", "/api/{1}.json")
