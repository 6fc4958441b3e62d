"""A host batch's CPU work in worker processes: extraction, hashing, links and WARC writing.

The fetch engine runs in one thread of the flow process; what it does per answered page
besides the transport (the extracted record's hash and simhash, the page's links, the WARC
records and reading back the page's previous capture) can run elsewhere. A ``ContentPool``
owns ``workers`` processes, each fed through its own queue, and the batch gets two adapters:

* ``OffloadHasher``: the engine's record hasher, asynchronous. The page's engine worker
  awaits the digest (the engine's ``concurrency`` bounds what is in flight), so the
  validator judgement and the row are exactly what the inline hasher gives.
* ``OffloadWarcWriter``: a ``WarcWriter`` whose ``write_exchange`` hands the exchange to a
  worker and returns a *pending* location at once; the worker's own writer for the batch
  (one file series per worker: ``<part>-w<k>``) writes it and reads the previous capture.
  ``resolve`` puts the real file and offset into the batch's rows after ``close``.

**Backpressure.** At most ``queue_items`` items are queued or being worked per worker; a
submission waits for room (the engine's worker coroutine awaits; a WARC hand-off blocks the
batch's event loop, the only synchronous call site), so a slow parser slows fetching and
nothing else, and memory is bounded: at most ``workers x queue_items`` bodies in transit
(each under ``FetchSettings.max_body_bytes``), plus each worker's writer buffers (1 MiB)
and remembered payload digests (``WarcSettings.remembered_payloads``).

**Failures are outcomes.** An exception in a worker is sent back as the item's error: a
hash raises ``OffloadError`` in the engine's worker (the engine records that page as an
``error`` row naming it), a WARC write leaves the row naming no record (as a failing disk
does inline). A worker process that dies (SIGKILL, out of memory) is noticed at once
(its process sentinel): every item it held fails with ``WorkerDiedError``, a replacement
is started with the open batches, and rows pointing into the dead worker's unpublished file
name no record (its temporary file is deleted at commit with the other orphans).

The Dask variant (``tasks.cycle.offload_dask.DaskContentPool``) offers the same calls on a
``dask.distributed`` cluster.
"""

from __future__ import annotations

import asyncio
import atexit
import contextlib
import itertools
import logging
import multiprocessing as mp
import os
import selectors
import threading
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from datetime import datetime
from multiprocessing.connection import Connection
from pathlib import Path
from typing import TYPE_CHECKING, Any, Protocol

import pyarrow as pa

from tasks.archive.warc import WarcLocation, WarcSettings, WarcWriter
from tasks.fetch.rows import RecordDigest

if TYPE_CHECKING:
    from multiprocessing.process import BaseProcess

    from models.content.extract_rules import ExtractionRules
    from models.discovery.links import PageLinks
    from tasks.archive.warc import PayloadRef

log = logging.getLogger(__name__)

#: ``warc_file`` of a row whose exchange a worker has not written yet (``warc_offset``: the job).
PENDING_FILE = "\x00pending"

_HASH, _WARC, _OPEN, _CLOSE, _ABORT, _CALL, _STOP = range(7)
#: What a worker needs, imported once by the fork server.
_PRELOAD = (
    "tasks.cycle.offload",
    "models.content.extract",
    "models.discovery.links",
    "tasks.archive.read",
)


class OffloadError(RuntimeError):
    """A worker could not do an item; the message names the item and the cause."""


class WorkerDiedError(OffloadError):
    """The worker process holding the item died before answering."""


@dataclass(frozen=True)
class OffloadSettings:
    """How many worker processes, and how much work each may hold."""

    workers: int = 2
    queue_items: int = 16  # queued or being worked, per worker: the memory bound
    #: the flow process has threads: never fork it. A fork server (one per process) is a
    #: fresh process that has imported the extraction and WARC modules once; each worker,
    #: and each replacement, forks from it in milliseconds.
    start_method: str = "forkserver"
    #: 0: a worker takes its items in order, one at a time (what ``close_batch`` relies on).
    #: > 0: each ``_CALL`` item runs in one of that many threads of the worker and is
    #: answered when it ends, in any order (whole host batches: ``tasks.cycle.batch_workers``).
    threads: int = 0
    #: the modules the fork server imports once. It is one per process: the first pool
    #: started sets them (a later pool's workers import what they lack on first use).
    preload: tuple[str, ...] = ()
    #: what the workers are called in process names and messages ("<role> worker")
    role: str = "content"

    def __post_init__(self) -> None:
        if self.workers < 1:
            raise ValueError(f"workers must be >= 1, got {self.workers}")
        if self.queue_items < 1:
            raise ValueError(f"queue_items must be >= 1, got {self.queue_items}")
        if self.threads < 0:
            raise ValueError(f"threads must be >= 0, got {self.threads}")
        if self.start_method not in ("spawn", "forkserver", "fork"):
            raise ValueError(
                f"start_method must be spawn, forkserver or fork, got {self.start_method!r}"
            )


@dataclass(frozen=True)
class BatchOpening:
    """What each worker needs to serve one batch: its writer's place and previous captures."""

    root: str
    cycle_id: int
    part: str
    warc: WarcSettings | None  # None: this batch archives nothing
    locations: Mapping[str, tuple[str, int]]  # page URL -> its previous capture
    rules: ExtractionRules | None = None


#: ``done(job, ok, value)``: called from the pool's thread when the item is answered.
Done = Callable[[int, bool, Any], None]


class Offloader(Protocol):
    """What the batch adapters need of a pool (``ContentPool`` or ``DaskContentPool``)."""

    def open_batch(self, key: str, opening: BatchOpening) -> None: ...
    def submit(self, kind: int, key: str, payload: tuple[Any, ...], done: Done) -> int: ...
    async def submit_async(self, kind: int, key: str, payload: tuple[Any, ...]) -> Any: ...
    def close_batch(self, key: str, *, abort: bool = False) -> list[str]: ...


# ---------------------------------------------------------------------- in a worker


class _WorkerState:
    """One worker's batches: their writers and extraction rules (also used by Dask's)."""

    def __init__(self, index: str) -> None:
        self.index = index
        self.writers: dict[str, WarcWriter] = {}
        self.rules: dict[str, ExtractionRules | None] = {}
        self.openings: dict[str, BatchOpening] = {}

    def open(self, key: str, opening: BatchOpening) -> None:
        self.openings[key] = opening
        self.rules[key] = opening.rules

    def writer(self, key: str) -> WarcWriter:
        writer = self.writers.get(key)
        if writer is None:
            from tasks.archive.read import PreviousCaptures

            opening = self.openings[key]
            captures = (
                PreviousCaptures(opening.root, opening.locations) if opening.locations else None
            )
            writer = self.writers[key] = WarcWriter(
                opening.root,
                opening.cycle_id,
                settings=opening.warc,
                part=f"{opening.part}-w{self.index}",
                previous_captures=captures,
            )
        return writer

    def do(self, kind: int, key: str, payload: tuple[Any, ...]) -> Any:
        if kind == _HASH:
            return _extract(self.rules.get(key), *payload)
        if kind == _WARC:
            args: dict[str, Any] = payload[0]
            return self.writer(key).write_exchange(**args)
        if kind == _CLOSE:
            self.openings.pop(key, None)
            self.rules.pop(key, None)
            writer = self.writers.pop(key, None)
            if writer is None:
                return []
            if payload and payload[0]:
                writer.abort()
                return []
            return writer.close()
        if kind == _CALL:
            function, args = payload
            return function(*args)
        raise ValueError(f"unknown offload item kind {kind}")


def _extract(
    rules: ExtractionRules | None, body: bytes, content_type: str | None, url: str, links: bool
) -> tuple[str, int | None, PageLinks | None, str | None]:
    """The record's hash and simhash, and the page's links (or why they were not read)."""
    from models.content.extract import DEFAULT_RULES, extract
    from models.discovery.links import page_links
    from models.discovery.urls import InvalidURLError

    record = extract(body, content_type or "", url, rules or DEFAULT_RULES)
    found, why = None, None
    if links:
        try:
            found = page_links(url, body, content_type)
        except (InvalidURLError, ValueError) as exc:
            why = str(exc)
    return record.record_hash, record.simhash, found, why


def _worker_main(index: int, inbox: Any, results: Connection, threads: int = 0) -> None:
    """A worker process: take items in order, answer each (an error is an answer).

    ``threads > 0``: each ``_CALL`` item runs in a thread of its own (at most ``threads``)
    and is answered as it ends (``_threaded_worker``).

    Answers go back in lists: those of the items taken while more were already waiting,
    sent before the worker would wait for the next (so none is held while it is idle), at
    most ``_ANSWER_BATCH`` at a time. Under load this is one message per several items
    instead of one each, on both sides of the pipe."""
    # the pid too: a replacement of a dead worker must never publish under a name the dead
    # one's rows point into
    state = _WorkerState(f"{index}p{os.getpid()}")
    if threads:
        _threaded_worker(state, inbox, results, threads)
        return
    answers: list[tuple[int, bool, Any]] = []
    while True:
        if answers and (len(answers) >= _ANSWER_BATCH or inbox.empty()):
            results.send(answers)
            answers = []
        message = inbox.get()
        kind, job, key, payload = message
        if kind == _STOP:
            break
        if kind == _OPEN:
            state.open(key, payload[0])
            continue
        try:
            answers.append((job, True, state.do(kind, key, payload)))
        except Exception as exc:  # any failure is the item's outcome, never the worker's end
            answers.append((job, False, f"{type(exc).__name__}: {exc}"))
    if answers:
        results.send(answers)
    results.close()


def _threaded_worker(state: _WorkerState, inbox: Any, results: Connection, threads: int) -> None:
    """``_worker_main`` with each item in a thread: long items side by side (host batches
    that mostly wait on their hosts' pacing), each answered alone as it ends. The pool
    keeps at most ``queue_items`` in flight, so a thread is free for each."""
    from concurrent.futures import ThreadPoolExecutor

    lock = threading.Lock()

    def work(kind: int, job: int, key: str, payload: tuple[Any, ...]) -> None:
        try:
            answer = (job, True, state.do(kind, key, payload))
        except Exception as exc:  # the item's outcome, never the worker's end
            answer = (job, False, f"{type(exc).__name__}: {exc}")
        with lock, contextlib.suppress(OSError, ValueError):  # the pool went away
            results.send([answer])

    with ThreadPoolExecutor(threads, thread_name_prefix=f"worker-{state.index}") as running:
        while True:
            kind, job, key, payload = inbox.get()
            if kind == _STOP:
                break
            if kind == _OPEN:
                state.open(key, payload[0])
                continue
            running.submit(work, kind, job, key, payload)
    results.close()


#: Answers a worker sends in one message at most (each is a row's digest, links or WARC
#: location: small, but an item's wait for its answer grows with the batch).
_ANSWER_BATCH = 16


# ---------------------------------------------------------------------- the pool


@dataclass
class _Worker:
    index: int
    process: BaseProcess
    inbox: Any  # multiprocessing Queue (a feeder thread: put never blocks the caller)
    results: Connection
    pending: set[int]


class ContentPool:
    """Worker processes for the batches' CPU work (see the module docstring)."""

    def __init__(self, settings: OffloadSettings | None = None) -> None:
        self.settings = settings or OffloadSettings()
        self._ctx = mp.get_context(self.settings.start_method)
        if self.settings.start_method == "forkserver":
            self._ctx.set_forkserver_preload(list(self.settings.preload or _PRELOAD))
        self._cond = threading.Condition()
        self._jobs: dict[int, tuple[int, Done]] = {}
        self._ids = itertools.count(1)
        self._openings: dict[str, BatchOpening] = {}
        self._closing = False
        self.deaths = 0  # worker processes found dead (and replaced)
        self._workers = [self._start(i) for i in range(self.settings.workers)]
        self._reader = threading.Thread(target=self._read, name="content-pool", daemon=True)
        self._reader.start()

    @property
    def pids(self) -> list[int]:
        with self._cond:
            return [int(w.process.pid or 0) for w in self._workers]

    def in_flight(self) -> int:
        with self._cond:
            return sum(len(w.pending) for w in self._workers)

    # ------------------------------------------------------------------ submitting

    def open_batch(self, key: str, opening: BatchOpening) -> None:
        with self._cond:
            self._openings[key] = opening
            for worker in self._workers:
                worker.inbox.put((_OPEN, 0, key, (opening,)))

    def submit(
        self,
        kind: int,
        key: str,
        payload: tuple[Any, ...],
        done: Done,
        worker: int | None = None,
    ) -> int:
        """Queue an item on the least busy worker (or on worker ``worker`` modulo their
        number), waiting for room; ``done(ok, value)`` is called from the pool's thread when
        it is answered. Returns the item's job id."""
        with self._cond:
            while (job := self._try_submit(kind, key, payload, done, worker)) is None:
                self._cond.wait(0.1)
            return job

    async def submit_async(self, kind: int, key: str, payload: tuple[Any, ...]) -> Any:
        """``submit`` from a coroutine: waits for room without blocking the event loop;
        returns the worker's answer or raises ``OffloadError``."""
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(job: int, ok: bool, value: Any) -> None:
            loop.call_soon_threadsafe(_settle, future, ok, value)

        delay = 0.001
        while True:
            with self._cond:
                if self._try_submit(kind, key, payload, done) is not None:
                    break
            await asyncio.sleep(delay)  # full: the backpressure rule
            delay = min(delay * 2, 0.05)
        return await future

    def call(self, function: Callable[..., Any], *args: Any, worker: int | None = None) -> Any:
        """Run a picklable function in a worker (the least busy, or ``worker`` modulo their
        number) and wait for its answer; its exception, or the worker's death, raises
        ``OffloadError`` (``WorkerDiedError``)."""
        box: dict[str, Any] = {}
        event = threading.Event()

        def done(job: int, ok: bool, value: Any) -> None:
            box["ok"], box["value"] = ok, value
            event.set()

        self.submit(_CALL, "", (function, args), done, worker)
        event.wait()
        if not box["ok"]:
            raise value_error(box["value"])
        return box["value"]

    def close_batch(self, key: str, *, abort: bool = False) -> list[str]:
        """After the batch's last item: close (or drop) every worker's writer for it;
        returns the files published. Items of the batch still queued are answered first
        (each worker takes its items in order)."""
        events: list[threading.Event] = []
        published: list[str] = []
        lock = threading.Lock()

        def done_for(event: threading.Event) -> Done:
            def done(job: int, ok: bool, value: Any) -> None:
                if ok:
                    with lock:
                        published.extend(value)
                else:
                    log.error("closing WARC files of %s failed in a worker: %s", key, value)
                event.set()

            return done

        with self._cond:
            self._openings.pop(key, None)
            for worker in self._workers:
                event = threading.Event()
                events.append(event)
                self._queue(worker, _CLOSE, key, (abort,), done_for(event))
        for event in events:
            event.wait()
        return sorted(published)

    def close(self) -> None:
        """Stop the workers (after what they hold); items still pending fail."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            workers = list(self._workers)
            for worker in workers:
                worker.inbox.put((_STOP, 0, "", ()))
        for worker in workers:
            worker.process.join(10)
            if worker.process.is_alive():
                worker.process.kill()
                worker.process.join(5)
        self._reader.join(5)
        error = OffloadError("the content pool was closed")
        with self._cond:
            failed = [item for worker in workers for item in self._fail_pending(worker, error)]
        for job, done in failed:
            done(job, False, error)

    # ------------------------------------------------------------------ internals

    def _start(self, index: int) -> _Worker:
        inbox = self._ctx.Queue()
        receive, send = self._ctx.Pipe(duplex=False)
        process = self._ctx.Process(  # type: ignore[attr-defined]
            target=_worker_main,
            args=(index, inbox, send, self.settings.threads),
            name=f"{self.settings.role}-worker-{index}",
            daemon=True,
        )
        process.start()
        send.close()  # the worker holds the sending end: its death closes the pipe
        return _Worker(index, process, inbox, receive, set())

    def _try_submit(
        self,
        kind: int,
        key: str,
        payload: tuple[Any, ...],
        done: Done,
        chosen: int | None = None,
    ) -> int | None:
        if self._closing:
            raise OffloadError("the content pool is closed")
        if chosen is None:
            worker = min(self._workers, key=lambda w: len(w.pending))
        else:
            worker = self._workers[chosen % len(self._workers)]
        if len(worker.pending) >= self.settings.queue_items:
            return None
        return self._queue(worker, kind, key, payload, done)

    def _queue(
        self, worker: _Worker, kind: int, key: str, payload: tuple[Any, ...], done: Done
    ) -> int:
        job = next(self._ids)
        worker.pending.add(job)
        self._jobs[job] = (worker.index, done)
        worker.inbox.put((kind, job, key, payload))
        return job

    def _read(self) -> None:
        """The pool's thread: answers in, dead workers out (and replaced).

        One selector over the workers' answer pipes and process sentinels, built again
        only when the set of workers changed (``multiprocessing.connection.wait`` builds and
        tears down one per call: a quarter of the flow process's hand-off CPU)."""
        selector: selectors.BaseSelector | None = None
        seen: list[int] = []  # the workers the selector watches (identities)
        try:
            while True:
                with self._cond:
                    if self._closing and not any(w.process.is_alive() for w in self._workers):
                        return
                    workers = list(self._workers)
                if selector is None or [id(w) for w in workers] != seen:
                    if selector is not None:
                        selector.close()
                    selector, seen = self._selector(workers), [id(w) for w in workers]
                for key, _ in selector.select(timeout=0.5):
                    kind, worker = key.data
                    if kind == "answers":
                        if not self._drain(worker):
                            self._dead(worker)
                    else:  # its process ended
                        self._drain(worker)
                        self._dead(worker)
                    if [id(w) for w in self._workers] != seen:  # one replaced: its fds went
                        break
        finally:
            if selector is not None:
                selector.close()

    @staticmethod
    def _selector(workers: list[_Worker]) -> selectors.BaseSelector:
        selector = selectors.DefaultSelector()
        for worker in workers:
            with contextlib.suppress(OSError, ValueError):  # closed: it is being replaced
                selector.register(worker.results, selectors.EVENT_READ, ("answers", worker))
                selector.register(worker.process.sentinel, selectors.EVENT_READ, ("ended", worker))
        return selector

    def _drain(self, worker: _Worker) -> bool:
        """Take every answer the worker has sent; False once its pipe is closed."""
        try:
            while worker.results.poll():
                self._answer(worker, worker.results.recv())
        except (EOFError, OSError):
            return False
        return True

    def _answer(self, worker: _Worker, answers: list[tuple[int, bool, Any]]) -> None:
        settled = []
        with self._cond:
            for job, ok, value in answers:
                worker.pending.discard(job)
                entry = self._jobs.pop(job, None)
                if entry is not None:
                    settled.append((entry[1], job, ok, value))
            self._cond.notify_all()
        for done, job, ok, value in settled:
            done(job, ok, value)

    def _dead(self, worker: _Worker) -> None:
        worker.process.join(1.0)  # reaped: its exit code is known (its sentinel has fired)
        with self._cond:
            if worker not in self._workers:
                return
            code = worker.process.exitcode
            if self._closing:  # stopped, or stopping: its pipe closed first
                self._workers.remove(worker)
                return
            self.deaths += 1
            log.error(
                "%s worker %s (pid %s) died (exit code %s): its %d items become errors",
                self.settings.role,
                worker.index,
                worker.process.pid,
                code,
                len(worker.pending),
            )
            error = WorkerDiedError(
                f"{self.settings.role} worker pid {worker.process.pid} died (exit code {code}) "
                "holding the item"
            )
            failed = self._fail_pending(worker, error)
            worker.inbox.cancel_join_thread()
            worker.results.close()
            position = self._workers.index(worker)
            if self._closing:
                self._workers.remove(worker)
            else:
                replacement = self._start(worker.index)
                self._workers[position] = replacement
                for key, opening in self._openings.items():
                    replacement.inbox.put((_OPEN, 0, key, (opening,)))
            self._cond.notify_all()
        for job, done in failed:
            done(job, False, error)

    def _fail_pending(self, worker: _Worker, error: OffloadError) -> list[tuple[int, Done]]:
        del error  # the caller calls each done with it, outside the lock
        failed = [
            (job, self._jobs.pop(job)[1]) for job in sorted(worker.pending) if job in self._jobs
        ]
        worker.pending.clear()
        return failed


def value_error(value: Any) -> OffloadError:
    return value if isinstance(value, OffloadError) else OffloadError(str(value))


def _settle(future: asyncio.Future[Any], ok: bool, value: Any) -> None:
    if future.done():
        return
    if ok:
        future.set_result(value)
    else:
        future.set_exception(value_error(value))


# ---------------------------------------------------------------------- the process's pool

_POOLS: dict[OffloadSettings, ContentPool] = {}
_POOLS_LOCK = threading.Lock()


def content_pool(settings: OffloadSettings | None = None) -> ContentPool:
    """The process's pool for these settings, started on first use, stopped at exit."""
    settings = settings or OffloadSettings()
    with _POOLS_LOCK:
        pool = _POOLS.get(settings)
        if pool is None:
            pool = _POOLS[settings] = ContentPool(settings)
        return pool


def shutdown_content_pools() -> None:
    with _POOLS_LOCK:
        pools = list(_POOLS.values())
        _POOLS.clear()
    for pool in pools:
        pool.close()


atexit.register(shutdown_content_pools)


# ---------------------------------------------------------------------- batch adapters


class OffloadHasher:
    """The engine's record hasher, run in a worker; keeps each page's links like
    ``tasks.cycle.content.PageCollector`` (``pages``, ``unparsed``)."""

    def __init__(self, pool: Offloader, key: str, *, links: bool = True) -> None:
        self.pool = pool
        self.key = key
        self.links = links
        self.pages: dict[str, PageLinks] = {}
        self.unparsed = 0

    def __call__(self, body: bytes, content_type: str | None, url: str) -> Any:
        return self._digest(body, content_type, url)

    async def _digest(self, body: bytes, content_type: str | None, url: str) -> RecordDigest:
        record_hash, simhash, found, why = await self.pool.submit_async(
            _HASH, self.key, (body, content_type, url, self.links)
        )
        if found is not None:
            self.pages[url] = found
        elif why is not None:
            self.unparsed += 1
            log.debug("links of %s not read: %s", url, why)
        return RecordDigest(record_hash, simhash)


class OffloadWarcWriter(WarcWriter):
    """A batch's ``WarcWriter`` whose records are written by the pool's workers.

    ``write_exchange`` returns a pending location (``PENDING_FILE``, the job id); after
    ``close``, ``resolve`` gives the batch's rows the real file and offset, or none where
    the write failed or the worker's file was never published.
    """

    def __init__(
        self,
        pool: Offloader,
        root: str | Path,
        cycle_id: int,
        *,
        settings: WarcSettings | None = None,
        part: str,
        locations: Mapping[str, tuple[str, int]] | None = None,
        rules: ExtractionRules | None = None,
    ) -> None:
        super().__init__(root, cycle_id, settings=settings, part=part)
        self.pool = pool
        self.key = part
        self.failures = 0
        self._lock2 = threading.Lock()
        self._landed: dict[int, WarcLocation | None] = {}
        pool.open_batch(
            part,
            BatchOpening(
                str(root), int(cycle_id), part, self.settings, dict(locations or {}), rules
            ),
        )

    def write_exchange(
        self,
        url: str,
        *,
        status: int,
        response_headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        request_headers: Iterable[tuple[str, str]] = (),
        method: str = "GET",
        reason: str = "",
        http_version: str = "HTTP/1.1",
        fetched_at: datetime | None = None,
        request_url: str | None = None,
        body_decoded: bool = True,
        remote_ip: str | None = None,
        previous: PayloadRef | None = None,
    ) -> WarcLocation:
        args = {
            "url": url,
            "status": status,
            "response_headers": list(response_headers),
            "body": body,
            "request_headers": list(request_headers),
            "method": method,
            "reason": reason,
            "http_version": http_version,
            "fetched_at": fetched_at,
            "request_url": request_url,
            "body_decoded": body_decoded,
            "remote_ip": remote_ip,
            "previous": previous,
        }
        job = self.pool.submit(_WARC, self.key, (args,), self._done)
        return WarcLocation(PENDING_FILE, job, 0, "pending")

    def _done(self, job: int, ok: bool, value: Any) -> None:
        with self._lock2:
            self._landed[job] = value if ok else None
            if not ok:
                self.failures += 1
                if self.failures == 1:
                    log.error("WARC archiving failed in a worker (rows name no record): %s", value)

    def close(self) -> list[str]:
        if not self._closed:
            self._closed = True
            self.published = self.pool.close_batch(self.key)
        return list(self.published)

    def abort(self) -> None:
        if not self._closed:
            self._closed = True
            self.pool.close_batch(self.key, abort=True)

    def resolve(self, rows: pa.Table) -> pa.Table:
        """``rows`` with each pending location replaced by where the record is (or NULL)."""
        if "warc_file" not in rows.column_names:
            return rows
        files = rows["warc_file"].to_pylist()
        offsets = rows["warc_offset"].to_pylist()
        published = set(self.published)
        with self._lock2:
            landed = dict(self._landed)
        lost = 0
        for i, name in enumerate(files):
            if name != PENDING_FILE:
                continue
            where = landed.get(int(offsets[i]))
            if where is not None and where.file in published:
                files[i], offsets[i] = where.file, where.offset
            else:
                files[i], offsets[i] = None, None
                lost += 1
        if lost:
            log.warning(
                "%s: %d archived exchanges name no WARC record (write failed)", self.key, lost
            )
        schema = rows.schema
        rows = rows.set_column(
            schema.get_field_index("warc_file"),
            schema.field("warc_file"),
            pa.array(files, pa.string()),
        )
        return rows.set_column(
            schema.get_field_index("warc_offset"),
            schema.field("warc_offset"),
            pa.array(offsets, schema.field("warc_offset").type),
        )
