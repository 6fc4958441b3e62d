"""Plan a cycle from a stored history: estimate -> allocate -> select -> plan Parquet."""

from __future__ import annotations

import os
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd

from models.allocation import allocate
from models.planning import REASONS, Candidates, Slices, select_batch
from models.schemas import OBSERVATION_OUTCOMES
from tasks.catalog import CatalogStore
from tasks.estimation import load_rate_estimates
from tasks.history import HistoryStore, connect

_LAST_VISITS = """
SELECT url_id, max(fetched_at) AS last_visit
FROM history WHERE outcome IN (SELECT unnest($observed)) GROUP BY url_id
"""
_PAGES = """
SELECT e.url_id, e.host, e.rate, e.log_std, coalesce(c.value, 1.0) AS value,
       coalesce(c.cost, 1.0) AS cost, v.last_visit
FROM estimates e LEFT JOIN catalog c USING (url_id) LEFT JOIN visits v USING (url_id)
"""


@dataclass(frozen=True)
class PlanResult:
    path: Path
    summary: dict[str, float]


def plan_cycle(
    root: str | Path,
    cycle_id: int,
    budget: float,
    *,
    host_capacity: float = 500.0,
    cycle_days: float = 1.0,
    now: datetime | None = None,
    slices: Slices | None = None,
    seed: int = 0,
) -> PlanResult:
    """Write ``<root>/plans/cycle=<id>.parquet`` and return its path and summary.

    ``budget`` is the cycle's budget in cost units; ``host_capacity`` visits per host per
    cycle. The allocation spends what is left after the reserved slices, at most one visit
    per page per cycle; ``now`` defaults to the newest observation in the history.
    """
    slices = slices or Slices()
    est = load_rate_estimates(root)
    con = connect()
    con.register(
        "estimates",
        est[["url_id", "host", "rate", "log_std"]].assign(host=lambda d: d["host"].astype(str)),
    )
    con.register("catalog", CatalogStore(root).relation(con))
    con.register("history", HistoryStore(root).relation(con))
    observed = {"observed": list(OBSERVATION_OUTCOMES)}
    visits = con.sql(_LAST_VISITS, params=observed).to_arrow_table()
    con.register("visits", visits)
    pages = con.sql(_PAGES).to_df()
    if now is None:
        latest = pages["last_visit"].max()
        now = latest.to_pydatetime() if pd.notna(latest) else datetime.now().astimezone()
    since = (pd.Timestamp(now) - pages["last_visit"]).dt.total_seconds().to_numpy() / 86400.0
    host_codes, host_names = pd.factorize(pages["host"])
    n_hosts = len(host_names)
    due_budget = budget * (1 - slices.discovery - slices.reestimation - slices.verification)
    allocation = allocate(
        pages["rate"].to_numpy(),
        due_budget / cycle_days,
        weights=pages["value"].to_numpy(),
        costs=pages["cost"].to_numpy(),
        hosts=host_codes,
        host_capacity=np.full(n_hosts, host_capacity / cycle_days),
        max_frequency=1.0 / cycle_days,
    )
    candidates = Candidates(
        page_ids=pages["url_id"].to_numpy(),
        hosts=host_codes.astype(np.int64),
        value=pages["value"].to_numpy(),
        cost=pages["cost"].to_numpy(),
        rate=pages["rate"].to_numpy(),
        frequency=allocation.frequencies,
        log_std=pages["log_std"].to_numpy(),
        days_since_visit=since,
    )
    plan = select_batch(
        candidates,
        budget,
        np.full(n_hosts, host_capacity),
        slices=slices,
        cycle_days=cycle_days,
        seed=seed,
    )
    frame = pd.DataFrame(
        {
            "url_id": candidates.page_ids[plan.index],
            "host": pages["host"].to_numpy()[plan.index],
            "reason": np.asarray(REASONS, dtype=object)[plan.reason],
            "score": plan.score,
            "expected_gain": plan.expected_gain,
            "p_changed": plan.expected_change,
            "cost": plan.cost,
            "frequency": allocation.frequencies[plan.index],
        }
    )
    path = Path(root) / "plans" / f"cycle={cycle_id}.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    summary = plan.summary()
    summary["allocated_expected_freshness"] = allocation.expected_freshness
    return PlanResult(path, summary)
