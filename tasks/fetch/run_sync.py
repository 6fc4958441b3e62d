"""Running a coroutine to completion from synchronous code, even under a running loop.

Prefect may call a sync task body in a thread that already runs an event loop (a flow
called from a notebook cell, from an async test, or from a served deployment's runner);
there ``asyncio.run`` fails. The one home for the bridge every ``*_sync`` entry point uses.
"""

from __future__ import annotations

import asyncio
import threading
from collections.abc import Coroutine
from typing import Any, TypeVar

T = TypeVar("T")


def run_coroutine(coro: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(coro)``, or, when this thread already runs a loop, the same in a
    helper thread with a fresh loop (joined: the caller waits as it would have)."""
    try:
        asyncio.get_running_loop()
    except RuntimeError:
        return asyncio.run(coro)
    box: dict[str, Any] = {}

    def target() -> None:
        try:
            box["value"] = asyncio.run(coro)
        except BaseException as exc:
            box["error"] = exc

    thread = threading.Thread(target=target, name="run-coroutine")
    thread.start()
    thread.join()
    if "error" in box:
        raise box["error"]
    return box["value"]  # type: ignore[no-any-return]
