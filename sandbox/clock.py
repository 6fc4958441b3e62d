"""The simulated clock the sandbox web renders its pages at.

Simulated time decides *what* a page says (how many real changes have happened); real time
decides *when* the server answers (latency, throttling, timeouts). A test moves simulated time
by hand (``set``, ``advance``) to run 30 days in a second; the ``recrawl sandbox`` command lets
it run with real time at a speed factor. The server reads the clock from its own thread, so
every read and write of the anchor is done under a lock.
"""

from __future__ import annotations

import threading
import time
from datetime import UTC, datetime, timedelta

_DEFAULT_START = datetime(2026, 1, 1, tzinfo=UTC)


class SimClock:
    """Simulated UTC time: set or advanced by the caller, optionally flowing with real time.

    ``speed`` is simulated seconds per real second (0, the default, freezes the clock between
    explicit moves; 86400 runs a day per second).
    """

    def __init__(self, start: datetime | None = None, *, speed: float = 0.0) -> None:
        start = _DEFAULT_START if start is None else start
        _require_aware(start, "start")
        if speed < 0:
            raise ValueError(f"speed must be >= 0 simulated seconds per second, got {speed}")
        self._lock = threading.Lock()
        self._anchor = start.timestamp()
        self._anchor_real = time.monotonic()
        self._speed = float(speed)

    @property
    def speed(self) -> float:
        return self._speed

    def timestamp(self) -> float:
        """Simulated now as POSIX seconds (what the server uses on its hot path)."""
        with self._lock:
            if self._speed == 0.0:
                return self._anchor
            return self._anchor + (time.monotonic() - self._anchor_real) * self._speed

    def now(self) -> datetime:
        """Simulated now, an aware UTC datetime."""
        return datetime.fromtimestamp(self.timestamp(), tz=UTC)

    def set(self, when: datetime) -> None:
        """Jump to ``when`` (an aware datetime; backwards is allowed, pages then un-change)."""
        _require_aware(when, "when")
        with self._lock:
            self._anchor = when.timestamp()
            self._anchor_real = time.monotonic()

    def advance(self, days: float = 0.0, hours: float = 0.0, seconds: float = 0.0) -> datetime:
        """Move forward by the given amount and return the new simulated now."""
        step = timedelta(days=days, hours=hours, seconds=seconds).total_seconds()
        if step < 0:
            raise ValueError(f"advance() moves forward only; got {step} seconds")
        with self._lock:
            now_real = time.monotonic()
            self._anchor += (now_real - self._anchor_real) * self._speed + step
            self._anchor_real = now_real
        return self.now()

    def set_speed(self, speed: float) -> None:
        """Change how fast simulated time flows with real time (keeps the current instant)."""
        if speed < 0:
            raise ValueError(f"speed must be >= 0 simulated seconds per second, got {speed}")
        with self._lock:
            now_real = time.monotonic()
            self._anchor += (now_real - self._anchor_real) * self._speed
            self._anchor_real = now_real
            self._speed = float(speed)

    def __repr__(self) -> str:
        return f"SimClock(now={self.now().isoformat()}, speed={self._speed})"


def _require_aware(when: datetime, name: str) -> None:
    if not isinstance(when, datetime) or when.tzinfo is None:
        raise ValueError(f"{name} must be a timezone-aware datetime, got {when!r}")
