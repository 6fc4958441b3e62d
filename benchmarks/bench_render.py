"""Benchmark: headless rendering against the plain fetch of the same pages (the floor).

A sandbox web in this process: one host whose pages are built by a script from a fetched JSON
endpoint (``rendering="fetch_json"``) and one plain host with the same number of pages. The
plain host's pages are fetched by the engine (``tasks.fetch.engine.fetch_batch``); the
script host's pages are rendered by ``tasks.fetch.render.BrowserPool`` with 1, 2 and 4 slots.
Printed: CPU per page (this process, which also runs the sandbox server, plus the browser's
process tree: the steady figure on a shared machine), pages/s (the plain fetch is paced by
the engine's politeness toward its one host, so its rate is not a ceiling), bytes per page,
the ratios rendered / plain, and the pool's peak
memory (proportional set size of Chromium's process group) and renderer processes per slot
count, so the memory bound of a slot is a measured figure. The plain fetch pays no browser
at all: a host that does not need rendering costs what it did before.

Reproduce:  .venv/bin/python benchmarks/bench_render.py [--pages 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import time
from datetime import UTC, datetime
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.render import BrowserPool, RenderSettings, browser_executable, tree_pids
from tasks.fetch.settings import FetchSettings

MIB = float(1 << 20)


def tree_cpu_s(pid: int) -> float:
    """User + system CPU seconds of ``pid`` and its descendants (from /proc)."""
    ticks = os.sysconf("SC_CLK_TCK")
    total = 0.0
    for p in tree_pids(pid):
        try:
            stat = Path(f"/proc/{p}/stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2 :].split()
        total += (int(fields[11]) + int(fields[12])) / ticks
    return total


async def plain(urls: list[str]) -> tuple[float, float, float]:
    settings = FetchSettings(min_delay_s=0.0, allowed_networks=SANDBOX_NETWORKS)
    cpu, started = time.process_time(), time.perf_counter()
    result = await fetch_batch([FetchRequest(u) for u in urls], cycle_id=0, settings=settings)
    elapsed, cpu = time.perf_counter() - started, time.process_time() - cpu
    rows = result.rows.to_pylist()
    assert all(r["outcome"] == "ok" for r in rows), "a plain fetch failed"
    return len(urls) / elapsed, sum(r["bytes"] for r in rows) / len(rows), cpu / len(urls)


async def rendered(urls: list[str], slots: int) -> tuple[float, float, float, int, float, float]:
    settings = RenderSettings(slots=slots, queue_size=len(urls), allowed_networks=SANDBOX_NETWORKS)
    launch = time.perf_counter()
    async with BrowserPool(settings) as pool:
        launched = time.perf_counter() - launch
        assert pool.pid is not None
        cpu = time.process_time() + tree_cpu_s(pool.pid)
        started = time.perf_counter()
        results = await pool.render_all(urls)
        elapsed = time.perf_counter() - started
        cpu = time.process_time() + tree_cpu_s(pool.pid) - cpu
        stats = pool.stats
    assert all(r.outcome == "ok" for r in results), "a render failed"
    per_page = sum(r.wire_bytes for r in results) / len(results)
    pss = stats.peak_rss_bytes / MIB
    return len(urls) / elapsed, per_page, pss, stats.peak_renderers, launched, cpu / len(urls)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=40)
    args = parser.parse_args()
    if browser_executable() is None:
        sys.exit("no Chromium at /usr/bin/chromium (apt-get install -y chromium)")
    web = SandboxWeb.generate(
        hosts=2,
        pages_per_host=args.pages,
        seed=1,
        behaviours={1: HostBehaviour(rendering="fetch_json")},
        clock=SimClock(start=datetime(2026, 1, 1, tzinfo=UTC)),
    )
    with serve_sandbox(web) as running:
        rate, size, cpu = asyncio.run(plain(running.page_urls(0)))
        print(
            f"plain fetch (engine, one host): {cpu * 1e3:6.1f} ms CPU/page, {rate:6.1f} pages/s, "
            f"{size:5.0f} B/page, no browser"
        )
        for slots in (1, 2, 4):
            r_rate, r_size, pss, renderers, launched, r_cpu = asyncio.run(
                rendered(running.page_urls(1), slots)
            )
            print(
                f"rendered, {slots} slot(s): {r_cpu * 1e3:6.1f} ms CPU/page (x{r_cpu / cpu:.1f}), "
                f"{r_rate:6.1f} pages/s, {r_size:5.0f} B/page (x{r_size / size:.2f}), "
                f"peak PSS {pss:.0f} MiB, {renderers} renderers, launch {launched:.1f} s"
            )


if __name__ == "__main__":
    main()
