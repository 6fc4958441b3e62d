"""The evaluation harness: the demo, whole-loop runs on the sandbox web scored against its
ground truth, the policy backtest as a job, the estimation demo. The only wing that imports
``sandbox``; the production flows never import it.

May import tasks and models; the only importer of sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "run_demo": "demo",
    "run_sandbox_cycles": "sandbox_runs",
    "score_run": "sandbox_runs",
    "run_policy_backtest": "policy_backtest",
    "run_estimation_demo": "estimation_demo",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
