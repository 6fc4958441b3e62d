"""The fetch history: Parquet files partitioned by cycle, published atomically, read by DuckDB.

Layout under ``<root>/history/``::

    _manifest.json                  the published state: which files make up each cycle
    cycle=<id>/v-<uuid>/part-0.parquet
    _stats/v-<uuid>.parquet         per-page sufficient statistics (PAGE_STATS_SCHEMA)
    _staging/<uuid>/                parts of a cycle being written, invisible to readers

Readers only ever look at what the manifest names, and the manifest is replaced with one
atomic rename, so a reader sees a cycle completely or not at all. Writing a cycle that is
already published replaces it (new files, new manifest); nothing is appended twice. A
process killed while writing leaves only an orphaned staging folder or version folder,
which the next commit removes. Files a commit replaced stay on disk until the commit
after it, so a reader holding the previous manifest can still finish its query.

At commit each observation is linked to the page's previous observation: ``changed`` is
filled (304 is unchanged; otherwise the fetcher's flag, else record hashes compared) and
``interval_days`` is the time since that previous observation. The per-page statistics
are then updated by adding the cycle's sums, so estimation reads one row per page
however long the history grows (``rebuild_stats`` recomputes them from scratch).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import duckdb
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.schemas import (
    HISTORY_REQUIRED,
    HISTORY_SCHEMA,
    OBSERVATION_OUTCOMES,
    OUTCOMES,
    PAGE_STATS_SCHEMA,
)

log = logging.getLogger(__name__)

MANIFEST = "_manifest.json"
STAGING_MAX_AGE_S = 6 * 3600


def connect() -> duckdb.DuckDBPyConnection:
    """An in-process DuckDB connection for the store's queries (no progress bar in logs)."""
    con = duckdb.connect()
    con.execute("SET enable_progress_bar = false")
    return con


class HistoryError(RuntimeError):
    """Base class of the history store's errors."""


class HistoryInputError(HistoryError, ValueError):
    """Rows offered to the history are malformed; nothing was written."""


class HistoryCorruptError(HistoryError):
    """A file the manifest references cannot be read; the message names it."""


class HistoryWriteError(HistoryError):
    """A history file could not be written (disk full, size limit, permissions).

    Nothing was published: readers still see the history as it was. The message names the
    file and the cause; what the failed commit had written is removed, so a re-run once
    there is space starts clean.
    """


@dataclass(frozen=True)
class CommitResult:
    cycle_id: int
    rows: int
    observations: int
    replaced: bool
    files: tuple[str, ...]


class HistoryStore:
    """Fetch history under ``<root>/history`` (see the module docstring)."""

    def __init__(self, root: str | Path) -> None:
        self.root = Path(root)
        self.dir = self.root / "history"

    # ------------------------------------------------------------------ reading

    def manifest(self) -> dict[str, Any]:
        path = self.dir / MANIFEST
        if not path.exists():
            return {"format": 1, "cycles": {}, "stats": None, "retired": []}
        try:
            data: dict[str, Any] = json.loads(path.read_text())
        except (OSError, ValueError) as exc:
            raise HistoryCorruptError(f"history manifest {path} is unreadable: {exc}") from None
        return data

    def cycles(self) -> list[int]:
        return sorted(int(c) for c in self.manifest()["cycles"])

    def files(self, cycles: list[int] | None = None) -> list[str]:
        """Absolute paths of the published history files (optionally of some cycles)."""
        entries = self.manifest()["cycles"]
        wanted = entries if cycles is None else {str(c): entries[str(c)] for c in cycles}
        return [
            str(self.dir / e["dir"] / f)
            for _, e in sorted(wanted.items(), key=lambda kv: int(kv[0]))
            for f in e["files"]
        ]

    def relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The whole published history as a DuckDB relation (empty if none)."""
        files = self.files()
        if not files:
            return con.from_arrow(HISTORY_SCHEMA.empty_table())
        return self._checked(lambda: con.read_parquet(files, union_by_name=True), files)

    def read(self, cycles: list[int] | None = None) -> pa.Table:
        """Published rows as an Arrow table in HISTORY_SCHEMA (small histories, tests)."""
        files = self.files(cycles)
        if not files:
            return HISTORY_SCHEMA.empty_table()
        con = connect()
        table = self._checked(
            lambda: (
                con.read_parquet(files, union_by_name=True)
                .order("cycle_id, url_id, fetched_at")
                .to_arrow_table()
            ),
            files,
        )
        return _conform(table)

    def page_stats(self) -> pa.Table:
        """Per-page sufficient statistics (PAGE_STATS_SCHEMA), one row per observed page."""
        entry = self.manifest().get("stats")
        if entry:
            path = str(self.dir / entry["file"])
            return self._checked(lambda: pq.read_table(path, schema=PAGE_STATS_SCHEMA), [path])
        return self._aggregate_all()

    def page_stats_relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The per-page statistics as a DuckDB relation (read in place, no copy)."""
        entry = self.manifest().get("stats")
        if entry:
            path = str(self.dir / entry["file"])
            return self._checked(lambda: con.read_parquet(path), [path])
        return con.from_arrow(self._aggregate_all())

    def _aggregate_all(self) -> pa.Table:
        """Statistics recomputed from every published file (no lock, nothing written)."""
        files = self.files()
        if not files:
            return PAGE_STATS_SCHEMA.empty_table()
        con = connect()
        return self._checked(
            lambda: _aggregate_stats(con, con.read_parquet(files, union_by_name=True)), files
        )

    # ------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def cycle_writer(self, cycle_id: int, *, link: bool = True) -> Iterator[CycleWriter]:
        """Stage parts of one cycle; they are published together when the block exits.

        If the block raises, nothing is published and the staged parts are removed.
        """
        writer = CycleWriter(self, int(cycle_id), link=link)
        try:
            yield writer
            writer.commit()
        except BaseException:
            writer.abort()
            raise

    def write_cycle(
        self, cycle_id: int, rows: pa.Table | pd.DataFrame, *, link: bool = True
    ) -> CommitResult:
        """Write one whole cycle at once (replacing it if already published)."""
        with self.cycle_writer(cycle_id, link=link) as writer:
            writer.write_part(rows)
        assert writer.result is not None
        return writer.result

    def rebuild_stats(self) -> pa.Table:
        """Recompute the per-page statistics from the whole history and publish them."""
        with self._lock():
            manifest = self.manifest()
            stats = self._aggregate_all()
            manifest["stats"] = self._write_stats(stats)
            self._publish(manifest, retire=[])
            return stats

    # ------------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _write_stats(self, stats: pa.Table) -> dict[str, Any]:
        rel_path = f"_stats/v-{uuid.uuid4().hex}.parquet"
        _write_parquet(stats.cast(PAGE_STATS_SCHEMA), self.dir / rel_path)
        return {"file": rel_path, "pages": stats.num_rows}

    def _publish(self, manifest: dict[str, Any], retire: list[str]) -> None:
        """Replace the manifest atomically, then delete what the previous commit retired."""
        old_stats = self.manifest().get("stats")
        if old_stats and old_stats != manifest.get("stats"):
            retire = [*retire, old_stats["file"]]
        previously_retired = manifest.get("retired", [])
        manifest["retired"] = retire
        manifest["committed_at"] = datetime.now(UTC).isoformat()
        tmp = self.dir / f".{MANIFEST}.{uuid.uuid4().hex}.tmp"
        try:
            with open(tmp, "w") as handle:
                json.dump(manifest, handle, indent=1, sort_keys=True)
                handle.flush()
                os.fsync(handle.fileno())
        except OSError as exc:
            tmp.unlink(missing_ok=True)
            raise write_error("manifest", self.dir / MANIFEST, exc) from exc
        os.replace(tmp, self.dir / MANIFEST)
        _fsync_dir(self.dir)
        for rel_path in previously_retired:
            target = self.dir / rel_path
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        self._collect_orphans(manifest)

    def _collect_orphans(self, manifest: dict[str, Any]) -> None:
        """Remove version folders no manifest names (left by killed writers)."""
        keep = {e["dir"] for e in manifest["cycles"].values()} | set(manifest["retired"])
        if manifest.get("stats"):
            keep.add(manifest["stats"]["file"])
        now = time.time()
        for cycle_dir in self.dir.glob("cycle=*"):
            for version in cycle_dir.iterdir():
                rel_path = f"{cycle_dir.name}/{version.name}"
                if rel_path not in keep and now - version.stat().st_mtime > 60:
                    shutil.rmtree(version, ignore_errors=True)
            with contextlib.suppress(OSError):
                cycle_dir.rmdir()  # only if empty
        for stats_file in (self.dir / "_stats").glob("*.parquet"):
            rel_path = f"_stats/{stats_file.name}"
            if rel_path not in keep and now - stats_file.stat().st_mtime > 60:
                stats_file.unlink(missing_ok=True)
        for staged in (self.dir / "_staging").glob("*"):
            if now - staged.stat().st_mtime > STAGING_MAX_AGE_S:
                shutil.rmtree(staged, ignore_errors=True)

    def _checked(self, read: Any, files: list[str]) -> Any:
        """Run a read; if DuckDB or Arrow fails, name the unreadable file(s)."""
        try:
            return read()
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            bad = []
            for f in files:
                try:
                    pq.read_metadata(f)
                except (pa.ArrowException, OSError) as file_exc:
                    bad.append(f"{f} ({file_exc})")
            if bad:
                raise HistoryCorruptError(
                    "history file(s) referenced by the manifest are missing or corrupt: "
                    + "; ".join(bad[:5])
                    + ". Nothing was changed; restore them or re-write those cycles."
                ) from exc
            raise


class CycleWriter:
    """Stages the parts of one cycle and commits them (see ``HistoryStore.cycle_writer``)."""

    def __init__(self, store: HistoryStore, cycle_id: int, *, link: bool) -> None:
        self.store = store
        self.cycle_id = cycle_id
        self.link = link
        self.staging = store.dir / "_staging" / uuid.uuid4().hex
        self.parts: list[Path] = []
        self.result: CommitResult | None = None

    def write_part(self, rows: pa.Table | pd.DataFrame) -> Path:
        """Validate and stage rows of this cycle (any number of parts, e.g. one per host batch)."""
        table = validate_history_rows(rows, self.cycle_id, linked=not self.link)
        path = self.staging / f"part-{len(self.parts):05d}.parquet"
        try:
            _write_parquet(table, path)
        except OSError as exc:
            raise write_error(f"staged part of cycle {self.cycle_id}", path, exc) from exc
        self.parts.append(path)
        return path

    def abort(self) -> None:
        shutil.rmtree(self.staging, ignore_errors=True)

    def _write(self, table: pa.Table, path: Path, what: str, written: list[Path]) -> None:
        """Write one file of the commit; if that fails, remove the commit's files and say why."""
        try:
            _write_parquet(table, path)
        except OSError as exc:
            _remove(written)
            raise write_error(f"{what} of cycle {self.cycle_id}", path, exc) from exc

    def commit(self) -> CommitResult:
        store = self.store
        with store._lock():
            manifest = store.manifest()
            published = [int(c) for c in manifest["cycles"]]
            latest = max(published, default=None)
            if latest is not None and self.cycle_id < latest:
                self.abort()
                raise HistoryInputError(
                    f"cycle {self.cycle_id} is older than the latest published cycle {latest}: "
                    "rewriting it would break the links of the cycles after it"
                )
            replaced = str(self.cycle_id) in manifest["cycles"]
            prior_files = store.files([c for c in published if c != self.cycle_id])
            con = connect()
            parts = [str(p) for p in self.parts]
            if parts:
                staged = con.read_parquet(parts, union_by_name=True)
            else:
                staged = con.from_arrow(HISTORY_SCHEMA.empty_table())
            table = _deduplicate(con, staged)
            if self.link:
                table = store._checked(lambda: _link(con, table, prior_files), prior_files)
            table = _conform(table)

            version = f"cycle={self.cycle_id}/v-{uuid.uuid4().hex}"
            written: list[Path] = [store.dir / version]  # removed if the commit cannot finish
            self._write(table, store.dir / version / "part-0.parquet", "data file", written)
            con.register("cycle_rows", table)
            delta = _aggregate_stats(con, con.table("cycle_rows"))
            retire = []
            if replaced:
                old_entry = manifest["cycles"][str(self.cycle_id)]
                old_files = [str(store.dir / old_entry["dir"] / f) for f in old_entry["files"]]
                old_rel = store._checked(
                    lambda: con.read_parquet(old_files, union_by_name=True), old_files
                )
                old = _aggregate_stats(con, old_rel)
                delta = _subtract_stats(con, delta, old)
                retire.append(old_entry["dir"])
            stats = _add_stats(con, store.page_stats(), delta)
            stats_rel = f"_stats/v-{uuid.uuid4().hex}.parquet"
            written.append(store.dir / stats_rel)
            self._write(stats.cast(PAGE_STATS_SCHEMA), store.dir / stats_rel, "statistics", written)
            manifest["stats"] = {"file": stats_rel, "pages": stats.num_rows}
            manifest["cycles"][str(self.cycle_id)] = {
                "dir": version,
                "files": ["part-0.parquet"],
                "rows": table.num_rows,
                "committed_at": datetime.now(UTC).isoformat(),
            }
            try:
                store._publish(manifest, retire=retire)
            except HistoryWriteError:
                _remove(written)
                raise
        self.abort()
        observations = int(
            pc.sum(pc.is_in(table["outcome"], pa.array(OBSERVATION_OUTCOMES))).as_py() or 0
        )
        self.result = CommitResult(
            self.cycle_id,
            table.num_rows,
            observations,
            replaced,
            tuple(store.files([self.cycle_id])),
        )
        log.info(
            "committed cycle %s: %s rows (%s)",
            self.cycle_id,
            table.num_rows,
            "replaced" if replaced else "new",
        )
        return self.result


# ---------------------------------------------------------------------- validation


def validate_history_rows(
    rows: pa.Table | pd.DataFrame, cycle_id: int, *, linked: bool
) -> pa.Table:
    """Check and conform rows offered for one cycle; raise HistoryInputError naming the problem.

    ``linked`` rows carry their own ``changed``/``interval_days`` (imports, simulations);
    otherwise those columns are recomputed at commit and any given values are hints.
    """
    if isinstance(rows, pd.DataFrame):
        if "fetched_at" in rows and getattr(rows["fetched_at"].dtype, "tz", None) is None:
            raise HistoryInputError("fetched_at must be timezone-aware (UTC); got naive timestamps")
        try:
            rows = pa.Table.from_pandas(rows, preserve_index=False)
        except (pa.ArrowException, TypeError, ValueError) as exc:
            raise HistoryInputError(f"cannot convert rows to Arrow: {exc}") from None
    if not isinstance(rows, pa.Table):
        raise HistoryInputError(f"expected a pyarrow Table or pandas DataFrame, got {type(rows)!r}")
    names = set(rows.column_names)
    missing = [c for c in HISTORY_REQUIRED if c not in names]
    if missing:
        raise HistoryInputError(f"history rows lack required column(s): {', '.join(missing)}")
    unknown = sorted(names - set(HISTORY_SCHEMA.names))
    if unknown:
        raise HistoryInputError(f"history rows have unknown column(s): {', '.join(unknown)}")
    ts = rows.schema.field("fetched_at").type
    if pa.types.is_timestamp(ts) and ts.tz is None:
        raise HistoryInputError("fetched_at must be timezone-aware (UTC); got naive timestamps")
    if "cycle_id" in names:
        other = pc.not_equal(rows["cycle_id"], pa.scalar(cycle_id, rows["cycle_id"].type))
        if pc.any(other).as_py():
            raise HistoryInputError(f"rows carry a cycle_id other than {cycle_id}")
    rows = (
        rows.set_column(
            rows.column_names.index("cycle_id"),
            "cycle_id",
            pa.array([cycle_id] * rows.num_rows, pa.int64()),
        )
        if "cycle_id" in names
        else rows.append_column("cycle_id", pa.array([cycle_id] * rows.num_rows, pa.int64()))
    )
    columns = []
    for field in HISTORY_SCHEMA:
        if field.name in rows.column_names:
            try:
                columns.append(rows[field.name].cast(field.type))
            except (pa.ArrowException, ValueError) as exc:
                raise HistoryInputError(
                    f"column {field.name!r} cannot be read as {field.type}: {exc}"
                ) from None
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    table = pa.Table.from_arrays(columns, schema=HISTORY_SCHEMA.with_metadata(None))
    for field in HISTORY_SCHEMA:
        if not field.nullable and table[field.name].null_count:
            raise HistoryInputError(
                f"column {field.name!r} has {table[field.name].null_count} null value(s)"
            )
    bad = pc.invert(pc.is_in(table["outcome"], pa.array(OUTCOMES)))
    if pc.any(bad).as_py():
        example = pc.filter(table["outcome"], bad)[0].as_py()
        raise HistoryInputError(f"unknown outcome {example!r}; allowed: {', '.join(OUTCOMES)}")
    for name in ("bytes", "latency_s", "cost"):
        if pc.any(pc.less(table[name], 0)).as_py():
            raise HistoryInputError(f"column {name!r} has negative values")
    if linked:
        interval = table["interval_days"]
        if pc.any(pc.less_equal(interval, 0)).as_py():
            raise HistoryInputError("interval_days must be positive where given")
        mismatch = pc.xor(pc.is_null(interval), pc.is_null(table["changed"]))
        if pc.any(mismatch).as_py():
            raise HistoryInputError(
                "linked rows need changed and interval_days both set or both NULL"
            )
    return table


# ---------------------------------------------------------------------- SQL


def _deduplicate(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation) -> pa.Table:
    """One row per (url_id, fetched_at): a retried write of the same attempt counts once."""
    con.register("staged", rel)
    return con.sql(
        "SELECT * FROM staged QUALIFY row_number() OVER (PARTITION BY url_id, fetched_at) = 1"
    ).to_arrow_table()


_LINK_SQL = """
WITH new AS (SELECT * FROM cycle_input),
obs AS (
    SELECT url_id, fetched_at,
           lag(fetched_at) OVER w AS in_prev_at,
           lag(record_hash) OVER w AS in_prev_hash
    FROM new WHERE outcome IN ('ok', 'not_modified')
    WINDOW w AS (PARTITION BY url_id ORDER BY fetched_at)
),
prior AS (
    SELECT url_id, max(fetched_at) AS prev_at, arg_max(record_hash, fetched_at) AS prev_hash
    FROM prior_history
    WHERE outcome IN ('ok', 'not_modified') AND url_id IN (SELECT url_id FROM obs)
    GROUP BY url_id
),
joined AS (
    SELECT new.* EXCLUDE (changed, interval_days), new.changed AS given_changed,
           coalesce(obs.in_prev_at, prior.prev_at) AS prev_at,
           CASE WHEN obs.in_prev_at IS NOT NULL THEN obs.in_prev_hash ELSE prior.prev_hash END
               AS prev_hash,
           obs.url_id IS NOT NULL AS is_obs
    FROM new
    LEFT JOIN obs USING (url_id, fetched_at)
    LEFT JOIN prior USING (url_id)
),
flagged AS (
    SELECT *,
        CASE WHEN NOT is_obs OR prev_at IS NULL THEN NULL
             WHEN outcome = 'not_modified' THEN false
             WHEN given_changed IS NOT NULL THEN given_changed
             WHEN record_hash IS NULL OR prev_hash IS NULL THEN NULL
             ELSE record_hash <> prev_hash END AS changed
    FROM joined
)
SELECT * EXCLUDE (given_changed, prev_at, prev_hash, is_obs),
    CASE WHEN changed IS NULL THEN NULL
         ELSE (epoch_us(fetched_at) - epoch_us(prev_at)) / 86400e6 END AS interval_days
FROM flagged
"""


def _link(con: duckdb.DuckDBPyConnection, table: pa.Table, prior_files: list[str]) -> pa.Table:
    """Fill ``changed`` and ``interval_days`` against each page's previous observation."""
    con.register("cycle_input", table)
    if prior_files:
        prior = con.read_parquet(prior_files, union_by_name=True)
    else:
        prior = con.from_arrow(HISTORY_SCHEMA.empty_table())
    con.register("prior_history", prior)
    linked = con.sql(_LINK_SQL).to_arrow_table()
    back = pc.less_equal(linked["interval_days"], 0)
    if pc.any(back).as_py():
        example = pc.filter(linked["url_id"], back)[0].as_py()
        raise HistoryInputError(
            f"{pc.sum(back).as_py()} observation(s) are not later than the page's previous "
            f"stored observation (e.g. url_id {example}); check the fetcher's clock"
        )
    return linked


_STATS_SQL = """
SELECT url_id, any_value(host) AS host,
       count(*) AS n_intervals,
       sum(c)::BIGINT AS n_changed,
       sum(interval_days) - sum(tc) AS unchanged_days,
       sum(tc) AS changed_sum,
       sum(tc * tc) AS changed_sum_sq,
       sum(tc * tc * tc) AS changed_sum_cube
FROM (
    SELECT url_id, host, interval_days, changed::INTEGER AS c,
           interval_days * changed::DOUBLE AS tc
    FROM {source}
    WHERE interval_days IS NOT NULL AND changed IS NOT NULL
)
GROUP BY url_id
"""


def stats_sql(source: str) -> str:
    """The per-page sufficient-statistics query over a named relation (a view or table)."""
    return _STATS_SQL.format(source=source)


def _aggregate_stats(con: duckdb.DuckDBPyConnection, rel: duckdb.DuckDBPyRelation) -> pa.Table:
    con.register("stats_source", rel)
    return con.sql(stats_sql("stats_source")).to_arrow_table().cast(PAGE_STATS_SCHEMA)


_COMBINE_SQL = """
SELECT url_id, coalesce(a.host, b.host) AS host,
       coalesce(a.n_intervals, 0) {op} coalesce(b.n_intervals, 0) AS n_intervals,
       coalesce(a.n_changed, 0) {op} coalesce(b.n_changed, 0) AS n_changed,
       coalesce(a.unchanged_days, 0) {op} coalesce(b.unchanged_days, 0) AS unchanged_days,
       coalesce(a.changed_sum, 0) {op} coalesce(b.changed_sum, 0) AS changed_sum,
       coalesce(a.changed_sum_sq, 0) {op} coalesce(b.changed_sum_sq, 0) AS changed_sum_sq,
       coalesce(a.changed_sum_cube, 0) {op} coalesce(b.changed_sum_cube, 0) AS changed_sum_cube
FROM stats_a a FULL OUTER JOIN stats_b b USING (url_id)
"""


def _combine(con: duckdb.DuckDBPyConnection, a: pa.Table, b: pa.Table, op: str) -> pa.Table:
    con.register("stats_a", a)
    con.register("stats_b", b)
    rel = con.sql(_COMBINE_SQL.format(op=op))
    if op == "+":
        rel = rel.filter("n_intervals > 0")
    return rel.to_arrow_table().cast(PAGE_STATS_SCHEMA)


def _add_stats(con: duckdb.DuckDBPyConnection, a: pa.Table, b: pa.Table) -> pa.Table:
    return _combine(con, a, b, "+")


def _subtract_stats(con: duckdb.DuckDBPyConnection, a: pa.Table, b: pa.Table) -> pa.Table:
    """a - b, for replacing a cycle; sums that cancel are snapped to exact zero."""
    out = _combine(con, a, b, "-")
    con.register("diff", out)
    return (
        con.sql(
            """SELECT url_id, host, n_intervals, n_changed,
                  if(n_intervals = n_changed, 0, unchanged_days) AS unchanged_days,
                  if(n_changed = 0, 0, changed_sum) AS changed_sum,
                  if(n_changed = 0, 0, changed_sum_sq) AS changed_sum_sq,
                  if(n_changed = 0, 0, changed_sum_cube) AS changed_sum_cube
           FROM diff"""
        )
        .to_arrow_table()
        .cast(PAGE_STATS_SCHEMA)
    )


# ---------------------------------------------------------------------- files


def _conform(table: pa.Table) -> pa.Table:
    cols = [
        table[f.name].cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in HISTORY_SCHEMA
    ]
    return pa.Table.from_arrays(cols, schema=HISTORY_SCHEMA)


def _write_parquet(table: pa.Table, path: Path) -> None:
    """Write a Parquet file durably: to a temporary name, fsync, rename (no leftover on error)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")
    try:
        pq.write_table(table, tmp, compression="zstd", row_group_size=1 << 20)
        with open(tmp, "rb") as handle:
            os.fsync(handle.fileno())
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise
    os.replace(tmp, path)
    _fsync_dir(path.parent)


_WRITE_CAUSES = {
    errno.ENOSPC: "no space left on the device",
    errno.EFBIG: "the file size limit was reached",
    errno.EDQUOT: "the disk quota is exhausted",
    errno.EROFS: "the file system is read-only",
    errno.EACCES: "permission denied",
    errno.EPERM: "operation not permitted",
}


def write_error(what: str, path: Path, exc: OSError) -> HistoryWriteError:
    """A HistoryWriteError naming the file, the cause and what to do."""
    cause = _WRITE_CAUSES.get(exc.errno or 0, "")
    detail = f"{cause} ({exc})" if cause else str(exc)
    return HistoryWriteError(
        f"could not write the history's {what} {path}: {detail}. Nothing was published; the "
        "history is as it was. Free space (or fix the cause) and re-run."
    )


def _remove(paths: list[Path]) -> None:
    """Remove a failed commit's files, and their folders if that leaves them empty."""
    for path in paths:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
        with contextlib.suppress(OSError):
            path.parent.rmdir()  # only if empty (a new cycle=<id> folder)


def _fsync_dir(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)
