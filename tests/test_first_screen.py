"""The README's first screen, as a new user runs it: a CSV of URLs to a committed cycle.

Each command is a separate process, as typed in a shell, on a fresh ``PREFECT_HOME`` (a
machine that never ran Prefect); the URLs are the sandbox web's, on loopback.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pandas as pd

from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox


def recrawl(*args: str, env: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args],
        capture_output=True,
        text=True,
        env=env,
        timeout=900,  # a first Prefect start on a loaded 2-core machine takes a minute or more
    )


def test_from_a_csv_of_urls_to_a_committed_cycle_and_its_report(tmp_path):
    env = {
        **os.environ,
        "PREFECT_HOME": str(tmp_path / "prefect-home"),
        "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
        "RECRAWL_MIN_DELAY_S": "0.05",  # our own sandbox: short pacing keeps the test fast
    }
    env.pop("PREFECT_API_URL", None)
    web = SandboxWeb.generate(3, 4, seed=2, default=HostBehaviour(), clock=SimClock())
    with serve_sandbox(web) as running:
        csv = tmp_path / "my_urls.csv"
        pd.DataFrame({"url": running.page_urls()}).to_csv(csv, index=False)
        root = str(tmp_path / "mydata")
        loopback = ["--allow-network", "127.0.0.0/8"]

        done = recrawl("catalog", "import", str(csv), "--root", root, env=env)
        assert done.returncode == 0, done.stderr
        first = recrawl("run", "--root", root, "--budget", "8", *loopback, env=env)
        assert first.returncode == 0, first.stderr
        assert "cycle 0 committed: 8 rows, 8 observations" in first.stdout
        report = first.stdout.split("report: ")[1].strip()
        assert report.endswith("cycle=0/summary.md") and os.path.exists(report)
        text = Path(report).read_text()
        assert "| changes found | 0 on 0 revisits (8 first visits" in text

        second = recrawl("run", "--root", root, "--budget", "8", *loopback, env=env)
        assert second.returncode == 0, second.stderr
        assert "cycle 1 committed: 8 rows" in second.stdout
        history = recrawl("history", "cycles", "--root", root, env=env)
        assert history.stdout.count("rows, committed") == 2
    # the cold start: the 4 pages cycle 0 left for later are fetched in cycle 1
    rows = pd.read_parquet(tmp_path / "mydata" / "history")
    assert rows["url_id"].nunique() == 12
