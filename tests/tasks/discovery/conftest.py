"""Loopback servers for discovery tests: the sandbox web, and a tiny server of fixture files."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from models.discovery.admission import HostCaps
from sandbox import SANDBOX_NETWORKS
from tasks.cycle.work import default_record_hasher
from tasks.discovery.run import DiscoverySettings
from tasks.discovery.sitemaps import SitemapSettings
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.run_sync import run_coroutine
from tests.http_fixture import FixtureServer, serving
from tests.tasks.fetch.conftest import quick_settings

#: Fast, still polite-looking settings for loopback tests.
FAST = DiscoverySettings(
    sitemaps=SitemapSettings(min_delay_s=0.0, timeout_s=20.0, allowed_networks=SANDBOX_NETWORKS),
    caps=HostCaps(floor=10_000),
)
START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def fixture_server() -> Iterator[FixtureServer]:
    with serving(FixtureServer()) as state:
        yield state


#: the sandbox's sitemap lastmod kinds the trust tests serve, one host each
KINDS = ("honest", "now", "stale")


def fetch_rows(urls, at, cycle_id):
    """The engine's rows for ``urls`` fetched at ``at`` (through the sync bridge: a
    Playwright test before this one can leave a loop running in the main thread)."""
    result = run_coroutine(
        fetch_batch(
            [FetchRequest(u) for u in urls],
            cycle_id=cycle_id,
            settings=quick_settings(),
            clock=lambda: at,
            record_hasher=default_record_hasher(),
        )
    )
    return result.rows
