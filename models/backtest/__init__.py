"""The policy backtest: simulated webs with exact Poisson changes, recrawl policies (one
registry), learners, and the figures and targets they are judged by. Pure; it never reads
the store.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "run_backtest": "runner",
    "BacktestConfig": "runner",
    "BacktestResult": "runner",
    "format_table": "runner",
    "register_policy": "registry",
    "PolicyContext": "registry",
    "build_workload": "workloads",
    "Workload": "workloads",
    "check_targets": "targets",
    "check_learning_targets": "targets",
    "run_sweep": "sweep",
    "SweepConfig": "sweep",
    "LearningSweep": "sweep",
    "family_web": "families",
    "FAMILIES": "families",
    "DeployedPlannerPolicy": "deployed",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
