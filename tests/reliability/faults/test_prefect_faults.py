"""The Prefect side of faults: a flow run SIGKILLed mid-batch, its server killed or stopped.

A real ``prefect server start`` (``prefect_server.PrefectServer``) and the ``recrawl`` flow
in its own process (``flow_worker``), tagged ``host:<h>`` with one slot per host:

* fast: run A is SIGKILLed mid-batch (its hosts' slots stay taken: the server holds their
  leases); run B starts and the server is SIGKILLed under it, so B fails (no commit) and the
  restarted server has lost every lease: A's slots are leaked for good. Run C repairs them
  (``tasks.cycle.host_limits``), sets A and B, whose processes are gone, to Crashed
  (``tasks.cycle.run_claims``), and commits the cycle: every planned page exactly once, the
  earlier cycle untouched, no run left Running, no slot taken.
* long: a run killed while the server stays up (its slots come back when the leases expire,
  about a minute; nothing to repair), the server paused (SIGSTOP) mid-cycle for longer than
  the client's request timeout (the client retries; the run completes), and the server down
  before a run starts (it fails at once; nothing written).
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path
from typing import Any

import pytest

from sandbox import HostBehaviour, RunningSandbox, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.work import read_batches, work_dir
from tests.flows.conftest import FAST_FETCH, import_catalog
from tests.reliability.faults.harness import (
    REPO,
    START,
    bootstrap,
    check_history,
    sandbox_fetch,
    snapshot,
)
from tests.reliability.faults.prefect_server import PrefectServer

pytestmark = pytest.mark.reliability

BUDGET = 16
#: Slow enough pacing that a batch (4 pages of one host) takes about a second; pages wait
#: for an answer longer than a test holds them (``_held_flow``), however loaded the machine.
FETCH = sandbox_fetch(
    {**FAST_FETCH, "min_delay_s": 0.3, "max_delay_s": 0.3, "request_timeout_s": 120.0}
)
#: The client gives up on an unreachable server after one retry (2 s) instead of five (62 s).
CLIENT = {"PREFECT_CLIENT_MAX_RETRIES": "1"}


@dataclass(frozen=True)
class FlowProcess:
    """A flow-run process; its stderr goes to a file (it can be long)."""

    proc: subprocess.Popen[bytes]
    err: Path

    def stderr(self) -> str:
        return self.err.read_text(errors="replace")

    def reported(self) -> dict[str, Any]:
        """The flow's JSON line (its summary or error), as soon as it prints it."""
        assert self.proc.stdout is not None
        for line in self.proc.stdout:
            if line.startswith(b"{"):
                return dict(json.loads(line))
        return {}

    def result(self, timeout: float = 240) -> tuple[int, dict[str, Any], str]:
        """Exit status, the JSON line, stderr, once the process has ended."""
        out, _ = self.proc.communicate(timeout=timeout)
        lines = [line for line in out.decode().splitlines() if line.startswith("{")]
        return self.proc.returncode, json.loads(lines[-1]) if lines else {}, self.stderr()


def _flow(root: Path, cycle: int, at: datetime, env: dict[str, str]) -> FlowProcess:
    cmd = [
        sys.executable,
        "-m",
        "tests.reliability.faults.flow_worker",
        str(root),
        str(cycle),
        at.isoformat(),
        str(BUDGET),
        "--fetch",
        json.dumps(FETCH),
    ]
    err = root.parent / f"flow-{cycle}-{time.monotonic_ns()}.err"
    with open(err, "wb") as handle:
        proc = subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=handle)
    return FlowProcess(proc, err)


def _wait(condition: Callable[[], Any], timeout: float, what: str) -> Any:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise TimeoutError(f"waited {timeout} s for {what}")


def _parts(root: Path, cycle: int) -> int:
    return len(list((work_dir(root, cycle) / "parts").glob("*.parquet")))


def _held_flow(
    root: Path, cycle: int, at: datetime, env: dict[str, str], running: RunningSandbox
) -> FlowProcess:
    """A flow run whose page requests the sandbox holds unanswered (robots.txt answered)
    until the test releases them: the run cannot finish its batches before the fault, however
    fast or slow the machine (a run that fetched its 16 pages before the test saw a slot
    once ended before the fault on CI)."""
    running.hold()
    return _flow(root, cycle, at, env)


def _wait_mid_batch(flow: FlowProcess, server: PrefectServer, running: RunningSandbox) -> None:
    """Until the (held) flow's fetch tasks hold host slots and wait for pages."""
    proc = flow.proc
    _wait(lambda: server.active_slots() or proc.poll() is not None, 180, "a fetch task's slot")
    _wait(lambda: running.n_held > 0 or proc.poll() is not None, 60, "a page request")
    assert proc.poll() is None, f"the flow ended before the fault: {flow.stderr()[-2000:]}"


def _kill_mid_batch(
    flow: FlowProcess, server: PrefectServer, running: RunningSandbox, root: Path
) -> None:
    """SIGKILL the flow process while its fetch tasks hold host slots and wait for pages."""
    _wait_mid_batch(flow, server, running)
    os.kill(flow.proc.pid, signal.SIGKILL)
    flow.proc.communicate()
    running.release()
    cycle = max(int(p.name.split("=")[1]) for p in (root / "_work").glob("cycle=*"))
    batches = len(read_batches(root, cycle))
    assert _parts(root, cycle) < batches, "killed after every batch was written"


@pytest.fixture
def web() -> Iterator[RunningSandbox]:
    clock = SimClock(START)
    sandbox = SandboxWeb.generate(4, 8, seed=9, default=HostBehaviour(latency_s=0.01), clock=clock)
    with serve_sandbox(sandbox) as running:
        yield running


@pytest.fixture
def server(tmp_path) -> Iterator[PrefectServer]:
    prefect = PrefectServer(tmp_path / "prefect")
    prefect.launch()  # starts up while the test bootstraps its history
    try:
        yield prefect
    finally:
        prefect.kill()


def _bootstrapped(root: Path, web: RunningSandbox, server: PrefectServer) -> datetime:
    """Cycle 0 without Prefect, the server ready, the clock at cycle 1's day."""
    bootstrap(root, len(import_catalog(root, web)))
    server.wait_ready()
    at = START + timedelta(days=1)
    web.clock.set(at)
    return at


def test_the_server_killed_mid_cycle_then_a_rerun_repairs_and_commits(tmp_path, web, server):
    """Fast: the server dies under a run that holds host slots; the run fails without
    committing; after a restart the next run repairs the leaked slots, sets the dead run
    Crashed and commits the whole cycle."""
    root = tmp_path / "store"
    at = _bootstrapped(root, web, server)
    before = snapshot(root)
    env = server.client_env(**CLIENT)

    run_a = _held_flow(root, 1, at, env, web)
    _wait_mid_batch(run_a, server, web)
    server.kill()
    killed_at = time.monotonic()
    web.release()  # A fetches on and fails on the dead server
    out = run_a.reported()
    failed_in = time.monotonic() - killed_at
    assert "error" in out, run_a.stderr()[-3000:]
    assert not check_history(root, before, 1)  # nothing committed, nothing half-written

    # A's process ends first: were it still running when the server comes back, its tasks
    # could reach the new server and release their slots, and there would be nothing to
    # repair (a race CI lost once). Then the operator restarts the server; the leases were
    # in the dead server's memory: A's slots are leaked
    code, _, err = run_a.result()
    assert code == 1, err[-3000:]
    server.start()
    held = server.active_slots()
    assert held and server.runs_in("RUNNING"), "the dead server left a slot and a run"
    code, summary, err = _flow(root, 1, at, env).result()
    assert code == 0 and summary["status"] == "committed", err[-3000:]
    assert set(held) <= set(summary["repaired_limits"])
    assert check_history(root, before, 1)  # every planned page once; cycle 0 untouched
    assert server.active_slots() == {}
    states = {r["id"]: r["state_type"] for r in server.flow_runs()}
    assert sorted(states.values()) == ["COMPLETED", "CRASHED"]
    assert summary["crashed_runs"] == [i for i, s in states.items() if s == "CRASHED"]
    print(
        f"faults (prefect, server killed mid-batch): the run failed {failed_in:.1f} s later "
        f"({out['error'][:70]}), nothing committed; after a restart {len(held)} leaked "
        f"slot(s) repaired, the dead run set Crashed, the cycle committed"
    )


def _day(web: RunningSandbox, cycle: int) -> datetime:
    at = START + timedelta(days=cycle)
    web.clock.set(at)
    return at


def _states(server: PrefectServer) -> list[str]:
    return sorted(r["state_type"] for r in server.flow_runs())


@pytest.mark.long_reliability
def test_kills_restarts_and_a_paused_server_over_four_cycles(tmp_path, web, server):
    root = tmp_path / "store"
    _bootstrapped(root, web, server)
    env = server.client_env(**CLIENT)
    figures = []

    # 1. SIGKILL mid-batch, the server stays up: the leases expire, nothing is leaked
    before, at = snapshot(root), _day(web, 1)
    _kill_mid_batch(_held_flow(root, 1, at, env, web), server, web, root)
    held = server.active_slots()
    started = time.monotonic()
    code, summary, err = _flow(root, 1, at, env).result()
    assert code == 0 and summary["repaired_limits"] == [], err[-3000:]
    assert check_history(root, before, 1) and server.active_slots() == {}
    assert len(summary["crashed_runs"]) == 1 and "RUNNING" not in _states(server)
    figures.append(
        f"killed mid-batch, server up: {len(held)} slot(s) freed by lease expiry, the re-run "
        f"took {time.monotonic() - started:.0f} s (waiting for them), 1 run set Crashed"
    )

    # 2. SIGKILL mid-batch, then the server restarts: the leases are lost, the slots leak
    before, at = snapshot(root), _day(web, 2)
    _kill_mid_batch(_held_flow(root, 2, at, env, web), server, web, root)
    held = server.active_slots()
    server.stop()
    server.start()
    assert server.active_slots() == held
    code, summary, err = _flow(root, 2, at, env).result()
    assert code == 0 and set(held) <= set(summary["repaired_limits"]), err[-3000:]
    assert check_history(root, before, 2) and server.active_slots() == {}
    assert len(summary["crashed_runs"]) == 1 and "RUNNING" not in _states(server)
    figures.append(
        f"killed mid-batch, server restarted: {len(summary['repaired_limits'])} leaked "
        "slot(s) repaired, 1 run set Crashed"
    )

    # 3. the server paused (SIGSTOP) mid-batch for longer than the request timeout
    before, at = snapshot(root), _day(web, 3)
    # (requests time out after 3 s and are retried; DEBUG logs show the retries)
    slow = server.client_env(PREFECT_API_REQUEST_TIMEOUT="3", PREFECT_LOGGING_LEVEL="DEBUG")
    run = _held_flow(root, 3, at, slow, web)
    _wait_mid_batch(run, server, web)
    server.signal(signal.SIGSTOP)
    web.release()  # the run fetches on while its server is paused
    time.sleep(12)
    server.signal(signal.SIGCONT)
    code, summary, err = run.result()
    assert code == 0 and summary["status"] == "committed", err[-3000:]
    assert check_history(root, before, 3) and server.active_slots() == {}
    retried = err.count("Encountered retryable exception during request")
    figures.append(
        f"server paused 12 s mid-batch: the run completed after {retried} timed-out "
        "request(s) were retried"
    )

    # 4. the server down before the run starts: it fails at once, nothing is written
    before, at = snapshot(root), _day(web, 4)
    server.kill()
    started = time.monotonic()
    code, _, err = _flow(root, 4, at, env).result()
    assert code != 0 and not check_history(root, before, 4), err[-3000:]
    assert not work_dir(root, 4).exists()
    failed_in = time.monotonic() - started
    server.start()
    code, summary, err = _flow(root, 4, at, env).result()
    assert code == 0 and check_history(root, before, 4), err[-3000:]
    assert "RUNNING" not in _states(server) and server.active_slots() == {}
    figures.append(f"server down at the start: the run failed in {failed_in:.0f} s, then ran")
    print("faults (prefect, long): " + "; ".join(figures))
