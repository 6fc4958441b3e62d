"""A small HTTP/1.1 request parser and response writer (no I/O).

Just enough HTTP for a test server that must be fast and fully under our control:
request line + headers, ``Content-Length`` bodies (read and ignored), keep-alive by default
on HTTP/1.1 and on request for HTTP/1.0, absolute-form targets (for the forward proxy).
Chunked request bodies are refused (501): no client of the sandbox sends them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from http import HTTPStatus

MAX_HEAD_BYTES = 64 * 1024
MAX_BODY_BYTES = 1024 * 1024


class BadRequestError(Exception):
    """The bytes are not a request we accept; ``status`` is the answer (then close)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


@dataclass(slots=True)
class Request:
    method: str
    target: str  # as sent: origin form (/p/1?x) or absolute form (http://host/p/1)
    path: str  # target without the query (for absolute form: the URL's path)
    query: str
    version: str
    headers: dict[str, str]  # lower-case names; repeated headers joined with ", "
    keep_alive: bool


@dataclass(slots=True)
class Reply:
    """What to answer, and after how long (the host's latency, a robots timeout...)."""

    status: int
    headers: list[tuple[str, str]] = field(default_factory=list)
    body: bytes = b""
    delay: float = 0.0
    close: bool = False


def parse_request(buffer: bytearray) -> tuple[Request, int] | None:
    """Parse one request from the start of ``buffer``: ``(request, bytes used)``, or None if
    more bytes are needed. Raises :class:`BadRequestError` for malformed or oversized input."""
    end = buffer.find(b"\r\n\r\n")
    if end < 0:
        if len(buffer) > MAX_HEAD_BYTES:
            raise BadRequestError(431, "request head too large")
        return None
    if end > MAX_HEAD_BYTES:
        raise BadRequestError(431, "request head too large")
    try:
        head = buffer[:end].decode("latin-1")
    except UnicodeDecodeError as exc:  # pragma: no cover - latin-1 decodes every byte
        raise BadRequestError(400, "undecodable request head") from exc
    lines = head.split("\r\n")
    request_line = lines[0].split(" ")
    if len(request_line) != 3:
        raise BadRequestError(400, f"malformed request line: {lines[0][:100]!r}")
    method, target, version = request_line
    if version not in ("HTTP/1.1", "HTTP/1.0"):
        raise BadRequestError(505, f"unsupported HTTP version: {version[:20]!r}")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep or not name or name[-1] in " \t":
            raise BadRequestError(400, f"malformed header line: {line[:100]!r}")
        name = name.lower()
        value = value.strip()
        headers[name] = f"{headers[name]}, {value}" if name in headers else value
    used = end + 4
    if "transfer-encoding" in headers:
        raise BadRequestError(501, "chunked request bodies are not supported")
    length_text = headers.get("content-length")
    if length_text is not None:
        if not length_text.isdigit():
            raise BadRequestError(400, f"bad Content-Length: {length_text[:20]!r}")
        length = int(length_text)
        if length > MAX_BODY_BYTES:
            raise BadRequestError(413, "request body too large")
        if len(buffer) < used + length:
            return None
        used += length
    connection = headers.get("connection", "").lower()
    # HTTP/1.1 keeps the connection unless told to close; HTTP/1.0 closes unless asked not to.
    keep_alive = "close" not in connection if version == "HTTP/1.1" else "keep-alive" in connection
    path, _, query = target.partition("?")
    if path.startswith(("http://", "https://")):
        scheme_end = path.index("//") + 2
        slash = path.find("/", scheme_end)
        path = "/" if slash < 0 else path[slash:]
    return Request(method, target, path, query, version, headers, keep_alive), used


def encode_response(reply: Reply, *, head_only: bool, keep_alive: bool) -> bytes:
    """The bytes of a response: status line, headers, Content-Length and (unless HEAD) body."""
    try:
        phrase = HTTPStatus(reply.status).phrase
    except ValueError:
        phrase = "Bandwidth Limit Exceeded" if reply.status == 509 else "Unknown"
    lines = [f"HTTP/1.1 {reply.status} {phrase}"]
    lines.extend(f"{name}: {value}" for name, value in reply.headers)
    if reply.status != 304:
        lines.append(f"Content-Length: {len(reply.body)}")
    lines.append("Connection: keep-alive" if keep_alive else "Connection: close")
    head = ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1")
    if head_only or reply.status == 304 or reply.status < 200:
        return head
    return head + reply.body
