"""Helpers for engine tests against the sandbox web on loopback."""

import hashlib
import re
from contextlib import contextmanager

import pytest

from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.fetch.engine import EngineState, fetch_batch_sync
from tasks.fetch.settings import FetchSettings

_ARTICLE = re.compile(rb"<article.*?</article>", re.S)


def article_hash(body: bytes, content_type: str | None, url: str | None = None) -> str:
    """Record hash of a sandbox page: its <article> only (noise lives outside it)."""
    match = _ARTICLE.search(body)
    return hashlib.blake2b(match.group(0) if match else body, digest_size=16).hexdigest()


def quick_settings(**overrides) -> FetchSettings:
    """Small delays so politeness is visible in a test that lasts seconds."""
    base = {
        "min_delay_s": 0.0,
        "max_delay_s": 0.5,
        "throttle_backoff_s": 0.2,
        "throttle_backoff_cap_s": 2.0,
        "retry_base_s": 0.05,
        "retry_cap_s": 0.5,
        "request_timeout_s": 5.0,
        "robots_timeout_s": 2.0,
        "seed": 7,
        "allowed_networks": SANDBOX_NETWORKS,  # the address policy refuses loopback
    }
    base.update(overrides)
    return FetchSettings(**base)


@contextmanager
def sandbox(hosts=4, pages=10, behaviours=None, default=None, clock=None, api=None):
    web = SandboxWeb.generate(
        hosts=hosts,
        pages_per_host=pages,
        seed=3,
        default=default or HostBehaviour(),
        behaviours=behaviours or {},
        clock=clock or SimClock(),
    )
    with serve_sandbox(web, api=api) as running:
        yield running


def by_host(entries, host, *, via=None):
    """The host's requests from the server log, in arrival order."""
    chosen = [e for e in entries if e.host == host and (via is None or e.via == via)]
    return sorted(chosen, key=lambda e: e.at)


def run(urls, settings, **kwargs):
    kwargs.setdefault("record_hasher", article_hash)
    return fetch_batch_sync(urls, settings=settings, **kwargs)


@pytest.fixture
def engine_state():
    return EngineState(quick_settings())
