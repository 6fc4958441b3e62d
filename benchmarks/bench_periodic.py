"""The periodicity detector's cost (issue 18): a page history of R observations per page
for N pages, from rows at once (what ``plan_cycle`` does each cycle from the stored
history), then the planning outlook. Prints the wall and CPU time and the peak memory.

    .venv/bin/python benchmarks/bench_periodic.py --pages 200000 --rows 30
"""

from __future__ import annotations

import argparse
import resource
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from models.estimation.periodic import PhaseHistory, planning_outlook


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=200_000)
    parser.add_argument("--rows", type=int, default=30, help="observations per page")
    args = parser.parse_args(argv)
    rng = np.random.default_rng(0)
    n, r = args.pages, args.rows
    gaps = rng.integers(1, 6, (n, r))
    end = np.cumsum(gaps, axis=1)
    start = end - gaps
    page = np.repeat(np.arange(n), r)
    changed = rng.random(n * r) < 0.4
    wall, cpu = time.perf_counter(), time.process_time()
    history = PhaseHistory.from_rows(
        page, start.ravel(), end.ravel(), gaps.ravel().astype(float), changed, n
    )
    built = time.perf_counter() - wall
    n_changed = np.bincount(page, weights=changed, minlength=n)
    out = planning_outlook(history, n_changed, end[:, -1].astype(float), float(end.max() + 1))
    wall, cpu = time.perf_counter() - wall, time.process_time() - cpu
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        f"{n:,} pages x {r} observations: history {built:.2f} s, with the outlook "
        f"{wall:.2f} s wall / {cpu:.2f} s CPU, peak RSS {peak:.0f} MiB; "
        f"{int((out.period > 0).sum())} believed periodic (random data)"
    )
    print(
        "Reproduce: .venv/bin/python benchmarks/bench_periodic.py " + " ".join(argv or sys.argv[1:])
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
