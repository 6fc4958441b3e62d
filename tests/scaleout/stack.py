"""A real Prefect server and process workers on loopback, as separate processes.

The multi-machine shape on one machine: ``prefect server start`` on a free loopback port with
its own temporary ``PREFECT_HOME`` (SQLite, analytics off, no UI, no scheduler: the
deployments' cron schedules must not start runs of their own), and workers started with
``prefect worker start``. Every process is started in its own session and killed with its
whole process group (a worker's flow-run subprocesses included) when the stack closes, also
when the test failed.
"""

from __future__ import annotations

import contextlib
import os
import re
import signal
import subprocess
import time
from pathlib import Path
from types import TracebackType

import httpx

from flows.evaluation.scale.postgres import free_port
from flows.evaluation.scale.server import LEASES

REPO = Path(__file__).resolve().parents[2]
PREFECT = str(REPO / ".venv" / "bin" / "prefect")
#: Variables that could send a subprocess's HTTP anywhere but loopback.
_PROXY_VARIABLES = ("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "http_proxy", "https_proxy")


def stack_env(home: Path, api_url: str, extra: dict[str, str] | None = None) -> dict[str, str]:
    """The environment of every process of the stack (no PREFECT_* of the caller leaks in)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith("PREFECT_") and k not in _PROXY_VARIABLES
    }
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_API_URL=api_url,
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        DO_NOT_TRACK="1",
        PREFECT_SERVER_UI_ENABLED="false",
        PREFECT_SERVER_SERVICES_SCHEDULER_ENABLED="false",
        PREFECT_SERVER_CONCURRENCY_LEASE_STORAGE=LEASES,
        NO_PROXY="127.0.0.1,localhost",
        RECRAWL_HOME=str(REPO),
    )
    env.update(extra or {})
    return env


class PrefectStack:
    """Server and workers of one test; ``close()`` (or the ``with`` block) ends them all."""

    def __init__(self, workdir: Path, extra_env: dict[str, str] | None = None) -> None:
        self.workdir = workdir
        self.port = free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.env = stack_env(workdir / "prefect-home", self.api_url, extra_env)
        self.processes: dict[str, subprocess.Popen[bytes]] = {}

    def __enter__(self) -> PrefectStack:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def log_path(self, name: str) -> Path:
        return self.workdir / f"{name}.log"

    def log_text(self, name: str) -> str:
        path = self.log_path(name)
        return path.read_text(errors="replace") if path.exists() else ""

    def start(
        self,
        name: str,
        args: list[str],
        cwd: Path | None = None,
        env: dict[str, str] | None = None,
    ) -> None:
        """Start ``prefect <args>`` in the background, output to ``<workdir>/<name>.log``."""
        with self.log_path(name).open("wb") as out:
            self.processes[name] = subprocess.Popen(
                [PREFECT, *args],
                cwd=cwd or self.workdir,
                env=env or self.env,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )

    def run(self, name: str, args: list[str], cwd: Path | None = None, timeout: float = 120) -> str:
        """Run ``prefect <args>`` to the end; its output, or an error showing it."""
        done = subprocess.run(
            [PREFECT, "--no-prompt", *args],
            cwd=cwd or self.workdir,
            env=self.env,
            capture_output=True,
            timeout=timeout,
            check=False,
        )
        output = (done.stdout + done.stderr).decode(errors="replace")
        self.log_path(name).write_text(output)
        if done.returncode != 0:
            raise RuntimeError(f"prefect {' '.join(args)} failed ({done.returncode}):\n{output}")
        return output

    def start_server(self, timeout: float = 120, database_url: str | None = None) -> None:
        """``prefect server start`` on the free port; returns once /api/health answers.

        ``database_url``: the server's database (``postgresql+asyncpg://...``; default its
        SQLite file under ``PREFECT_HOME``). Only the server gets it.
        """
        env = dict(self.env)
        if database_url is not None:
            env["PREFECT_API_DATABASE_CONNECTION_URL"] = database_url
        self.start(
            "server", ["server", "start", "--host", "127.0.0.1", "--port", str(self.port)], env=env
        )
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.processes["server"].poll() is not None:
                raise RuntimeError(f"prefect server exited:\n{self.log_text('server')[-3000:]}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return
            time.sleep(0.3)
        raise TimeoutError(f"no /api/health within {timeout} s:\n{self.log_text('server')[-3000:]}")

    def start_worker(self, name: str, pool: str, limit: int = 1, own_home: bool = False) -> None:
        """``prefect worker start``; ``limit`` flow runs at a time (1: a run per worker).

        ``own_home``: the worker as another machine would run it, with its own
        ``PREFECT_HOME`` and working directory (``<workdir>/<name>/``); what it shares with
        the others is only the API URL (and the checkout and data roots: shared storage).
        """
        args = ["worker", "start", "--pool", pool, "--name", name, "--limit", str(limit)]
        if not own_home:
            self.start(name, args)
            return
        machine = self.workdir / name
        (machine / "prefect-home").mkdir(parents=True, exist_ok=True)
        env = {**self.env, "PREFECT_HOME": str(machine / "prefect-home")}
        self.start(name, args, cwd=machine, env=env)

    def kill(self, name: str) -> list[int]:
        """SIGKILL one process and everything below it (a machine lost); the ids killed."""
        proc = self.processes[name]
        victims = [proc.pid, *_descendants({proc.pid})]
        for pid in victims:
            _signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        proc.wait(timeout=10)
        return victims

    def worker_of_runs(self, workers: tuple[str, ...]) -> dict[str, list[str]]:
        """Flow run id -> the workers that ran it (from their logs; lost races left out).

        Two workers may both try to submit a run; the server lets one through and the
        other logs "Aborted submission of flow run '<id>'".
        """
        found: dict[str, list[str]] = {}
        for worker in workers:
            text = self.log_text(worker)
            submitted = re.findall(
                rf"Worker '{re.escape(worker)}' submitting flow run '([^']+)'", text
            )
            aborted = set(re.findall(r"Aborted submission of flow run '([^']+)'", text))
            for run_id in dict.fromkeys(submitted):
                if run_id not in aborted:
                    found.setdefault(run_id, []).append(worker)
        return found

    def close(self) -> None:
        """SIGTERM each process group (workers first), SIGKILL what is still alive after 5 s.

        A process worker may start its flow runs in sessions of their own, so their ids are
        collected first (children of the stack's processes) and killed by id as well.
        """
        leaders = list(self.processes.values())
        descendants = _descendants({proc.pid for proc in leaders})
        for proc in reversed(leaders):
            _signal_group(proc.pid, signal.SIGTERM)
        deadline = time.monotonic() + 5
        for proc in leaders:
            try:
                proc.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc.pid, signal.SIGKILL)
                proc.wait(timeout=10)
        for pid in descendants:  # flow runs and anything else that outlived its leader
            _signal_group(pid, signal.SIGKILL)
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)


def _descendants(roots: set[int]) -> list[int]:
    """Ids of every living process below ``roots`` (from /proc), parents before children."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        with contextlib.suppress(OSError, IndexError, ValueError):
            stat = (entry / "stat").read_text()
            parents[int(entry.name)] = int(stat[stat.rindex(")") + 2 :].split()[1])
    found: list[int] = []
    frontier = set(roots)
    while frontier:
        children = {pid for pid, parent in parents.items() if parent in frontier}
        children -= set(found) | roots
        found.extend(sorted(children))
        frontier = children
    return found
