"""A real ``prefect server start`` (with its UI) and headless Chromium, for the UI tests.

The flow tests use Prefect's test harness, an in-process server without the UI; here a
user's server is started as a user starts it, on a free loopback port with a temporary
``PREFECT_HOME``, once for the session. Chromium is Debian's (``/usr/bin/chromium``), driven
by Playwright for Python, which must not download a browser of its own.
"""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

import pytest
from playwright.sync_api import sync_playwright

from tests.flows.conftest import sandbox_web  # noqa: F401 - the fixture, shared

CHROMIUM = os.environ.get("RECRAWLER_CHROMIUM", "/usr/bin/chromium")
#: A fresh PREFECT_HOME creates and migrates its database first: 10-40 s on an idle 2-core
#: machine, several times that on a loaded one.
SERVER_START_TIMEOUT_S = 240.0
CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",  # we run as root
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
LOOPBACK = {"127.0.0.1", "localhost", "::1", "[::1]"}


@dataclass(frozen=True)
class PrefectUIServer:
    url: str  # e.g. http://127.0.0.1:4321 (the UI); the API is url + "/api"
    log: Path

    @property
    def api_url(self) -> str:
        return self.url + "/api"


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _healthy(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(api_url + "/health", timeout=2) as response:
            return bool(response.status == 200)
    except OSError:
        return False


def _tail(log: Path, lines: int = 30) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


@pytest.fixture(scope="session")
def prefect_ui_server(tmp_path_factory) -> Iterator[PrefectUIServer]:
    """``prefect server start`` with the UI, on a fresh PREFECT_HOME; stopped at the end."""
    home = tmp_path_factory.mktemp("prefect-ui-home")
    port = _free_port()
    url = f"http://127.0.0.1:{port}"
    # None of the caller's Prefect settings (an API URL, a database) may leak in.
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_UI_ENABLED="true",
        PREFECT_UI_API_URL=url + "/api",
        DO_NOT_TRACK="1",
    )
    log = home / "server.log"
    command = [sys.executable, "-m", "prefect", "server", "start"]
    command += ["--host", "127.0.0.1", "--port", str(port), "--ui"]
    command += ["--no-scheduler", "--no-late-runs"]  # nothing here is scheduled
    with log.open("wb") as out:
        proc = subprocess.Popen(command, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        started = time.monotonic()
        deadline = started + SERVER_START_TIMEOUT_S
        while not _healthy(url + "/api"):
            if proc.poll() is not None:
                pytest.fail(f"prefect server exited with {proc.returncode}:\n{_tail(log)}")
            if time.monotonic() > deadline:
                pytest.fail(
                    f"prefect server not healthy after {SERVER_START_TIMEOUT_S} s:\n{_tail(log)}"
                )
            time.sleep(0.5)
        print(f"prefect server start: healthy after {time.monotonic() - started:.1f} s ({url})")
        yield PrefectUIServer(url=url, log=log)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


@pytest.fixture(scope="session")
def browser(tmp_path_factory):
    """Debian's headless Chromium under Playwright; skipped only when it is not installed."""
    if not (os.path.exists(CHROMIUM) or shutil.which(CHROMIUM)):
        pytest.skip(f"{CHROMIUM} not installed (apt-get install chromium); the UI test needs it")
    profile = tmp_path_factory.mktemp("chromium-profile")
    with sync_playwright() as pw:
        # A persistent context, so that Chromium gets our --user-data-dir.
        context = pw.chromium.launch_persistent_context(
            str(profile),
            executable_path=CHROMIUM,
            headless=True,
            args=CHROMIUM_FLAGS,
            viewport={"width": 1280, "height": 2400},
        )
        blocked: list[str] = []

        def loopback_only(route) -> None:  # the UI may link out; nothing leaves the machine
            if urlsplit(route.request.url).hostname in LOOPBACK:
                route.continue_()
            else:
                blocked.append(route.request.url)
                route.abort()

        context.route("**/*", loopback_only)
        try:
            yield context
        finally:
            context.close()
            if blocked:
                print(f"requests off the loopback, not sent: {sorted(set(blocked))}")


@pytest.fixture(scope="session")
def screenshot_dir() -> Path:
    """Where screenshots go: $RECRAWLER_UI_SCREENSHOTS, else a new folder that outlives
    pytest's rotation of its temporary folders (the test log names each file)."""
    named = os.environ.get("RECRAWLER_UI_SCREENSHOTS")
    folder = Path(named) if named else Path(tempfile.mkdtemp(prefix="recrawler-ui-"))
    folder.mkdir(parents=True, exist_ok=True)
    return folder
