"""The policy backtest as a job: run it, write its report folder (``recrawl backtest``).

Pure computation (``models.backtest.runner``) then rendering (``tasks.reports.backtest_report``);
no Prefect: a policy backtest is one CPU-bound process of simulated days, and a flow run
would only add its start-up. (``flows/evaluation/sandbox_runs.py`` is the other backtest: the whole
loop,
fetching included, on the sandbox web.)
"""

from __future__ import annotations

import argparse
import logging
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from models.backtest.runner import BacktestConfig, BacktestResult

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class PolicyBacktestRun:
    result: BacktestResult
    paths: dict[str, Path]


def run_policy_backtest(config: BacktestConfig, out: Path | str) -> PolicyBacktestRun:
    """Run the backtest ``config`` describes and write its report under ``out``."""
    from models.backtest.runner import run_backtest
    from tasks.reports.backtest_report import write_backtest_report

    log.info(
        "policy backtest: %s, %d pages x %d days, budget %g N%s",
        config.workload,
        config.pages,
        config.days,
        config.budget_share,
        ", cold start" if config.cold_start else "",
    )
    result = run_backtest(config)
    return PolicyBacktestRun(result, write_backtest_report(result, out))


def add_backtest_arguments(parser: argparse.ArgumentParser) -> None:
    """The ``recrawl backtest`` options."""
    parser.add_argument("--pages", type=int, default=100_000, help="pages of the simulated web")
    parser.add_argument(
        "--days", type=int, default=60, help="simulated days (day 0: seed crawl, unless cold)"
    )
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="no seed crawl: every page starts never fetched, day 0 is a fetch day "
        "(window default: every day)",
    )
    parser.add_argument(
        "--budget-share", type=float, default=0.2, help="daily budget as a share of N (0.2)"
    )
    parser.add_argument("--workload", choices=["measured", "shop", "shift"], default="measured")
    parser.add_argument(
        "--objective", choices=["freshness", "age", "change_capture"], default="freshness"
    )
    parser.add_argument(
        "--policies",
        help="comma-separated policies (default: the standard comparison); an unknown name "
        "is reported with the known ones (models.backtest.registry)",
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument(
        "--host-capacity", type=float, default=8_640.0, help="visits per host per day"
    )
    parser.add_argument(
        "--solve-every", type=int, default=1, help="days between re-estimations (default 1)"
    )
    parser.add_argument(
        "--window", help="days averaged, FIRST-LAST (default: the second half of the run)"
    )
    parser.add_argument(
        "--lm-honest",
        type=float,
        default=0.5,
        help="share of hosts whose Last-Modified is the true last change (assumed 0.5)",
    )
    parser.add_argument(
        "--lm-now",
        type=float,
        default=0.25,
        help='share of hosts stamping every answer "now" (assumed 0.25; the rest send none)',
    )
    parser.add_argument(
        "--out", type=Path, help="report folder (default data/reports/backtest-<workload>)"
    )


def run_from_args(args: argparse.Namespace) -> int:
    """``recrawl backtest``: print the comparison table, write the report folder."""
    from models.backtest.registry import check_policy_names
    from models.backtest.runner import POLICIES, BacktestConfig, format_table

    window = None
    if args.window:
        try:
            first, last = (int(x) for x in args.window.split("-"))
        except ValueError:
            raise ValueError(f"--window must be FIRST-LAST (days), got {args.window!r}") from None
        window = (first, last + 1)
    policies = (
        check_policy_names(p.strip() for p in args.policies.split(","))
        if args.policies
        else POLICIES
    )
    config = BacktestConfig(
        workload=args.workload,
        pages=args.pages,
        days=args.days,
        budget_share=args.budget_share,
        seed=args.seed,
        host_capacity=args.host_capacity,
        objective=args.objective,
        policies=policies,
        window=window,
        solve_every=args.solve_every,
        last_modified_honest=args.lm_honest,
        last_modified_now=args.lm_now,
        cold_start=args.cold_start,
    )
    out = args.out or Path("data/reports") / f"backtest-{args.workload}"
    run = run_policy_backtest(config, out)
    print(format_table(run.result))
    print(f"report: {run.paths['report']} (plots and daily metrics alongside)")
    return 0
