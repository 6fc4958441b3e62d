"""Whole host batches in worker processes, so a cycle's fetching uses more than one core.

The flow process runs one thread per host batch; inline, that thread runs
``tasks.cycle.work.run_host_batch`` itself, so the fetch engine, its sockets and event loops,
extraction, hashing and WARC writing of every batch share the flow process's one
interpreter. ``batch_workers=N`` (``flows.recrawl.recrawl_flow``) runs ``run_host_batch`` in one
of N persistent worker processes instead (``BatchWorkers``, a ``tasks.cycle.offload.ContentPool``
whose items are whole batches, each in a thread of the worker). The Prefect task stays one
per batch, in the flow process, holding its hosts' slots while its worker runs it; only
paths, settings and counts cross the process boundary: the worker reads the batch's
requests from ``_work/cycle=N/batches/`` and writes its part, metrics, content and WARC
files, and answers with a ``BatchRun`` (the ``BatchOutcome`` and the seconds of pacing its
hosts still need, from the worker's engine state).

**Routing.** A batch goes to the worker ``host_shard(first host, N)``: every batch and
every slice of a host lands in the same process, so what its engine state learned of the
host (robots.txt, pacing, validator trust) carries over, across batches and cycles of that
process, as it does inline. The cost: a stable hash spreads few batches unevenly.

**Bounded.** At most ``batches_per_worker`` batches are in flight per worker (a submission
waits for room; the flow's thread pool bounds them all anyway), each in a thread of its own,
fetching at full speed in at most ``tasks.fetch.batch_slots.ACTIVE_BATCHES`` at a time per
worker. A worker's memory is that of a flow process running as many batches.

**A worker that dies** (SIGKILL, out of memory) fails every batch it holds: each is
written as ``error`` rows naming the death (``write_failed_part``), its task raises
``BatchFailedError`` after holding its hosts' slots for the longest pacing gap (the dead
worker's pacing state is gone), the flow carries on, and a replacement worker takes the
next batches. Its unpublished WARC files are deleted at commit with the other orphans.

Not with ``content_workers`` or a Dask cluster: a worker process (a daemon) cannot start
processes of its own, and the batch workers already take the content work off the flow
process.
"""

from __future__ import annotations

import os
import time
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

from tasks.cycle.offload import (
    ContentPool,
    OffloadError,
    OffloadSettings,
    WorkerDiedError,
    content_pool,
)
from tasks.cycle.work import (
    BatchFailedError,
    BatchOutcome,
    engine_state,
    fixed_clock,
    host_shard,
    pacing_left_s,
    run_host_batch,
    write_failed_part,
)
from tasks.fetch.batch_slots import BATCH_THREADS
from tasks.fetch.settings import FetchSettings

#: What a batch worker needs, imported once by the fork server.
PRELOAD = (
    "tasks.cycle.batch_workers",
    "tasks.cycle.work",
    "tasks.fetch.engine",
    "models.content.extract",
    "models.discovery.links",
    "tasks.archive.read",
)


class BatchWorkerError(RuntimeError):
    """A batch worker could not run a batch (no part was written: it is an ``error`` row at
    commit); the message names the cause."""


def check_batch_workers(workers: int) -> int:
    """``workers`` if it is a valid ``batch_workers`` value (0: inline), else a clear error."""
    if isinstance(workers, bool) or not isinstance(workers, int):
        raise ValueError(f"batch_workers must be a whole number >= 0, got {workers!r}")
    if workers < 0:
        raise ValueError(
            f"batch_workers must be >= 0 (0: batches in the flow process), got {workers}"
        )
    return workers


@dataclass(frozen=True)
class BatchRun:
    """A batch's run in a worker: its outcome, or why there is none, and the pacing left."""

    outcome: BatchOutcome | None
    pacing_left_s: float  # seconds until every host of the batch may be contacted again
    error: str | None = None
    failed_part: bool = False  # the batch's part holds its URLs as error rows
    pid: int = 0  # the worker process that ran it

    def result(self) -> BatchOutcome:
        """The outcome, or ``BatchFailedError`` (error rows written) / ``BatchWorkerError``."""
        if self.outcome is not None:
            return self.outcome
        if self.failed_part:
            raise BatchFailedError(self.error)
        raise BatchWorkerError(self.error)


def run_batch_here(
    root: str,
    cycle_id: int,
    batch_name: str,
    hosts: Sequence[str],
    settings: FetchSettings,
    at: datetime | None,
    cost_model: str,
    window_s: float | None,
) -> BatchRun:
    """In a worker: ``run_host_batch`` with this process's engine state; never raises."""
    outcome, error, failed_part = None, None, False
    try:
        outcome = run_host_batch(
            root,
            cycle_id,
            batch_name,
            settings=settings,
            clock=fixed_clock(at) if at is not None else None,
            cost_model=cost_model,
            window_s=window_s,
        )
    except BatchFailedError as exc:
        error, failed_part = str(exc), True
    except Exception as exc:  # the batch's outcome, not the worker's end
        error = f"{type(exc).__name__}: {exc}"
    left = pacing_left_s(engine_state(settings), hosts, time.monotonic())
    return BatchRun(outcome, left, error, failed_part, os.getpid())


@dataclass(frozen=True)
class BatchWorkers:
    """The process's batch workers (``workers`` of them), started on first use."""

    workers: int
    batches_per_worker: int = BATCH_THREADS

    def __post_init__(self) -> None:
        if check_batch_workers(self.workers) < 1:
            raise ValueError(f"batch workers must be >= 1, got {self.workers}")
        if self.batches_per_worker < 1:
            raise ValueError(f"batches_per_worker must be >= 1, got {self.batches_per_worker}")

    @property
    def pool(self) -> ContentPool:
        return content_pool(
            OffloadSettings(
                workers=self.workers,
                queue_items=self.batches_per_worker,
                threads=self.batches_per_worker,
                preload=PRELOAD,
                role="batch",
            )
        )

    def worker_of(self, hosts: Sequence[str]) -> int:
        """The worker a batch of ``hosts`` runs in: a stable hash of its first host."""
        return host_shard(hosts[0], self.workers) if hosts else 0

    def run(
        self,
        root: str | Path,
        cycle_id: int,
        batch_name: str,
        hosts: Sequence[str],
        *,
        settings: FetchSettings,
        at: datetime | None = None,
        cost_model: str = "credits",
        window_s: float | None = None,
    ) -> BatchRun:
        """Run the batch in its worker and wait; a dead worker's batch becomes error rows."""
        try:
            run: BatchRun = self.pool.call(
                run_batch_here,
                str(root),
                int(cycle_id),
                batch_name,
                tuple(hosts),
                settings,
                at,
                cost_model,
                window_s,
                worker=self.worker_of(hosts),
            )
        except WorkerDiedError as exc:
            reason = f"batch failed: {exc}"
            write_failed_part(
                root, cycle_id, batch_name, reason, clock=fixed_clock(at) if at else None
            )
            return BatchRun(None, longest_gap_s(settings), f"{batch_name}: {reason}", True)
        except OffloadError as exc:  # the pool could not take it (closed): nothing written
            return BatchRun(None, longest_gap_s(settings), f"{batch_name}: {exc}")
        return run


def longest_gap_s(settings: FetchSettings) -> float:
    """The longest pacing gap these settings ask after a request (a lost worker's hosts
    are held that long: its pacing state died with it)."""
    crawl_delay = settings.crawl_delay_cap_s if settings.honour_crawl_delay else 0.0
    return max(settings.max_delay_s, crawl_delay)
