"""A batch whose last hosts are slow gives its active place back, so the next batch starts.

Two host batches of four hosts, one place (``ActiveBatches(1)``): the first batch holds a
host whose every page answers later than the timeout. With the tail on, that batch gives
its place back once its three healthy hosts are done and the second batch fetches while
the first still works through the slow host (both finish, every page gets its row); with
``tail_host_share`` 0 the second batch waits for the first to end, as before.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest

from flows.evaluation.load.cycle_run import CYCLE_AT, loopback_settings, prepare_cycle
from flows.evaluation.load.faulty_sandbox import (
    CompactLog,
    FaultScale,
    FaultyServer,
    load_web,
)
from sandbox.server import serve_in_thread
from tasks.cycle.work import BatchOutcome, fixed_clock, read_batch_metrics, run_host_batch
from tasks.fetch.batch_slots import ActiveBatches
from tasks.fetch.rows import record_hash

pytestmark = pytest.mark.reliability

HOSTS, PAGES = 8, 3
SCALE = FaultScale(slow_extra_s=3.0, slow_share=1.0)  # every page of the slow host is late
SETTINGS = {
    "concurrency": 8,
    "min_delay_s": 0.02,
    # a timed-out host's gap is max_delay_s / its AIMD limit (floor 0.125): 0.8 s, not 4 s,
    # so the slow host's six attempts take about 5 s instead of 18 (still far past the
    # healthy hosts' tenth of a second)
    "max_delay_s": 0.1,
    "delay_factor": 1.0,
    "request_timeout_s": 0.5,
    "connect_timeout_s": 0.5,
    "robots_timeout_s": 5.0,
    "max_attempts": 2,
    "retry_base_s": 0.05,
    "retry_cap_s": 0.2,
    "seed": 5,
}


def _run_two_batches(root: Path, tail_share: float) -> dict[str, object]:
    faults = {0: "timeout"}
    web = load_web(HOSTS, PAGES, faults, seed=3, scale=SCALE)
    server = FaultyServer(web, faults, scale=SCALE, seed=3)
    settings = loopback_settings(**SETTINGS, tail_host_share=tail_share)
    places = ActiveBatches(1)
    with serve_in_thread(server):
        urls = [f"http://{server.netlocs[h]}{p}" for h in range(HOSTS) for p in web.page_paths(h)]
        specs = prepare_cycle(root, urls, max_urls=100, max_hosts=4)
        assert len(specs) == 2
        slow_host = server.netlocs[0]
        slow, other = sorted(specs, key=lambda s: slow_host not in s.hosts)
        assert slow_host in slow.hosts and slow_host not in other.hosts
        outcomes: dict[str, BatchOutcome] = {}

        def run(name: str) -> None:
            outcomes[name] = run_host_batch(
                root,
                0,
                name,
                settings=settings,
                clock=fixed_clock(CYCLE_AT),
                record_hasher=record_hash,
                warc=False,
                links=False,
                places=places,
            )

        first = threading.Thread(target=run, args=(slow.name,))
        first.start()
        while places.active == 0:  # the slow batch holds the place before the other asks
            time.sleep(0.005)
        second = threading.Thread(target=run, args=(other.name,))
        second.start()
        first.join(60)
        second.join(60)
        log = CompactLog.of(server.log.entries(), server.netlocs)
    assert set(outcomes) == {slow.name, other.name}
    index = {n: i for i, n in enumerate(server.netlocs)}
    slow_hosts = [index[h] for h in slow.hosts]
    other_hosts = [index[h] for h in other.hosts]
    return {
        "slow_last_done": float(log.done[np.isin(log.host, slow_hosts)].max()),
        "other_first_at": float(log.at[np.isin(log.host, other_hosts)].min()),
        "peak_active": places.peak,
        "rows": sum(pq.read_table(o.part).num_rows for o in outcomes.values()),
        "tails": [m["tail_at_s"] for m in read_batch_metrics(root, 0)],
    }


def test_a_batch_in_its_tail_lets_the_next_batch_fetch(tmp_path):
    run = _run_two_batches(tmp_path, tail_share=0.25)
    assert run["peak_active"] == 1  # never two batches at full speed
    assert run["other_first_at"] < run["slow_last_done"], run  # they overlapped
    assert run["rows"] == HOSTS * PAGES  # nothing lost: the slow host's pages have rows too
    assert any(t is not None for t in run["tails"])


def test_without_a_tail_the_next_batch_waits_for_the_whole_batch(tmp_path):
    run = _run_two_batches(tmp_path, tail_share=0.0)
    assert run["other_first_at"] > run["slow_last_done"], run
    assert run["rows"] == HOSTS * PAGES
    assert all(t is None for t in run["tails"])
