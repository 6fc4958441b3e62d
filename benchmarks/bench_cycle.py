"""Benchmark: one 20,000-page recrawl cycle on the sandbox, wall time split by phase.

The sandbox web (1,000 hosts x 20 pages) runs in its own process (``python -m sandbox``);
this process runs the ``recrawl`` flow with Prefect in its default local mode (or against
``--api-url``). Two cycles: cycle 0 fetches every page for the first time (robots.txt,
full bodies), cycle 1 fetches them all again (conditional requests; the sandbox's clock
stands still, so they are 304s where the host's validators are trusted).

Phases, from the task bodies' own clocks: planning (plan + split), host limits (Prefect
API calls), fetching (the union of the batch bodies' intervals), writing (staging the
parts inside the batches + the commit), reporting. Orchestration overhead = the flow's
wall time minus the union of all task bodies' intervals (Prefect's task runs, slot
acquisition, futures), and separately the flow call's own start and end.

    .venv/bin/python benchmarks/bench_cycle.py [--hosts 1000] [--pages-per-host 20]
        [--content-workers N | --dask-workers N | --batch-workers N] [--cpus 0] [--profile]

CPU per page (issue 19): user + system CPU of every client process (this one, Prefect's
server, the content or batch workers or Dask's workers; never the sandbox's), per page of each
cycle, side by side with the engine's fetch-only run of the same pages in the same run
(``fetch_batch_sync``, one batch, concurrency 64: no extraction, no WARC, no Prefect),
before and after the cycles. ``--cpus`` pins this process and what it starts (not the
sandbox) to those CPUs, for the 1-core / 2-core comparison; ``--profile`` credits the flow
process's CPU to the parts of the cycle (``benchmarks/bench_cycle_sampler.py``) and samples
each process's resident memory.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
from flows.local_prefect import apply_prefect_defaults  # noqa: E402

apply_prefect_defaults()  # before Prefect is imported (start timeout, analytics off, quiet)

START = datetime(2026, 1, 1, tzinfo=UTC)
FETCH = {
    "min_delay_s": 0.0,
    "max_delay_s": 0.05,
    "delay_factor": 1.0,
    "seed": 1,
    "allowed_networks": ["127.0.0.0/8", "::1/128"],  # sandbox.SANDBOX_NETWORKS: loopback
}
BOOTSTRAP = {"discovery": 1.0, "reestimation": 0.0, "verification": 0.0}


def _all_cpus() -> None:
    os.sched_setaffinity(0, range(os.cpu_count() or 1))  # the sandbox is not the client


def start_sandbox(hosts: int, pages: int, folder: Path) -> tuple[subprocess.Popen[bytes], dict]:
    manifest = folder / "sandbox.json"
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "sandbox",
            "--hosts",
            str(hosts),
            "--pages-per-host",
            str(pages),
            "--port",
            "0",
            "--manifest",
            str(manifest),
            "--log-max-entries",
            "1000",
        ],
        cwd=REPO,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        preexec_fn=_all_cpus,
    )
    deadline = time.monotonic() + 300
    while not manifest.exists():
        if proc.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError("the sandbox did not start")
        time.sleep(0.2)
    return proc, json.loads(manifest.read_text())


def union(windows: list[tuple[float, float]]) -> float:
    """Total length of the union of intervals."""
    total, end = 0.0, -float("inf")
    for start, stop in sorted(windows):
        if stop <= end:
            continue
        total += stop - max(start, end)
        end = stop
    return total


def phases(result: dict, call_s: float) -> dict[str, float]:
    windows = {name: (s, e) for name, s, e in result["task_windows"]}
    batches = [w for name, w in windows.items() if name.startswith("batch-")]
    flow_s = result["flow_s"]
    body = union(list(windows.values()))

    def span(name: str) -> float:
        return windows[name][1] - windows[name][0] if name in windows else 0.0

    return {
        "flow call (wall)": call_s,
        "flow body (wall)": flow_s,
        "planning (plan + split)": span("plan") + span("split"),
        "host limits (Prefect API)": span("limits"),
        "fetching (union of batches)": union(batches),
        "  of which staging parts": result["write_s"] - span("commit"),
        "writing (commit)": span("commit"),
        "report": span("report"),
        "sitemap and feed reads (refresh-signals)": span("signals"),
        "signal evidence": span("signal-evidence"),
        "render probe (probe-render)": span("probe-render"),
        "orchestration overhead (flow body - task bodies)": flow_s - body,
        "flow start + end (call - body)": call_s - flow_s,
    }


def client_processes(sandbox_pid: int) -> dict[int, tuple[str, Any]]:
    """This process and every process it started but the sandbox, by role."""
    import psutil

    me = psutil.Process()
    skip = {sandbox_pid} | {c.pid for c in psutil.Process(sandbox_pid).children(recursive=True)}
    found: dict[int, tuple[str, Any]] = {me.pid: ("flow process", me)}
    for child in me.children(recursive=True):
        if child.pid in skip:
            continue
        try:
            line = " ".join(child.cmdline())
        except psutil.Error:
            continue
        if "py-spy" in line:  # the profiler (--py-spy) is not the client
            continue
        if "prefect" in line or "uvicorn" in line:
            role = "Prefect server"
        elif "distributed" in line or "dask" in line:
            role = "Dask workers"
        elif "multiprocessing" in line:
            role = "worker processes (content or batch)"
        else:
            role = "other"
        found[child.pid] = (role, child)
    return found


def cpu_by_pid(processes: dict[int, tuple[str, Any]]) -> dict[int, float]:
    """User + system CPU seconds of each client process so far (those still readable)."""
    import psutil

    used: dict[int, float] = {}
    for pid, (_, process) in processes.items():
        try:
            times = process.cpu_times()
        except psutil.Error:
            continue
        used[pid] = times.user + times.system
    return used


def cpu_by_role(processes: dict[int, tuple[str, Any]]) -> dict[str, float]:
    totals: dict[str, float] = {}
    for pid, used in cpu_by_pid(processes).items():
        role = processes[pid][0]
        totals[role] = totals.get(role, 0.0) + used
    return totals


def start_py_spy(executable: str, out: Path) -> tuple[subprocess.Popen[bytes], Path]:
    """py-spy recording this process and its children until ``stop_py_spy`` (the sandbox is
    one too: ``print_py_spy`` leaves it out)."""
    command = [executable, "record", "--pid", str(os.getpid()), "--subprocesses"]
    command += ["--nonblocking", "--rate", "40", "--format", "raw", "--output", str(out)]
    proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    time.sleep(1.0)  # attached before the cycle starts
    return proc, out


def stop_py_spy(spy: tuple[subprocess.Popen[bytes], Path]) -> Path | None:
    import signal

    proc, out = spy
    proc.send_signal(signal.SIGINT)  # py-spy writes its file on SIGINT
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        proc.kill()
        return None
    return out if out.exists() else None


def print_py_spy(path: Path, processes: dict[int, tuple[str, Any]]) -> None:
    from bench_cycle_sampler import collapsed_parts

    for pid, parts in sorted(collapsed_parts(path).items(), key=lambda kv: -kv[1].total()):
        if pid not in processes:  # the sandbox
            continue
        role = processes[pid][0]
        total = parts.total()
        print(f"  py-spy: {role} (pid {pid}), {total} samples on a CPU:")
        for name, count in parts.most_common(12):
            print(f"    {name:<48} {count / total:6.1%}")


def peak_rss_lines(processes: dict[int, tuple[str, Any]]) -> list[str]:
    """Each live client process's peak resident size so far (the kernel's VmHWM: no
    sampling) and its proportional share now (PSS: pages shared with the fork server or
    another worker counted in part)."""
    import psutil

    lines = []
    for pid, (role, process) in sorted(processes.items(), key=lambda kv: kv[1][0]):
        try:
            status = Path(f"/proc/{pid}/status").read_text()
            peak = next(int(x.split()[1]) for x in status.splitlines() if x.startswith("VmHWM"))
            pss = process.memory_full_info().pss
        except (OSError, StopIteration, psutil.Error, AttributeError):
            continue
        lines.append(
            f"  memory {role:<38} pid {pid:<8} peak RSS {peak / 1024:6.0f} MiB, "
            f"PSS now {pss / 2**20:6.0f} MiB"
        )
    return lines


def cpu_bound_line(total: float, busiest: float, cores: int = 2) -> str:
    """The cycle's shortest possible time on ``cores`` idle cores from its CPU alone: no
    faster than its CPU spread evenly, nor than its busiest process (the flow process is
    one interpreter: its threads share one GIL). A bound, not a wall-clock figure: on this
    shared machine the wall time says more about the neighbours than about the cycle."""
    bound = max(total / cores, busiest)
    return (
        f"  CPU-bound time: 1 core {total:.2f} s; {cores} cores >= max(CPU / {cores}, busiest "
        f"process {busiest:.2f} s) = {bound:.2f} s: {cores}-core speed-up at most "
        f"{total / bound:.2f}x"
    )


def engine_baseline(urls: list[str]) -> tuple[float, int, float]:
    """The engine alone on the same pages: (CPU s of this process, rows, wall s)."""
    from tasks.fetch.engine import fetch_batch_sync
    from tasks.fetch.settings import FetchSettings

    settings = FetchSettings(**{**FETCH, "concurrency": 64})
    before = resource.getrusage(resource.RUSAGE_SELF)
    started = time.perf_counter()
    result = fetch_batch_sync(urls, settings=settings)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_SELF)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return cpu, result.rows.num_rows, wall


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages-per-host", type=int, default=20)
    parser.add_argument("--max-batch-urls", type=int, default=2500)
    parser.add_argument("--max-hosts-per-batch", type=int, default=40)
    parser.add_argument("--host-shards", type=int, default=16, help="0: one host:<h> tag per host")
    parser.add_argument("--content-workers", type=int, default=0, help="worker processes")
    parser.add_argument("--dask-workers", type=int, default=0, help="a LocalCluster of N")
    parser.add_argument(
        "--batch-workers", type=int, default=0, help="whole host batches in N worker processes"
    )
    parser.add_argument("--cpus", default=None, help="pin the client to these CPUs: 0 or 0,1")
    parser.add_argument("--profile", action="store_true", help="where the flow's CPU goes")
    parser.add_argument(
        "--py-spy",
        default=None,
        help="a py-spy executable: sample every client process from outside, per cycle",
    )
    parser.add_argument("--no-baseline", action="store_true", help="skip the engine-only runs")
    args = parser.parse_args()
    if args.cpus:
        cpus = {int(c) for c in args.cpus.split(",")}
        os.sched_setaffinity(0, cpus)  # before any thread or process starts: all inherit
        print(f"client pinned to CPUs {sorted(cpus)} (the sandbox runs on all)")

    import pandas as pd

    from flows.local_prefect import PrefectStartError, start_local_prefect
    from flows.recrawl import recrawl_flow
    from tasks.store.catalog import CatalogStore

    try:
        prefect_s = start_local_prefect()
    except PrefectStartError as exc:
        print(f"bench_cycle: {exc}", file=sys.stderr)
        return 2
    print(f"Prefect's local server started in {prefect_s:.1f} s (0: PREFECT_API_URL is set)")

    folder = Path(tempfile.mkdtemp(prefix="bench-cycle-"))
    root = folder / "store"  # per run: two runs side by side never share a store
    proc, manifest = start_sandbox(args.hosts, args.pages_per_host, folder)
    cluster = None
    dask_address = None
    if args.dask_workers:
        from distributed import LocalCluster

        cluster = LocalCluster(
            n_workers=args.dask_workers,
            threads_per_worker=1,
            processes=True,
            dashboard_address=None,
        )
        dask_address = cluster.scheduler_address
        print(f"Dask LocalCluster: {args.dask_workers} worker processes at {dask_address}")
    baselines: list[float] = []
    try:
        urls = manifest["page_urls"]
        if not args.no_baseline:
            cpu, rows, wall = engine_baseline(urls)
            baselines.append(1000 * cpu / rows)
            print(
                f"engine fetch-only (before the cycles): {rows:,} pages, {wall:.1f} s wall, "
                f"{1000 * cpu / rows:.2f} ms CPU per page ({rows / cpu:,.0f} pages per core-second)"
            )
        CatalogStore(root).upsert(
            pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
        )
        per_cycle: list[float] = []
        for cycle in (0, 1):
            processes = client_processes(proc.pid)
            pid_before = cpu_by_pid(processes)
            cpu_before = cpu_by_role(processes)
            sampler = None
            if args.profile:
                from bench_cycle_sampler import Sampler

                sampler = Sampler(watch=[p for p in processes if p != os.getpid()]).start()
            spy = None
            if args.py_spy:
                spy_out = REPO / "benchmarks" / "out" / "py-spy"  # kept: read them further
                spy_out.mkdir(parents=True, exist_ok=True)
                spy = start_py_spy(args.py_spy, spy_out / f"cycle-{cycle}-{os.getpid()}.txt")
            started = time.perf_counter()
            result = recrawl_flow(
                root=str(root),
                budget=float(len(urls)),
                cycle=cycle,
                at=START + timedelta(days=cycle),
                fetch=FETCH,
                slices=BOOTSTRAP if cycle == 0 else None,
                max_batch_urls=args.max_batch_urls,
                max_hosts_per_batch=args.max_hosts_per_batch,
                host_shards=args.host_shards,
                content_workers=args.content_workers,
                dask_address=dask_address,
                batch_workers=args.batch_workers,
            )
            call_s = time.perf_counter() - started
            if sampler is not None:
                sampler.stop()
            spied = stop_py_spy(spy) if spy is not None else None
            processes = {**processes, **client_processes(proc.pid)}  # workers started now
            pid_after = cpu_by_pid(processes)
            cpu_after = cpu_by_role(processes)
            busiest = max((v - pid_before.get(p, 0.0) for p, v in pid_after.items()), default=0)
            split = phases(result, call_s)
            print(
                f"\ncycle {cycle}: {result['rows']:,} pages, {result['observations']:,} "
                f"observations, {result['batches']} host batches "
                f"({len(result['failed_batches'])} failed)"
            )
            for name, seconds in split.items():
                share = seconds / split["flow body (wall)"]
                print(f"  {name:<50} {seconds:7.2f} s  {share:6.1%}")
            fetch_s = split["fetching (union of batches)"]
            print(f"  pages per second while fetching: {result['rows'] / fetch_s:,.0f}")
            rows = max(int(result["rows"]), 1)
            total = 0.0
            for role in sorted(cpu_after):
                used = cpu_after[role] - cpu_before.get(role, 0.0)
                total += used
                print(f"  CPU {role:<44} {used:7.2f} s  {1000 * used / rows:6.2f} ms/page")
            per_cycle.append(1000 * total / rows)
            print(
                f"  CPU, all client processes: {total:.2f} s, {1000 * total / rows:.2f} ms per "
                f"page, {rows / total:,.0f} pages per core-second, {rows / call_s:,.0f} pages "
                "per second of wall time"
            )
            print(cpu_bound_line(total, busiest))
            for line in peak_rss_lines(processes):
                print(line)
            if sampler is not None:
                from bench_cycle_sampler import table

                print("  flow process CPU by part (CPU-weighted stack samples):")
                for name, share in table(sampler.parts):
                    print(f"    {name:<48} {share:6.1%}")
                for pid, rss in sorted(sampler.peak_rss.items()):
                    role = processes.get(pid, ("?", None))[0]
                    print(f"  peak RSS {role:<20} pid {pid:<8} {rss / 2**20:7.0f} MiB")
            if spied is not None:
                print_py_spy(spied, processes)
        if not args.no_baseline:
            cpu, rows, wall = engine_baseline(urls)
            baselines.append(1000 * cpu / rows)
            print(
                f"\nengine fetch-only (after the cycles): {rows:,} pages, {wall:.1f} s wall, "
                f"{1000 * cpu / rows:.2f} ms CPU per page"
            )
            engine = sum(baselines) / len(baselines)
            for cycle, ms in enumerate(per_cycle):
                print(
                    f"cycle {cycle}: {ms:.2f} ms CPU per page = {ms / engine:.2f}x the engine's "
                    f"fetch-only {engine:.2f} ms (mean of before and after; target <= 2x)"
                )
    finally:
        if cluster is not None:
            cluster.close()
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
