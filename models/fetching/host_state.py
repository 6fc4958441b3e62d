"""What the fetcher remembers about one host between requests (and between batches).

Pure bookkeeping, no clock of its own: every method takes ``now`` (monotonic seconds) and
durations from the caller. ``HostState`` combines the politeness policies of
``models.fetching.politeness``: when a slot of the host becomes free (pacing gap after each request,
stretched when the adaptive limit is below one), the adaptive limit itself, the pause after
throttling, and the validator trust of ``models.fetching.validators``.
"""

from __future__ import annotations

import bisect
import random
from dataclasses import dataclass, field
from enum import Enum

from models.fetching.politeness import AimdLimit, PacingPolicy, ThrottleBackoff
from models.fetching.validators import ValidatorTrust

#: Weight of the newest latency in the host's moving average.
LATENCY_EWMA_WEIGHT = 0.2
#: Samples needed before a latency counts as "rising" against the average.
LATENCY_MIN_SAMPLES = 3


class Signal(Enum):
    """What one completed request says about the host (routing of slow-down signals)."""

    SUCCESS = "success"  # any answer that is not push-back (2xx, 304, 404, ...)
    THROTTLED = "throttled"  # 429, 503, a challenge page: back off and halve
    TIMEOUT = "timeout"  # halve, keep pacing
    ERROR = "error"  # network error or 5xx: keep the limit, keep pacing
    NOT_SENT = "not_sent"  # the host was never contacted (plan limit, robots denial)


@dataclass
class HostState:
    """Adaptive limit, pacing and back-off state of one host (mutable, one per host)."""

    limit: AimdLimit
    paused_until: float = 0.0
    consecutive_throttles: int = 0
    decreased_at: float = float("-inf")  # when the limit was last halved
    crawl_delay_s: float = 0.0
    latency_ewma: float | None = None
    latency_samples: int = 0
    in_flight: int = 0
    cooling: list[float] = field(default_factory=list)  # sorted times cooled slots free up
    trust: ValidatorTrust = field(default_factory=ValidatorTrust)
    requests: int = 0
    throttles: int = 0
    max_in_flight: int = 0
    lowest_limit: float = float("inf")

    def __post_init__(self) -> None:
        self.lowest_limit = min(self.lowest_limit, self.limit.limit)

    def slot_free_at(self, now: float) -> float | None:
        """Earliest time a request may start (``now`` if it may start now), ignoring pauses.

        None when every slot is in flight: only a completion can free one.
        """
        cooling = self.cooling
        if cooling and cooling[0] <= now:
            del cooling[: bisect.bisect_right(cooling, now)]
        busy = self.in_flight + len(cooling)
        slots = self.limit.slots
        if busy < slots:
            return now
        needed = busy - slots + 1  # cooling slots that must expire first
        if needed > len(cooling):
            return None
        return cooling[needed - 1]

    def start(self) -> None:
        self.in_flight += 1
        self.max_in_flight = max(self.max_in_flight, self.in_flight)

    def finish(
        self,
        now: float,
        duration_s: float,
        signal: Signal,
        *,
        pacing: PacingPolicy,
        backoff: ThrottleBackoff,
        slow_factor: float,
        retry_after_s: float | None,
        rng: random.Random,
        sent_at: float | None = None,
    ) -> None:
        """Account one request that started with ``start()``, routing its signal here.

        Like TCP, one congestion event halves the limit once: a throttle or timeout of a
        request sent before the last decrease (``sent_at``) was caused by the old limit, so
        it extends the pause but does not halve again.
        """
        if self.in_flight <= 0:
            raise RuntimeError("finish() without a matching start()")
        self.in_flight -= 1
        if signal is Signal.NOT_SENT:
            return
        self.requests += 1
        slow = self._observe_latency(duration_s, slow_factor)
        new_event = sent_at is None or sent_at >= self.decreased_at
        if signal in (Signal.THROTTLED, Signal.TIMEOUT) and new_event:
            self.limit = self.limit.after_throttle()
            self.lowest_limit = min(self.lowest_limit, self.limit.limit)
            self.decreased_at = now
        if signal is Signal.THROTTLED:
            self.throttles += 1
            self.consecutive_throttles += new_event or self.consecutive_throttles == 0
            pause = backoff.pause(self.consecutive_throttles, retry_after_s, rng)
            self.paused_until = max(self.paused_until, now + pause)
        elif signal is Signal.SUCCESS:
            self.consecutive_throttles = 0
            if not slow:
                self.limit = self.limit.after_success()
        gap = pacing.gap(duration_s, self.crawl_delay_s) * self.limit.gap_stretch
        bisect.insort(self.cooling, now + gap)

    def _observe_latency(self, duration_s: float, slow_factor: float) -> bool:
        """Update the moving average; True when this latency is well above the host's norm."""
        previous = self.latency_ewma
        self.latency_samples += 1
        if previous is None:
            self.latency_ewma = duration_s
            return False
        self.latency_ewma = previous + LATENCY_EWMA_WEIGHT * (duration_s - previous)
        return self.latency_samples > LATENCY_MIN_SAMPLES and duration_s > slow_factor * previous

    def expected_duration(self) -> float:
        return self.latency_ewma or 0.0

    def seconds_per_request(self, pacing: PacingPolicy) -> float:
        """Expected time one slot spends per request: latency plus the pacing gap."""
        latency = self.expected_duration()
        gap = pacing.gap(latency, self.crawl_delay_s) * self.limit.gap_stretch
        return latency + gap
