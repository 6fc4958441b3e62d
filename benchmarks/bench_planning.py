"""Benchmark: planning one cycle (estimate -> allocate -> select) at millions of pages.

Issue 18 asks planning (estimation, allocation and selection) for 1 M pages in at most
10 s and 10 M in at most 100 s with memory under 8 GB, beside a bare DuckDB scan of the
same statistics; issue 19 asks the estimate with the production prior ("mixture") at most
2x a bare DuckDB GROUP BY (count and sums per page) over the same history.

Builds once (cached under benchmarks/out/): a synthetic web (``allocation_web``: rates
like the measured web, value tiers, lognormal costs, heavy-tailed hosts), every page
visited once a cycle for ``--cycles`` cycles (``observation_cycles``), written as history
Parquet files (url_id, changed, interval_days: one file a cycle) and as the per-page
statistics file the store keeps (``PAGE_STATS_FILE_SCHEMA``: the same sums, no
Last-Modified), plus each page's value, cost and last visit. Then, each step in a fresh
process (its peak memory its own), alternating, ``--repeat`` times:

  bare-stats    SELECT every column FROM the statistics file -> Arrow (issue 18's ceiling)
  bare-history  SELECT url_id, count(*), sum(changed), sum(interval_days), sum of squares
                and cubes of the changed intervals FROM the history GROUP BY url_id
                (issue 19's ceiling)
  plan          the production planning steps on those files, timed one by one:
                inputs    ``tasks.cycle.estimation.estimation_inputs`` (DuckDB: host codes,
                          evidence) over the statistics file
                estimate  ``estimate_from_moments(prior="mixture")`` (the default prior)
                allocate  ``allocate`` as ``plan_cycle`` calls it (budget after the slices,
                          one visit a page a cycle, a capacity per host)
                select    ``select_batch`` (slices, due pages, ahead)

``plan_cycle`` also aggregates each page's recent attempts from the history (costs, last
visit: one more GROUP BY over it, like bare-history); here costs and last visits come
from the build, so that scan is not in "plan" (bare-history is its order of magnitude).

Every child prints /proc/loadavg at its start and end; CPU (user + system) is printed
beside wall time, since the machine is shared.

Reproduce:  .venv/bin/python benchmarks/bench_planning.py --pages 1000000 --hosts 10000
            .venv/bin/python benchmarks/bench_planning.py --pages 10000000 --hosts 100000
"""

from __future__ import annotations

import argparse
import json
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

OUT = Path(__file__).parent / "out"
KINDS = ("bare-stats", "bare-history", "plan")
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def _load() -> str:
    return Path("/proc/loadavg").read_text().split(" ")[0]


def build(root: Path, pages: int, hosts: int, cycles: int) -> None:
    import numpy as np
    import pyarrow as pa
    import pyarrow.parquet as pq

    from models.estimation.synthetic import allocation_web, observation_cycles
    from models.schemas import PAGE_STATS_FILE_SCHEMA

    marker = root / "built"
    if marker.exists():
        print(f"using cached inputs under {root}")
        return
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    (root / "history").mkdir(parents=True)
    t0 = time.perf_counter()
    web = allocation_web(pages, hosts, seed=7)
    url_id = np.arange(pages, dtype=np.int64) * 7919 + 1  # distinct, not in page order
    sums = {name: np.zeros(pages) for name in ("n", "c", "u", "s1", "s2", "s3")}
    last = np.zeros(pages)
    for cycle, interval, changed, when in observation_cycles(web.rates, cycles, seed=7):
        seen = ~np.isnan(interval)
        t = np.where(changed, interval, 0.0)
        sums["n"] += seen
        sums["c"] += changed
        sums["u"] += np.where(seen & ~changed, interval, 0.0)
        sums["s1"] += t
        sums["s2"] += t * t
        sums["s3"] += t * t * t
        last = when
        pq.write_table(
            pa.table(
                {
                    "url_id": url_id,
                    "changed": pa.array(changed, mask=~seen),
                    "interval_days": pa.array(interval, mask=~seen),
                }
            ),
            root / "history" / f"cycle={cycle}.parquet",
        )
        print(f"  cycle {cycle} written", flush=True)
    names = pa.array([f"h{h}.bench.test" for h in range(hosts)])
    host = pa.DictionaryArray.from_arrays(pa.array(web.hosts.astype(np.int32)), names)
    zeros = np.zeros(pages)
    columns: dict[str, object] = {
        "url_id": url_id,
        "host": host.cast(pa.string()),
        "n_intervals": sums["n"].astype(np.int64),
        "n_changed": sums["c"].astype(np.int64),
        "unchanged_days": sums["u"],
        "changed_sum": sums["s1"],
        "changed_sum_sq": sums["s2"],
        "changed_sum_cube": sums["s3"],
    }
    for field in PAGE_STATS_FILE_SCHEMA:
        if field.name not in columns:  # ages and Last-Modified evidence: none
            columns[field.name] = pa.array(zeros).cast(field.type)
    stats = pa.table({f.name: columns[f.name] for f in PAGE_STATS_FILE_SCHEMA})
    pq.write_table(stats.cast(PAGE_STATS_FILE_SCHEMA), root / "stats.parquet")
    now = float(cycles)
    pq.write_table(
        pa.table(
            {
                "url_id": url_id,
                "value": web.weights,
                "cost": web.costs,
                "days_since_visit": now - last,
            }
        ),
        root / "pages.parquet",
    )
    marker.touch()
    print(f"built {pages:,} pages x {cycles} cycles in {time.perf_counter() - t0:.0f} s")


def child(kind: str, root: Path, budget_share: float, host_capacity: float) -> None:
    import duckdb

    from tasks.cycle.memory import keep_freed_memory

    keep_freed_memory()  # the CLI's and the flows' memory policy
    if kind == "plan":  # imports before the clock, as the bare steps' duckdb
        import numpy as np
        import pyarrow.parquet as pq

        from models.allocation.allocate import allocate
        from models.estimation.change_rate import estimate_from_moments
        from models.planning.select import Candidates, Slices, select_batch
        from tasks.cycle.estimation import estimation_inputs
        from tasks.store.history import connect
    load_start = _load()
    history = sorted(str(p) for p in (root / "history").glob("*.parquet"))
    stats_file = str(root / "stats.parquet")
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    splits: dict[str, list[float]] = {}
    t0, c0 = time.perf_counter(), time.process_time()

    def split(name: str, t: float, c: float) -> tuple[float, float]:
        now_t, now_c = time.perf_counter(), time.process_time()
        splits[name] = [now_t - t, now_c - c]
        return now_t, now_c

    if kind == "bare-stats":
        con = duckdb.connect()
        rows = con.sql("SELECT * FROM read_parquet($f)", params={"f": stats_file})
        rows.to_arrow_table()
    elif kind == "bare-history":
        con = duckdb.connect()
        con.sql(
            """SELECT url_id, count(interval_days) AS n, sum(changed::INTEGER) AS c,
                      sum(interval_days) AS days,
                      sum(CASE WHEN changed THEN interval_days END) AS s1,
                      sum(CASE WHEN changed THEN interval_days ^ 2 END) AS s2,
                      sum(CASE WHEN changed THEN interval_days ^ 3 END) AS s3
               FROM read_parquet($f) GROUP BY url_id""",
            params={"f": history},
        ).to_arrow_table()
    elif kind == "plan":
        t, c = t0, c0
        con = connect()
        inputs = estimation_inputs(con, con.read_parquet(stats_file))
        t, c = split("inputs", t, c)
        est = estimate_from_moments(inputs.moments, groups=inputs.group_codes, prior="mixture")
        t, c = split("estimate", t, c)
        pages = pq.read_table(root / "pages.parquet")
        # the estimates' rows in the statistics' order of url_id -> the pages' rows
        ids = pages["url_id"].to_numpy()
        order = np.argsort(ids)
        row = order[np.searchsorted(ids[order], est.page_ids)]
        value = pages["value"].to_numpy()[row]
        cost = pages["cost"].to_numpy()[row]
        since = pages["days_since_visit"].to_numpy()[row]
        hosts = inputs.host_codes
        n_hosts = int(hosts.max()) + 1
        slices = Slices()
        budget = budget_share * float(cost.sum())
        due_budget = budget * (1 - slices.discovery - slices.reestimation - slices.verification)
        t, c = split("prepare", t, c)
        allocation = allocate(
            est.rate,
            due_budget,
            weights=value,
            costs=cost,
            hosts=hosts,
            host_capacity=np.full(n_hosts, host_capacity),
            max_frequency=1.0,
        )
        t, c = split("allocate", t, c)
        plan = select_batch(
            Candidates(
                page_ids=est.page_ids,
                hosts=hosts,
                value=value,
                cost=cost,
                rate=est.rate,
                frequency=allocation.frequencies,
                log_std=est.log_std,
                days_since_visit=since,
            ),
            budget,
            np.full(n_hosts, host_capacity),
            slices=slices,
            seed=1,
        )
        t, c = split("select", t, c)
        splits["pages planned"] = [float(plan.index.shape[0]), 0.0]
        splits["prior used"] = [1.0 if est.prior_used == "mixture" else 0.0, 0.0]
    else:
        raise SystemExit(f"unknown kind {kind}")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "kind": kind,
                "seconds": seconds,
                "cpu": cpu,
                "peak_mb": peak_mb,
                "added_mb": peak_mb - base_mb,
                "splits": splits,
                "load": f"{load_start} -> {_load()}",
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=1_000_000)
    parser.add_argument("--hosts", type=int, default=None, help="default: pages / 100")
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--budget-share", type=float, default=0.2)
    parser.add_argument("--host-capacity", type=float, default=500.0)
    parser.add_argument("--child", choices=KINDS)
    parser.add_argument("--root", type=Path)
    args = parser.parse_args()
    hosts = args.hosts or max(1, args.pages // 100)
    root = args.root or OUT / f"planning-{args.pages}x{args.cycles}-{hosts}"
    if args.child:
        child(args.child, root, args.budget_share, args.host_capacity)
        return
    build(root, args.pages, hosts, args.cycles)
    runs: dict[str, list[dict[str, object]]] = {kind: [] for kind in KINDS}
    for _ in range(args.repeat):
        for kind in KINDS:
            cmd = [sys.executable, __file__, "--child", kind, "--root", str(root)]
            cmd += ["--budget-share", str(args.budget_share)]
            cmd += ["--host-capacity", str(args.host_capacity)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            result = json.loads(done.stdout.strip().splitlines()[-1])
            runs[kind].append(result)
            print(f"  {kind:<13} {result['seconds']:8.2f} s  load {result['load']}", flush=True)

    def median(kind: str, key: str) -> float:
        return statistics.median(float(r[key]) for r in runs[kind])  # type: ignore[arg-type]

    def split_median(name: str, i: int = 0) -> float:
        return statistics.median(r["splits"][name][i] for r in runs["plan"])  # type: ignore[index]

    bare_stats, bare_history = median("bare-stats", "seconds"), median("bare-history", "seconds")
    print(
        f"\n{args.pages:,} pages on {hosts:,} hosts x {args.cycles} observations, "
        f"{args.repeat} runs of each step in fresh processes (medians; ratios within the run)"
    )
    print(f"{'step':<22}{'wall s':>9}{'CPU s':>9}{'x bare-stats':>14}{'x bare-hist':>13}")
    for kind in KINDS:
        wall, cpu = median(kind, "seconds"), median(kind, "cpu")
        print(
            f"{kind:<22}{wall:>9.2f}{cpu:>9.2f}{wall / bare_stats:>14.2f}"
            f"{wall / bare_history:>13.2f}"
        )
    for name in ("inputs", "estimate", "prepare", "allocate", "select"):
        wall, cpu = split_median(name), split_median(name, 1)
        print(
            f"  plan: {name:<14}{wall:>9.2f}{cpu:>9.2f}{wall / bare_stats:>14.2f}"
            f"{wall / bare_history:>13.2f}"
        )
    estimation = statistics.median(
        r["splits"]["inputs"][0] + r["splits"]["estimate"][0]  # type: ignore[index]
        for r in runs["plan"]
    )
    estimation_cpu = statistics.median(
        r["splits"]["inputs"][1] + r["splits"]["estimate"][1]  # type: ignore[index]
        for r in runs["plan"]
    )
    history_cpu = median("bare-history", "cpu")
    plan_wall = median("plan", "seconds")
    peak = max(float(r["peak_mb"]) for r in runs["plan"])  # type: ignore[arg-type]
    limit = 10.0 * args.pages / 1_000_000
    print(f"peak RSS of plan: {peak:,.0f} MiB (target: under 8 GB at 10 M pages)")
    print(
        f"target (issue 18): planning at most {limit:.0f} s for {args.pages:,} pages "
        f"(10 s per million): {plan_wall:.2f} s, " + ("met" if plan_wall <= limit else "NOT met")
    )
    print(
        "target (issue 19): estimation (inputs + estimate, mixture prior) at most 2x "
        f"bare-history: {estimation / bare_history:.2f}x wall "
        + ("met" if estimation <= 2 * bare_history else "NOT met")
        + f", {estimation_cpu / history_cpu:.2f}x CPU "
        + ("met" if estimation_cpu <= 2 * history_cpu else "NOT met")
        + " (CPU: user + system of all threads; the machine is shared)"
    )
    print("loads (/proc/loadavg, 1 min, start -> end of each child):")
    for kind in KINDS:
        print(f"  {kind:<13} " + ", ".join(str(r["load"]) for r in runs[kind]))
    print(
        "reproduce: .venv/bin/python benchmarks/bench_planning.py "
        f"--pages {args.pages} --hosts {hosts} --cycles {args.cycles} --repeat {args.repeat}"
    )


if __name__ == "__main__":
    main()
