"""``prefect server start`` on a free loopback port, on SQLite or a given database URL.

The server gets its own ``PREFECT_HOME`` (SQLite file, settings), analytics and the UI off,
no scheduler (deployments' cron schedules start nothing of their own), and the filesystem
lease storage, so concurrency leases survive a restart. It runs in a session of its own;
``close()`` ends its whole process group (SIGTERM, then SIGKILL after 10 s), also when the
caller failed. ``cpu_seconds()`` is the user + system CPU of the server and its children so
far (from ``/proc``), what a benchmark charges to orchestration.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from types import TracebackType

import httpx

from flows.evaluation.scale.postgres import free_port

LEASES = "prefect.server.concurrency.lease_storage.filesystem"
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


def server_env(home: Path, database_url: str | None = None) -> dict[str, str]:
    """The server's environment: no PREFECT_* or proxy variable of the caller leaks in."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PREFECT_") and k not in _PROXY_VARIABLES
    }
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_UI_ENABLED="false",
        PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=LEASES,
        NO_PROXY="127.0.0.1,localhost",
    )
    if database_url is not None:
        env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
    return env


class PrefectServer:
    """One server process; ``api_url`` once started."""

    def __init__(
        self, home: Path, database_url: str | None = None, extra_env: dict[str, str] | None = None
    ) -> None:
        self.home = home
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.env = {**server_env(home, database_url), **(extra_env or {})}
        self.log = home / "server.log"
        self.process: subprocess.Popen[bytes] | None = None

    def __enter__(self) -> PrefectServer:
        self.start()
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def start(self, timeout: float = 300) -> float:
        """Start and wait for ``/api/health``; the seconds it took."""
        self.home.mkdir(parents=True, exist_ok=True)
        prefect = str(Path(sys.executable).with_name("prefect"))
        started = time.monotonic()
        with self.log.open("wb") as out:
            self.process = subprocess.Popen(
                [prefect, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        deadline = started + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"prefect server exited:\n{self.log_tail()}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - started
            time.sleep(0.3)
        raise TimeoutError(f"no /api/health within {timeout} s:\n{self.log_tail()}")

    def close(self) -> None:
        if self.process is None:
            return
        pid, self.process = self.process.pid, None
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline and _alive(pid):
            time.sleep(0.2)
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
        with contextlib.suppress(ChildProcessError):
            os.waitpid(pid, 0)

    def cpu_seconds(self) -> float:
        """User + system CPU of the server's process group so far (living members)."""
        if self.process is None:
            return 0.0
        return group_cpu_seconds(self.process.pid)

    def log_tail(self) -> str:
        return self.log.read_text(errors="replace")[-3000:] if self.log.exists() else ""


def group_cpu_seconds(pgid: int) -> float:
    """User + system CPU (self and reaped children) of every process in group ``pgid``."""
    tick = os.sysconf("SC_CLK_TCK")
    total = 0
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, ValueError, IndexError):
            stat = (entry / "stat").read_text()
            fields = stat[stat.rindex(")") + 2 :].split()
            if int(fields[2]) == pgid:  # field 5 of stat: the process group
                total += sum(int(f) for f in fields[11:15])  # utime stime cutime cstime
    return total / tick


def _alive(pid: int) -> bool:
    try:
        done, _ = os.waitpid(pid, os.WNOHANG)
    except ChildProcessError:
        return False
    return done == 0
