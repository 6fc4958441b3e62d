"""Benchmark: a crawl of the sandbox with the cheap change signals on and off.

Eight sandbox hosts of 40 pages: sitemaps whose lastmod is honest (2 hosts), stale (the
creation date, 2), always "now" (2) or absent (2); one stale host and one without lastmod
also have a feed of their 10 most recently changed pages. The same simulated days are
crawled twice through the store's own steps (``tasks.discovery``, ``tasks.cycle.planning``,
the fetch engine, the history): once with the signals off (the plan as without them), once
on (before each plan the due hosts' sitemaps and feeds are read, ``refresh_signals``; after
the fetches the evidence is recorded, ``record_signal_evidence``). The sandbox's ground truth
gives freshness at each cycle's midpoint (share of pages whose copy has not changed since it
was fetched) by host kind, and the cost per change detected (credits: one a fetch), without
and with the signal reads (robots.txt, sitemaps and feeds: one credit each).

Reproduce:  .venv/bin/python benchmarks/bench_feeds_sandbox.py [--cycles 12 --budget 40]
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import numpy as np
import pandas as pd

from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.planning import plan_cycle
from tasks.cycle.work import default_record_hasher
from tasks.discovery.lastmod_trust import record_signal_evidence
from tasks.discovery.run import DiscoverySettings, discover_sync
from tasks.discovery.signals import refresh_signals_sync
from tasks.discovery.sitemaps import SitemapSettings
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.settings import FetchSettings
from tasks.store.history import HistoryStore

START = datetime(2026, 3, 1, tzinfo=UTC)
KINDS = ("honest", "honest", "stale", "stale", "now", "now", "missing", "missing")
FEEDS = {3: 10, 7: 10}  # host -> feed entries
FETCH = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.2,
    request_timeout_s=10.0,
    robots_timeout_s=5.0,
    allowed_networks=SANDBOX_NETWORKS,
)
DISCOVERY = DiscoverySettings(
    sitemaps=SitemapSettings(min_delay_s=0.0, allowed_networks=SANDBOX_NETWORKS)
)


def make_web(pages: int, seed: int, rate_scale: float) -> SandboxWeb:
    return SandboxWeb.generate(
        hosts=len(KINDS),
        pages_per_host=pages,
        seed=seed,
        default=HostBehaviour(cross_host_links=False, feed_entries=0),
        behaviours={
            i: HostBehaviour(
                sitemap_lastmod=k,
                cross_host_links=False,
                rate_scale=rate_scale,
                feed_entries=FEEDS.get(i, 0),
            )
            for i, k in enumerate(KINDS)
        },
        clock=SimClock(start=START),
    )


def fetch(urls: list[str], at: datetime, cycle: int):
    result = asyncio.run(
        fetch_batch(
            [FetchRequest(u) for u in urls],
            cycle_id=cycle,
            settings=FETCH,
            clock=lambda: at,
            record_hasher=default_record_hasher(),
        )
    )
    return result.rows


def crawl(web, running, root: Path, signals: bool, args) -> dict[str, object]:
    web.clock.set(START)
    pages = {url_id(normalize(u)): (u, i) for i in range(len(KINDS)) for u in running.page_urls(i)}
    seeds = [running.base_url(i) + "/" for i in range(len(KINDS))]
    discover_sync(root, seeds=seeds, settings=DISCOVERY, now=START)
    store = HistoryStore(root)
    urls = [u for u, _ in pages.values()]
    store.write_cycle(0, fetch(urls, START, 0))
    last = dict.fromkeys(pages, START)
    fresh = {k: [] for k in set(KINDS)}
    reads = fetches = changes = 0
    cpu = time.process_time()
    for cycle in range(1, args.cycles + 1):
        at = START + timedelta(days=cycle)
        web.clock.set(at)
        if signals:
            done = refresh_signals_sync(root, at, fetch=FETCH)
            reads += done.sitemaps_read + done.due + done.feeds.read  # robots, sitemaps, feeds
        plan = plan_cycle(
            root,
            cycle,
            args.budget,
            now=at,
            seed=cycle,
            host_capacity=args.capacity,
            signals=signals,
        )
        ids = pd.read_parquet(plan.path)["url_id"].tolist()
        todo = [pages[i][0] for i in ids if i in pages]
        rows = fetch(todo, at, cycle)
        store.write_cycle(cycle, rows)
        if signals:
            record_signal_evidence(root, cycle)
        got = store.read([cycle]).to_pandas()
        fetches += len(got)
        changes += int(got["changed"].fillna(False).sum())
        for i in got["url_id"]:
            last[int(i)] = at
        mid = at + timedelta(hours=12)
        for i, (u, host) in pages.items():
            fresh[KINDS[host]].append(not web.changes_between(u, last[i], mid))
    out = {k: float(np.mean(v)) for k, v in fresh.items()}
    out["web"] = float(np.mean([x for v in fresh.values() for x in v]))
    return {
        "fresh": out,
        "cost_per_change": fetches / max(changes, 1),
        "with_reads": (fetches + reads) / max(changes, 1),
        "reads": reads,
        "fetches": fetches,
        "changes": changes,
        "cpu": time.process_time() - cpu,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--pages", type=int, default=40, help="pages per host")
    parser.add_argument("--cycles", type=int, default=12)
    parser.add_argument("--budget", type=float, default=40.0, help="credits a cycle")
    parser.add_argument("--capacity", type=float, default=10.0, help="visits per host a cycle")
    parser.add_argument("--rate-scale", type=float, default=0.6)
    parser.add_argument("--seed", type=int, default=3)
    args = parser.parse_args()
    print(
        f"sandbox: {len(KINDS)} hosts x {args.pages} pages (lastmod {', '.join(KINDS)}; feeds "
        f"on hosts {sorted(FEEDS)}), {args.cycles} daily cycles, budget {args.budget:g} credits, "
        f"{args.capacity:g} visits per host a cycle; load average {os.getloadavg()[0]:.1f}"
    )
    web = make_web(args.pages, args.seed, args.rate_scale)
    results = {}
    with serve_sandbox(web) as running, tempfile.TemporaryDirectory() as tmp:
        for name, on in (("off", False), ("on", True)):
            results[name] = crawl(web, running, Path(tmp) / name, on, args)
    for name, r in results.items():
        fresh = r["fresh"]
        kinds = ", ".join(f"{k} {fresh[k]:.4f}" for k in ("honest", "stale", "now", "missing"))
        print(
            f"signals {name:3}: freshness {fresh['web']:.4f} ({kinds}); {r['fetches']} fetches, "
            f"{r['changes']} changes found: {r['cost_per_change']:.3f} credits/change, "
            f"{r['with_reads']:.3f} with {r['reads']} signal reads; {r['cpu']:.1f} s CPU"
        )
    print(f"load average {os.getloadavg()[0]:.1f}")


if __name__ == "__main__":
    main()
