"""Guard rails applied to every response body, and small header helpers.

The body is read raw (as it came off the wire) and decoded here, in bounded steps, so a
response can never make the process hold more than ``max_bytes`` of decoded content: a
gzip bomb of a few kilobytes that inflates to gigabytes is stopped after ``max_bytes + 1``
bytes and told apart from an honestly large page by its decoded/raw ratio. Each way a body
can fail gets its own outcome and a reason naming the limit.
"""

from __future__ import annotations

import zlib
from collections.abc import Iterable

#: What we advertise in Accept-Encoding: exactly what ``BoundedDecoder`` can decode.
ACCEPT_ENCODING = "gzip, deflate"
#: A decoded body must pass this size before a high decoded/raw ratio counts as a bomb
#: (tiny pages compress absurdly well and are harmless).
BOMB_MIN_DECODED = 1024 * 1024
#: Phrases of bot-challenge pages, searched in the lower-cased first 4 KiB (plain substring
#: search: a case-insensitive regex alternation cost ~0.1 ms per page, more than all the
#: engine's own bookkeeping).
_CHALLENGE_MARKERS = (
    b"just a moment",
    b"checking your browser",
    b"bot-challenge",
    b"captcha",
    b"are you a robot",
    b"verify you are human",
)


class BodyLimitError(Exception):
    """The body broke a guard rail; ``outcome`` and ``reason`` go into the history row."""

    def __init__(self, outcome: str, reason: str) -> None:
        super().__init__(reason)
        self.outcome = outcome
        self.reason = reason


class BoundedDecoder:
    """Incremental Content-Encoding decoder that refuses to produce more than ``max_bytes``.

    ``truncate=True`` (robots.txt) stops quietly at the limit instead of failing: RFC 9309
    parses the first 500 KiB of a larger file.
    """

    def __init__(
        self,
        encoding: str | None,
        max_bytes: int,
        max_ratio: float,
        *,
        truncate: bool = False,
    ) -> None:
        codings = [c.strip().lower() for c in (encoding or "").split(",") if c.strip()]
        codings = [c for c in codings if c != "identity"]
        if len(codings) > 1:
            raise BodyLimitError("error", f"stacked content-encodings {encoding!r} not accepted")
        self.coding = codings[0] if codings else None
        if self.coding not in (None, "gzip", "x-gzip", "deflate"):
            raise BodyLimitError("error", f"unsupported content-encoding {self.coding!r}")
        self.max_bytes = max_bytes
        self.max_ratio = max_ratio
        self.truncate = truncate
        self.raw = 0
        self.size = 0
        self.done = False
        self._chunks: list[bytes] = []
        self._zlib: zlib._Decompress | None = self._new_decompressor()
        self._deflate_probe = self.coding == "deflate"

    def _new_decompressor(self) -> zlib._Decompress | None:
        if self.coding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.coding == "deflate":
            return zlib.decompressobj(zlib.MAX_WBITS)
        return None

    def feed(self, data: bytes) -> None:
        """Decode one raw chunk; raises BodyLimitError past the limits (unless truncating)."""
        if self.done or not data:
            return
        if self._zlib is None:
            self.raw += len(data)
            self._append(data)
            return
        if self._deflate_probe:
            # "deflate" is zlib-wrapped by the spec but raw deflate in some servers.
            self._deflate_probe = False
            if data[0] & 0x0F != 8:
                self._zlib = zlib.decompressobj(-zlib.MAX_WBITS)
        pending = data
        decompressor: zlib._Decompress | None = self._zlib
        while pending and not self.done and decompressor is not None:
            room = self.max_bytes + 1 - self.size
            try:
                out = decompressor.decompress(pending, room)
            except zlib.error as exc:
                raise BodyLimitError("error", f"corrupt {self.coding} body: {exc}") from None
            # Count only the raw bytes consumed, so the ratio is exact even when one raw
            # chunk would inflate far beyond the limit: what the output limit left over is
            # in unconsumed_tail, and what follows the end of a gzip member (the next
            # members of a multi-member body) in unused_data; neither is consumed yet.
            left = len(decompressor.unconsumed_tail) + len(decompressor.unused_data)
            self.raw += len(pending) - left
            self._append(out)
            pending = decompressor.unconsumed_tail
            if decompressor.eof:  # concatenated gzip members are legal
                pending = decompressor.unused_data + pending
                decompressor = self._zlib = self._new_decompressor()

    def _append(self, out: bytes) -> None:
        if not out:
            return
        if self.size + len(out) > self.max_bytes:
            if self.truncate:
                self._chunks.append(out[: self.max_bytes - self.size])
                self.size = self.max_bytes
                self.done = True
                return
            self._fail(self.size + len(out))
        self.size += len(out)
        self._chunks.append(out)
        if self.coding and self.size > BOMB_MIN_DECODED and self.size > self.max_ratio * self.raw:
            self._fail(self.size)

    def _fail(self, decoded: int) -> None:
        ratio = decoded / max(1, self.raw)
        if self.coding and ratio > self.max_ratio:
            raise BodyLimitError(
                "decompression_bomb",
                f"{self.coding} body inflates over {ratio:.0f}x "
                f"({decoded} bytes from {self.raw}; limit {self.max_ratio:g}x)",
            )
        raise BodyLimitError("too_large", f"body over {self.max_bytes} bytes")

    def body(self) -> bytes:
        return b"".join(self._chunks)


def check_declared_length(content_length: str | None, max_bytes: int) -> None:
    """Refuse a body whose declared length is already over the limit, before reading it."""
    if content_length is None:
        return
    try:
        declared = int(content_length.strip())
    except ValueError:
        return
    if declared > max_bytes:
        raise BodyLimitError(
            "too_large", f"Content-Length {declared} over the limit of {max_bytes} bytes"
        )


def media_type(content_type: str | None) -> str | None:
    """``text/html; charset=utf-8`` -> ``text/html`` (lower case), None if absent."""
    if not content_type:
        return None
    return content_type.split(";", 1)[0].strip().lower() or None


def check_content_type(
    content_type: str | None, accepted: Iterable[str], *, accept_missing: bool
) -> None:
    kind = media_type(content_type)
    if kind is None:
        if accept_missing:
            return
        raise BodyLimitError("bad_content_type", "no Content-Type")
    if kind not in accepted:
        raise BodyLimitError("bad_content_type", f"content type {kind!r} not accepted")


def head_size(start_line: str, raw_headers: Iterable[tuple[bytes, bytes]]) -> int:
    """Approximate bytes of an HTTP/1.1 message head from its start line and raw headers."""
    # name + ": " + value + CRLF per header, the start line + CRLF, and the final CRLF.
    return len(start_line) + 2 + sum(len(k) + len(v) + 4 for k, v in raw_headers) + 2


def looks_like_challenge(status: int, mitigated_header: str | None, body: bytes) -> bool:
    """A bot-challenge page (a target pushing back, like a 429) rather than content.

    Checks the ``cf-mitigated: challenge`` header and a few phrases in the first 4 KiB of a
    small body; only 200, 403, 429 and 503 answers are considered.
    """
    if status not in (200, 403, 429, 503):
        return False
    if (mitigated_header or "").strip().lower() == "challenge":
        return True
    if len(body) > 64 * 1024:
        return False
    head = body[:4096].lower()
    for marker in _CHALLENGE_MARKERS:  # noqa: SIM110 - any() over a generator costs more
        if marker in head:
            return True
    return False
