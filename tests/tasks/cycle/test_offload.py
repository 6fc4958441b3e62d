"""Extraction, hashing, links and WARC writing in worker processes (``tasks.cycle.offload``):
the same rows and records as inline, bounded queues, and failures that stay outcomes."""

from __future__ import annotations

import asyncio
import os
import signal
import threading
import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import pandas as pd
import pyarrow.parquet as pq
import pytest

from models.content.extract import DEFAULT_RULES, extract
from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.archive.read import read_record, read_warc_record
from tasks.archive.warc import PROFILE_NOT_MODIFIED
from tasks.cycle import work
from tasks.cycle.offload import (
    _CALL,
    _HASH,
    ContentPool,
    OffloadError,
    OffloadSettings,
    WorkerDiedError,
)
from tasks.cycle.work import commit_cycle, fixed_clock, run_host_batch, split_plan, work_dir
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.05,
    delay_factor=1.0,
    request_timeout_s=5.0,
    robots_timeout_s=2.0,
    retry_base_s=0.05,
    retry_cap_s=0.2,
    seed=1,
    allowed_networks=SANDBOX_NETWORKS,  # the sandbox is on loopback
)
#: Long enough to outlast any test: the worker is killed (or the pool closed) before.
FOREVER_S = 3600.0


@pytest.fixture
def sandbox_web():
    web = SandboxWeb.generate(3, 8, seed=5, default=HostBehaviour(), clock=SimClock(START))
    with serve_sandbox(web) as running:
        yield running


@pytest.fixture
def pool() -> Iterator[ContentPool]:
    started = ContentPool(OffloadSettings(workers=2, queue_items=2))
    yield started
    started.close()


@pytest.fixture
def one_worker() -> Iterator[ContentPool]:
    started = ContentPool(OffloadSettings(workers=1, queue_items=3))
    yield started
    started.close()


def _plan(root: Path, running: Any) -> str:
    urls = running.page_urls()
    hosts = [urlsplit(u).netloc for u in urls]
    CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    ids = [url_id(normalize(u)) for u in urls]
    path = f"{root}/plan.parquet"
    pd.DataFrame({"url_id": ids, "host": hosts, "score": 1.0, "reason": "due"}).to_parquet(path)
    return path


def _cycle(root: Path, cycle: int, plan: str, at: datetime, **kwargs: Any) -> dict[int, dict]:
    for spec in split_plan(root, cycle, plan):
        run_host_batch(root, cycle, spec.name, settings=SETTINGS, clock=fixed_clock(at), **kwargs)
    links = sorted(
        (r["page"], r["kind"], r["url"])
        for f in sorted((work_dir(root, cycle) / "content").glob("*.parquet"))
        for r in pq.read_table(f).to_pylist()
    )
    commit_cycle(root, cycle)
    rows = {r["url_id"]: r for r in HistoryStore(root).read([cycle]).to_pylist()}
    rows[0] = {"links": links}
    return rows


def _wait_for(condition: Any, what: str) -> None:
    deadline = time.monotonic() + 30
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"never happened: {what}")
        time.sleep(0.01)


def test_offloaded_cycles_store_what_inline_cycles_store(sandbox_web, tmp_path, pool, monkeypatch):
    """Same outcomes, record hashes, simhashes, links and canonicals as inline; records
    holding the bodies hashed; the second cycle's 304s revisits naming the first's capture."""
    inline, offloaded = tmp_path / "inline", tmp_path / "offloaded"
    results = {}
    later = START + timedelta(minutes=1)
    for root, offload in ((inline, None), (offloaded, pool)):
        root.mkdir()
        monkeypatch.setattr(work, "_STATES", {})  # what the first run learned: not shared
        plan = _plan(root, sandbox_web)
        sandbox_web.clock.set(START)
        first = _cycle(root, 0, plan, START, offload=offload)
        sandbox_web.clock.set(later)
        second = _cycle(root, 1, plan, later, offload=offload)
        results[root] = (first, second)
    # Cycle 0 is the same request for request. Cycle 1's conditional requests draw the
    # validator probes from the batch's random stream in dispatch order, which follows the
    # order pages finish in: compared by what it must hold, not row for row.
    for a, b in zip(results[inline][:1], results[offloaded][:1], strict=True):
        # the same canonicals and the same distinct links (each kept with the first page
        # found holding it: pages finish in another order, so the page may differ)
        links_a, links_b = a.pop(0)["links"], b.pop(0)["links"]
        assert sorted(x for x in links_a if x[1] == "canonical") == sorted(
            x for x in links_b if x[1] == "canonical"
        )
        assert sorted(x[2] for x in links_a if x[1] == "link") == sorted(
            x[2] for x in links_b if x[1] == "link"
        )
        assert a.keys() == b.keys()
        for uid, row in a.items():
            other = b[uid]
            for column in ("outcome", "status", "record_hash", "simhash", "changed", "etag"):
                assert row[column] == other[column], (column, row, other)
            assert (row["warc_file"] is None) == (other["warc_file"] is None)
            if row["warc_file"] is not None:
                assert "-w" in other["warc_file"]  # a worker's file series
                theirs = read_record(offloaded, other["warc_file"], other["warc_offset"])
                assert theirs[0].get_statuscode() == str(other["status"])
                if other["outcome"] == "ok":  # the body the worker stored is the one hashed
                    content_type = theirs[0].get_header("Content-Type")
                    url = read_warc_record(
                        offloaded, other["warc_file"], other["warc_offset"]
                    ).header("WARC-Target-URI")
                    stored = extract(theirs[1], content_type, url, DEFAULT_RULES)
                    assert stored.record_hash == other["record_hash"]
    first, second = results[offloaded]
    second.pop(0)
    for row in second.values():
        if row["warc_file"] is not None:
            read_warc_record(offloaded, row["warc_file"], row["warc_offset"])
        if row["outcome"] == "ok":
            assert row["record_hash"] is not None and row["simhash"] is not None
    assert sum(r["outcome"] == "ok" for r in first.values()) >= 20
    revisits = [r for r in second.values() if r["outcome"] == "not_modified"]
    assert len(revisits) >= 5
    for row in revisits:
        record = read_warc_record(offloaded, row["warc_file"], row["warc_offset"])
        assert record.header("WARC-Profile") == PROFILE_NOT_MODIFIED
        before = first[row["url_id"]]
        original = read_warc_record(offloaded, before["warc_file"], before["warc_offset"])
        assert record.header("WARC-Refers-To") == original.header("WARC-Record-ID")
    assert not list((offloaded / "warc").rglob("*.tmp"))  # every worker's writer was closed


def _raise(message: str) -> None:
    raise ValueError(message)


def test_an_exception_in_a_worker_is_the_items_answer(pool):
    pids = pool.pids
    with pytest.raises(OffloadError, match="ValueError: bad page"):
        pool.call(_raise, "bad page")
    assert pool.call(sum, [1, 2, 3]) == 6  # the worker lives on
    assert pool.pids == pids and pool.deaths == 0


def test_a_full_queue_blocks_the_submitter_and_holds_no_more(one_worker):
    """The backpressure rule: with the worker busy, submissions stop at ``queue_items``."""
    pool = one_worker
    answers: list[tuple[bool, Any]] = []
    submitted = []

    def submitter() -> None:
        pool.submit(_CALL, "", (time.sleep, (FOREVER_S,)), lambda j, ok, v: answers.append((ok, v)))
        for i in range(6):
            pool.submit(_CALL, "", (abs, (-i,)), lambda j, ok, v: answers.append((ok, v)))
            submitted.append(i)

    thread = threading.Thread(target=submitter, daemon=True)
    thread.start()
    _wait_for(lambda: len(submitted) == 2, "two items behind the busy one")
    assert thread.is_alive() and pool.in_flight() == 3  # blocked, not queued beyond the bound
    os.kill(pool.pids[0], signal.SIGKILL)  # free it: the held items fail, the rest go through
    thread.join(30)
    assert not thread.is_alive()
    _wait_for(lambda: len(answers) == 7, "every item answered")
    assert [ok for ok, _ in answers[:3]] == [False] * 3
    assert all(isinstance(v, WorkerDiedError) for _, v in answers[:3])
    assert answers[3:] == [(True, 2), (True, 3), (True, 4), (True, 5)]  # the replacement's


def test_a_dead_worker_is_replaced_and_its_items_become_outcomes(one_worker):
    pool = one_worker
    before = pool.pids
    answers: list[tuple[int, bool, Any]] = []
    pool.submit(_CALL, "", (time.sleep, (FOREVER_S,)), lambda j, ok, v: answers.append((j, ok, v)))
    pool.submit(
        _HASH,
        "k",
        (b"<p>x</p>", "text/html", "http://a.test/", False),
        lambda j, ok, v: answers.append((j, ok, v)),
    )
    os.kill(before[0], signal.SIGKILL)
    _wait_for(lambda: len(answers) == 2, "both held items answered")
    assert [ok for _, ok, _ in answers] == [False, False]
    assert all("died" in str(v) for _, _, v in answers)
    assert pool.deaths == 1 and pool.pids != before
    assert pool.call(sum, [2, 2]) == 4  # the replacement serves


class _KillOnThirdPage(ContentPool):
    """A pool whose only worker is SIGKILLed while it holds the batch's third page."""

    hashes = 0

    async def submit_async(self, kind: int, key: str, payload: tuple[Any, ...]) -> Any:
        if kind == _HASH:
            self.hashes += 1
            if self.hashes == 3:
                self.submit(_CALL, "", (time.sleep, (FOREVER_S,)), lambda j, ok, v: None)
                waiting = super().submit_async(kind, key, payload)
                pid = self.pids[0]
                task = asyncio.ensure_future(waiting)
                await asyncio.sleep(0)  # the page is queued behind the sleep
                os.kill(pid, signal.SIGKILL)
                return await task
        return await super().submit_async(kind, key, payload)


def test_a_worker_killed_mid_batch_costs_its_pages_not_the_batch(sandbox_web, tmp_path):
    plan = _plan(tmp_path, sandbox_web)
    pool = _KillOnThirdPage(OffloadSettings(workers=1, queue_items=64))
    try:
        for spec in split_plan(tmp_path, 0, plan):
            run_host_batch(
                tmp_path, 0, spec.name, settings=SETTINGS, clock=fixed_clock(START), offload=pool
            )
        commit_cycle(tmp_path, 0)
    finally:
        pool.close()
    assert pool.deaths == 1
    rows = HistoryStore(tmp_path).read([0]).to_pylist()
    died = [r for r in rows if r["outcome"] == "error" and "died" in (r["reason"] or "")]
    assert len(died) >= 1  # the page held when the worker died (and any queued behind it)
    assert sum(r["outcome"] == "ok" for r in rows) >= len(rows) - len(died) - 8
    for row in rows:  # a row names only a published file, never the dead worker's temp file
        if row["warc_file"] is not None:
            assert (tmp_path / row["warc_file"]).exists()
            read_warc_record(tmp_path, row["warc_file"], row["warc_offset"])
    assert not list((tmp_path / "warc").rglob("*.tmp"))  # removed at commit
