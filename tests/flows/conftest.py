"""Fixtures of the flow tests: one Prefect test server for the session, a sandbox web."""

from __future__ import annotations

from datetime import UTC, datetime
from urllib.parse import urlsplit

import pandas as pd
import pytest
from prefect.testing.utilities import prefect_test_harness

from flows.local_prefect import STARTUP_TIMEOUT_S
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.store.catalog import CatalogStore

START = datetime(2026, 1, 1, tzinfo=UTC)
#: Small politeness delays: the sandbox is ours, and tests must stay fast.
FAST_FETCH = {
    "min_delay_s": 0.0,
    "max_delay_s": 0.05,
    "delay_factor": 1.0,
    "request_timeout_s": 5.0,
    "robots_timeout_s": 2.0,
    "retry_base_s": 0.05,
    "retry_cap_s": 0.2,
    "seed": 1,
    "allowed_networks": list(SANDBOX_NETWORKS),  # the address policy refuses loopback
}
BOOTSTRAP = {"discovery": 1.0, "reestimation": 0.0, "verification": 0.0}


@pytest.fixture(scope="session")
def prefect_server():
    """One Prefect test server (temporary database) for every flow test of the session.

    It may start as slowly as the product's local server (``flows.local_prefect``'s
    allowance): on a fresh clone at load ~15 the first start (database migrations) took
    more than the 120 s this allowed, and every flow test errored at setup."""
    with prefect_test_harness(server_startup_timeout=STARTUP_TIMEOUT_S):
        yield


@pytest.fixture
def sandbox_web():
    """A running sandbox of 6 hosts x 10 pages (simulated clock at 2026-01-01)."""
    clock = SimClock(START)
    web = SandboxWeb.generate(6, 10, seed=5, default=HostBehaviour(), clock=clock)
    with serve_sandbox(web) as running:
        yield running


def import_catalog(root, running) -> list[str]:
    """Put every sandbox page in the catalog (host with port, as the fetcher names it)."""
    urls = running.page_urls()
    frame = pd.DataFrame({"url": urls, "host": [urlsplit(u).netloc for u in urls]})
    CatalogStore(root).upsert(frame)
    return urls
