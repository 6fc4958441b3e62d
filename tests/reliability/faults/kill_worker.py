"""``tests.tasks.cycle.cycle_worker`` with a SIGKILL aimed at one stage of the cycle.

``python -m tests.reliability.faults.kill_worker STAGE K [--fsize-at STAGE] -- WORKER ARGS``
runs the crash test's cycle worker (plan, split, fetch every host batch, commit) and
SIGKILLs its own process at the K-th *event* of STAGE, or when STAGE ends if it has fewer
events (``STAGE`` ``none``: no kill, the events are only logged). Stages, in cycle order:

=================  =====================================================================
``plan``           ``plan_cycle`` (estimation, allocation, the plan file)
``split``          ``split_plan`` (batch files, then the split index)
``fetch``          inside a host batch's fetch: an event per attempt (mid-batch)
``parts``          after a batch's fetch: its WARC file, metrics and part are written
``commit-prepare`` ``commit_cycle`` reads the parts (and records batches that never ran)
``commit-stage``   the cycle's rows are staged (``CycleWriter.write_part``)
``commit-link``    the observations are linked to the previous ones (a DuckDB query): the
                   kill comes from a timer K milliseconds into it
``commit-write``   the new version folder and statistics are written (not yet published)
``commit-manifest`` the manifest is written to its temporary name and renamed
``after-publish``  the manifest is renamed; staging and work files are not yet removed
=================  =====================================================================

Events are durable writes (``pyarrow.parquet.write_table``, the commit's streamed Parquet
files, ``json.dump``) and renames (``os.replace``). A kill at a write leaves a truncated file
where the write went, as a kernel that had written part of it would. Every stage entered
and the kill itself are appended to the file named by ``FAULT_LOG`` (JSON lines), so the
test knows what was hit.

``--fsize-at STAGE`` instead lowers RLIMIT_FSIZE to 1 KiB when STAGE begins (SIGXFSZ
ignored): every larger write then fails with EFBIG, as on a full disk, with no root needed.
"""

from __future__ import annotations

import json
import os
import random
import resource
import signal
import sys
import threading
import time
from collections import Counter
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pyarrow.parquet as pq

import tasks.cycle.work
from tasks.fetch.settings import FetchSettings
from tasks.store import history
from tests.tasks.cycle import cycle_worker

STAGES = (
    "plan",
    "split",
    "fetch",
    "parts",
    "commit-prepare",
    "commit-stage",
    "commit-link",
    "commit-write",
    "commit-manifest",
    "after-publish",
)
#: Stages that recur once per host batch (their kill falls back to the commit's start).
REPEATED = frozenset({"fetch", "parts"})
FSIZE_LIMIT = 1024
LOOPBACK = ("127.0.0.0/8",)


class Faults:
    """Tracks the current stage, counts its events and fires the planned fault."""

    def __init__(self, target: str, index: int, fsize_at: str | None, log: str | None) -> None:
        self.target = target
        self.index = index
        self.fsize_at = fsize_at
        self.log_path = log
        self.stage = "start"
        self.events: Counter[str] = Counter()
        self.rng = random.Random(index)

    def log(self, **entry: Any) -> None:
        """Append to the fault log (above any lowered file-size limit)."""
        if not self.log_path:
            return
        soft, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (hard, hard))
        try:
            with open(self.log_path, "a") as handle:
                handle.write(json.dumps({**entry, "t": round(time.time(), 3)}) + "\n")
                handle.flush()
                os.fsync(handle.fileno())
        finally:
            resource.setrlimit(resource.RLIMIT_FSIZE, (soft, hard))

    def enter(self, stage: str) -> None:
        """A stage begins; leaving the target stage short of its K-th event kills (``exit``)."""
        if self.target in REPEATED:  # its batches are over once a one-off stage begins
            leaving = self.stage in REPEATED and stage not in REPEATED
        else:
            leaving = self.stage == self.target != stage
        if leaving:
            self.die(self.target, "exit", self.events[self.target])
        self.stage = stage
        self.log(event="stage", stage=stage)
        if stage == self.fsize_at:
            signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
            _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
            resource.setrlimit(resource.RLIMIT_FSIZE, (FSIZE_LIMIT, hard))
            self.log(event="fsize", stage=stage, limit=FSIZE_LIMIT)

    def leave(self, stage: str) -> None:
        """A one-off stage returns: the kill, if it had fewer events than planned."""
        if stage == self.target == self.stage and stage not in REPEATED:
            self.die(stage, "exit", self.events[stage])

    def event(self, kind: str, before_die: Callable[[], None] | None = None) -> None:
        if self.stage != self.target:
            return
        self.events[self.stage] += 1
        if self.events[self.stage] == self.index:
            if before_die is not None:
                before_die()
            self.die(self.stage, kind, self.index)

    def die(self, stage: str, point: str, index: int) -> None:
        self.log(event="kill", stage=stage, point=point, index=index)
        os.kill(os.getpid(), signal.SIGKILL)


def install(faults: Faults) -> None:
    """Wrap the cycle's steps (stage markers) and the durable I/O calls (events)."""

    def staged(stage: str, then: str | None = None) -> Callable[[Any], Any]:
        def wrap(fn: Any) -> Any:
            def wrapper(*args: Any, **kwargs: Any) -> Any:
                faults.enter(stage)
                result = fn(*args, **kwargs)
                faults.leave(stage)
                if then is not None:
                    faults.enter(then)
                return result

            return wrapper

        return wrap

    cycle_worker.plan_cycle = staged("plan")(cycle_worker.plan_cycle)
    cycle_worker.split_plan = staged("split")(cycle_worker.split_plan)
    cycle_worker.run_host_batch = staged("parts")(cycle_worker.run_host_batch)
    fetch_batch = tasks.cycle.work.fetch_batch

    async def staged_fetch(*args: Any, **kwargs: Any) -> Any:
        faults.enter("fetch")
        result = await fetch_batch(*args, **kwargs)
        faults.enter("parts")
        return result

    tasks.cycle.work.fetch_batch = staged_fetch
    cycle_worker.commit_cycle = staged("commit-prepare")(cycle_worker.commit_cycle)
    writer = history.CycleWriter
    writer.write_part = staged("commit-stage")(writer.write_part)  # type: ignore[method-assign]
    history._link = _timed_link(faults, staged("commit-link", then="commit-write")(history._link))
    store = history.HistoryStore
    publish = staged("commit-manifest", then="after-publish")(store._publish)

    def publish_then_maybe_die(self: Any, manifest: Any, retire: Any) -> None:
        publish(self, manifest, retire)
        faults.leave("after-publish")

    store._publish = publish_then_maybe_die  # type: ignore[method-assign]

    original_hook = tasks.cycle.work.cost_hook_for

    def counting_cost_hook(model: Any) -> Any:
        hook = original_hook(model)

        def counted(attempt: Any) -> float:
            faults.event("attempt")
            return hook(attempt)

        return counted

    tasks.cycle.work.cost_hook_for = counting_cost_hook

    write_table = pq.write_table

    def write_table_event(table: Any, where: Any, *args: Any, **kwargs: Any) -> None:
        def truncated() -> None:
            if isinstance(where, str | Path):  # a path (not a handle): leave it cut short
                write_table(table, where, *args, **kwargs)
                os.truncate(where, faults.rng.randrange(Path(where).stat().st_size))

        faults.event("write", truncated)
        write_table(table, where, *args, **kwargs)

    pq.write_table = write_table_event

    write_groups = history._write_row_groups  # the commit's streamed data and stats files

    def write_groups_event(tables: Any, path: Path, schema: Any) -> int:
        def truncated() -> None:
            write_groups(tables, path, schema)
            os.truncate(path, faults.rng.randrange(Path(path).stat().st_size))

        faults.event("write", truncated)
        return write_groups(tables, path, schema)

    history._write_row_groups = write_groups_event

    dump = json.dump

    def dump_event(obj: Any, fp: Any, *args: Any, **kwargs: Any) -> None:
        def partial() -> None:
            text = json.dumps(obj, *args, **kwargs)
            fp.write(text[: faults.rng.randrange(max(len(text), 1))])
            fp.flush()
            os.fsync(fp.fileno())

        faults.event("write", partial)
        dump(obj, fp, *args, **kwargs)

    json.dump = dump_event

    replace = os.replace

    def replace_event(src: Any, dst: Any, *args: Any, **kwargs: Any) -> None:
        faults.event("rename")
        replace(src, dst, *args, **kwargs)

    os.replace = replace_event


def _timed_link(faults: Faults, link: Callable[..., Any]) -> Callable[..., Any]:
    """The link step with a timer that kills the process ``index`` ms into it."""

    def wrapper(*args: Any, **kwargs: Any) -> Any:
        if faults.target == "commit-link":
            delay = faults.index / 1000.0
            timer = threading.Timer(delay, faults.die, ("commit-link", "timer", faults.index), {})
            timer.daemon = True
            timer.start()
        return link(*args, **kwargs)

    return wrapper


def main(argv: list[str]) -> int:
    split = argv.index("--")
    own, worker_args = argv[:split], argv[split + 1 :]
    target, index = own[0], int(own[1])
    fsize_at = own[own.index("--fsize-at") + 1] if "--fsize-at" in own else None
    if target not in (*STAGES, "none"):
        raise SystemExit(f"unknown stage {target!r}; one of {', '.join(STAGES)} or none")
    faults = Faults(target, index, fsize_at, os.environ.get("FAULT_LOG"))
    install(faults)
    settings = cycle_worker.SETTINGS
    if "allowed_networks" in FetchSettings.model_fields and not settings.allowed_networks:
        # the engine refuses loopback unless allowed (issue 8): the sandbox is on loopback
        cycle_worker.SETTINGS = FetchSettings(
            **settings.model_dump(exclude_unset=True), allowed_networks=LOOPBACK
        )
    return cycle_worker.main(worker_args)


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
