"""Plans price visits from the history: billing model, then host health."""

import shutil
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from models.discovery.urls import url_id
from models.planning.select import PlanningInputError
from tasks.cycle.planning import plan_cycle
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 3, 1, tzinfo=UTC)
LATER = START + timedelta(days=14)  # every page is due again


def build(root, *, unhealthy_host=None, big_host=None, cycles=12, pages=40):
    urls = [f"http://{h}.test/p{i}" for h in ("a", "b") for i in range(pages)]
    CatalogStore(root).upsert(
        pd.DataFrame({"url": urls, "host": [u.split("/")[2] for u in urls], "cost": 1.0})
    )
    store = HistoryStore(root)
    rng = np.random.default_rng(1)
    host = np.array([u.split("/")[2] for u in urls])
    ids = np.array([url_id(u) for u in urls])
    for cycle in range(cycles):
        at = START + timedelta(days=cycle)
        rows = pd.DataFrame(
            {
                "url_id": ids,
                "host": host,
                "fetched_at": at,
                "outcome": "ok",
                "record_hash": [f"{u}-{cycle // 3}" for u in urls],  # changes every 3 days
                "bytes": np.where(host == big_host, 2_000_000, 20_000),
            }
        )
        if unhealthy_host and cycle >= cycles - 3:
            # lately most of its pages answer 429 first and only deliver on a retry
            hit = (host == unhealthy_host) & (rng.random(len(urls)) < 0.8)
            refused = rows[hit].assign(
                fetched_at=at - timedelta(hours=1), outcome="throttled", record_hash=None
            )
            rows = pd.concat([refused, rows], ignore_index=True)
        store.write_cycle(cycle, rows)
    return root


@pytest.fixture(scope="module")
def healthy(tmp_path_factory):
    """``healthy(root)``: a copy of ``build()``'s store at ``root`` (built once: 12 commits)."""
    source = build(tmp_path_factory.mktemp("healthy") / "root")

    def copy_to(root):
        # new files, new times: as fresh as a build (the store sweeps old leftovers by age)
        shutil.copytree(source, root, copy_function=shutil.copy, dirs_exist_ok=True)
        return root

    return copy_to


def by_host(plan):
    return plan.groupby("host")["cost"].agg(["count", "mean"])


def test_a_throttling_host_costs_more_and_gets_less_of_the_budget(tmp_path):
    root = build(tmp_path, unhealthy_host="b.test")
    result = plan_cycle(root, 12, budget=60.0, host_capacity=100, now=LATER, cost_model="credits")
    plan = pd.read_parquet(result.path)
    due = by_host(plan[plan["reason"] == "due"])
    # a delivered visit costs one credit on both hosts; b's recent 429s make it ~1.45x dearer
    assert due.loc["a.test", "mean"] == pytest.approx(1.0)
    assert due.loc["b.test", "mean"] > 1.3
    assert due.loc["a.test", "count"] > 2 * due.loc["b.test", "count"]
    assert plan["cost"].sum() <= 60.0 + 1e-9


def test_bandwidth_prices_big_pages_from_their_bytes(tmp_path):
    root = build(tmp_path, big_host="b.test")
    result = plan_cycle(root, 12, budget=5.0, host_capacity=100, now=LATER, cost_model="bandwidth")
    plan = pd.read_parquet(result.path)
    costs = by_host(plan)["mean"]
    assert costs["a.test"] == pytest.approx(20_000 / 2**20, rel=1e-6)
    if "b.test" in costs:
        assert costs["b.test"] == pytest.approx(2_000_000 / 2**20, rel=1e-6)
    assert result.cost_model == "bandwidth"


def test_healthy_equal_hosts_are_priced_alike(tmp_path, healthy):
    root = healthy(tmp_path)
    plan = pd.read_parquet(plan_cycle(root, 12, budget=60.0, host_capacity=100, now=LATER).path)
    costs = by_host(plan)["mean"]
    assert costs["a.test"] == pytest.approx(costs["b.test"])


def test_unknown_cost_model_is_named(tmp_path):
    root = build(tmp_path, cycles=2, pages=3)
    with pytest.raises(PlanningInputError, match="unknown cost model 'gold'"):
        plan_cycle(root, 2, budget=3.0, cost_model="gold")


def test_refused_addresses_sent_nothing_so_they_are_not_priced(tmp_path, healthy):
    """A ``refused_address`` row never left the machine: it is no attempt for pricing."""
    root = healthy(tmp_path)
    store = HistoryStore(root)
    refused = store.read([11]).to_pandas()
    refused = refused[refused["host"] == "b.test"].assign(
        fetched_at=START + timedelta(days=11, hours=-1),
        outcome="refused_address",
        record_hash=None,
        bytes=0,
        changed=None,
        interval_days=None,
    )
    both = pd.concat([refused, store.read([11]).to_pandas()], ignore_index=True)
    store.write_cycle(11, both)
    result = plan_cycle(root, 12, budget=5.0, host_capacity=100, now=LATER, cost_model="bandwidth")
    costs = by_host(pd.read_parquet(result.path))["mean"]
    # priced as attempts, the refused rows' 0 bytes would halve b's mean bytes per visit
    assert costs["a.test"] == pytest.approx(20_000 / 2**20, rel=1e-6)
    assert costs["b.test"] == pytest.approx(20_000 / 2**20, rel=1e-6)
