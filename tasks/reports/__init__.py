"""Reports: a committed cycle's numbers, plots and summary (markdown, and the Prefect artifact
with the plots embedded); a policy backtest's report folder.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "cycle_numbers": "cycle_report",
    "CycleNumbers": "cycle_report",
    "record_cycle": "cycle_report",
    "write_plots": "cycle_report",
    "summary_markdown": "cycle_report",
    "write_backtest_report": "backtest_report",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
