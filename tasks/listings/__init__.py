"""Listing pages as change detectors and JSON endpoints in the recrawl cycle: the listing pass
(listings read first, only the items they show changed fetched, the others recorded unchanged;
endpoint hosts' pages fetched through their JSON endpoint) and what the store keeps for it
under ``<root>/listings/``.

I/O without Prefect: may import models and the other tasks wings, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "run_listing_pass": "cycle",
    "apply_listing_summaries": "cycle",
    "listings_pending": "cycle",
    "pass_hosts": "cycle",
    "ListingPass": "cycle",
    "declare_listings": "store",
    "declare_endpoints": "store",
    "EndpointRoute": "store",
    "ListingInputError": "store",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
