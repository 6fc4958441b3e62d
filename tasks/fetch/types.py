"""The values the fetch engine takes and gives, and what it keeps between batches.

``FetchRequest`` is one URL with what the history knows of its last observation;
``BatchResult`` the rows and metrics of one batch; ``EngineState`` the per-process memory
(per-host pacing and adaptive limits, validator trust, the robots.txt cache, the scraping
API's learned limit, the DNS cache) that consecutive batches share.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

from models.fetching.frontier import PlanGate
from models.fetching.host_state import HostState
from tasks.fetch.metrics import BatchMetrics
from tasks.fetch.net_guard import DnsCache
from tasks.fetch.robots import RobotsCache
from tasks.fetch.settings import FetchSettings


@dataclass(frozen=True, slots=True)
class FetchRequest:
    """One URL to fetch, with what the history knows of its last observation."""

    url: str
    priority: float = 0.0  # higher first; the lowest are shed first
    etag: str | None = None  # validators of the last observation (conditional request)
    last_modified: str | None = None
    record_hash: str | None = None  # record hash of the last observation (304 carries it)


@dataclass(frozen=True)
class BatchResult:
    rows: pa.Table  # HISTORY_SCHEMA, one row per distinct URL, in request order
    metrics: BatchMetrics


class EngineState:
    """What the engine remembers between batches of one process."""

    def __init__(self, settings: FetchSettings) -> None:
        self.settings = settings
        self.hosts: dict[str, HostState] = {}
        self.robots = RobotsCache()
        # Host names' addresses, one lookup per host per settings.dns_ttl_s (net_guard).
        self.dns = DnsCache(settings.dns_ttl_s)
        self.plan_gate = (
            PlanGate(settings.api_concurrency, settings.api_plan_backoff_s)
            if settings.mode == "api"
            else None
        )

    def host(self, host: str) -> HostState:
        state = self.hosts.get(host)
        if state is None:
            state = HostState(self.settings.initial_limit)
            self.hosts[host] = state
        return state
