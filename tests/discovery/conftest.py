"""Loopback servers for discovery tests: the sandbox web, and a tiny server of fixture files."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from models.discovery import HostCaps
from sandbox import SANDBOX_NETWORKS
from tasks.discovery import DiscoverySettings
from tasks.sitemaps import SitemapSettings

#: Fast, still polite-looking settings for loopback tests.
FAST = DiscoverySettings(
    sitemaps=SitemapSettings(min_delay_s=0.0, timeout_s=20.0, allowed_networks=SANDBOX_NETWORKS),
    caps=HostCaps(floor=10_000),
)
START = datetime(2026, 1, 1, tzinfo=UTC)

Body = bytes | Callable[[], Iterable[bytes]]  # a callable body is streamed, no Content-Length


@dataclass
class FixtureServer:
    """Serves ``routes[path] = (status, headers, body)`` on 127.0.0.1; logs the paths asked."""

    routes: dict[str, tuple[int, dict[str, str], Body]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, user agent)
    base: str = ""


@pytest.fixture
def fixture_server() -> Iterator[FixtureServer]:
    state = FixtureServer()

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            state.requests.append((self.path, self.headers.get("User-Agent", "")))
            status, headers, body = state.routes.get(
                self.path, (404, {"Content-Type": "text/plain"}, b"not found\n")
            )
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            if isinstance(body, bytes):
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.end_headers()  # no length: the body ends when the connection closes
            try:
                for chunk in body():
                    self.wfile.write(chunk)
            except (BrokenPipeError, ConnectionResetError):
                pass  # the client stopped reading, as it should past a limit

        def log_message(self, *args: object) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    state.base = f"http://127.0.0.1:{server.server_address[1]}"
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield state
    finally:
        server.shutdown()
        server.server_close()
