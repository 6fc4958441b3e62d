"""Learning from scratch (issue 18): the deployed planner against the baselines, cold, on
web families it was never tuned on, and issue 18's targets met or missed.

Every run starts from an empty history (no seed crawl), with no Last-Modified header
unless ``--last-modified``, the production default slices, re-planned daily through
``models.planning.core.plan_from_moments`` (the code path of ``plan_cycle``). Families x
seeds x budgets (``models/backtest/sweep.py``), then the periodic web, the shifting web and
the change-capture objective. Prints the figures with their conditions, then every target
(``models.backtest.targets.check_learning_targets``) with the reason of each miss.

    .venv/bin/python benchmarks/bench_backtest_learning.py                      # 20k pages
    .venv/bin/python benchmarks/bench_backtest_learning.py --pages 5000 --seeds 0,1,2,3
    .venv/bin/python benchmarks/bench_backtest_learning.py --quick   # 1 seed, 3 budgets
"""

from __future__ import annotations

import argparse
import pickle
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.backtest.families import MAIN_FAMILIES
from models.backtest.runner import BacktestResult
from models.backtest.sweep import (
    BUDGETS,
    SWEEP_POLICIES,
    LearningSweep,
    SweepConfig,
    SweepRun,
    format_sweep,
    run_sweep,
)
from models.backtest.targets import check_learning_targets, format_checks


def _floats(text: str) -> tuple[float, ...]:
    return tuple(float(x) for x in text.split(",") if x)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=20_000)
    parser.add_argument("--seeds", default="0,1,2,3")
    parser.add_argument("--families", default=",".join(MAIN_FAMILIES))
    parser.add_argument("--budgets", default=",".join(map(str, BUDGETS)))
    parser.add_argument("--policies", default=",".join(SWEEP_POLICIES))
    parser.add_argument("--last-modified", action="store_true")
    parser.add_argument("--quick", action="store_true", help="seed 0, budgets 0.02,0.05,0.2")
    parser.add_argument("--parts", default="main,periodic,shift,capture")
    parser.add_argument("--extra-seeds", help="seeds of the periodic/shift/capture parts")
    parser.add_argument("--out", type=Path, help="also write the text here")
    parser.add_argument("--save", type=Path, help="pickle the sweep here (to --merge later)")
    parser.add_argument(
        "--merge", nargs="+", type=Path, help="only report on sweeps saved by --save, merged"
    )
    args = parser.parse_args(argv)
    seeds = (0,) if args.quick else tuple(int(s) for s in args.seeds.split(","))
    budgets = (0.02, 0.05, 0.2) if args.quick else _floats(args.budgets)
    config = SweepConfig(
        families=tuple(args.families.split(",")),
        seeds=seeds,
        budgets=budgets,
        pages=args.pages,
        policies=tuple(args.policies.split(",")),
        last_modified=args.last_modified,
        parts=tuple(args.parts.split(",")),
        extra_seeds=tuple(int(x) for x in args.extra_seeds.split(","))
        if args.extra_seeds
        else None,
    )
    started = time.perf_counter()
    if args.merge:
        sweeps = [pickle.loads(path.read_bytes()) for path in args.merge]
        merged = sweeps[0]
        for other in sweeps[1:]:
            merged = merged.merged(other)
        print(format_sweep(merged) + "\n\n" + format_checks(check_learning_targets(merged)))
        return 0

    partial = LearningSweep(config)

    def progress(run: SweepRun, result: BacktestResult) -> None:
        partial.results[run] = result
        if args.save:  # after every run: a long sweep cut short keeps what it measured
            args.save.write_bytes(pickle.dumps(partial))
        gaps = "  ".join(
            f"{p} {result.gap_closed(p):.1%}"
            for p in config.policies
            if p not in ("oracle", "uniform")
        )
        print(
            f"[{time.perf_counter() - started:6.0f}s] {run.part:<8} {run.family:<9} "
            f"seed {run.seed} {run.budget:g} N {run.objective}: {gaps}",
            flush=True,
        )

    sweep = run_sweep(config, progress)
    text = format_sweep(sweep) + "\n\n" + format_checks(check_learning_targets(sweep))
    command = "benchmarks/bench_backtest_learning.py " + " ".join(argv or sys.argv[1:])
    text += (
        f"\n\n{time.perf_counter() - started:.0f} s in all. Reproduce: .venv/bin/python {command}"
    )
    print("\n" + text)
    if args.out:
        args.out.parent.mkdir(parents=True, exist_ok=True)
        args.out.write_text(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
