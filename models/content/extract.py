"""A fetched body's record: the fields the user cares about, their hash, text and simhash.

``extract(body, content_type, url, rules)`` is the whole API: it picks the rule for ``url``
(``models.content.extract_rules``), decodes the body, reads the fields and returns a ``Record``.
"Changed" means ``record_hash`` differs between two observations; volatile noise (server
time, ads, session tokens, visitor counters) is kept out of the record so it never counts.

Which rule applies: the first matching entry of ``rules`` decides how the body is read,
whatever its declared type (JSON endpoints are often served as ``text/plain``). Without
one, the content type does (sniffed from the first bytes when missing): HTML gets the
main-text rule, JSON its pruned document (``models.content.noise.prune_volatile_json``), other text
its noise-free text, and anything else (images, PDF) its exact bytes (``content_hash``).

Decoding follows the HTML standard's order: a byte-order mark, else the ``charset`` of the
Content-Type, else (HTML) a ``<meta>`` charset in the first 1024 bytes, else UTF-8; bytes
invalid in that encoding become U+FFFD, never an error. Pure: no I/O, no clock.
"""

from __future__ import annotations

import codecs
import hashlib
import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

from selectolax.lexbor import LexborHTMLParser, LexborNode

from models.content.extract_rules import CssRule, ExtractionRules, JsonRule, MainTextRule
from models.content.noise import collapse_spaces, prune_volatile_json, strip_volatile_text
from models.content.simhash import simhash
from models.discovery.urls import InvalidURLError, normalize, resolve

KINDS = ("html", "json", "text", "binary", "empty")
DEFAULT_RULES = ExtractionRules()

_META_CHARSET = re.compile(
    rb"""<meta[^>]+charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE
)
_CHARSET_PARAM = re.compile(r"""charset\s*=\s*["']?\s*([A-Za-z0-9_.:\-]+)""", re.IGNORECASE)
_BOMS: tuple[tuple[bytes, str], ...] = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
)
# WHATWG Encoding: these labels mean windows-1252 on the web.
_LABEL_ALIASES = {"iso-8859-1": "cp1252", "latin1": "cp1252", "latin-1": "cp1252"}
_LABEL_ALIASES |= {"ascii": "cp1252", "us-ascii": "cp1252", "iso8859-1": "cp1252"}
_DECIMAL = re.compile(r"-?(?:0|[1-9][0-9]*)(?:\.[0-9]+)?")
_TEXT_TYPES = ("text/", "application/xml", "application/javascript", "application/x-ndjson")


@dataclass(frozen=True, slots=True)
class Record:
    """What one fetch found, reduced to what decides "changed".

    ``fields`` are the rule's named values; ``record_hash`` (BLAKE2b-128, hex) is over their
    canonical JSON (sorted keys, compact), so it is stable across processes and versions.
    ``text`` is the normalized, noise-free text ``simhash`` (signed 64-bit) is computed from;
    ``content_hash`` (BLAKE2b-128, hex) is the exact raw body's. ``canonical`` is the page's
    ``rel="canonical"`` link resolved and normalized (None if absent or invalid); follow it
    with ``models.discovery.urls.canonical``. ``missing`` names fields whose selector found nothing.
    """

    fields: dict[str, str]
    text: str
    record_hash: str
    content_hash: str
    simhash: int
    kind: str
    canonical: str | None = None
    missing: tuple[str, ...] = ()


def extract(
    body: bytes, content_type: str, url: str, rules: ExtractionRules = DEFAULT_RULES
) -> Record:
    """The record of ``body`` fetched from ``url`` (normalized) with ``content_type``."""
    if not isinstance(body, bytes | bytearray | memoryview):
        raise TypeError(f"body must be bytes, got {type(body).__name__}")
    body = bytes(body)
    content_hash = hashlib.blake2b(body, digest_size=16).hexdigest()
    rule = rules.rule_for(url)
    media = content_type.split(";", 1)[0].strip().lower()
    if rule is None:
        if not body.strip():
            return _record({}, "", content_hash, "empty")
        kind = _kind(media, body)
        if kind == "html":
            return _from_html(body, content_type, url, rules.default, rules.default, content_hash)
        if kind == "json":
            return _from_json(body, content_type, None, content_hash)
        if kind == "text":
            text = strip_volatile_text(_decode(body, content_type, html=False))
            return _record({"text": text}, text, content_hash, "text")
        return _record({"content_hash": content_hash}, "", content_hash, "binary")
    if isinstance(rule, JsonRule):
        return _from_json(body, content_type, rule, content_hash)
    return _from_html(body, content_type, url, rule, rules.default, content_hash)


def same_record(record: Record) -> Record:
    """``record`` with its field values in the form both of a page's representations share.

    A page and its JSON endpoint carry the same fields written differently: a price is
    ``"12.30"`` in an attribute and ``12.3`` in JSON, a description's paragraphs are
    elements in one and ``"\\n\\n"``-separated in the other. Here every value has its
    whitespace collapsed and a decimal number is written in its shortest form, and the hash
    is taken again, so a ``CssRule`` over the page and a ``JsonRule`` over the endpoint with
    the same field names give the same ``record_hash`` (``models.discovery.endpoints``).
    """
    fields = {name: _same_value(value) for name, value in record.fields.items()}
    return _record(
        fields,
        record.text,
        record.content_hash,
        record.kind,
        record.canonical,
        record.missing,
    )


def _same_value(value: str) -> str:
    text = collapse_spaces(value)
    if _DECIMAL.fullmatch(text):
        number = Decimal(text)
        return format(number.normalize(), "f") if number else "0"
    return text


def decode_body(body: bytes, content_type: str, *, html: bool = True) -> str:
    """The body as text: BOM, else Content-Type charset, else (HTML) meta charset, else UTF-8."""
    return _decode(body, content_type, html=html)


def _kind(media: str, body: bytes) -> str:
    if media in ("text/html", "application/xhtml+xml"):
        return "html"
    if media == "application/json" or media.endswith("+json"):
        return "json"
    if media.startswith(_TEXT_TYPES) or media.endswith("+xml"):
        return "text"
    if media in ("", "application/octet-stream", "unknown/unknown"):
        head = body[:512].lstrip()
        if head[:1] == b"<" and b"<html" in body[:2048].lower():
            return "html"
        if head[:1] in (b"{", b"["):
            return "json"
    return "binary" if media else "text"


def _encoding(body: bytes, content_type: str, *, html: bool) -> tuple[str, int]:
    """(codec name, bytes of BOM to skip)."""
    for bom, name in _BOMS:
        if body.startswith(bom):
            return name, len(bom)
    labels = []
    declared = _CHARSET_PARAM.search(content_type)
    if declared is not None:
        labels.append(declared.group(1))
    meta = _META_CHARSET.search(body[:1024]) if html else None
    if meta is not None:
        labels.append(meta.group(1).decode("ascii"))
    for label in labels:
        name = _LABEL_ALIASES.get(label.lower(), label.lower())
        try:
            codec = codecs.lookup(name).name
        except LookupError:
            continue
        # A meta tag cannot declare UTF-16: the bytes it was read from are ASCII-compatible.
        return ("utf-8" if codec.startswith("utf-16") else codec), 0
    return "utf-8", 0


def _decode(body: bytes, content_type: str, *, html: bool) -> str:
    codec, skip = _encoding(body, content_type, html=html)
    return body[skip:].decode(codec, errors="replace")


def _from_html(
    body: bytes,
    content_type: str,
    url: str,
    rule: CssRule | MainTextRule,
    main: MainTextRule,
    content_hash: str,
) -> Record:
    codec, skip = _encoding(body, content_type, html=True)
    # lexbor reads bytes as UTF-8 (invalid sequences become U+FFFD): skip a Python decode.
    source: bytes | str = (
        body[skip:] if codec == "utf-8" else _decode(body, content_type, html=True)
    )
    tree = LexborHTMLParser(source)
    link = _canonical_link(tree, url)
    if isinstance(rule, CssRule):
        fields, missing = _css_fields(tree, rule)
        # The text (for the simhash) is the main text whatever the fields are.
        return _record(fields, _main_text(tree, main), content_hash, "html", link, missing)
    title_node = tree.css_first("title")
    title = collapse_spaces(title_node.text()) if title_node is not None else ""
    text = _main_text(tree, rule)
    return _record({"title": title, "text": text}, text, content_hash, "html", link)


def _css_fields(tree: LexborHTMLParser, rule: CssRule) -> tuple[dict[str, str], tuple[str, ...]]:
    fields: dict[str, str] = {}
    missing: list[str] = []
    for name, selector in rule.selectors.items():
        values = []
        for node in tree.css(selector.css):
            if selector.attribute is None:
                values.append(collapse_spaces(node.text(separator=" ")))
            else:
                values.append(collapse_spaces(node.attributes.get(selector.attribute) or ""))
        if not values:
            missing.append(name)
        fields[name] = "\n".join(values)
    return fields, tuple(missing)


def _main_text(tree: LexborHTMLParser, rule: MainTextRule) -> str:
    root = _main_root(tree)
    if root is None:
        return ""
    _drop_outermost(root.css(rule.drop_query))
    return strip_volatile_text(root.text(separator=" "), rule.noise)


def _main_root(tree: LexborHTMLParser) -> LexborNode | None:
    for query in ("main", '[role="main"]'):
        node = tree.css_first(query)
        if node is not None:
            return node
    articles = tree.css("article")
    if len(articles) == 1:
        return articles[0]
    return tree.body


def _drop_outermost(nodes: list[LexborNode]) -> None:
    """Decompose matched nodes, skipping those inside another match (already gone with it)."""
    if not nodes:
        return
    matched = {node.mem_id for node in nodes}
    outermost = []
    for node in nodes:
        parent = node.parent
        while parent is not None and parent.mem_id not in matched:
            parent = parent.parent
        if parent is None:
            outermost.append(node)
    for node in outermost:
        node.decompose()


def _canonical_link(tree: LexborHTMLParser, url: str) -> str | None:
    """The head's ``rel="canonical"`` link, resolved (against ``<base href>``) and normalized.

    Only ``<head>`` is searched: the link is not allowed in the body, where search engines
    ignore it too (anyone who can post HTML on a page could claim it otherwise).
    """
    head = tree.head
    node = head.css_first('link[rel~="canonical"][href]') if head is not None else None
    if node is None or head is None:
        return None
    href = node.attributes.get("href") or ""
    base_node = head.css_first("base[href]")
    try:
        base = url
        if base_node is not None:
            base = resolve(url, (base_node.attributes.get("href") or "").strip())
        return normalize(resolve(base, href.strip()))
    except InvalidURLError:
        return None


def _from_json(body: bytes, content_type: str, rule: JsonRule | None, content_hash: str) -> Record:
    raw = _decode(body, content_type, html=False)
    try:
        doc: Any = json.loads(raw)
    except ValueError:
        # Not JSON after all: the text stands for the record, so a change still shows.
        text = strip_volatile_text(raw)
        names = tuple(rule.fields) if rule is not None else ()
        fields = {name: "" for name in names} | {"text": text}
        return _record(fields, text, content_hash, "text", None, names)
    if rule is None:
        pruned = prune_volatile_json(doc)
        text = " ".join(_leaf_strings(pruned))
        return _record({"json": _canonical_json(pruned)}, text, content_hash, "json")
    fields = {}
    missing = []
    for name, path in rule.paths.items():
        found = path.findall(doc)
        if not found:
            missing.append(name)
            fields[name] = ""
        elif len(found) == 1:
            fields[name] = found[0] if isinstance(found[0], str) else _canonical_json(found[0])
        else:
            fields[name] = _canonical_json(found)
    text = " ".join(fields.values())
    return _record(fields, text, content_hash, "json", None, tuple(missing))


def _leaf_strings(value: object) -> list[str]:
    if isinstance(value, dict):
        return [s for item in value.values() for s in _leaf_strings(item)]
    if isinstance(value, list):
        return [s for item in value for s in _leaf_strings(item)]
    return [value] if isinstance(value, str) else []


def _canonical_json(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=False, separators=(",", ":"))


def _record(
    fields: Mapping[str, str],
    text: str,
    content_hash: str,
    kind: str,
    canonical: str | None = None,
    missing: tuple[str, ...] = (),
) -> Record:
    record_hash = hashlib.blake2b(
        _canonical_json(dict(fields)).encode("utf-8", "surrogatepass"), digest_size=16
    ).hexdigest()
    return Record(
        fields=dict(fields),
        text=text,
        record_hash=record_hash,
        content_hash=content_hash,
        simhash=simhash(text),
        kind=kind,
        canonical=canonical,
        missing=missing,
    )
