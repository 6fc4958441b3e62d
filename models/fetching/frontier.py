"""The frontier of one fetch batch: per-host queues, admission control, dispatch, shedding.

Mercator's design in miniature. Each host has its own lane (a back queue) holding its URLs in
priority order; a lane is *ready* when its host may receive another request (a slot is free,
the pacing gap has passed, no throttle pause is running) and *waiting* on a timer otherwise.
``next_dispatch`` hands out the head of the ready lane with the highest head priority, so a
slow or throttled host only ever delays itself, and when time runs short it is the lowest
priority URLs that are left over. Ties go to the lane admitted first, which keeps a few hosts
busy until they are done instead of touching every host in turn (their keep-alive
connections then get reused).

Everything is bounded: a lane holds at most ``max_host_queue`` URLs and a batch at most
``max_urls``; beyond that ``admit`` says no (an admission rejection, counted) and the caller
records the URL as shed. Retries come back through the same ``admit`` with a not-before time,
so they wait for the same host slots as first attempts. A plan-level gate (the scraping API's
own concurrency limit) is checked before any lane, and never touches a host's state.

Pure: no I/O, no clock. Callers pass ``now`` (monotonic seconds).
"""

from __future__ import annotations

import bisect
import heapq
import math
import random
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from models.fetching.host_state import HostState, Signal
from models.fetching.politeness import AimdLimit, PacingPolicy, ThrottleBackoff


@dataclass(slots=True)
class WorkItem:
    """One unit of work: a page (``index`` = its row in the batch) or a robots.txt fetch."""

    index: int
    url: str
    host: str
    priority: float = 0.0
    kind: str = "page"  # "page" | "robots"
    attempts: int = 0
    not_before: float = 0.0
    enqueued_at: float = 0.0
    seq: int = 0
    via_plan: bool = False  # holds a slot of the plan gate while in flight
    sent_at: float | None = None  # when it was last dispatched
    last_for_host: bool = False  # nothing else of its host waits: its connection may close
    in_flight: bool = False  # dispatched and not completed yet
    queued: bool = False  # waiting in a lane (pending or delayed)
    origin: str = ""  # scheme://netloc of a page, set by the caller (robots.txt rules' key)


@dataclass(frozen=True, slots=True)
class Shed:
    item: WorkItem
    reason: str


class PlanGate:
    """Global adaptive limit on requests in flight to a scraping API (the plan's cap).

    A plan-level 429 halves it and pauses it briefly; successes grow it back additively up to
    the configured ceiling; a 509 (credits spent) stops it for good.
    """

    def __init__(self, ceiling: int, pause_s: float) -> None:
        self.limit = AimdLimit(float(ceiling), 1.0, float(ceiling))
        self.pause_s = pause_s
        self.in_flight = 0
        self.paused_until = 0.0
        self.stopped = False
        self.throttles = 0
        self.lowest_limit = float(ceiling)

    def open_at(self, now: float) -> float | None:
        """When another request may go out (``now`` if it may now); None: wait or stopped."""
        if self.stopped or self.in_flight >= self.limit.slots:
            return None
        return max(now, self.paused_until)

    def acquire(self) -> None:
        self.in_flight += 1

    def release(self, *, throttled: bool, success: bool, now: float) -> None:
        self.in_flight -= 1
        if throttled:
            self.throttles += 1
            self.limit = self.limit.after_throttle()
            self.lowest_limit = min(self.lowest_limit, self.limit.limit)
            self.paused_until = max(self.paused_until, now + self.pause_s)
        elif success:
            self.limit = self.limit.after_success()


class HostLane:
    """One host's queue within a batch (its state lives on across batches)."""

    __slots__ = (
        "delayed",
        "host",
        "order",
        "pending",
        "ready_since",
        "robots_busy",
        "robots_job",
        "state",
        "version",
    )

    def __init__(self, host: str, state: HostState, order: int) -> None:
        self.host = host
        self.state = state
        self.order = order
        self.version = 0
        # Sorted ascending by (priority, -seq): pop() yields the highest priority, FIFO.
        self.pending: list[tuple[float, int, WorkItem]] = []
        self.delayed: list[tuple[float, int, WorkItem]] = []  # heap by not_before
        self.robots_job: WorkItem | None = None  # must run (alone) before any page
        self.robots_busy = False  # the robots job is in flight
        self.ready_since = 0.0  # when the lane last became ready (for the dispatch lag)

    def waiting(self) -> int:
        robots = self.robots_job is not None and not self.robots_busy
        return len(self.pending) + len(self.delayed) + robots

    def promote(self, now: float) -> None:
        """Move retries whose backoff has passed into the priority queue."""
        while self.delayed and self.delayed[0][0] <= now:
            _, _, item = heapq.heappop(self.delayed)
            bisect.insort(self.pending, (item.priority, -item.seq, item))

    def head_priority(self) -> float:
        """Priority of what the lane would send next (a robots.txt job stands in for the
        host's best page, so it runs just before that page, on the same connection)."""
        if self.pending:
            return self.pending[-1][0]
        return math.inf if self.robots_job is not None else -math.inf


class BatchFrontier:
    """Host lanes of one batch plus the ready/waiting schedule over them."""

    def __init__(
        self,
        *,
        pacing: PacingPolicy,
        backoff: ThrottleBackoff,
        slow_factor: float,
        new_host_state: Callable[[str], HostState],
        max_host_queue: int,
        max_urls: int,
        plan_gate: PlanGate | None = None,
        deadline: float | None = None,
        rng: random.Random | None = None,
    ) -> None:
        self.pacing = pacing
        self.backoff = backoff
        self.slow_factor = slow_factor
        self.new_host_state = new_host_state
        self.max_host_queue = max_host_queue
        self.max_urls = max_urls
        self.plan_gate = plan_gate
        self.deadline = deadline
        self.rng = rng or random.Random()
        self.lanes: dict[str, HostLane] = {}
        self._ready: list[tuple[float, int, int, HostLane]] = []
        self._timers: list[tuple[float, int, int, HostLane]] = []
        self._seq = 0
        self.waiting = 0
        self.in_flight = 0
        self.admitted = 0
        self.rejections = 0
        self.retries = 0
        self.max_waiting = 0
        self.max_dispatch_lag = 0.0  # longest a ready lane waited for a worker
        self._shed: list[Shed] = []
        # Every admission by age, stale entries dropped when seen (oldest_waiting_age).
        self._ages: list[tuple[float, int, WorkItem]] = []

    # ------------------------------------------------------------------ admission

    def lane(self, host: str) -> HostLane:
        lane = self.lanes.get(host)
        if lane is None:
            lane = HostLane(host, self.new_host_state(host), len(self.lanes))
            self.lanes[host] = lane
        return lane

    def admit(self, item: WorkItem, now: float) -> bool:
        """Queue a first attempt or a retry (``item.not_before`` > now delays it).

        False is an admission rejection (the host's lane or the batch is full): the caller
        decides what the item becomes.
        """
        lane = self.lane(item.host)
        if lane.waiting() >= self.max_host_queue or self.waiting >= self.max_urls:
            self.rejections += 1
            return False
        self._seq += 1
        item.seq = self._seq
        item.enqueued_at = now
        item.queued = True
        heapq.heappush(self._ages, (now, item.seq, item))
        if item.attempts:
            self.retries += 1
        if item.not_before > now:
            heapq.heappush(lane.delayed, (item.not_before, item.seq, item))
        else:
            bisect.insort(lane.pending, (item.priority, -item.seq, item))
        self.admitted += 1
        self._count_waiting(+1)
        self._schedule(lane, now)
        return True

    def admit_many(self, items: list[WorkItem], now: float) -> list[WorkItem]:
        """Admit a batch's first attempts at once (one sort per host); returns the rejected."""
        rejected = []
        touched: dict[str, HostLane] = {}
        for item in items:
            lane = self.lane(item.host)
            if lane.waiting() >= self.max_host_queue or self.waiting >= self.max_urls:
                self.rejections += 1
                rejected.append(item)
                continue
            self._seq += 1
            item.seq = self._seq
            item.enqueued_at = now
            item.queued = True
            heapq.heappush(self._ages, (now, item.seq, item))
            lane.pending.append((item.priority, -item.seq, item))
            touched[lane.host] = lane
            self.admitted += 1
            self._count_waiting(+1)
        for lane in touched.values():
            lane.pending.sort(key=_pending_key)
            self._schedule(lane, now)
        return rejected

    def require_robots(self, host: str, url: str, now: float) -> None:
        """Fetch robots.txt of ``host`` before any of its pages (one job, alone on the lane)."""
        lane = self.lane(host)
        if lane.robots_job is None:
            self._seq += 1
            lane.robots_job = WorkItem(-1, url, host, math.inf, "robots", seq=self._seq)
            lane.robots_job.enqueued_at = now
            lane.robots_busy = False
            self._count_waiting(+1)
            self._schedule(lane, now)

    def _count_waiting(self, delta: int) -> None:
        self.waiting += delta
        self.max_waiting = max(self.max_waiting, self.waiting)

    # ------------------------------------------------------------------ scheduling

    def _ready_time(self, lane: HostLane, now: float) -> float | None:
        lane.promote(now)
        job = lane.robots_job
        if lane.robots_busy:  # robots.txt in flight: pages wait for it
            return None
        if job is None and not lane.pending:
            if not lane.delayed:
                return None
            earliest = lane.delayed[0][0]
        else:
            earliest = now
        state = lane.state
        free = state.slot_free_at(now)
        if free is None:
            return None
        return max(earliest, free, state.paused_until)

    def _schedule(self, lane: HostLane, now: float) -> None:
        lane.version += 1
        when = self._ready_time(lane, now)
        if when is None:
            return
        if when <= now:
            lane.ready_since = now
            heapq.heappush(self._ready, (-lane.head_priority(), lane.order, lane.version, lane))
        else:
            heapq.heappush(self._timers, (when, lane.order, lane.version, lane))

    def _fire_timers(self, now: float) -> None:
        timers = self._timers
        while timers and timers[0][0] <= now:
            _, _, version, lane = heapq.heappop(timers)
            if version == lane.version:
                self._schedule(lane, now)

    def next_dispatch(self, now: float) -> WorkItem | None:
        """The next item to send now, its host slot taken; None if nothing may go now."""
        self._fire_timers(now)
        gate = self.plan_gate
        if gate is not None and gate.open_at(now) != now:
            return None
        ready = self._ready
        while ready:
            _, _, version, lane = heapq.heappop(ready)
            if version != lane.version:
                continue
            if self.deadline is not None and self._misses_deadline(lane, now):
                self._shed_lane(lane, "batch window closing: would finish after the deadline")
                continue
            self.max_dispatch_lag = max(self.max_dispatch_lag, now - lane.ready_since)
            item = self._take(lane)
            item.sent_at = now
            item.in_flight = True
            item.last_for_host = not lane.waiting()
            state = lane.state
            state.start()
            self.in_flight += 1
            if state.in_flight >= state.limit.slots:
                # Every slot is taken: only a completion can make the lane ready, and it
                # reschedules it; _schedule would find no time (slot_free_at is None).
                lane.version += 1
                lane.promote(now)
            else:
                self._schedule(lane, now)
            if gate is not None:
                gate.acquire()
                item.via_plan = True
            return item
        return None

    def _take(self, lane: HostLane) -> WorkItem:
        job = lane.robots_job
        if job is not None:
            lane.robots_busy = True
            self._count_waiting(-1)
            return job
        _, _, item = lane.pending.pop()
        item.queued = False
        self._count_waiting(-1)
        return item

    def has_ready(self) -> bool:
        """Whether some lane may be ready now (a cheap hint: entries may be stale)."""
        return bool(self._ready)

    def next_wakeup(self, now: float) -> float | None:
        """When something may become ready without a completion (None: only completions)."""
        times = []
        while self._timers and self._timers[0][2] != self._timers[0][3].version:
            heapq.heappop(self._timers)
        if self._timers:
            times.append(self._timers[0][0])
        gate = self.plan_gate
        if gate is not None and not gate.stopped and gate.paused_until > now:
            times.append(gate.paused_until)
        if self.deadline is not None and self.waiting:
            times.append(self.deadline)
        return min(times) if times else None

    # ------------------------------------------------------------------ completion

    def complete(
        self,
        item: WorkItem,
        now: float,
        duration_s: float,
        signal: Signal,
        *,
        retry_after_s: float | None = None,
        plan_throttled: bool = False,
    ) -> None:
        """Account a dispatched item: host pacing and AIMD, the plan gate, robots gating."""
        if not item.in_flight:
            raise RuntimeError(f"complete() of an item that is not in flight: {item.url}")
        item.in_flight = False
        lane = self.lanes[item.host]
        lane.state.finish(
            now,
            duration_s,
            signal,
            pacing=self.pacing,
            backoff=self.backoff,
            slow_factor=self.slow_factor,
            retry_after_s=retry_after_s,
            rng=self.rng,
            sent_at=item.sent_at,
        )
        self.in_flight -= 1
        if item.via_plan and self.plan_gate is not None:
            item.via_plan = False
            self.plan_gate.release(
                throttled=plan_throttled, success=signal is Signal.SUCCESS, now=now
            )
        if item.kind == "robots" and lane.robots_job is item:
            lane.robots_busy = False
            if plan_throttled:  # the API refused it: fetch it again once the gate opens
                self._count_waiting(+1)
            else:
                lane.robots_job = None
        self._schedule(lane, now)

    def stop_plan(self) -> None:
        """The plan is exhausted (scraping API credits): nothing more may be sent."""
        if self.plan_gate is not None:
            self.plan_gate.stopped = True

    # ------------------------------------------------------------------ shedding

    def _misses_deadline(self, lane: HostLane, now: float) -> bool:
        assert self.deadline is not None
        return now + lane.state.expected_duration() > self.deadline

    def _shed_lane(self, lane: HostLane, reason: str) -> None:
        for item in self._drain(lane):
            self._shed.append(Shed(item, reason))

    def _drain(self, lane: HostLane) -> Iterator[WorkItem]:
        items = [entry[2] for entry in lane.pending] + [entry[2] for entry in lane.delayed]
        if lane.robots_job is not None and not lane.robots_busy:
            lane.robots_job = None
            self._count_waiting(-1)
        lane.pending.clear()
        lane.delayed.clear()
        for item in items:
            item.queued = False
        self._count_waiting(-len(items))
        lane.version += 1
        yield from items

    def drain_host(self, host: str) -> list[WorkItem]:
        """Remove every waiting page of one host (e.g. robots.txt disallows all)."""
        lane = self.lanes.get(host)
        if lane is None:
            return []
        return [item for item in self._drain(lane) if item.kind == "page"]

    def drain_all(self) -> list[WorkItem]:
        """Remove every waiting page of every host (the batch stops)."""
        return [i for lane in self.lanes.values() for i in self._drain(lane) if i.kind == "page"]

    def shed_for_window(self, now: float) -> None:
        """Shed what cannot be done before the deadline, lowest priority first, per host.

        A host paused past the deadline loses everything; otherwise a host whose remaining
        URLs would take (latency + pacing gap) per request per slot beyond the deadline
        keeps only as many of its highest-priority URLs as fit. Retries whose backoff ends
        after the deadline are dropped too (their last attempt stands).
        """
        deadline = self.deadline
        if deadline is None:
            return
        for lane in self.lanes.values():
            if not lane.waiting():
                continue
            state = lane.state
            if now >= deadline or state.paused_until >= deadline:
                why = "batch window over" if now >= deadline else "host paused past the window"
                self._shed_lane(lane, why)
                continue
            late = [e for e in lane.delayed if e[0] >= deadline]
            if late:
                lane.delayed = [e for e in lane.delayed if e[0] < deadline]
                heapq.heapify(lane.delayed)
                self._count_waiting(-len(late))
                for entry in late:
                    entry[2].queued = False
                self._shed.extend(Shed(e[2], "retry backoff ends after the window") for e in late)
            if state.latency_samples == 0 or not lane.pending:
                self._schedule(lane, now)
                continue
            per_request = state.seconds_per_request(self.pacing)
            start = max(now, state.paused_until, state.slot_free_at(now) or now)
            room = deadline - start - state.expected_duration()
            rounds = math.floor(room / max(per_request, 1e-9)) + 1 if room >= 0 else 0
            fits = rounds * state.limit.slots
            excess = len(lane.pending) - max(0, fits)
            if excess > 0:
                dropped = lane.pending[:excess]
                del lane.pending[:excess]
                self._count_waiting(-excess)
                for entry in dropped:
                    entry[2].queued = False
                self._shed.extend(
                    Shed(e[2], f"host cannot finish in the window ({per_request:.2f} s/request)")
                    for e in dropped
                )
            self._schedule(lane, now)

    def take_shed(self) -> list[Shed]:
        shed, self._shed = self._shed, []
        return shed

    # ------------------------------------------------------------------ pressure

    @property
    def idle(self) -> bool:
        return self.waiting == 0 and self.in_flight == 0

    def hosts_with_work(self) -> int:
        """Hosts with a URL waiting or a request in flight (a loop over lanes, not URLs)."""
        return sum(
            1
            for lane in self.lanes.values()
            if lane.pending or lane.delayed or lane.robots_job is not None or lane.state.in_flight
        )

    def oldest_waiting_age(self, now: float) -> float:
        """Age of the oldest waiting page or retry (robots.txt jobs aside), 0 if none.

        A heap of admissions by age: entries of items taken, shed or admitted again since
        are dropped as they reach the top, so each admission is popped at most once
        (amortised O(log n); it used to scan every waiting URL).
        """
        ages = self._ages
        while ages:
            enqueued_at, seq, item = ages[0]
            if item.queued and item.seq == seq:
                return now - enqueued_at
            heapq.heappop(ages)
        return 0.0


def _pending_key(entry: tuple[float, int, WorkItem]) -> tuple[float, int]:
    return entry[0], entry[1]
