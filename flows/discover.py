"""Prefect flow ``discover``: new URLs from seeds and sitemaps into the page catalog.

One task over ``tasks.discovery.run.discover`` (sitemaps named by the seeds' robots.txt and any
given directly, the seed pages' links; trap defenses and de-duplication); it returns
counts only. The weekly deployment runs it; the planner's discovery slice then fetches
the new pages.
"""

from __future__ import annotations

from dataclasses import replace
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from prefect import flow, task
from prefect.cache_policies import NO_CACHE

from flows.run_context import run_logger
from tasks.discovery.run import DiscoverySettings, discover_sync
from tasks.discovery.sitemaps import SitemapSettings
from tasks.store.catalog import CatalogStore
from tasks.store.history import connect


@task(name="discover-urls", cache_policy=NO_CACHE)
def discover_task(
    root: str,
    seeds: list[str],
    sitemaps: list[str],
    max_pages: int | None = None,
    follow_seed_links: bool = True,
    at: datetime | None = None,
    allowed_networks: list[str] | None = None,
    deadline_s: float | None = None,
) -> dict[str, Any]:
    sitemap_settings = SitemapSettings()
    if allowed_networks is not None:
        sitemap_settings = replace(sitemap_settings, allowed_networks=tuple(allowed_networks))
    if deadline_s is not None:
        sitemap_settings = replace(sitemap_settings, run_deadline_s=deadline_s)
    report = discover_sync(
        root,
        seeds=seeds,
        sitemaps=sitemaps,
        max_pages=max_pages,
        settings=DiscoverySettings(sitemaps=sitemap_settings, follow_seed_links=follow_seed_links),
        now=at,
    )
    for line in report.summary_lines():
        run_logger().info("%s", line)
    return {
        "found": report.found,
        "added": report.added,
        "known": report.known,
        "rejected": sum(report.rejected.values()),
        "sitemaps_read": report.sitemaps_read,
        "catalog_size": report.catalog_size,
        "unread": len(report.unread),  # left by a deadline (named in the log's summary)
    }


@flow(name="discover")
def discover_flow(
    root: str = "data",
    seeds: list[str] | None = None,
    sitemaps: list[str] | None = None,
    max_pages: int | None = None,
    follow_seed_links: bool = True,
    at: datetime | None = None,
    allowed_networks: list[str] | None = None,
    deadline_s: float | None = None,
) -> dict[str, Any]:
    """Discover pages from ``seeds`` (their robots.txt sitemaps and links) and ``sitemaps``.

    Without either, every catalog host's home page is a seed: the weekly run re-reads the
    sitemaps of the hosts already known. ``allowed_networks`` (CIDR) opens loopback or
    private networks to the address policy (default: RECRAWL_ALLOWED_NETWORKS, else none).
    ``deadline_s`` bounds the whole run (default ``SitemapSettings.run_deadline_s``, 600 s;
    each host 120 s); what it leaves unread is counted and named, never raised.
    """
    if not seeds and not sitemaps:
        seeds = catalog_origins(root)
        if not seeds:
            raise ValueError("discover needs seed URLs or sitemap URLs (the catalog is empty)")
    return discover_task(
        root,
        seeds or [],
        sitemaps or [],
        max_pages,
        follow_seed_links,
        at,
        allowed_networks,
        deadline_s,
    )


def catalog_origins(root: str) -> list[str]:
    """``scheme://host/`` of every host in the catalog (DuckDB, one row per host)."""
    con = connect()
    rel = CatalogStore(root).relation(con)
    rows = rel.aggregate("min(url) AS url", "host").fetchall()
    return [f"{urlsplit(url).scheme}://{urlsplit(url).netloc}/" for (url,) in rows]
