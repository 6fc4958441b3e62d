"""The one-process route: serve the deployments of ``prefect.yaml`` without a work pool.

``python -m flows.serve [--root data] [--budget 10000] [--cost-model credits]`` registers
the daily recrawl, weekly discovery and ad hoc plan deployments with the Prefect API
(``PREFECT_API_URL``) and runs their scheduled and manual runs in this process until
interrupted. Without ``PREFECT_API_URL`` it starts Prefect's local server first (whose
first start on a new ``PREFECT_HOME`` creates its database; ``flows.local_prefect``).
"""

from __future__ import annotations

import argparse
import os
import sys
from typing import TYPE_CHECKING, cast

from flows.local_prefect import PrefectStartError, apply_prefect_defaults, start_local_prefect
from models.planning.cost import COST_MODELS

if TYPE_CHECKING:
    from prefect.deployments.runner import RunnerDeployment


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m flows.serve", description=__doc__)
    parser.add_argument("--root", default=os.environ.get("RECRAWL_ROOT", "data"))
    parser.add_argument("--budget", type=float, default=10_000.0)
    parser.add_argument("--cost-model", choices=list(COST_MODELS))
    parser.add_argument(
        "--host-shards", type=int, default=64, help="0: one host:<name> tag per host"
    )
    parser.add_argument(
        "--batch-workers",
        type=int,
        default=0,
        help="host batches in this many worker processes (0: in the flow's process)",
    )
    return parser


def main(argv: list[str] | None = None) -> None:
    args = build_parser().parse_args(argv)
    apply_prefect_defaults(quiet=False)  # before Prefect is imported; a served process logs
    from prefect import serve

    from flows.discover import discover_flow
    from flows.plan import plan_flow
    from flows.recrawl import recrawl_flow
    from tasks.cycle.batch_workers import check_batch_workers

    try:
        batch_workers = check_batch_workers(args.batch_workers)
    except ValueError as exc:
        print(f"python -m flows.serve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    try:
        start_local_prefect()
    except PrefectStartError as exc:
        print(f"python -m flows.serve: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    common = {"root": args.root, "budget": args.budget, "cost_model": args.cost_model or "credits"}
    # Flow.to_deployment is @async_dispatch'ed, so typed "RunnerDeployment | Coroutine[...,
    # RunnerDeployment]"; called here, outside an event loop, it returns the deployment.
    recrawl = recrawl_flow.to_deployment(
        "recrawl-daily",
        cron="0 3 * * *",
        parameters={
            **common,
            "host_shards": args.host_shards,
            "batch_workers": batch_workers,
        },
        concurrency_limit=1,
    )
    discover = discover_flow.to_deployment(
        "discover-weekly", cron="0 1 * * 0", parameters={"root": args.root}
    )
    adhoc = plan_flow.to_deployment("plan-adhoc", parameters=common)
    serve(
        cast("RunnerDeployment", recrawl),
        cast("RunnerDeployment", discover),
        cast("RunnerDeployment", adhoc),
    )


if __name__ == "__main__":
    main()
