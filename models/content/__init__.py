"""What a fetched page is: its extracted record and the record's hash (what "changed" means),
the volatile noise kept out of it, simhash near-duplicates.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "extract": "extract",
    "Record": "extract",
    "ExtractionRules": "extract_rules",
    "strip_volatile_text": "noise",
    "simhash": "simhash",
    "SimhashIndex": "simhash",
    "near_duplicate_clusters": "simhash",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
