"""Benchmark: change-rate estimation over a large history against a bare DuckDB scan.

Builds (once, cached under benchmarks/out/) a synthetic history of N pages x C cycles,
every page observed in every cycle, through the real history store. Then, each in a
fresh process so peak memory is its own, alternating, `--repeat` times:

  bare         SELECT url_id, count(*) FROM <history> GROUP BY url_id   (the ceiling)
  estimate     load_rate_estimates(): per-page statistics -> empirical-Bayes MLE -> DataFrame
  cold         the same, but the per-page statistics recomputed from every history file
               (what `recrawl history rebuild-stats` does) instead of the maintained ones

Each step checks the files it reads against their digests (``tasks.store.history.verify_file``:
one read of each, in a fresh process). With ``--unchecked`` each step also runs with the
digests switched off (``benchmarks/digest_peer.py``; ``bare`` reads no digest either way)
and the checked / unchecked ratios are printed: what the check costs.

Reproduce:  .venv/bin/python benchmarks/bench_estimation.py [--pages 10000000 --cycles 10]
            [--unchecked]
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
from typing import Any

OUT = Path(__file__).parent / "out"
KINDS = ("bare", "estimate", "cold")
UNCHECKED = "-unchecked"
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def build(root: Path, pages: int, cycles: int) -> None:
    from models.estimation.synthetic import generate_history, generate_web
    from tasks.store.history import HistoryStore

    marker = root / f"built-{pages}-{cycles}-digests"  # a history cached before them: rebuilt
    if marker.exists():
        print(f"using cached history under {root}")
        return
    import shutil

    shutil.rmtree(root, ignore_errors=True)
    t0 = time.perf_counter()
    web = generate_web(pages, seed=1)
    store = HistoryStore(root)
    rows = 0
    history = generate_history(web, cycles, failure_rate=0.0, seed=1)
    for cycle_id, table in history:
        rows += store.write_cycle(cycle_id, table, link=False).rows
        print(f"  wrote cycle {cycle_id} ({rows:,} rows so far)", flush=True)
    marker.touch()
    print(f"built {rows:,} history rows in {time.perf_counter() - t0:.0f} s")


def child(kind: str, root: Path) -> None:
    import duckdb

    if kind.endswith(UNCHECKED):
        from benchmarks.digest_peer import switch_off_digests

        switch_off_digests()
        kind = kind.removesuffix(UNCHECKED)

    from models.estimation.change_rate import estimate_from_moments
    from tasks.cycle.estimation import load_rate_estimates, read_estimation_inputs
    from tasks.cycle.memory import keep_freed_memory
    from tasks.store.history import HistoryStore

    keep_freed_memory()  # the same process memory policy for every step, as the CLI sets
    store = HistoryStore(root)
    base_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    load_start = Path("/proc/loadavg").read_text().split(" ")[0]
    t0, c0 = time.perf_counter(), time.process_time()
    if kind == "bare":
        con = duckdb.connect()
        out = con.sql(
            "SELECT url_id, count(*) AS n FROM read_parquet($files) GROUP BY url_id",
            params={"files": store.files()},
        ).to_arrow_table()
        pages = out.num_rows
    elif kind == "estimate":
        pages = len(load_rate_estimates(root, use_catalog=False))
    elif kind == "cold":
        store.manifest()  # the maintained stats are ignored: recompute from the files
        stats_table = store._aggregate_all()
        del stats_table
        # estimation itself as in "estimate", on the freshly aggregated statistics
        inputs = read_estimation_inputs(root, use_catalog=False)
        pages = estimate_from_moments(inputs.moments, groups=inputs.group_codes).page_ids.shape[0]
    else:
        raise SystemExit(f"unknown kind {kind}")
    seconds, cpu = time.perf_counter() - t0, time.process_time() - c0
    load = f"{load_start} -> {Path('/proc/loadavg').read_text().split(' ')[0]}"
    peak_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        json.dumps(
            {
                "kind": kind,
                "seconds": seconds,
                "cpu": cpu,
                "load": load,
                "peak_mb": peak_mb,
                "added_mb": peak_mb - base_mb,
                "pages": pages,
            }
        )
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--pages", type=int, default=10_000_000)
    parser.add_argument("--cycles", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--unchecked", action="store_true", help="also run without digests")
    parser.add_argument("--child", choices=[*KINDS, *(k + UNCHECKED for k in KINDS[1:])])
    parser.add_argument("--root", type=Path)
    args = parser.parse_args()
    root = args.root or OUT / f"history-{args.pages}x{args.cycles}"
    if args.child:
        child(args.child, root)
        return
    build(root, args.pages, args.cycles)
    kinds = [*KINDS, *(k + UNCHECKED for k in KINDS[1:] if args.unchecked)]
    runs: dict[str, list[dict[str, Any]]] = {kind: [] for kind in kinds}
    for _ in range(args.repeat):
        for kind in runs:
            cmd = [sys.executable, __file__, "--child", kind, "--root", str(root)]
            done = subprocess.run(cmd, check=True, capture_output=True, text=True)
            runs[kind].append(json.loads(done.stdout.strip().splitlines()[-1]))
    bare = statistics.median(r["seconds"] for r in runs["bare"])
    print(f"\n{args.pages:,} pages x {args.cycles} observations, {args.repeat} runs each (median)")
    print(
        f"{'step':<20}{'seconds':>10}{'CPU s':>8}{'x bare':>9}{'peak RSS MiB':>14}"
        f"{'above imports':>15}"
    )
    for kind, results in runs.items():
        secs = statistics.median(r["seconds"] for r in results)
        cpu = statistics.median(r["cpu"] for r in results)
        peak = max(r["peak_mb"] for r in results)
        added = max(r["added_mb"] for r in results)
        print(f"{kind:<20}{secs:>10.2f}{cpu:>8.2f}{secs / bare:>9.2f}{peak:>14.0f}{added:>15.0f}")
    print("load (/proc/loadavg, 1 min, at the start -> end of each child):")
    for kind, results in runs.items():
        print(f"  {kind:<18}" + ", ".join(str(r["load"]) for r in results))
    for kind in KINDS[1:] if args.unchecked else ():
        checked = statistics.median(r["seconds"] for r in runs[kind])
        unchecked = statistics.median(r["seconds"] for r in runs[kind + UNCHECKED])
        print(
            f"digests: {kind} checked / unchecked = {checked / unchecked:.3f}x "
            f"({checked - unchecked:+.2f} s)"
        )
    print(
        "target: estimate within 1.5x of bare (issue 2); with the default mixture prior, "
        "within 2x (issue 19)"
    )
    print(
        "reproduce: .venv/bin/python benchmarks/bench_estimation.py "
        f"--pages {args.pages} --cycles {args.cycles}" + (" --unchecked" if args.unchecked else "")
    )


if __name__ == "__main__":
    main()
