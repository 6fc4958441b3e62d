"""A sandbox web where a share of the hosts throttle or fail, for the load test and benchmark.

Issue 8 asks for a cycle over thousands of hosts "with a tenth of them throttling or
failing". The sandbox's own behaviours give throttling (429/503 with Retry-After, enforced)
and slow pages (answers later than the client's timeout); two faults it has no behaviour for
are added here by a server subclass: TCP resets (the connection aborted with SO_LINGER 0, so
the client reads an RST, instead of an answer) and 500s. Both hit a share of the page
requests of their hosts (robots.txt is served normally), drawn from a seeded generator, so a
retry may succeed, as on a flaky real host.

Failing hosts are spread (every ``1/share``-th host, their kinds taken in turn, so every
host batch of a cycle gets its share of each kind: failures nobody saw coming) or grouped
(the last hosts in the order the cycle packs batches, so they share batches of their own:
what packing hosts by their known health would give).

Every request a host saw (resets included, status 0) lands in the server's request log;
``CompactLog`` turns it into arrays small enough to keep 100,000+ requests per run.
"""

from __future__ import annotations

import random
import socket
import struct
import time
import zlib
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, BinaryIO

import numpy as np

from sandbox import HostBehaviour, RequestLog, RequestRecord, SandboxWeb, SimClock, host_address
from sandbox.http import Reply, Request
from sandbox.responder import Responder
from sandbox.server import SandboxServer

#: The failure kinds, taken in turn by the failing hosts.
FAULT_KINDS = ("throttle-429", "throttle-503", "reset", "error-500", "timeout")
#: Status logged for a request answered with a TCP reset (no HTTP status was sent).
RESET_STATUS = 0


@dataclass(frozen=True)
class FaultScale:
    """How hard the failing hosts fail, in seconds scaled down with the crawler's delays.

    A real cycle's numbers (Retry-After of a minute, a 30 s timeout) divided by ~20, like
    the benchmark's pacing (``min_delay_s`` 0.05 instead of 1).
    """

    throttle_rate: float = 2.0  # requests/s a throttling host tolerates
    retry_after_s: int = 2  # whole seconds: the header carries an integer
    slow_extra_s: float = 5.0  # a "timeout" host's slow pages answer this late
    slow_share: float = 0.5  # share of a timeout host's pages that are slow
    fault_share: float = 0.5  # share of page requests a reset/500 host fails


def fault_plan(hosts: int, share: float = 0.1, layout: str = "spread") -> dict[int, str]:
    """Host index -> failure kind for ``share`` of ``hosts``.

    ``spread``: every ``1/share``-th host. ``grouped``: the last ``share`` of the hosts in
    the order ``tasks.cycle.work.split_plan`` packs them (by ``"address:port"`` as text).
    """
    if not 0.0 < share <= 1.0:
        raise ValueError(f"share of failing hosts must be within (0, 1], got {share}")
    if layout == "spread":
        step = max(1, round(1.0 / share))
        chosen = list(range(step - 1, hosts, step))
    elif layout == "grouped":
        packed = sorted(range(hosts), key=lambda i: host_address(i) + ":")
        chosen = packed[hosts - round(hosts * share) :]
    else:
        raise ValueError(f"layout must be 'spread' or 'grouped', got {layout!r}")
    return {i: FAULT_KINDS[n % len(FAULT_KINDS)] for n, i in enumerate(chosen)}


def fault_behaviour(kind: str, scale: FaultScale) -> HostBehaviour:
    """The sandbox behaviour of a failing host (resets and 500s are the server's doing)."""
    if kind == "throttle-429":
        return HostBehaviour(
            throttle_rate=scale.throttle_rate,
            throttle_burst=2.0,
            throttle_status=429,
            retry_after_s=scale.retry_after_s,
        )
    if kind == "throttle-503":
        return HostBehaviour(
            throttle_rate=scale.throttle_rate / 2,
            throttle_status=503,
            retry_after_s=scale.retry_after_s + 1,
        )
    if kind == "timeout":
        return HostBehaviour(slow_share=scale.slow_share, slow_extra_s=scale.slow_extra_s)
    if kind in ("reset", "error-500"):
        return HostBehaviour()
    raise ValueError(f"unknown failure kind {kind!r}; expected one of {', '.join(FAULT_KINDS)}")


def retry_after_by_host(faults: Mapping[int, str], scale: FaultScale) -> dict[int, float]:
    """The Retry-After (seconds) each throttling host's refusals carry."""
    return {
        i: float(fault_behaviour(kind, scale).retry_after_s or 0.0)
        for i, kind in faults.items()
        if kind.startswith("throttle")
    }


def load_web(
    hosts: int,
    pages_per_host: int,
    faults: Mapping[int, str],
    *,
    seed: int = 0,
    scale: FaultScale | None = None,
) -> SandboxWeb:
    """A sandbox web whose ``faults`` hosts throttle or fail (clock frozen at its start)."""
    scale = scale or FaultScale()
    behaviours = {i: fault_behaviour(kind, scale) for i, kind in faults.items()}
    return SandboxWeb.generate(
        hosts, pages_per_host, seed=seed, behaviours=behaviours, clock=SimClock()
    )


class FaultyServer(SandboxServer):
    """The sandbox server, plus TCP resets and 500s on the hosts ``faults`` names so."""

    def __init__(
        self,
        web: SandboxWeb,
        faults: Mapping[int, str],
        *,
        scale: FaultScale | None = None,
        seed: int = 0,
        log: RequestLog | None = None,
    ) -> None:
        super().__init__(web, 0, log=log)
        self.scale = scale or FaultScale()
        self.resets = frozenset(i for i, kind in faults.items() if kind == "reset")
        self.errors = frozenset(i for i, kind in faults.items() if kind == "error-500")
        self.rng = random.Random(seed)

    async def start(self) -> None:
        await super().start()
        self.responder = _FaultyResponder(self)

    def dispatch(self, connection: Any, request: Request) -> Any:
        i = connection.host
        if i in self.resets and _is_page(request) and self.rng.random() < self.scale.fault_share:
            self._reset(connection, i, request)
            return None
        return super().dispatch(connection, request)

    def _reset(self, connection: Any, i: int, request: Request) -> None:
        assert self.responder is not None
        now = time.monotonic()
        in_flight = self.responder.states[i].in_flight + 1
        self.log.add(
            RequestRecord(
                now,
                now,
                self.netlocs[i],
                request.method,
                request.target,
                RESET_STATUS,
                in_flight,
                request.headers,
            )
        )
        transport = connection.transport
        if transport is not None:
            raw = transport.get_extra_info("socket")
            if raw is not None:  # linger 0: close() sends RST, not FIN
                raw.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
        connection.abort()


class _FaultyResponder(Responder):
    """The sandbox's responder; a share of the error hosts' pages answer 500."""

    def __init__(self, server: FaultyServer) -> None:
        super().__init__(server.web, server.port)
        self.server = server

    def respond(self, i: int, request: Request, now: float) -> Reply:
        server = self.server
        if (
            i in server.errors
            and _is_page(request)
            and server.rng.random() < server.scale.fault_share
        ):
            self.states[i].served += 1
            headers = [("Server", "sandbox"), ("Content-Type", "text/plain")]
            return Reply(500, headers, b"internal server error\n")
        return super().respond(i, request, now)


def _is_page(request: Request) -> bool:
    return request.path.startswith("/p/")


LogRow = tuple[int, float, float, int, int, bool, int]


def log_row(record: RequestRecord, index: Mapping[str, int]) -> LogRow:
    """One request as a compact tuple (``index``: netloc -> host index)."""
    return (
        index[record.host],
        record.at,
        record.done,
        record.status,
        record.in_flight,
        record.path.startswith("/robots"),
        zlib.crc32(record.path.encode()),
    )


@dataclass(frozen=True)
class CompactLog:
    """A request log as arrays: host index, arrival and end (monotonic), status, in flight,
    whether the request was for robots.txt, and a CRC-32 of its target (to tell a repeat of
    the same request from the next one). Sorted by host, then arrival."""

    host: np.ndarray
    at: np.ndarray
    done: np.ndarray
    status: np.ndarray
    in_flight: np.ndarray
    robots: np.ndarray
    target: np.ndarray

    @classmethod
    def of(cls, records: list[RequestRecord], netlocs: list[str]) -> CompactLog:
        index = {netloc: i for i, netloc in enumerate(netlocs)}
        return cls.from_rows([log_row(r, index) for r in records])

    @classmethod
    def from_rows(cls, rows: list[LogRow]) -> CompactLog:
        columns = list(zip(*rows, strict=True)) if rows else [()] * 7
        host, at, done, status, in_flight, robots, target = (np.array(c) for c in columns)
        order = np.lexsort((at, host))
        return cls(
            host[order].astype(np.int32),
            at[order].astype(np.float64),
            done[order].astype(np.float64),
            status[order].astype(np.int16),
            in_flight[order].astype(np.int16),
            robots[order].astype(bool),
            target[order].astype(np.uint32),
        )

    @classmethod
    def concat(cls, parts: list[CompactLog]) -> CompactLog:
        if not parts:
            return cls.from_rows([])
        fields = ("host", "at", "done", "status", "in_flight", "robots", "target")
        joined = {f: np.concatenate([getattr(p, f) for p in parts]) for f in fields}
        order = np.lexsort((joined["at"], joined["host"]))
        return cls(**{f: v[order] for f, v in joined.items()})

    def save(self, path: str | BinaryIO) -> None:
        np.savez(path, **self.__dict__)

    @classmethod
    def load(cls, path: str) -> CompactLog:
        with np.load(path) as data:
            return cls(**{f: data[f] for f in data.files})

    def __len__(self) -> int:
        return int(self.host.size)
