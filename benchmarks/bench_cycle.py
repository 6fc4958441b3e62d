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
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
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
        "orchestration overhead (flow body - task bodies)": flow_s - body,
        "flow start + end (call - body)": call_s - flow_s,
    }


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--hosts", type=int, default=1000)
    parser.add_argument("--pages-per-host", type=int, default=20)
    parser.add_argument("--max-batch-urls", type=int, default=2500)
    parser.add_argument("--max-hosts-per-batch", type=int, default=40)
    parser.add_argument("--host-shards", type=int, default=16, help="0: one host:<h> tag per host")
    args = parser.parse_args()

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
    root = REPO / "benchmarks" / "out" / "cycle-bench"
    shutil.rmtree(root, ignore_errors=True)
    proc, manifest = start_sandbox(args.hosts, args.pages_per_host, folder)
    try:
        urls = manifest["page_urls"]
        CatalogStore(root).upsert(
            pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
        )
        for cycle in (0, 1):
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
            )
            call_s = time.perf_counter() - started
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
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        shutil.rmtree(folder, ignore_errors=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
