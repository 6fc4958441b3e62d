"""Benchmark: a batch's content work inline, in worker processes, and on Dask (per page and
in chunks), the same pages in the same run.

The work is what the fetch engine hands off per answered page (``tasks.cycle.offload``):
the record's extraction, hash and simhash plus the page's links (``_HASH``), and the WARC
exchange written by the worker's own writer (``_WARC``). Pages are bench_content's shop
pages (20-80 KB of HTML). Configurations:

  inline        the items done in this process, one after another (the single-process path)
  pool          ``ContentPool``: 2 worker processes fed through pipes (tasks.cycle.offload)
  dask-page     ``DaskContentPool`` with one Dask task per item (chunk_items=1: as before)
  dask-chunk    ``DaskContentPool`` with chunks of up to 32 items (the default)

Dask runs on a LocalCluster of 2 single-threaded worker processes, its scheduler in this
process. Printed per configuration: wall time, pages per second, CPU per page of every
process involved (this one, with the Dask scheduler and client threads, and every worker
process; user + system from /proc), and the ratio to inline's CPU per page. The machine is
shared: read the CPU figures and their ratios, and the load average printed beside them.

    .venv/bin/python benchmarks/bench_dask_content.py [--pages 1000] [--configs ...]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_content import make_pages

from tasks.archive.warc import WarcSettings
from tasks.cycle.offload import (
    _CLOSE,
    _HASH,
    _WARC,
    BatchOpening,
    ContentPool,
    OffloadSettings,
    _WorkerState,
)

KEY = "bench-batch"


def items(pages: list[bytes]) -> list[tuple[int, tuple[Any, ...]]]:
    """Two items per page, as the engine submits them: the hash (with links), the WARC."""
    out: list[tuple[int, tuple[Any, ...]]] = []
    for i, body in enumerate(pages):
        url = f"http://h{i % 50}.bench.test/p/{i}"
        out.append((_HASH, (body, "text/html; charset=utf-8", url, True)))
        exchange = {
            "url": url,
            "status": 200,
            "response_headers": [("Content-Type", "text/html; charset=utf-8")],
            "body": body,
            "request_headers": [("User-Agent", "bench")],
            "method": "GET",
            "reason": "OK",
            "http_version": "HTTP/1.1",
            "fetched_at": datetime(2026, 1, 1, tzinfo=UTC),
            "request_url": None,
            "body_decoded": True,
            "remote_ip": None,
            "previous": None,
        }
        out.append((_WARC, (exchange,)))
    return out


def opening(root: Path, name: str) -> BatchOpening:
    return BatchOpening(str(root), 1, f"bench-{name}", WarcSettings(), {}, None)


def cpu_seconds(pids: set[int]) -> dict[int, float]:
    out = {}
    for pid in pids:
        try:
            t = psutil.Process(pid).cpu_times()
        except psutil.NoSuchProcess:
            continue
        out[pid] = t.user + t.system
    return out


def family() -> set[int]:
    me = psutil.Process()
    return {me.pid, *(p.pid for p in me.children(recursive=True))}


def run_inline(work: list[tuple[int, tuple[Any, ...]]], root: Path) -> None:
    state = _WorkerState("inline")
    state.open(KEY, opening(root, "inline"))
    for kind, payload in work:
        state.do(kind, KEY, payload)
    state.do(_CLOSE, KEY, ())


def run_pool(pool: Any, work: list[tuple[int, tuple[Any, ...]]], root: Path, name: str) -> int:
    """Every item through ``pool.submit`` (which waits for room), then the batch closed;
    returns the failed items."""
    pool.open_batch(KEY, opening(root, name))
    left = len(work)
    failed = 0
    lock = threading.Lock()
    all_in = threading.Event()

    def landed(job: int, ok: bool, value: Any) -> None:
        nonlocal left, failed
        with lock:
            left -= 1
            failed += 0 if ok else 1
            if left == 0:
                all_in.set()

    for kind, payload in work:
        pool.submit(kind, KEY, payload, landed)
    if not all_in.wait(3600):
        raise RuntimeError("items not answered")
    pool.close_batch(KEY)
    return failed


def idle_rate(seconds: float = 5.0) -> float:
    """CPU seconds per second the processes burn doing nothing (heartbeats, polling)."""
    before = cpu_seconds(family())
    time.sleep(seconds)
    after = cpu_seconds(family())
    return sum(after[p] - before.get(p, 0.0) for p in after) / seconds


def measure(name: str, run: Any, pages: int, idle: float = 0.0) -> dict[str, float]:
    """Run one configuration; ``idle`` (CPU s per s of its processes doing nothing) is
    also taken off, for the CPU the work itself cost (``net``)."""
    before = cpu_seconds(family())
    t = time.perf_counter()
    failed = run()
    wall = time.perf_counter() - t
    after = cpu_seconds(family())
    cpu = sum(after[p] - before.get(p, 0.0) for p in after)
    load = os.getloadavg()[0]
    net = max(cpu - idle * wall, 0.0)
    print(
        f"  {name:<11} {wall:7.1f} s wall  {pages / wall:7.1f} pages/s  "
        f"{1000 * cpu / pages:7.2f} ms CPU/page ({1000 * net / pages:.2f} net of idle)  "
        f"(failed items {failed or 0}, load {load:.1f})",
        flush=True,
    )
    return {"wall": wall, "cpu": cpu, "net": net}


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--pages", type=int, default=1000)
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument("--configs", default="inline,pool,dask-page,dask-chunk")
    parser.add_argument("--chunk", type=int, default=32)
    args = parser.parse_args()
    pages = make_pages(args.pages, args.seed)
    work = items(pages)
    size = sum(len(p) for p in pages) / len(pages)
    print(
        f"{len(pages):,} pages ({size / 1000:.0f} KB average), {len(work):,} items "
        f"(hash + links, WARC); load average {os.getloadavg()[0]:.1f}"
    )
    configs = args.configs.split(",")
    results: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-dask-content-") as tmp:
        root = Path(tmp)
        if "inline" in configs:
            results["inline"] = measure("inline", lambda: run_inline(work, root), len(pages))
        if "pool" in configs:
            pool = ContentPool(OffloadSettings(workers=2))
            try:
                run_pool(pool, work[:40], root, "warm-pool")  # workers started, imports done
                idle = idle_rate()
                print(f"  {'':<11} idle: {idle:.3f} CPU s per s")
                results["pool"] = measure(
                    "pool", lambda: run_pool(pool, work, root, "pool"), len(pages), idle
                )
            finally:
                pool.close()
        dask = [c for c in configs if c.startswith("dask")]
        if dask:
            from distributed import LocalCluster

            from tasks.cycle.offload_dask import DaskContentPool

            with LocalCluster(
                n_workers=2,
                threads_per_worker=1,
                processes=True,
                host="127.0.0.1",
                dashboard_address=None,
            ) as cluster:
                for name in dask:
                    chunk = 1 if name == "dask-page" else args.chunk
                    queue = 16 if name == "dask-page" else max(64, 2 * args.chunk)
                    pool = DaskContentPool(
                        cluster.scheduler_address, queue_items=queue, chunk_items=chunk
                    )
                    try:
                        run_pool(pool, work[:40], root, f"warm-{name}")
                        idle = idle_rate()
                        print(f"  {'':<11} idle: {idle:.3f} CPU s per s (cluster)")
                        sent = pool.chunks_sent
                        results[name] = measure(
                            name,
                            lambda p=pool, n=name: run_pool(p, work, root, n),
                            len(pages),
                            idle,
                        )
                        print(f"  {'':<11} {pool.chunks_sent - sent:,} Dask tasks")
                    finally:
                        pool.close()
    base = results.get("inline")
    if base:
        print("CPU per page against inline, same run:")
        for name, r in results.items():
            print(
                f"  {name:<11} {r['cpu'] / base['cpu']:5.2f}x CPU "
                f"({r['net'] / base['net']:.2f}x net of idle), "
                f"{base['wall'] / r['wall']:5.2f}x inline's pages/s"
            )
    print(
        "reproduce: .venv/bin/python benchmarks/bench_dask_content.py "
        f"--pages {args.pages} --configs {args.configs}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
