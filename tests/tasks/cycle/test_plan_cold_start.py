"""A freshly imported catalog (no history at all): the first plan spends the whole budget."""

from datetime import UTC, datetime

import pandas as pd
import pytest

from tasks.cycle.planning import plan_cycle
from tasks.store.catalog import CatalogStore

NOW = datetime(2026, 3, 1, tzinfo=UTC)


def imported(root, *, hosts=("a.test",), pages=50, value=None):
    """``pages`` URLs spread over ``hosts``, as ``recrawl catalog import`` stores them."""
    urls = [f"http://{hosts[i % len(hosts)]}/p{i}" for i in range(pages)]
    frame = pd.DataFrame({"url": urls, "host": [u.split("/")[2] for u in urls]})
    if value is not None:
        frame["value"] = value
    CatalogStore(root).upsert(frame)
    return root


def test_a_new_catalog_of_50_pages_with_budget_20_plans_20(tmp_path):
    result = plan_cycle(imported(tmp_path), 0, budget=20.0, now=NOW)
    plan = pd.read_parquet(result.path)
    assert len(plan) == 20 and plan["url_id"].is_unique
    assert (plan["reason"] == "discovery").all()
    assert plan["cost"].sum() == pytest.approx(20.0)
    assert result.summary["spent_discovery"] == pytest.approx(20.0)


def test_a_host_capacity_below_the_budget_plans_the_capacity(tmp_path):
    result = plan_cycle(imported(tmp_path), 0, budget=20.0, host_capacity=7, now=NOW)
    assert len(pd.read_parquet(result.path)) == 7
    # two hosts of 25 pages at 7 visits each: 14, still under the budget
    two = plan_cycle(
        imported(tmp_path / "two", hosts=("a.test", "b.test")),
        0,
        budget=20.0,
        host_capacity=7,
        now=NOW,
    )
    plan = pd.read_parquet(two.path)
    assert plan.groupby("host").size().to_dict() == {"a.test": 7, "b.test": 7}


def test_the_first_plan_takes_the_most_valuable_pages_first(tmp_path):
    value = [5.0 if i % 5 == 0 else 1.0 for i in range(50)]  # 10 pages worth 5x
    root = imported(tmp_path, value=value)
    plan = pd.read_parquet(plan_cycle(root, 0, budget=15.0, now=NOW).path)
    catalog = CatalogStore(root).read().to_pandas().set_index("url_id")
    assert len(plan) == 15
    assert (catalog.loc[plan["url_id"], "value"] == 5.0).sum() == 10
