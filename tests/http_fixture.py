"""A tiny loopback HTTP server whose answers a test writes: ``routes[path] = (status,
headers, body)``; a callable body is streamed without Content-Length. Logs the paths asked
with their User-Agent. Shared by the discovery and cycle tests."""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Body = bytes | Callable[[], Iterable[bytes]]  # a callable body is streamed, no Content-Length


@dataclass
class FixtureServer:
    """Serves ``routes[path] = (status, headers, body)`` on 127.0.0.1; logs the paths asked."""

    routes: dict[str, tuple[int, dict[str, str], Body]] = field(default_factory=dict)
    requests: list[tuple[str, str]] = field(default_factory=list)  # (path, user agent)
    base: str = ""


@contextmanager
def serving(state: FixtureServer) -> Iterator[FixtureServer]:
    """Serve ``state``'s routes from a background thread until the block exits (404 for
    paths it does not know)."""

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
