"""The sandbox's asyncio server: one listening socket per host address, one port for all.

Each host ``i`` listens on its own loopback address (see :func:`sandbox.web.host_address`);
127.0.0.1 on the same port serves the fake scraping API and the forward proxy. Connections
are plain :class:`asyncio.Protocol` objects (no streams, no task per request: a reply with a
delay is sent by ``loop.call_later``), which is what lets one core serve thousands of pages
per second. Requests on one connection are answered in order (keep-alive and pipelining).

:func:`serve_sandbox` runs the server in a background thread with its own event loop for
tests and notebooks; :class:`SandboxServer` is the server itself, for a foreground process
(``python -m sandbox``). Shutdown cancels pending delayed replies, so a robots.txt "timeout"
of 30 s never holds it up.
"""

from __future__ import annotations

import asyncio
import errno
import logging
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager

from sandbox.api import ScrapingApi, api_target, locate_target, target_request
from sandbox.http import BadRequestError, Reply, Request, encode_response, parse_request
from sandbox.log import RequestLog, RequestRecord
from sandbox.responder import Responder
from sandbox.web import SandboxWeb, host_address

logger = logging.getLogger(__name__)

GATEWAY_ADDRESS = "127.0.0.1"
_PORT_ATTEMPTS = 20
_MAX_BUFFERED = 2 * 1024 * 1024  # bytes read ahead of the request being answered


class SandboxServer:
    """Serves every host of ``web`` plus the API/proxy; ``await start()``, ``await close()``."""

    def __init__(
        self,
        web: SandboxWeb,
        port: int = 0,
        *,
        log: RequestLog | None = None,
        api: ScrapingApi | None = None,
    ) -> None:
        if not 0 <= port <= 65_535:
            raise ValueError(f"port must be within [0, 65535], got {port}")
        self.web = web
        self.requested_port = port
        self.port = 0
        self.log = log or RequestLog()
        self.api = api or ScrapingApi()
        self.responder: Responder | None = None
        self.netlocs: list[str] = []
        self._listeners: list[asyncio.Server] = []
        self._connections: set[_Connection] = set()
        self._pending: set[_HostExchange] = set()
        self._held: list[_HostExchange] = []  # requests received while holding, unanswered
        self._holding = False
        self._hold_robots = False
        self._loop: asyncio.AbstractEventLoop | None = None

    async def start(self) -> None:
        """Bind every address on one port (a free one for every address when port is 0)."""
        self._loop = asyncio.get_running_loop()
        attempts = _PORT_ATTEMPTS if self.requested_port == 0 else 1
        for attempt in range(attempts):
            try:
                await self._bind_all(self.requested_port)
                break
            except OSError as exc:
                await self._close_listeners()
                if exc.errno != errno.EADDRINUSE or attempt == attempts - 1:
                    raise
                logger.debug("port %s taken on some address; trying another", self.port)
        logger.info(
            "sandbox web: %d hosts on port %d, API/proxy at %s",
            self.web.n_hosts,
            self.port,
            self.gateway_url,
        )

    async def _bind_all(self, port: int) -> None:
        loop = asyncio.get_running_loop()
        gateway = await loop.create_server(
            lambda: _Connection(self, None), GATEWAY_ADDRESS, port, reuse_address=True
        )
        self._listeners.append(gateway)
        self.port = gateway.sockets[0].getsockname()[1]
        self.responder = Responder(self.web, self.port)
        self.netlocs = [f"{host_address(i)}:{self.port}" for i in range(self.web.n_hosts)]
        for i in range(self.web.n_hosts):
            listener = await loop.create_server(
                _factory(self, i), host_address(i), self.port, reuse_address=True
            )
            self._listeners.append(listener)

    @property
    def gateway_url(self) -> str:
        return f"http://{GATEWAY_ADDRESS}:{self.port}"

    def hold(self, *, robots: bool = False) -> None:
        """Receive host requests from now on but answer none of them until :meth:`release`
        (a test's way to catch a client mid-batch without racing it). robots.txt is still
        answered unless ``robots``: a client would give its host up instead of waiting."""
        self._hold_robots = robots
        self._holding = True

    def release(self) -> None:
        """Answer the held requests (each after its usual delay) and stop holding. Runs on
        the server's loop, so it may be called from any thread."""
        if self._loop is None:
            self._holding = False
            return
        self._loop.call_soon_threadsafe(self._release)

    def _release(self) -> None:
        self._holding = False
        held, self._held = self._held, []
        for exchange in held:
            exchange.begin()

    @property
    def n_held(self) -> int:
        return len(self._held)

    async def close(self) -> None:
        """Stop listening, cancel delayed replies, drop every connection."""
        self._held.clear()
        for exchange in list(self._pending):
            exchange.cancel()
        for connection in list(self._connections):
            connection.abort()
        await self._close_listeners()

    async def _close_listeners(self) -> None:
        listeners, self._listeners = self._listeners, []
        for listener in listeners:
            listener.close()
        for listener in listeners:
            await listener.wait_closed()

    # -- dispatch -----------------------------------------------------------------------

    def dispatch(self, connection: _Connection, request: Request) -> _HostExchange | None:
        """Start answering ``request``; returns the exchange if the answer is delayed."""
        if connection.host is not None:
            return self._start(connection.host, request, "direct", connection.complete)
        if request.target.startswith("http://"):
            return self._proxy(connection, request)
        if request.method == "CONNECT" or request.target.startswith("https://"):
            connection.complete(Reply(501, body=b"HTTPS tunnels are not supported\n"))
            return None
        return self._api(connection, request)

    def _proxy(self, connection: _Connection, request: Request) -> _HostExchange | None:
        found = locate_target(request.target, self.port, self.web.n_hosts)
        if isinstance(found, Reply):
            connection.complete(found)
            return None
        i, path, query = found
        inner = target_request(request, path, query, via="proxy")
        return self._start(i, inner, "proxy", connection.complete)

    def _api(self, connection: _Connection, request: Request) -> _HostExchange | None:
        unauthorized = self.api.authorize(request.headers)
        if unauthorized is not None:
            connection.complete(unauthorized)
            return None
        url = api_target(request)
        if isinstance(url, Reply):
            connection.complete(url)
            return None
        found = locate_target(url, self.port, self.web.n_hosts)
        if isinstance(found, Reply):
            connection.complete(found)
            return None
        refusal = self.api.admit()
        if refusal is not None:
            connection.complete(refusal)
            return None
        i, path, query = found
        inner = target_request(request, path, query, via="api")
        api = self.api

        def answered(reply: Reply) -> None:
            api.settle(reply.status)
            connection.complete(api.reply(reply))

        return self._start(i, inner, "api", answered, on_abort=lambda: api.settle(None))

    def _start(
        self,
        i: int,
        request: Request,
        via: str,
        on_reply: Callable[[Reply], None],
        on_abort: Callable[[], None] | None = None,
    ) -> _HostExchange | None:
        exchange = _HostExchange(self, i, request, via, on_reply, on_abort)
        return None if exchange.start() else exchange


def _factory(server: SandboxServer, i: int) -> Callable[[], _Connection]:
    return lambda: _Connection(server, i)


class _HostExchange:
    """One request to one host: in-flight accounting, the delay, the log record."""

    __slots__ = (
        "at",
        "handle",
        "i",
        "in_flight",
        "on_abort",
        "on_reply",
        "reply",
        "request",
        "server",
        "via",
    )

    def __init__(
        self,
        server: SandboxServer,
        i: int,
        request: Request,
        via: str,
        on_reply: Callable[[Reply], None],
        on_abort: Callable[[], None] | None,
    ) -> None:
        self.server = server
        self.i = i
        self.request = request
        self.via = via
        self.on_reply = on_reply
        self.on_abort = on_abort
        self.handle: asyncio.TimerHandle | None = None
        self.at = 0.0
        self.in_flight = 0
        self.reply: Reply | None = None

    def start(self) -> bool:
        """Compute the reply; send it now (True) or later (False: after its delay, or once
        the server stops holding)."""
        server = self.server
        if server._holding and (server._hold_robots or self.request.target != "/robots.txt"):
            server._held.append(self)
            return False
        return self.begin()

    def begin(self) -> bool:
        server = self.server
        assert server.responder is not None
        state = server.responder.states[self.i]
        state.in_flight += 1
        self.in_flight = state.in_flight
        self.at = time.monotonic()
        try:
            self.reply = server.responder.respond(self.i, self.request, self.at)
        except Exception:
            logger.exception("sandbox host %d failed on %s", self.i, self.request.target)
            self.reply = Reply(500, [("Content-Type", "text/plain")], b"sandbox bug\n")
        if self.reply.delay > 0 and server._loop is not None:
            self.handle = server._loop.call_later(self.reply.delay, self._complete)
            server._pending.add(self)
            return False
        self._complete()
        return True

    def _complete(self) -> None:
        assert self.reply is not None
        self.handle = None
        self.server._pending.discard(self)
        self._record(self.reply.status)
        self.on_reply(self.reply)

    def abort(self) -> None:
        """The client went away: stop waiting, log status 499 (nothing for a held request,
        which the host never saw)."""
        if self in self.server._held:
            self.server._held.remove(self)
            return
        if self.handle is None:
            return
        self.cancel()
        self._record(499)
        if self.on_abort is not None:
            self.on_abort()

    def cancel(self) -> None:
        if self.handle is not None:
            self.handle.cancel()
            self.handle = None
        self.server._pending.discard(self)

    def _record(self, status: int) -> None:
        server = self.server
        assert server.responder is not None
        server.responder.states[self.i].in_flight -= 1
        request = self.request
        server.log.add(
            RequestRecord(
                self.at,
                time.monotonic(),
                server.netlocs[self.i],
                request.method,
                request.target,
                status,
                self.in_flight,
                request.headers,
                self.via,
            )
        )


class _Connection(asyncio.Protocol):
    """One client connection to a host (``host`` set) or to the API/proxy (``host`` None)."""

    def __init__(self, server: SandboxServer, host: int | None) -> None:
        self.server = server
        self.host = host
        self.transport: asyncio.Transport | None = None
        self.buffer = bytearray()
        self.exchange: _HostExchange | None = None
        self.request: Request | None = None
        self.dispatching = False  # True while dispatch() runs: complete() must not re-enter
        self.closed = False

    def connection_made(self, transport: asyncio.BaseTransport) -> None:
        assert isinstance(transport, asyncio.Transport)
        self.transport = transport
        self.server._connections.add(self)

    def data_received(self, data: bytes) -> None:
        self.buffer += data
        if self.request is None:
            self._next()
        elif len(self.buffer) > _MAX_BUFFERED and self.transport is not None:
            self.transport.pause_reading()  # a client piling requests behind a slow answer

    def _next(self) -> None:
        while not self.closed and self.request is None:
            try:
                parsed = parse_request(self.buffer)
            except BadRequestError as exc:
                self.request = Request("GET", "", "", "", "HTTP/1.1", {}, keep_alive=False)
                self.complete(Reply(exc.status, body=f"{exc.reason}\n".encode()))
                return
            if parsed is None:
                return
            request, used = parsed
            del self.buffer[:used]
            self.request = request
            self.dispatching = True
            self.exchange = self.server.dispatch(self, request)
            self.dispatching = False

    def complete(self, reply: Reply) -> None:
        """Send the answer to the current request, then go on with the next one."""
        request = self.request
        self.request = None
        self.exchange = None
        if self.closed or request is None or self.transport is None:
            return
        keep_alive = request.keep_alive and not reply.close
        self.transport.write(
            encode_response(reply, head_only=request.method == "HEAD", keep_alive=keep_alive)
        )
        if not keep_alive:
            self.closed = True
            self.transport.close()
            return
        if self.buffer and not self.dispatching:
            self.transport.resume_reading()
            self._next()  # a delayed answer: go on with requests pipelined behind it

    def abort(self) -> None:
        self.closed = True
        if self.transport is not None:
            self.transport.abort()

    def connection_lost(self, exc: Exception | None) -> None:
        self.closed = True
        self.server._connections.discard(self)
        if self.exchange is not None:
            self.exchange.abort()
            self.exchange = None


class RunningSandbox:
    """A sandbox being served in a background thread (what :func:`serve_sandbox` yields)."""

    def __init__(self, server: SandboxServer) -> None:
        self._server = server
        self.web = server.web
        self.clock = server.web.clock
        self.port = server.port
        self.log = server.log
        self.api = server.api
        self.api_url = server.gateway_url
        self.proxy_url = server.gateway_url

    @property
    def n_hosts(self) -> int:
        return self.web.n_hosts

    def host(self, i: int) -> str:
        """``"127.0.x.y:port"`` of host ``i``."""
        return f"{host_address(i)}:{self.port}"

    def base_url(self, i: int) -> str:
        return f"http://{self.host(i)}"

    def page_urls(self, i: int | None = None) -> list[str]:
        """Every page URL of host ``i``, or of all hosts (host by host)."""
        hosts = range(self.web.n_hosts) if i is None else [i]
        return [self.base_url(h) + path for h in hosts for path in self.web.page_paths(h)]

    def hold(self, *, robots: bool = False) -> None:
        """Leave host requests unanswered until :meth:`release` (see
        :meth:`SandboxServer.hold`); :attr:`n_held` counts the requests waiting."""
        self._server.hold(robots=robots)

    def release(self) -> None:
        self._server.release()

    @property
    def n_held(self) -> int:
        return self._server.n_held

    def listing_urls(self, i: int | None = None) -> list[str]:
        """Every category page URL of host ``i``, or of all hosts (none without listings)."""
        hosts = range(self.web.n_hosts) if i is None else [i]
        return [self.base_url(h) + path for h in hosts for path in self.web.listing_paths(h)]


@contextmanager
def serve_sandbox(
    web: SandboxWeb,
    port: int = 0,
    *,
    api: ScrapingApi | None = None,
    log_max_entries: int = 1_000_000,
) -> Iterator[RunningSandbox]:
    """Serve ``web`` on loopback from a background thread until the block exits."""
    server = SandboxServer(web, port, log=RequestLog(log_max_entries), api=api)
    with serve_in_thread(server):
        yield RunningSandbox(server)


@contextmanager
def serve_in_thread(server: SandboxServer, name: str = "sandbox-web") -> Iterator[SandboxServer]:
    """Run ``server`` (or a subclass) on its own event loop in a background thread until the
    block exits; a failure to start is raised here."""
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failure: list[BaseException] = []

    def run() -> None:
        asyncio.set_event_loop(loop)
        try:
            loop.run_until_complete(server.start())
        except BaseException as exc:
            failure.append(exc)
            return
        finally:
            started.set()
        try:
            loop.run_forever()
        finally:
            loop.run_until_complete(server.close())

    thread = threading.Thread(target=run, name=name, daemon=True)
    thread.start()
    started.wait()
    try:
        if failure:
            raise failure[0]
        yield server
    finally:
        if thread.is_alive():
            loop.call_soon_threadsafe(loop.stop)
            thread.join(timeout=30)
        loop.close()
