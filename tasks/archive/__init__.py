"""Raw responses in WARC files (ISO 28500), written as each exchange completes, read back by
file and offset, and a cycle's archive bookkeeping.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "WarcWriter": "warc",
    "WarcSettings": "warc",
    "read_record": "read",
    "iter_records": "read",
    "verify_file": "read",
    "CycleArchive": "cycle",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
