"""Benchmark: the recrawl cycle inline, with content worker processes, on Dask, and on 1
core against 2, back to back in one run (``benchmarks/bench_cycle.py`` per configuration).

Each configuration runs ``bench_cycle.py`` (sandbox, Prefect's local server, two cycles,
the engine's fetch-only run of the same pages before and after) in a fresh process; this
script prints, per configuration and cycle, pages per second of wall time, client CPU per
page (every client process), and the ratio to the engine's fetch-only CPU measured in that
same process. Wall-time throughput is the figure the offload is for (the flow process's one
core stops being the limit); CPU per page is what it costs.

    .venv/bin/python benchmarks/bench_cycle_offload.py [--hosts 300]
        [--configs inline,workers,dask,1core,2core]
"""

from __future__ import annotations

import argparse
import re
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "inline": [],
    "workers": ["--content-workers", "2"],
    "dask": ["--dask-workers", "2"],
    "1core": ["--content-workers", "2", "--cpus", "0"],
    "2core": ["--content-workers", "2", "--cpus", "0,1"],
    "1core-inline": ["--cpus", "0"],
    "2core-inline": ["--cpus", "0,1"],
}
_CYCLE = re.compile(
    r"CPU, all client processes: ([\d.]+) s, ([\d.]+) ms per page, ([\d,]+) pages per "
    r"core-second, ([\d,]+) pages per second of wall time"
)
_RATIO = re.compile(
    r"cycle (\d): ([\d.]+) ms CPU per page = ([\d.]+)x the engine's fetch-only ([\d.]+) ms"
)
_BODY = re.compile(r"flow body \(wall\)\s+([\d.]+) s")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--configs", default="inline,workers,dask")
    parser.add_argument("--log", default=str(REPO / "benchmarks" / "out" / "cycle-offload"))
    args = parser.parse_args()
    logs = Path(args.log)
    logs.mkdir(parents=True, exist_ok=True)
    rows = []
    for name in args.configs.split(","):
        command = [
            sys.executable,
            str(REPO / "benchmarks" / "bench_cycle.py"),
            "--hosts",
            str(args.hosts),
            *CONFIGS[name],
        ]
        started = time.perf_counter()
        done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
        (logs / f"{name}.txt").write_text(done.stdout + done.stderr)
        if done.returncode != 0:
            print(f"{name}: failed (exit {done.returncode}), see {logs / name}.txt")
            continue
        cycles = _CYCLE.findall(done.stdout)
        ratios = {int(c): (float(r), float(e)) for c, _, r, e in _RATIO.findall(done.stdout)}
        bodies = [float(b) for b in _BODY.findall(done.stdout)]
        for cycle, (_, ms, _, wall_rate) in enumerate(cycles):
            ratio, engine = ratios.get(cycle, (float("nan"), float("nan")))
            rows.append(
                (
                    name,
                    cycle,
                    float(wall_rate.replace(",", "")),
                    bodies[cycle],
                    float(ms),
                    engine,
                    ratio,
                )
            )
        print(f"{name}: done in {time.perf_counter() - started:.0f} s", flush=True)
    print(
        f"\n{'config':<14} {'cycle':>5} {'pages/s wall':>12} {'flow body s':>11} "
        f"{'CPU ms/page':>11} {'engine ms':>9} {'ratio':>6}"
    )
    for name, cycle, rate, body, ms, engine, ratio in rows:
        print(
            f"{name:<14} {cycle:>5} {rate:>12,.0f} {body:>11.1f} {ms:>11.2f} {engine:>9.2f} "
            f"{ratio:>5.2f}x"
        )
    base = {cycle: rate for name, cycle, rate, *_ in rows if name == rows[0][0]} if rows else {}
    for name, cycle, rate, *_ in rows:
        if name != rows[0][0] and cycle in base:
            print(
                f"{name} cycle {cycle}: {rate / base[cycle]:.2f}x the wall-time throughput "
                f"of {rows[0][0]}"
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
