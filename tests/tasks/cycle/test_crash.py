"""Kill a real recrawl-cycle process at random points and at the commit; re-run; check.

The history must hold, after the final re-run, the earlier cycle exactly as it was and the
killed cycle exactly once: every planned page one row, no duplicates, nothing lost.
"""

from __future__ import annotations

import os
import random
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.work import cycle_state
from tasks.store.history import HistoryStore
from tests.flows.conftest import import_catalog

REPO = Path(__file__).resolve().parents[3]
START = datetime(2026, 1, 1, tzinfo=UTC)


def _worker(root, cycle, at, budget, *extra):
    cmd = [
        sys.executable,
        "-m",
        "tests.tasks.cycle.cycle_worker",
        str(root),
        str(cycle),
        at.isoformat(),
        str(budget),
        *extra,
    ]
    return subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def _finish(proc, timeout=120):
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


@pytest.fixture
def slow_sandbox():
    """8 hosts x 12 pages answering after 10 ms: a cycle takes a few seconds to fetch."""
    clock = SimClock(START)
    web = SandboxWeb.generate(8, 12, seed=9, default=HostBehaviour(latency_s=0.01), clock=clock)
    with serve_sandbox(web) as running:
        yield running


def test_killed_cycles_leave_the_history_whole_and_reruns_never_duplicate(slow_sandbox, tmp_path):
    urls = import_catalog(tmp_path, slow_sandbox)
    code, _, err = _finish(_worker(tmp_path, 0, START, len(urls), "--bootstrap"))
    assert code == 0, err
    before = HistoryStore(tmp_path).read([0]).to_pandas()
    assert len(before) == len(urls)

    at = START + timedelta(days=1)
    slow_sandbox.clock.set(at)
    rng = random.Random(4)
    kills = 0
    for delay in [rng.uniform(1.2, 4.5) for _ in range(3)]:
        proc = _worker(tmp_path, 1, at, 60)
        time.sleep(delay)
        if proc.poll() is None:
            os.kill(proc.pid, signal.SIGKILL)
            kills += 1
        proc.communicate()
        assert HistoryStore(tmp_path).read([0]).to_pandas().equals(before)
        assert cycle_state(tmp_path, 1) in ("new", "resume", "committed")
    # the two write points random kills rarely hit
    for point in ("publish", "after-publish"):
        code, _, _ = _finish(_worker(tmp_path, 1, at, 60, "--die-at", point))
        if cycle_state(tmp_path, 1) != "committed":
            assert code == -signal.SIGKILL
        assert HistoryStore(tmp_path).read([0]).to_pandas().equals(before)
    code, _, err = _finish(_worker(tmp_path, 1, at, 60))
    assert code == 0, err

    assert kills >= 2  # most random kills landed before the cycle finished
    store = HistoryStore(tmp_path)
    assert store.cycles() == [0, 1]
    assert store.read([0]).to_pandas().equals(before)
    cycle = store.read([1]).to_pandas()
    plan = pd.read_parquet(tmp_path / "plans" / "cycle=1.parquet")
    assert cycle["url_id"].is_unique
    assert sorted(cycle["url_id"]) == sorted(plan["url_id"]) and len(cycle) == 60
    assert cycle["outcome"].isin(["ok", "not_modified"]).all()
    assert not (tmp_path / "_work" / "cycle=1").exists()
    # WARC files: the killed runs' ones are gone, every file left is one the history names
    left = {f"warc/cycle=1/{p.name}" for p in (tmp_path / "warc" / "cycle=1").iterdir()}
    assert left == set(cycle["warc_file"])
