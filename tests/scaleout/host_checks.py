"""Per-host politeness as the sandbox saw it, whoever sent the requests.

The sandbox logs every request with its arrival (``at``), the end of its answer (``done``),
the host's requests in flight at arrival and the headers. Grouped by host and ordered by
arrival, that gives what the hosts experienced from all workers together: the most requests
one host served at once, and the shortest pause between the end of one answer and the next
request's arrival (the pacing gap, measured on the server's side).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterable
from dataclasses import dataclass
from itertools import pairwise

from sandbox.log import RequestRecord


@dataclass(frozen=True)
class HostPoliteness:
    host: str
    requests: int
    max_in_flight: int  # the host's requests in flight at an arrival, that one included
    min_gap_s: float  # shortest (arrival - previous answer's end); inf with one request
    agents: frozenset[str]  # User-Agent headers seen (one per recrawl deployment here)
    first_at: float
    last_done: float


def host_politeness(records: Iterable[RequestRecord]) -> dict[str, HostPoliteness]:
    """One summary per host of the request log (records in any order)."""
    by_host: dict[str, list[RequestRecord]] = defaultdict(list)
    for record in records:
        by_host[record.host].append(record)
    summary = {}
    for host, entries in by_host.items():
        entries.sort(key=lambda r: r.at)
        gaps = [b.at - a.done for a, b in pairwise(entries)]
        summary[host] = HostPoliteness(
            host=host,
            requests=len(entries),
            max_in_flight=max(r.in_flight for r in entries),
            min_gap_s=min(gaps, default=float("inf")),
            agents=frozenset(r.headers.get("user-agent", "") for r in entries),
            first_at=entries[0].at,
            last_done=max(r.done for r in entries),
        )
    return summary


def agent_window(records: Iterable[RequestRecord], agent: str) -> tuple[float, float]:
    """First arrival and last answer of the requests one User-Agent sent."""
    mine = [r for r in records if r.headers.get("user-agent") == agent]
    if not mine:
        raise ValueError(f"no request carried the User-Agent {agent!r}")
    return min(r.at for r in mine), max(r.done for r in mine)
