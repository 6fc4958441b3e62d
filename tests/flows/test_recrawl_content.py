"""The recrawl flow runs the cycle's content step: links land in the catalog, the summary
has the near-duplicate report, and a cycle committed just before a crash gets it on re-run."""

from __future__ import annotations

from datetime import timedelta
from urllib.parse import urlsplit

import pandas as pd

from flows.plan import plan_cycle_task
from flows.recrawl import (
    commit_cycle_task,
    fetch_host_batch_task,
    recrawl_flow,
    split_plan_task,
)
from models.discovery.urls import normalize
from tasks.cycle.content import content_pending
from tasks.cycle.work import work_dir
from tasks.store.catalog import CatalogStore
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START


def test_the_flow_lands_links_and_reports_near_duplicates(prefect_server, sandbox_web, tmp_path):
    root = str(tmp_path)
    urls = sandbox_web.page_urls()
    held = urls[:5] + urls[10:]  # host 0's pages 5-9 are only linked to
    CatalogStore(root).upsert(
        pd.DataFrame({"url": held, "host": [urlsplit(u).netloc for u in held]})
    )
    result = recrawl_flow(root=root, budget=len(held), at=START, fetch=FAST_FETCH, slices=BOOTSTRAP)
    assert result["status"] == "committed" and result["links_added"] > 0
    catalog = CatalogStore(root).read().to_pandas()
    found = set(catalog.loc[catalog["source"] == "link", "url"])
    assert len(found) == result["links_added"]
    assert found <= {normalize(u) for u in urls[5:10]}
    summary = (tmp_path / "reports" / "cycle=0" / "summary.md").read_text()
    assert "## Near-duplicate clusters: 0" in summary
    assert (tmp_path / "reports" / "cycle=0" / "near_duplicates.json").exists()

    # cycle 1 committed by the task bodies, then the process died before the content step
    at = START + timedelta(days=1)
    planned = plan_cycle_task.fn(root, 1, 20, at=at)
    for spec in split_plan_task.fn(root, 1, planned["path"], 2_000, 50)["batches"]:
        fetch_host_batch_task.fn(root, 1, spec.name, FAST_FETCH, at)
    commit_cycle_task.fn(root, 1, at)
    assert content_pending(work_dir(root, 1))
    again = recrawl_flow(root=root, budget=20, cycle=1, at=at, fetch=FAST_FETCH)
    assert again["status"] == "already committed"
    assert (tmp_path / "reports" / "cycle=1" / "near_duplicates.json").exists()
    assert not work_dir(root, 1).exists()
