"""The sync bridge: a coroutine run to completion from sync code, with or without a loop
already running in the thread (Prefect calls sync task bodies from both).

Each scenario runs in a fresh thread, so it starts with no loop whatever an earlier test
left running in the main thread (Playwright's sync API keeps one there).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import threading
from collections.abc import Callable
from datetime import UTC, datetime
from typing import Any

import pytest

from tasks.fetch.run_sync import run_coroutine


def _fresh_thread(scenario: Callable[[], Any]) -> Any:
    with concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="scenario") as pool:
        return pool.submit(scenario).result()


async def _answer(value: int) -> tuple[int, str]:
    await asyncio.sleep(0)
    return value, threading.current_thread().name


async def _fail() -> None:
    await asyncio.sleep(0)
    raise ValueError("bad input: 3")


def test_without_a_running_loop_it_runs_here():
    value, thread = _fresh_thread(lambda: run_coroutine(_answer(1)))
    assert value == 1 and thread.startswith("scenario")


def test_under_a_running_loop_it_runs_in_a_helper_thread():
    async def caller() -> tuple[int, str]:
        return run_coroutine(_answer(2))  # asyncio.run would raise here

    value, thread = _fresh_thread(lambda: asyncio.run(caller()))
    assert value == 2 and thread == "run-coroutine"


@pytest.mark.parametrize("under_loop", [False, True])
def test_the_coroutines_exception_reaches_the_caller(under_loop):
    async def caller() -> None:
        run_coroutine(_fail())

    with pytest.raises(ValueError, match="bad input: 3"):
        _fresh_thread(lambda: asyncio.run(caller()) if under_loop else run_coroutine(_fail()))


def test_the_signal_refresh_runs_under_a_running_loop(tmp_path):
    """The daily flow's refresh-signals task failed when its flow ran under a loop (a
    notebook, the UI test's browser): an empty store refreshes nothing, from either."""
    from tasks.discovery.signals import refresh_signals_sync

    now = datetime(2026, 1, 1, tzinfo=UTC)

    async def caller():
        return refresh_signals_sync(tmp_path, now)

    under = _fresh_thread(lambda: asyncio.run(caller()))
    assert under == _fresh_thread(lambda: refresh_signals_sync(tmp_path, now))
