"""plan_cycle finds a page that changes every 7 cycles in the stored history and plans it on
the first cycle after its expected change, not before."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from models.discovery.urls import url_id
from models.estimation.periodic import DEFAULT_RULE, DetectionRule
from tasks.cycle.planning import plan_cycle
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 3, 1, tzinfo=UTC)
CYCLES = 29  # cycles 0..28 committed; cycle 29 is planned


def build(root):
    """12 pages visited every cycle: p0 changes in cycles 1, 8, 15, 22 (and 29), p1 in
    cycles 4, 11, 18, 25 (and 32), the others never."""
    urls = [f"http://a.test/p{i}" for i in range(12)]
    CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": "a.test", "cost": 1.0}))
    store = HistoryStore(root)
    ids = np.array([url_id(u) for u in urls])
    for cycle in range(CYCLES):
        version = [f"{u}-0" for u in urls]
        version[0] = f"{urls[0]}-{(cycle - 1) // 7}"
        version[1] = f"{urls[1]}-{(cycle - 4) // 7}"
        rows = pd.DataFrame(
            {
                "url_id": ids,
                "host": "a.test",
                "fetched_at": START + timedelta(days=cycle, hours=10),
                "outcome": "ok",
                "record_hash": version,
            }
        )
        store.write_cycle(cycle, rows)
    return root, ids


def test_the_periodic_page_is_planned_on_the_cycle_after_its_change(tmp_path):
    root, ids = build(tmp_path)
    now = START + timedelta(days=CYCLES, hours=9)
    result = plan_cycle(root, CYCLES, budget=2.0, now=now, slices=None, periodic=DEFAULT_RULE)
    plan = pd.read_parquet(result.path)
    assert result.summary["periodic_pages"] == 2.0
    assert ids[0] in set(plan["url_id"])  # changed in cycle 29: due now
    assert ids[1] not in set(plan["url_id"])  # next change in cycle 32
    row = plan.set_index("url_id").loc[ids[0]]
    assert row["reason"] == "due" and row["p_changed"] == 1.0
    # without the detector both periodic pages are Poisson pages changing every 7 days
    plain = plan_cycle(root, CYCLES, budget=2.0, now=now, adhoc_name="plain").summary
    assert plain["periodic_pages"] == 0.0


def test_a_strict_rule_believes_nothing(tmp_path):
    root, _ = build(tmp_path)
    now = START + timedelta(days=CYCLES, hours=9)
    strict = DetectionRule(min_log_odds=1e6)
    result = plan_cycle(root, CYCLES, budget=2.0, now=now, periodic=strict)
    assert result.summary["periodic_pages"] == 0.0


@pytest.mark.parametrize("periodic", [False, True])
def test_the_plan_task_detects_only_when_asked(tmp_path, periodic):
    # the daily deployment's path: recrawl_flow(periodic=...) -> plan_cycle_task
    from flows.plan import plan_cycle_task

    root, _ = build(tmp_path)
    now = START + timedelta(days=CYCLES, hours=9)
    planned = plan_cycle_task.fn(str(root), CYCLES, 2.0, at=now, periodic=periodic)
    assert planned["summary"]["periodic_pages"] == (2.0 if periodic else 0.0)
