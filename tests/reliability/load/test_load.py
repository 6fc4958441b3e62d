"""Load, the fast version of ``benchmarks/bench_load.py``: a cycle over 200 sandbox hosts.

2,000 pages over 200 hosts, 20 of which throttle (429/503 with Retry-After) or fail (TCP
resets, 500s, pages slower than the timeout), fetched through the cycle's own path (split
into host batches, ``run_host_batch`` four at a time, commit). What must hold whatever the
machine's load: every page gets exactly one row, the healthy hosts' pages are all fetched,
no batch ever queues more than its bound, and the server's log shows no host was paced
faster than the rules allow, sent more than one request at a time or retried before its
Retry-After. Time constants are scaled down (0.02 s minimum gap, 2 s timeout). No batch
window: a 25 s one shed healthy hosts' last pages when the machine was busy (make test's
parts run side by side), and "all healthy pages fetched" must not depend on the machine's
speed; the failing hosts' tails end by their own retry limits (about 100 s, mostly waiting).
"""

from __future__ import annotations

import pytest

from flows.evaluation.load.cycle_run import fetch_cycle, loopback_settings, prepare_cycle
from flows.evaluation.load.faulty_sandbox import (
    FAULT_KINDS,
    CompactLog,
    FaultScale,
    FaultyServer,
    load_web,
    retry_after_by_host,
)
from flows.evaluation.load.log_checks import PacingRules, check_politeness
from flows.evaluation.load.server_process import ServerProcess
from sandbox.server import serve_in_thread
from tasks.fetch.engine import fetch_batch_sync

pytestmark = pytest.mark.reliability

HOSTS, PAGES = 200, 10
SCALE = FaultScale(throttle_rate=1.0, retry_after_s=1, slow_extra_s=5.0)
SETTINGS = {
    "concurrency": 16,
    "min_delay_s": 0.02,
    "max_delay_s": 0.5,
    "delay_factor": 1.0,
    "request_timeout_s": 2.0,
    "connect_timeout_s": 2.0,
    "robots_timeout_s": 5.0,
    "throttle_backoff_s": 1.0,
    "throttle_backoff_cap_s": 5.0,
    "retry_base_s": 0.05,
    "retry_cap_s": 1.0,
    "max_batch_urls": 600,  # the engine's own bound, above a batch's 500 URLs + robots.txt
    "seed": 81,
}
MAX_URLS, MAX_HOSTS, PARALLEL = 500, 50, 4
WINDOW_S: float | None = None


def test_a_cycle_over_200_hosts_with_20_failing_stays_polite_bounded_and_complete(tmp_path):
    settings = loopback_settings(**SETTINGS)
    work = tmp_path / "server"
    work.mkdir()
    with ServerProcess(work, hosts=HOSTS, pages=PAGES, scale=SCALE) as server:
        faults = server.faults
        assert len(faults) == 20 and set(faults.values()) == set(FAULT_KINDS)
        specs = prepare_cycle(
            tmp_path, server.urls(list(range(HOSTS)), PAGES), max_urls=MAX_URLS, max_hosts=MAX_HOSTS
        )
        run = fetch_cycle(tmp_path, specs, settings, parallel=PARALLEL, window_s=WINDOW_S)
        log = server.dump_log()

    assert run.failures == ()
    assert run.rows == HOSTS * PAGES  # one row per page, failing hosts' pages included
    # Bounded: each batch queued at most its own URLs plus one robots.txt per host, below
    # the engine's admission bound, and nothing was refused for lack of room.
    assert len(specs) == 4 and all(s.urls <= MAX_URLS for s in specs)
    for metrics in run.batch_metrics:
        assert metrics["max_queue_depth"] <= MAX_URLS + MAX_HOSTS <= SETTINGS["max_batch_urls"]
        assert metrics["admission_rejections"] == 0

    rules = PacingRules(
        min_delay_s=SETTINGS["min_delay_s"],
        max_delay_s=SETTINGS["max_delay_s"],
        delay_factor=SETTINGS["delay_factor"],
        host_limit=1,
        retry_after_s=retry_after_by_host(faults, SCALE),
    )
    report = check_politeness(log, rules)
    assert report.hosts == HOSTS
    assert report.concurrency_violations == 0, report.examples
    assert report.gap_violations == 0, report.examples
    assert report.retry_after_violations == 0, report.examples
    # The failing hosts did fail: the checks above were exercised on throttles and resets.
    statuses = set(log.status[log.host == next(i for i, k in faults.items() if k == "reset")])
    assert 0 in statuses
    assert 429 in set(log.status) and 503 in set(log.status) and 500 in set(log.status)

    failing = {server.netlocs[i] for i in faults}
    healthy = {h: o for h, o in run.host_outcomes.items() if h not in failing}
    assert len(healthy) == HOSTS - len(faults)
    short = {h: o for h, o in healthy.items() if o != {"ok": PAGES}}
    assert not short, short


def test_a_reset_request_is_not_resent_behind_the_engines_back():
    faults = {0: "reset"}
    scale = FaultScale(fault_share=1.0)  # every page request is reset
    web = load_web(1, 3, faults, seed=8, scale=scale)
    server = FaultyServer(web, faults, scale=scale, seed=8)
    settings = loopback_settings(**{**SETTINGS, "max_attempts": 1})
    with serve_in_thread(server):
        urls = [f"http://{server.netlocs[0]}{p}" for p in web.page_paths(0)]
        result = fetch_batch_sync(urls, settings=settings)
        log = CompactLog.of(server.log.entries(), server.netlocs)
    assert result.metrics.requests == 3
    page_requests = int((~log.robots).sum())
    assert page_requests == 3, f"the host saw {page_requests} page requests for 3 attempts"
