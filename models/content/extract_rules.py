"""What to extract from a page, per host or URL pattern: the values ``models.content.extract``
obeys.

A page's *record* is what the user cares about; "changed" means its hash differs. Three kinds
of rule say what the record is:

* ``CssRule``: named fields read with CSS selectors (``"h1.title"``; ``"::attr(name)"`` at
  the end reads an attribute instead of the text), for pages whose fields you know;
* ``JsonRule``: named fields read with JSONPath (strict RFC 9535, python-jsonpath), for JSON
  endpoints;
* ``MainTextRule``: the default for HTML, the page's title and main text without scripts,
  navigation, ads and volatile noise (``models.content.noise``).

``ExtractionRules`` is an ordered list of (``UrlPattern``, rule); the first pattern that
matches a URL wins, so put specific patterns first. Rules are validated when built (a bad
selector or path raises ``ValueError`` naming it), never in the middle of a crawl.
"""

from __future__ import annotations

import fnmatch
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import jsonpath
from selectolax.lexbor import LexborHTMLParser, SelectolaxError

from models.content.noise import DEFAULT_DROP_SELECTORS
from models.discovery.urls import split_uri

_ATTR_SUFFIX = re.compile(r"::attr\(\s*([^)\s]+)\s*\)\s*$")
_PROBE_HTML = "<html><body><p></p></body></html>"


@dataclass(frozen=True, slots=True)
class FieldSelector:
    """One CSS field: the selector, and the attribute to read (None: the element's text)."""

    css: str
    attribute: str | None

    @classmethod
    def parse(cls, spec: str) -> FieldSelector:
        match = _ATTR_SUFFIX.search(spec)
        css = spec[: match.start()].strip() if match else spec.strip()
        return cls(css, match.group(1).lower() if match else None)


@dataclass(frozen=True)
class CssRule:
    """Fields read from HTML with CSS selectors: ``{"price": "p.price::attr(content)"}``.

    A field's value is the whitespace-collapsed text (or attribute) of every element the
    selector matches, joined by a newline in document order; a selector that matches
    nothing gives ``""`` and the field is reported missing.
    """

    fields: Mapping[str, str]
    selectors: Mapping[str, FieldSelector] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError("a CSS rule needs at least one field")
        parsed = {}
        probe = LexborHTMLParser(_PROBE_HTML)
        for name, spec in self.fields.items():
            selector = FieldSelector.parse(_field_spec(name, spec))
            try:
                probe.css(selector.css)
            except SelectolaxError as exc:
                raise ValueError(f"field {name!r}: invalid CSS selector {spec!r}: {exc}") from None
            parsed[name] = selector
        object.__setattr__(self, "fields", dict(self.fields))
        object.__setattr__(self, "selectors", parsed)

    def __reduce__(self) -> tuple[type[CssRule], tuple[dict[str, str]]]:
        return (CssRule, (dict(self.fields),))  # rebuilt (and re-validated) when unpickled


@dataclass(frozen=True)
class JsonRule:
    """Fields read from a JSON document with JSONPath: ``{"price": "$.offers.price"}``.

    One match gives the value itself (strings as they are, other values as compact JSON);
    several give a JSON array of them; none gives ``""`` and the field is reported missing.
    """

    fields: Mapping[str, str]
    paths: Mapping[str, Any] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if not self.fields:
            raise ValueError("a JSON rule needs at least one field")
        compiled = {}
        for name, spec in self.fields.items():
            try:
                compiled[name] = jsonpath.compile(_field_spec(name, spec), strict=True)
            except jsonpath.JSONPathError as exc:
                raise ValueError(f"field {name!r}: invalid JSONPath {spec!r}: {exc}") from None
        object.__setattr__(self, "fields", dict(self.fields))
        object.__setattr__(self, "paths", compiled)

    def __reduce__(self) -> tuple[type[JsonRule], tuple[dict[str, str]]]:
        return (JsonRule, (dict(self.fields),))  # compiled paths are rebuilt when unpickled


@dataclass(frozen=True)
class MainTextRule:
    """The default for HTML: title and main text, furniture and volatile noise removed.

    The main text is read from ``<main>``, else ``[role=main]``, else the only ``<article>``,
    else ``<body>``, after removing every element ``drop_selectors`` matches; then the text
    patterns of ``models.content.noise`` and ``extra_noise`` (regular expressions) are removed.
    """

    drop_selectors: tuple[str, ...] = DEFAULT_DROP_SELECTORS
    extra_noise: tuple[str, ...] = ()
    drop_query: str = field(init=False, repr=False, compare=False)
    noise: re.Pattern[str] | None = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        probe = LexborHTMLParser(_PROBE_HTML)
        for selector in self.drop_selectors:
            try:
                probe.css(selector)
            except SelectolaxError as exc:
                raise ValueError(f"invalid CSS selector {selector!r} to drop: {exc}") from None
        try:
            noise = re.compile("|".join(f"(?:{p})" for p in self.extra_noise), re.I)
        except re.error as exc:
            raise ValueError(f"invalid noise pattern in {self.extra_noise!r}: {exc}") from None
        object.__setattr__(self, "drop_query", ", ".join(self.drop_selectors))
        object.__setattr__(self, "noise", noise if self.extra_noise else None)


Rule = CssRule | JsonRule | MainTextRule


@dataclass(frozen=True)
class UrlPattern:
    """Which URLs a rule is for: exactly one of a host, a URL glob or a URL regex.

    ``host`` is an fnmatch pattern over the host, with or without its port (``shop.example``,
    ``*.shop.example``); ``glob`` an fnmatch pattern over the whole normalized URL
    (``https://shop.example/p/*``); ``regex`` a regular expression searched in it.
    """

    host: str | None = None
    glob: str | None = None
    regex: str | None = None
    compiled: re.Pattern[str] = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        given = [x for x in (self.host, self.glob, self.regex) if x is not None]
        if len(given) != 1:
            raise ValueError("a URL pattern needs exactly one of host, glob or regex")
        if self.host is not None:
            source = fnmatch.translate(self.host.lower())
        elif self.glob is not None:
            source = fnmatch.translate(self.glob)
        else:
            source = str(self.regex)
        try:
            object.__setattr__(self, "compiled", re.compile(source))
        except re.error as exc:
            raise ValueError(f"invalid URL regex {self.regex!r}: {exc}") from None

    def matches(self, url: str) -> bool:
        if self.host is None:
            return (self.compiled.search if self.regex else self.compiled.match)(url) is not None
        authority = (split_uri(url).authority or "").rpartition("@")[2].lower()
        hostname = authority.rsplit(":", 1)[0] if not authority.endswith("]") else authority
        return bool(self.compiled.match(authority) or self.compiled.match(hostname))


@dataclass(frozen=True)
class ExtractionRules:
    """Ordered (pattern, rule) pairs; the first match wins, else the defaults apply."""

    entries: tuple[tuple[UrlPattern, Rule], ...] = ()
    default: MainTextRule = MainTextRule()

    def rule_for(self, url: str) -> Rule | None:
        """The rule of the first pattern matching ``url`` (None: use the content's default)."""
        for pattern, rule in self.entries:
            if pattern.matches(url):
                return rule
        return None

    @classmethod
    def from_config(cls, items: Sequence[Mapping[str, Any]]) -> ExtractionRules:
        """Rules from plain data (TOML/JSON settings), one mapping per entry, in order::

        [{"host": "shop.example", "css": {"title": "h1", "price": ".price"}},
         {"glob": "*/api/item/*.json", "json": {"price": "$.price"}},
         {"regex": "/blog/", "main_text": {"extra_noise": ["Updated .* ago"]}}]
        """
        entries: list[tuple[UrlPattern, Rule]] = []
        for index, item in enumerate(items):
            where = f"extraction rule {index}"
            keys = set(item)
            pattern_keys = keys & {"host", "glob", "regex"}
            rule_keys = keys & {"css", "json", "main_text"}
            unknown = keys - pattern_keys - rule_keys
            if unknown:
                raise ValueError(f"{where}: unknown keys {sorted(unknown)}")
            if len(pattern_keys) != 1 or len(rule_keys) != 1:
                raise ValueError(
                    f"{where}: needs one of host/glob/regex and one of css/json/main_text"
                )
            try:
                pattern = UrlPattern(**{k: str(item[k]) for k in pattern_keys})
                (kind,) = rule_keys
                body = item[kind]
                if not isinstance(body, Mapping):
                    raise ValueError(f"{kind!r} must be a table of settings")
                rule: Rule
                if kind == "css":
                    rule = CssRule({str(k): str(v) for k, v in body.items()})
                elif kind == "json":
                    rule = JsonRule({str(k): str(v) for k, v in body.items()})
                else:
                    rule = MainTextRule(
                        drop_selectors=tuple(body.get("drop_selectors", DEFAULT_DROP_SELECTORS)),
                        extra_noise=tuple(body.get("extra_noise", ())),
                    )
            except (ValueError, TypeError) as exc:
                raise ValueError(f"{where}: {exc}") from None
            entries.append((pattern, rule))
        return cls(tuple(entries))


def _field_spec(name: str, spec: object) -> str:
    if not isinstance(name, str) or not name:
        raise ValueError(f"field names must be non-empty strings, got {name!r}")
    if not isinstance(spec, str) or not spec.strip():
        raise ValueError(f"field {name!r}: the selector must be a non-empty string")
    return spec
