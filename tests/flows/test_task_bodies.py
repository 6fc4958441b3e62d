"""Each task body of the recrawl flow called directly (``task.fn``), without a server."""

from __future__ import annotations

from datetime import timedelta

import pandas as pd

from flows.evaluation.truth import SandboxSpec, record_realized
from flows.plan import plan_cycle_task
from flows.recrawl import (
    commit_cycle_task,
    fetch_host_batch_task,
    report_cycle_task,
    split_plan_task,
)
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog


def _cycle(root, cycle, budget, at, slices=None, sandbox=None):
    planned = plan_cycle_task.fn(root, cycle, budget, at=at, slices=slices)
    specs = split_plan_task.fn(root, cycle, planned["path"], 2_000, 50)["batches"]
    outcomes = [
        fetch_host_batch_task.fn(root, cycle, s.name, FAST_FETCH, at, "credits") for s in specs
    ]
    commit = commit_cycle_task.fn(root, cycle, at)
    report = report_cycle_task.fn(root, cycle, planned["path"], "credits", 0, at)
    if sandbox is not None:  # the harness's ground truth, recorded into the report
        realized = record_realized(root, cycle, SandboxSpec.from_dict(sandbox).web(), at)
        report = {**report, "realized_freshness": realized}
    return planned, outcomes, commit, report


def test_task_bodies_run_a_cycle_without_prefect(sandbox_web, tmp_path):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    spec = {"hosts": 6, "pages_per_host": 10, "seed": 5}
    _, outcomes, commit, _ = _cycle(root, 0, len(urls), START, BOOTSTRAP, spec)
    assert sum(o.observations for o in outcomes) == commit.observations == len(urls)

    at = START + timedelta(days=3)
    sandbox_web.clock.set(at)
    planned, outcomes, commit, report = _cycle(root, 1, 30, at, sandbox=spec)
    assert commit.rows == planned["summary"]["pages"] == 30
    assert report["observations"] == 30
    assert report["changes_found"] + report["unchanged"] == 30  # every page seen before
    assert 0.0 < report["realized_freshness"] < 1.0  # three days later, some pages changed
    text = (tmp_path / "reports" / "cycle=1" / "summary.md").read_text()
    assert f"| changes found | {report['changes_found']:,} " in text
    # the truth went into the report the flow wrote, which itself had none
    assert f"| realized freshness (truth) | {report['realized_freshness']:.3f} |" in text
    assert "n/a (no ground truth)" not in text
    cycles = pd.read_parquet(tmp_path / "reports" / "cycles.parquet").set_index("cycle_id")
    assert cycles.loc[1, "realized_freshness"] == report["realized_freshness"]
    assert cycles.loc[0, "realized_freshness"] == 1.0  # everything was just fetched
    assert (tmp_path / "reports" / "cycle=1" / "freshness.png").stat().st_size > 1000
    assert HistoryStore(root).cycles() == [0, 1]


def test_a_resumed_batch_is_not_fetched_again(sandbox_web, tmp_path):
    root = str(tmp_path)
    urls = import_catalog(root, sandbox_web)
    planned = plan_cycle_task.fn(root, 0, len(urls), at=START, slices=BOOTSTRAP)
    (spec,) = split_plan_task.fn(root, 0, planned["path"], 2_000, 50)["batches"]
    first = fetch_host_batch_task.fn(root, 0, spec.name, FAST_FETCH, START)
    requests = len(sandbox_web.log.entries())
    again = fetch_host_batch_task.fn(root, 0, spec.name, FAST_FETCH, START)
    assert again.resumed and again.urls == first.urls == len(urls)
    assert len(sandbox_web.log.entries()) == requests
