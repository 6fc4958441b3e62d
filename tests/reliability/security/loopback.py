"""Tiny HTTP servers on chosen loopback addresses, with a log of what reached them.

``serve(answer, address)`` runs a threading HTTP server on ``address`` (127.0.0.2, 127.0.0.3,
...: distinct loopback hosts, so one can be allowed and another not) and logs every request
that arrives. ``answer(path)`` returns ``(status, headers, body)``. ``same_port`` binds a
second address to the first one's port (DNS rebinding tests need the port to match).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

Answer = Callable[[str], tuple[int, dict[str, str], bytes]]


def page(path: str) -> tuple[int, dict[str, str], bytes]:
    """The default answer: robots.txt 404 (allow all), any other path a small page."""
    if path == "/robots.txt":
        return 404, {}, b""
    body = f"<html><body><article>{path}</article></body></html>".encode()
    return 200, {"Content-Type": "text/html; charset=utf-8"}, body


@dataclass
class Served:
    address: str
    port: int
    requests: list[str] = field(default_factory=list)  # paths, in arrival order

    @property
    def base(self) -> str:
        return f"http://{self.address}:{self.port}"


def _start(answer: Answer, address: str, port: int) -> tuple[Served, Callable[[], None]]:
    served = Served(address, port)

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self) -> None:
            served.requests.append(self.path)
            status, headers, body = answer(self.path)
            self.send_response(status)
            for name, value in headers.items():
                self.send_header(name, value)
            self.send_header("Content-Length", str(len(body)))
            self.send_header("Connection", "close")
            self.end_headers()
            self.wfile.write(body)
            self.close_connection = True

        def log_message(self, format: str, *args: object) -> None:
            pass

    server = ThreadingHTTPServer((address, port), Handler)
    server.daemon_threads = True
    served.port = server.server_address[1]
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()

    def stop() -> None:
        server.shutdown()
        server.server_close()

    return served, stop


@contextmanager
def serve(answer: Answer = page, address: str = "127.0.0.2", port: int = 0) -> Iterator[Served]:
    served, stop = _start(answer, address, port)
    try:
        yield served
    finally:
        stop()


@contextmanager
def same_port(first: str, second: str, answer: Answer = page) -> Iterator[tuple[Served, Served]]:
    """Two servers on ``first`` and ``second`` sharing one port (retried if it is taken)."""
    for _ in range(20):
        one, stop_one = _start(answer, first, 0)
        try:
            two, stop_two = _start(answer, second, one.port)
        except OSError:
            stop_one()
            continue
        try:
            yield one, two
        finally:
            stop_two()
            stop_one()
        return
    raise RuntimeError(f"no port free on both {first} and {second}")
