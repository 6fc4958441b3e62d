"""Benchmark: plan a cycle of 100 million synthetic pages in host shards on Dask workers.

The pages are generated chunk by chunk into Parquet (never all in memory), split into host
shards by DuckDB (``PARTITION_BY`` a hash of the host, spilling past its memory limit),
then allocated and selected shard by shard on a dask.distributed LocalCluster
(``tasks.cycle.sharded_planning``). Printed, from one run:

  time       per phase: generate, shard, load (every shard read once into its worker),
             multiplier, frequencies, selection, write
  passes     the ceiling, timed in the same run: one read of every shard into its worker
             plus one spend round over all of them (what any sharded planner that reads
             its shards from disk needs at least); the plan in units of it
  memory     peak RSS of the driver and of each worker (VmHWM since planning started),
             and the bytes the workers hold for their shards between rounds

Memory bound: each worker keeps its shards between rounds, compact: ~42 bytes per page
(float32 inputs as stored, int32 host codes, float64 frequencies, the selection's state)
plus, during a take, its ranked pool (up to 40 bytes per page), plus one shard's float64
temporaries while it evaluates (a few hundred bytes per page of the largest shard); the
driver holds a few numbers per shard per round, plus the batch it writes (about 100 bytes
per chosen page); DuckDB's split is capped by its memory_limit (1 GB here) and spills to
the shard folder. All files are deleted at the end (``--keep`` keeps them).

With --estimate: the sharded estimation instead (``tasks.cycle.sharded_estimation``): a
synthetic web's statistics (``synthetic_stats``: pages / 50 hosts, 8 cycles), split into
host shards, the mixture prior fitted over them on the workers and every shard's
estimates written; with --check the single-process estimator on the same pages, timed and
compared page by page (rates, intervals, standard errors) and on the fitted prior.

Reproduce:  .venv/bin/python benchmarks/bench_sharded_plan.py --pages 100000000 --shards 100
            .venv/bin/python benchmarks/bench_sharded_plan.py --pages 1000000 --shards 8 --check
            .venv/bin/python benchmarks/bench_sharded_plan.py --estimate --pages 1000000 \
                --shards 8 --check
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import resource
import shutil
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

CHUNK = 2_000_000


def generate(directory: Path, pages: int, hosts: int, seed: int, share: float) -> float:
    """Write ``pages`` synthetic pages as Parquet chunks; return the total cost.

    Like ``models.estimation.synthetic.allocation_web`` (heavy-tailed host sizes, static /
    middle / fast kinds, value tiers, lognormal costs), plus what selection needs (days
    since the last visit, 10% never fetched; the rate's uncertainty), and each host's
    capacity as in benchmarks/bench_allocation.py: ``share`` of its expected pages a day,
    1 to 1440.
    Stored in float32 (the planner reads them as float64: both planners see the same).
    """
    directory.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    weight = rng.pareto(1.2, hosts) + 1.0
    p_host = weight / weight.sum()
    capacity = np.minimum(1440.0, np.maximum(1.0, share * pages * p_host)).astype(np.float32)
    cdf = np.cumsum(p_host)
    total_cost = 0.0
    for part, start in enumerate(range(0, pages, CHUNK)):
        n = min(CHUNK, pages - start)
        host = np.minimum(np.searchsorted(cdf, rng.random(n)), hosts - 1).astype(np.int64)
        kind = rng.choice(3, size=n, p=[0.45, 0.35, 0.20])
        rate = np.choose(
            kind,
            [
                rng.lognormal(np.log(1 / 400), 1.0, n),
                rng.lognormal(np.log(1 / 15), 1.3, n),
                rng.lognormal(np.log(2.5), 0.8, n),
            ],
        )
        cost = np.round(rng.lognormal(0.0, 0.4, n), 3).astype(np.float32)
        total_cost += float(cost.astype(np.float64).sum())
        since = np.where(rng.random(n) < 0.9, rng.exponential(5.0, n), np.nan)
        table = pa.table(
            {
                "url_id": np.arange(start, start + n, dtype=np.int64),
                "host": host,
                "rate": rate.astype(np.float32),
                "log_std": rng.uniform(0.0, 3.0, n).astype(np.float32),
                "value": np.array([1.0, 2.0, 5.0, 10.0], np.float32)[
                    rng.choice(4, size=n, p=[0.6, 0.25, 0.1, 0.05])
                ],
                "cost": cost,
                "days_since_visit": pa.array(since.astype(np.float32), from_pandas=True),
                "capacity": capacity[host],
            }
        )
        pq.write_table(table, directory / f"part-{part:05d}.parquet")
    return total_cost


def rss_mb() -> float:
    return peak_mb()[1]


def peak_mb() -> tuple[int, float]:
    """This process's pid and peak resident size since its last :func:`reset_peak` (Linux
    VmHWM; a worker forked from the driver inherits the driver's peak, hence the reset)."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return os.getpid(), int(line.split()[1]) / 1024
    return os.getpid(), resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def reset_peak() -> tuple[int, float]:
    """Reset the peak resident size to the current one (``/proc/self/clear_refs``: 5),
    after importing what the shard tasks import (their code is not the shards' memory)."""
    import tasks.cycle.sharded_planning  # noqa: F401

    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    return peak_mb()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=100_000_000)
    parser.add_argument("--hosts", type=int, default=0, help="default: pages / 100")
    parser.add_argument("--shards", type=int, default=100)
    parser.add_argument("--workers", type=int, default=2)
    parser.add_argument("--budget-share", type=float, default=0.02, help="of all pages' cost")
    parser.add_argument("--capacity-share", type=float, default=0.5, help="of a host's pages")
    parser.add_argument("--dir", default=None, help="where the files go (default: a temp dir)")
    parser.add_argument("--check", action="store_true", help="compare with one process")
    parser.add_argument("--keep", action="store_true")
    parser.add_argument("--estimate", action="store_true", help="sharded estimation instead")
    args = parser.parse_args()
    if args.estimate:
        estimate_main(args)
        return

    import distributed

    from tasks.cycle.memory import keep_freed_memory
    from tasks.cycle.sharded_planning import DaskShards, PlanSettings, plan_sharded, write_shards

    keep_freed_memory()
    logging.basicConfig(format="%(asctime)s %(message)s", level=logging.WARNING)
    logging.getLogger("tasks.cycle.sharded_planning").setLevel(logging.INFO)
    hosts = args.hosts or max(1, args.pages // 100)
    root = Path(tempfile.mkdtemp(prefix="sharded-plan-", dir=args.dir))
    free_gb = shutil.disk_usage(root).free / 1e9
    print(
        f"{args.pages:,} pages on {hosts:,} hosts in {args.shards} shards, "
        f"{args.workers} workers; files under {root} ({free_gb:,.0f} GB free)"
    )
    timing: dict[str, float] = {}
    try:
        t = time.perf_counter()
        total_cost = generate(root / "pages", args.pages, hosts, 7, args.capacity_share)
        timing["generate"] = time.perf_counter() - t
        base_mb = reset_peak()[1]
        t = time.perf_counter()
        shards = write_shards(root / "pages" / "*.parquet", root / "shards", args.shards)
        timing["shard (DuckDB)"] = time.perf_counter() - t
        if not args.check:
            shutil.rmtree(root / "pages")
        disk_gb = sum(f.stat().st_size for f in root.rglob("*") if f.is_file()) / 1e9
        budget = args.budget_share * total_cost
        settings = PlanSettings(budget, seed=0)
        with (
            distributed.LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                memory_limit=0,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            worker_base = client.run(reset_peak)
            t = time.perf_counter()
            result = plan_sharded(client, shards, settings, root / "plan.parquet")
            timing["plan"] = time.perf_counter() - t
            # the ceiling: every shard read once into its worker, one spend round at the root
            ceiling = DaskShards(client, shards, settings)
            t = time.perf_counter()
            ceiling.load()
            read_s = time.perf_counter() - t
            t = time.perf_counter()
            ceiling.spend(result.root.multiplier, True)
            round_s = time.perf_counter() - t
            ceiling.release()
            one_round = read_s + round_s
            worker_peak = client.run(peak_mb)
        per_shard = max(shards.pages)
        print(
            f"budget {budget:,.0f} of {total_cost:,.0f} (cost units); shards hold "
            f"{min(shards.pages):,}-{per_shard:,} pages; on disk {disk_gb:.1f} GB"
        )
        for name, sec in [*timing.items(), *result.seconds.items()]:
            print(f"  {name:<16} {sec:8.1f} s")
        print(
            f"multiplier {result.root.multiplier:.12g} in {result.root.steps} rounds; "
            f"{result.shard_calls} rounds of shard tasks in all"
        )
        print(
            f"ceiling, same run: every shard read once {read_s:.1f} s + one spend round at "
            f"the root {round_s:.1f} s = {one_round:.1f} s; the plan took "
            f"{timing['plan'] / one_round:.2f} times that (load "
            f"{result.seconds['load'] / one_round:.2f}, multiplier "
            f"{result.seconds['multiplier'] / one_round:.2f}, selection "
            f"{result.seconds['selection'] / one_round:.2f}); one resident round is "
            f"{round_s / read_s:.2f} of a read pass"
        )
        held = result.held_bytes
        print(
            "held between rounds: "
            + ", ".join(f"{b / 2**20:,.0f} MiB" for b in held.values())
            + f" ({sum(held.values()) / shards.size:.1f} bytes per page, during the last take)"
        )
        grow = {w: worker_peak[w][1] - worker_base[w][1] for w in worker_peak}
        peaks = ", ".join(f"{v[1]:,.0f} (pid {v[0]})" for v in worker_peak.values())
        worst = max(grow.values())
        print(
            f"peak RSS: driver {rss_mb():,.0f} MiB ({rss_mb() - base_mb:,.0f} above its "
            f"state after generating, DuckDB's split included); workers {peaks} MiB "
            f"(+{worst:,.0f} MiB at most over their state before planning = "
            f"{worst * 2**20 / (shards.size / len(grow)):,.0f} bytes per page a worker holds; "
            f"largest shard {per_shard:,} pages)"
        )
        print(f"plan: {result.rows:,} pages, spent {result.spent:,.1f} of {budget:,.1f}")
        print(
            f"load average {os.getloadavg()[0]:.1f} (other jobs on the machine slow every figure)"
        )
        if args.check:
            check(shards, settings, result)
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "reproduce: .venv/bin/python benchmarks/bench_sharded_plan.py "
        f"--pages {args.pages} --shards {args.shards}" + (" --check" if args.check else "")
    )


def check(shards: Any, settings: Any, result: Any) -> None:
    """The single-process planner on the same pages, timed, compared page by page."""
    import pandas as pd

    from models.allocation.allocate import allocate
    from models.planning.select import REASONS, Candidates, select_batch
    from tasks.cycle.sharded_planning import single_process_inputs

    t = time.perf_counter()
    parts = single_process_inputs(shards, settings)
    cat = {k: np.concatenate([getattr(p, k) for p in parts]) for k in parts[0].__dict__}
    shift = np.cumsum([0] + [p.capacity.shape[0] for p in parts[:-1]])
    hosts = np.concatenate([p.codes + s for p, s in zip(parts, shift, strict=True)])
    allocation = allocate(
        cat["rate"],
        settings.allocation_budget,
        weights=cat["value"],
        costs=cat["cost"],
        hosts=hosts,
        host_capacity=cat["capacity"],
        max_frequency=1.0,
    )
    candidates = Candidates(
        cat["url_id"],
        hosts,
        cat["value"],
        cat["cost"],
        cat["rate"],
        allocation.frequencies,
        cat["log_std"],
        cat["days_since_visit"],
    )
    plan = select_batch(candidates, settings.budget, cat["capacity"], seed=settings.seed)
    single_s = time.perf_counter() - t
    sharded = pd.read_parquet(result.path)
    frequency = np.concatenate(
        [np.load(f.parent / f".{f.name}.frequency.npy") for f in shards.folders]
    )
    f = allocation.frequencies
    gap = np.abs(frequency - f)
    rel = gap / np.maximum(np.maximum(f, frequency), 1e-300)
    same_pages = np.array_equal(sharded["url_id"].to_numpy(), cat["url_id"][plan.index])
    same_reasons = np.array_equal(
        sharded["reason"].to_numpy(), np.asarray(REASONS, dtype=object)[plan.reason]
    )
    print(
        f"check: single-process plan {single_s:.1f} s vs sharded {result.seconds} "
        f"(sum {sum(result.seconds.values()):.1f} s: ratio "
        f"{sum(result.seconds.values()) / single_s:.2f})"
    )
    print(
        f"  frequencies: max |df| {gap.max():.2e}, max relative {rel.max():.2e}, "
        f"pages beyond 1e-9 relative: {int(np.sum(rel > 1e-9)):,} of {f.shape[0]:,}; "
        f"multipliers {result.root.multiplier:.15g} vs {allocation.multiplier:.15g}"
    )
    print(
        f"  batch: {len(sharded):,} vs {plan.index.shape[0]:,} pages; same pages in the "
        f"same order: {same_pages}; same reasons: {same_reasons}"
    )


def estimate_main(args: Any) -> None:
    """The sharded estimation: statistics generated, split, estimated on the workers."""
    import distributed
    import pandas as pd

    from tasks.cycle.sharded_estimation import (
        estimate_sharded,
        single_process_estimates,
        synthetic_stats,
        write_stats_shards,
    )

    hosts = args.hosts or max(1, args.pages // 50)
    root = Path(tempfile.mkdtemp(prefix="sharded-estimate-", dir=args.dir))
    print(
        f"estimation: {args.pages:,} pages on {hosts:,} hosts in {args.shards} shards, "
        f"{args.workers} workers; files under {root}"
    )
    try:
        t = time.perf_counter()
        pq.write_table(synthetic_stats(args.pages, hosts, 8, seed=3), root / "stats.parquet")
        generate_s = time.perf_counter() - t
        t = time.perf_counter()
        shards = write_stats_shards(root / "stats.parquet", root / "shards", args.shards)
        split_s = time.perf_counter() - t
        with (
            distributed.LocalCluster(
                n_workers=args.workers,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
                memory_limit=0,
            ) as cluster,
            distributed.Client(cluster) as client,
        ):
            worker_base = client.run(reset_peak)
            t = time.perf_counter()
            result = estimate_sharded(client, shards, root / "estimates")
            sharded_s = time.perf_counter() - t
            worker_peak = client.run(peak_mb)
        grow = max(worker_peak[w][1] - worker_base[w][1] for w in worker_peak)
        phases = ", ".join(f"{k} {v:.1f} s" for k, v in result.seconds.items())
        per_worker = shards.size / len(worker_peak)
        print(
            f"  generate {generate_s:.1f} s, split {split_s:.1f} s, sharded estimation "
            f"{sharded_s:.1f} s ({phases}); "
            f"{result.rounds} rounds; {result.rows:,} pages estimated, fit sampled "
            f"{result.fit.sampled:,} of {result.fit.observed:,} observed"
        )
        print(
            f"  worker peak +{grow:,.0f} MiB over their start "
            f"({grow * 2**20 / per_worker:,.0f} bytes per page a worker holds)"
        )
        if args.check:
            t = time.perf_counter()
            want, prior = single_process_estimates(shards)
            single_s = time.perf_counter() - t
            got = pd.concat([pd.read_parquet(p) for p in result.paths], ignore_index=True)
            same_pages = bool(np.array_equal(got["url_id"].to_numpy(), want["url_id"].to_numpy()))
            worst = {
                name: float(np.max(np.abs(got[name].to_numpy() / want[name].to_numpy() - 1)))
                for name in ("rate", "rate_low", "rate_high", "log_std", "prior_rate")
            }
            print(
                f"  check: single-process {single_s:.1f} s (reading the shards included) vs "
                f"sharded {sharded_s:.1f} s; same pages in the same order: {same_pages}"
            )
            print(
                "  max relative difference: "
                + ", ".join(f"{k} {v:.1e}" for k, v in worst.items())
                + f"; shape {result.fit.web.shape:.15g} vs {prior.shape:.15g}, odd share "
                f"{result.fit.web.odd_share:.15g} vs {prior.odd_share:.15g}"
            )
        print(f"  load average {os.getloadavg()[0]:.1f}")
    finally:
        if not args.keep:
            shutil.rmtree(root, ignore_errors=True)
    print(
        "reproduce: .venv/bin/python benchmarks/bench_sharded_plan.py --estimate "
        f"--pages {args.pages} --shards {args.shards}" + (" --check" if args.check else "")
    )


if __name__ == "__main__":
    main()
