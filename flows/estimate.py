"""Prefect flow: estimate every page's change rate from the stored history.

The task body is a thin wrapper over ``tasks.estimation.write_rate_estimates``; only a
path and a count cross the task boundary.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from tasks.estimation import write_rate_estimates
from tasks.memory import keep_freed_memory


@task(name="estimate-rates", cache_policy=NO_CACHE)
def estimate_rates_task(root: str) -> tuple[str, int]:
    keep_freed_memory()
    path, count = write_rate_estimates(root)
    return str(path), count


@flow(name="estimate", log_prints=False)
def estimate_flow(root: str = "data") -> dict[str, object]:
    """Write ``<root>/estimates/latest.parquet`` and return where and how many."""
    path, count = estimate_rates_task(root)
    get_run_logger().info("estimated change rates for %d pages -> %s", count, path)
    return {"path": path, "pages": count}
