"""Policy backtest benchmark (issue 7): freshness per unit of budget, and the issue's targets.

Runs, all with the same seed:

1. the budget sweep (0.02 N ... 0.5 N) on the measured-like web, every policy;
2. the headline run: the measured-like web at ``--pages`` (1 million by default) at
   ``--headline-shares``, with its report folder (plots);
3. the shifting web (pages wake up mid-run) at 0.2 N, for recovery;
4. the measured web and the price-monitoring shop under the change-capture objective at
   0.2 N (cost per change detected, share of changes captured);
5. with ``--variants``, the planner variants of ``models/backtest/variants.py``.

With ``--cold-start`` it runs only the cold-start study instead (issue 15): the measured
web at ``--sweep-pages`` from an empty history (no seed crawl, every page never fetched,
day 0 a fetch day) for days 0-30 at ``--cold-shares``, planner against uniform and the
oracle: freshness over the whole window and after uniform's first full pass (N / B days),
and the planner's worst day against uniform after that pass.

Then prints each policy's freshness, the planners' share of the oracle-minus-uniform gap,
cost per change, and every target met or missed (by how much and why), and writes
``summary.md`` under ``--out``.

    .venv/bin/python benchmarks/bench_backtest.py                       # full (about 1 h)
    .venv/bin/python benchmarks/bench_backtest.py --pages 100000 --sweep-pages 50000 --quick
    .venv/bin/python benchmarks/bench_backtest.py --cold-start --sweep-pages 100000
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.backtest.hosts import format_host_slices
from models.backtest.runner import (
    BacktestConfig,
    BacktestResult,
    format_bands,
    format_table,
    recovery,
    run_backtest,
)
from models.backtest.targets import check_targets, format_checks
from models.backtest.variants import VARIANTS
from models.backtest.workloads import build_workload, measure_web_shape
from tasks.cycle.memory import keep_freed_memory
from tasks.reports.backtest_report import write_backtest_report

PLANNERS = ("planner",)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=1_000_000, help="headline run's pages")
    parser.add_argument("--sweep-pages", type=int, default=200_000, help="other runs' pages")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--budgets", default="0.02,0.05,0.1,0.2,0.5")
    parser.add_argument("--headline-shares", default="0.2")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--variants", action="store_true", help="also run the planner variants")
    parser.add_argument("--quick", action="store_true", help="skip the shop and capture runs")
    parser.add_argument("--skip-headline", action="store_true")
    parser.add_argument("--out", type=Path, default=Path("benchmarks/out/backtest"))
    parser.add_argument(
        "--lm-honest",
        type=float,
        default=0.5,
        help="share of hosts whose Last-Modified is the true last change (an assumption)",
    )
    parser.add_argument(
        "--lm-now", type=float, default=0.25, help='share of hosts stamping Last-Modified "now"'
    )
    parser.add_argument(
        "--cold-start",
        action="store_true",
        help="run only the cold-start study (no seed crawl) at --cold-shares",
    )
    parser.add_argument("--cold-shares", default="0.02,0.2,0.5")
    parser.add_argument("--cold-days", type=int, default=31, help="days 0 to this - 1")
    args = parser.parse_args(argv)
    keep_freed_memory()
    args.out.mkdir(parents=True, exist_ok=True)
    command = "python benchmarks/bench_backtest.py " + " ".join(argv or sys.argv[1:])
    notes: list[str] = [f"# Policy backtest benchmark\n\nReproduce: `{command.strip()}`\n"]
    started = time.perf_counter()

    shape = measure_web_shape(build_workload("measured", args.sweep_pages, seed=args.seed))
    days = shape.half_changed_by_days
    half = (
        f"half of all pages changed by day {days:.0f}"
        if days < 120
        else "fewer than half of the pages changed in 120 days"
    )
    notes.append(
        "Measured-like web: "
        f"{shape.changed_every_daily_visit:.0%} of pages change at >= 95% of 120 daily visits "
        f"(Cho & Garcia-Molina: over 20%), {shape.institutional_never_4_months:.0%} of the "
        "pages of mostly-static hosts never change in 4 months (over half of .edu/.gov), "
        f"{shape.never_changed_11_weekly:.0%} never in 11 weekly crawls (Fetterly et al.: "
        f"about 65%), {half} (Cho & Garcia-Molina: about 50 days).\n"
    )
    notes.append(
        f"Last-Modified (assumed): true time of the last change on {args.lm_honest:.0%} of the "
        f'hosts, "now" on {args.lm_now:.0%}, absent on the rest.\n'
    )
    print(notes[-2] + notes[-1], flush=True)

    def run(label: str, **kw: object) -> BacktestResult:
        base = {
            "days": args.days,
            "seed": args.seed,
            "pages": args.sweep_pages,
            "last_modified_honest": args.lm_honest,
            "last_modified_now": args.lm_now,
        }
        config = BacktestConfig(**{**base, **kw})
        t0 = time.perf_counter()
        result = run_backtest(config)
        elapsed = time.perf_counter() - t0
        text = format_table(result)
        print(f"\n== {label} ({elapsed:.0f} s)\n{text}", flush=True)
        notes.append(f"## {label}\n\n{elapsed:.0f} s.\n\n```\n{text}\n```\n")
        return result

    if args.cold_start:
        results = {}
        for share in (float(x) for x in args.cold_shares.split(",")):
            results[share] = run(
                f"cold start: measured web, {args.sweep_pages:,} pages, {share:g} N",
                budget_share=share,
                days=args.cold_days,
                cold_start=True,
                policies=("planner", "oracle", "uniform"),
            )
        notes.append(cold_start_table(results))
        print("\n" + notes[-1], flush=True)
        notes.append(
            f"Total {time.perf_counter() - started:.0f} s. Reproduce: `{command.strip()}`\n"
        )
        (args.out / "summary.md").write_text("\n".join(notes))
        print(f"\nsummary: {args.out / 'summary.md'}; reproduce: {command.strip()}")
        return 0

    sweep: dict[float, BacktestResult] = {}
    for share in (float(x) for x in args.budgets.split(",")):
        sweep[share] = run(
            f"measured web, {args.sweep_pages:,} pages, {share:g} N", budget_share=share
        )
    notes.append(_sweep_tables(sweep))
    print("\n" + notes[-1], flush=True)

    if not args.skip_headline:
        for share in (float(x) for x in args.headline_shares.split(",")):
            result = run(
                f"headline: measured web, {args.pages:,} pages, {share:g} N",
                pages=args.pages,
                budget_share=share,
            )
            folder = write_backtest_report(result, args.out / f"headline-{share:g}")
            notes.append(f"Report: `{folder['report']}`\n")

    shift = run("shifting web, 0.2 N", workload="shift", budget_share=0.2)
    write_backtest_report(shift, args.out / "shift")
    capture = None
    if not args.quick:
        capture = run(
            "measured web, change-capture objective, 0.2 N",
            budget_share=0.2,
            objective="change_capture",
        )
        shop = run(
            "price-monitoring shop, change-capture objective, 0.2 N",
            workload="shop",
            budget_share=0.2,
            objective="change_capture",
        )
        write_backtest_report(shop, args.out / "shop")

    if args.variants:
        for share in (0.05, 0.2):
            result = run(
                f"planner variants, measured web, {share:g} N",
                budget_share=share,
                policies=("planner", *VARIANTS, "oracle", "uniform"),
            )
            gaps = ", ".join(
                f"{row.name} {result.gap_closed(row.name):.1%}"
                for row in result.summary
                if row.name not in ("oracle", "uniform")
            )
            notes.append(f"Gap closed at {share:g} N: {gaps}\n")
        variant_shift = run(
            "planner variants, shifting web, 0.2 N",
            workload="shift",
            budget_share=0.2,
            policies=("planner", "planner+recent", "oracle", "uniform"),
        )
        lines = []
        for name in variant_shift.daily:
            if name.startswith("planner"):
                rec = recovery(variant_shift, name)
                lines.append(
                    f"{name}: whole web worst ratio {rec.worst_web:.3f}, back within 5% after "
                    f"{rec.days_web:g} days; shifted pages worst {rec.worst_shifted:.3f}, "
                    f"within 5% after {rec.days_shifted:g} days"
                )
        notes.append("\n".join(lines) + "\n")
        print("\n".join(lines), flush=True)

    verdicts = []
    for name in PLANNERS:
        verdicts += check_targets(sweep, shift=shift, capture=capture, name=name)
    text = format_checks(verdicts)
    print("\n== targets\n" + text, flush=True)
    notes.append(f"## Targets\n\n```\n{text}\n```\n")
    notes.append(f"Total {time.perf_counter() - started:.0f} s. Reproduce: `{command.strip()}`\n")
    (args.out / "summary.md").write_text("\n".join(notes))
    print(f"\nsummary: {args.out / 'summary.md'}; reproduce: {command.strip()}")
    return 0


def cold_start_table(results: dict[float, BacktestResult]) -> str:
    """Cold-start freshness by budget: whole window, after uniform's pass, worst day."""
    shares = sorted(results)
    days = results[shares[0]].config.days
    lines = [
        f"Cold start (no seed crawl), value-weighted freshness over days 0-{days - 1}:",
        "```",
        f"{'budget':<8}{'N/B d':>7}{'uniform all':>13}{'planner':>9}{'oracle':>9}"
        f"{'uniform':>9}{'after pass: planner':>21}{'uniform':>9}{'worst day diff':>16}"
        f"{'planner budget d0-4':>21}",
    ]
    for share in shares:
        r = results[share]
        daily = r.daily
        # uniform's first full pass: N / B days (longer on hosts whose capacity caps it)
        first_pass = math.ceil(1.0 / share - 1e-9)
        seen = np.cumsum(daily["uniform"].first_fetches) / r.config.pages
        done = np.flatnonzero(seen >= 1.0 - 1e-12)
        done_day = f"day {done[0]}" if done.shape[0] else f"{seen[-1]:.0%} seen"
        fresh = {name: daily[name].freshness for name in ("planner", "oracle", "uniform")}
        whole = "".join(f"{fresh[n].mean():>9.4f}" for n in ("planner", "oracle", "uniform"))
        if first_pass < days:
            after = slice(first_pass, days)
            diff = fresh["planner"][after] - fresh["uniform"][after]
            worst = int(np.argmin(diff)) + first_pass
            tail = (
                f"{fresh['planner'][after].mean():>21.4f}{fresh['uniform'][after].mean():>9.4f}"
                f"{diff.min():>+10.4f} d{worst:<4d}"
            )
        else:
            tail = f"{'(no full pass)':>21}{'':>9}{'':>16}"
        spent = daily["planner"].cost[:5].sum() / (5 * r.budget)
        lines.append(f"{share:<8g}{first_pass:>7d}{done_day:>13}{whole}{tail}{spent:>21.1%}")
    lines += ["```", "", "Daily freshness (every day), planner / uniform / oracle:", "```"]
    for share in shares:
        d = results[share].daily
        lines.append(f"{share:g} N")
        for name in ("planner", "uniform", "oracle"):
            lines.append(f"  {name:<8}" + " ".join(f"{x:.3f}" for x in d[name].freshness))
    lines.append("```")
    return "\n".join(lines) + "\n"


def _sweep_tables(sweep: dict[float, BacktestResult]) -> str:
    shares = sorted(sweep)
    names = [row.name for row in sweep[shares[0]].summary]
    head = f"{'policy':<16}" + "".join(f"{s:>9g}N" for s in shares)
    lines = ["Freshness (value-weighted, days 30-59) by daily budget:", "```", head]
    for name in names:
        cells = "".join(f"{sweep[s].by_name(name).freshness:>10.4f}" for s in shares)
        lines.append(f"{name:<16}{cells}")
    for name in PLANNERS:
        if name in names:
            cells = "".join(f"{sweep[s].gap_closed(name):>10.1%}" for s in shares)
            lines.append(f"{'gap ' + name:<16}{cells}")
    lines += ["```", "", "Cost per change detected by daily budget:", "```", head]
    for name in names:
        cells = "".join(f"{sweep[s].by_name(name).cost_per_change:>10.2f}" for s in shares)
        lines.append(f"{name:<16}{cells}")
    shown = [s for s in (0.05, 0.2) if s in sweep]
    lines += [
        "```",
        "",
        "Freshness by true change rate at " + " and ".join(f"{s:g} N" for s in shown) + ":",
    ]
    for share in shown:
        if share in sweep:
            lines += ["```", format_bands(sweep[share]), "```"]
    lines += ["", "Where the gap is (freshness by slice of hosts) at the same budgets:"]
    for share in shown:
        mine = [name for name in PLANNERS if name in names]
        lines += ["```", format_host_slices(sweep[share].host_slices, mine), "```"]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    raise SystemExit(main())
