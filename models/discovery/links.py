"""Links of a fetched HTML page, resolved and normalized: what discovery feeds on.

Pure (no I/O). The page is parsed with selectolax's lexbor parser (the one
``models.content.extract`` uses) and decoded the same way (``models.content.extract.decode_body``).

- ``<a href>`` and ``<area href>`` are links; ``<link>``, scripts, images and forms are not
  pages to crawl.
- The base is the first ``<base href>`` (HTML standard), resolved against the page URL;
  references are resolved by RFC 3986 section 5 (``models.discovery.urls.resolve``) and normalized.
- ``rel="nofollow"`` links are skipped, and ``<meta name="robots" content="nofollow">``
  (or ``none``) skips every link of the page. The choice: a site marks with nofollow what it
  does not vouch for (user comments, calendars, faceted filters), which is where crawler
  traps live; a page it wants crawled it lists in its sitemap. ``follow_nofollow=True``
  keeps them.
- Only http(s) links survive normalization (``mailto:``, ``javascript:`` and the like go);
  each URL appears once, in document order, at most ``max_links`` per page.

``page_links`` reads the same parse for the page's ``rel="canonical"`` too (only in
``<head>``, resolved against the base): the recrawl cycle takes both from every page it
fetches, so one parse serves discovery and canonicalization.
"""

from __future__ import annotations

import contextlib
import re
from dataclasses import dataclass

from selectolax.lexbor import LexborHTMLParser

from models.content.extract import decode_body
from models.discovery.urls import InvalidURLError, normalize, resolve

MAX_LINKS = 5_000
_HTML_TYPES = ("text/html", "application/xhtml+xml")
_NON_PAGE = re.compile(r"^\s*(?:javascript|mailto|tel|data|about|ftp|file):", re.I)


@dataclass(frozen=True, slots=True)
class PageLinks:
    """What a fetched page points to: its links and its ``rel="canonical"`` (normalized)."""

    links: list[str]
    canonical: str | None = None


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
    return page_links(
        base_url, body, content_type, follow_nofollow=follow_nofollow, max_links=max_links
    ).links


def page_links(
    base_url: str,
    body: bytes | str,
    content_type: str | None,
    *,
    follow_nofollow: bool = False,
    max_links: int = MAX_LINKS,
) -> PageLinks:
    """The page's links (as ``links_from_html``) and its canonical link, from one parse.

    ``canonical`` is the first ``<link rel="canonical" href>`` of ``<head>`` resolved and
    normalized, as written (None if absent or invalid): whether to honour it is
    ``models.discovery.urls.canonical``'s decision (same site only). A page saying ``nofollow``
    still
    has its canonical read: it names the page itself, not a link to follow.
    """
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media and media not in _HTML_TYPES:
        return PageLinks([])
    text = body if isinstance(body, str) else decode_body(body, content_type or "text/html")
    tree = LexborHTMLParser(text)
    base = normalize(base_url)
    base_node = tree.css_first("base[href]")
    if base_node is not None:
        with contextlib.suppress(InvalidURLError):
            base = resolve(base, (base_node.attributes.get("href") or "").strip())
    canonical = _canonical_href(tree, base)
    if not follow_nofollow and _page_says_nofollow(tree):
        return PageLinks([], canonical)
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
    return PageLinks(list(seen), canonical)


def _canonical_href(tree: LexborHTMLParser, base: str) -> str | None:
    """The head's canonical link resolved against ``base`` (the body's does not count:
    anyone who can post HTML on a page could claim it there)."""
    head = tree.head
    node = head.css_first('link[rel~="canonical"][href]') if head is not None else None
    if node is None:
        return None
    href = (node.attributes.get("href") or "").strip()
    if not href:
        return None
    try:
        return normalize(resolve(base, href))
    except InvalidURLError:
        return None


def _page_says_nofollow(tree: LexborHTMLParser) -> bool:
    for meta in tree.css("meta[name][content]"):
        name = (meta.attributes.get("name") or "").strip().lower()
        if name in ("robots", "recrawler"):
            words = {w.strip() for w in (meta.attributes.get("content") or "").lower().split(",")}
            if words & {"nofollow", "none"}:
                return True
    return False
