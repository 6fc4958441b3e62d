"""The content pool on a ``dask.distributed`` cluster (issue 21): extraction, hashing, links
and WARC writing of a cycle's batches on Dask workers, with ``ContentPool``'s calls.

``DaskContentPool(address)`` connects to a scheduler (a ``LocalCluster`` in the tests and the
benchmark, ``dask scheduler`` + ``dask worker`` processes across machines); the batch adapters
of ``tasks.cycle.offload`` (``OffloadHasher``, ``OffloadWarcWriter``) use it unchanged.

**Chunks.** A Dask task costs the scheduler and the client milliseconds of CPU (one task per
page cost 40x the engine's CPU per page, BENCHMARKS.md "Whole cycle CPU per page"), so items
are sent in chunks: one task carries up to ``chunk_items`` items (any batches, any kinds),
sent when it is full or ``linger_s`` after its first item arrived (an engine awaiting its
hash never waits longer than that for a chunk to fill); ``close_batch`` sends what is
waiting at once. Each item's answer is its own (an exception in one item is that item's
answer); a chunk Dask could not run fails each of its items. Each Dask
worker process keeps its own WARC writer per batch (files ``<part>-w<token>``, under the same
root: the workers must see the store's folder, a shared filesystem across machines); the
batch's ``open`` and ``close`` run on every worker (``Client.run``), the items as tasks.

Bounds and failures as in ``ContentPool``: at most ``queue_items`` items per worker are
waiting, submitted or being worked and not answered (a submitter waits for room: the
backpressure rule; a chunk is at most ``queue_items`` items); an exception in an item is its
answer (``OffloadError``); a worker that dies loses its items to the scheduler, which either
reruns them elsewhere (extraction: the same answer) or, past Dask's
``distributed.scheduler.allowed-failures``, fails them (``KilledWorker`` becomes the item's
``OffloadError``); a WARC record a rerun writes lands in the new worker's writer, and rows
naming a dead worker's unpublished file name no record. A worker that joins mid-batch has
not seen the batch's opening: its WARC items fail (rows name no record), its hashes work.

Optional dependency: ``dask[distributed]`` (``pip install '.[scale]'``).
"""

from __future__ import annotations

import asyncio
import itertools
import logging
import threading
import time
import uuid
from collections import defaultdict
from importlib import import_module
from typing import Any

from tasks.cycle.offload import (
    _CLOSE,
    BatchOpening,
    Done,
    OffloadError,
    _settle,
    _WorkerState,
)

log = logging.getLogger(__name__)

_STATE: _WorkerState | None = None
_STATE_LOCK = threading.Lock()


def _state() -> _WorkerState:
    """This Dask worker process's batches (writers, rules)."""
    global _STATE
    with _STATE_LOCK:
        if _STATE is None:
            _STATE = _WorkerState(uuid.uuid4().hex[:6])
        return _STATE


def _dask_open(key: str, opening: BatchOpening) -> None:
    _state().open(key, opening)


def _dask_do(kind: int, key: str, payload: tuple[Any, ...]) -> tuple[bool, Any]:
    """One item on a Dask worker; an exception is the answer, not a task failure.

    No lock: extraction is pure, each ``WarcWriter`` serializes its own calls.
    """
    try:
        return True, _state().do(kind, key, payload)
    except Exception as exc:
        return False, f"{type(exc).__name__}: {exc}"


def _dask_do_chunk(items: list[tuple[int, str, tuple[Any, ...]]]) -> list[tuple[bool, Any]]:
    """A chunk of items on a Dask worker, each answered on its own (``_dask_do``)."""
    return [_dask_do(kind, key, payload) for kind, key, payload in items]


#: an item waiting for its chunk: (job, kind, key, payload, done)
_Item = tuple[int, int, str, tuple[Any, ...], Done]


class DaskContentPool:
    """``ContentPool``'s calls on a Dask cluster (see the module docstring)."""

    def __init__(
        self,
        address: str,
        *,
        queue_items: int = 64,
        chunk_items: int = 32,
        linger_s: float = 0.005,
    ) -> None:
        try:
            distributed: Any = import_module("distributed")  # untyped: held as Any
        except ImportError as exc:  # the optional extra
            raise OffloadError(
                "Dask offload needs dask[distributed]: pip install '.[scale]'"
            ) from exc
        if queue_items < 1:
            raise ValueError(f"queue_items must be >= 1, got {queue_items}")
        if chunk_items < 1:
            raise ValueError(f"chunk_items must be >= 1, got {chunk_items}")
        if not linger_s >= 0:
            raise ValueError(f"linger_s must be >= 0, got {linger_s}")
        self._distributed = distributed
        self.client: Any = distributed.Client(address, set_as_default=False)
        self.workers = max(1, len(self.client.scheduler_info()["workers"]))
        self.limit = self.workers * queue_items
        self.chunk_items = min(chunk_items, queue_items)
        self.linger_s = float(linger_s)
        self.chunks_sent = 0
        self._cond = threading.Condition()
        self._in_flight = 0
        self._ids = itertools.count(1)
        self._by_key: dict[str, set[Any]] = defaultdict(set)
        self._waiting: list[_Item] = []
        self._first_at = 0.0
        self._closed = False
        self._lingerer = threading.Thread(target=self._linger, name="dask-chunks", daemon=True)
        self._lingerer.start()

    def in_flight(self) -> int:
        with self._cond:
            return self._in_flight

    def open_batch(self, key: str, opening: BatchOpening) -> None:
        self.client.run(_dask_open, key, opening)

    def submit(self, kind: int, key: str, payload: tuple[Any, ...], done: Done) -> int:
        with self._cond:
            while self._in_flight >= self.limit:
                self._cond.wait(0.1)
            return self._submit(kind, key, payload, done)

    async def submit_async(self, kind: int, key: str, payload: tuple[Any, ...]) -> Any:
        loop = asyncio.get_running_loop()
        future: asyncio.Future[Any] = loop.create_future()

        def done(job: int, ok: bool, value: Any) -> None:
            loop.call_soon_threadsafe(_settle, future, ok, value)

        delay = 0.001
        while True:
            with self._cond:
                if self._in_flight < self.limit:
                    self._submit(kind, key, payload, done)
                    break
            await asyncio.sleep(delay)  # full: the backpressure rule
            delay = min(delay * 2, 0.05)
        return await future

    def close_batch(self, key: str, *, abort: bool = False) -> list[str]:
        with self._cond:
            if any(item[2] == key for item in self._waiting):
                self._send()
            pending = list(self._by_key.pop(key, set()))
        if pending:
            self._distributed.wait(pending)
        answers = self.client.run(_dask_do, _CLOSE, key, (abort,))
        published: list[str] = []
        for worker, (ok, value) in answers.items():
            if ok:
                published.extend(value)
            else:
                log.error("closing WARC files of %s failed on %s: %s", key, worker, value)
        return sorted(published)

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()
        self._lingerer.join(timeout=5)
        self.client.close()

    def _submit(self, kind: int, key: str, payload: tuple[Any, ...], done: Done) -> int:
        """Queue one item for its chunk (the caller holds ``_cond`` and has room)."""
        job = next(self._ids)
        self._in_flight += 1
        self._waiting.append((job, kind, key, payload, done))
        if len(self._waiting) == 1:
            self._first_at = time.monotonic()
            self._cond.notify_all()  # the lingerer times the new chunk
        if len(self._waiting) >= self.chunk_items:
            self._send()
        return job

    def _send(self) -> None:
        """Send the waiting items as one task (the caller holds ``_cond``)."""
        items, self._waiting = self._waiting, []
        if not items:
            return
        self.chunks_sent += 1
        future: Any = self.client.submit(
            _dask_do_chunk, [(kind, key, payload) for _, kind, key, payload, _ in items], pure=False
        )
        keys = {item[2] for item in items}
        for key in keys:
            self._by_key[key].add(future)
        future.add_done_callback(lambda finished: self._landed(finished, items, keys))

    def _landed(self, finished: Any, items: list[_Item], keys: set[str]) -> None:
        with self._cond:
            self._in_flight -= len(items)
            for key in keys:
                self._by_key.get(key, set()).discard(finished)
            self._cond.notify_all()
        if finished.status == "finished":
            answers = finished.result()
            for (job, *_, done), (ok, value) in zip(items, answers, strict=True):
                done(job, ok, value)
        else:
            error = OffloadError(f"Dask chunk failed: {finished.exception()!r}")
            for job, *_, done in items:
                done(job, False, error)

    def _linger(self) -> None:
        """Send a chunk that has waited ``linger_s`` since its first item."""
        with self._cond:
            while not self._closed:
                if not self._waiting:
                    self._cond.wait()
                    continue
                left = self._first_at + self.linger_s - time.monotonic()
                if left > 0:
                    self._cond.wait(left)
                else:
                    self._send()


_POOLS: dict[str, DaskContentPool] = {}
_POOLS_LOCK = threading.Lock()


def dask_content_pool(address: str) -> DaskContentPool:
    """The process's pool on the cluster at ``address`` (one client per process)."""
    with _POOLS_LOCK:
        pool = _POOLS.get(address)
        if pool is None:
            pool = _POOLS[address] = DaskContentPool(address)
        return pool
