"""A tripwire for tests that feed the crawler forbidden addresses: no connection may leave
loopback, and fake host names resolve only where a test says.

``loopback_only`` wraps ``socket.socket.connect``/``connect_ex`` (asyncio, aiohttp and
anyio all connect through them): a connection to any address outside 127.0.0.0/8 and ::1 is
recorded and refused before a packet leaves. A test asserts the record is empty, which is
the proof that the address policy refused the request rather than the network.

``fake_dns`` answers ``getaddrinfo`` for the names a test registers (``*.test``) and hands
every other name to the real resolver (only ``localhost`` is ever asked): no test makes a
DNS query that leaves the machine.
"""

from __future__ import annotations

import ipaddress
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

import pytest

_real_connect = socket.socket.connect
_real_connect_ex = socket.socket.connect_ex
_real_getaddrinfo = socket.getaddrinfo


@dataclass
class Tripwire:
    blocked: list[str] = field(default_factory=list)

    def allows(self, address: object) -> bool:
        if not isinstance(address, tuple) or not address:
            return True  # a unix socket path
        try:
            return ipaddress.ip_address(str(address[0]).split("%")[0]).is_loopback
        except ValueError:
            return False


@pytest.fixture
def loopback_only(monkeypatch: pytest.MonkeyPatch) -> Iterator[Tripwire]:
    wire = Tripwire()

    def connect(sock: socket.socket, address: object) -> None:
        if not wire.allows(address):
            wire.blocked.append(repr(address))
            raise ConnectionRefusedError(f"tripwire: {address!r} is not loopback")
        return _real_connect(sock, address)  # type: ignore[arg-type]

    def connect_ex(sock: socket.socket, address: object) -> int:
        if not wire.allows(address):
            wire.blocked.append(repr(address))
            return 111  # ECONNREFUSED
        return _real_connect_ex(sock, address)  # type: ignore[arg-type]

    monkeypatch.setattr(socket.socket, "connect", connect)
    monkeypatch.setattr(socket.socket, "connect_ex", connect_ex)
    yield wire


@dataclass
class FakeDns:
    """Answers for fake names: a list of address lists, one per lookup (the last repeats)."""

    answers: dict[str, list[list[str]]] = field(default_factory=dict)
    lookups: dict[str, int] = field(default_factory=dict)

    def add(self, name: str, *answers: list[str]) -> None:
        self.answers[name] = list(answers)

    def resolve(self, host: str, port: object, *args: object, **kwargs: object) -> list:
        name = host.decode() if isinstance(host, bytes) else str(host)
        if name not in self.answers:
            if name.endswith(".test") or name.endswith(".invalid"):
                raise socket.gaierror(socket.EAI_NONAME, f"fake DNS: no such name {name}")
            return _real_getaddrinfo(host, port, *args, **kwargs)  # type: ignore[arg-type]
        count = self.lookups.get(name, 0)
        self.lookups[name] = count + 1
        answer = self.answers[name][min(count, len(self.answers[name]) - 1)]
        number = int(port) if port not in (None, "") else 0  # type: ignore[call-overload]
        infos = []
        for text in answer:
            family = socket.AF_INET6 if ":" in text else socket.AF_INET
            sockaddr: tuple = (text, number, 0, 0) if family == socket.AF_INET6 else (text, number)
            infos.append((family, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", sockaddr))
        return infos


@pytest.fixture
def fake_dns(monkeypatch: pytest.MonkeyPatch) -> Iterator[FakeDns]:
    dns = FakeDns()
    resolve: Callable[..., list] = dns.resolve
    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    yield dns
