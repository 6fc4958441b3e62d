"""The content pool on a Dask LocalCluster (issue 21): a batch's extraction, hashing, links
and WARC writing on Dask workers store what the inline batch stores."""

from __future__ import annotations

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
def dask_pool() -> Iterator[DaskContentPool]:
    from distributed import LocalCluster

    # threads, not processes: the same calls, and seconds less to start in the test suite
    # (the benchmark runs worker processes)
    with LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    ) as cluster:
        pool = DaskContentPool(cluster.scheduler_address, queue_items=2)
        yield pool
        pool.close()


def _raise(message: str) -> None:
    raise ValueError(message)


def test_an_exception_on_a_dask_worker_is_the_items_answer(dask_pool):
    answers: list[tuple[bool, Any]] = []
    import threading

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
