"""Secrets kept out of archived requests: which headers and query parameters to strip.

A WARC request record is a copy of what the crawler sent. Credentials of a scraping API or a
proxy, session cookies and bearer tokens would otherwise sit in plain text in files that are
meant to be shared, copied to object storage and kept for years. This module decides, as pure
policy, what is removed before a request is archived; ``tasks.archive.warc`` applies it.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

#: Headers that carry credentials in every deployment.
SECRET_HEADERS: frozenset[str] = frozenset(
    {"authorization", "proxy-authorization", "cookie", "x-api-key", "api-key", "x-auth-token"}
)
#: Names that look like credentials (matched anywhere in a header or parameter name).
SECRET_NAME_PATTERN = (
    r"api[-_]?key|access[-_]?token|auth[-_]?token|^token$|secret|passw(or)?d|credential"
    r"|signature|session[-_]?id"
)
#: Query parameters that carry credentials (exact names, lower case).
SECRET_PARAMS: frozenset[str] = frozenset({"key", "sig", "token", "password", "sid"})


@dataclass(frozen=True)
class RedactionPolicy:
    """What to strip from an archived request (names compared in lower case).

    ``name_pattern`` catches the many spellings of an API key (``X-Api-Key``, ``apikey``,
    ``X-Goog-Api-Key``, ``access_token``...); an empty pattern switches the catch-all off.
    """

    headers: frozenset[str] = SECRET_HEADERS
    params: frozenset[str] = SECRET_PARAMS
    name_pattern: str = SECRET_NAME_PATTERN
    _compiled: re.Pattern[str] | None = field(default=None, init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        try:
            compiled = re.compile(self.name_pattern, re.IGNORECASE) if self.name_pattern else None
        except re.error as exc:
            raise ValueError(f"bad secret name pattern {self.name_pattern!r}: {exc}") from None
        object.__setattr__(self, "headers", frozenset(h.lower() for h in self.headers))
        object.__setattr__(self, "params", frozenset(p.lower() for p in self.params))
        object.__setattr__(self, "_compiled", compiled)

    def is_secret_header(self, name: str) -> bool:
        low = name.strip().lower()
        return low in self.headers or self._looks_secret(low)

    def is_secret_param(self, name: str) -> bool:
        low = name.strip().lower()
        return low in self.params or self._looks_secret(low)

    def _looks_secret(self, name: str) -> bool:
        return self._compiled is not None and self._compiled.search(name) is not None


DEFAULT_POLICY = RedactionPolicy()


def redact_headers(
    headers: Iterable[tuple[str, str]], policy: RedactionPolicy = DEFAULT_POLICY
) -> list[tuple[str, str]]:
    """The headers without the secret ones (order and duplicates otherwise kept)."""
    return [(name, value) for name, value in headers if not policy.is_secret_header(name)]


def redact_url(url: str, policy: RedactionPolicy = DEFAULT_POLICY) -> str:
    """The URL without secret query parameters and without user:password in the authority.

    Everything else is kept byte for byte (no re-encoding), so a URL with no secret in it
    comes back unchanged. Nested URLs (a scraping API's ``?url=<target>``) are left as they
    are: the target URL is the page, not a credential.
    """
    parts = urlsplit(url)
    netloc = parts.netloc.rpartition("@")[2]
    query = redact_query(parts.query, policy)
    if netloc == parts.netloc and query == parts.query:
        return url
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))


def redact_query(query: str, policy: RedactionPolicy = DEFAULT_POLICY) -> str:
    """A query string without its secret parameters (pairs kept verbatim otherwise)."""
    if not query:
        return query
    pairs = query.split("&")
    kept = [p for p in pairs if not policy.is_secret_param(_param_name(p))]
    return query if len(kept) == len(pairs) else "&".join(kept)


def _param_name(pair: str) -> str:
    name = pair.split("=", 1)[0]
    # A percent-encoded name (api%5Fkey) must not slip through.
    return re.sub(r"%([0-9A-Fa-f]{2})", lambda m: chr(int(m.group(1), 16)), name)
