"""The fetch engine: one call fetches a batch politely (robots.txt, pacing, adaptive limits,
guards, conditional requests, retries through admission) and returns one row per URL; every
transport or parser failure is an outcome.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "fetch_batch": "engine",
    "fetch_batch_sync": "engine",
    "FetchRequest": "engine",
    "BatchResult": "engine",
    "EngineState": "engine",
    "FetchSettings": "settings",
    "rows_table": "rows",
    "write_rows_file": "rows",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
