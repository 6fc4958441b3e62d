"""Benchmark: the sitemap-lastmod signal and feeds on and off, in the backtest
(``models.backtest.signals``).

Part 1 (``--deployed``, the default): the deployed planner (``plan_from_moments``, as
``plan_cycle`` runs it) on family webs whose hosts' sitemaps are honest, noisy, stale, "now"
or absent and half of which have feeds, with lastmod, feeds, both or neither
(``compare_signals``); per seed, also a second signal-off run with another verification
seed: the planner's own noise. Printed: freshness, cost per change detected without and
with the sitemap/feed reads (one cost unit a read, on the deployment's read schedule), and
on minus off on the pages of each lastmod kind, against the noise.

Part 2 (``--toy``): the session-8 toy planner (fetches the pages most likely changed).

The same web, seeds and budget with the planner's change probability taken as it is (off)
or moved by each host's learned lastmod trust (on). Webs: a mixed one (one host of each
sitemap kind: honest, noisy, stale, now, missing), and webs where every sitemap lies
(stale and now) or is noisy. Both budget modes: one budget shared by all hosts, or each host
its own capacity (budget share x its pages). Printed per web and mode: freshness and fetches
per change found (the credits a change costs at one credit a fetch), on vs off as a ratio,
and the per-kind freshness difference range over the seeds (on - off).

Reproduce:  .venv/bin/python benchmarks/bench_lastmod_signal.py [--seeds 4 --family tight
            --web-pages 2000 --days 60]   (add --toy for part 2)
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np

from models.backtest.signals import (
    KINDS,
    SIGNAL_VARIANTS,
    SignalMix,
    compare_lastmod_signal,
    compare_signals,
)

WEBS = {
    "mixed": ("honest", "noisy", "stale", "now", "missing"),
    "liars": ("stale", "now", "stale", "now"),
    "noisy": ("noisy", "noisy", "noisy", "noisy"),
    "honest": ("honest", "honest", "honest", "honest"),
}


def deployed(args: argparse.Namespace) -> None:
    mix = SignalMix(feed=args.feed_share)
    print(
        f"deployed planner, family {args.family}, {args.web_pages} pages, {args.days} days "
        f"(window: second half), budget {args.budget_share:g} N, seeds 0-{args.seeds - 1}; "
        + mix.describe()
    )
    cpu = time.process_time()
    sums: dict[str, dict[str, list[float]]] = {v: {} for v in SIGNAL_VARIANTS}
    noise: dict[str, list[float]] = {}
    for seed in range(args.seeds):
        runs = compare_signals(
            args.family,
            args.web_pages,
            mix=mix,
            budget_share=args.budget_share,
            days=args.days,
            seed=seed,
        )
        again = compare_signals(
            args.family,
            args.web_pages,
            mix=mix,
            budget_share=args.budget_share,
            days=args.days,
            seed=seed,
            variants=("planner",),
            planner_seed=seed + 1000,
        )["planner"]
        off = runs["planner"]
        noise.setdefault("web", []).append(again.freshness - off.freshness)
        for k, v in off.freshness_by_kind.items():
            noise.setdefault(k, []).append(again.freshness_by_kind[k] - v)
        for name, run in runs.items():
            row = sums[name]
            row.setdefault("freshness", []).append(run.freshness)
            row.setdefault("cpc", []).append(run.cost_per_change)
            row.setdefault("cpc_reads", []).append(run.cost_per_change_with_reads)
            row.setdefault("reads", []).append(run.reads_per_day)
            row.setdefault("d_web", []).append(run.freshness - off.freshness)
            for k, v in run.freshness_by_kind.items():
                row.setdefault("d_" + k, []).append(v - off.freshness_by_kind[k])
        print(f"  seed {seed} done ({time.process_time() - cpu:.0f} s CPU)", flush=True)
    sigma = {k: float(np.sqrt(np.mean(np.square(v)))) for k, v in noise.items()}
    print(
        "noise (signal-off run with another verification seed minus signal-off), RMS over "
        "seeds: " + ", ".join(f"{k} {v:.4f}" for k, v in sigma.items())
    )
    head = f"{'variant':16}{'fresh':>8}{'cost/chg':>10}{'+reads':>9}{'reads/d':>9}"
    head += "  on-off (mean, min..max)"
    print(head)
    for name, row in sums.items():
        kinds = "; ".join(
            f"{k} {np.mean(d):+.4f} ({min(d):+.4f}..{max(d):+.4f})"
            for k in ("web", *KINDS)
            if (d := row.get("d_" + k))
        )
        print(
            f"{name:16}{np.mean(row['freshness']):>8.4f}{np.mean(row['cpc']):>10.3f}"
            f"{np.mean(row['cpc_reads']):>9.3f}{np.mean(row['reads']):>9.1f}  {kinds}"
        )
    print(f"({time.process_time() - cpu:.1f} s CPU)")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=4)
    parser.add_argument("--pages", type=int, default=200, help="toy: pages per host")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--budget-share", type=float, default=0.2)
    parser.add_argument("--family", default="tight")
    parser.add_argument("--web-pages", type=int, default=2000)
    parser.add_argument("--feed-share", type=float, default=0.5)
    parser.add_argument("--toy", action="store_true", help="also the session-8 toy planner")
    args = parser.parse_args()
    deployed(args)
    if args.toy:
        toy(args)


def toy(args: argparse.Namespace) -> None:
    started = time.perf_counter()
    print(
        f"pages/host {args.pages}, {args.days} days (10 warm-up), budget {args.budget_share:g} "
        f"x pages a day, seeds 0-{args.seeds - 1}; rate estimates off by a lognormal sigma 0.5"
    )
    for per_host in (False, True):
        mode = "per-host capacity" if per_host else "shared budget"
        for web, kinds in WEBS.items():
            fresh = {"off": 0.0, "on": 0.0}
            cost = {"off": 0.0, "on": 0.0}
            deltas: dict[str, list[float]] = {k: [] for k in sorted(set(kinds))}
            for seed in range(args.seeds):
                runs = compare_lastmod_signal(
                    kinds,
                    seed=seed,
                    per_host_budget=per_host,
                    pages_per_host=args.pages,
                    days=args.days,
                    budget_share=args.budget_share,
                )
                for policy, run in runs.items():
                    fresh[policy] += run.freshness / args.seeds
                    cost[policy] += 1.0 / run.changes_per_fetch / args.seeds
                for k in deltas:
                    on, off = runs["on"].freshness_by_kind[k], runs["off"].freshness_by_kind[k]
                    deltas[k].append(on - off)
            spread = ", ".join(f"{k} {min(v):+.4f}..{max(v):+.4f}" for k, v in deltas.items())
            print(
                f"{mode:17} {web:7} freshness off {fresh['off']:.4f} on {fresh['on']:.4f} "
                f"(x{fresh['on'] / fresh['off']:.3f}); fetches/change off {cost['off']:.3f} "
                f"on {cost['on']:.3f} (x{cost['on'] / cost['off']:.3f}); on-off by kind: {spread}"
            )
    print(f"({time.perf_counter() - started:.1f} s)")


if __name__ == "__main__":
    main()
