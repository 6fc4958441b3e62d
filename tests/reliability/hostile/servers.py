"""Hostile and broken HTTP servers on loopback, one port per behaviour, for reliability tests.

Each behaviour is a small coroutine writing raw bytes to the socket, so it can break HTTP in
ways no well-behaved server library would let it: a status line that is not one, headers
without a colon, a Content-Length that lies, a body that never ends or ends in a reset, a
TLS port that answers garbage. Large bodies are generated as they are sent (a 1 GB page is
never built in memory, on either side). ``serve_hostile()`` runs them all in a background
thread with its own event loop and yields the base URL of each behaviour.

robots.txt is answered 404 (allow all) unless the behaviour is about robots.txt; every
answer closes the connection, so one broken exchange never leaks into the next.
"""

from __future__ import annotations

import asyncio
import datetime
import ipaddress
import os
import socket
import ssl
import struct
import tempfile
import threading
import zlib
from collections.abc import Awaitable, Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from functools import lru_cache

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter, str], Awaitable[None]]

GIB = 1024**3
HEALTHY_PAGE = b"<html><head><title>fine</title></head><body><article>%d</article></body></html>"


# ---------------------------------------------------------------------- byte helpers


def head(status: str, *headers: str) -> bytes:
    lines = [f"HTTP/1.1 {status}", *headers, "Connection: close", "", ""]
    return "\r\n".join(lines).encode("latin-1")


async def send(writer: asyncio.StreamWriter, data: bytes) -> None:
    writer.write(data)
    await writer.drain()


async def stream_zeros(writer: asyncio.StreamWriter, total: int, *, chunked: bool) -> None:
    """Send ``total`` bytes (or forever if negative) in 64 KiB pieces, made once."""
    piece = b"0" * 65536
    sent = 0
    while total < 0 or sent < total:
        data = piece if total < 0 else piece[: min(len(piece), total - sent)]
        if chunked:
            data = b"%x\r\n%s\r\n" % (len(data), data)
        writer.write(data)
        await writer.drain()
        sent += len(piece)


@lru_cache(maxsize=1)
def gzip_bomb() -> bytes:
    """About 100 KB of gzip that inflates to 100 MiB of zeros (made once per process)."""
    deflate = zlib.compressobj(9, zlib.DEFLATED, 16 + zlib.MAX_WBITS)
    zeros = bytes(1 << 20)
    parts = [deflate.compress(zeros) for _ in range(100)]
    parts.append(deflate.flush())
    return b"".join(parts)


def billion_laughs() -> bytes:
    """A sitemap whose one <loc> would expand to 10**9 "lol"s (3 GB) through nested entities."""
    entities = ['<!ENTITY lol0 "lol">']
    entities += [f'<!ENTITY lol{i} "{f"&lol{i - 1};" * 10}">' for i in range(1, 10)]
    return (
        f'<?xml version="1.0"?><!DOCTYPE urlset [{"".join(entities)}]>'
        '<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        "<url><loc>&lol9;</loc></url></urlset>"
    ).encode()


# ---------------------------------------------------------------------- behaviours


async def healthy(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    if path == "/robots.txt":
        body = b"User-agent: *\nAllow: /\n"
        await send(
            writer,
            head("200 OK", "Content-Type: text/plain", f"Content-Length: {len(body)}") + body,
        )
        return
    body = HEALTHY_PAGE % len(path)
    ctype = "Content-Type: text/html; charset=utf-8"
    await send(writer, head("200 OK", ctype, f"Content-Length: {len(body)}") + body)


async def slow_drip(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    """Headers at once, then one byte of the body every second."""
    await send(writer, head("200 OK", "Content-Type: text/html", "Content-Length: 1000"))
    for _ in range(1000):
        await send(writer, b"x")
        await asyncio.sleep(1.0)


async def endless(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    """A chunked body that never ends, as fast as the client reads."""
    await send(writer, head("200 OK", "Content-Type: text/html", "Transfer-Encoding: chunked"))
    await stream_zeros(writer, -1, chunked=True)


async def bomb(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    body = gzip_bomb()
    ctype = "Content-Type: text/html"
    await send(
        writer, head("200 OK", ctype, "Content-Encoding: gzip", f"Content-Length: {len(body)}")
    )
    await send(writer, body)


async def gigabyte_declared(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """A 1 GiB page with an honest Content-Length, streamed."""
    await send(writer, head("200 OK", "Content-Type: text/html", f"Content-Length: {GIB}"))
    await stream_zeros(writer, GIB, chunked=False)


async def gigabyte_chunked(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """A 1 GiB page without a Content-Length (chunked), streamed."""
    await send(writer, head("200 OK", "Content-Type: text/html", "Transfer-Encoding: chunked"))
    await stream_zeros(writer, GIB, chunked=True)
    await send(writer, b"0\r\n\r\n")


async def redirect_loop(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    target = "/b" if path == "/a" else "/a"
    await send(writer, head("302 Found", f"Location: {target}", "Content-Length: 0"))


async def redirect_chain(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    step = int(path.rsplit("/", 1)[-1]) if path.rsplit("/", 1)[-1].isdigit() else 0
    await send(writer, head("301 Moved", f"Location: /r/{step + 1}", "Content-Length: 0"))


async def bad_status_line(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    await send(writer, b"HTTP/1.1 OK-ish maybe\r\nContent-Length: 2\r\n\r\nhi")


async def bad_headers(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    await send(
        writer,
        b"HTTP/1.1 200 OK\r\nContent-Type text/html\r\nX-Bad\x00Name: 1\r\n"
        b" folded: nonsense\r\nContent-Length: 2\r\n\r\nhi",
    )


async def length_short(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """Content-Length says 10, 2,000 bytes follow (the rest must not count as the page)."""
    body = b"<p>" + b"y" * 1997
    await send(writer, head("200 OK", "Content-Type: text/html", "Content-Length: 10") + body)


async def length_long(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """Content-Length says 100,000, 100 bytes follow, then the connection closes."""
    body = b"<p>" + b"z" * 97
    await send(writer, head("200 OK", "Content-Type: text/html", "Content-Length: 100000") + body)


async def bad_encoding(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """Invalid UTF-8 (lone continuation bytes, a truncated sequence) under a wrong charset."""
    body = b"<html><head><meta charset='utf-8'></head><body><article>caf\xe9 \x80\x81 \xf0\x9f"
    body += b" \xff\xfe na\xefve</article></body></html>"
    ctype = "Content-Type: text/html; charset=utf-16"
    await send(writer, head("200 OK", ctype, f"Content-Length: {len(body)}") + body)


async def reset_mid_body(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """Half the promised body, then a TCP reset (RST, not an orderly close)."""
    await send(writer, head("200 OK", "Content-Type: text/html", "Content-Length: 100000"))
    await send(writer, b"r" * 50_000)
    sock = writer.get_extra_info("socket")
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    writer.transport.abort()


async def garbage(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
    await send(writer, os.urandom(4096))


async def plain_answer(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
) -> None:
    """What a plain HTTP server says to a TLS hello: a 400, in clear text."""
    await send(writer, head("400 Bad Request", "Content-Length: 0"))


def robots_only(handler: Handler) -> Handler:
    """``handler`` for /robots.txt, healthy pages for every other path."""

    async def split(reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str) -> None:
        chosen = handler if path == "/robots.txt" else healthy
        await chosen(reader, writer, path)

    return split


def robots(body: Callable[[], Iterator[bytes]], ctype: str) -> Handler:
    """robots.txt streamed from ``body()``; pages answered normally."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
    ) -> None:
        if path != "/robots.txt":
            await healthy(reader, writer, path)
            return
        await send(writer, head("200 OK", f"Content-Type: {ctype}", "Transfer-Encoding: chunked"))
        for piece in body():
            await send(writer, b"%x\r\n%s\r\n" % (len(piece), piece))
        await send(writer, b"0\r\n\r\n")

    return handler


def huge_robots() -> Iterator[bytes]:
    """8 MiB: ``/private`` disallowed at the top, ``Disallow: /`` far past 500 KiB."""
    yield b"User-agent: *\nDisallow: /private\n"
    filler = b"# " + b"padding " * 127 + b"\n"
    for _ in range(8 * 1024):
        yield filler
    yield b"User-agent: *\nDisallow: /\n"


def junk_robots() -> Iterator[bytes]:
    """3 MiB of random bytes (NULs, invalid UTF-8, no line structure)."""
    for i in range(48):
        yield os.urandom(65536) if i % 2 else bytes(range(256)) * 256


def sitemap(body: Callable[[str], Iterator[bytes]]) -> Handler:
    """A sitemap streamed from ``body(origin)`` at every path but /robots.txt (404)."""

    async def handler(
        reader: asyncio.StreamReader, writer: asyncio.StreamWriter, path: str
    ) -> None:
        if path == "/robots.txt":
            await send(writer, head("404 Not Found", "Content-Length: 0"))
            return
        host, port = writer.get_extra_info("sockname")[:2]
        await send(
            writer, head("200 OK", "Content-Type: application/xml", "Transfer-Encoding: chunked")
        )
        for piece in body(f"http://{host}:{port}"):
            await send(writer, b"%x\r\n%s\r\n" % (len(piece), piece))
        await send(writer, b"0\r\n\r\n")

    return handler


def millions_of_urls(origin: str, count: int = 3_000_000) -> Iterator[bytes]:
    """A urlset of ``count`` entries, generated 10,000 at a time as it is sent."""
    yield b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    for start in range(0, count, 10_000):
        yield "".join(
            f"<url><loc>{origin}/p/{i}</loc></url>" for i in range(start, start + 10_000)
        ).encode()
    yield b"</urlset>"


def laughs(origin: str) -> Iterator[bytes]:
    yield billion_laughs()


def small_sitemap(origin: str) -> Iterator[bytes]:
    yield b'<?xml version="1.0"?><urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
    yield "".join(f"<url><loc>{origin}/p/{i}</loc></url>" for i in range(20)).encode()
    yield b"</urlset>"


# ---------------------------------------------------------------------- TLS


@lru_cache(maxsize=1)
def self_signed_context() -> ssl.SSLContext:
    """A server context with a fresh self-signed certificate for 127.0.0.1 (cryptography)."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    key = ec.generate_private_key(ec.SECP256R1())
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "hostile.test")])
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(days=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(
            x509.SubjectAlternativeName([x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]),
            critical=False,
        )
        .sign(key, hashes.SHA256())
    )
    with tempfile.TemporaryDirectory() as folder:
        cert_path = os.path.join(folder, "cert.pem")
        key_path = os.path.join(folder, "key.pem")
        with open(cert_path, "wb") as f:
            f.write(cert.public_bytes(serialization.Encoding.PEM))
        with open(key_path, "wb") as f:
            f.write(
                key.private_bytes(
                    serialization.Encoding.PEM,
                    serialization.PrivateFormat.PKCS8,
                    serialization.NoEncryption(),
                )
            )
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.load_cert_chain(cert_path, key_path)
    return context


# ---------------------------------------------------------------------- server


@dataclass(frozen=True)
class Behaviour:
    handler: Handler
    tls: bool = False  # serve through TLS (self-signed)
    scheme: str = "http"  # the scheme clients are told to use
    own_robots: bool = False  # the handler answers /robots.txt too (else a quick 404)
    eager: bool = False  # the handler writes as soon as the client connects (no request read)


class HostileServers:
    """Every behaviour on its own 127.0.0.1 port; ``url(name)`` is its base URL."""

    def __init__(self, behaviours: dict[str, Behaviour]) -> None:
        self.behaviours = behaviours
        self.ports: dict[str, int] = {}
        self._servers: list[asyncio.Server] = []
        self._tasks: set[asyncio.Task[None]] = set()

    def url(self, name: str) -> str:
        return f"{self.behaviours[name].scheme}://127.0.0.1:{self.ports[name]}"

    async def start(self) -> None:
        for name, behaviour in self.behaviours.items():
            context = self_signed_context() if behaviour.tls else None
            server = await asyncio.start_server(
                self._connection(behaviour), "127.0.0.1", 0, ssl=context
            )
            self._servers.append(server)
            self.ports[name] = server.sockets[0].getsockname()[1]

    def _connection(self, behaviour: Behaviour) -> Callable[..., Awaitable[None]]:
        async def serve(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
            task = asyncio.current_task()
            assert task is not None
            self._tasks.add(task)
            try:
                if behaviour.eager:
                    await behaviour.handler(reader, writer, "")
                    return
                try:
                    request = await asyncio.wait_for(reader.readuntil(b"\r\n\r\n"), 10)
                    path = request.split(b" ", 2)[1].decode("latin-1")
                except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, IndexError):
                    path = "?"  # not HTTP (a TLS hello on a plain port...): answer anyway
                except (TimeoutError, ConnectionError, ssl.SSLError):
                    return
                if path == "/robots.txt" and not behaviour.own_robots:
                    await send(writer, head("404 Not Found", "Content-Length: 0"))
                else:
                    await behaviour.handler(reader, writer, path)
            except (ConnectionError, ssl.SSLError, OSError):
                pass  # the client gave up: that is the point
            except asyncio.CancelledError:
                pass  # shutting down: end quietly (a cancelled handler is logged by asyncio)
            finally:
                self._tasks.discard(task)
                if not writer.transport.is_closing():
                    writer.close()

        return serve

    async def close(self) -> None:
        for server in self._servers:
            server.close()
        for task in list(self._tasks):
            task.cancel()
        await asyncio.gather(*self._tasks, return_exceptions=True)


def catalog() -> dict[str, Behaviour]:
    """Every named hostile behaviour (what ``serve_hostile_process`` can serve)."""
    return {
        "healthy": Behaviour(healthy),
        "slow drip": Behaviour(slow_drip),
        "never-ending body": Behaviour(endless),
        "gzip bomb": Behaviour(bomb),
        "1 GiB page, Content-Length": Behaviour(gigabyte_declared),
        "1 GiB page, chunked": Behaviour(gigabyte_chunked),
        "redirect loop": Behaviour(redirect_loop),
        "redirect chain": Behaviour(redirect_chain),
        "malformed status line": Behaviour(bad_status_line),
        "malformed headers": Behaviour(bad_headers),
        "garbage instead of HTTP": Behaviour(garbage),
        "Content-Length too short": Behaviour(length_short),
        "Content-Length too long": Behaviour(length_long),
        "reset mid-body": Behaviour(reset_mid_body),
        "invalid UTF-8, wrong charset": Behaviour(bad_encoding),
        "TLS: self-signed certificate": Behaviour(healthy, tls=True, scheme="https"),
        "TLS: plain HTTP on https": Behaviour(plain_answer, scheme="https", eager=True),
        "TLS: garbage on https": Behaviour(garbage, scheme="https", eager=True),
        "robots.txt of 8 MiB": Behaviour(robots(huge_robots, "text/plain"), own_robots=True),
        "robots.txt of binary junk": Behaviour(
            robots(junk_robots, "application/octet-stream"), own_robots=True
        ),
        "robots.txt gzip bomb": Behaviour(robots_only(bomb), own_robots=True),
        "robots.txt slow drip": Behaviour(robots_only(slow_drip), own_robots=True),
        "robots.txt malformed": Behaviour(robots_only(bad_status_line), own_robots=True),
        "sitemap: billion laughs": Behaviour(sitemap(laughs), own_robots=True),
        "sitemap: 3 million URLs": Behaviour(sitemap(millions_of_urls), own_robots=True),
        "sitemap: healthy": Behaviour(sitemap(small_sitemap), own_robots=True),
    }


@dataclass(frozen=True)
class RemoteServers:
    """Servers running in another process: base URLs by behaviour name."""

    urls: dict[str, str]

    def url(self, name: str) -> str:
        return self.urls[name]


@contextmanager
def serve_hostile_process(names: list[str] | None = None) -> Iterator[RemoteServers]:
    """Serve catalog behaviours from a child process (its CPU and memory are its own, so a
    server streaming a gigabyte never competes with the crawler under test for the GIL, and
    tracemalloc in the test sees the crawler alone). Stopped when the block exits."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    chosen = names or list(catalog())
    root = Path(__file__).resolve().parents[3]
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.hostile.servers", json.dumps(chosen)],
        cwd=root,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
    )
    try:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if not line:
            raise RuntimeError(f"hostile servers did not start (exit {proc.wait()})")
        yield RemoteServers(json.loads(line))
    finally:
        if proc.stdin is not None:
            proc.stdin.close()  # the child stops when its stdin closes
        try:
            proc.wait(10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()


def _main() -> None:
    """``python -m tests.reliability.hostile.servers '["name", ...]'``: print the base URLs
    as one JSON line, serve until stdin closes."""
    import json
    import sys

    names = json.loads(sys.argv[1])
    known = catalog()
    gzip_bomb()
    with serve_hostile({n: known[n] for n in names}) as running:
        print(json.dumps({n: running.url(n) for n in names}), flush=True)
        sys.stdin.read()


@contextmanager
def serve_hostile(behaviours: dict[str, Behaviour]) -> Iterator[HostileServers]:
    """Run the servers in a background thread until the block exits."""
    servers = HostileServers(behaviours)
    loop = asyncio.new_event_loop()
    ready = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(servers.start())
        except BaseException as exc:
            failure.append(exc)
            ready.set()
            return
        ready.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(servers.close())

    thread = threading.Thread(target=run, name="hostile-servers", daemon=True)
    thread.start()
    ready.wait()
    try:
        if failure:
            raise failure[0]
        yield servers
    finally:
        loop.call_soon_threadsafe(loop.stop)
        thread.join(timeout=30)
        loop.close()


if __name__ == "__main__":
    _main()
