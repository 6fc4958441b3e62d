"""The ``recrawl`` command line."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import pandas as pd

from tasks.memory import keep_freed_memory


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="recrawl", description=__doc__)
    sub = parser.add_subparsers(dest="command", required=True)

    demo = sub.add_parser("demo", help="estimate change rates on a synthetic web's history")
    demo.add_argument("--root", type=Path, default=Path("data/demo"))
    demo.add_argument("--pages", type=int, default=20_000)
    demo.add_argument("--cycles", type=int, default=30)
    demo.add_argument("--seed", type=int, default=0)

    est = sub.add_parser("estimate", help="per-page change-rate estimates from a history")
    est.add_argument("--root", type=Path, default=Path("data"))
    est.add_argument("--out", type=Path, help="write the estimates to this Parquet file")
    est.add_argument("--prior", choices=["empirical", "none"], default="empirical")

    plan = sub.add_parser("plan", help="estimate -> allocate -> select this cycle's batch")
    plan.add_argument("--root", type=Path, default=Path("data"))
    plan.add_argument("--cycle", type=int, required=True, help="the cycle id to plan")
    plan.add_argument("--budget", type=float, required=True, help="the cycle's budget, cost units")
    plan.add_argument(
        "--host-capacity", type=float, default=500.0, help="visits per host per cycle"
    )
    plan.add_argument("--seed", type=int, default=0)
    plan.add_argument(
        "--cost-model",
        choices=["credits", "bandwidth", "catalog"],
        default="credits",
        help="how a visit is priced: scraping-API credits per delivered response, proxy "
        "bandwidth (bytes incl. headers, failures too), or the catalog's cost hints",
    )

    cat = sub.add_parser("catalog", help="add pages to the catalog from a CSV or Parquet file")
    cat.add_argument("action", choices=["import"])
    cat.add_argument("file", type=Path)
    cat.add_argument("--root", type=Path, default=Path("data"))

    hist = sub.add_parser("history", help="inspect or maintain the fetch history")
    hist.add_argument("action", choices=["cycles", "rebuild-stats"])
    hist.add_argument("--root", type=Path, default=Path("data"))

    from sandbox.cli import add_serve_arguments

    sandbox = sub.add_parser("sandbox", help="serve the sandbox web on loopback (Ctrl-C stops)")
    add_serve_arguments(sandbox)

    args = parser.parse_args(argv)
    keep_freed_memory()
    try:
        return _COMMANDS[args.command](args)
    except (ValueError, RuntimeError) as exc:
        print(f"recrawl {args.command}: {exc}", file=sys.stderr)
        return 2


def _demo(args: argparse.Namespace) -> int:
    from flows.demo import run_demo

    result = run_demo(args.root, pages=args.pages, cycles=args.cycles, seed=args.seed)
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
    from tasks.estimation import load_rate_estimates

    frame = load_rate_estimates(args.root, prior=args.prior)
    if args.out:
        frame.to_parquet(args.out, index=False)
        print(f"wrote {len(frame)} estimates to {args.out}")
    else:
        print(frame["rate"].describe().to_string())
    return 0


def _plan(args: argparse.Namespace) -> int:
    from tasks.planning import plan_cycle

    result = plan_cycle(
        args.root,
        args.cycle,
        args.budget,
        host_capacity=args.host_capacity,
        seed=args.seed,
        cost_model=args.cost_model,
    )
    print(f"plan written to {result.path} (cost model: {result.cost_model})")
    for key, value in result.summary.items():
        print(f"  {key:<28} {value:,.3f}")
    return 0


def _catalog(args: argparse.Namespace) -> int:
    from tasks.catalog import CatalogStore

    if not args.file.exists():
        raise ValueError(f"no such file: {args.file}")
    read = pd.read_parquet if args.file.suffix == ".parquet" else pd.read_csv
    frame = read(args.file)
    size = CatalogStore(args.root).upsert(frame)
    print(f"imported {len(frame)} rows; the catalog under {args.root} now has {size} pages")
    return 0


def _history(args: argparse.Namespace) -> int:
    from tasks.history import HistoryStore

    store = HistoryStore(args.root)
    if args.action == "cycles":
        for cycle_id, entry in sorted(
            store.manifest()["cycles"].items(), key=lambda kv: int(kv[0])
        ):
            print(f"cycle {cycle_id}: {entry['rows']} rows, committed {entry['committed_at']}")
    else:
        stats = store.rebuild_stats()
        print(f"rebuilt statistics for {stats.num_rows} pages")
    return 0


def _sandbox(args: argparse.Namespace) -> int:
    import asyncio

    from sandbox.cli import raise_open_file_limit, serve_foreground, web_from_args

    web = web_from_args(args)
    raise_open_file_limit(args.hosts + 4_096)
    serving = serve_foreground(
        web,
        args.port,
        manifest_path=args.manifest,
        log_max_entries=args.log_max_entries,
        show_hosts=5,
        warmup=not args.no_warmup,
    )
    asyncio.run(serving)
    return 0


_COMMANDS = {
    "demo": _demo,
    "estimate": _estimate,
    "plan": _plan,
    "catalog": _catalog,
    "history": _history,
    "sandbox": _sandbox,
}

if __name__ == "__main__":
    raise SystemExit(main())
