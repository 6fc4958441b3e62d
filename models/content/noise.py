"""Volatile noise: what differs between two loads of an unchanged page, so must not be hashed.

A page whose server time, ad slot, session token or "N people viewing" counter differs on
every load "changes" constantly and means nothing (the scheduling article: hash the extracted
record, not the HTML). Two layers remove it:

* elements, by tag and by common class/id names (``DEFAULT_DROP_SELECTORS``, used by the
  main-text rule of ``models.content.extract``: scripts, navigation, ads, hidden elements...);
* text, by pattern (``strip_volatile_text``): dates and times, relative times ("5 minutes
  ago"), hex/UUID/base64-looking tokens (sessions, CSRF values, request ids) and
  audience counters ("12 people viewing", "3 users online").

JSON documents get the same treatment key by key (``prune_volatile_json``): keys named like
timestamps, sessions, tokens or counters, and string values that are only noise, are dropped.

Known limits: numbers alone are never removed (a price is a number), so a bare epoch
timestamp or an unlabelled counter survives; a product code of 20+ letters and digits looks
like a token and is removed. Override per host with an explicit rule where that matters.
"""

from __future__ import annotations

import functools
import itertools
import re

#: Elements removed before the main text is read.
DEFAULT_DROP_SELECTORS: tuple[str, ...] = (
    # not content
    "script",
    "style",
    "noscript",
    "template",
    "iframe",
    "object",
    "embed",
    "svg",
    "canvas",
    # page furniture
    "nav",
    "header",
    "footer",
    "aside",
    "form",
    "button",
    "select",
    "textarea",
    "dialog",
    '[role="navigation"]',
    '[role="banner"]',
    '[role="contentinfo"]',
    '[role="complementary"]',
    '[role="dialog"]',
    "[hidden]",
    '[aria-hidden="true"]',
    # dates (machine-readable time of publication, of the request...)
    "time",
    # ad slots
    ".ad",
    ".ads",
    ".advert",
    ".advertisement",
    ".adsbygoogle",
    ".sponsored",
    ".sponsor",
    ".promo",
    ".banner",
    '[class^="ad-"]',
    '[class*=" ad-"]',
    '[class*="adslot"]',
    '[class*="ad-slot"]',
    '[id^="ad-"]',
    '[id^="ad_"]',
    '[id^="div-gpt-ad"]',
    '[id*="google_ads"]',
    "[data-ad-slot]",
    "[data-ad]",
    "[data-ad-unit]",
    # consent banners and per-request widgets
    ".cookie-banner",
    ".cookie-consent",
    '[id*="cookie-consent"]',
    ".session",
    ".csrf",
    ".timestamp",
    ".viewers",
    ".visitors",
)

_MONTH = (
    r"(?:jan(?:uary)?|feb(?:ruary)?|mar(?:ch)?|apr(?:il)?|may|june?|july?|aug(?:ust)?"
    r"|sep(?:t(?:ember)?)?|oct(?:ober)?|nov(?:ember)?|dec(?:ember)?)\.?"
)
_WEEKDAY = r"(?:mon|tue|wed|thu|fri|sat|sun)[a-z]*\.?,?\s+"
_TZ = r"(?:\s*(?:utc|gmt|z|[+-]\d{2}:?\d{2})\b)?"
_TIME = r"\d{1,2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?(?:\s*[ap]\.?m\b\.?)?" + _TZ
_COUNTED = r"(?:people|persons|users|visitors|shoppers|customers|buyers|others|readers|guests)"
_AUDIENCE = (
    r"(?:are\s+)?(?:viewing|watching|looking(?:\s+at)?|online|browsing|reading"
    r"|(?:have\s+(?:this|it)\s+)?in\s+(?:their|the)\s+carts?)"
    r"(?:\s+(?:this|that|the|it|now|right\s+now|item|product|page|deal|offer|article"
    r"|listing|hotel|room)\b){0,4}"
)

_VOLATILE_TEXT = re.compile(
    "|".join(
        [
            # ISO 8601 date, optionally with time and zone: 2026-01-01T10:00:00+00:00
            r"\b\d{4}-\d{2}-\d{2}(?:[t ]\d{2}:\d{2}(?::\d{2}(?:[.,]\d+)?)?)?" + _TZ,
            # RFC 1123 / written dates: Thu, 01 Jan 2026; 1 January 2026; Jan 1st, 2026
            rf"\b(?:{_WEEKDAY})?\d{{1,2}}\s+{_MONTH}\s+\d{{4}}\b",
            rf"\b(?:{_WEEKDAY})?{_MONTH}\s+\d{{1,2}}(?:st|nd|rd|th)?,?\s+\d{{4}}\b",
            # numeric dates: 01/02/2026, 1/2/26, 1.2.2026 (dotted only with a 4-digit year,
            # so version numbers such as 2.10.11 survive)
            r"\b\d{1,2}/\d{1,2}/\d{2,4}\b",
            r"\b\d{1,2}\.\d{1,2}\.\d{4}\b",
            # clock times: 10:42, 10:42:07 pm UTC
            r"\b" + _TIME,
            # relative times: 5 minutes ago, just now
            r"\b\d+\s+(?:sec(?:ond)?s?|min(?:ute)?s?|hours?|hrs?|days?|weeks?)\s+ago\b",
            r"\bjust\s+now\b",
            # audience counters: 12 people viewing this item, 1,204 users online
            rf"\b\d[\d,.]*\s+{_COUNTED}\s+{_AUDIENCE}",
            # UUIDs and long hex (session ids, CSRF tokens, request ids, cache busters)
            r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b",
            r"\b[0-9a-f]{16,}\b",
            # base64-looking tokens: 20+ characters mixing letters and digits
            r"(?<![\w+/=-])(?=[\w+/-]*\d)(?=[\w+/-]*[a-z])[\w+/-]{20,}={0,2}(?![\w+/=-])",
        ]
    ),
    re.IGNORECASE | re.ASCII,
)

# JSON keys whose values are volatile by name (compared after splitting camelCase and _/-).
_VOLATILE_KEY_WORDS = frozenset(
    {
        "time",
        "timestamp",
        "ts",
        "date",
        "datetime",
        "served",
        "generated",
        "updated",
        "modified",
        "fetched",
        "rendered",
        "now",
        "expires",
        "expiry",
        "session",
        "sid",
        "token",
        "csrf",
        "xsrf",
        "nonce",
        "trace",
        "span",
        "etag",
        "viewers",
        "viewing",
        "visitors",
        "watchers",
        "online",
        "cachebuster",
        "cache",
        "ad",
        "ads",
    }
)
_VOLATILE_KEY_PAIRS = frozenset({("request", "id"), ("req", "id"), ("correlation", "id")})
_KEY_WORD = re.compile(r"[A-Z]?[a-z]+|[A-Z]+(?![a-z])|\d+")


def strip_volatile_text(text: str, extra: re.Pattern[str] | None = None) -> str:
    """``text`` without volatile noise, whitespace collapsed to single spaces.

    The patterns only run on windows of the text that can hold a match: every match starts
    at a *trigger* token (one with a digit, 16+ characters, or a month, weekday or "just"
    prefix; a plain number only when a month, a time unit or a "people"-like word follows)
    and spans at most ``_CONTEXT`` more tokens. Running them over the whole text gives the
    same result (tested), at several times the cost since the patterns have no literal
    prefix, except for a date glued to a word ("x-Jan 5, 2026"), which stays.
    """
    tokens = text.split()
    kinds = list(map(_token_kind, tokens))
    n = len(tokens)
    triggers = [
        i
        for i, kind in enumerate(kinds)
        if kind & _TRIGGER or (kind & _NUMBER and i + 1 < n and kinds[i + 1] & _FOLLOWER)
    ]
    pieces = []
    flushed = 0
    end = -1
    for i in triggers:
        if i < end:  # inside the current window: stretch it
            end = min(i + _CONTEXT + 1, n)
            continue
        if end > 0:
            pieces.append(_clean_window(tokens[flushed:end]))
            flushed = end
        if i > flushed:
            pieces.append(" ".join(tokens[flushed:i]))
        flushed, end = i, min(i + _CONTEXT + 1, n)
    if end > 0:
        pieces.append(_clean_window(tokens[flushed:end]))
        flushed = end
    if flushed < n:
        pieces.append(" ".join(tokens[flushed:]))
    out = " ".join(p for p in pieces if p)
    if extra is not None:
        out = " ".join(extra.sub(" ", out).split())
    return out


def _clean_window(tokens: list[str]) -> str:
    return " ".join(_VOLATILE_TEXT.sub(" ", " ".join(tokens)).split())


_CONTEXT = 12  # tokens a match may span after its trigger ("12 people are viewing this...")
_PUNCT = "()[]{}<>\"'.,;:!?\u00ab\u00bb\u201c\u201d"
_PLAIN_NUMBER = re.compile(r"\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:[.,]\d+)?")
_HAS_DIGIT = re.compile(r"\d")
# First three letters of the words that can start a match, or follow a number that does.
_MONTHS = ("jan", "feb", "mar", "apr", "may", "jun", "jul", "aug", "sep", "oct", "nov", "dec")
_STARTERS = frozenset((*_MONTHS, "mon", "tue", "wed", "thu", "fri", "sat", "sun", "jus"))
_UNITS = ("sec", "min", "hou", "hrs", "day", "wee")
_COUNTED_WORDS = ("peo", "per", "use", "vis", "sho", "cus", "buy", "oth", "rea", "gue")
_AFTER_NUMBER = _STARTERS | frozenset(_UNITS + _COUNTED_WORDS)
_TRIGGER, _NUMBER, _FOLLOWER = 1, 2, 4


@functools.lru_cache(maxsize=1 << 17)
def _token_kind(token: str) -> int:
    """Bit set: the token starts a window (_TRIGGER), is a plain number (a trigger only when
    a _FOLLOWER token comes next), or can follow a number in a match (_FOLLOWER)."""
    core = token.strip(_PUNCT)
    kind = _FOLLOWER if core[:3].lower() in _AFTER_NUMBER else 0
    if len(token) >= 16:
        return kind | _TRIGGER
    if core.isalpha():
        return kind | (_TRIGGER if core[:3].lower() in _STARTERS else 0)
    if _PLAIN_NUMBER.fullmatch(core):
        return kind | _NUMBER
    return kind | (_TRIGGER if _HAS_DIGIT.search(core) else 0)


def collapse_spaces(text: str) -> str:
    """Whitespace runs to one space, stripped: what field values are compared as."""
    return " ".join(text.split())


def is_volatile_key(key: str) -> bool:
    """Whether a JSON key names a timestamp, session, token, counter or ad value."""
    words = [w.lower() for w in _KEY_WORD.findall(key)]
    if any(w in _VOLATILE_KEY_WORDS for w in words):
        return True
    return any(pair in _VOLATILE_KEY_PAIRS for pair in itertools.pairwise(words))


def prune_volatile_json(value: object) -> object:
    """A copy of a parsed JSON value without volatile keys and noise-only strings.

    Objects lose the keys ``is_volatile_key`` names and string members that were only noise;
    arrays keep their order (positions carry meaning) but lose noise-only strings.
    """
    if isinstance(value, dict):
        out: dict[str, object] = {}
        for key, item in value.items():
            if is_volatile_key(str(key)):
                continue
            pruned = prune_volatile_json(item)
            if pruned is not _DROPPED:
                out[str(key)] = pruned
        return out
    if isinstance(value, list):
        return [p for p in (prune_volatile_json(v) for v in value) if p is not _DROPPED]
    if isinstance(value, str) and value.strip() and not strip_volatile_text(value):
        return _DROPPED
    return value


class _Dropped:
    """Marker for a JSON value that was only noise."""


_DROPPED = _Dropped()
