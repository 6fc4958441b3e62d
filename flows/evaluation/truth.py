"""Ground truth from the sandbox web, joined with what the history says was visited.

The sandbox is a pure function of its seed, host count and pages per host (behaviours
that do not scale rates do not change it), so a flow that crawled it can rebuild its truth
from a small ``SandboxSpec`` parameter, without the server. ``visit_events`` reads the
history's successful observations; ``change_events`` asks the web when pages really
changed; ``models.backtest.realized`` turns both into freshness and changes caught.

The production recrawl flow knows no truth: its report says "n/a" for realized freshness.
``record_realized`` adds it to a reported cycle afterwards (the harness calls it after each
sandbox cycle): the cycle's row in ``reports/cycles.parquet``, its freshness plot, its
``summary.md`` and the flow run's keyed ``recrawl-summary`` artifact.
"""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Protocol
from uuid import UUID

import numpy as np
import pandas as pd

from models.backtest.realized import Events
from models.outcomes import OBSERVED, sql_list
from tasks.reports.cycle_report import (
    REPORTS,
    CycleNumbers,
    embed_plots,
    plot_paths,
    record_cycle,
    report_dir,
    summary_markdown,
    write_freshness_plot,
)
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_text
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
    frame: pd.DataFrame = rel.project("url_id, url").order("url_id").to_df()
    return frame


def visit_events(root: str | Path, pages: pd.DataFrame, origin: datetime) -> Events:
    """Successful observations of the given pages (days since ``origin``)."""
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("pages", pages[["url_id"]].assign(code=np.arange(len(pages), dtype=np.int64)))
    frame = con.sql(
        """SELECT p.code, epoch_us(h.fetched_at) / 1e6 AS ts
           FROM history h JOIN pages p USING (url_id)
           WHERE h.outcome IN (SELECT unnest($observed))""",
        params={"observed": sql_list(OBSERVED)},
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
    # two truth lookups per page held
    for code, day in zip(last_seen.index.tolist(), last_seen.tolist(), strict=True):
        url = str(urls[int(code)])
        seen_at = datetime.fromtimestamp(origin.timestamp() + day * _DAY, tz=UTC)
        if day <= at_day and web.version(url, seen_at) == web.version(url, at):
            fresh += 1
    return fresh / len(pages)


def record_realized(
    root: str | Path,
    cycle: int,
    web: TruthSource,
    at: datetime,
    *,
    flow_run_id: UUID | None = None,
) -> float:
    """Add the realized freshness at ``at`` to cycle ``cycle``'s report; return it.

    The cycle's row in ``reports/cycles.parquet`` gets it, the freshness plot is drawn
    again (with its "realized (truth)" line), ``summary.md``'s realized-freshness row is
    rewritten in place (the rest of it, such as the hosts under pressure, comes from work
    files the report deleted, so it is kept as written), and the ``recrawl-summary``
    artifact is published again under its key: attached to ``flow_run_id`` when given (the
    recrawl run that reported the cycle), else to the current run, if any (none when the
    task bodies are called directly).
    """
    realized = realized_freshness(root, web, at)
    before = reported_numbers(root, cycle)
    after = dataclasses.replace(before, realized_freshness=realized)
    cycles = record_cycle(root, after)
    folder = report_dir(root, cycle)
    plots = _redraw_freshness(root, cycle, cycles, after)
    summary = folder / "summary.md"
    text = _swap_changed_lines(summary.read_text(), _summary_lines(before), _summary_lines(after))
    durable_write_text(summary, text)
    _publish_summary(embed_plots(text, plots), cycle, flow_run_id)
    return realized


def reported_numbers(root: str | Path, cycle: int) -> CycleNumbers:
    """The cycle's numbers as its report recorded them (its row of ``cycles.parquet``)."""
    path = Path(root) / REPORTS / "cycles.parquet"
    if not path.exists():
        raise ValueError(f"{path} does not exist: cycle {cycle} was never reported")
    cycles = pd.read_parquet(path)
    rows = cycles[cycles["cycle_id"] == int(cycle)]
    if rows.empty:
        raise ValueError(f"cycle {cycle} has no row in {path}: it was never reported")
    row = rows.iloc[0]
    values = {
        f.name: _native(row[f.name])
        for f in dataclasses.fields(CycleNumbers)
        if f.name != "spent_by_slice" and f.name in row.index
    }
    spent = {
        str(c).removeprefix("spent_"): float(row[c])
        for c in row.index
        if str(c).startswith("spent_") and pd.notna(row[c])
    }
    return CycleNumbers(**values, spent_by_slice=spent)


def _native(value: Any) -> Any:
    return value.item() if hasattr(value, "item") else value


def _redraw_freshness(
    root: str | Path, cycle: int, cycles: pd.DataFrame, numbers: CycleNumbers
) -> dict[str, Path]:
    """Draw the freshness plot again (the other two do not depend on the truth); the
    cycle's plots as ``write_plots`` names them."""
    write_freshness_plot(root, cycle, cycles)
    return plot_paths(root, cycle)


def _summary_lines(numbers: CycleNumbers) -> list[str]:
    """The summary's lines for these numbers, with nothing else in it."""
    empty = pd.DataFrame(columns=["host"])
    return summary_markdown(numbers, empty, {}, "").splitlines()


def _swap_changed_lines(text: str, before: list[str], after: list[str]) -> str:
    """``text`` with each line that differs between ``before`` and ``after`` replaced."""
    if len(before) != len(after):
        raise ValueError("the summary's layout depends on the realized freshness")
    lines = text.splitlines()
    for old, new in zip(before, after, strict=True):
        if old == new:
            continue
        if lines.count(old) != 1:
            raise ValueError(f"summary.md does not have the line {old!r} once: not the report's")
        lines[lines.index(old)] = new
    return "\n".join(lines) + ("\n" if text.endswith("\n") else "")


def _publish_summary(markdown: str, cycle: int, flow_run_id: UUID | None) -> None:
    """The ``recrawl-summary`` artifact again, as ``flows.recrawl``'s report task makes it."""
    from prefect.artifacts import create_markdown_artifact
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.actions import ArtifactCreate

    from flows.recrawl import SUMMARY_ARTIFACT_KEY, summary_artifact_description
    from flows.run_context import in_run

    description = summary_artifact_description(cycle)
    if flow_run_id is not None:
        with get_client(sync_client=True) as client:
            client.create_artifact(
                ArtifactCreate(
                    type="markdown",
                    key=SUMMARY_ARTIFACT_KEY,
                    description=description,
                    data=markdown,
                    flow_run_id=flow_run_id,
                )
            )
    elif in_run():
        create_markdown_artifact(markdown, key=SUMMARY_ARTIFACT_KEY, description=description)
