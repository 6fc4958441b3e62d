"""Host batches in worker processes (``recrawl_flow(batch_workers=N)``,
``tasks.cycle.batch_workers``): the same history as inline, a killed worker's batches as
error rows while the flow carries on, and clear errors for bad values."""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest

import tasks.cycle.work
from flows.recrawl import recrawl_flow
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.archive.read import read_warc_record
from tasks.archive.warc import PROFILE_NOT_MODIFIED
from tasks.cycle import offload
from tasks.cycle.batch_workers import BatchWorkers
from tasks.cycle.offload import shutdown_content_pools
from tasks.cycle.work import read_batches
from tasks.store.history import HistoryStore
from tests.flows.conftest import BOOTSTRAP, FAST_FETCH, START, import_catalog

#: A dead worker's hosts are held for the longest pacing gap: with Crawl-delay honoured
#: that is its cap (30 s); the sandbox sends none.
FETCH = {**FAST_FETCH, "honour_crawl_delay": False}
#: Row for row: no random validator probes (drawn from a batch's random stream in the order
#: its hosts' pages are dispatched, which timing decides); the first probes of each host
#: are its first pages, in the order of its one lane.
SAME_ROWS = {**FETCH, "validator_probe_rate": 0.0}
#: The held requests wait while the batches start (slowly on a loaded machine): no timeout.
HELD = {**FETCH, "request_timeout_s": 120.0}
COMPARED = ("outcome", "status", "record_hash", "simhash", "changed", "etag", "last_modified")


@pytest.fixture
def fresh_workers() -> Iterator[None]:
    """No batch worker left from another test (their engine state would carry over)."""
    shutdown_content_pools()
    yield
    shutdown_content_pools()


def _rows(root: str, cycle: int) -> dict[int, dict[str, Any]]:
    return {r["url_id"]: r for r in HistoryStore(root).read([cycle]).to_pylist()}


def test_batch_workers_store_what_inline_batches_store(
    prefect_server, sandbox_web, tmp_path, monkeypatch, fresh_workers
):
    """Two cycles on two stores, inline and in two batch workers: the same rows (outcomes,
    record hashes, simhashes, changes, validators); the second cycle's 304s are revisit
    records referring to the first cycle's captures, written by the workers."""
    results = {}
    for name, workers in (("inline", 0), ("workers", 2)):
        root = str(tmp_path / name)
        monkeypatch.setattr(tasks.cycle.work, "_STATES", {})  # inline: learn afresh too
        urls = import_catalog(root, sandbox_web)
        sandbox_web.clock.set(START)
        first = recrawl_flow(
            root=root,
            budget=len(urls),
            at=START,
            fetch=SAME_ROWS,
            slices=BOOTSTRAP,
            max_hosts_per_batch=2,
            batch_workers=workers,
        )
        later = START + timedelta(days=1)
        sandbox_web.clock.set(later)
        second = recrawl_flow(
            root=root,
            budget=len(urls),
            at=later,
            fetch=SAME_ROWS,
            max_hosts_per_batch=2,
            batch_workers=workers,
        )
        assert first["failed_batches"] == second["failed_batches"] == []
        # the batches ran in batch workers (whose pool only exists once used), or inline
        assert any(s.role == "batch" for s in offload._POOLS) == bool(workers)
        results[name] = (_rows(root, 0), _rows(root, 1))
    for inline, offloaded in zip(results["inline"], results["workers"], strict=True):
        assert inline.keys() == offloaded.keys()
        for uid, row in inline.items():
            other = offloaded[uid]
            for column in COMPARED:
                assert row[column] == other[column], (column, row, other)
            assert (row["warc_file"] is None) == (other["warc_file"] is None)
    root = tmp_path / "workers"
    first, second = results["workers"]
    assert sum(r["outcome"] == "ok" for r in first.values()) == len(first)
    revisits = [r for r in second.values() if r["outcome"] == "not_modified"]
    assert len(revisits) >= 5  # validators learned in cycle 0 by the same worker
    for row in revisits:
        record = read_warc_record(root, row["warc_file"], row["warc_offset"])
        assert record.header("WARC-Profile") == PROFILE_NOT_MODIFIED
        before = first[row["url_id"]]
        original = read_warc_record(root, before["warc_file"], before["warc_offset"])
        assert record.header("WARC-Refers-To") == original.header("WARC-Record-ID")


def test_a_killed_batch_worker_costs_its_batches_and_the_flow_carries_on(
    prefect_server, tmp_path, fresh_workers
):
    """Four one-host batches, all mid-fetch (the sandbox holds their requests), when one
    worker is SIGKILLed: the batches it ran are error rows naming its death, the other
    worker's are fetched, the cycle commits; the replacement serves the next cycle."""
    web = SandboxWeb.generate(4, 6, seed=5, default=HostBehaviour(), clock=SimClock(START))
    root = str(tmp_path)
    workers = BatchWorkers(2)
    with serve_sandbox(web) as running:
        urls = import_catalog(root, running)
        victim: dict[str, Any] = {}

        def kill_when_all_are_fetching() -> None:
            deadline = time.monotonic() + 120
            while running.n_held < 4:  # one request per host at a time: every batch
                if time.monotonic() > deadline:
                    running.release()
                    return
                time.sleep(0.01)
            specs = read_batches(root, 0)
            index = workers.worker_of(specs[0].hosts)
            victim["batches"] = {s.name for s in specs if workers.worker_of(s.hosts) == index}
            victim["pid"] = workers.pool.pids[index]
            os.kill(victim["pid"], signal.SIGKILL)
            deadline = time.monotonic() + 120
            # seen dead (its sentinel) and replaced; if never, the asserts below say so
            while victim["pid"] in workers.pool.pids and time.monotonic() < deadline:
                time.sleep(0.01)
            running.release()

        running.hold()
        killer = threading.Thread(target=kill_when_all_are_fetching, daemon=True)
        killer.start()
        result = recrawl_flow(
            root=root,
            budget=len(urls),
            at=START,
            fetch=HELD,
            slices=BOOTSTRAP,
            max_hosts_per_batch=1,
            batch_workers=2,
            signals=False,  # no sitemap read: the held requests are the batches' only
        )
        killer.join(30)
        assert "pid" in victim, "the batches were never all mid-fetch"
        assert result["status"] == "committed"
        assert set(result["failed_batches"]) == victim["batches"]
        assert workers.pool.deaths == 1
        rows = HistoryStore(root).read([0]).to_pandas()
        assert len(rows) == len(urls)
        dead = rows[rows["outcome"] == "error"]
        assert len(dead) == 6 * len(victim["batches"])
        assert dead["reason"].str.contains("batch worker pid").all()
        assert dead["reason"].str.contains("died (exit code -9)", regex=False).all()
        assert (rows[rows["outcome"] != "error"]["outcome"] == "ok").all()
        for row in rows.itertuples():  # a row names only published records
            if isinstance(row.warc_file, str):
                read_warc_record(root, row.warc_file, int(row.warc_offset))
        assert not list(Path(root, "warc").rglob("*.tmp"))

        running.clock.set(START + timedelta(days=1))
        after = recrawl_flow(
            root=root,
            budget=len(urls),
            at=START + timedelta(days=1),
            fetch=FETCH,
            max_hosts_per_batch=1,
            batch_workers=2,
        )
        assert after["failed_batches"] == []
        assert workers.pool.deaths == 1 and victim["pid"] not in workers.pool.pids


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"batch_workers": -1}, "batch_workers must be >= 0"),
        ({"batch_workers": 2, "content_workers": 2}, "leave content_workers"),
        ({"batch_workers": 1, "dask_address": "tcp://127.0.0.1:1"}, "dask_address unset"),
    ],
)
def test_bad_batch_worker_options_are_clear_errors(tmp_path, options, message):
    with pytest.raises(ValueError, match=message):
        recrawl_flow.fn(root=str(tmp_path), budget=10, **options)


def test_batch_workers_are_routed_by_their_first_host():
    workers = BatchWorkers(3)
    hosts = [f"h{i}.test:80" for i in range(40)]
    chosen = [workers.worker_of([h, "other.test:80"]) for h in hosts]
    assert chosen == [workers.worker_of([h]) for h in hosts]  # the first host decides
    assert set(chosen) == {0, 1, 2}
    with pytest.raises(ValueError, match="batch_workers must be >= 0"):
        BatchWorkers(-2)
    with pytest.raises(ValueError, match="batch workers must be >= 1"):
        BatchWorkers(0)
