"""Benchmark: budgeted allocation for 10 million pages with capacities on 100k hosts.

Builds a synthetic web (true rates like the measured web, value tiers, costs, heavy-tailed
host sizes), gives every host a politeness capacity and the crawler a daily budget, then,
in one run:

  allocate   the optimal policy (freshness objective), wall time and peak memory
  passes     the solve in units of one vectorized pass over all pages at one multiplier
             (timed in the same run, wall and CPU, so the figure holds on a loaded machine)
  compare    value-weighted expected freshness of the optimum, uniform and
             change-proportional allocations under the same budget and per-page cap

  --phases   the solve's CPU (all threads) and page faults by phase of the local solver,
             in the same passes

Reproduce:  .venv/bin/python benchmarks/bench_allocation.py [--pages 10000000 --hosts 100000]
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from collections.abc import Callable
from typing import Any

import numpy as np


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=10_000_000)
    parser.add_argument("--hosts", type=int, default=100_000)
    parser.add_argument(
        "--budget-share",
        type=float,
        default=0.2,
        help="daily budget as a share of visiting every page daily",
    )
    parser.add_argument(
        "--phases",
        action="store_true",
        help="also report the solve's CPU by phase, in passes (exclusive of nested phases)",
    )
    args = parser.parse_args()

    from models.allocation.allocate import (
        AllocationProblem,
        proportional_allocation,
        solve,
        uniform_allocation,
    )
    from models.allocation.freshness import freshness
    from models.allocation.solver import one_pass
    from models.estimation.synthetic import allocation_web
    from tasks.cycle.memory import keep_freed_memory

    keep_freed_memory()
    load_start = os.getloadavg()[0]
    phases = _PhaseClock() if args.phases else None
    if phases is not None:
        phases.install()
    n = args.pages
    web = allocation_web(n, args.hosts, seed=7)
    rates, weights, costs, hosts = web.rates, web.weights, web.costs, web.hosts
    pages_per_host = web.pages_per_host
    # politeness: at most ~ a visit a minute for big hosts, and half the pages daily for small
    capacity = np.minimum(1440.0, np.maximum(1.0, 0.5 * pages_per_host))
    budget = args.budget_share * float(costs.sum())

    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    t0 = time.perf_counter()
    problem = AllocationProblem.build(
        rates,
        budget,
        weights=weights,
        costs=costs,
        hosts=hosts,
        host_capacity=capacity,
        max_frequency=1.0,
    )
    t1, c1, m1 = time.perf_counter(), time.process_time(), time.thread_time()
    result = solve(problem)
    t2, c2, m2 = time.perf_counter(), time.process_time(), time.thread_time()
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024

    # the unit of work: frequencies and slopes of every page at one multiplier, one pass
    # (best of three, wall and CPU time of all threads)
    pass_wall, pass_cpu = np.inf, np.inf
    for _ in range(3):
        t3, c3 = time.perf_counter(), time.process_time()
        one_pass(problem, result.multiplier)
        pass_wall = min(pass_wall, time.perf_counter() - t3)
        pass_cpu = min(pass_cpu, time.process_time() - c3)

    if phases is not None:
        phases.report(pass_cpu, c2 - c1)

    load = np.bincount(problem.hosts, result.frequencies, minlength=problem.host_capacity.shape[0])
    binding = int(np.sum(load >= problem.host_capacity * (1 - 1e-9)))
    total_w = float(weights.sum())

    def weighted(f: np.ndarray) -> float:
        return float(np.sum(weights * freshness(rates, f)) / total_w)

    uniform = uniform_allocation(problem)
    proportional = proportional_allocation(problem)
    print(
        f"{n:,} pages on {args.hosts:,} hosts; budget {budget:,.0f} (cost units/day), "
        f"per-page cap 1 visit/day; {binding:,} host capacities bind"
    )
    print(
        f"build problem {t1 - t0:6.2f} s   solve {t2 - t1:6.2f} s   "
        f"peak RSS {peak_mb:,.0f} MiB ({peak_mb - base_mb:,.0f} above the inputs)"
    )
    print(
        f"one vectorized pass over all pages {pass_wall:.2f} s wall, {pass_cpu:.2f} s CPU: "
        f"the solve took {(t2 - t1) / pass_wall:.1f} passes' wall time, "
        f"{(c2 - c1) / pass_cpu:.1f} passes' CPU time (solve {c2 - c1:.2f} s CPU, "
        f"{m2 - m1:.2f} s of it in the calling thread; the rest ran in worker threads)"
    )
    print(
        f"load average {load_start:.1f} at the start, {os.getloadavg()[0]:.1f} at the end "
        "(other jobs on the machine slow every figure)"
    )
    print(
        f"spent {result.spent:,.1f} of {budget:,.1f}; multiplier {result.multiplier:.6g}; "
        f"pages given up (f = 0): {int(np.sum(result.frequencies == 0)):,}"
    )
    print("value-weighted expected freshness under the same budget:")
    print(f"  optimal       {weighted(result.frequencies):.4f}")
    print(f"  uniform       {weighted(uniform):.4f}   (ignores host capacities: an upper bound)")
    print(f"  proportional  {weighted(proportional):.4f}   (ignores host capacities)")
    print(
        "reproduce: .venv/bin/python benchmarks/bench_allocation.py "
        f"--pages {n} --hosts {args.hosts}"
    )


def _faults() -> int:
    """Page faults of this process so far (minor: first touches of fresh memory)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


class _PhaseClock:
    """CPU time (all threads) by phase of the local solver, each phase without the phases
    it calls (wrapped in this process only: the solver itself knows nothing of it)."""

    def __init__(self) -> None:
        self.cpu: dict[str, float] = {}
        self.faults: dict[str, int] = {}
        self.calls: dict[str, int] = {}
        self.stack: list[list[float]] = []  # start CPU, nested CPU, start faults, nested

    def install(self) -> None:
        from models.allocation import local, model

        solver = local._LocalSolver
        self._wrap(local, "_start", "the sample's start")
        self._wrap(solver, "_hosts_first", "candidate hosts first (the loop's own work)")
        self._wrap(solver, "_promote", "promotion (the loop's own work)")
        self._wrap(solver, "_finish", "final evaluation (the mixing, checks)")
        self._wrap(model.Model, "solve", "the local model's solves")
        self._wrap(model.Model, "hosts", "the model's host roots")
        self._wrap(local, "evaluate", "final evaluation (the pass)")  # imported by name
        original = solver._refresh
        clock = self

        def timed_refresh(self_: Any, pages: Any, c: Any, slot: Any = None) -> Any:
            full = pages.index is None
            name = "full refresh" if full else "candidate hosts' refresh"
            name += " (float32)" if self_._single(c) else " (float64)"
            return clock._timed(name, original, self_, pages, c, slot)

        solver._refresh = timed_refresh  # type: ignore[method-assign,assignment]

    def _wrap(self, owner: object, attribute: str, name: str) -> None:
        original = getattr(owner, attribute)
        clock = self

        def timed(*args: Any, **kwargs: Any) -> Any:
            return clock._timed(name, original, *args, **kwargs)

        setattr(owner, attribute, timed)

    def _timed(self, name: str, function: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.stack.append([time.process_time(), 0.0, float(_faults()), 0.0])
        try:
            return function(*args, **kwargs)
        finally:
            start, nested, faults_before, nested_faults = self.stack.pop()
            spent = time.process_time() - start
            faulted = _faults() - int(faults_before)
            self.cpu[name] = self.cpu.get(name, 0.0) + spent - nested
            self.faults[name] = self.faults.get(name, 0) + faulted - int(nested_faults)
            self.calls[name] = self.calls.get(name, 0) + 1
            if self.stack:
                self.stack[-1][1] += spent
                self.stack[-1][3] += faulted

    def report(self, unit: float, total: float) -> None:
        print(f"the solve by phase (CPU in passes of {unit:.2f} s; page faults; calls):")
        for name, cpu in sorted(self.cpu.items(), key=lambda kv: -kv[1]):
            print(f"  {cpu / unit:5.2f}  {self.faults[name]:9,}  {name} ({self.calls[name]})")
        rest = total - sum(self.cpu.values())
        print(f"  {rest / unit:5.2f}  the rest (before the local solver, setup)")


if __name__ == "__main__":
    main()
