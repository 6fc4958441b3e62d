"""Budgeted revisit allocation (Cho & Garcia-Molina's optimal policy): how often to visit each
page so the budget buys the most value-weighted freshness, under per-host capacity. Pure
numpy.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "allocate": "allocate",
    "solve": "allocate",
    "Allocation": "allocate",
    "uniform_allocation": "allocate",
    "proportional_allocation": "allocate",
    "AllocationProblem": "problem",
    "AllocationInputError": "problem",
    "Objective": "freshness",
    "freshness": "freshness",
    "age": "freshness",
    "changes_captured": "freshness",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
