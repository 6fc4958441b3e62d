"""URL normalization (RFC 3986 section 6), reference resolution (section 5), url ids, traps.

``normalize`` is what the seen set and ``url_id`` compare: two spellings of one page map to
one string, so to one id. It applies the RFC's safe normalizations (case of scheme and host,
percent-encoding, dot segments, default port, empty path) and four crawler rules on top:
the fragment goes (it never reaches the server), userinfo goes (``http://user:pw@host/``:
RFC 9110 section 4.2.4 forbids sending it, and a password must not reach the store or the
logs), IDN hosts become punycode, and known tracking and session parameters (``utm_*``,
``gclid``, ``jsessionid``...) are removed. Other query parameters are kept, in order,
because they can change the content.

``MAX_URL_LENGTH`` is the one length limit of a page URL: discovery's trap rule and the
catalog both apply it (``url_length_problem``).

``resolve`` follows RFC 3986 section 5.2 to the letter (``urllib.parse.urljoin`` does not:
it keeps ``..`` segments above the root in some Python versions and treats ``http:g``
loosely), and ``canonical`` honours a page's ``rel="canonical"`` within the same site.
Parsing uses the RFC's own regular expression (appendix B), so nothing is lost between
"undefined" and "empty" components, which section 5.2 distinguishes.
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import re
from typing import NamedTuple
from urllib.parse import unquote

import idna

from models.fetching.redaction import redact_url

DEFAULT_PORTS = {"http": 80, "https": 443}
#: Characters a normalized page URL may have: longer ones are refused by the catalog and
#: dropped as traps by discovery (2,048 is what common browsers, sitemaps.org and search
#: engines have long accepted; longer URLs are almost always generated loops or garbage).
MAX_URL_LENGTH = 2048

#: Query parameters removed by ``normalize`` (compared lower-case). They identify a click,
#: a campaign or a session, never the content.
TRACKING_PARAMS = frozenset(
    {
        "gclid",
        "gclsrc",
        "dclid",
        "gbraid",
        "wbraid",
        "fbclid",
        "msclkid",
        "yclid",
        "twclid",
        "ttclid",
        "li_fat_id",
        "mc_cid",
        "mc_eid",
        "_ga",
        "_gl",
        "igshid",
        "_hsenc",
        "_hsmi",
        "mkt_tok",
        "oly_anon_id",
        "oly_enc_id",
        "vero_id",
        "jsessionid",
        "phpsessid",
        "aspsessionid",
    }
)
#: Query parameter prefixes removed by ``normalize`` (compared lower-case).
TRACKING_PREFIXES: tuple[str, ...] = ("utm_",)

_UNRESERVED = frozenset("ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-._~")
_SUB_DELIMS = "!$&'()*+,;="
_ALNUM = "A-Za-z0-9"
# Characters a component may hold unencoded (RFC 3986 section 3); anything else is encoded.
_PATH_CHARS = _ALNUM + r"\-._~" + re.escape(_SUB_DELIMS) + ":@/"
_QUERY_CHARS = _PATH_CHARS + "?"

# RFC 3986 appendix B, with the scheme held to its syntax (section 3.1) so that a relative
# reference such as "1a:b" is not mistaken for one with a scheme.
_URI = re.compile(
    r"(?:([A-Za-z][A-Za-z0-9+.\-]*):)?(?://([^/?#]*))?([^?#]*)(?:\?([^#]*))?(?:#(.*))?", re.S
)
_STRIP = "".join(chr(c) for c in range(0x21))  # C0 controls and space, stripped at both ends
_TAB_NEWLINE = re.compile(r"[\t\n\r]")
_DOT_SEGMENT = re.compile(r"(?:^|/)\.\.?(?:/|$)")
_JSESSIONID = re.compile(r";jsessionid=[^/]*", re.I)
_HOST_CHARS = re.compile(r"[a-z0-9_\-.]+")
_PORT = re.compile(r"[0-9]*")
_DOTTED_QUAD = re.compile(r"[0-9]+\.[0-9]+\.[0-9]+\.[0-9]+")


def _percent_pattern(allowed: str) -> re.Pattern[str]:
    return re.compile(rf"%[0-9A-Fa-f]{{2}}|[^{allowed}]")


_PATH_FIX = _percent_pattern(_PATH_CHARS)
_QUERY_FIX = _percent_pattern(_QUERY_CHARS)


class InvalidURLError(ValueError):
    """A URL that cannot be crawled or parsed; the message names what is wrong."""


class URIParts(NamedTuple):
    """The five components of a URI reference; None means undefined (not the same as "")."""

    scheme: str | None
    authority: str | None
    path: str
    query: str | None
    fragment: str | None


def split_uri(reference: str) -> URIParts:
    """Split a URI reference into its components (RFC 3986 appendix B)."""
    match = _URI.fullmatch(reference)
    if match is None:  # the expression matches every string; kept for the type checker
        raise InvalidURLError(f"cannot parse URI reference {reference!r}")
    scheme, authority, path, query, fragment = match.groups()
    return URIParts(scheme, authority, path, query, fragment)


def recompose(parts: URIParts) -> str:
    """Join components back into a URI reference (RFC 3986 section 5.3)."""
    out = []
    if parts.scheme is not None:
        out.append(parts.scheme + ":")
    if parts.authority is not None:
        out.append("//" + parts.authority)
    out.append(parts.path)
    if parts.query is not None:
        out.append("?" + parts.query)
    if parts.fragment is not None:
        out.append("#" + parts.fragment)
    return "".join(out)


def remove_dot_segments(path: str) -> str:
    """Remove ``.`` and ``..`` segments exactly as RFC 3986 section 5.2.4 specifies."""
    if _DOT_SEGMENT.search(path) is None:
        return path
    inp = path
    out: list[str] = []  # each entry is one segment with its leading "/" (if it had one)
    while inp:
        if inp.startswith("../") or inp.startswith("./"):  # step A
            inp = inp[inp.index("/") + 1 :]
        elif inp.startswith("/./") or inp == "/.":  # step B
            inp = "/" + inp[3:]
        elif inp.startswith("/../") or inp == "/..":  # step C
            inp = "/" + inp[4:]
            if out:
                out.pop()
        elif inp in (".", ".."):  # step D
            inp = ""
        else:  # step E
            cut = inp.find("/", 1)
            if cut < 0:
                cut = len(inp)
            out.append(inp[:cut])
            inp = inp[cut:]
    return "".join(out)


def resolve(base: str, reference: str) -> str:
    """Resolve ``reference`` against the absolute URI ``base`` (RFC 3986 section 5.2, strict).

    The result is not normalized (call ``normalize`` on it) and keeps the reference's
    fragment, as the RFC says. ``base`` must have a scheme; its fragment is ignored.
    """
    b = split_uri(base)
    if b.scheme is None:
        raise InvalidURLError(f"base URI must be absolute (have a scheme), got {base!r}")
    r = split_uri(reference)
    if r.scheme is not None:
        t = URIParts(r.scheme, r.authority, remove_dot_segments(r.path), r.query, r.fragment)
    elif r.authority is not None:
        t = URIParts(b.scheme, r.authority, remove_dot_segments(r.path), r.query, r.fragment)
    elif r.path == "":
        query = r.query if r.query is not None else b.query
        t = URIParts(b.scheme, b.authority, b.path, query, r.fragment)
    elif r.path.startswith("/"):
        t = URIParts(b.scheme, b.authority, remove_dot_segments(r.path), r.query, r.fragment)
    else:
        merged = remove_dot_segments(_merge(b, r.path))
        t = URIParts(b.scheme, b.authority, merged, r.query, r.fragment)
    return recompose(t)


def _merge(base: URIParts, path: str) -> str:
    """RFC 3986 section 5.2.3."""
    if base.authority is not None and base.path == "":
        return "/" + path
    cut = base.path.rfind("/")
    return base.path[: cut + 1] + path if cut >= 0 else path


def normalize(
    url: str,
    *,
    tracking_params: frozenset[str] = TRACKING_PARAMS,
    tracking_prefixes: tuple[str, ...] = TRACKING_PREFIXES,
) -> str:
    """The normal form of an absolute http(s) URL; raises InvalidURLError naming the problem.

    Leading and trailing spaces and control characters and any tab or newline are removed
    first (as browsers do with ``href`` values). Then: scheme and host lower-case, IDN host to
    punycode (IDNA 2008 with UTS #46 mapping), one trailing dot of the host dropped, default
    port dropped, percent-escapes upper-case with unreserved characters decoded (reserved ones
    never are), characters that may not appear raw encoded as UTF-8, dot segments removed,
    empty path ``/``, ``;jsessionid=`` path parameters, tracking parameters and empty ``&&``
    pairs dropped (other parameters keep their order), an empty query, the fragment and any
    userinfo (``user:password@``) dropped. An error names the URL without its userinfo or
    secret query parameters (``shown_url``).
    ``normalize(normalize(u)) == normalize(u)`` for every URL it accepts.
    """
    text = url.strip(_STRIP)
    if "\t" in text or "\n" in text or "\r" in text:
        text = _TAB_NEWLINE.sub("", text)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        raise InvalidURLError(f"URL is not valid Unicode text: {shown_url(url)!r}") from None
    scheme, authority, path, query, _fragment = split_uri(text)
    if scheme is None:
        raise InvalidURLError(
            f"URL is not absolute (no scheme): {shown_url(url)!r}; resolve it first"
        )
    scheme = scheme.lower()
    if scheme not in DEFAULT_PORTS:
        raise InvalidURLError(f"only http and https URLs are crawled, got {shown_url(url)!r}")
    if not authority:
        raise InvalidURLError(f"URL has no host: {shown_url(url)!r}")
    try:
        netloc = _normalize_authority(authority, scheme)
    except InvalidURLError as exc:
        raise InvalidURLError(f"{exc} in {shown_url(url)!r}") from None
    if "%" in path or _PATH_FIX.search(path) is not None:
        path = _PATH_FIX.sub(_fix_escape, path)
    if ";" in path:
        path = _JSESSIONID.sub("", path)
    path = remove_dot_segments(path) or "/"
    out = f"{scheme}://{netloc}{path}"
    if query:
        query = _clean_query(query, tracking_params, tracking_prefixes)
        if query:
            out += "?" + query
    return out


def url_id(normalized_url: str) -> int:
    """Stable signed 64-bit id of a normalized URL (first 8 bytes of BLAKE2b, big-endian)."""
    digest = hashlib.blake2b(normalized_url.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def url_host(normalized_url: str) -> str:
    """The host (with a non-default port) of a normalized URL, as the catalog keeps it."""
    authority = split_uri(normalized_url).authority
    if authority is None:
        raise InvalidURLError(f"URL has no host: {normalized_url!r}")
    return authority.rpartition("@")[2]


def canonical(url: str, link_rel_canonical: str | None) -> str:
    """The normalized URL a fetched page should be known by, honouring ``rel="canonical"``.

    ``link_rel_canonical`` is the page's canonical link (absolute, or relative to ``url``).
    It is followed only within the same site: same host once a leading ``www.`` is ignored,
    same port; the scheme may differ (an http page may name its https twin). A canonical
    link to another site, or one that does not parse, is ignored (a page cannot claim to
    be a copy of a page on a site that did not say so), and ``normalize(url)`` is returned.
    """
    page = normalize(url)
    if not link_rel_canonical or not link_rel_canonical.strip(_STRIP):
        return page
    try:
        target = normalize(resolve(page, link_rel_canonical.strip(_STRIP)))
    except InvalidURLError:
        return page
    return target if _site(target) == _site(page) else page


def _site(normalized_url: str) -> str:
    host = url_host(normalized_url)
    return host[4:] if host.startswith("www.") else host


def shown_url(url: str) -> str:
    """``url`` as it may be printed (errors, logs, rows): no userinfo, no secret parameters.

    ``models.fetching.redaction.redact_url``, and for a string it cannot split (an unclosed IPv6
    literal...) the same without the userinfo only; never raises.
    """
    try:
        return redact_url(url)
    except ValueError:
        parts = split_uri(url)
        if parts.authority is None or "@" not in parts.authority:
            return url
        return recompose(parts._replace(authority=parts.authority.rpartition("@")[2]))


def url_length_problem(url: str, max_length: int = MAX_URL_LENGTH) -> str | None:
    """Why ``url`` (normalized) is too long to be a page, or None."""
    if len(url) > max_length:
        return f"URL longer than {max_length} characters ({len(url)})"
    return None


def url_trap_reason(
    url: str, *, max_length: int = MAX_URL_LENGTH, max_depth: int = 16, max_repeats: int = 3
) -> str | None:
    """Why ``url`` looks like a crawler trap, or None: too long, too deep, or a block of path
    segments repeated ``max_repeats`` times in a row (``/a/b/a/b/a/b``, ``/x/x/x``), the
    shape of relative links that lengthen a path without end."""
    too_long = url_length_problem(url, max_length)
    if too_long is not None:
        return too_long
    path = split_uri(url).path
    segments = path.split("/")[1:] if path.startswith("/") else path.split("/")
    if segments and segments[-1] == "":
        segments.pop()
    if len(segments) > max_depth:
        return f"path deeper than {max_depth} segments ({len(segments)})"
    n = len(segments)
    for width in range(1, n // max(max_repeats, 1) + 1):
        for start in range(n - width * max_repeats + 1):
            block = segments[start : start + width]
            if all(
                segments[start + r * width : start + (r + 1) * width] == block
                for r in range(1, max_repeats)
            ):
                return f"path segments {'/'.join(block)!r} repeated {max_repeats} times"
    return None


def _normalize_authority(authority: str, scheme: str) -> str:
    hostport = authority.rpartition("@")[2]
    if hostport.startswith("["):
        close = hostport.find("]")
        if close < 0:
            raise InvalidURLError("unclosed IPv6 literal")
        host, rest = hostport[: close + 1], hostport[close + 1 :]
        if rest and not rest.startswith(":"):
            raise InvalidURLError("unexpected characters after the IPv6 literal")
        port_text = rest[1:]
    else:
        host, _, port_text = hostport.partition(":")
    if not _PORT.fullmatch(port_text):
        raise InvalidURLError(f"port {port_text!r} is not a number")
    netloc = _normalize_host(host)
    if port_text:
        digits = port_text.lstrip("0")
        if len(digits) > 5:  # before int(): past 4,300 digits it raises a plain ValueError
            raise InvalidURLError(f"port of {len(digits)} digits out of range")
        port = int(digits or "0")
        if port > 65535:
            raise InvalidURLError(f"port {port} out of range")
        if port != DEFAULT_PORTS[scheme]:
            netloc = f"{netloc}:{port}"
    # userinfo (``user:password@``) is dropped: RFC 9110 section 4.2.4 forbids sending it in
    # an http(s) target URI, it names no other page, and a password kept here would reach
    # the catalog, the history and every log line that prints the URL.
    return netloc


@functools.lru_cache(maxsize=65_536)
def _normalize_host(host: str) -> str:
    """Lower-case ASCII host, IDN to punycode, IPv6 literal compressed; InvalidURLError else."""
    if host.startswith("["):
        inner = host[1:-1]
        if inner[:1] in ("v", "V"):  # no HTTP client connects to an IPvFuture address
            raise InvalidURLError(f"IPvFuture address literal {host!r} cannot be fetched")
        try:
            return f"[{ipaddress.IPv6Address(inner).compressed}]"
        except ValueError as exc:
            raise InvalidURLError(f"invalid IPv6 literal {host!r}: {exc}") from None
    if "%" in host:
        try:
            host = unquote(host, encoding="utf-8", errors="strict")
        except UnicodeDecodeError:
            raise InvalidURLError(f"host {host!r} is not percent-encoded UTF-8") from None
    if host.endswith("."):
        host = host[:-1]
    if not host:
        raise InvalidURLError("empty host")
    if host.isascii():
        host = host.lower()
        if not _HOST_CHARS.fullmatch(host):
            raise InvalidURLError(f"host {host!r} has characters not allowed in a host name")
        if _DOTTED_QUAD.fullmatch(host):  # an IPv4 address, or nothing a client will take
            try:
                ipaddress.IPv4Address(host)
            except ValueError as exc:
                raise InvalidURLError(f"invalid IPv4 address {host!r}: {exc}") from None
        labels = host.split(".")
        for label in labels:
            if not label or len(label) > 63:
                raise InvalidURLError(f"host {host!r} has an empty or over-long label")
            if label.startswith("xn--"):
                try:
                    idna.decode(label)
                except (idna.IDNAError, UnicodeError) as exc:
                    raise InvalidURLError(f"invalid punycode label in {host!r}: {exc}") from None
    else:
        try:
            host = idna.encode(host, uts46=True).decode("ascii")
        except (idna.IDNAError, UnicodeError) as exc:
            raise InvalidURLError(f"invalid internationalized host {host!r}: {exc}") from None
        return _normalize_host(host)
    if len(host) > 253:
        raise InvalidURLError(f"host longer than 253 characters: {host[:60]!r}...")
    return host


def _fix_escape(match: re.Match[str]) -> str:
    """One percent-escape (upper-cased, or decoded if unreserved) or one character to encode."""
    token = match.group(0)
    if len(token) == 3:  # %XX
        char = chr(int(token[1:], 16))
        return char if char in _UNRESERVED else token.upper()
    return "".join(f"%{b:02X}" for b in token.encode("utf-8"))


def _clean_query(query: str, params: frozenset[str], prefixes: tuple[str, ...]) -> str:
    kept = []
    for pair in query.split("&"):
        if not pair:
            continue
        name = pair.split("=", 1)[0]
        if "%" in name:
            name = _PATH_FIX.sub(_fix_escape, name)
        name = name.lower()
        if name in params or name.startswith(prefixes):
            continue
        if "%" in pair or _QUERY_FIX.search(pair) is not None:
            pair = _QUERY_FIX.sub(_fix_escape, pair)
        kept.append(pair)
    return "&".join(kept)
