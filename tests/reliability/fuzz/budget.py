"""Two budgets for every fuzz property, and a tally of the inputs each one tried.

Each property names a base example count; ``make test`` runs ``FAST_FACTOR`` times it (the
whole fuzz suite in a quarter of a minute) and ``make reliability`` ``LONG_FACTOR`` times it
(marked ``long_reliability``, which ``make test`` deselects). ``check`` runs a property
under hypothesis with the chosen count, the inputs the fuzzers found failing first
(``explicit``: they reproduce at any count; a quarter of the random inputs alone finds the
rarer ones only about every other run), and records how many inputs it was given; the
package's ``conftest.py`` prints the tally at the end of the session.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

FAST_FACTOR = 0.25
LONG_FACTOR = 40
#: Pass as ``@pytest.mark.parametrize("budget", BUDGETS)``; a property runs base x budget.
BUDGETS = [
    pytest.param(FAST_FACTOR, id="fast"),
    pytest.param(LONG_FACTOR, id="long", marks=pytest.mark.long_reliability),
]

TRIED: Counter[str] = Counter()


def check(
    name: str,
    examples: float,
    prop: Callable[..., None],
    explicit: Sequence[dict[str, Any]] = (),
    **strategies: st.SearchStrategy[Any],
) -> None:
    """Run ``prop`` on the ``explicit`` inputs (keyword arguments), then on ``examples`` inputs
    drawn from ``strategies`` (keyword arguments)."""

    def counted(**kwargs: Any) -> None:
        TRIED[name] += 1
        prop(**kwargs)

    ident = "fuzz_" + "".join(c if c.isalnum() else "_" for c in name)
    counted.__name__ = counted.__qualname__ = ident  # one database key per property
    test = given(**strategies)(counted)
    for kwargs in explicit:
        test = example(**kwargs)(test)
    runner = settings(
        max_examples=max(1, round(examples)),
        deadline=None,
        suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    )(test)
    runner()
