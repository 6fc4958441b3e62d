"""Prefect flow: estimate every page's change rate from the stored history.

The task body is a thin wrapper over ``tasks.cycle.estimation.write_rate_estimates``; only a
path, a count and the prior's one-line description cross the task boundary.
"""

from __future__ import annotations

from prefect import flow, get_run_logger, task
from prefect.cache_policies import NO_CACHE

from models.estimation.prior_names import PriorName
from tasks.cycle.estimation import write_rate_estimates
from tasks.cycle.memory import keep_freed_memory


@task(name="estimate-rates", cache_policy=NO_CACHE)
def estimate_rates_task(root: str, prior: PriorName = "mixture") -> dict[str, object]:
    keep_freed_memory()
    path, count, prior_line = write_rate_estimates(root, prior=prior)
    return {"path": str(path), "pages": count, "prior": prior_line}


@flow(name="estimate", log_prints=False)
def estimate_flow(root: str = "data", prior: PriorName = "mixture") -> dict[str, object]:
    """Write ``<root>/estimates/latest.parquet``; return where, how many, and the prior used
    (a weaker one where ``prior`` cannot be fitted: ``models.estimation.change_rate.FALLBACKS``)."""
    result = estimate_rates_task(root, prior)
    get_run_logger().info(
        "estimated change rates for %d pages -> %s (%s)",
        result["pages"],
        result["path"],
        result["prior"],
    )
    return result
