"""A real ``prefect server start`` on loopback, in its own process group, to kill or stop.

Its home (database, settings) is a temporary folder; analytics and the UI are off. Tests
talk to it over its REST API with httpx (no Prefect settings change in the test process),
and start flow runs in subprocesses whose environment names it (``client_env``).
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import httpx

PREFECT = str(Path(sys.executable).with_name("prefect"))
#: Server loops these tests never need (nothing is scheduled, paused or cancelled).
IDLE_SERVICES = (
    "SCHEDULER",
    "LATE_RUNS",
    "FOREMAN",
    "PAUSE_EXPIRATIONS",
    "CANCELLATION_CLEANUP",
    "EVENT_LOGGER",
)


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class PrefectServer:
    """Start, kill (SIGKILL), pause (SIGSTOP), resume and restart one Prefect server."""

    def __init__(self, home: Path, port: int | None = None) -> None:
        self.home = home
        self.port = port or free_port()
        self.api_url = f"http://127.0.0.1:{self.port}/api"
        self.proc: subprocess.Popen[bytes] | None = None
        self.log = home / "server.log"
        home.mkdir(parents=True, exist_ok=True)

    def env(self) -> dict[str, str]:
        base = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
        return {
            **base,
            "PREFECT_HOME": str(self.home),
            "PREFECT_SERVER_ANALYTICS_ENABLED": "false",
            "PREFECT_UI_ENABLED": "false",
            "DO_NOT_TRACK": "1",
            **{f"PREFECT_SERVER_SERVICES_{name}_ENABLED": "false" for name in IDLE_SERVICES},
        }

    def client_env(self, **extra: str) -> dict[str, str]:
        """The environment of a flow-run process that uses this server."""
        return {
            **self.env(),
            "PREFECT_HOME": str(self.home / "client"),
            "PREFECT_API_URL": self.api_url,
            **extra,
        }

    def launch(self) -> None:
        """Start the server process (without waiting for it: see ``wait_ready``)."""
        with open(self.log, "ab") as log:
            self.proc = subprocess.Popen(
                [PREFECT, "server", "start", "--host", "127.0.0.1", "--port", str(self.port)],
                env=self.env(),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,  # its own process group: killed as one
            )

    def wait_ready(self, timeout: float = 180) -> float:
        """Seconds until ``/api/health`` answers."""
        assert self.proc is not None
        started = time.monotonic()
        while time.monotonic() - started < timeout:
            if self.proc.poll() is not None:
                raise RuntimeError(f"prefect server exited: {self.log.read_text()[-2000:]}")
            try:
                if httpx.get(f"{self.api_url}/health", timeout=2).status_code == 200:
                    return time.monotonic() - started
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        raise TimeoutError(f"prefect server not ready after {timeout} s")

    def start(self) -> float:
        self.launch()
        return self.wait_ready()

    def signal(self, sig: signal.Signals) -> None:
        assert self.proc is not None
        os.killpg(self.proc.pid, sig)

    def kill(self) -> None:
        """SIGKILL the whole server (it cannot tidy up: leases in memory are lost)."""
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGKILL)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.signal(signal.SIGCONT)
            self.signal(signal.SIGTERM)
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.kill()

    # ------------------------------------------------------------------ REST reads

    def _post(self, path: str, body: dict[str, Any]) -> Any:
        response = httpx.post(f"{self.api_url}{path}", json=body, timeout=30)
        response.raise_for_status()
        return response.json()

    def active_slots(self, prefix: str = "tag:host:") -> dict[str, int]:
        """Global concurrency limits (by name) with taken slots."""
        limits = self._post("/v2/concurrency_limits/filter", {"limit": 200})
        return {
            lim["name"]: lim["active_slots"]
            for lim in limits
            if lim["name"].startswith(prefix) and lim["active_slots"]
        }

    def flow_runs(self) -> list[dict[str, Any]]:
        return list(self._post("/flow_runs/filter", {"limit": 200}))

    def runs_in(self, *state_types: str) -> list[dict[str, Any]]:
        return [r for r in self.flow_runs() if r["state_type"] in state_types]
