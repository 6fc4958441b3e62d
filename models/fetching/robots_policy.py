"""What a robots.txt fetch result means, per RFC 9309, as pure policy.

The fetcher does the I/O and the matching library (protego) the rule matching; this module
decides what an HTTP status, a network failure or a body means, and for how long to believe
it:

- 2xx: parse the rules (the first ``max_bytes`` only, UTF-8 BOM stripped; RFC 9309 asks
  crawlers to parse at least 500 KiB).
- 4xx (including 404): the file is "unavailable"; crawl as if there were no rules.
- 5xx, a network error or a timeout: the file is "unreachable"; assume everything is
  disallowed, for a shorter time than a good answer is cached, since the crawler cannot
  know what the rules would have said.
- 3xx is followed by the fetcher (up to five hops); more hops count as unavailable (4xx).
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum

ROBOTS_MAX_BYTES = 500 * 1024
UTF8_BOM = b"\xef\xbb\xbf"


class RobotsVerdict(Enum):
    PARSE = "parse"  # 2xx: the rules apply
    ALLOW_ALL = "allow_all"  # 4xx, too many redirects: no rules
    DISALLOW_ALL = "disallow_all"  # 5xx, network error, timeout: nothing may be fetched


@dataclass(frozen=True)
class RobotsCachePolicy:
    """How long a robots.txt answer is kept (seconds): good answers a day, errors less."""

    ok_ttl_s: float = 24 * 3600.0
    unavailable_ttl_s: float = 24 * 3600.0
    error_ttl_s: float = 3600.0

    def __post_init__(self) -> None:
        if min(self.ok_ttl_s, self.unavailable_ttl_s, self.error_ttl_s) < 0:
            raise ValueError("robots cache lifetimes must be >= 0 seconds")

    def ttl(self, verdict: RobotsVerdict) -> float:
        if verdict is RobotsVerdict.PARSE:
            return self.ok_ttl_s
        if verdict is RobotsVerdict.ALLOW_ALL:
            return self.unavailable_ttl_s
        return self.error_ttl_s


def verdict_for_status(status: int | None) -> RobotsVerdict:
    """The RFC 9309 meaning of a final robots.txt status (None: no response at all)."""
    if status is None or status >= 500:
        return RobotsVerdict.DISALLOW_ALL
    if 200 <= status < 300:
        return RobotsVerdict.PARSE
    if 400 <= status < 500:
        return RobotsVerdict.ALLOW_ALL
    # 1xx never arrives as a final status; a 3xx left over means the redirect limit was hit,
    # which RFC 9309 treats like an unavailable file.
    return RobotsVerdict.ALLOW_ALL


def robots_text(body: bytes, max_bytes: int = ROBOTS_MAX_BYTES) -> str:
    """The part of a robots.txt body to parse: first ``max_bytes``, BOM stripped, as text.

    Invalid UTF-8 is replaced rather than rejected (RFC 9309: parse what can be parsed); a
    multi-byte character cut at the limit becomes one replacement character in a line that
    is incomplete anyway.
    """
    if max_bytes < 0:
        raise ValueError(f"max_bytes must be >= 0, got {max_bytes}")
    head = body[:max_bytes]
    if head.startswith(UTF8_BOM):
        head = head[len(UTF8_BOM) :]
    return head.decode("utf-8", errors="replace")


def capped_crawl_delay(value: float | None, cap_s: float) -> float:
    """Crawl-delay to honour (not part of RFC 9309; optional): 0 if absent, else capped."""
    if value is None or value != value or value <= 0:  # NaN or non-positive
        return 0.0
    return min(float(value), cap_s)
