"""Rendering only where a host needs it: which hosts need a headless browser (judged on a
sample of raw vs rendered pages, remembered under ``<root>/signals/``), and a fetched
batch's rows of those hosts rendered in the bounded browser pool
(``tasks.fetch.render.BrowserPool``), priced by the cost model.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "probe_render_need": "hosts",
    "probe_due_hosts": "hosts",
    "probe_cycle_hosts": "hosts",
    "CycleProbe": "hosts",
    "RenderHosts": "hosts",
    "render_rows": "rows",
    "render_batch_rows": "rows",
    "RenderedRows": "rows",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
