"""An ad hoc plan (the ``plan-adhoc`` deployment, a notebook) never touches a cycle's plan."""

from __future__ import annotations

import threading
from datetime import timedelta
from pathlib import Path

import pandas as pd

import tasks.cycle.work
from flows.plan import plan_flow
from flows.recrawl import recrawl_flow
from tasks.cycle.planning import plan_path
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog


def test_an_adhoc_plan_during_a_daily_run_leaves_the_cycle_plan_alone(
    prefect_server, sandbox_web, tmp_path, monkeypatch
):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    recrawl_flow(root=root, budget=len(urls), at=START, fetch=FAST_FETCH, slices=BOOTSTRAP)
    day = START + timedelta(days=1)
    sandbox_web.clock.set(day)

    fetching, planned = threading.Event(), threading.Event()
    seen: dict[str, bytes] = {}
    real_fetch = tasks.cycle.work.fetch_batch

    async def fetch_after_the_adhoc_plan(requests, **kwargs):
        if not fetching.is_set():
            seen["plan"] = plan_path(root, 1).read_bytes()
            fetching.set()
            planned.wait(timeout=300)  # the ad hoc plan runs now, while this cycle fetches
        return await real_fetch(requests, **kwargs)

    monkeypatch.setattr(tasks.cycle.work, "fetch_batch", fetch_after_the_adhoc_plan)
    daily: dict[str, object] = {}
    runner = threading.Thread(
        target=lambda: daily.update(
            recrawl_flow(root=root, budget=10, at=day, fetch=FAST_FETCH, max_hosts_per_batch=1)
        )
    )
    runner.start()
    try:
        assert fetching.wait(timeout=300), "the daily run never started fetching"
        adhoc = plan_flow(root=root, budget=60, at=day)  # plans cycle 1 too, with 6x the budget
    finally:
        planned.set()
        runner.join(timeout=600)

    assert adhoc["cycle"] == 1 and Path(adhoc["path"]).parent == tmp_path / "plans" / "adhoc"
    assert len(pd.read_parquet(adhoc["path"])) > 10
    assert plan_path(root, 1).read_bytes() == seen["plan"]  # untouched while it was fetched
    cycle_plan = pd.read_parquet(plan_path(root, 1))
    rows = HistoryStore(root).read([1]).to_pandas()
    assert daily["status"] == "committed" and len(cycle_plan) == 10
    assert sorted(rows["url_id"]) == sorted(cycle_plan["url_id"])
    summary = (tmp_path / "reports" / "cycle=1" / "summary.md").read_text()
    assert "| planned pages / cost | 10 / 10.0 |" in summary
    # a second ad hoc plan of the same cycle gets a name of its own
    again = plan_flow(root=root, budget=60, at=day)
    assert again["path"] != adhoc["path"] and Path(adhoc["path"]).exists()
