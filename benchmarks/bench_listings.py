"""Benchmark: listings as change detectors and JSON endpoints, on and off, backtest and sandbox.

Target (issue 20): on a shop-like web with listings, at least 2x fewer credits per change
detected at the same freshness, against the planner without them.

1. Backtest (``models.backtest.listings``): the shop workload (weekly repricing, flash-sale
   and discontinued categories, a quarter of the shops needing rendering at 5 credits a
   visit), the deployed planner (``plan_from_moments`` every day) without signals, with
   listings (40 items a category page), with JSON endpoints, with both; the same budget,
   web and seed. Then, per signal, the smallest budget (of 1, 0.8, 0.65, 0.5, 0.4, 0.3,
   0.25, 0.2 x) at which it is at least as fresh as the planner without it at the full budget,
   and its credits per change there: the ratio at the same freshness.
2. Sandbox crawl: shop hosts (``HostBehaviour(listing_size=40, json_link=True)``) recrawled
   daily through the cycle's own functions (``plan_cycle``, ``split_plan``,
   ``run_listing_pass``, ``run_host_batch``, ``commit_cycle``: what the flow's tasks run,
   without Prefect), with and without the listings declared, at the same budget and at
   smaller ones with listings. Freshness is the ground truth's (share of pages whose last
   fetched copy is the current version, sampled 4 times a day over the measured cycles);
   credits count every billed fetch (a listing is one credit; a page recorded unchanged from
   its listing costs nothing); changes detected are item fetches that found a change. With
   endpoints declared the items are fetched as JSON: bytes per change are printed too.

3. ``--curve``: the same-freshness ratio as a curve over budgets (see ``curve``).

Reproduce:  .venv/bin/python benchmarks/bench_listings.py [--seeds 3 --pages 10000 --days 30]
            [--hosts 4 --items 200 --cycles 12 --skip-sandbox --skip-backtest]
            .venv/bin/python benchmarks/bench_listings.py --curve --seeds 3 --pages 8000 --days 30
            (``--seed S`` with ``--curve``: that seed alone, to run seeds side by side)
"""

from __future__ import annotations

import argparse
import os
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from urllib.parse import urlsplit

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from models.backtest.listings import (
    ShopRun,
    ShopSignals,
    credits_at_freshness,
    run_shop,
    same_freshness,
)
from models.discovery.urls import normalize, url_id
from models.planning.select import Slices
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.planning import plan_cycle
from tasks.cycle.work import commit_cycle, fixed_clock, run_host_batch, split_plan
from tasks.fetch.settings import FetchSettings
from tasks.listings import (
    EndpointRoute,
    apply_listing_summaries,
    declare_endpoints,
    declare_listings,
    run_listing_pass,
)
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
FETCH = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.01,
    delay_factor=1.0,
    request_timeout_s=10.0,
    robots_timeout_s=5.0,
    retry_base_s=0.05,
    retry_cap_s=0.2,
    seed=1,
    allowed_networks=list(SANDBOX_NETWORKS),
)
BOOTSTRAP = Slices(discovery=1.0, reestimation=0.0, verification=0.0)


def load() -> str:
    return "load {:.1f} {:.1f} {:.1f}".format(*os.getloadavg())


# ---------------------------------------------------------------------- backtest


def backtest(args: argparse.Namespace) -> None:
    print(
        f"== backtest: shop web, {args.pages} pages, {args.days} days (measured from day "
        f"{args.days // 2}), budget {args.budget_share:g} x pages a day, seeds 0-{args.seeds - 1}"
        f", {load()}"
    )
    variants = {
        "listings": ShopSignals(listings=True),
        "json": ShopSignals(json_endpoints=True),
        "listings+json": ShopSignals(listings=True, json_endpoints=True),
    }
    rows: dict[str, list[tuple[ShopRun, ShopRun | None]]] = {k: [] for k in variants}
    offs: list[ShopRun] = []
    cpu = time.process_time()
    for seed in range(args.seeds):
        options = {"pages": args.pages, "days": args.days, "seed": seed}
        off = run_shop(ShopSignals(), budget_share=args.budget_share, **options)
        offs.append(off)
        print(
            f"seed {seed} planner: freshness {off.freshness:.4f}, credits/change "
            f"{off.credits_per_change:.3f}",
            flush=True,
        )
        for name, signals in variants.items():
            same_budget = run_shop(signals, budget_share=args.budget_share, **options)
            matched = same_freshness(signals, off, **options)
            rows[name].append((same_budget, matched))
            where = (
                f"at {matched.budget / off.budget:.2f}x the budget: freshness "
                f"{matched.freshness:.4f}, credits/change {matched.credits_per_change:.3f} "
                f"(x{off.credits_per_change / matched.credits_per_change:.2f} fewer)"
                if matched is not None
                else "never as fresh"
            )
            print(
                f"  {name:14} same budget: freshness {same_budget.freshness:.4f}, "
                f"credits/change {same_budget.credits_per_change:.3f} (listings "
                f"{same_budget.listing_credits / max(same_budget.credits, 1):.0%} of the "
                f"credits); same freshness {where}",
                flush=True,
            )
    print("mean over seeds (credits per change detected; ratio = planner / signal):")
    base = np.mean([o.credits_per_change for o in offs])
    fresh = np.mean([o.freshness for o in offs])
    print(f"  planner        freshness {fresh:.4f}  credits/change {base:.3f}")
    for name, runs in rows.items():
        same = [r for r, _ in runs]
        matched = [m for _, m in runs]
        ratios = [
            o.credits_per_change / m.credits_per_change
            for o, m in zip(offs, matched, strict=True)
            if m is not None
        ]
        print(
            f"  {name:14} same budget: freshness {np.mean([r.freshness for r in same]):.4f} "
            f"credits/change {np.mean([r.credits_per_change for r in same]):.3f} "
            f"(x{base / np.mean([r.credits_per_change for r in same]):.2f}); same freshness: "
            f"x{min(ratios, default=float('nan')):.2f}..x{max(ratios, default=float('nan')):.2f}"
            f" fewer credits/change ({len(ratios)} of {len(runs)} seeds reach it)"
        )
    print(f"(backtest CPU {time.process_time() - cpu:.1f} s, {load()})")


# ---------------------------------------------------------------------- sandbox


def sandbox_run(
    web: SandboxWeb,
    running: object,
    *,
    listings: bool,
    endpoints: bool,
    budget: float,
    cycles: int,
    warmup: int,
) -> dict[str, float]:
    root = tempfile.mkdtemp(prefix="bench-listings-")
    try:
        urls = running.page_urls()  # type: ignore[attr-defined]
        hosts = [urlsplit(u).netloc for u in urls]
        CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": hosts}))
        if listings:
            declare_listings(root, running.listing_urls())  # type: ignore[attr-defined]
        if endpoints:
            route = EndpointRoute(r"/p/(\d+)", "/api/item/{0}.json")
            declare_endpoints(root, {h: route for h in set(hosts)})
        ids = np.array([url_id(normalize(u)) for u in urls])
        fresh: list[float] = []
        cpu = time.process_time()
        for cycle in range(cycles + 1):
            at = START + timedelta(days=cycle)
            web.clock.set(at)
            plan = plan_cycle(
                root,
                cycle,
                len(urls) if cycle == 0 else budget,
                now=at,
                slices=BOOTSTRAP if cycle == 0 else None,
                seed=cycle,
            )
            specs = split_plan(root, cycle, plan.path)
            run_listing_pass(
                root,
                cycle,
                settings=FETCH,
                clock=fixed_clock(at),
                budget=float(len(urls) + 100) if cycle == 0 else budget,
            )
            for spec in specs:
                run_host_batch(root, cycle, spec.name, settings=FETCH, clock=fixed_clock(at))
            commit_cycle(root, cycle, clock=fixed_clock(at))
            apply_listing_summaries(root, cycle)
            if cycle >= warmup:
                fresh.extend(_freshness(web, root, urls, ids, at))
        cpu = time.process_time() - cpu
        rows = HistoryStore(root).read().to_pandas()
        rows = rows[rows["cycle_id"] >= warmup]
        items = rows[rows["url_id"].isin(ids)]
        detected = float((items["changed"] == True).sum())  # noqa: E712 (NULL is not True)
        credits = float(rows["cost"].sum())
        return {
            "freshness": float(np.mean(fresh)),
            "credits": credits,
            "detected": detected,
            "credits_per_change": credits / detected if detected else float("inf"),
            "bytes_per_change": float(rows["bytes"].sum()) / detected if detected else 0.0,
            "listing_rows": float((~rows["url_id"].isin(ids)).sum()),
            "unchanged_from_listing": float(
                (items["reason"] == "listing: summary unchanged").sum()
            ),
            "cpu_s": cpu,
        }
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _freshness(
    web: SandboxWeb, root: str, urls: list[str], ids: np.ndarray, at: datetime
) -> list[float]:
    """Share of pages whose last fetched copy is the current version, 4 times in the day."""
    rows = HistoryStore(root).read().to_pandas()
    got = rows[rows["outcome"] == "ok"].groupby("url_id")["fetched_at"].max()
    held = [got.get(i) for i in ids]
    out = []
    for hours in (0, 6, 12, 18):
        t = at + timedelta(hours=hours)
        fresh = [
            h is not None and web.version(u, t) == web.version(u, h.to_pydatetime())
            for u, h in zip(urls, held, strict=True)
        ]
        out.append(float(np.mean(fresh)))
    return out


def sandbox(args: argparse.Namespace) -> None:
    n = args.hosts * args.items
    budget = round(args.sandbox_share * n)
    print(
        f"== sandbox: {args.hosts} shop hosts x {args.items} items (listings of 40), cycles "
        f"1-{args.cycles} measured from {args.warmup}, budget {budget} credits a cycle "
        f"({args.sandbox_share:g} x pages), credits cost model, {load()}"
    )
    clock = SimClock(START)
    web = SandboxWeb.generate(
        args.hosts,
        args.items,
        seed=args.sandbox_seed,
        default=HostBehaviour(listing_size=40, json_link=True),
        clock=clock,
    )
    runs = [
        ("planner", False, False, 1.0),
        ("listings", True, False, 1.0),
        ("json", False, True, 1.0),
        ("listings+json", True, True, 1.0),
        *[("listings", True, False, s) for s in args.scales],
    ]
    results: dict[tuple[str, float], dict[str, float]] = {}
    with serve_sandbox(web) as running:
        for name, listings, endpoints, scale in runs:
            r = sandbox_run(
                web,
                running,
                listings=listings,
                endpoints=endpoints,
                budget=max(1.0, budget * scale),
                cycles=args.cycles,
                warmup=args.warmup,
            )
            results[(name, scale)] = r
            print(
                f"  {name:14} budget x{scale:.2f}: freshness {r['freshness']:.4f}, credits "
                f"{r['credits']:.0f}, changes detected {r['detected']:.0f}, credits/change "
                f"{r['credits_per_change']:.3f}, bytes/change {r['bytes_per_change']:.0f}, "
                f"listing fetches {r['listing_rows']:.0f}, items recorded unchanged from their "
                f"listing {r['unchanged_from_listing']:.0f} (CPU {r['cpu_s']:.1f} s, {load()})",
                flush=True,
            )
    off = results[("planner", 1.0)]
    same = [
        (scale, r)
        for (name, scale), r in results.items()
        if name == "listings" and r["freshness"] >= off["freshness"]
    ]
    if same:
        scale, r = min(same, key=lambda sr: sr[0])
        print(
            f"same freshness: listings at x{scale:.2f} the budget are as fresh "
            f"({r['freshness']:.4f} >= {off['freshness']:.4f}) at "
            f"{r['credits_per_change']:.3f} credits/change: "
            f"x{off['credits_per_change'] / r['credits_per_change']:.2f} fewer"
        )
    else:
        print("same freshness: no listings run was as fresh as the planner")
    j = results[("json", 1.0)]
    print(
        f"json endpoints: bytes/change x{off['bytes_per_change'] / j['bytes_per_change']:.2f} "
        f"fewer at the same budget (credits/change {j['credits_per_change']:.3f} vs "
        f"{off['credits_per_change']:.3f}: one credit either way on plain hosts)"
    )


def curve(args: argparse.Namespace) -> None:
    """Credits per change at the same freshness, as a curve over budgets.

    The planner without signals over ``--planner-budgets``; each signal over
    ``--curve-budgets``; for every signal run, the planner's credits per change at that
    run's freshness (linear between the two planner runs that bracket it) over the
    signal's own: the ratio at the same freshness, read by raising the planner's budget
    until it is as fresh (its credits per change rise steeply with freshness).
    """
    variants = {
        "listings": ShopSignals(listings=True),
        "listings+json": ShopSignals(listings=True, json_endpoints=True),
    }
    seeds = range(args.seeds) if args.seed is None else [args.seed]
    print(f"curve: {args.pages:,} pages, {args.days} days, seeds {list(seeds)}, {load()}")
    print("seed  signal          budget  freshness  credits/change  planner at same F  ratio")
    for seed in seeds:
        options = {"pages": args.pages, "days": args.days, "seed": seed}
        base = [
            run_shop(ShopSignals(), budget_share=b, **options)  # type: ignore[arg-type]
            for b in args.planner_budgets
        ]
        for name, signals in variants.items():
            for b in args.curve_budgets:
                run = run_shop(signals, budget_share=b, **options)  # type: ignore[arg-type]
                at = credits_at_freshness(base, run.freshness)
                same = "outside the planner's curve" if at is None else f"{at:.3f}"
                ratio = "" if at is None else f"x{at / run.credits_per_change:.2f}"
                print(
                    f"{seed:>4}  {name:<14} {b:>6.2f}N  {run.freshness:>9.4f}  "
                    f"{run.credits_per_change:>14.3f}  {same:>17}  {ratio}"
                )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=3)
    parser.add_argument("--seed", type=int, default=None, help="--curve: this seed only")
    parser.add_argument("--pages", type=int, default=10_000)
    parser.add_argument("--days", type=int, default=30)
    parser.add_argument("--budget-share", type=float, default=0.1)
    parser.add_argument("--hosts", type=int, default=4)
    parser.add_argument("--items", type=int, default=200)
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--warmup", type=int, default=4)
    parser.add_argument("--sandbox-share", type=float, default=0.1)
    parser.add_argument("--sandbox-seed", type=int, default=3)
    parser.add_argument("--scales", type=float, nargs="*", default=[0.7, 0.5, 0.35])
    parser.add_argument("--skip-backtest", action="store_true")
    parser.add_argument("--skip-sandbox", action="store_true")
    parser.add_argument("--curve", action="store_true", help="only the same-freshness curve")
    parser.add_argument(
        "--planner-budgets", type=float, nargs="*", default=[0.05, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0]
    )
    parser.add_argument(
        "--curve-budgets", type=float, nargs="*", default=[0.05, 0.1, 0.2, 0.3, 0.5]
    )
    args = parser.parse_args()
    started = time.perf_counter()
    if args.curve:
        curve(args)
        print(f"({time.perf_counter() - started:.0f} s wall, {load()})")
        return
    if not args.skip_backtest:
        backtest(args)
    if not args.skip_sandbox:
        sandbox(args)
    print(f"({time.perf_counter() - started:.0f} s wall, {load()})")


if __name__ == "__main__":
    main()
