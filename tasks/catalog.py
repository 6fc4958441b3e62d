"""The page catalog: one row per known URL, a single Parquet file replaced atomically."""

from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.schemas import CATALOG_REQUIRED, CATALOG_SCHEMA
from models.urls import InvalidURLError, normalize, url_id
from tasks.history import HistoryCorruptError, _write_parquet, connect

DEFAULTS = {"value": 1.0, "cost": 1.0, "source": "seed"}


class CatalogInputError(ValueError):
    """Rows offered to the catalog are malformed; nothing was written."""


class CatalogStore:
    """``<root>/pages/catalog.parquet``."""

    def __init__(self, root: str | Path) -> None:
        self.path = Path(root) / "pages" / "catalog.parquet"

    def read(self) -> pa.Table:
        if not self.path.exists():
            return CATALOG_SCHEMA.empty_table()
        try:
            return pq.read_table(self.path, schema=CATALOG_SCHEMA)
        except (pa.ArrowException, OSError) as exc:
            raise HistoryCorruptError(f"catalog file {self.path} is unreadable: {exc}") from None

    def relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The catalog as a DuckDB relation (empty if there is none)."""
        if not self.path.exists():
            return con.from_arrow(CATALOG_SCHEMA.empty_table())
        try:
            return con.read_parquet(str(self.path))
        except duckdb.Error as exc:
            raise HistoryCorruptError(f"catalog file {self.path} is unreadable: {exc}") from None

    def upsert(self, rows: pa.Table | pd.DataFrame) -> int:
        """Add or update pages by normalized URL; returns the catalog's new size.

        A page already known keeps its ``discovered_at``; other columns take the new values.
        """
        new = prepare_catalog_rows(rows)
        con = connect()
        con.register("old", self.read())
        con.register("new", new)
        merged = con.sql(
            """SELECT n.* REPLACE (coalesce(o.discovered_at, n.discovered_at) AS discovered_at)
               FROM new n LEFT JOIN old o USING (url_id)
               UNION ALL BY NAME
               SELECT o.* FROM old o ANTI JOIN new n USING (url_id)
               ORDER BY host, url_id"""
        ).to_arrow_table()
        merged = merged.select(CATALOG_SCHEMA.names).cast(CATALOG_SCHEMA)
        _write_parquet(merged, self.path)
        return merged.num_rows


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
            urls.append(normalize(str(raw)))
        except InvalidURLError as exc:
            raise CatalogInputError(f"row {i}: {exc}") from None
    frame["url"] = urls
    frame["url_id"] = [url_id(u) for u in urls]
    if "host" not in frame:
        frame["host"] = [u.split("/")[2].split(":")[0] for u in urls]
    for name, default in DEFAULTS.items():
        frame[name] = frame[name].fillna(default) if name in frame else default
    if "group" not in frame:
        frame["group"] = frame["host"]
    frame["group"] = frame["group"].fillna(frame["host"])
    if "discovered_at" not in frame:
        frame["discovered_at"] = pd.Timestamp(datetime.now(UTC))
    unknown = sorted(set(frame.columns) - set(CATALOG_SCHEMA.names))
    if unknown:
        raise CatalogInputError(f"catalog rows have unknown column(s): {', '.join(unknown)}")
    frame = frame.drop_duplicates("url_id", keep="last")
    try:
        table = pa.Table.from_pandas(frame[CATALOG_SCHEMA.names], preserve_index=False)
        table = table.cast(CATALOG_SCHEMA)
    except (pa.ArrowException, ValueError, TypeError) as exc:
        raise CatalogInputError(f"catalog rows do not fit the schema: {exc}") from None
    for name in ("value", "cost"):
        if not pc.all(pc.greater(table[name], 0)).as_py():
            raise CatalogInputError(f"catalog column {name!r} must be positive")
    return table
