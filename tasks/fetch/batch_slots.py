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

The second half, ``batch_slots``, takes a batch's hosts' Prefect concurrency slots (one
``tag:host:<h>`` limit per host, or one per host shard) through one API client per process.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import TYPE_CHECKING
from uuid import UUID, uuid4

if TYPE_CHECKING:
    from prefect.client.orchestration import SyncPrefectClient
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder

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


# -- the hosts' Prefect concurrency slots, through one client per process -----------------
#
# A batch holds one slot of the limit ``tag:<tag>`` for each of its tags (``host:<h>`` per
# host, or one ``hostshard:<k>``): the server's limits keep two batches of a host apart
# across runs and machines. Prefect's own tag handling (tagging the task run) builds, for
# every task run with a new set of tags, an acquisition service with its own API client,
# a second client for the lease renewal thread and a third for the release, each with a
# TLS context loaded from certifi's bundle (2.5% of a cycle's CPU, issue 19) even when the
# API is plain http. ``batch_slots`` takes the same slots with the same lease semantics
# (all of a batch's limits at once or none, a lease renewed while the batch runs, released
# at its end, expired by the server when the holder dies) through one ``SyncPrefectClient``
# per process, shared by every batch thread.

#: Seconds a lease lasts without renewal (Prefect's task engine uses 60; the server refuses
#: less than 60). A holder killed mid-batch has its slots back when the lease has expired
#: and the server's repossessor has passed (every 15 s by default): 60-75 s.
#: ``RECRAWL_SLOT_LEASE_S`` sets a longer one.
LEASE_S = 60.0
#: The shortest lease the server accepts (``/v2/concurrency_limits/increment-with-lease``).
MIN_LEASE_S = 60.0
#: Renew when this share of the lease has passed (Prefect's own: 0.75).
RENEW_SHARE = 0.75
#: Longest pause between two asks for a taken slot (the server's Retry-After, capped).
MAX_RETRY_S = 10.0


def lease_seconds() -> float:
    """The lease duration: ``RECRAWL_SLOT_LEASE_S`` if set (at least 60 s), else 60 s."""
    import os

    raw = os.environ.get("RECRAWL_SLOT_LEASE_S", "")
    try:
        value = float(raw) if raw else LEASE_S
    except ValueError:
        raise ValueError(f"RECRAWL_SLOT_LEASE_S must be a number of seconds, got {raw!r}") from None
    if value < MIN_LEASE_S:
        raise ValueError(f"RECRAWL_SLOT_LEASE_S must be >= {MIN_LEASE_S:g} s, got {value:g}")
    return value


@dataclass
class SlotStats:
    """What this process's batches spent on slots (read by the orchestration benchmark)."""

    clients: int = 0  # API clients built (one per process and API URL)
    acquisitions: int = 0
    refusals: int = 0  # 423 answers: a slot was taken, asked again later
    renewals: int = 0
    releases: int = 0
    wait_s: float = 0.0  # from the first ask to the grant, summed over batches
    api_s: float = 0.0  # time inside the acquire/renew/release calls themselves


class ProcessSlots:
    """One ``SyncPrefectClient`` per process and API URL, opened on first use.

    A forked child (a worker's flow-run subprocess started by fork) must not share the
    parent's connections: the client is keyed by the process id as well.
    """

    def __init__(self) -> None:
        self._lock = threading.Lock()
        #: one slot call (acquire, renew, release) at a time from this process: side by side,
        #: the local server's SQLite answers some of them 503 (SQLITE_BUSY_SNAPSHOT), and
        #: Prefect's client retries each after 2, 4, 8 s of back-off
        self.calls = threading.Lock()
        self._client: SyncPrefectClient | None = None
        self._key: tuple[int, str] | None = None
        self.stats = SlotStats()

    def client(self) -> SyncPrefectClient:
        import os

        from prefect.client.orchestration import get_client
        from prefect.settings import PREFECT_API_URL

        key = (os.getpid(), str(PREFECT_API_URL.value() or ""))
        with self._lock:
            if self._client is None or self._key != key:
                if self._client is not None and self._key is not None and self._key[0] == key[0]:
                    self._client.__exit__(None, None, None)
                client = get_client(sync_client=True)
                client.__enter__()
                self._client, self._key = client, key
                self.stats.clients += 1
            return self._client

    def close(self) -> None:
        with self._lock:
            if self._client is not None:
                self._client.__exit__(None, None, None)
            self._client, self._key = None, None

    def add(self, **amounts: float) -> None:
        with self._lock:
            for name, amount in amounts.items():
                setattr(self.stats, name, getattr(self.stats, name) + amount)


_SLOTS = ProcessSlots()


def process_slots() -> ProcessSlots:
    return _SLOTS


@contextmanager
def batch_slots(
    tags: Sequence[str],
    holder: UUID | None = None,
    lease_s: float | None = None,
    slots: ProcessSlots | None = None,
) -> Iterator[UUID | None]:
    """Hold one slot of ``tag:<t>`` for every tag; yields the lease id (None: no limits).

    Waits while any of them is taken (all at once or none: two batches waiting for each
    other's hosts cannot deadlock), asking again after the server's Retry-After. Limits
    that do not exist restrict nothing (the run's ``host-limits`` step creates them). The
    lease is renewed by a thread while the block runs and released when it ends, error or
    not; if this process dies, the server frees the slots once the lease has expired.
    ``holder`` names the task run holding them (what ``prefect gcl inspect`` and the
    leaked-slot repair of ``tasks.cycle.host_limits`` count); default a fresh id.
    """
    if not tags:
        yield None
        return
    from prefect.client.schemas.objects import ConcurrencyLeaseHolder

    own = slots or _SLOTS
    client = own.client()
    duration = lease_seconds() if lease_s is None else lease_s
    names = sorted({f"tag:{t}" for t in tags})
    lease = _acquire(
        own, client, names, duration, ConcurrencyLeaseHolder(type="task_run", id=holder or uuid4())
    )
    if lease is None:
        yield None
        return
    stop = threading.Event()
    renewer = threading.Thread(
        target=_renew_until,
        args=(own, client, lease, duration, stop),
        daemon=True,
        name=f"lease-{lease}",
    )
    renewer.start()
    try:
        yield lease
    finally:
        stop.set()
        renewer.join(timeout=30)
        started = time.perf_counter()
        try:
            with own.calls:
                client.release_concurrency_slots_with_lease(lease)
        finally:
            own.add(releases=1, api_s=time.perf_counter() - started)


def _acquire(
    own: ProcessSlots,
    client: SyncPrefectClient,
    names: list[str],
    duration: float,
    holder: ConcurrencyLeaseHolder,
) -> UUID | None:
    import httpx

    first = time.perf_counter()
    refusals = 0
    api_s = 0.0
    while True:
        started = time.perf_counter()
        try:
            with own.calls:
                response = client.increment_concurrency_slots_with_lease(
                    names=names, slots=1, mode="concurrency", lease_duration=duration, holder=holder
                )
        except httpx.HTTPStatusError as exc:
            api_s += time.perf_counter() - started
            if exc.response.status_code != 423:
                raise
            refusals += 1
            retry = float(exc.response.headers.get("Retry-After", "1"))
            time.sleep(min(max(retry, 0.05), MAX_RETRY_S))
            continue
        api_s += time.perf_counter() - started
        body = response.json()
        own.add(
            acquisitions=1,
            refusals=refusals,
            wait_s=time.perf_counter() - first,
            api_s=api_s,
        )
        if not body.get("limits"):  # none of the limits exists: nothing to hold
            return None
        return UUID(str(body["lease_id"]))


def _renew_until(
    own: ProcessSlots,
    client: SyncPrefectClient,
    lease: UUID,
    duration: float,
    stop: threading.Event,
) -> None:
    """Renew the lease every ``RENEW_SHARE`` of its duration until ``stop`` (3 tries each)."""
    while not stop.wait(duration * RENEW_SHARE):
        for attempt in range(3):
            started = time.perf_counter()
            try:
                with own.calls:
                    client.renew_concurrency_lease(lease, lease_duration=duration)
            except Exception:  # a server away for a moment: try again, then give up
                own.add(api_s=time.perf_counter() - started)
                if attempt == 2 or stop.wait(1.0 + attempt):
                    return
                continue
            own.add(renewals=1, api_s=time.perf_counter() - started)
            break
