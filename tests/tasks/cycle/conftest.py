"""A tiny loopback web whose pages a test writes (canonical links, near-duplicates...), and
helpers to run a recrawl cycle over a hand-made plan without Prefect."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, datetime
from pathlib import Path

import pandas as pd
import pytest

from models.discovery.urls import normalize, url_host, url_id
from sandbox import SANDBOX_NETWORKS
from tasks.cycle.content import ContentResult, ContentSettings, apply_cycle_content
from tasks.cycle.work import commit_cycle, fixed_clock, run_host_batch, split_plan, work_dir
from tasks.discovery.run import DiscoverySettings
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tests.http_fixture import Body, FixtureServer, serving

START = datetime(2026, 1, 1, tzinfo=UTC)
SETTINGS = FetchSettings(
    min_delay_s=0.0,
    max_delay_s=0.02,
    delay_factor=1.0,
    request_timeout_s=5.0,
    robots_timeout_s=2.0,
    retry_base_s=0.05,
    retry_cap_s=0.2,
    seed=1,
    allowed_networks=SANDBOX_NETWORKS,  # the test servers listen on loopback
)
#: A small Bloom filter: the default one (10 M links) costs 12 MB of writes per cycle.
CONTENT = ContentSettings(discovery=DiscoverySettings(bloom_expected=10_000))


class PageServer(FixtureServer):
    """Pages a test writes, served with 200 (404 otherwise)."""

    @property
    def pages(self) -> dict[str, tuple[dict[str, str], Body]]:
        """``path -> (headers, body)`` of the pages written so far."""
        return {path: (headers, body) for path, (_, headers, body) in self.routes.items()}

    def url(self, path: str) -> str:
        return normalize(self.base + path)

    def html(self, path: str, body: str, *, head: str = "", **headers: str) -> None:
        text = f"<!doctype html><html><head><title>{path}</title>{head}</head><body>{body}"
        self.routes[path] = (
            200,
            {"Content-Type": "text/html; charset=utf-8", **headers},
            (text + "</body></html>").encode(),
        )


@pytest.fixture
def page_server() -> Iterator[PageServer]:
    with serving(PageServer()) as state:
        yield state


def add_to_catalog(root: Path | str, urls: list[str], values: list[float] | None = None) -> None:
    normalized = [normalize(u) for u in urls]
    CatalogStore(root).upsert(
        pd.DataFrame(
            {
                "url": normalized,
                "host": [url_host(u) for u in normalized],
                "value": values or [1.0] * len(urls),
            }
        )
    )


def write_plan(root: Path | str, cycle: int, urls: list[str]) -> Path:
    """A plan of these catalog pages (what ``plan_cycle`` would write, minus the numbers)."""
    normalized = [normalize(u) for u in urls]
    path = Path(root) / f"plan-{cycle}.parquet"
    pd.DataFrame(
        {
            "url_id": [url_id(u) for u in normalized],
            "host": [url_host(u) for u in normalized],
            "score": 1.0,
            "reason": "due",
        }
    ).to_parquet(path)
    return path


def run_cycle(
    root: Path | str,
    cycle: int,
    plan: Path | str,
    at: datetime = START,
    *,
    settings: FetchSettings = SETTINGS,
    content: ContentSettings | None = CONTENT,
    **batch: object,
) -> ContentResult | None:
    """Split, fetch every batch at ``at``, commit, then (unless ``content`` is None) apply
    the cycle's content as the recrawl flow does."""
    for spec in split_plan(root, cycle, plan):
        run_host_batch(root, cycle, spec.name, settings=settings, clock=fixed_clock(at), **batch)
    commit_cycle(root, cycle, clock=fixed_clock(at))
    if content is None:
        return None
    return apply_cycle_content(root, cycle, work_dir(root, cycle), now=at, settings=content)
