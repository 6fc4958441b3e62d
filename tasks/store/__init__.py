"""The store on disk: the fetch history (Parquet partitioned by cycle, published atomically,
digests beside each file), its per-page statistics, the catalog, the one durable write, and
the store as DataFrames.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "HistoryStore": "history",
    "connect": "history",
    "CatalogStore": "catalog",
    "require_store": "catalog",
    "CatalogInputError": "catalog",
    "open_store": "frames",
    "history": "frames",
    "history_with_urls": "frames",
    "catalog": "frames",
    "plan": "frames",
    "estimates": "frames",
    "show_history": "frames",
    "durable_write": "durable",
    "durable_write_bytes": "durable",
    "durable_write_text": "durable",
    "durable_write_parquet": "durable",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
