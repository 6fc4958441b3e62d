"""The recrawl flow against the sandbox web, under the session's Prefect test server."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitUpdate
from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterKey
from prefect.client.schemas.sorting import ArtifactSort

import tasks.cycle.work
from flows.evaluation.sandbox_runs import recrawl_with_truth
from flows.plan import plan_flow
from flows.recrawl import recrawl_flow
from tasks.cycle.host_limits import ensure_host_limits, limit_name
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog


def _limits(hosts):
    with get_client(sync_client=True) as client:
        return {h: client.read_global_concurrency_limit_by_name(limit_name(h)) for h in hosts}


def _latest_summary():
    with get_client(sync_client=True) as client:
        (found,) = client.read_artifacts(
            artifact_filter=ArtifactFilter(key=ArtifactFilterKey(any_=["recrawl-summary"])),
            sort=ArtifactSort.CREATED_DESC,
            limit=1,
        )
    return found


def test_cycle_history_grows_by_exactly_the_planned_pages(prefect_server, sandbox_web, tmp_path):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    first = recrawl_with_truth(
        {"hosts": 6, "pages_per_host": 10, "seed": 5},
        root=root,
        at=START,
        budget=len(urls),
        fetch=FAST_FETCH,
        slices=BOOTSTRAP,
    )
    assert first["cycle"] == 0 and first["rows"] == len(urls) == first["observations"]
    assert first["realized_freshness"] == 1.0  # everything was just fetched
    # the harness published the summary again, with the truth, on the run that made it
    artifact = _latest_summary()
    assert artifact.flow_run_id is not None
    assert "| realized freshness (truth) | 1.000 |" in str(artifact.data)

    sandbox_web.clock.set(START + timedelta(days=1))
    second = recrawl_flow(root=root, budget=20, at=START + timedelta(days=1), fetch=FAST_FETCH)
    plan = pd.read_parquet(tmp_path / "plans" / "cycle=1.parquet")
    rows = HistoryStore(root).read([1]).to_pandas()
    assert second["cycle"] == 1 and len(plan) == 20
    assert sorted(rows["url_id"]) == sorted(plan["url_id"])  # each planned page exactly once
    assert len(HistoryStore(root).read()) == len(urls) + 20
    # the production flow knows no truth
    summary = (tmp_path / "reports" / "cycle=1" / "summary.md").read_text()
    assert "| realized freshness (truth) | n/a (no ground truth) |" in summary
    assert "| realized freshness (truth) | n/a (no ground truth) |" in str(_latest_summary().data)
    assert not (tmp_path / "_work" / "cycle=1").exists()

    hosts = sorted(rows["host"].unique())
    limits = _limits(hosts)
    assert all(lim.limit == 1 and lim.active_slots == 0 for lim in limits.values())

    again = recrawl_flow(root=root, budget=20, cycle=1, at=START + timedelta(days=1))
    assert again["status"] == "already committed"
    assert len(HistoryStore(root).read([1])) == 20


def test_a_failing_host_batch_leaves_the_cycle_committed(
    prefect_server, sandbox_web, tmp_path, monkeypatch
):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    bad_host = sandbox_web.host(2)
    real_fetch = tasks.cycle.work.fetch_batch

    async def flaky_fetch(requests, **kwargs):
        requests = list(requests)
        if any(bad_host in r.url for r in requests):
            raise ConnectionError("simulated crash of the fetch engine")
        return await real_fetch(requests, **kwargs)

    monkeypatch.setattr(tasks.cycle.work, "fetch_batch", flaky_fetch)
    result = recrawl_flow(
        root=root,
        budget=len(urls),
        at=START,
        fetch=FAST_FETCH,
        slices=BOOTSTRAP,
        max_hosts_per_batch=1,
    )
    assert result["status"] == "committed" and len(result["failed_batches"]) == 1
    rows = HistoryStore(root).read([0]).to_pandas()
    assert len(rows) == len(urls)
    bad = rows[rows["host"] == bad_host]
    assert len(bad) == 10 and (bad["outcome"] == "error").all()
    assert bad["reason"].str.contains("simulated crash").all()
    assert (rows[rows["host"] != bad_host]["outcome"] == "ok").all()

    # never observed, so they are planned as first visits (reason discovery), at twice the
    # cost: the errors halved the host's health
    monkeypatch.setattr(tasks.cycle.work, "fetch_batch", real_fetch)
    plan = plan_flow(root=root, budget=400, cycle=1, at=START + timedelta(days=1))
    planned = pd.read_parquet(plan["path"])
    assert set(planned.loc[planned["reason"] == "discovery", "url_id"]) == set(bad["url_id"])


def test_leaked_slots_are_repaired(prefect_server):
    hosts = ["leak-a.example:80", "leak-b.example:80"]
    ensure_host_limits(hosts)
    with get_client(sync_client=True) as client:
        # a crashed run's slot: counted active, but no lease behind it
        client.update_global_concurrency_limit(
            limit_name(hosts[0]), GlobalConcurrencyLimitUpdate(active_slots=1)
        )
        report = ensure_host_limits(hosts, client=client)
    assert report.repaired == (limit_name(hosts[0]),) and report.created == 0
    assert _limits(hosts)[hosts[0]].active_slots == 0
