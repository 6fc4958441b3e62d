"""A fetched batch's rows of the hosts that need rendering, rendered and re-hashed.

The fetch engine fetches every page as plain HTTP (robots.txt, pacing, conditional requests,
retries): a 304 says the page did not change and needs no browser at all, the cheapest
signal there is. ``render_rows`` then takes the batch's rows whose host is in ``hosts`` and
whose outcome is ``ok``, renders their pages in the pool, and replaces each row's record hash
and simhash with the rendered page's (same extraction rules), adds the browser's bytes to
the row's and the render's price (``models.planning.cost.render_cost``) to its cost. A render
that fails turns the row into an ``error`` (reason ``render_<outcome>``): the raw record of a
script-built page is not an observation of it, so the planner reschedules the page.

Rows of other hosts are returned as they were, and no browser starts when no row needs one:
plain hosts are never rendered.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from models.content.extract import DEFAULT_RULES, extract
from models.content.extract_rules import ExtractionRules
from models.discovery.urls import InvalidURLError, normalize, url_id
from models.planning.cost import COST_MODELS, CostModel, render_cost
from tasks.fetch.render import (
    BrowserPool,
    BrowserUnavailableError,
    PoolStats,
    Rendered,
    RenderSettings,
)
from tasks.fetch.run_sync import run_coroutine
from tasks.fetch.settings import FetchSettings
from tasks.render.hosts import RenderHosts

log = logging.getLogger(__name__)
T = TypeVar("T")


@dataclass(frozen=True)
class RenderedRows:
    rows: pa.Table
    rendered: int  # rows whose record now comes from the rendered page
    failed: int  # rows turned into errors by a failed render
    render_bytes: int
    stats: PoolStats | None  # None when no browser was started


def rows_to_render(rows: pa.Table, hosts: Collection[str]) -> np.ndarray:
    """Indices of the ``ok`` rows of ``hosts``."""
    if not hosts or rows.num_rows == 0:
        return np.zeros(0, dtype=np.int64)
    wanted = pc.and_(
        pc.is_in(rows["host"], value_set=pa.array(sorted(hosts), pa.string())),
        pc.equal(rows["outcome"], "ok"),
    )
    return np.flatnonzero(wanted.to_numpy(zero_copy_only=False))


async def render_rows(
    rows: pa.Table,
    urls: Sequence[str],
    hosts: Collection[str],
    *,
    settings: RenderSettings | None = None,
    rules: ExtractionRules = DEFAULT_RULES,
    cost_model: CostModel | str = "credits",
    pool: BrowserPool | None = None,
) -> RenderedRows:
    """``rows`` (HISTORY_SCHEMA, one per URL of ``urls``) with ``hosts``' pages rendered.

    ``pool``: a running pool to use (else one is started for these rows and closed).
    """
    todo = rows_to_render(rows, hosts)
    if todo.size == 0:
        return RenderedRows(rows, 0, 0, 0, None)
    by_id = {}
    for raw in urls:
        with contextlib.suppress(InvalidURLError):
            text = normalize(raw)
            by_id[url_id(text)] = text
    ids = rows["url_id"].to_pylist()
    targets = [by_id[ids[k]] for k in todo]
    if pool is None:
        async with BrowserPool(settings) as own:
            renders = await own.render_all(targets)
            stats = own.stats
    else:
        renders = await pool.render_all(targets)
        stats = pool.stats
    model = COST_MODELS[cost_model] if isinstance(cost_model, str) else cost_model
    return _apply(rows, todo, targets, renders, rules, model, stats)


def render_rows_sync(
    rows: pa.Table, urls: Sequence[str], hosts: Collection[str], **kwargs: object
) -> RenderedRows:
    """``render_rows`` from synchronous code (its own event loop)."""
    return run_coroutine(render_rows(rows, urls, hosts, **kwargs))  # type: ignore[arg-type]


def _apply(
    rows: pa.Table,
    todo: np.ndarray,
    targets: Sequence[str],
    renders: Sequence[Rendered],
    rules: ExtractionRules,
    model: CostModel,
    stats: PoolStats,
) -> RenderedRows:
    columns = {
        name: rows[name].to_pylist()
        for name in ("outcome", "record_hash", "simhash", "bytes", "cost", "reason", "changed")
    }
    extra = render_cost(model, [r.wire_bytes for r in renders])
    rendered = failed = total_bytes = 0
    for k, url, done, price in zip(todo, targets, renders, extra, strict=True):
        columns["bytes"][k] = (columns["bytes"][k] or 0) + done.wire_bytes
        columns["cost"][k] = (columns["cost"][k] or 0.0) + float(price)
        total_bytes += done.wire_bytes
        if done.outcome == "ok":
            record = extract(done.html, "text/html", url, rules)
            columns["record_hash"][k] = record.record_hash
            columns["simhash"][k] = record.simhash
            rendered += 1
        else:
            columns["outcome"][k] = "error"
            columns["record_hash"][k] = None
            columns["simhash"][k] = None
            columns["changed"][k] = None
            columns["reason"][k] = f"render_{done.outcome}: {done.reason}"
            failed += 1
    table = rows
    for name, values in columns.items():
        position = table.schema.get_field_index(name)
        field = table.schema.field(position)
        table = table.set_column(position, field, pa.array(values, field.type))
    return RenderedRows(table, rendered, failed, total_bytes, stats)


def render_batch_rows(
    root: str | Path,
    rows: pa.Table,
    urls: Sequence[str],
    *,
    rules: ExtractionRules = DEFAULT_RULES,
    cost_model: CostModel | str = "credits",
    settings: RenderSettings | None = None,
    fetch_settings: FetchSettings | None = None,
) -> pa.Table:
    """The cycle's hook: a host batch's rows with the store's rendered hosts rendered.

    Without ``settings`` the browser takes the fetcher's address allow-list and User-Agent
    from ``fetch_settings`` (the batch's), so it reaches exactly what the fetcher may.

    Reads the verdicts of ``<root>/signals/render_hosts.json`` (``tasks.render.hosts``); when
    no row is an ``ok`` row of a rendered host it returns ``rows`` untouched and starts
    nothing. A browser that cannot start turns those rows into ``error`` rows
    (``render_unavailable``), never a failed batch: their raw records are not observations.
    """
    hosts = RenderHosts.read(root).rendered
    todo = rows_to_render(rows, hosts)
    if todo.size == 0:
        return rows
    if settings is None and fetch_settings is not None:
        settings = RenderSettings(
            allowed_networks=tuple(fetch_settings.allowed_networks),
            user_agent=fetch_settings.user_agent,
        )
    try:
        return run_coroutine(
            render_rows(rows, urls, hosts, settings=settings, rules=rules, cost_model=cost_model)
        ).rows
    except BrowserUnavailableError as exc:
        log.warning("rendering unavailable: %s", exc)
        model = COST_MODELS[cost_model] if isinstance(cost_model, str) else cost_model
        failed = [Rendered("", "error", reason=f"unavailable: {exc}") for _ in todo]
        return _apply(rows, todo, [""] * len(todo), failed, rules, model, PoolStats()).rows
