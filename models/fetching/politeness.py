"""Per-host politeness as pure policy: pacing delays, adaptive concurrency, backoff.

The fetch engine keeps one of each per host and asks them, at every completion, how many
requests may be in flight and when the next one may start. Nothing here sleeps or reads a
clock: callers pass durations and times in, so every rule can be tested without sockets.

The rules come from the seed articles: one request at a time by default; wait about ten
times the last fetch duration between requests (slow servers automatically get more room);
back off harder on 429/503 and respect Retry-After; adapt the per-host limit like TCP
(additive increase, multiplicative decrease) under a fixed ceiling.
"""

from __future__ import annotations

import math
import random
import re
from dataclasses import dataclass, replace
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime

from models.outcomes import RETRYABLE, RETRYABLE_IF_TRANSIENT


@dataclass(frozen=True)
class PacingPolicy:
    """How long to wait between two requests to one host.

    ``factor`` times the last fetch duration, clamped to ``[min_delay_s, max_delay_s]``, and
    never below the host's Crawl-delay (already capped by the caller).
    """

    factor: float = 10.0
    min_delay_s: float = 1.0
    max_delay_s: float = 30.0

    def __post_init__(self) -> None:
        if self.factor < 0:
            raise ValueError(f"pacing factor must be >= 0, got {self.factor}")
        if not 0 <= self.min_delay_s <= self.max_delay_s:
            raise ValueError(
                f"pacing bounds must satisfy 0 <= min <= max, got "
                f"min={self.min_delay_s}, max={self.max_delay_s}"
            )

    def gap(self, last_duration_s: float, crawl_delay_s: float = 0.0) -> float:
        """Seconds between the end of one request and the start of the next on one slot."""
        base = min(self.max_delay_s, max(self.min_delay_s, self.factor * last_duration_s))
        return max(base, crawl_delay_s)


@dataclass(frozen=True)
class AimdLimit:
    """Adaptive per-host concurrency: additive increase, multiplicative decrease.

    ``limit`` is fractional. Above 1 its integer part is the number of requests allowed in
    flight; below 1 one request is allowed and the pacing gap is stretched by ``1/limit``, so
    halving keeps slowing a host down even when it is already at one request at a time.
    Increase is about one slot per full round of successes, decrease halves, both within
    ``[floor, ceiling]``: overshooting a site's tolerance costs far more than undershooting.
    """

    limit: float = 1.0
    floor: float = 0.125
    ceiling: float = 1.0

    def __post_init__(self) -> None:
        if not 0 < self.floor <= self.ceiling:
            raise ValueError(
                f"AIMD bounds must satisfy 0 < floor <= ceiling, got "
                f"floor={self.floor}, ceiling={self.ceiling}"
            )
        if not self.floor <= self.limit <= self.ceiling:
            raise ValueError(
                f"AIMD limit {self.limit} outside [floor={self.floor}, ceiling={self.ceiling}]"
            )

    @property
    def slots(self) -> int:
        """Requests that may be in flight to the host at once (at least one)."""
        return max(1, int(self.limit))

    @property
    def gap_stretch(self) -> float:
        """Factor applied to the pacing gap: 1 at or above one slot, ``1/limit`` below."""
        return 1.0 if self.limit >= 1.0 else 1.0 / self.limit

    def after_success(self) -> AimdLimit:
        """One success: ``+1/slots`` at or above one slot, ``+floor`` below (additive)."""
        step = 1.0 / math.floor(self.limit) if self.limit >= 1.0 else self.floor
        grown = min(self.ceiling, self.limit + step)
        return self if grown == self.limit else AimdLimit(grown, self.floor, self.ceiling)

    def after_throttle(self) -> AimdLimit:
        """A throttle, challenge or timeout from the host: halve."""
        return replace(self, limit=max(self.floor, self.limit / 2.0))


@dataclass(frozen=True)
class ThrottleBackoff:
    """Pause a host after 429/503: Retry-After when given (capped), else exponential.

    Without Retry-After the pause is ``base_s * 2**(n-1)`` for the n-th consecutive throttle,
    capped at ``cap_s``, with +-``jitter`` relative noise so hosts throttled together do not
    come back together. A success resets the count (the caller's job).
    """

    base_s: float = 60.0
    cap_s: float = 3600.0
    retry_after_cap_s: float = 3600.0
    jitter: float = 0.1

    def __post_init__(self) -> None:
        if not 0 <= self.base_s <= self.cap_s:
            raise ValueError(f"backoff needs 0 <= base <= cap, got {self.base_s}, {self.cap_s}")
        if self.retry_after_cap_s < 0 or not 0 <= self.jitter < 1:
            raise ValueError("retry_after_cap_s must be >= 0 and jitter in [0, 1)")

    def pause(self, consecutive: int, retry_after_s: float | None, rng: random.Random) -> float:
        """Seconds to leave the host alone after its ``consecutive``-th throttle in a row."""
        if consecutive < 1:
            raise ValueError(f"consecutive throttles must be >= 1, got {consecutive}")
        if retry_after_s is not None:
            return min(max(0.0, retry_after_s), self.retry_after_cap_s)
        raw = min(self.cap_s, self.base_s * 2.0 ** min(consecutive - 1, 60))
        return raw * (1.0 + self.jitter * (2.0 * rng.random() - 1.0))


@dataclass(frozen=True)
class RetryPolicy:
    """Exponential backoff with full jitter for retries, and which failures deserve one.

    Never retried: what cannot succeed (4xx other than 408/429, bad URLs, robots denials,
    guard-rail failures, which fail the same way every time).
    """

    max_attempts: int = 3
    base_s: float = 1.0
    cap_s: float = 60.0

    def __post_init__(self) -> None:
        if self.max_attempts < 1:
            raise ValueError(f"max_attempts must be >= 1, got {self.max_attempts}")
        if not 0 <= self.base_s <= self.cap_s:
            raise ValueError(f"retry backoff needs 0 <= base <= cap, got {self.base_s}")

    def delay(self, attempt: int, rng: random.Random) -> float:
        """Wait before attempt ``attempt + 1`` (``attempt`` >= 1 attempts made so far)."""
        ceiling = min(self.cap_s, self.base_s * 2.0 ** min(attempt - 1, 60))
        return ceiling * (0.5 + 0.5 * rng.random())


RETRYABLE_STATUS = frozenset({408, 429, 500, 502, 503, 504})


def is_retryable(outcome: str, status: int | None) -> bool:
    """Whether another attempt could plausibly succeed.

    Network errors (no status) and the transient statuses are; every other status, every
    guard-rail outcome and every robots denial fails the same way each time.
    """
    if outcome in RETRYABLE:
        return True
    if outcome not in RETRYABLE_IF_TRANSIENT:
        return False
    return status is None or status in RETRYABLE_STATUS


def parse_retry_after(value: str | None, now: datetime | None = None) -> float | None:
    """Seconds to wait from a Retry-After header, or None when there is none to honour.

    RFC 9110 section 10.2.3: ``delay-seconds`` (ASCII digits only) or an ``HTTP-date``. Any
    other value (``²`` and other Unicode digits, a sign, a fraction, a date in non-ASCII
    digits) is ignored as if the header were absent; the 429 or 503 still counts. A date in
    the past is 0 s; a delay too long for a float is ``inf`` (callers cap it).
    """
    if value is None:
        return None
    text = value.strip(" \t")
    if not text or not text.isascii():
        return None
    if _DELAY_SECONDS.fullmatch(text):
        return float(text)
    try:
        when = parsedate_to_datetime(text)
    except (TypeError, ValueError, IndexError, OverflowError):
        return None
    if when.tzinfo is None:
        when = when.replace(tzinfo=UTC)
    reference = now if now is not None else datetime.now(UTC)
    return max(0.0, (when - reference).total_seconds())


#: ``delay-seconds = 1*DIGIT`` (RFC 9110 section 10.2.3); ``str.isdigit`` also takes ``²``.
_DELAY_SECONDS = re.compile(r"[0-9]+")
