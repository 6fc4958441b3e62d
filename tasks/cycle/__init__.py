"""One recrawl cycle's work without Prefect: plan from the store, split into host batches,
commit, what the cycle learned (links, near-duplicates), per-host limits and crashed-run
claims.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "plan_cycle": "planning",
    "plan_path": "planning",
    "PlanResult": "planning",
    "load_rate_estimates": "estimation",
    "read_estimation_inputs": "estimation",
    "split_plan": "work",
    "cycle_state": "work",
    "work_dir": "work",
    "BatchSpec": "work",
    "CycleCommit": "work",
    "apply_cycle_content": "content",
    "ensure_host_limits": "host_limits",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
