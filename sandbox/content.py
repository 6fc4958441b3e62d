"""What sandbox pages say: real fields per (page, version), volatile noise, and rendering.

A page's *real* fields (title, price, availability, body text) are a pure function of its key
and version, so ground truth is one function call and two requests of the same version agree
field for field. Every response also carries *noise* that is not a change: the server's time,
a rotating ad slot, a session token and CSRF value, an "N people viewing" counter. Noise goes
in its own elements, never inside a real field, so an extractor that reads the real fields
sees a change exactly when the version changed (and a hash of the raw HTML sees one on every
request, which is the point).

The HTML carries the real fields twice, as microdata-style elements and as JSON-LD, the two
ways real product pages expose them. Rendering of the real part is cached per (page, version).
"""

from __future__ import annotations

import json
import random
from dataclasses import dataclass
from functools import lru_cache
from html import escape
from xml.sax.saxutils import escape as xml_escape


def _vocabulary(text: str) -> tuple[str, ...]:
    return tuple(text.split())


_ADJECTIVES = _vocabulary(
    "amber azure brisk calm crimson dapper eager fabled gentle hardy ivory jolly keen lucid "
    "mellow nimble olive plush quiet rustic silver tidy urban vivid woven young zesty"
)
_NOUNS = _vocabulary(
    "kettle lantern backpack blender compass drill easel fountain guitar hammock jacket "
    "keyboard ladder mixer notebook oven pillow quilt router saddle teapot umbrella vase "
    "wallet yoyo"
)
_WORDS = _vocabulary(
    "the a of and to in with for on by from this that these our your every new old fine "
    "strong light heavy quick slow bright soft warm cool steel wood cotton glass paper stone "
    "design finish colour size weight model series edition batch order stock delivery return "
    "warranty service review rating customer store shipping price offer season range kit part "
    "build test quality value daily weekly comfort travel garden kitchen office outdoor home "
    "classic modern compact portable durable simple smart handy reliable elegant practical"
)
AVAILABILITY = ("InStock", "OutOfStock", "PreOrder", "LimitedAvailability")
_AVAILABILITY_WEIGHTS = (0.7, 0.15, 0.05, 0.1)


@dataclass(frozen=True, slots=True)
class PageRecord:
    """The real fields of one page at one version (what a recrawl is meant to keep fresh)."""

    title: str
    price: float
    availability: str
    body: str  # paragraphs separated by a blank line

    def as_dict(self) -> dict[str, object]:
        return {
            "title": self.title,
            "price": self.price,
            "availability": self.availability,
            "body": self.body,
        }


@dataclass(frozen=True, slots=True)
class Noise:
    """Per-response values that change on every request and are not real changes."""

    served_at: str
    session: str
    csrf: str
    ad_slot: int
    viewers: int


@lru_cache(maxsize=32_768)
def page_record(key: int, version: int) -> PageRecord:
    """The real fields of page ``key`` at ``version``: a pure function of both."""
    base = random.Random(key ^ 0x7171)
    name = f"{base.choice(_ADJECTIVES).title()} {base.choice(_NOUNS).title()}"
    model = f"{base.choice('ABCDEFGHKLMNPRSTVXZ')}{base.randint(100, 999)}"
    list_price = round(base.lognormvariate(3.5, 1.0), 2)
    rng = random.Random((key << 24) ^ version ^ 0x3C3C)
    edition = f" ({rng.choice(_ADJECTIVES)} edition)" if rng.random() < 0.3 else ""
    cents = round(max(0.5, list_price * rng.uniform(0.7, 1.3)) * 100)
    # The cents' parity is the version's: every real change moves the price, so a listing's
    # per-item summary (name, price, availability) changes exactly when the record does.
    cents += (cents - version) % 2
    price = cents / 100
    availability = rng.choices(AVAILABILITY, weights=_AVAILABILITY_WEIGHTS)[0]
    paragraphs = [
        " ".join(rng.choices(_WORDS, k=rng.randint(25, 45))).capitalize() + "."
        for _ in range(rng.randint(2, 4))
    ]
    return PageRecord(f"{name} {model}{edition}", price, availability, "\n\n".join(paragraphs))


@dataclass(frozen=True, slots=True)
class Link:
    href: str
    text: str


@lru_cache(maxsize=32_768)
def article_html(key: int, version: int, page: int, links: tuple[Link, ...]) -> tuple[str, str]:
    """The cached real part of a page: (title for <head>, article + links + JSON-LD)."""
    rec = page_record(key, version)
    title = escape(rec.title)
    paragraphs = "".join(f"<p>{escape(p)}</p>\n" for p in rec.body.split("\n\n"))
    nav = "".join(f'<li><a href="{escape(x.href)}">{escape(x.text)}</a></li>\n' for x in links)
    ld = json.dumps(
        {
            "@context": "https://schema.org",
            "@type": "Product",
            "sku": str(page),
            "name": rec.title,
            "description": rec.body,
            "offers": {
                "@type": "Offer",
                "price": f"{rec.price:.2f}",
                "priceCurrency": "EUR",
                "availability": f"https://schema.org/{rec.availability}",
            },
        }
    ).replace("</", "<\\/")
    article = (
        f'<article class="product" itemscope itemtype="https://schema.org/Product" '
        f'data-page="{page}">\n'
        f'<h1 class="title" itemprop="name">{title}</h1>\n'
        f'<p class="price" itemprop="price" content="{rec.price:.2f}">{rec.price:.2f} EUR</p>\n'
        f'<p class="availability" itemprop="availability">{rec.availability}</p>\n'
        f'<div class="description" itemprop="description">\n{paragraphs}</div>\n'
        f"</article>\n"
        f'<nav class="related"><ul>\n{nav}</ul></nav>\n'
        f'<script type="application/ld+json">{ld}</script>\n'
    )
    return title, article


def render_page(
    key: int,
    version: int,
    page: int,
    links: tuple[Link, ...],
    noise: Noise,
    padding: str = "",
    json_link: bool = False,
) -> bytes:
    """The HTML of a page at ``version`` with this response's noise (and optional bulk).

    ``json_link``: the head declares the page's JSON endpoint (``/api/item/<page>.json``).
    """
    title, article = article_html(key, version, page, links)
    alternate = (
        f'<link rel="alternate" type="application/json" href="/api/item/{page}.json">\n'
        if json_link
        else ""
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{title}</title>\n{alternate}"
        f'<meta name="csrf-token" content="{noise.csrf}">\n</head>\n<body>\n'
        f'<header class="site">Sandbox shop · served {noise.served_at} · '
        f'session <span class="session">{noise.session}</span></header>\n<main>\n'
        f"{article}"
        f'<aside class="ad" data-slot="{noise.ad_slot}">Sponsored: offer #{noise.ad_slot}'
        f"</aside>\n"
        f'<p class="viewers">{noise.viewers} people viewing this item</p>\n'
        f"{padding}</main>\n</body></html>\n"
    ).encode()


#: The script of a JavaScript-only page: it builds the same article markup the server sends
#: on a plain host (``article_html``) from a state object, inlined or fetched, so a rendered
#: page gives the same record. ``textContent`` only: no markup is ever parsed from the data.
_BUILD_SCRIPT = """(function () {
  function el(tag, cls, prop, text) {
    var node = document.createElement(tag);
    if (cls) node.className = cls;
    if (prop) node.setAttribute("itemprop", prop);
    if (text !== undefined) node.textContent = text;
    return node;
  }
  function build(d) {
    var a = el("article", "product");
    a.setAttribute("itemscope", "");
    a.setAttribute("itemtype", "https://schema.org/Product");
    a.setAttribute("data-page", String(d.id));
    a.appendChild(el("h1", "title", "name", d.title));
    var price = el("p", "price", "price", d.price.toFixed(2) + " EUR");
    price.setAttribute("content", d.price.toFixed(2));
    a.appendChild(price);
    a.appendChild(el("p", "availability", "availability", d.availability));
    var text = el("div", "description", "description");
    d.body.split("\\n\\n").forEach(function (t) { text.appendChild(el("p", "", "", t)); });
    a.appendChild(text);
    var app = document.getElementById("app");
    app.insertBefore(a, app.firstChild);
    document.title = d.title;
  }
  var inline = document.getElementById("state");
  if (inline) { build(JSON.parse(inline.textContent)); return; }
  fetch(document.getElementById("app").getAttribute("data-src"))
    .then(function (r) { return r.json(); })
    .then(build);
})();
"""


def render_script_page(
    key: int, version: int, page: int, links: tuple[Link, ...], noise: Noise, mode: str
) -> bytes:
    """A JavaScript-only page: an empty shell whose script builds the article.

    ``mode`` ``"inline_json"`` inlines the state (the page's real fields at ``version``) as
    a JSON script element; ``"fetch_json"`` has the script fetch ``/api/item/<page>.json``.
    The navigation links are in the shell either way (as on most script-built sites).
    """
    nav = "".join(f'<li><a href="{escape(x.href)}">{escape(x.text)}</a></li>\n' for x in links)
    if mode == "inline_json":
        doc = page_record(key, version).as_dict()
        doc["id"] = page
        state = json.dumps(doc).replace("</", "<\\/")
        data = f'<script type="application/json" id="state">{state}</script>\n'
        app = '<div id="app"></div>\n'
    elif mode == "fetch_json":
        data = ""
        app = f'<div id="app" data-src="/api/item/{page}.json"></div>\n'
    else:
        raise ValueError(f"not a script rendering mode: {mode!r}")
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Sandbox shop</title>\n"
        f'<meta name="csrf-token" content="{noise.csrf}">\n</head>\n<body>\n'
        f'<header class="site">Sandbox shop · served {noise.served_at} · '
        f'session <span class="session">{noise.session}</span></header>\n<main>\n'
        f"{app}"
        f'<nav class="related"><ul>\n{nav}</ul></nav>\n'
        f'<p class="viewers">{noise.viewers} people viewing this item</p>\n'
        f"</main>\n{data}<script>{_BUILD_SCRIPT}</script>\n</body></html>\n"
    ).encode()


def render_item_json(key: int, version: int, page: int, noise: Noise) -> bytes:
    """The JSON endpoint: the same real fields, plus a ``meta`` object of noise."""
    doc = page_record(key, version).as_dict()
    doc["id"] = page
    doc["currency"] = "EUR"
    doc["meta"] = {
        "served_at": noise.served_at,
        "request_id": noise.session,
        "viewers": noise.viewers,
    }
    return json.dumps(doc).encode()


@lru_cache(maxsize=1_024)
def huge_padding(key: int, size: int) -> str:
    """Deterministic bulk (a long specification table) that makes a page about ``size`` bytes."""
    rng = random.Random(key ^ 0xB16)
    rows: list[str] = ['<table class="specs">\n']
    total = 0
    n = 0
    while total < size:
        row = (
            f"<tr><td>spec {n}</td><td>{rng.choice(_WORDS)} {rng.choice(_WORDS)} "
            f"{rng.randint(1, 10_000)}</td></tr>\n"
        )
        rows.append(row)
        total += len(row)
        n += 1
    rows.append("</table>\n")
    return "".join(rows)


def render_challenge(noise: Noise) -> bytes:
    """A bot-challenge page (answered with 200 by hosts that challenge instead of 429)."""
    return (
        "<!doctype html>\n<html><head><title>Just a moment...</title></head><body>\n"
        '<div id="challenge" class="bot-challenge">Checking your browser before accessing '
        f"this site. Please enable JavaScript and cookies.</div>\n<p>Ray ID: {noise.session}"
        "</p>\n</body></html>\n"
    ).encode()


@lru_cache(maxsize=32_768)
def listing_item_html(key: int, version: int, page: int) -> str:
    """One item of a category page: its summary (name, price, availability) and link."""
    rec = page_record(key, version)
    return (
        f'<li class="item" data-item="{page}"><a class="item-link" href="/p/{page}">'
        f'<span class="name">{escape(rec.title)}</span></a> '
        f'<span class="price" data-price="{rec.price:.2f}">{rec.price:.2f} EUR</span> '
        f'<span class="availability">{rec.availability}</span></li>\n'
    )


def render_listing(category: int, items: list[str], pages: int, noise: Noise) -> bytes:
    """A category page: one summary per item (``listing_item_html``), a pager, noise."""
    pager = "".join(
        f'<a class="page" href="/c/{k}">{k + 1}</a> ' for k in range(pages) if k != category
    )
    return (
        f'<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Category {category + 1} · Sandbox shop</title>\n"
        f'<meta name="csrf-token" content="{noise.csrf}">\n</head>\n<body>\n'
        f'<header class="site">Sandbox shop · served {noise.served_at} · '
        f'session <span class="session">{noise.session}</span></header>\n<main>\n'
        f'<h1>Category {category + 1}</h1>\n<ul class="listing" data-category="{category}">\n'
        f"{''.join(items)}</ul>\n"
        f'<nav class="pager">{pager}</nav>\n'
        f'<aside class="ad" data-slot="{noise.ad_slot}">Sponsored: offer #{noise.ad_slot}'
        f"</aside>\n</main>\n</body></html>\n"
    ).encode()


def render_home(base: str, first_pages: list[int], categories: int = 0) -> bytes:
    """A host's home page: links to its first pages, its category pages (if any), its
    sitemap and (in the head) its feed."""
    items = "".join(f'<li><a href="/p/{j}">Item {j}</a></li>\n' for j in first_pages)
    items += "".join(f'<li><a href="/c/{k}">Category {k + 1}</a></li>\n' for k in range(categories))
    return (
        "<!doctype html>\n<html><head><title>Sandbox shop</title>"
        '<link rel="alternate" type="application/atom+xml" title="Changes" href="/feed.xml">'
        "</head><body>\n"
        f"<h1>Sandbox shop at {escape(base)}</h1>\n<ul>\n{items}</ul>\n"
        '<p><a href="/sitemap.xml">Sitemap</a></p>\n</body></html>\n'
    ).encode()


def render_robots(base: str, crawl_delay_s: float | None) -> bytes:
    """The default robots.txt: everything but /private/ allowed, with the sitemap."""
    lines = ["User-agent: *", "Disallow: /private/"]
    if crawl_delay_s is not None:
        lines.append(f"Crawl-delay: {crawl_delay_s:g}")
    lines += ["", f"Sitemap: {base}/sitemap.xml", ""]
    return "\n".join(lines).encode()


def render_atom_feed(base: str, entries: list[tuple[int, str]], updated: str) -> bytes:
    """An Atom feed of ``(page, updated)``: the host's most recently changed items."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n<feed xmlns="http://www.w3.org/2005/Atom">\n'
        f"<title>Sandbox shop changes</title><id>{xml_escape(base)}/feed.xml</id>"
        f"<updated>{updated}</updated>\n"
    ]
    for j, stamp in entries:
        url = xml_escape(f"{base}/p/{j}")
        parts.append(
            f'<entry><title>Item {j}</title><id>{url}</id><link href="{url}"/>'
            f"<updated>{stamp}</updated></entry>\n"
        )
    parts.append("</feed>\n")
    return "".join(parts).encode()


def render_sitemap_index(entries: list[tuple[str, str | None]]) -> bytes:
    """A sitemap index listing ``(loc, lastmod)`` child sitemaps."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<sitemapindex xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for loc, lastmod in entries:
        mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
        parts.append(f"<sitemap><loc>{xml_escape(loc)}</loc>{mod}</sitemap>\n")
    parts.append("</sitemapindex>\n")
    return "".join(parts).encode()


def render_urlset(entries: list[tuple[str, str | None]]) -> bytes:
    """A sitemap of ``(loc, lastmod)`` URLs (uncompressed; the server gzips the file)."""
    parts = [
        '<?xml version="1.0" encoding="UTF-8"?>\n'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">\n'
    ]
    for loc, lastmod in entries:
        mod = f"<lastmod>{lastmod}</lastmod>" if lastmod else ""
        parts.append(f"<url><loc>{xml_escape(loc)}</loc>{mod}</url>\n")
    parts.append("</urlset>\n")
    return "".join(parts).encode()
