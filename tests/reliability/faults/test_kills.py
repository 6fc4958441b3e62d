"""SIGKILL a real cycle process at every stage, many times, at seeded random points.

``tests/cycle/test_crash.py`` kills the cycle worker at random times and at two commit
points. Here the same worker (``tests.tasks.cycle.cycle_worker``, wrapped by ``kill_worker``) is
killed at a chosen stage (planning, splitting, mid-batch fetching, writing parts, each step
of the commit: staging, linking, the version and statistics files, the manifest, after it)
at a random event of that stage, and also at random times. After every kill the history's
invariants hold (``harness.check_history``); after the final re-run each cycle holds every
planned page exactly once. Fast run: one cycle, a kill before the commit and one in it; long run
(``long_reliability``): four cycles, every stage of each, plus random-time kills.
"""

from __future__ import annotations

import contextlib
import os
import random
import signal
import subprocess
import time
from collections import Counter
from collections.abc import Iterator
from datetime import datetime, timedelta
from pathlib import Path

import pytest

from sandbox import HostBehaviour, RunningSandbox, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.work import cycle_state, read_batches, work_dir
from tests.flows.conftest import import_catalog
from tests.reliability.faults.harness import (
    START,
    bootstrap,
    check_history,
    fault_events,
    finish,
    kill_worker,
    snapshot,
)
from tests.reliability.faults.kill_worker import REPEATED, STAGES

pytestmark = pytest.mark.reliability

RANDOM = "random time"

#: Events of each stage in one run of this test's cycle (upper ends; a larger K kills at
#: the stage's end). ``commit-link`` is in milliseconds into the link query.
EVENT_RANGE = {
    "plan": 3,
    "commit-prepare": 1,
    "commit-stage": 3,
    "commit-link": 40,
    "commit-write": 5,
    "commit-manifest": 2,
    "after-publish": 1,
}


@contextlib.contextmanager
def slow_sandbox(hosts: int, pages: int) -> Iterator[RunningSandbox]:
    """``hosts`` x ``pages`` answering after 10 ms (like the crash test's web)."""
    clock = SimClock(START)
    web = SandboxWeb.generate(
        hosts, pages, seed=9, default=HostBehaviour(latency_s=0.01), clock=clock
    )
    with serve_sandbox(web) as running:
        yield running


def _reachable(root: Path, cycle: int, stage: str) -> bool:
    """Whether a run of the cycle in its current state goes through ``stage``."""
    state = cycle_state(root, cycle)
    if state == "committed":
        return False
    if state == "new" or stage not in (*REPEATED, "plan", "split"):
        return True
    if stage in REPEATED:
        return bool(_missing_parts(root, cycle))
    return False  # a resumed cycle is not planned or split again


def _missing_parts(root: Path, cycle: int) -> list[str]:
    parts = work_dir(root, cycle) / "parts"
    return [s.name for s in read_batches(root, cycle) if not (parts / f"{s.name}.parquet").exists()]


def _index(rng: random.Random, root: Path, cycle: int, stage: str, budget: int) -> int:
    """A random event of the stage (batches hold up to 6 URLs of one host)."""
    if stage in REPEATED:
        if cycle_state(root, cycle) == "new":
            urls, batches = budget, budget // 6 + 2
        else:
            missing = set(_missing_parts(root, cycle))
            specs = [s for s in read_batches(root, cycle) if s.name in missing]
            urls, batches = sum(s.urls for s in specs), len(specs)
        if stage == "fetch":  # an attempt inside one of the batches still to fetch
            return rng.randint(1, urls)
        return rng.randint(1, 5 * batches)  # WARC rename, metrics and part (write, rename)
    if stage == "split":
        return rng.randint(1, budget // 6 + 4)  # batch files, the index (write, rename)
    return rng.randint(1, EVENT_RANGE[stage])


def _first_stage(proc: subprocess.Popen[bytes], log: Path, seen: int) -> bool:
    """Wait until the worker enters its first stage (False if it ended first)."""
    while proc.poll() is None:
        if any(e["event"] == "stage" for e in fault_events(log)[seen:]):
            return True
        time.sleep(0.02)
    return False


def _kill_at_random_time(
    root: Path, cycle: int, at: datetime, budget: int, log: Path, rng: random.Random
) -> str | None:
    """SIGKILL a worker a random time into its work; the stage it was in (None: it ended)."""
    seen = len(fault_events(log))
    proc = kill_worker(root, cycle, at, budget, fault_log=log)
    started = _first_stage(proc, log, seen)  # past the imports: the cycle's work
    time.sleep(rng.uniform(0.0, 3.0))
    stage = None
    if started and proc.poll() is None:
        os.kill(proc.pid, signal.SIGKILL)
        stages = [e["stage"] for e in fault_events(log)[seen:] if e["event"] == "stage"]
        stage = stages[-1]
    finish(proc)
    return stage


def run_campaign(
    root: Path,
    running: RunningSandbox,
    *,
    budget: int,
    cycles: int,
    targets: list[list[str]],
    seed: int,
) -> dict[str, Counter[str]]:
    """Kill, check, re-run, for ``cycles`` cycles after a bootstrap; the kills by stage.

    ``targets[c - 1]`` lists the stages to aim at in cycle ``c``, in order (``RANDOM``: at
    a random time); a stage the cycle's state has passed is skipped.
    """
    rng = random.Random(seed)
    log = root.parent / f"{root.name}-faults.jsonl"
    urls = import_catalog(root, running)
    bootstrap(root, len(urls))
    committed = snapshot(root)
    kills: Counter[str] = Counter()
    points: Counter[str] = Counter()
    for cycle in range(1, cycles + 1):
        at = START + timedelta(days=cycle)
        running.clock.set(at)
        for stage in targets[cycle - 1]:
            if stage == RANDOM:  # anywhere, at a random time (as the crash test)
                if cycle_state(root, cycle) != "committed":
                    hit_stage = _kill_at_random_time(root, cycle, at, budget, log, rng)
                    if hit_stage:
                        kills[f"random time ({hit_stage})"] += 1
                    check_history(root, committed, cycle)
                continue
            if not _reachable(root, cycle, stage):
                continue
            seen = len(fault_events(log))
            index = _index(rng, root, cycle, stage, budget)
            code, _, err = finish(kill_worker(root, cycle, at, budget, stage, index, fault_log=log))
            hit = [e for e in fault_events(log)[seen:] if e["event"] == "kill"]
            if hit:
                assert code == -signal.SIGKILL, err
                kills[hit[0]["stage"]] += 1
                points[hit[0]["point"]] += 1
            else:  # the stage ran out of events before K: it finished (fallbacks aside)
                assert code == 0, err
            check_history(root, committed, cycle)
        code, _, err = finish(kill_worker(root, cycle, at, budget, fault_log=log))
        assert code == 0, err
        assert check_history(root, committed, cycle), f"cycle {cycle} was not committed"
        assert not work_dir(root, cycle).exists()
        committed = snapshot(root)
    rows = {c: s.rows for c, s in committed.items()}
    assert rows == {0: len(urls), **{c: budget for c in range(1, cycles + 1)}}
    return {"stages": kills, "points": points}


def test_kills_at_each_stage_leave_the_history_whole(tmp_path):
    """Fast: two kills, one before the commit and one inside it (each re-run is a process
    start, seconds of imports); every stage of four cycles in the long run."""
    rng = random.Random(11)
    before = ["plan", "split", "fetch", "parts"]
    commit = ["commit-stage", "commit-link", "commit-write", "commit-manifest", "after-publish"]
    targets = [[rng.choice(before), rng.choice(commit)]]
    with slow_sandbox(4, 8) as running:
        figures = run_campaign(
            tmp_path / "store",
            running,
            budget=18,
            cycles=1,
            targets=targets,
            seed=11,
        )
    # a kill before the commit leaves the cycle uncommitted, so the commit stage is reached;
    # one aimed past a stage's last event kills as the stage ends
    assert dict(figures["stages"]) == dict.fromkeys(targets[0], 1), figures
    print(f"faults (fast): kills survived by stage {dict(figures['stages'])}")


@pytest.mark.long_reliability
def test_many_kills_over_several_cycles(tmp_path):
    cycles = 4
    with slow_sandbox(8, 12) as running:
        figures = run_campaign(
            tmp_path / "store",
            running,
            budget=60,
            cycles=cycles,
            targets=[[*STAGES[:2], RANDOM, RANDOM, *STAGES[2:]]] * cycles,
            seed=2026,
        )
    total = sum(figures["stages"].values())
    print(
        f"faults (long): {total} kills survived; by stage {dict(figures['stages'])}; "
        f"by point {dict(figures['points'])}"
    )
    assert total >= 20
    assert set(STAGES) <= set(figures["stages"])
