"""A recrawl cycle's fetch without Prefect: catalog, plan, split, host batches, commit.

The same calls the ``recrawl`` flow makes (``tasks.cycle.work.split_plan``, ``run_host_batch``
per batch, ``commit_cycle``), with the flow's thread pool replaced by a plain
``ThreadPoolExecutor`` so a load run measures the engine and the cycle's batching, not
Prefect's task bookkeeping. As in the flow, ``parallel`` batches fetch at full speed
(``tasks.fetch.batch_slots.ActiveBatches``) and up to five times as many more in their tail.
Each batch holds at most ``max_urls`` URLs of at most ``max_hosts`` hosts, so what a cycle
keeps in memory at once is bounded by threads x ``max_urls`` whatever its size;
``RssSampler`` shows whether it is.

Record hashes are BLAKE2b of the raw body (``tasks.fetch.rows.record_hash``, the engine's
default) rather than the cycle's extraction, which would make the run measure HTML parsing.
"""

from __future__ import annotations

import os
import threading
import time
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pyarrow.parquet as pq

from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS
from tasks.cycle.work import (
    BatchSpec,
    commit_cycle,
    fixed_clock,
    read_batch_metrics,
    run_host_batch,
    split_plan,
    work_dir,
)
from tasks.fetch.batch_slots import ACTIVE_BATCHES, BATCH_THREADS, ActiveBatches
from tasks.fetch.rows import record_hash
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore

CYCLE_AT = datetime(2026, 1, 1, tzinfo=UTC)
_PAGE_SIZE = os.sysconf("SC_PAGE_SIZE")


def loopback_settings(**values: Any) -> FetchSettings:
    """Fetch settings whose address policy lets the engine reach the sandbox on loopback."""
    values.setdefault("allowed_networks", SANDBOX_NETWORKS)
    return FetchSettings(**values)


def prepare_cycle(
    root: Path, urls: list[str], *, cycle: int = 0, max_urls: int = 2_000, max_hosts: int = 40
) -> list[BatchSpec]:
    """Put ``urls`` in the catalog, plan all of them (equal scores), split into host batches."""
    hosts = [urlsplit(u).netloc for u in urls]
    CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    plan = pd.DataFrame(
        {"url_id": [url_id(normalize(u)) for u in urls], "host": hosts, "score": 1.0}
    )
    plan_path = root / f"plan-{cycle}.parquet"
    plan.to_parquet(plan_path)
    return split_plan(root, cycle, plan_path, max_urls=max_urls, max_hosts=max_hosts)


@dataclass(frozen=True)
class CycleFetch:
    started: float  # time.monotonic() when the first batch was submitted
    fetch_s: float  # until the last batch finished
    commit_s: float
    rows: int
    outcomes: dict[str, int]
    host_outcomes: dict[str, dict[str, int]]  # host -> outcome -> pages
    batch_metrics: list[dict[str, Any]]
    fetch_rss_bytes: int  # peak resident set size while fetching
    peak_rss_bytes: int  # peak while fetching and committing
    failures: tuple[str, ...]  # the batches that raised, and why


def fetch_cycle(
    root: Path,
    specs: list[BatchSpec],
    settings: FetchSettings,
    *,
    cycle: int = 0,
    parallel: int = 4,
    window_s: float | None = None,
    commit: bool = True,
) -> CycleFetch:
    """Fetch every batch (``parallel`` at a time), then commit the cycle."""
    clock = fixed_clock(CYCLE_AT + timedelta(days=cycle))  # one cycle a day
    with RssSampler() as rss:
        started = time.monotonic()
        places = ActiveBatches(parallel)
        threads = parallel * BATCH_THREADS // ACTIVE_BATCHES
        with ThreadPoolExecutor(threads, thread_name_prefix="batch") as pool:
            futures = [
                pool.submit(
                    run_host_batch,
                    root,
                    cycle,
                    spec.name,
                    settings=settings,
                    clock=clock,
                    record_hasher=record_hash,
                    window_s=window_s,
                    warc=False,
                    places=places,
                )
                for spec in specs
            ]
            failures = tuple(
                f"{spec.name}: {future.exception()!r}"
                for spec, future in zip(specs, futures, strict=True)
                if future.exception() is not None
            )
        fetch_s = time.monotonic() - started
        fetch_rss = max(rss.peak, current_rss())
        metrics = read_batch_metrics(root, cycle)
        outcomes: Counter[str] = Counter()
        for m in metrics:
            outcomes.update(m["outcomes"])
        host_outcomes = read_host_outcomes(root, cycle)
        commit_s = 0.0
        rows = sum(outcomes.values())
        if commit:
            done = commit_cycle(root, cycle, clock=clock)
            commit_s, rows = done.commit_s, done.rows
    return CycleFetch(
        started,
        fetch_s,
        commit_s,
        rows,
        dict(outcomes),
        host_outcomes,
        metrics,
        fetch_rss,
        rss.peak,
        failures,
    )


def read_host_outcomes(root: Path, cycle: int = 0) -> dict[str, dict[str, int]]:
    """Outcome counts per host from the batches' staged parts."""
    parts = sorted((work_dir(root, cycle) / "parts").glob("batch-*.parquet"))
    found: dict[str, Counter[str]] = {}
    for part in parts:
        table = pq.read_table(part, columns=["host", "outcome"])
        for host, outcome in zip(
            table["host"].to_pylist(), table["outcome"].to_pylist(), strict=True
        ):
            found.setdefault(host, Counter())[outcome] += 1
    return {host: dict(counts) for host, counts in found.items()}


class RssSampler:
    """Peak resident set size of this process, sampled every ``interval_s`` in a thread.

    ``ru_maxrss`` is the peak of the whole process life; this measures one stretch of it.
    """

    def __init__(self, interval_s: float = 0.05) -> None:
        self.interval_s = interval_s
        self.peak = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="rss-sampler", daemon=True)

    def __enter__(self) -> RssSampler:
        self.peak = current_rss()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()
        self.peak = max(self.peak, current_rss())

    def _run(self) -> None:
        while not self._stop.wait(self.interval_s):
            self.peak = max(self.peak, current_rss())


def current_rss() -> int:
    """Resident set size of this process in bytes (Linux ``/proc/self/statm``)."""
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[1]) * _PAGE_SIZE
