"""URL normalization (RFC 3986 section 6) and stable 64-bit URL ids.

``normalize`` is what the seen set and ``url_id`` compare; two spellings of one page
map to one id. Tracking parameters (``utm_*`` and similar) are removed; other query
parameters are kept because they can change content.
"""

from __future__ import annotations

import hashlib
import re
from urllib.parse import quote, unquote, urljoin, urlsplit, urlunsplit

DEFAULT_PORTS = {"http": 80, "https": 443}
TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "msclkid", "dclid", "yclid", "mc_cid", "mc_eid", "_ga", "igshid"}
)
TRACKING_PREFIXES = ("utm_",)
_UNRESERVED = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~"
_PCT = re.compile(r"%[0-9A-Fa-f]{2}")


class InvalidURLError(ValueError):
    """A URL that cannot be crawled: no http(s) scheme or no host."""


def normalize(
    url: str,
    *,
    tracking_params: frozenset[str] = TRACKING_PARAMS,
    tracking_prefixes: tuple[str, ...] = TRACKING_PREFIXES,
) -> str:
    """Return the normal form of an absolute http(s) URL."""
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError as exc:
        raise InvalidURLError(f"cannot parse URL {url!r}: {exc}") from None
    scheme = parts.scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidURLError(f"only http and https URLs are crawled, got {url!r}")
    host = (parts.hostname or "").rstrip(".")
    if not host:
        raise InvalidURLError(f"URL has no host: {url!r}")
    try:
        host = host.encode("idna").decode("ascii").lower()
    except UnicodeError:
        host = host.lower()
    netloc = host if port in (None, DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    path = _normalize_percent(_remove_dot_segments(parts.path or "/"), safe="/:@!$&'()*+,;=")
    query = _clean_query(parts.query, tracking_params, tracking_prefixes)
    return urlunsplit((scheme, netloc, path, query, ""))


def resolve(base: str, reference: str) -> str:
    """Resolve a reference against a base URL (RFC 3986 section 5)."""
    return urljoin(base, reference)


def url_id(normalized_url: str) -> int:
    """Stable signed 64-bit id of a normalized URL (first 8 bytes of BLAKE2b)."""
    digest = hashlib.blake2b(normalized_url.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def _remove_dot_segments(path: str) -> str:
    """RFC 3986 section 5.2.4."""
    out: list[str] = []
    segments = path.split("/")
    for i, seg in enumerate(segments):
        last = i == len(segments) - 1
        if seg == ".":
            if last:
                out.append("")
        elif seg == "..":
            if len(out) > 1:
                out.pop()
            if last:
                out.append("")
        else:
            out.append(seg)
    result = "/".join(out)
    return result if result.startswith("/") else "/" + result


def _normalize_percent(text: str, safe: str) -> str:
    """Uppercase percent-escapes and decode the ones that encode unreserved characters."""

    def fix(match: re.Match[str]) -> str:
        char = chr(int(match.group(0)[1:], 16))
        return char if char in _UNRESERVED else match.group(0).upper()

    text = _PCT.sub(fix, text)
    # Encode characters that must not appear raw (spaces, non-ASCII), keeping escapes.
    return quote(text, safe=safe + "%")


def _clean_query(query: str, params: frozenset[str], prefixes: tuple[str, ...]) -> str:
    if not query:
        return ""
    kept = []
    for pair in query.split("&"):
        if not pair:
            continue
        name = unquote(pair.split("=", 1)[0]).lower()
        if name in params or name.startswith(prefixes):
            continue
        kept.append(_normalize_percent(pair, safe="=&/:@!$'()*+,;?"))
    return "&".join(kept)
