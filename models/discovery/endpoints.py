"""Structured endpoints: the JSON document a page's data comes from, fetched instead of the page.

A product page is often built from a JSON endpoint (declared in its head as
``<link rel="alternate" type="application/json" href=...>``, or known per host). The endpoint
is smaller and carries no template, ads or counters, so it is the cheaper and steadier thing to
fetch; the page's record is computed from the same fields, so a visit through either says the
same about "changed". Pure (no I/O); the cycle's use is ``tasks.listings.endpoints``.

- ``endpoint_link(body, content_type, url)``: the endpoint a page declares (normalized), or None.
- ``EndpointFields``: one record's field names with a CSS selector for the page and a JSONPath
  for the endpoint; ``rules(host)`` gives the ``ExtractionRules`` pair, and ``record_of(...)``
  the record either representation gives (``models.content.extract.same_record``), whose hash
  is the same for the page and its endpoint at the same version.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from selectolax.lexbor import LexborHTMLParser

from models.content.extract import Record, decode_body, extract, same_record
from models.content.extract_rules import CssRule, ExtractionRules, JsonRule, UrlPattern
from models.discovery.urls import InvalidURLError, normalize, resolve

_JSON_TYPES = ("application/json", "application/ld+json")


@dataclass(frozen=True)
class EndpointFields:
    """A record's fields as read from the page (CSS) and from its endpoint (JSONPath).

    ``endpoint_glob``: the endpoints' URLs (an fnmatch pattern over the normalized URL); the
    CSS rule applies to the host's other pages.
    """

    css: Mapping[str, str]
    json: Mapping[str, str]
    endpoint_glob: str = "*/api/*"
    css_rule: CssRule = field(init=False, repr=False, compare=False)
    json_rule: JsonRule = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if set(self.css) != set(self.json):
            raise ValueError(
                "a page and its endpoint must give the same fields: "
                f"CSS has {sorted(self.css)}, JSON has {sorted(self.json)}"
            )
        object.__setattr__(self, "css_rule", CssRule(dict(self.css)))
        object.__setattr__(self, "json_rule", JsonRule(dict(self.json)))

    def rules(self, host: str) -> ExtractionRules:
        """Rules for one host (``host[:port]`` pattern): the endpoint's first, then the page's."""
        return ExtractionRules(
            (
                (UrlPattern(glob=self.endpoint_glob), self.json_rule),
                (UrlPattern(host=host), self.css_rule),
            )
        )


#: The fields of a schema.org-style product page (microdata) and of its JSON document.
PRODUCT_FIELDS = EndpointFields(
    css={
        "title": "article.product [itemprop=name]",
        "price": "article.product [itemprop=price]::attr(content)",
        "availability": "article.product [itemprop=availability]",
        "body": "article.product [itemprop=description]",
    },
    json={
        "title": "$.title",
        "price": "$.price",
        "availability": "$.availability",
        "body": "$.body",
    },
)


def record_of(
    body: bytes, content_type: str, url: str, fields: EndpointFields = PRODUCT_FIELDS
) -> Record:
    """The record of a page or of its endpoint: the same hash for both at one version."""
    media = content_type.split(";", 1)[0].strip().lower()
    rule = fields.json_rule if media in _JSON_TYPES or media.endswith("+json") else fields.css_rule
    host = url.split("://", 1)[-1].split("/", 1)[0]
    rules = ExtractionRules(((UrlPattern(host=host), rule),))
    return same_record(extract(body, content_type, url, rules))


def endpoint_link(body: bytes, content_type: str | None, url: str) -> str | None:
    """The JSON endpoint the page declares in its head (resolved, normalized), or None."""
    media = (content_type or "").split(";", 1)[0].strip().lower()
    if media not in ("text/html", "application/xhtml+xml", ""):
        return None
    tree = LexborHTMLParser(decode_body(body, content_type or "", html=True))
    head = tree.head
    if head is None:
        return None
    for node in head.css('link[rel~="alternate"][href]'):
        kind = (node.attributes.get("type") or "").split(";", 1)[0].strip().lower()
        if kind in _JSON_TYPES:
            try:
                return normalize(resolve(url, (node.attributes.get("href") or "").strip()))
            except InvalidURLError:
                return None
    return None
