"""The store as pandas DataFrames, one call each, and as DuckDB views to query.

For notebooks and ad hoc analysis::

    from tasks.store import frames

    frames.history("data", cycles=[3])   # history rows with their URL (url first)
    frames.catalog("data")               # the page catalog
    frames.plan("data", 4)               # cycle 4's plan with each page's URL
    frames.plan("data", name=...)        # an ad hoc plan (frames.adhoc_plans lists them)
    frames.estimates("data")             # change-rate estimates computed now, with URLs

    con = frames.open_store("data")      # views history, catalog, history_with_urls
    con.sql("SELECT url, count(*) FROM history_with_urls WHERE changed GROUP BY url")

History rows carry ``url_id`` and ``host`` only; the URL is the catalog's (``url_id`` ->
``url``), joined by DuckDB. A page the catalog does not know has a NULL ``url``. Nothing
here writes to the store.
"""

from __future__ import annotations

from collections.abc import Iterable
from numbers import Integral
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd

from tasks.cycle.estimation import load_rate_estimates
from tasks.cycle.planning import ADHOC_DIR, plan_path
from tasks.store.catalog import CatalogStore, require_store
from tasks.store.history import HistoryStore, connect

#: The order rows of the history come in: by cycle, then as they were fetched.
HISTORY_ORDER = "cycle_id, fetched_at, url_id"


class StoreReadError(ValueError):
    """What was asked of the store is not there (no such cycle or plan); a root without a
    store raises ``tasks.store.catalog.StoreMissingError``."""


def open_store(
    root: str | Path, con: duckdb.DuckDBPyConnection | None = None
) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection with the store's views: ``history``, ``catalog`` and
    ``history_with_urls`` (the page's ``url`` first, then every history column).

    The views read the files published when this is called; open the store again to see
    later commits. With ``con``, the views are created (replaced) on that connection.
    """
    require_store(root)  # a mistyped root is an error, not an empty store
    con = con if con is not None else connect()
    HistoryStore(root).relation(con).create_view("history")
    CatalogStore(root).relation(con).create_view("catalog")
    with_urls(con, con.view("history"), root).create_view("history_with_urls")
    return con


def with_urls(
    con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation, root: str | Path
) -> duckdb.DuckDBPyRelation:
    """``rel`` (any relation with ``url_id``) with the catalog's ``url`` as its first
    column, NULL for a page the catalog does not know; unordered."""
    urls = CatalogStore(root).relation(con).select("url_id, url")
    return rel.join(urls, "url_id", how="left").project("url, * EXCLUDE (url)")


def history_with_urls(
    con: duckdb.DuckDBPyConnection, root: str | Path, cycles: int | Iterable[int] | None = None
) -> duckdb.DuckDBPyRelation:
    """The history (of ``cycles``, else all) with the catalog's URLs, as a relation on
    ``con``: unordered, nothing read until it is fetched."""
    require_store(root)
    rel = HistoryStore(root).relation(con)
    wanted = _cycle_list(cycles)
    if wanted is not None:
        rel = rel.filter(_in_cycles(wanted))
    return with_urls(con, rel, root)


def history(root: str | Path, cycles: int | Iterable[int] | None = None) -> pd.DataFrame:
    """History rows (of ``cycles``, else every cycle) with their ``url``, as a DataFrame
    ordered by cycle and fetch time; columns: ``url``, then ``models.schemas.HISTORY_SCHEMA``'s."""
    return _frame(history_with_urls(connect(), root, cycles).order(HISTORY_ORDER))


def catalog(root: str | Path) -> pd.DataFrame:
    """The page catalog (``models.schemas.CATALOG_SCHEMA``), one row per page, by host."""
    require_store(root)
    return _frame(CatalogStore(root).relation(connect()).order("host, url_id"))


def plan_cycles(root: str | Path) -> list[int]:
    """The cycles that have their own plan under ``root``, oldest first."""
    found = (p.name.removeprefix("cycle=") for p in Path(root, "plans").glob("cycle=*.parquet"))
    return sorted(int(c) for c in (f.removesuffix(".parquet") for f in found) if c.isdigit())


def adhoc_plans(root: str | Path) -> list[str]:
    """The names of the ad hoc plans under ``root`` (``plan_cycle(..., adhoc_name=...)``)."""
    return sorted(p.stem for p in Path(root, "plans", ADHOC_DIR).glob("*.parquet"))


def plan(root: str | Path, cycle: int | None = None, *, name: str | None = None) -> pd.DataFrame:
    """A plan with each page's ``url`` first, in the plan's order; the other columns are
    those ``tasks.cycle.planning.plan_cycle`` writes.

    Cycle ``cycle``'s own plan (default: the newest cycle's), or with ``name`` the ad hoc
    plan of that name (``adhoc_plans`` lists them; ``PlanResult.path.stem`` is one).
    """
    require_store(root)
    if name is not None:
        path = plan_path(root, cycle or 0, name)
        if not path.exists():
            names = adhoc_plans(root)
            known = f"ad hoc plans: {', '.join(names)}" if names else "no ad hoc plans"
            raise StoreReadError(f"no ad hoc plan {name!r} under {root} ({known})")
    else:
        have = plan_cycles(root)
        if cycle is None and not have:
            adhoc = "; ad hoc plans are read by name (frames.adhoc_plans)"
            raise StoreReadError(f"no cycle's plan under {root}{adhoc}")
        cycle = have[-1] if cycle is None else cycle
        path = plan_path(root, cycle)
        if not path.exists():
            known = f"plans for cycles {_span(have)}" if have else "no plans"
            raise StoreReadError(f"no plan for cycle {cycle} under {root} ({known})")
    con = connect()
    rows = con.read_parquet(str(path), file_row_number=True)
    return _frame(
        with_urls(con, rows, root).order("file_row_number").project("* EXCLUDE (file_row_number)")
    )


def estimates(root: str | Path, **options: Any) -> pd.DataFrame:
    """Every page's change-rate estimate computed now from the history (as
    ``tasks.cycle.estimation.load_rate_estimates``, whose keyword ``options`` it takes), with
    the page's ``url`` first, highest rate first."""
    require_store(root)
    frame = load_rate_estimates(root, **options)
    con = connect()
    return _frame(with_urls(con, con.from_df(frame), root).order("rate DESC, url_id"))


# ---------------------------------------------------------------------------- helpers


def _frame(rel: duckdb.DuckDBPyRelation) -> pd.DataFrame:
    """``rel`` run and fetched as a DataFrame (duckdb 2 types ``DuckDBPyRelation.df`` ``Any``)."""
    frame: pd.DataFrame = rel.df()
    return frame


def _cycle_list(cycles: int | Iterable[int] | None) -> list[int] | None:
    if cycles is None:
        return None
    values: list[object] = list(cycles) if isinstance(cycles, Iterable) else [cycles]
    bad = [c for c in values if isinstance(c, bool) or not isinstance(c, Integral) or c < 0]
    if bad:
        raise StoreReadError(f"cycles are integers >= 0, got {bad[0]!r}")
    return [int(c) for c in values if isinstance(c, Integral)]


def _in_cycles(cycles: list[int]) -> str:
    return f"cycle_id IN ({', '.join(str(c) for c in cycles)})" if cycles else "false"


def _span(cycles: list[int]) -> str:
    return f"{cycles[0]}-{cycles[-1]}" if len(cycles) > 1 else str(cycles[0])


def show_history(root: str | Path, cycle: int | None = None, limit: int = 20) -> str:
    """``recrawl history show``: the first ``limit`` rows of ``cycle`` (default: the
    newest) as text, by fetch time: url, outcome, changed, fetched_at."""
    require_store(root)
    have = HistoryStore(root).cycles()
    if not have:
        raise StoreReadError(f"no history under {root}: no cycle has been committed")
    if limit < 1:
        raise StoreReadError(f"--limit must be at least 1, got {limit}")
    cycle = have[-1] if cycle is None else cycle
    if cycle not in have:
        raise StoreReadError(
            f"cycle {cycle} is not in the history under {root} (cycles {_span(have)})"
        )
    con = connect()
    rel = history_with_urls(con, root, cycle)
    total = rel.count("*").fetchall()[0][0]
    shown = _frame(
        rel.order("fetched_at, url_id")
        .limit(min(limit, total))  # DuckDB's LIMIT is an int64
        .project(
            "coalesce(url, '(url_id ' || url_id || ', not in the catalog)') AS url, "
            "outcome, changed, fetched_at"
        )
    )
    head = f"cycle {cycle}: {len(shown)} of {total} rows, by fetch time"
    width = int(shown["url"].str.len().max())
    table = shown.to_string(
        index=False, justify="left", formatters={"url": f"{{:<{width}}}".format}
    )
    return head + "\n" + table
