"""Benchmark: the recrawl cycle inline, with content or batch worker processes, on Dask, and
on 1 core against 2, back to back in one run (``benchmarks/bench_cycle.py`` per configuration).

Each configuration runs ``bench_cycle.py`` (sandbox, Prefect's local server, two cycles,
the engine's fetch-only run of the same pages before and after) in a fresh process; this
script prints, per configuration and cycle, pages per second of wall time, client CPU per
page (every client process), and the ratio to the engine's fetch-only CPU measured in that
same process. Wall-time throughput is the figure the offload is for (the flow process's one
core stops being the limit); CPU per page is what it costs.

    .venv/bin/python benchmarks/bench_cycle_offload.py [--hosts 300]
        [--configs inline,workers,dask,batch,1core,2core,1core-batch,2core-batch] [--rounds 2]

``--rounds N`` runs the whole list N times, alternating (the machine's load drifts); the
summary gives each configuration's per-round figures, the load average at its start and
end, and for each ``1core-X`` / ``2core-X`` pair the 2-core speed-up of the flow call's
wall time per cycle (1-core wall / 2-core wall, per round: same round, nearest in time).
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
CONFIGS = {
    "inline": [],
    "workers": ["--content-workers", "2"],
    "dask": ["--dask-workers", "2"],
    "1core": ["--content-workers", "2", "--cpus", "0"],
    "2core": ["--content-workers", "2", "--cpus", "0,1"],
    "1core-inline": ["--cpus", "0"],
    "2core-inline": ["--cpus", "0,1"],
    "batch": ["--batch-workers", "2"],
    "1core-batch": ["--batch-workers", "2", "--cpus", "0"],
    "2core-batch": ["--batch-workers", "2", "--cpus", "0,1"],
}
_CYCLE = re.compile(
    r"CPU, all client processes: ([\d.]+) s, ([\d.]+) ms per page, ([\d,]+) pages per "
    r"core-second, ([\d,]+) pages per second of wall time"
)
_RATIO = re.compile(
    r"cycle (\d): ([\d.]+) ms CPU per page = ([\d.]+)x the engine's fetch-only ([\d.]+) ms"
)
_BODY = re.compile(r"flow body \(wall\)\s+([\d.]+) s")
_CALL = re.compile(r"flow call \(wall\)\s+([\d.]+) s")
_MEMORY = re.compile(r"  memory (.+?)\s+pid (\d+)\s+peak RSS\s+(\d+) MiB, PSS now\s+(\d+) MiB")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=300)
    parser.add_argument("--configs", default="inline,workers,dask")
    parser.add_argument("--rounds", type=int, default=1, help="the list this many times")
    parser.add_argument("--log", default=str(REPO / "benchmarks" / "out" / "cycle-offload"))
    args = parser.parse_args()
    names = args.configs.split(",")
    unknown = [n for n in names if n not in CONFIGS]
    if unknown or args.rounds < 1:
        parser.error(f"unknown configs {unknown} (known: {', '.join(CONFIGS)}) or rounds < 1")
    logs = Path(args.log)
    logs.mkdir(parents=True, exist_ok=True)
    rows: list[dict[str, Any]] = []
    memory: dict[str, list[tuple[str, int, int]]] = {}
    for round_ in range(1, args.rounds + 1):
        for name in names:
            command = [
                sys.executable,
                str(REPO / "benchmarks" / "bench_cycle.py"),
                "--hosts",
                str(args.hosts),
                *CONFIGS[name],
            ]
            load_before = os.getloadavg()[0]
            started = time.perf_counter()
            done = subprocess.run(command, cwd=REPO, capture_output=True, text=True, check=False)
            load_after = os.getloadavg()[0]
            log = logs / f"{name}-r{round_}.txt"
            log.write_text(done.stdout + done.stderr)
            if done.returncode != 0:
                print(f"{name} round {round_}: failed (exit {done.returncode}), see {log}")
                continue
            cycles = _CYCLE.findall(done.stdout)
            ratios = {int(c): (float(r), float(e)) for c, _, r, e in _RATIO.findall(done.stdout)}
            bodies = [float(b) for b in _BODY.findall(done.stdout)]
            calls = [float(b) for b in _CALL.findall(done.stdout)]
            memory[name] = [
                (role, int(peak), int(pss)) for role, _, peak, pss in _MEMORY.findall(done.stdout)
            ]
            for cycle, (_, ms, _, wall_rate) in enumerate(cycles):
                ratio, engine = ratios.get(cycle, (float("nan"), float("nan")))
                rows.append(
                    {
                        "name": name,
                        "round": round_,
                        "cycle": cycle,
                        "rate": float(wall_rate.replace(",", "")),
                        "body": bodies[cycle],
                        "call": calls[cycle],
                        "ms": float(ms),
                        "engine": engine,
                        "ratio": ratio,
                        "load": (load_before, load_after),
                    }
                )
            print(
                f"{name} round {round_}: done in {time.perf_counter() - started:.0f} s "
                f"(load {load_before:.1f} -> {load_after:.1f})",
                flush=True,
            )
    print(
        f"\n{'config':<14} {'round':>5} {'cycle':>5} {'pages/s wall':>12} {'call s':>7} "
        f"{'body s':>7} {'CPU ms/page':>11} {'engine ms':>9} {'ratio':>6}  load"
    )
    for r in rows:
        print(
            f"{r['name']:<14} {r['round']:>5} {r['cycle']:>5} {r['rate']:>12,.0f} "
            f"{r['call']:>7.1f} {r['body']:>7.1f} {r['ms']:>11.2f} {r['engine']:>9.2f} "
            f"{r['ratio']:>5.2f}x  {r['load'][0]:.1f} -> {r['load'][1]:.1f}"
        )
    first = rows[0]["name"] if rows else ""
    base = {(r["round"], r["cycle"]): r["rate"] for r in rows if r["name"] == first}
    for r in rows:
        key = (r["round"], r["cycle"])
        if r["name"] != first and key in base:
            print(
                f"{r['name']} round {r['round']} cycle {r['cycle']}: "
                f"{r['rate'] / base[key]:.2f}x the wall-time throughput of {first}"
            )
    by = {(r["name"], r["round"], r["cycle"]): r for r in rows}
    for name in names:
        if not name.startswith("1core"):
            continue
        pair = "2core" + name[len("1core") :]
        for (n, round_, cycle), one in sorted(by.items()):
            two = by.get((pair, round_, cycle))
            if n != name or two is None:
                continue
            print(
                f"{pair} / {name}, round {round_}, cycle {cycle}: 2-core speed-up of the flow "
                f"call's wall {one['call'] / two['call']:.2f}x ({one['call']:.1f} s -> "
                f"{two['call']:.1f} s), of its body {one['body'] / two['body']:.2f}x"
            )
    for name, found in memory.items():
        for role, peak, pss in found:
            print(f"memory {name}: {role} peak RSS {peak} MiB, PSS {pss} MiB (after cycle 1)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
