"""Ground truth from the sandbox web, joined with what the history says was visited.

The sandbox is a pure function of its seed, host count and pages per host (behaviours
that do not scale rates do not change it), so a flow that crawled it can rebuild its truth
from a small ``SandboxSpec`` parameter, without the server. ``visit_events`` reads the
history's successful observations; ``change_events`` asks the web when pages really
changed; ``models.backtest.realized`` turns both into freshness and changes caught.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import pandas as pd

from models.backtest.realized import Events
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore, connect

_DAY = 86_400.0


class TruthSource(Protocol):
    """What ground truth needs of a sandbox web (``sandbox.SandboxWeb`` provides it)."""

    def version(self, url: str, at: datetime | None = None) -> int: ...

    def changes_between(self, url: str, start: datetime, end: datetime) -> list[datetime]: ...


@dataclass(frozen=True)
class SandboxSpec:
    """Enough to rebuild a sandbox web's truth: ``sandbox.SandboxWeb.generate`` arguments."""

    hosts: int
    pages_per_host: int
    seed: int = 0

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> SandboxSpec:
        try:
            return cls(int(data["hosts"]), int(data["pages_per_host"]), int(data.get("seed", 0)))
        except (KeyError, TypeError, ValueError) as exc:
            raise ValueError(
                f"sandbox spec needs integer hosts and pages_per_host (and seed): {exc}"
            ) from None

    def web(self) -> TruthSource:
        """The web's truth (cached per process: each page's change process is drawn once)."""
        return _sandbox_web(self)


@functools.lru_cache(maxsize=4)
def _sandbox_web(spec: SandboxSpec) -> TruthSource:
    from sandbox import SandboxWeb

    return SandboxWeb.generate(spec.hosts, spec.pages_per_host, seed=spec.seed)


def catalog_urls(root: str | Path) -> pd.DataFrame:
    """``url_id, url`` of every catalog page, in url_id order (the page codes below)."""
    con = connect()
    rel = CatalogStore(root).relation(con)
    return rel.project("url_id, url").order("url_id").to_df()


def visit_events(root: str | Path, pages: pd.DataFrame, origin: datetime) -> Events:
    """Successful observations of the given pages (days since ``origin``)."""
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("pages", pages[["url_id"]].assign(code=np.arange(len(pages), dtype=np.int64)))
    frame = con.sql(
        """SELECT p.code, epoch_us(h.fetched_at) / 1e6 AS ts
           FROM history h JOIN pages p USING (url_id)
           WHERE h.outcome IN ('ok', 'not_modified')"""
    ).fetchnumpy()
    return Events(
        np.asarray(frame["code"], dtype=np.int64),
        (np.asarray(frame["ts"], dtype=np.float64) - origin.timestamp()) / _DAY,
    )


def change_events(
    web: TruthSource, urls: list[str], start: datetime, end: datetime, origin: datetime
) -> Events:
    """Every real change in ``(start, end]`` of each URL (code = position in ``urls``)."""
    codes: list[int] = []
    times: list[float] = []
    base = origin.timestamp()
    for code, url in enumerate(urls):  # the sandbox answers one page at a time
        for moment in web.changes_between(url, start, end):
            codes.append(code)
            times.append((moment.timestamp() - base) / _DAY)
    return Events(np.asarray(codes, dtype=np.int64), np.asarray(times, dtype=np.float64))


def realized_freshness(root: str | Path, web: TruthSource, at: datetime) -> float:
    """Share of catalog pages whose last observed copy is still the live version at ``at``."""
    pages = catalog_urls(root)
    if pages.empty:
        return float("nan")
    origin = datetime(2000, 1, 1, tzinfo=UTC)
    visits = visit_events(root, pages, origin)
    if visits.page.size == 0:
        return 0.0
    last_seen = pd.Series(visits.time).groupby(visits.page).max()
    at_day = (at.timestamp() - origin.timestamp()) / _DAY
    urls = pages["url"].to_numpy()
    fresh = 0
    for code, day in last_seen.items():  # two truth lookups per page held
        url = str(urls[int(code)])
        seen_at = datetime.fromtimestamp(origin.timestamp() + day * _DAY, tz=UTC)
        if day <= at_day and web.version(url, seen_at) == web.version(url, at):
            fresh += 1
    return fresh / len(pages)
