"""Two budgets for every fuzz property, and a tally of the inputs each one tried.

Each property runs at a small example count in ``make test`` (the whole fuzz suite in about
half a minute) and at ``LONG_FACTOR`` times that in ``make reliability`` (marked
``long_reliability``, which ``make test`` deselects). ``check`` runs a property under
hypothesis with the chosen count and records how many inputs it was given; the package's
``conftest.py`` prints the tally at the end of the session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

LONG_FACTOR = 40
#: Pass as ``@pytest.mark.parametrize("budget", BUDGETS)``.
BUDGETS = [
    pytest.param(1, id="fast"),
    pytest.param(LONG_FACTOR, id="long", marks=pytest.mark.long_reliability),
]

TRIED: Counter[str] = Counter()


def check(
    name: str,
    examples: int,
    prop: Callable[..., None],
    **strategies: st.SearchStrategy[Any],
) -> None:
    """Run ``prop`` on ``examples`` inputs drawn from ``strategies`` (keyword arguments)."""

    def counted(**kwargs: Any) -> None:
        TRIED[name] += 1
        prop(**kwargs)

    ident = "fuzz_" + "".join(c if c.isalnum() else "_" for c in name)
    counted.__name__ = counted.__qualname__ = ident  # one database key per property
    runner = settings(
        max_examples=examples,
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(given(**strategies)(counted))
    runner()
