"""One sample of a cycle's report numbers for the report tests (override what a test needs)."""

from __future__ import annotations

import math
from dataclasses import replace
from typing import Any

from tasks.reports.cycle_report import CycleNumbers


def sample_numbers(cycle_id: int = 1, changes: int = 4, **overrides: Any) -> CycleNumbers:
    """Ten pages planned, fetched and observed for 10 credits; ``changes`` of them changed."""
    numbers = CycleNumbers(
        cycle_id=cycle_id,
        at="",
        budget=10,
        planned_pages=10,
        planned_cost=10,
        fetched=10,
        requests_sent=10,
        observations=10,
        changes_found=changes,
        unchanged=10 - changes,
        first_seen=0,
        failed=0,
        cost=10.0,
        bytes=1000,
        expected_changes=4.0,
        expected_freshness=0.8,
        realized_freshness=math.nan,
        spent_by_slice={"due": 10.0},
    )
    return replace(numbers, **overrides)
