"""Flow runs killed without a word: find them and mark them Crashed.

A flow-run process killed with SIGKILL (the OOM killer, an operator, a machine that lost
power) never tells the Prefect server: its run stays ``Running`` for ever. Prefect's own
remedy is flow-run heartbeats plus an automation (``PREFECT_FLOWS_HEARTBEAT_FREQUENCY`` and
the "detect zombie flows" recipe); it needs an automation on the server and notices only
after the heartbeat window. Runs on one data root can do it themselves, at once:

* each recrawl run takes an exclusive ``flock`` on a claim file
  ``<root>/_work/runs/<flow-run-id>.lock`` and keeps it for as long as its process lives
  (the kernel releases it when the process dies, however it dies);
* at its start a run tries the other claims: a lock it can take belongs to a dead process,
  so if that run is still not in a final state on the server it is set ``Crashed``
  (forced: nothing else will ever move it), and the claim file is removed.

A lock that cannot be taken means a live run (here or, on a file system with working
``flock``, on another machine): it is left alone. Claims of this process whose runs have
finished are released at the next run's start. Failing to reach the server only leaves
the claim for the next run: repairing the records never fails a cycle.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import logging
import os
import socket
import time
from pathlib import Path
from uuid import UUID

import httpx
from prefect.client.orchestration import SyncPrefectClient, get_client
from prefect.context import FlowRunContext
from prefect.exceptions import ObjectNotFound, PrefectException
from prefect.states import Crashed

log = logging.getLogger(__name__)

RUNS_DIR = Path("_work") / "runs"
#: What reaching the server may raise (the repair is then left for a later run).
_UNREACHABLE = (PrefectException, httpx.HTTPError)
#: Claim files this process holds (path -> descriptor): the lock lives as long as it is open.
_HELD: dict[str, int] = {}


def claims_dir(root: str | Path) -> Path:
    return Path(root) / RUNS_DIR


def claim_run(root: str | Path, flow_run_id: UUID | str) -> Path:
    """Claim the run: an exclusive lock held until this process ends (or its run is over)."""
    folder = claims_dir(root)
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{flow_run_id}.lock"
    fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        os.close(fd)
        raise
    about = {"flow_run_id": str(flow_run_id), "pid": os.getpid(), "host": socket.gethostname()}
    os.ftruncate(fd, 0)
    os.write(fd, (json.dumps({**about, "claimed_at": time.time()}) + "\n").encode())
    _HELD[str(path)] = fd
    return path


def crash_dead_runs(
    root: str | Path, client: SyncPrefectClient, *, exclude: str | None = None
) -> tuple[str, ...]:
    """Set every dead claimed run that is not final to Crashed; the ids of those set."""
    crashed = []
    for path in sorted(claims_dir(root).glob("*.lock")):
        run_id = path.stem
        if run_id == exclude:
            continue
        if str(path) in _HELD:  # ours, from an earlier run of this process
            if _is_final(client, run_id):
                _release(path)
            continue
        try:
            fd = os.open(path, os.O_RDWR)
        except FileNotFoundError:  # another run reaped it meanwhile
            continue
        try:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                continue  # its process lives
            if _crash(client, run_id):
                crashed.append(run_id)
            path.unlink(missing_ok=True)
        except _UNREACHABLE as exc:
            log.warning("could not check claimed run %s (kept for later): %s", run_id, exc)
        finally:
            os.close(fd)
    return tuple(crashed)


def claim_and_crash_dead_runs(root: str | Path) -> tuple[str, ...]:
    """Inside a flow run: crash the dead runs of ``root``, claim this one; else nothing."""
    context = FlowRunContext.get()
    if context is None or context.flow_run is None:
        return ()
    own = str(context.flow_run.id)
    try:
        with get_client(sync_client=True) as client:
            crashed = crash_dead_runs(root, client, exclude=own)
    except (*_UNREACHABLE, OSError) as exc:  # the records can wait; the cycle cannot
        log.warning("could not look for crashed runs under %s: %s", root, exc)
        crashed = ()
    try:
        claim_run(root, own)
    except OSError as exc:  # e.g. no flock on this file system: only the repair is lost
        log.warning("could not claim run %s under %s: %s", own, root, exc)
    if crashed:
        log.warning("%d earlier run(s) died without a word; set to Crashed", len(crashed))
    return crashed


def _crash(client: SyncPrefectClient, run_id: str) -> bool:
    try:
        run = client.read_flow_run(UUID(run_id))
    except (ObjectNotFound, ValueError):
        return False  # unknown to this server: nothing to repair
    if run.state is not None and run.state.is_final():
        return False
    message = f"the process running it died (found by a later run at {time.ctime()})"
    client.set_flow_run_state(UUID(run_id), Crashed(message=message), force=True)
    log.warning(
        "flow run %s (%s) was %s with its process gone: set to Crashed",
        run_id,
        run.name,
        run.state.name if run.state else "stateless",
    )
    return True


def _is_final(client: SyncPrefectClient, run_id: str) -> bool:
    try:
        run = client.read_flow_run(UUID(run_id))
    except (ObjectNotFound, ValueError):
        return True
    return run.state is None or run.state.is_final()


def _release(path: Path) -> None:
    fd = _HELD.pop(str(path))
    path.unlink(missing_ok=True)
    with contextlib.suppress(OSError):
        os.close(fd)
