"""The content pool on a Dask LocalCluster (issue 21): a batch's extraction, hashing, links
and WARC writing on Dask workers store what the inline batch stores."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from typing import Any

import pytest

pytest.importorskip(
    "distributed", reason="Dask offload needs dask[distributed] (pip install '.[scale]')"
)

from models.content.extract import DEFAULT_RULES, extract
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.archive.read import read_record, read_warc_record
from tasks.cycle import work
from tasks.cycle.offload import _CALL, OffloadError
from tasks.cycle.offload_dask import DaskContentPool
from tests.tasks.cycle.test_offload import START, _cycle, _plan


@pytest.fixture
def sandbox_web():
    web = SandboxWeb.generate(3, 8, seed=5, default=HostBehaviour(), clock=SimClock(START))
    with serve_sandbox(web) as running:
        yield running


@pytest.fixture(scope="module")
def cluster() -> Iterator[Any]:
    from distributed import LocalCluster

    # threads, not processes: the same calls, and seconds less to start in the test suite
    # (the benchmark runs worker processes)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as running:
        yield running


@pytest.fixture(scope="module")
def dask_pool(cluster: Any) -> Iterator[DaskContentPool]:
    pool = DaskContentPool(cluster.scheduler_address, queue_items=2)
    yield pool
    pool.close()


@pytest.fixture
def chunked_pool(cluster: Any) -> Iterator[DaskContentPool]:
    pool = DaskContentPool(cluster.scheduler_address, queue_items=16, chunk_items=8)
    yield pool
    pool.close()


def _square(x: int) -> int:
    return x * x


def _slow_square(x: int) -> int:
    time.sleep(0.02)
    return x * x


def _run_items(
    pool: DaskContentPool, calls: list[tuple[Any, tuple[Any, ...]]]
) -> tuple[dict[int, Any], int]:
    """Submit every call from one thread; the answers by job and the most items seen in
    flight right after a submission."""
    answers: dict[int, Any] = {}
    lock = threading.Lock()
    all_in = threading.Event()

    def landed(job: int, ok: bool, value: Any) -> None:
        with lock:
            answers[job] = (ok, value)
            if len(answers) == len(calls):
                all_in.set()

    most = 0
    jobs = []
    for function, args in calls:
        jobs.append(pool.submit(_CALL, "", (function, args), landed))
        most = max(most, pool.in_flight())
    assert all_in.wait(120)
    return {i: answers[job] for i, job in enumerate(jobs)}, most


def _raise(message: str) -> None:
    raise ValueError(message)


def test_items_go_in_chunks_each_answered_on_its_own(chunked_pool):
    """40 items in chunks of up to 8: a handful of Dask tasks, not 40; one raising item
    is its own answer, not its chunk's."""
    calls: list[tuple[Any, tuple[Any, ...]]] = [(_square, (i,)) for i in range(40)]
    calls[13] = (_raise, ("bad page",))
    answers, _ = _run_items(chunked_pool, calls)
    assert answers[13] == (False, "ValueError: bad page")
    assert all(answers[i] == (True, i * i) for i in range(40) if i != 13)
    assert chunked_pool.chunks_sent <= 10  # 5 full chunks, a few sent early by the linger
    assert chunked_pool.in_flight() == 0


def test_a_lone_item_is_sent_after_the_linger(chunked_pool):
    answers, _ = _run_items(chunked_pool, [(_square, (7,))])  # a chunk never filled
    assert answers == {0: (True, 49)}
    assert chunked_pool.chunks_sent == 1


def test_items_in_flight_never_exceed_the_bound(chunked_pool):
    """The backpressure rule holds with chunks: a submitter waits once workers x
    queue_items items are waiting, sent or being worked."""
    answers, most = _run_items(chunked_pool, [(_slow_square, (i,)) for i in range(60)])
    assert all(answers[i] == (True, i * i) for i in range(60))
    assert chunked_pool.limit == 2 * 16
    assert most <= chunked_pool.limit
    assert most > chunked_pool.chunk_items  # more than one chunk was in flight at once


def test_an_exception_on_a_dask_worker_is_the_items_answer(dask_pool):
    answers: list[tuple[bool, Any]] = []

    done = threading.Event()

    def landed(job: int, ok: bool, value: Any) -> None:
        answers.append((ok, value))
        done.set()

    dask_pool.submit(_CALL, "", (_raise, ("bad page",)), landed)
    assert done.wait(60)
    assert answers == [(False, "ValueError: bad page")]
    assert isinstance(OffloadError(answers[0][1]), OffloadError)


def test_a_dask_offloaded_cycle_stores_what_the_inline_cycle_stores(
    sandbox_web, tmp_path, dask_pool, monkeypatch
):
    results = {}
    for name, offload in (("inline", None), ("dask", dask_pool)):
        root = tmp_path / name
        root.mkdir()
        monkeypatch.setattr(work, "_STATES", {})  # what the first run learned: not shared
        results[name] = _cycle(root, 0, _plan(root, sandbox_web), START, offload=offload)
    inline, dask = results["inline"], results["dask"]
    links_a, links_b = inline.pop(0)["links"], dask.pop(0)["links"]
    assert sorted(x[2] or "" for x in links_a) == sorted(x[2] or "" for x in links_b)
    assert inline.keys() == dask.keys()
    ok = 0
    for uid, row in inline.items():
        other = dask[uid]
        for column in ("outcome", "record_hash", "simhash", "changed"):
            assert row[column] == other[column], (column, row, other)
        if other["outcome"] == "ok":
            ok += 1
            headers, body = read_record(tmp_path / "dask", other["warc_file"], other["warc_offset"])
            url = read_warc_record(
                tmp_path / "dask", other["warc_file"], other["warc_offset"]
            ).header("WARC-Target-URI")
            stored = extract(body, headers.get_header("Content-Type"), url, DEFAULT_RULES)
            assert stored.record_hash == other["record_hash"]
    assert ok >= 20
    assert dask_pool.in_flight() == 0
