"""Discovery: new URLs from seeds, robots.txt Sitemap lines, sitemaps and fetched pages into
the catalog, each host and the run within deadlines.

I/O without Prefect: may import models, never flows or sandbox.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "discover_sync": "run",
    "DiscoverySettings": "run",
    "DiscoveryReport": "run",
    "SitemapReader": "sitemaps",
    "SitemapSettings": "sitemaps",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
