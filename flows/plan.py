"""Prefect flow ``plan``: estimate -> allocate -> select -> the cycle's plan Parquet.

One task over ``tasks.cycle.planning.plan_cycle``; it returns the plan's path and its summary
numbers (budget by slice, expected changes, expected cost per change). The recrawl flow
runs the same task as its first step.
"""

from __future__ import annotations

import json
import time
from datetime import datetime
from pathlib import Path
from typing import Any

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.run_context import run_logger
from models.estimation.periodic import DEFAULT_RULE
from models.estimation.prior_names import PriorName
from models.planning.cost import CostModelName
from models.planning.select import Slices
from tasks.cycle.memory import keep_freed_memory
from tasks.cycle.planning import adhoc_plan_name, plan_cycle
from tasks.store.durable import durable_write_text
from tasks.store.history import HistoryStore


def next_cycle_id(root: str | Path) -> int:
    """The cycle after the newest committed one (0 for an empty history)."""
    cycles = HistoryStore(root).cycles()
    return cycles[-1] + 1 if cycles else 0


def summary_path(plan_path: str | Path) -> Path:
    path = Path(plan_path)
    return path.with_name(path.name.replace(".parquet", ".summary.json"))


@task(name="plan-cycle", cache_policy=NO_CACHE)
def plan_cycle_task(
    root: str,
    cycle: int,
    budget: float,
    host_capacity: float = 500.0,
    cost_model: CostModelName = "credits",
    seed: int = 0,
    at: datetime | None = None,
    slices: dict[str, Any] | None = None,
    adhoc_name: str | None = None,
    prior: PriorName = "mixture",
    periodic: bool = False,
) -> dict[str, Any]:
    """Write ``<root>/plans/cycle=<id>.parquet`` (and its summary JSON); return path + numbers.

    With ``adhoc_name``: ``plans/adhoc/<name>.parquet`` (``tasks.cycle.planning.plan_path``).
    ``periodic``: detect pages that change once every P cycles (``plan_cycle``'s detector).
    """
    keep_freed_memory()
    started = time.time()
    result = plan_cycle(
        root,
        cycle,
        budget,
        host_capacity=host_capacity,
        cost_model=cost_model,
        seed=seed,
        now=at,
        slices=Slices(**slices) if slices else None,
        adhoc_name=adhoc_name,
        prior=prior,
        periodic=DEFAULT_RULE if periodic else None,
    )
    summary = {k: float(v) for k, v in result.summary.items()}
    durable_write_text(
        summary_path(result.path),
        json.dumps(
            {"cycle": cycle, "cost_model": result.cost_model, "prior": result.prior, **summary}
        ),
    )
    run_logger().info(
        "planned cycle %s: %d pages, %.1f of %.1f spent (%s), %.1f changes expected; %s",
        cycle,
        summary["pages"],
        summary["spent"],
        budget,
        result.cost_model,
        summary["expected_changes"],
        result.prior,
    )
    return {
        "path": str(result.path),
        "summary": summary,
        "cost_model": result.cost_model,
        "prior": result.prior,
        "started": started,
        "ended": time.time(),
    }


@flow(name="plan")
def plan_flow(
    root: str = "data",
    budget: float = 1000.0,
    cycle: int | None = None,
    host_capacity: float = 500.0,
    cost_model: CostModelName = "credits",
    seed: int = 0,
    at: datetime | None = None,
    prior: PriorName = "mixture",
    periodic: bool = False,
) -> dict[str, Any]:
    """Plan one cycle (default: the one after the newest committed) without fetching.

    ``at`` is the planning time (default: the newest attempt in the history). The plan is an
    ad hoc one, written under its own name in ``plans/adhoc/`` (returned as ``path``): it
    never replaces the plan of a cycle the daily recrawl is running.
    """
    cycle_id = next_cycle_id(root) if cycle is None else cycle
    planned = plan_cycle_task(
        root,
        cycle_id,
        budget,
        host_capacity,
        cost_model,
        seed,
        at,
        adhoc_name=adhoc_plan_name(cycle_id),
        prior=prior,
        periodic=periodic,
    )
    return {
        "cycle": cycle_id,
        "path": planned["path"],
        "prior": planned["prior"],
        **planned["summary"],
    }
