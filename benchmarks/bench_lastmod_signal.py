"""Benchmark: the sitemap-lastmod signal on and off, in the backtest (``models.backtest.signals``).

The same web, seeds and budget with the planner's change probability taken as it is (off)
or moved by each host's learned lastmod trust (on). Webs: a mixed one (one host of each
sitemap kind: honest, noisy, stale, now, missing), and webs where every sitemap lies
(stale and now) or is noisy. Both budget modes: one budget shared by all hosts, or each host
its own capacity (budget share x its pages). Printed per web and mode: freshness and fetches
per change found (the credits a change costs at one credit a fetch), on vs off as a ratio,
and the per-kind freshness difference range over the seeds (on - off).

Reproduce:  .venv/bin/python benchmarks/bench_lastmod_signal.py [--seeds 5 --pages 200 --days 60]
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.backtest.signals import compare_lastmod_signal

WEBS = {
    "mixed": ("honest", "noisy", "stale", "now", "missing"),
    "liars": ("stale", "now", "stale", "now"),
    "noisy": ("noisy", "noisy", "noisy", "noisy"),
    "honest": ("honest", "honest", "honest", "honest"),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seeds", type=int, default=5)
    parser.add_argument("--pages", type=int, default=200, help="pages per host")
    parser.add_argument("--days", type=int, default=60)
    parser.add_argument("--budget-share", type=float, default=0.2)
    args = parser.parse_args()
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
