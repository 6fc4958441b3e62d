"""The page catalog: one row per known URL, a single Parquet file replaced atomically."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.discovery.urls import InvalidURLError, normalize, url_host, url_id, url_length_problem
from models.schemas import CATALOG_REQUIRED, CATALOG_SCHEMA
from tasks.store.history import HistoryCorruptError, connect, verify_sidecar, write_checked_parquet
from tasks.store.location import resolve

DEFAULTS: dict[str, float | str] = {"value": 1.0, "cost": 1.0, "source": "seed"}
#: Nullable columns a caller may leave out (sitemap signals of discovered pages; what the
#: recrawl cycle learns of a page: its canonical URL, its near-duplicate cluster).
OPTIONAL_COLUMNS = ("lastmod", "changefreq", "canonical", "near_duplicate_of")
_DUCKDB_TYPES = {
    pa.int64(): "BIGINT",
    pa.float64(): "DOUBLE",
    pa.string(): "VARCHAR",
    CATALOG_SCHEMA.field("discovered_at").type: "TIMESTAMPTZ",
}


class CatalogInputError(ValueError):
    """Rows offered to the catalog are malformed; nothing was written."""


class StoreMissingError(ValueError):
    """A command that reads a store was pointed at a root that holds none."""


def require_store(root: str | Path, *, catalog: bool = False) -> None:
    """Raise :class:`StoreMissingError` unless ``root`` holds a catalog or a history.

    A mistyped ``--root`` must not read as an empty store (estimates of nothing, an empty
    plan written into a new folder). With ``catalog``, the catalog itself is required.
    """
    location = resolve(root)  # a bad root (unknown scheme, unreachable): StoreLocationError
    base = Path(root) if location.local else location.root
    has_catalog = location.exists("pages/catalog.parquet")
    has_history = location.exists("history/_manifest.json")
    if has_catalog or (has_history and not catalog):
        return
    what = "no catalog" if catalog else "neither a catalog nor a history"
    raise StoreMissingError(
        f"no store at {base}: it has {what} (start with: recrawl catalog import FILE --root {base})"
    )


class CatalogStore:
    """``<root>/pages/catalog.parquet``."""

    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / "pages" / "catalog.parquet"

    def read(self) -> pa.Table:
        if not self.path.exists():
            return CATALOG_SCHEMA.empty_table()
        self.verify()
        try:
            return pq.read_table(self.path, schema=CATALOG_SCHEMA)
        except (pa.ArrowException, OSError) as exc:
            raise HistoryCorruptError(f"catalog file {self.path} is unreadable: {exc}") from None

    def relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The catalog as a DuckDB relation (empty if there is none)."""
        if not self.path.exists():
            return con.from_arrow(CATALOG_SCHEMA.empty_table())
        self.verify()
        try:
            rel = con.read_parquet(str(self.path))
            missing = [f for f in CATALOG_SCHEMA if f.name not in rel.columns]
        except duckdb.Error as exc:
            raise HistoryCorruptError(f"catalog file {self.path} is unreadable: {exc}") from None
        if not missing:
            return rel
        # A catalog written before a nullable column existed reads it as NULL.
        nulls = ", ".join(f"NULL::{_DUCKDB_TYPES[f.type]} AS {f.name}" for f in missing)
        return rel.project(f"*, {nulls}")

    def verify(self) -> None:
        """Raise HistoryCorruptError naming the catalog if it differs from the digest kept
        beside it when it was written (``tasks.store.history.verify_sidecar``; a catalog written
        before digests is not checked, and gets one at its next write)."""
        remedy = (
            "restore it (and its digest file) from a backup, or remove both and import the "
            "catalog again"
        )
        verify_sidecar(self.path, "catalog file", remedy)

    def upsert(self, rows: pa.Table | pd.DataFrame) -> int:
        """Add or update pages by normalized URL; returns the catalog's new size.

        A page already known keeps its ``discovered_at``, and its sitemap ``lastmod`` and
        ``changefreq`` and its derived ``canonical`` and ``near_duplicate_of`` where the new
        row has none (NULL means "not known", not "none"); other columns take the new values.
        """
        new = prepare_catalog_rows(rows)
        con = connect()
        con.register("old", self.read())
        con.register("new", new)
        merged = con.sql(
            """SELECT n.* REPLACE (coalesce(o.discovered_at, n.discovered_at) AS discovered_at,
                                  coalesce(n.lastmod, o.lastmod) AS lastmod,
                                  coalesce(n.changefreq, o.changefreq) AS changefreq,
                                  coalesce(n.canonical, o.canonical) AS canonical,
                                  coalesce(n.near_duplicate_of, o.near_duplicate_of)
                                      AS near_duplicate_of)
               FROM new n LEFT JOIN old o USING (url_id)
               UNION ALL BY NAME
               SELECT o.* FROM old o ANTI JOIN new n USING (url_id)
               ORDER BY host, url_id"""
        ).to_arrow_table()
        merged = merged.select(CATALOG_SCHEMA.names).cast(CATALOG_SCHEMA)
        write_checked_parquet(merged, self.path)
        return int(merged.num_rows)

    def update_sitemap_signals(self, signals: pa.Table) -> int:
        """Set ``lastmod``/``changefreq`` of known pages from a table of (url_id, lastmod,
        changefreq); every other column, ``source`` and ``value`` included, is kept.

        Sitemaps are re-read every cycle: a known page's new ``<lastmod>`` is a change signal
        for the planner, but re-discovering a page must not reset what the catalog says of
        it. NULL signals keep the stored ones. Returns the number of pages updated.
        """
        missing = [c for c in ("url_id", "lastmod", "changefreq") if c not in signals.column_names]
        if missing:
            raise CatalogInputError(f"sitemap signals lack column(s): {', '.join(missing)}")
        if not self.path.exists() or signals.num_rows == 0:
            return 0
        con = connect()
        con.register("old", self.read())
        con.register(
            "sig",
            signals.select(["url_id", "lastmod", "changefreq"]).cast(
                pa.schema(
                    [
                        CATALOG_SCHEMA.field("url_id"),
                        CATALOG_SCHEMA.field("lastmod"),
                        CATALOG_SCHEMA.field("changefreq"),
                    ]
                )
            ),
        )
        changed = con.execute(
            """SELECT count(*) FROM old o JOIN sig s USING (url_id)
               WHERE s.lastmod IS DISTINCT FROM o.lastmod AND s.lastmod IS NOT NULL
                  OR s.changefreq IS DISTINCT FROM o.changefreq AND s.changefreq IS NOT NULL"""
        ).fetchall()
        updated = int(changed[0][0])
        if not updated:
            return 0
        merged = con.sql(
            """SELECT o.* REPLACE (coalesce(s.lastmod, o.lastmod) AS lastmod,
                                  coalesce(s.changefreq, o.changefreq) AS changefreq)
               FROM old o LEFT JOIN (SELECT DISTINCT ON (url_id) * FROM sig) s USING (url_id)
               ORDER BY host, url_id"""
        ).to_arrow_table()
        write_checked_parquet(merged.select(CATALOG_SCHEMA.names).cast(CATALOG_SCHEMA), self.path)
        return updated

    def update_pages(self, updates: pa.Table) -> int:
        """Set columns of known pages from a table of ``url_id`` plus catalog columns.

        Every column given other than ``url_id`` is set to the given value, NULL included
        (a page whose canonical link went away gets NULL); pages not in the table and
        ``url_id`` values not in the catalog are left alone. ``url``, ``host`` and
        ``discovered_at`` cannot be updated. Returns the number of pages whose row changed.
        """
        columns = [c for c in updates.column_names if c != "url_id"]
        if "url_id" not in updates.column_names:
            raise CatalogInputError("page updates need a 'url_id' column")
        fixed = {"url", "host", "discovered_at"} & set(columns)
        unknown = set(columns) - set(CATALOG_SCHEMA.names)
        if fixed or unknown:
            bad = ", ".join(sorted(fixed | unknown))
            raise CatalogInputError(f"page updates cannot set column(s): {bad}")
        if not self.path.exists() or updates.num_rows == 0 or not columns:
            return 0
        schema = pa.schema([CATALOG_SCHEMA.field(c) for c in ["url_id", *columns]])
        try:
            updates = updates.select(schema.names).cast(schema)
        except (pa.ArrowException, ValueError) as exc:
            raise CatalogInputError(f"page updates do not fit the catalog: {exc}") from None
        check_value_and_cost(updates)
        if pc.count_distinct(updates["url_id"]).as_py() != updates.num_rows:
            raise CatalogInputError("page updates name a url_id more than once")
        old = self.read()
        position = pc.index_in(old["url_id"], value_set=updates["url_id"])
        matched = pc.is_valid(position)
        changed = pa.array(np.zeros(old.num_rows, dtype=bool))
        for name in columns:
            before = old[name]
            after = pc.if_else(matched, pc.take(updates[name], position), before)
            differs = pc.or_(
                pc.fill_null(pc.not_equal(after, before), False),
                pc.not_equal(pc.is_null(after), pc.is_null(before)),
            )
            changed = pc.or_(changed, differs)
            old = old.set_column(old.schema.get_field_index(name), name, after)
        count = int(pc.sum(changed).as_py() or 0)
        if count:
            write_checked_parquet(old.cast(CATALOG_SCHEMA), self.path)
        return count


def prepare_catalog_rows(rows: pa.Table | pd.DataFrame) -> pa.Table:
    """Normalize URLs, derive url_id, fill defaults; one row per normalized URL (last wins)."""
    if isinstance(rows, pa.Table):
        rows = rows.to_pandas()
    if not isinstance(rows, pd.DataFrame):
        raise CatalogInputError(f"expected a DataFrame or Arrow table, got {type(rows)!r}")
    missing = [c for c in CATALOG_REQUIRED if c not in rows.columns]
    if "url" in missing:
        raise CatalogInputError("catalog rows need a 'url' column")
    frame = rows.copy()
    urls = []
    for i, raw in enumerate(frame["url"].tolist()):
        try:
            url = normalize(str(raw))
        except InvalidURLError as exc:
            raise CatalogInputError(f"row {i}: {exc}") from None
        too_long = url_length_problem(
            url
        )  # discovery's limit (models.discovery.urls.MAX_URL_LENGTH)
        if too_long is not None:
            raise CatalogInputError(f"row {i}: {too_long}: {url[:80]}...")
        urls.append(url)
    frame["url"] = urls
    frame["url_id"] = [url_id(u) for u in urls]
    # One host key per server, as discovery and the fetch engine name it: the normalized
    # authority with a non-default port (``models.discovery.urls.url_host``); a catalog's own
    # ``host``
    # column must agree with it, or one server would get two tag limits and two groups.
    hosts = [url_host(u) for u in urls]
    if "host" in frame:
        given = frame["host"].tolist()
        for i, (mine, theirs) in enumerate(zip(hosts, given, strict=True)):
            if not pd.isna(theirs) and str(theirs).lower() != mine:
                raise CatalogInputError(
                    f"row {i}: host {theirs!r} is not the host of {urls[i]} ({mine!r}); "
                    "leave the host column out and it is derived from the URL"
                )
    frame["host"] = hosts
    for name, default in DEFAULTS.items():
        frame[name] = frame[name].fillna(default) if name in frame else default
    if "group" not in frame:
        frame["group"] = frame["host"]
    frame["group"] = frame["group"].fillna(frame["host"])
    if "discovered_at" not in frame:
        frame["discovered_at"] = pd.Timestamp(datetime.now(UTC))
    for name in OPTIONAL_COLUMNS:
        if name not in frame:
            frame[name] = None
    unknown = sorted(set(frame.columns) - set(CATALOG_SCHEMA.names))
    if unknown:
        raise CatalogInputError(f"catalog rows have unknown column(s): {', '.join(unknown)}")
    frame = frame.drop_duplicates("url_id", keep="last")
    try:
        table = pa.Table.from_pandas(frame[CATALOG_SCHEMA.names], preserve_index=False)
        table = table.cast(CATALOG_SCHEMA)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise CatalogInputError(f"catalog rows do not fit the schema: {exc}") from None
    check_value_and_cost(table)
    return table


#: Bounds of a page's ``value`` and ``cost`` (inclusive): the planner ranks by value x days
#: / cost and sums costs over millions of pages, which stays finite and exact enough within
#: them (1e308 overflowed to inf and NaN and planned 0 pages).
VALUE_COST_BOUNDS = (1e-6, 1e6)


def check_value_and_cost(table: pa.Table) -> None:
    """Raise :class:`CatalogInputError` unless every ``value`` and ``cost`` is finite and
    within ``VALUE_COST_BOUNDS``; the error names the first page out of bounds."""
    low, high = VALUE_COST_BOUNDS
    for name in ("value", "cost"):
        if name not in table.column_names:
            continue
        column = table[name]
        ok = pc.and_(pc.greater_equal(column, low), pc.less_equal(column, high))
        ok = pc.fill_null(pc.and_(ok, pc.is_finite(column)), False)
        if not pc.all(ok, min_count=0).as_py():  # no rows: null with the default min_count
            first = pc.index(ok, False).as_py()
            page = next(
                (table[k][first].as_py() for k in ("url", "url_id") if k in table.column_names),
                first,
            )
            raise CatalogInputError(
                f"catalog column {name!r} must be positive and finite, between {low:g} and "
                f"{high:g}: {column[first].as_py()!r} for {page}"
            )
