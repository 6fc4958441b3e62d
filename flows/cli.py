"""The ``recrawl`` command line."""

from __future__ import annotations

import argparse
import math
import sys
from pathlib import Path
from typing import Any

import pandas as pd

from flows.local_prefect import apply_prefect_defaults
from models.estimation.prior_names import PRIOR_NAMES
from models.planning.cost import COST_MODELS
from tasks.cycle.memory import keep_freed_memory

#: The commands that run Prefect flows: their Prefect defaults (flows.local_prefect) are
#: set before Prefect is imported.
STARTS_PREFECT = frozenset({"demo", "run"})
PRIOR_HELP = (
    "the rate estimator's prior: mixture (group or odd page, the default), empirical "
    "(a Gamma per group) or none (maximum likelihood); where it cannot be fitted a weaker "
    "one stands in, and the output says so"
)


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    keep_freed_memory()
    if args.command in STARTS_PREFECT:
        apply_prefect_defaults(
            quiet=not getattr(args, "verbose", False), keep_events=args.command != "demo"
        )
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, RuntimeError, OSError) as exc:  # OSError: a path given (ENAMETOOLONG...)
        print(f"recrawl {args.command}: {exc}", file=sys.stderr)
        return 2


def build_parser() -> argparse.ArgumentParser:
    """The ``recrawl`` commands and options; choices are read from the registries now."""
    parser = argparse.ArgumentParser(prog="recrawl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser(
        "demo", help="the whole loop on the sandbox web: planner vs uniform recrawl, 30 days"
    )
    demo.add_argument("--root", type=Path, default=Path("data/demo"))
    demo.add_argument("--hosts", type=int, default=40, help="sandbox hosts")
    demo.add_argument("--pages-per-host", type=int, default=50, help="sandbox pages per host")
    demo.add_argument("--cycles", type=int, default=30, help="simulated daily cycles")
    demo.add_argument(
        "--budget-share", type=float, default=0.15, help="daily budget / pages (default 0.15)"
    )
    demo.add_argument("--seed", type=int, default=0)
    demo.add_argument("--verbose", action="store_true", help="show Prefect's run logs")

    synth = sub.add_parser("synthetic", help="estimate change rates on a synthetic web's history")
    synth.add_argument("--root", type=Path, default=Path("data/synthetic"))
    synth.add_argument("--pages", type=int, default=20_000)
    synth.add_argument("--cycles", type=int, default=30)
    synth.add_argument("--seed", type=int, default=0)

    est = sub.add_parser("estimate", help="per-page change-rate estimates from a history")
    est.add_argument("--root", type=Path, default=Path("data"))
    est.add_argument("--out", type=Path, help="write the estimates to this Parquet file")
    est.add_argument("--prior", choices=PRIOR_NAMES, default="mixture", help=PRIOR_HELP)

    plan = sub.add_parser("plan", help="estimate -> allocate -> select this cycle's batch")
    plan.add_argument("--root", type=Path, default=Path("data"))
    plan.add_argument("--cycle", type=int, help="the cycle id to plan (default: the next one)")
    plan.add_argument("--budget", type=float, required=True, help="the cycle's budget, cost units")
    plan.add_argument(
        "--name",
        help="ad hoc plan name (default: the cycle and the time); written to plans/adhoc/",
    )
    plan.add_argument(
        "--host-capacity", type=float, default=500.0, help="visits per host per cycle"
    )
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument(
        "--cost-model",
        choices=list(COST_MODELS),
        default="credits",
        help="how a visit is priced: scraping-API credits per delivered response, proxy "
        "bandwidth (bytes incl. headers, failures too), or the catalog's cost hints",
    )
    plan.add_argument("--prior", choices=PRIOR_NAMES, default="mixture", help=PRIOR_HELP)
    plan.add_argument(
        "--periodic",
        action="store_true",
        help="detect pages that change once every 2-30 cycles and plan them just after their "
        "expected change (reads the last 60 cycles of history: about 2 us a stored visit)",
    )

    run = sub.add_parser(
        "run", help="one cycle of the daily recrawl on your root: plan, fetch, commit, report"
    )
    run.add_argument("--root", type=Path, default=Path("data"))
    run.add_argument("--budget", type=float, required=True, help="the cycle's budget, cost units")
    run.add_argument("--cycle", type=int, help="the cycle id (default: the next one)")
    run.add_argument("--host-capacity", type=float, default=500.0, help="visits per host per cycle")
    run.add_argument("--cost-model", choices=list(COST_MODELS), default="credits")
    run.add_argument("--prior", choices=PRIOR_NAMES, default="mixture", help=PRIOR_HELP)
    run.add_argument("--seed", type=int, help="verification sample seed (default: the cycle id)")
    run.add_argument("--window", type=float, help="seconds of fetching before the rest is shed")
    run.add_argument("--replace", action="store_true", help="redo a committed cycle")
    add_fetch_arguments(run)
    run.add_argument("--verbose", action="store_true", help="show Prefect's run logs")

    cat = sub.add_parser("catalog", help="add pages to the catalog from a CSV or Parquet file")
    cat.add_argument("action", choices=["import"])
    cat.add_argument("file", type=Path)
    cat.add_argument("--root", type=Path, default=Path("data"))

    fetch = sub.add_parser("fetch", help="fetch URLs politely, write their history rows")
    fetch.add_argument("urls", nargs="*", help="URLs to fetch")
    fetch.add_argument("--urls", dest="url_file", type=Path, help="file with one URL per line")
    fetch.add_argument("--out", type=Path, required=True, help="Parquet file for the rows")
    fetch.add_argument("--window", type=float, help="seconds before the rest is shed")
    fetch.add_argument("--cycle", type=int, default=0, help="cycle id written in the rows")
    add_fetch_arguments(fetch)

    disc = sub.add_parser("discover", help="add new URLs to the catalog from seeds or sitemaps")
    disc.add_argument("--root", type=Path, default=Path("data"))
    disc.add_argument("--seed", action="append", default=[], metavar="URL", help="seed URL")
    disc.add_argument("--sitemap", action="append", default=[], metavar="URL", help="sitemap")
    disc.add_argument("--max-pages", type=int, help="add at most N new pages")
    disc.add_argument(
        "--min-delay", type=float, default=0.5, help="seconds between requests to one host"
    )
    disc.add_argument(
        "--allow-network",
        action="append",
        metavar="CIDR",
        help="reach this network although loopback/private/reserved (as for fetch)",
    )
    disc.add_argument(
        "--deadline",
        type=float,
        metavar="S",
        help="seconds for the whole run (default 600; each host 120); the rest is reported",
    )

    hist = sub.add_parser("history", help="inspect or maintain the fetch history")
    hist.add_argument("action", choices=["cycles", "rebuild-stats", "show"])
    hist.add_argument("--root", type=Path, default=Path("data"))
    hist.add_argument("--cycle", type=int, help="show: this cycle (default: the newest)")
    hist.add_argument("--limit", type=int, default=20, help="show: at most this many rows")

    from flows.evaluation.policy_backtest import add_backtest_arguments

    backtest = sub.add_parser(
        "backtest", help="compare recrawl policies on a simulated web under one daily budget"
    )
    add_backtest_arguments(backtest)

    from flows.evaluation.sandbox_web import add_serve_arguments

    sandbox = sub.add_parser("sandbox", help="serve the sandbox web on loopback (Ctrl-C stops)")
    add_serve_arguments(sandbox)
    return parser


def add_fetch_arguments(parser: argparse.ArgumentParser) -> None:
    """The fetch settings a command may override (``tasks.fetch.settings.FetchSettings``)."""
    parser.add_argument("--mode", choices=["direct", "api", "proxy"], help="(RECRAWL_MODE)")
    parser.add_argument("--api-url", help="scraping API endpoint (RECRAWL_API_URL)")
    parser.add_argument("--proxy-url", help="forward proxy (RECRAWL_PROXY_URL)")
    parser.add_argument("--concurrency", type=int, help="requests in flight (RECRAWL_CONCURRENCY)")
    parser.add_argument(
        "--allow-network",
        action="append",
        metavar="CIDR",
        help="reach this network although loopback/private/reserved, e.g. 127.0.0.0/8 for "
        "the sandbox; repeatable (RECRAWL_ALLOWED_NETWORKS, comma-separated)",
    )


def fetch_overrides(args: argparse.Namespace) -> dict[str, Any]:
    """The fetch settings given on the command line, checked (bad ones: ``ValueError``)."""
    from pydantic import ValidationError

    from tasks.fetch.settings import FetchSettings

    overrides = {
        "mode": args.mode,
        "api_url": args.api_url,
        "proxy_url": args.proxy_url,
        "concurrency": args.concurrency,
        "allowed_networks": args.allow_network,
    }
    given = {k: v for k, v in overrides.items() if v is not None}
    try:
        FetchSettings(**given)
    except ValidationError as exc:
        raise ValueError(f"bad fetch settings: {exc.errors()[0]['msg']}") from None
    return given


def check_cycle_and_budget(args: argparse.Namespace) -> None:
    """``--cycle`` and ``--budget`` as given, or one line saying what is wrong with them."""
    if args.cycle is not None and args.cycle < 0:
        raise ValueError(f"--cycle must be >= 0, got {args.cycle}")
    if not math.isfinite(args.budget) or args.budget < 0:
        raise ValueError(f"--budget must be a finite number >= 0, got {args.budget:g}")
    if not math.isfinite(args.host_capacity) or args.host_capacity <= 0:
        raise ValueError(f"--host-capacity must be a finite number > 0, got {args.host_capacity:g}")


def _demo(args: argparse.Namespace) -> int:
    if args.hosts < 1 or args.pages_per_host < 1 or args.cycles < 1:
        raise ValueError("--hosts, --pages-per-host and --cycles must be >= 1")
    if not 0 < args.budget_share <= 1:
        raise ValueError(f"--budget-share must be within (0, 1], got {args.budget_share}")
    from flows.evaluation.demo import format_result, run_demo

    result = run_demo(
        args.root,
        hosts=args.hosts,
        pages_per_host=args.pages_per_host,
        cycles=args.cycles,
        budget_share=args.budget_share,
        seed=args.seed,
    )
    print(format_result(result))
    return 0


def _synthetic(args: argparse.Namespace) -> int:
    from flows.evaluation.estimation_demo import run_estimation_demo

    if args.pages < 1 or args.cycles < 1:  # before the root is replaced
        raise ValueError(f"--pages and --cycles must be >= 1, got {args.pages} and {args.cycles}")
    if args.root.exists() and not args.root.is_dir():
        raise ValueError(f"--root is not a folder: {args.root}")
    result = run_estimation_demo(args.root, pages=args.pages, cycles=args.cycles, seed=args.seed)
    print(
        f"synthetic web: {result.pages} pages, {result.cycles} daily cycles, "
        f"{result.rows} fetch rows under {args.root}"
    )
    print("median estimate / true rate, by band of true rate (1.0 is right):")
    with pd.option_context("display.float_format", "{:.3f}".format):
        print(result.table.to_string())
    print(f"true rate inside the 90% interval: {result.table.attrs['coverage_90']:.1%}")
    return 0


def _estimate(args: argparse.Namespace) -> int:
    from tasks.cycle.estimation import load_rate_estimates
    from tasks.store.catalog import require_store
    from tasks.store.durable import durable_write

    require_store(args.root)
    if args.out and (args.out.is_dir() or not args.out.parent.is_dir()):  # before estimating
        raise ValueError(f"--out must be a file in an existing folder, got {args.out}")
    frame = load_rate_estimates(args.root, prior=args.prior)
    if args.out:
        durable_write(args.out, lambda handle: frame.to_parquet(handle, index=False))
        print(f"wrote {len(frame)} estimates to {args.out}")
    else:
        print(frame["rate"].describe().to_string())
    print(frame.attrs["prior_description"])
    return 0


def _plan(args: argparse.Namespace) -> int:
    from flows.plan import next_cycle_id
    from models.estimation.periodic import DEFAULT_RULE
    from tasks.cycle.planning import adhoc_plan_name, plan_cycle
    from tasks.store.catalog import require_store

    check_cycle_and_budget(args)
    require_store(args.root)
    cycle = next_cycle_id(args.root) if args.cycle is None else args.cycle
    result = plan_cycle(
        args.root,
        cycle,
        args.budget,
        host_capacity=args.host_capacity,
        seed=args.seed,
        cost_model=args.cost_model,
        adhoc_name=args.name or adhoc_plan_name(cycle),
        prior=args.prior,
        periodic=DEFAULT_RULE if args.periodic else None,
    )
    print(f"plan of cycle {cycle} written to {result.path} (cost model: {result.cost_model})")
    print(result.prior)
    for key, value in result.summary.items():
        print(f"  {key:<28} {value:,.3f}")
    return 0


def _run(args: argparse.Namespace) -> int:
    from flows.local_prefect import start_local_prefect
    from tasks.store.catalog import require_store

    check_cycle_and_budget(args)
    if args.window is not None and not args.window > 0:
        raise ValueError(f"--window must be > 0 seconds, got {args.window:g}")
    require_store(args.root, catalog=True)
    fetch = fetch_overrides(args)
    start_local_prefect()
    from flows.recrawl import recrawl_flow

    summary = recrawl_flow(
        root=str(args.root),
        budget=args.budget,
        cycle=args.cycle,
        host_capacity=args.host_capacity,
        cost_model=args.cost_model,
        prior=args.prior,
        fetch=fetch or None,
        window_s=args.window,
        replace=args.replace,
        seed=args.seed,
    )
    print("\n".join(run_summary_lines(summary)))
    return 0


def run_summary_lines(summary: dict[str, Any]) -> list[str]:
    """What ``recrawl run`` prints of the cycle: counts, cost, and where the report is."""
    if summary.get("status") != "committed":
        return [f"cycle {summary['cycle']}: {summary['status']} (--replace redoes it)"]
    failed = summary["failed_batches"]
    return [
        f"cycle {summary['cycle']} committed: {summary['rows']} rows, "
        f"{summary['observations']} observations, {summary['changes_found']} changes found, "
        f"cost {summary['cost']:,.2f}, {summary['batches']} host batches"
        + (f" ({len(failed)} failed)" if failed else ""),
        f"report: {summary['report']}",
    ]


def _catalog(args: argparse.Namespace) -> int:
    from tasks.store.catalog import CatalogStore

    if not args.file.is_file():
        raise ValueError(f"no such file: {args.file}")
    if args.root.exists() and not args.root.is_dir():
        raise ValueError(f"--root is not a folder: {args.root}")
    read = pd.read_parquet if args.file.suffix == ".parquet" else pd.read_csv
    frame = read(args.file)
    size = CatalogStore(args.root).upsert(frame)
    print(f"imported {len(frame)} rows; the catalog under {args.root} now has {size} pages")
    return 0


def _fetch(args: argparse.Namespace) -> int:
    import logging

    from tasks.fetch.engine import fetch_batch_sync
    from tasks.fetch.rows import with_urls, write_rows_file
    from tasks.fetch.settings import FetchSettings

    urls = list(args.urls)
    if args.url_file is not None:
        if not args.url_file.is_file():
            raise ValueError(f"no such file: {args.url_file}")
        lines = args.url_file.read_text().splitlines()
        urls += [u.strip() for u in lines if u.strip() and not u.lstrip().startswith("#")]
    if not urls:
        raise ValueError("no URLs given (pass them as arguments or with --urls FILE)")
    if not args.out.parent.is_dir():  # before any request: the rows must have somewhere to go
        raise ValueError(f"--out: no such folder {args.out.parent}")
    if args.out.is_dir():
        raise ValueError(f"--out is a folder, not a file: {args.out}")
    if args.cycle < 0:
        raise ValueError(f"--cycle must be >= 0, got {args.cycle}")
    settings = FetchSettings(**fetch_overrides(args))
    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise
    result = fetch_batch_sync(urls, settings=settings, cycle_id=args.cycle, window_s=args.window)
    write_rows_file(with_urls(result.rows, urls), args.out)
    frame = result.rows.select(["outcome", "reason"]).to_pandas()
    table = frame.groupby("outcome", dropna=False).agg(
        urls=("outcome", "size"), example_reason=("reason", "first")
    )
    print(table.sort_values("urls", ascending=False).to_string())
    metrics = result.metrics
    print(
        f"{metrics.urls} URLs in {metrics.elapsed_s:.1f} s, {metrics.requests} requests, "
        f"{metrics.retries} retries; rows written to {args.out}"
    )
    return 0


def _discover(args: argparse.Namespace) -> int:
    from dataclasses import replace

    from tasks.discovery.run import DiscoverySettings, discover_sync
    from tasks.discovery.sitemaps import SitemapSettings

    if not args.seed and not args.sitemap:
        raise ValueError("give at least one --seed URL or --sitemap URL")
    if args.max_pages is not None and args.max_pages < 0:
        raise ValueError(f"--max-pages must be >= 0, got {args.max_pages}")
    if args.min_delay < 0:
        raise ValueError(f"--min-delay must be >= 0, got {args.min_delay}")
    sitemaps = SitemapSettings(min_delay_s=args.min_delay)
    if args.deadline is not None:
        if not (math.isfinite(args.deadline) and args.deadline > 0):
            raise ValueError(f"--deadline must be a number of seconds > 0, got {args.deadline}")
        sitemaps = replace(sitemaps, run_deadline_s=args.deadline)
    if args.allow_network:
        sitemaps = replace(sitemaps, allowed_networks=tuple(args.allow_network))
    settings = DiscoverySettings(sitemaps=sitemaps)
    report = discover_sync(
        args.root,
        seeds=args.seed,
        sitemaps=args.sitemap,
        max_pages=args.max_pages,
        settings=settings,
    )
    print("\n".join(report.summary_lines()))
    return 0


def _history(args: argparse.Namespace) -> int:
    from tasks.store.catalog import require_store
    from tasks.store.history import HistoryStore

    require_store(args.root)
    store = HistoryStore(args.root)
    if args.action == "cycles":
        for cycle_id, entry in sorted(
            store.manifest()["cycles"].items(), key=lambda kv: int(kv[0])
        ):
            print(f"cycle {cycle_id}: {entry['rows']} rows, committed {entry['committed_at']}")
    elif args.action == "show":
        from tasks.store.frames import show_history

        print(show_history(args.root, args.cycle, args.limit))
    else:
        stats = store.rebuild_stats()
        print(f"rebuilt statistics for {stats.num_rows} pages")
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    from flows.evaluation.sandbox_web import serve_from_args

    return serve_from_args(args)


def _backtest(args: argparse.Namespace) -> int:
    from flows.evaluation.policy_backtest import run_from_args

    if args.out is not None and args.out.exists() and not args.out.is_dir():  # before running
        raise ValueError(f"--out must be a folder, got the file {args.out}")
    return run_from_args(args)


_COMMANDS = {
    "demo": _demo,
    "synthetic": _synthetic,
    "estimate": _estimate,
    "plan": _plan,
    "run": _run,
    "catalog": _catalog,
    "history": _history,
    "discover": _discover,
    "fetch": _fetch,
    "sandbox": _sandbox,
    "backtest": _backtest,
}

if __name__ == "__main__":
    raise SystemExit(main())
