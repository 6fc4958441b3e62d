"""Where idle fetch workers wait: woken one at a time by new work, or all at once at the end.

Workers pull work straight from the frontier; when there is none they park here. A
completion or a retry wakes one parked worker (waking all of them for one free slot would
cost 64 coroutine switches per request); a worker that took work and sees more ready wakes
the next one. One timer, at the earliest time the frontier says something becomes ready
(a pacing gap ends, a pause ends, the deadline), wakes one worker too.
"""

from __future__ import annotations

import asyncio
from collections import deque


class IdleWorkers:
    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        self._parked: deque[asyncio.Future[None]] = deque()
        self._timer: asyncio.TimerHandle | None = None
        self._timer_at: float | None = None
        self.closed = False

    @property
    def parked(self) -> int:
        return len(self._parked)

    async def wait(self, until: float | None) -> None:
        """Park until woken, or until loop time ``until`` (None: no time limit)."""
        if self.closed:
            return
        if until is not None and (self._timer_at is None or until < self._timer_at):
            if self._timer is not None:
                self._timer.cancel()
            self._timer_at = until
            self._timer = self.loop.call_at(until, self._on_timer)
        future: asyncio.Future[None] = self.loop.create_future()
        self._parked.append(future)
        try:
            await future
        finally:
            if not future.done():  # cancelled while parked
                self._parked.remove(future)

    def wake_one(self) -> None:
        while self._parked:
            future = self._parked.popleft()
            if not future.done():
                future.set_result(None)
                return

    def close(self) -> None:
        """Wake everyone for good (the batch is over)."""
        self.closed = True
        if self._timer is not None:
            self._timer.cancel()
        while self._parked:
            future = self._parked.popleft()
            if not future.done():
                future.set_result(None)

    def _on_timer(self) -> None:
        self._timer = None
        self._timer_at = None
        self.wake_one()
