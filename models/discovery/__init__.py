"""Which URLs enter the catalog: URL normalization (RFC 3986), links of a page, sitemaps parsed
within the protocol's limits, seen sets, trap defenses and per-host caps.

Pure: no Prefect, httpx, DuckDB or I/O; imports only models.
The public face is ``__all__``; each name is imported on first use (``models.lazy_exports``),
so a light module of this wing can be imported alone.
"""

from models.lazy_exports import lazy_exports

_FACES = {
    "normalize": "urls",
    "resolve": "urls",
    "url_id": "urls",
    "url_host": "urls",
    "InvalidURLError": "urls",
    "page_links": "links",
    "parse_sitemap": "sitemap",
    "SitemapEntry": "sitemap",
    "ExactSeenSet": "seen",
    "BloomFilter": "seen",
    "screen_candidates": "admission",
    "Candidate": "admission",
}
__all__ = sorted(_FACES)
__getattr__, __dir__ = lazy_exports(__name__, _FACES)
