"""What a failed exchange means: one recorded outcome per way a server or network can fail.

httpx, httpcore, h11, aiohttp and ssl each raise their own exceptions, wrapped in each
other's (``httpx-aiohttp`` even maps a TLS certificate error or a refused connection to
``httpx.ConnectTimeout``), so the type on top says little. ``classify_failure`` reads the
whole cause chain and names what happened:

- ``refused_address``: the address policy refused the request (nothing was sent);
- ``tls_error``: the TLS handshake failed (bad or self-signed certificate, a plain-text or
  garbage answer on an https port);
- ``timeout``: a real timeout (connect, read, or the attempt's total);
- ``truncated``: the connection broke after the headers, mid-body (reset, closed before the
  promised Content-Length, chunked framing cut);
- ``bad_response``: the answer is not valid HTTP/1.1 (status line, header syntax, data after
  a message that said it was complete);
- ``error``: any other network failure (connection refused, reset before an answer...);
  also any exception no network library is expected to raise (a ``ValueError`` of a client
  library that refuses a URL, a ``KeyError`` of a bug, a ``CancelledError`` the transport
  raised by itself): the reason says ``unexpected`` and names it, and it is not retried
  (it would fail the same way), so it can never loop.

Only ``timeout``, ``truncated`` and network ``error`` are worth another attempt (the
classes of ``models.outcomes``, read through ``models.fetching.politeness.is_retryable``).
A caller of the transport catches every ``Exception`` and routes it here, and a
``CancelledError`` too unless its own task is being cancelled (``stray_cancellation``).
"""

from __future__ import annotations

import asyncio
import ssl
from collections.abc import Iterator
from dataclasses import dataclass

import aiohttp
import httpcore
import httpx
from aiohttp.http_exceptions import HttpProcessingError

from models.fetching.politeness import is_retryable
from tasks.fetch.net_guard import AddressRefusedError

#: Characters of an exception message kept in a history row's reason.
_REASON_CHARS = 240


class BodyInterruptedError(httpx.ReadError):
    """The connection failed while the body was being read (the headers had arrived)."""

    def __init__(self, received: int, cause: BaseException) -> None:
        super().__init__(f"connection failed after {received} body bytes: {_text(cause)}")
        self.received = received


#: What a network, a server or an HTTP client library may raise for a failed exchange; any
#: other exception is ``unexpected`` (never retried).
NETWORK_ERRORS: tuple[type[BaseException], ...] = (
    httpx.HTTPError,
    httpcore.TimeoutException,
    httpcore.NetworkError,
    httpcore.ProtocolError,
    httpcore.ProxyError,
    httpcore.UnsupportedProtocol,
    aiohttp.ClientError,
    HttpProcessingError,
    OSError,  # ConnectionError, ssl.SSLError, socket.gaierror, TimeoutError
    AddressRefusedError,
)


@dataclass(frozen=True, slots=True)
class Failure:
    outcome: str
    reason: str
    retryable: bool
    unexpected: bool = False  # not a network failure: a client library's refusal or a bug


def stray_cancellation() -> bool:
    """True when a ``CancelledError`` just caught is the transport's own, not a request to
    cancel the running task (then it is the request's outcome; otherwise re-raise it)."""
    task = asyncio.current_task()
    return task is not None and task.cancelling() == 0


def classify_failure(exc: BaseException) -> Failure:
    """The outcome, reason and retryability of an exception raised by an exchange."""
    chain = list(_chain(exc))
    for link in chain:
        if isinstance(link, AddressRefusedError):
            return _failure("refused_address", f"address refused: {link.reason}")
    for link in reversed(chain):  # the deepest: ssl's own, not a wrapper's
        if isinstance(link, ssl.SSLError):
            return _failure("tls_error", f"TLS: {_ssl_text(link)}")
    if any(_is_timeout(link) for link in chain):
        return _failure("timeout", _text(_deepest_timeout(chain)))
    body = next((link for link in chain if isinstance(link, BodyInterruptedError)), None)
    if body is not None:
        return _failure("truncated", _text(body))
    for link in chain:
        if isinstance(link, HttpProcessingError | httpcore.RemoteProtocolError):
            if "without sending a response" in str(link):
                break  # the server closed an idle connection: a network error
            return _failure("bad_response", f"not valid HTTP: {_text(link)}")
    if not any(isinstance(link, NETWORK_ERRORS) for link in chain):
        return Failure("error", f"unexpected {_text(exc)}", False, unexpected=True)
    return _failure("error", _text(chain[-1] if _is_wrapper(chain[0]) else chain[0]))


def _failure(outcome: str, reason: str) -> Failure:
    """A network failure, retryable as its outcome is (no status: a network error is)."""
    return Failure(outcome, reason, is_retryable(outcome, None))


def _chain(exc: BaseException) -> Iterator[BaseException]:
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        yield current
        current = current.__cause__ or current.__context__


def _is_timeout(exc: BaseException) -> bool:
    """A real timeout; not httpx-aiohttp's ConnectTimeout around a refused connection."""
    if isinstance(exc, aiohttp.ServerTimeoutError | httpcore.TimeoutException):
        return True
    if isinstance(exc, asyncio.TimeoutError):  # TimeoutError, aiohttp's socket timeouts
        return True
    if isinstance(exc, httpx.TimeoutException):
        cause = exc.__cause__
        return cause is None or _is_timeout(cause)
    return False


def _deepest_timeout(chain: list[BaseException]) -> BaseException:
    timeouts = [link for link in chain if _is_timeout(link)]
    return timeouts[0]


def _is_wrapper(exc: BaseException) -> bool:
    """An exception that only re-labels its cause (httpx over httpcore or aiohttp)."""
    return isinstance(exc, httpx.TransportError) and exc.__cause__ is not None


def _ssl_text(exc: ssl.SSLError) -> str:
    verify = getattr(exc, "verify_message", None)
    if verify:
        return f"certificate verify failed: {verify}"
    reason = getattr(exc, "reason", None)
    return reason.lower().replace("_", " ") if isinstance(reason, str) else _text(exc)


def _text(exc: BaseException) -> str:
    message = " ".join(str(exc).split())
    text = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return text if len(text) <= _REASON_CHARS else text[: _REASON_CHARS - 3] + "..."
