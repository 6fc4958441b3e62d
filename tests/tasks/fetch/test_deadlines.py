"""The attempts' shared timer (``tasks.fetch.attempt.Deadlines``): the engine's total limit of
every attempt, on one timer instead of one ``asyncio.timeout`` each."""

from __future__ import annotations

import asyncio

import pytest

from tasks.fetch.attempt import Deadlines

# Every wait below is bounded by this, so a broken timer fails the test instead of hanging it;
# no test asserts how long anything took.
BOUND_S = 30.0


async def _attempt(deadlines: Deadlines, hang: asyncio.Event | None) -> str:
    try:
        with deadlines.watch():
            if hang is not None:
                await hang.wait()  # never set: only the deadline ends it
            await asyncio.sleep(0)
            return "done"
    except TimeoutError:
        return "timeout"


def test_only_the_overdue_attempt_times_out() -> None:
    async def main() -> list[str]:
        deadlines = Deadlines(0.05)
        never = asyncio.Event()
        try:
            runs = [_attempt(deadlines, h) for h in (None, never, None)]
            return await asyncio.wait_for(asyncio.gather(*runs), BOUND_S)
        finally:
            deadlines.close()

    assert asyncio.run(main()) == ["done", "timeout", "done"]


def test_attempts_after_an_expiry_keep_their_own_deadline() -> None:
    """The timer is re-armed for later attempts: a second hung attempt also times out, and
    one that finishes is left alone (its task is not cancelled afterwards)."""

    async def main() -> list[str]:
        deadlines = Deadlines(0.05)
        never = asyncio.Event()
        try:
            first = await asyncio.wait_for(_attempt(deadlines, never), BOUND_S)
            second = await asyncio.wait_for(_attempt(deadlines, None), BOUND_S)
            third = await asyncio.wait_for(_attempt(deadlines, never), BOUND_S)
            await asyncio.sleep(0.1)  # past the finished attempt's deadline: no stray cancel
            return [first, second, third]
        finally:
            deadlines.close()

    assert asyncio.run(main()) == ["timeout", "done", "timeout"]


@pytest.mark.parametrize("expired", [False, True], ids=["alone", "with-an-expiry"])
def test_a_cancellation_from_elsewhere_stays_a_cancellation(expired: bool) -> None:
    """The batch being cancelled is not the attempt's timeout, also when the attempt's
    deadline expired in the same step (the timer cancelled it too, before it ran again)."""

    async def main() -> None:
        deadlines = Deadlines(60.0)
        started = asyncio.Event()

        async def watched() -> None:
            with deadlines.watch():
                started.set()
                await asyncio.Event().wait()

        task = asyncio.create_task(watched())
        await started.wait()
        if expired:
            deadlines._queue[0].deadline = 0.0  # overdue now
            deadlines._expire()  # the timer cancels it ...
        task.cancel()  # ... and the batch does
        with pytest.raises(asyncio.CancelledError):
            await asyncio.wait_for(task, BOUND_S)
        deadlines.close()

    asyncio.run(main())


def test_close_leaves_no_timer_behind() -> None:
    async def main() -> None:
        deadlines = Deadlines(60.0)
        assert await _attempt(deadlines, None) == "done"
        assert deadlines._handle is not None  # armed for the (finished) attempt's deadline
        deadlines.close()
        assert deadlines._handle is None and not deadlines._queue

    asyncio.run(main())


def test_finished_attempts_leave_the_queue() -> None:
    """The queue holds attempts in flight, not every attempt of the batch."""

    async def main() -> int:
        deadlines = Deadlines(60.0)
        for _ in range(1000):
            await _attempt(deadlines, None)
        size = len(deadlines._queue)
        deadlines.close()
        return size

    assert asyncio.run(main()) <= 1
