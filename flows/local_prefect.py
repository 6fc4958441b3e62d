"""Prefect in our own processes: the environment defaults, and the local server's start.

One home for what every process of ours that starts Prefect needs (``recrawl demo``,
``recrawl run``, ``python -m flows.serve``, ``benchmarks/bench_cycle.py``):

- ``apply_prefect_defaults()``, called before Prefect is imported (Prefect reads its
  settings from the environment once, at import): analytics off and ``DO_NOT_TRACK`` (only
  loopback may be contacted), Prefect's run logs at WARNING for quiet commands, and a start
  timeout for the local (ephemeral) server far above Prefect's 20 s, and for a run nobody
  inspects in Prefect's UI afterwards (the demo) no event store. Each is a ``setdefault``:
  a value the user set wins.
- ``start_local_prefect()``: with no ``PREFECT_API_URL``, start Prefect's temporary local
  server now, rather than inside the first flow call, so that its first start on a new
  ``PREFECT_HOME`` (creating and migrating the SQLite database: about a minute on a busy
  2-core machine, where Prefect's default 20 s timed out) is announced, timed, and a
  failure is one line naming the setting to raise (``PrefectStartError``, a
  ``RuntimeError``: the CLI prints it and exits 2). The flows then reuse this server.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

#: Prefect's setting for how long the local server may take to answer its health check.
STARTUP_TIMEOUT_SETTING = "PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS"
#: Our default for it. Prefect's own is 20 s; a first start (new database) took 53 s on a
#: 2-core machine at load 5 and 116 s was seen from a fresh clone, so allow 10 minutes.
STARTUP_TIMEOUT_S = 600
#: Only loopback may be contacted: no usage statistics from Prefect's server or SDK.
PRIVACY_DEFAULTS = {"PREFECT_SERVER_ANALYTICS_ENABLED": "false", "DO_NOT_TRACK": "1"}
#: The local server's event store and the automations that read it. Each host's slot
#: acquisition is an event naming every host limit of the batch as a related resource,
#: so a 40-host demo cycle wrote ~6,500 event_resources rows: the SQLite inserts were half
#: of the demo's CPU (py-spy), for events the demo never reads. Flow and task runs are
#: still recorded (the task run recorder is another service).
NO_EVENT_STORE = {
    "PREFECT_SERVER_SERVICES_EVENT_PERSISTER_ENABLED": "false",
    "PREFECT_SERVER_SERVICES_TRIGGERS_ENABLED": "false",
}


class PrefectStartError(RuntimeError):
    """Prefect's local server did not start; the message names the setting to raise."""


def prefect_defaults(*, quiet: bool = True, keep_events: bool = True) -> dict[str, str]:
    """The environment defaults for a process of ours that starts Prefect."""
    defaults = {**PRIVACY_DEFAULTS, STARTUP_TIMEOUT_SETTING: str(STARTUP_TIMEOUT_S)}
    if quiet:  # Prefect's run logs would bury a command's own output
        defaults["PREFECT_LOGGING_LEVEL"] = "WARNING"
    if not keep_events:
        defaults.update(NO_EVENT_STORE)
    return defaults


def apply_prefect_defaults(*, quiet: bool = True, keep_events: bool = True) -> None:
    """``os.environ.setdefault`` each of ``prefect_defaults``; call before importing Prefect."""
    for name, value in prefect_defaults(quiet=quiet, keep_events=keep_events).items():
        os.environ.setdefault(name, value)


def start_local_prefect(*, announce: bool = True) -> float:
    """Start Prefect's local server unless ``PREFECT_API_URL`` names one; seconds it took.

    Returns 0.0 when there is nothing to start (an API URL is set, or a server of this
    process, such as the test harness's, is already running). Raises ``PrefectStartError``
    when the server does not answer within the start timeout or its process exits.
    """
    from prefect.settings import get_current_settings

    settings = get_current_settings()
    if settings.api.url or not settings.server.ephemeral.enabled:
        return 0.0
    from prefect.server.api.server import SubprocessASGIServer

    server = SubprocessASGIServer()
    if server.running:
        return 0.0
    timeout = settings.server.ephemeral.startup_timeout_seconds
    database = _sqlite_path(settings)
    if announce and database is not None and not database.exists():
        print(
            f"Prefect: first start on PREFECT_HOME={settings.home}, creating its database "
            f"(a minute or more; allowed {timeout} s by {STARTUP_TIMEOUT_SETTING})",
            file=sys.stderr,
            flush=True,
        )
    started = time.monotonic()
    failure: list[BaseException] = []

    def start() -> None:
        try:
            server.start(timeout=timeout)
        except BaseException as exc:  # re-raised below as one line
            failure.append(exc)

    # Prefect's own wait polls until the timeout even when the server process has died;
    # watch the process from here so a crash is reported at once, not after 10 minutes.
    starter = threading.Thread(target=start, name="prefect-start", daemon=True)
    starter.start()
    while starter.is_alive():
        starter.join(0.5)
        process = server.server_process
        code = process.poll() if process is not None else None
        if code is not None and code != 3:  # 3: port taken, Prefect retries another
            server.stop()
            raise PrefectStartError(
                f"Prefect's local server exited with code {code} while starting "
                f"(PREFECT_HOME={settings.home}; its output is above)"
            )
    if failure:
        server.stop()
        waited = time.monotonic() - started
        raise PrefectStartError(
            f"Prefect's local server did not start within {timeout} s (waited {waited:.0f} s; "
            f"a first start on a new PREFECT_HOME creates its database): raise "
            f"{STARTUP_TIMEOUT_SETTING} (now {timeout}), e.g. "
            f"{STARTUP_TIMEOUT_SETTING}={max(4 * timeout, STARTUP_TIMEOUT_S)}, "
            f"or set PREFECT_API_URL to a running Prefect server"
        ) from None
    return time.monotonic() - started


def local_server_cpu_s() -> float | None:
    """CPU seconds used so far by the local server this process started (Linux), or None."""
    server = sys.modules.get("prefect.server.api.server")
    instance = server.SubprocessASGIServer._instances.get(None) if server else None
    popen = getattr(instance, "server_process", None)
    if popen is None or popen.poll() is not None:
        return None
    try:  # fields 14 and 15 after the command's closing parenthesis: utime, stime in ticks
        fields = Path(f"/proc/{popen.pid}/stat").read_text().rsplit(")", 1)[1].split()
        return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError):
        return None


def _sqlite_path(settings: object) -> Path | None:
    """The local server's SQLite file, or None for another database."""
    url = settings.server.database.connection_url  # type: ignore[attr-defined]
    text = url.get_secret_value() if url is not None else ""
    prefix = "sqlite+aiosqlite:///"
    if not text.startswith(prefix) or ":memory:" in text:
        return None
    return Path(text.removeprefix(prefix).split("?", 1)[0])


@contextmanager
def without_flow_heartbeats() -> Iterator[None]:
    """Flows started inside run without Prefect's heartbeat thread.

    Heartbeats let a server mark a flow run whose process died; they matter for a
    deployment's long runs. Flows that this process runs one after another within seconds
    (the demo's simulated days) gain nothing from them, and each flow's end waits for the
    heartbeat thread to notice (it sleeps in one-second steps): about half a second per
    flow, 15 s of the demo's 31 cycles.
    """
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings

    with temporary_settings(updates={PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}):
        yield
