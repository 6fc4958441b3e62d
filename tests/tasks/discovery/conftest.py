"""Loopback servers for discovery tests: the sandbox web, and a tiny server of fixture files."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime

import pytest

from models.discovery.admission import HostCaps
from sandbox import SANDBOX_NETWORKS
from tasks.discovery.run import DiscoverySettings
from tasks.discovery.sitemaps import SitemapSettings
from tests.http_fixture import FixtureServer, serving

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
