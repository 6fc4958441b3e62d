"""A machine that never ran Prefect: the CLI's first start of Prefect's local server.

Each test runs ``recrawl`` in a subprocess with a new, empty ``PREFECT_HOME`` (no database
yet, what a new user has) and no ``PREFECT_API_URL``, so Prefect's ephemeral server must
create and migrate its SQLite database before the first flow runs. That took longer than
Prefect's default start timeout (20 s) on a 2-core machine; ``flows.local_prefect`` raises
it. Under load the first start can take over a minute, so the subprocess's own timeout
is generous (it only stops a hung run; it is not a speed check).
"""

from __future__ import annotations

import os
import sqlite3
import subprocess
import sys
from contextlib import closing
from pathlib import Path

from flows.local_prefect import STARTUP_TIMEOUT_SETTING

#: Stops a hung run only: a first start took 53 s at load 5 on 2 cores, the tiny demo
#: after it about as long again.
HUNG_AFTER_S = 1800
SMALL_DEMO = ["demo", "--hosts", "2", "--pages-per-host", "5", "--cycles", "2"]


def fresh_prefect_env(home: Path, **extra: str) -> dict[str, str]:
    """This environment with a new empty PREFECT_HOME, no API URL, Prefect's own timeout."""
    home.mkdir()
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(PREFECT_HOME=str(home), PREFECT_SERVER_ANALYTICS_ENABLED="false", **extra)
    env["DO_NOT_TRACK"] = "1"
    return env


def recrawl(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        env={**env, "PYTHONPATH": str(Path(__file__).resolve().parents[2])},
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=HUNG_AFTER_S,
    )


def test_the_demo_runs_on_a_prefect_home_that_never_ran_prefect(tmp_path):
    home = tmp_path / "prefect-home"
    env = fresh_prefect_env(home)
    assert not any(home.iterdir())
    done = recrawl([*SMALL_DEMO, "--root", str(tmp_path / "demo")], env, tmp_path)
    assert done.returncode == 0, done.stderr[-3000:]
    assert (home / "prefect.db").exists()  # the server created its database here
    assert "first start on PREFECT_HOME" in done.stderr
    assert "planner vs uniform" in done.stdout
    # the closing table says where the time went, Prefect's start first
    table = done.stdout.split("where the time went")[1].splitlines()
    phases = [line.split("  ")[0].strip() for line in table[2:]]
    assert phases[:3] == ["Prefect start", "sandbox start", "discovery"]
    assert phases.index("comparison (truth, plot)") < phases.index("total")
    assert phases[-1].startswith("Prefect's local server process:")  # its CPU, after it
    # the demo's server keeps its flow and task runs but no event store (flows.local_prefect)
    with closing(sqlite3.connect(home / "prefect.db")) as db:
        [(runs,)] = db.execute("select count(*) from task_run").fetchall()
        [(events,)] = db.execute("select count(*) from events").fetchall()
    assert runs > 0 and events == 0


def test_a_server_that_does_not_start_in_time_names_the_setting_to_raise(tmp_path):
    env = fresh_prefect_env(tmp_path / "prefect-home", **{STARTUP_TIMEOUT_SETTING: "1"})
    done = recrawl([*SMALL_DEMO, "--root", str(tmp_path / "demo")], env, tmp_path)
    assert done.returncode == 2, done.stderr[-3000:]
    assert "Traceback" not in done.stderr
    [message] = [line for line in done.stderr.splitlines() if line.startswith("recrawl demo:")]
    assert f"raise {STARTUP_TIMEOUT_SETTING} (now 1)" in message
    assert not (tmp_path / "demo").exists()  # stopped before any work
