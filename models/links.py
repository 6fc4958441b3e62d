"""Links of a fetched HTML page, resolved and normalized: what discovery feeds on.

Pure (no I/O). The page is parsed with selectolax's lexbor parser (the one
``models.extract`` uses) and decoded the same way (``models.extract.decode_body``).

- ``<a href>`` and ``<area href>`` are links; ``<link>``, scripts, images and forms are not
  pages to crawl.
- The base is the first ``<base href>`` (HTML standard), resolved against the page URL;
  references are resolved by RFC 3986 section 5 (``models.urls.resolve``) and normalized.
- ``rel="nofollow"`` links are skipped, and ``<meta name="robots" content="nofollow">``
  (or ``none``) skips every link of the page. The choice: a site marks with nofollow what it
  does not vouch for (user comments, calendars, faceted filters), which is where crawler
  traps live; a page it wants crawled it lists in its sitemap. ``follow_nofollow=True``
  keeps them.
- Only http(s) links survive normalization (``mailto:``, ``javascript:`` and the like go);
  each URL appears once, in document order, at most ``max_links`` per page.
"""

from __future__ import annotations

import contextlib
import re

from selectolax.lexbor import LexborHTMLParser

from models.extract import decode_body
from models.urls import InvalidURLError, normalize, resolve

MAX_LINKS = 5_000
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_NON_PAGE = re.compile(r"^\s*(?:javascript|mailto|tel|data|about|ftp|file):", re.I)


def links_from_html(
    base_url: str,
    body: bytes | str,
    content_type: str | None,
    *,
    follow_nofollow: bool = False,
    max_links: int = MAX_LINKS,
) -> list[str]:
    """Normalized absolute http(s) URLs the page links to (see the module docstring).

    A body whose content type is given and is not HTML has no links (JSON, images...).
    ``base_url`` is the URL the page was fetched from (after redirects).
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media and media not in _HTML_TYPES:
        return []
    text = body if isinstance(body, str) else decode_body(body, content_type or "text/html")
    tree = LexborHTMLParser(text)
    if not follow_nofollow and _page_says_nofollow(tree):
        return []
    base = normalize(base_url)
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        with contextlib.suppress(InvalidURLError):
            base = resolve(base, (base_node.attributes.get("href") or "").strip())
    seen: dict[str, None] = {}
    for node in tree.css("a[href], area[href]"):
        attrs = node.attributes
        href = attrs.get("href") or ""
        if not href.strip() or href.lstrip().startswith("#") or _NON_PAGE.match(href):
            continue
        if not follow_nofollow and "nofollow" in (attrs.get("rel") or "").lower().split():
            continue
        try:
            url = normalize(resolve(base, href.strip()))
        except InvalidURLError:
            continue
        seen.setdefault(url, None)
        if len(seen) >= max_links:
            break
    return list(seen)


def _page_says_nofollow(tree: LexborHTMLParser) -> bool:
    for meta in tree.css("meta[name][content]"):
        name = (meta.attributes.get("name") or "").strip().lower()
        if name in ("robots", "recrawler"):
            words = {w.strip() for w in (meta.attributes.get("content") or "").lower().split(",")}
            if words & {"nofollow", "none"}:
                return True
    return False
