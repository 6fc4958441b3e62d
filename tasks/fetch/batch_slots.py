"""How many host batches of one worker process fetch at full speed at once.

A batch holds an *active* place while most of its hosts still have work. Once only a few
hosts are left (``FetchSettings.tail_host_share``: typically throttled hosts honouring a
Retry-After, failing hosts timing out, or slow ones pacing by Crawl-delay), it is in its
tail: it keeps fetching those hosts at their own pace, but gives its place back so another
batch starts on healthy hosts. Without this, one failing host per batch held every place
until the batch window ran out while the healthy hosts of the batch had long finished
(BENCHMARKS.md, "Load": 0.43x the healthy hosts' throughput).

What bounds the process is then the threads that run batches (``BATCH_THREADS``, the
flow's task runner): each batch's queue and rows are bounded, so memory stays bounded by
threads x batch size; tail batches are mostly waiting and cost little CPU.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

#: Batches fetching at full speed at once in one process (the flow's old thread pool size).
ACTIVE_BATCHES = 4
#: Threads that run batches: active ones plus batches in their tail. A batch's tail lasts
#: at most its window; with a failing host in every batch the tail is ~5x the active part
#: (BENCHMARKS.md, "Load": 12 threads kept 0.49x of the healthy hosts' throughput, 24 all).
BATCH_THREADS = 6 * ACTIVE_BATCHES


class ActiveBatches:
    """A semaphore whose place a batch can give back before it ends (thread-safe)."""

    def __init__(self, limit: int = ACTIVE_BATCHES) -> None:
        if limit < 1:
            raise ValueError(f"active batches must be >= 1, got {limit}")
        self.limit = limit
        self._places = threading.BoundedSemaphore(limit)
        self._lock = threading.Lock()
        self.active = 0
        self.peak = 0

    @contextmanager
    def hold(self) -> Iterator[Callable[[], None]]:
        """Wait for a place; yield the function that gives it back early (idempotent).

        The place is given back at the latest when the block ends, error or not.
        """
        self._places.acquire()
        with self._lock:
            self.active += 1
            self.peak = max(self.peak, self.active)
        given_back = False

        def give_back() -> None:
            nonlocal given_back
            with self._lock:
                if given_back:
                    return
                given_back = True
                self.active -= 1
            self._places.release()

        try:
            yield give_back
        finally:
            give_back()


_PROCESS = ActiveBatches()


def process_batches() -> ActiveBatches:
    """The process's places (shared by every batch this worker process runs)."""
    return _PROCESS
