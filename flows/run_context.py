"""Logging and artifacts that also work when a task body is called as ``task.fn(...)``.

Inside a Prefect run, log lines go to the run's logger (seen in the UI) and artifacts are
created; called directly (tests, notebooks), the module logger is used and artifacts are
skipped, since there is no run to attach them to.
"""

from __future__ import annotations

import logging
from typing import Any

from prefect import get_run_logger
from prefect.context import TaskRunContext, get_run_context
from prefect.exceptions import MissingContextError

log = logging.getLogger("flows")


def run_logger() -> logging.Logger | logging.LoggerAdapter[Any]:
    """The run's logger inside a flow or task run, else the ``flows`` logger."""
    try:
        return get_run_logger()
    except MissingContextError:
        return log


def in_run() -> bool:
    """True inside a flow or task run (artifacts can be attached)."""
    try:
        get_run_context()
    except MissingContextError:
        return False
    return True


def in_task_run() -> bool:
    try:
        return isinstance(get_run_context(), TaskRunContext)
    except MissingContextError:
        return False
