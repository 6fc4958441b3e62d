"""One cycle's batch: what a visit costs under each billing model (the one registry of cost
models), and the selection of the batch with its reserved slices (discovery, re-estimation,
verification).

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "select_batch": "select",
    "Slices": "select",
    "Candidates": "select",
    "CyclePlan": "select",
    "PlanningInputError": "select",
    "COST_MODELS": "cost",
    "CostModel": "cost",
    "CostModelName": "cost",
    "health_multiplier": "cost",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
