"""The sandbox's request log: every request a host received, seen from the server's side.

Politeness is checked here, not in the client: a test reads how many requests a host was
serving when each one arrived, how far apart they came, which headers they carried. The server
thread appends and the test thread reads, so both go through one lock. The log is bounded
(oldest entries dropped) so a sandbox left running for hours does not grow without limit.
"""

from __future__ import annotations

import threading
from collections import deque
from dataclasses import dataclass, field

Via = str  # "direct" | "api" | "proxy"


@dataclass(frozen=True, slots=True)
class RequestRecord:
    """One request as a sandbox host saw it.

    ``at`` and ``done`` are ``time.monotonic()`` of the request's arrival (fully read) and of
    its response's end; ``in_flight`` counts the host's requests being served at arrival,
    this one included; ``path`` is the request target in origin form (for the proxy, the
    path of the absolute URL); header names are lower case; ``status`` 499 means the client
    went away before the answer.
    """

    at: float
    done: float
    host: str
    method: str
    path: str
    status: int
    in_flight: int
    headers: dict[str, str] = field(default_factory=dict)
    via: Via = "direct"

    @property
    def duration(self) -> float:
        return self.done - self.at


class RequestLog:
    """A thread-safe, bounded list of :class:`RequestRecord` (oldest dropped first)."""

    def __init__(self, max_entries: int = 1_000_000) -> None:
        if max_entries < 1:
            raise ValueError(f"max_entries must be >= 1, got {max_entries}")
        self._lock = threading.Lock()
        self._entries: deque[RequestRecord] = deque(maxlen=max_entries)

    def add(self, record: RequestRecord) -> None:
        with self._lock:
            self._entries.append(record)

    def entries(self) -> list[RequestRecord]:
        """A snapshot, in order of completion."""
        with self._lock:
            return list(self._entries)

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()

    def __len__(self) -> int:
        with self._lock:
            return len(self._entries)
