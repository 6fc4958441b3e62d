"""The fetch history: Parquet files partitioned by cycle, published atomically, read by DuckDB.

Layout under ``<root>/history/``::

    _manifest.json                  the published state: which files make up each cycle
    cycle=<id>/v-<uuid>/part-0.parquet
    _stats/v-<uuid>.parquet         per-page sufficient statistics (PAGE_STATS_FILE_SCHEMA;
                                    ``"order": "page_hash"`` in the manifest: in page-hash
                                    order, as the commit writes them)
    _last/v-<uuid>.parquet          each page's last observation (``link.LAST_COLUMNS``),
                                    after the latest cycle and before it
    _staging/<uuid>/                a cycle being written (staged.arrow), invisible to readers

Readers only ever look at what the manifest names, and the manifest is replaced with one
atomic rename, so a reader sees a cycle completely or not at all. Writing a cycle that is
already published replaces it (new files, new manifest); nothing is appended twice. A
process killed while writing leaves only an orphaned staging folder or version folder,
which the next commit removes. Files a commit replaced stay on disk until the commit
after it, so a reader holding the previous manifest can still finish its query.

At commit each observation is linked to the page's previous observation: ``changed`` is
filled (304 is unchanged; otherwise the fetcher's flag, else record hashes compared) and
``interval_days`` is the time since that previous observation; its Last-Modified is judged
against the previous observation and the page's last earlier Last-Modified. The per-page
statistics (``tasks.store.stats``: interval sums, Last-Modified age sums and evidence
counts) are then updated by adding the cycle's sums, so estimation reads one row per page
however long the history grows (``rebuild_stats`` recomputes them from scratch). A
statistics file written before the age sums existed is recomputed from the history once,
by the next commit or the first ``page_sums`` (estimation). So is the whole file when a
commit brings an observation not later than the page's previous one (the history's order
then differs from the commits'; the fetcher's clock).

A commit's time does not grow with the history's length (issue 19): each page's last
observation (what the link needs of the history) is kept in ``_last/``, updated from the
cycle's rows at each commit; the manifest names it after the latest cycle and before it
(the one a rewrite of the latest cycle links against). A store without it (written before
it, or its file corrupt) links against the history files as before, and the commit writes
the file from them.

A commit's memory does not grow with the cycle (issue 8), and it reads and writes each
file once (issue 19): the staged parts are appended to one Arrow IPC scratch file, and
``tasks.store.bucket_commit`` walks the pages in buckets of about ``COMMIT_BUCKET_ROWS``
rows (by a hash of the url_id), each in memory: linked as ``tasks.store.link.LinkPass``
links, written to the cycle's data file, its sums added to the statistics and its last
observations updated, the three files written side by side in page-hash order and each
published durably once. Replacing a published cycle, statistics without the age sums and
observations not later than the page's previous ones take the DuckDB path of
``tasks.store.link`` and ``tasks.store.stats`` (a connection with a memory limit,
``COMMIT_MEMORY_LIMIT``, that spills into the staging folder).

Integrity: a byte flipped on disk can leave a Parquet file readable (pyarrow and DuckDB
read a damaged value as another value; DuckDB verifies no page checksum), so each
published file's digest (``DIGEST``, hashlib) is kept where the file is named: the cycle's
entry and the statistics' entry of the manifest, which carries a digest of itself too;
a lone file replaced in place (the catalog) in a sidecar (``write_sidecar``). Every read
of a published file checks it first (``verify_file``): one read of the file, once per
process while its size, inode, mtime and ctime stay the same. A mismatch raises
HistoryCorruptError naming the file before anything is read or written. A store written
before the digests reads unchecked; its next commit or ``rebuild_stats`` records the
digests of the files as they are then.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import hashlib
import json
import logging
import os
import shutil
import time
import uuid
from collections.abc import Callable, Collection, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TypeVar

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.schemas import (
    HISTORY_REQUIRED,
    HISTORY_SCHEMA,
    OUTCOMES,
    PAGE_STATS_FILE_SCHEMA,
    PAGE_STATS_SCHEMA,
)
from tasks.store.bucket_commit import (
    LAST_SCHEMA,
    PAGE_HASH_ORDER,
    BucketPaths,
    SortedRuns,
    StagedRows,
    commit_in_buckets,
)
from tasks.store.durable import durable_rename, durable_write_text, staged
from tasks.store.link import (
    LinkCounts,
    LinkOutput,
    link_staged,
    linked_in_staged_order,
    merge_rows,
    write_last_state,
)
from tasks.store.location import Location, StoreLocationError, open_url, resolve
from tasks.store.stats import (
    AGE_COLUMNS,
    kept_stats,
    rows_sums,
    stats_sql,
    updated_stats,
)

__all__ = ["HistoryStore", "connect", "stats_sql", "validate_history_rows"]

log = logging.getLogger(__name__)
_T = TypeVar("_T")

MANIFEST = "_manifest.json"
STAGING_MAX_AGE_S = 6 * 3600
#: DuckDB's memory limit for a commit's queries; beyond it their sorts, joins and
#: aggregates spill to the staging folder, so a commit's memory does not grow with the
#: cycle's rows. Not much lower: scanning a file written with row groups of 2**20 rows (as
#: the store wrote them before issue 8) failed at 64 MB.
COMMIT_MEMORY_LIMIT = "128MB"
#: DuckDB threads of a commit: every thread reserves memory of its own in each sort,
#: join and aggregate, so one thread keeps the limit above workable when it is small
#: (with two, 128 MB failed now and then on 800,000 rows; with one, 64 MB did not).
COMMIT_THREADS = 1
#: Rows (and pages) of one bucket of the commit (``tasks.store.bucket_commit``: a bucket
#: is held in memory; the DuckDB path sorts about this many rows at once, since the memory
#: a DuckDB sort needs grows with its input: 1.6 million narrow rows took 64 MB, 6.4
#: million failed). A bucket of 250,000 took about 700 MB of peak RSS above the baseline;
#: every further bucket reads the staged rows once more.
COMMIT_BUCKET_ROWS = 250_000
#: Rows per record batch streamed from the commit's query into a Parquet file (a row group).
COMMIT_BATCH_ROWS = 65_536
#: Bytes of staged rows a commit holds in memory before it writes them to its scratch file
#: (``StagedRows``): bench_commit's million-row cycle stages 210 MB; above this, memory
#: stays at this plus one bucket whatever the cycle's size.
COMMIT_STAGED_BYTES = 256 << 20
#: The digest kept for each published file (a hashlib name; the manifest's key). SHA-256,
#: not BLAKE2b: with the CPU's SHA extensions it hashed 480 MB/s here against BLAKE2b's 210.
DIGEST = "sha256"
#: The manifest's digest of itself (its other keys as canonical JSON).
MANIFEST_DIGEST = f"manifest_{DIGEST}"


def connect(config: dict[str, Any] | None = None) -> duckdb.DuckDBPyConnection:
    """An in-process DuckDB connection for the store's queries (no progress bar in logs).

    ``config`` is DuckDB's connect-time configuration (memory limit, spill folder...).
    The progress bar is a per-connection setting and cannot be given there. Inside a
    Jupyter kernel without ``ipywidgets`` DuckDB's Python client starts with the bar off
    and refuses any statement that sets it, even to off (duckdb/duckdb#6831, #7590), so it
    is switched off only where it is on.
    """
    con = duckdb.connect(config=config or {})
    if con.execute("SELECT current_setting('enable_progress_bar')").fetchall()[0][0]:
        con.execute("SET enable_progress_bar = false")
    return con


class HistoryError(RuntimeError):
    """Base class of the history store's errors."""


class HistoryInputError(HistoryError, ValueError):
    """Rows offered to the history are malformed; nothing was written."""


class HistoryCorruptError(HistoryError):
    """A file the manifest references cannot be read; the message names it."""


#: What to do about a history part that differs from its digest.
PART_REMEDY = (
    "restore the file from a backup (a part cannot be rebuilt, and "
    "`recrawl history rebuild-stats` refuses to build from it)"
)


def _manifest_digest(manifest: dict[str, Any]) -> str:
    """The digest of a manifest's content but that digest itself (canonical JSON)."""
    body = {k: v for k, v in manifest.items() if k != MANIFEST_DIGEST}
    text = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.new(DIGEST, text.encode()).hexdigest()


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
        #: where the store lives (``tasks.store.location``): a folder, or a URL whose
        #: history is read through its manifest (commits need a folder: rename, flock)
        self.location: Location = resolve(root)
        self.root = Path(root) if self.location.local else Path(self.location.base)
        self.dir = self.root / "history"

    def _url(self, rel: str) -> str:
        """A published file of the history (relative to ``history/``) as DuckDB reads it."""
        if self.location.local:
            return str(self.dir / rel)
        return self.location.url(f"history/{rel}")

    def _writable(self) -> None:
        """Refuse to write a store that is not a local folder (one line, exit 2)."""
        if not self.location.local:
            raise StoreLocationError(
                f"--root {self.location.root}: the history is read from an object store "
                "through its manifest but committed only in a local folder (renames, locks); "
                "commit locally and copy the files, the manifest last (docs/store.md)"
            )

    # ------------------------------------------------------------------ reading

    def manifest(self) -> dict[str, Any]:
        path = self.dir / MANIFEST
        rel = f"history/{MANIFEST}"
        if not (path.exists() if self.location.local else self.location.exists(rel)):
            return {"format": 1, "cycles": {}, "stats": None, "retired": []}
        try:
            text = path.read_text() if self.location.local else self.location.read_text(rel)
            data: dict[str, Any] = json.loads(text)
        except (OSError, ValueError) as exc:
            raise HistoryCorruptError(f"history manifest {path} is unreadable: {exc}") from None
        recorded = data.get(MANIFEST_DIGEST) if isinstance(data, dict) else None
        if recorded is not None and recorded != _manifest_digest(data):
            raise HistoryCorruptError(
                f"history manifest {path} is corrupt: its {DIGEST} digest of itself does not "
                "match its content. Nothing was changed; restore it from a backup"
            )
        return data

    def cycles(self) -> list[int]:
        return sorted(int(c) for c in self.manifest()["cycles"])

    def files(self, cycles: list[int] | None = None, *, verify: bool = True) -> list[str]:
        """Absolute paths of the published history files (optionally of some cycles).

        With ``verify`` each is first checked against the digest the manifest recorded
        for it (``verify_file``): HistoryCorruptError names a file that differs.
        """
        entries = self.manifest()["cycles"]
        wanted = entries if cycles is None else {str(c): entries[str(c)] for c in cycles}
        ordered = [e for _, e in sorted(wanted.items(), key=lambda kv: int(kv[0]))]
        return self._entry_files(ordered, verify=verify)

    def _entry_files(self, entries: list[dict[str, Any]], *, verify: bool) -> list[str]:
        """The cycle entries' files, checked against their digests if ``verify``."""
        paths: list[str] = []
        checks: list[tuple[str, Collection[str]]] = []
        for entry in entries:
            digests = entry.get(DIGEST, {})
            for name in entry["files"]:
                paths.append(self._url(f"{entry['dir']}/{name}"))
                if name in digests:
                    checks.append((paths[-1], [digests[name]]))
        if verify:
            verify_files(checks, "history part", PART_REMEDY)
        return paths

    def relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The whole published history as a DuckDB relation (empty if none)."""
        files = self.files()
        if not files:
            return con.from_arrow(HISTORY_SCHEMA.empty_table())
        self.location.duckdb(con)
        return self._checked(lambda: con.read_parquet(files, union_by_name=True), files)

    def read(self, cycles: list[int] | None = None) -> pa.Table:
        """Published rows as an Arrow table in HISTORY_SCHEMA (small histories, tests)."""
        files = self.files(cycles)
        if not files:
            return HISTORY_SCHEMA.empty_table()
        con = self.location.duckdb(connect())
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
        """Per-page interval statistics (PAGE_STATS_SCHEMA), one row per page with an
        observed interval."""
        con = self.location.duckdb(connect())
        return self.page_stats_relation(con).to_arrow_table().cast(PAGE_STATS_SCHEMA)

    def stats_files(self, *, verify: bool = True) -> list[str]:
        """The published statistics file, if any (absolute path), checked against its
        digest if ``verify`` (as ``files``)."""
        entry = self.manifest().get("stats")
        if not entry:
            return []
        path = self._url(entry["file"])
        if verify and DIGEST in entry:
            remedy = (
                f"rebuild them from the history: recrawl history rebuild-stats --root {self.root}"
            )
            verify_file(path, [entry[DIGEST]], "history statistics", remedy)
        return [path]

    def page_stats_relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """The per-page interval statistics as a DuckDB relation (read in place, no copy)."""
        files = self.stats_files()
        self.location.duckdb(con)
        if not files:
            return con.from_arrow(self._aggregate_all())
        rel = self._checked(lambda: con.read_parquet(files[0]), files)
        if _has_ages(rel):
            rel = rel.filter("n_intervals > 0")
        return rel.select(", ".join(PAGE_STATS_SCHEMA.names))

    def page_sums(self) -> pa.Table:
        """Every column of the statistics (PAGE_STATS_FILE_SCHEMA), one row per page with
        an interval or a judged Last-Modified (a page seen once may have no interval)."""
        con = self.location.duckdb(connect())
        return self.page_sums_relation(con).to_arrow_table().cast(PAGE_STATS_FILE_SCHEMA)

    def page_sums_relation(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyRelation:
        """``page_sums`` as a DuckDB relation (read in place). A statistics file written
        before the age sums existed is first recomputed from the history and published."""
        files = self.stats_files()
        self.location.duckdb(con)
        if files and _has_ages(self._checked(lambda: con.read_parquet(files[0]), files)):
            return con.read_parquet(files[0])
        if not files and not self.files():
            return con.from_arrow(PAGE_STATS_FILE_SCHEMA.empty_table())
        with self._lock():
            if not self.stats_current():
                log.info("statistics of %s lack the Last-Modified age sums: recomputing", self.dir)
                self._rebuild_locked()
        return con.read_parquet(self.stats_files()[0])

    def stats_current(self) -> bool:
        """Whether the published statistics carry every column (no rebuild pending)."""
        files = self.stats_files()
        return bool(files) and _has_ages(
            self._checked(lambda: self.location.duckdb(connect()).read_parquet(files[0]), files)
        )

    def _aggregate_all(self) -> pa.Table:
        """Interval statistics recomputed from every published file (no lock, nothing
        written; the store has no statistics file yet)."""
        files = self.files()
        if not files:
            return PAGE_STATS_SCHEMA.empty_table()
        con = self.location.duckdb(connect())
        con.register(
            "stats_source",
            self._checked(lambda: con.read_parquet(files, union_by_name=True), files),
        )
        return self._checked(
            lambda: con.sql(stats_sql("stats_source")).to_arrow_table().cast(PAGE_STATS_SCHEMA),
            files,
        )

    # ------------------------------------------------------------------ writing

    @contextlib.contextmanager
    def cycle_writer(
        self, cycle_id: int, *, link: bool = True, memory_limit: str | None = None
    ) -> Iterator[CycleWriter]:
        """Stage parts of one cycle; they are published together when the block exits.

        If the block raises, nothing is published and the staged parts are removed.
        ``memory_limit`` (DuckDB's, e.g. ``"256MB"``; default ``COMMIT_MEMORY_LIMIT``) bounds
        the commit's queries: beyond it their sorts and joins spill to the staging folder.
        """
        self._writable()
        writer = CycleWriter(self, int(cycle_id), link=link, memory_limit=memory_limit)
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
        """Recompute the per-page statistics from the whole history and publish them;
        return the interval statistics (as ``page_stats``).

        Runs like a commit's queries: a memory limit, spilling under a staging folder.
        """
        with self._lock():
            self._rebuild_locked()
        return self.page_stats()

    def _rebuild_locked(self) -> None:
        """``rebuild_stats`` with the lock held."""
        manifest = self.manifest()
        files = self.files()
        stats_rel = f"_stats/v-{uuid.uuid4().hex}.parquet"
        path = self.dir / stats_rel
        staging = self.dir / "_staging" / uuid.uuid4().hex
        try:
            with commit_connection(staging / "spill", COMMIT_MEMORY_LIMIT) as con:
                buckets = _buckets(_rows(manifest))

                def write() -> int:
                    rel = full_stats(con, files, staging / "work", buckets)
                    return _stream_stats(rel, path)

                try:
                    pages = self._checked(write, files)
                except OSError as exc:
                    raise write_error("statistics", path, exc) from exc
            manifest["stats"] = {"file": stats_rel, "pages": pages, DIGEST: known_digest(path)}
            self._publish(manifest, retire=[])
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        finally:
            shutil.rmtree(staging, ignore_errors=True)

    # ------------------------------------------------------------------ internals

    @contextlib.contextmanager
    def _lock(self) -> Iterator[None]:
        self._writable()
        self.dir.mkdir(parents=True, exist_ok=True)
        with open(self.dir / ".lock", "a+") as handle:
            fcntl.flock(handle, fcntl.LOCK_EX)
            try:
                yield
            finally:
                fcntl.flock(handle, fcntl.LOCK_UN)

    def _prior_state(self, manifest: dict[str, Any], cycle_id: int) -> dict[str, Any] | None:
        """The manifest's entry of the pages' last observations through the latest cycle
        before ``cycle_id`` (a commit of ``cycle_id`` links against it), if it has one and
        its file is sound; None otherwise (then the history files are read)."""
        earlier = [int(c) for c in manifest["cycles"] if int(c) < cycle_id]
        if not earlier:
            return None
        last = manifest.get("last") or {}
        for entry in (last.get("after"), last.get("before")):
            if entry and entry.get("through") == max(earlier):
                try:
                    verify_file(self.dir / entry["file"], [entry[DIGEST]], "last observations", "")
                except HistoryCorruptError as exc:
                    log.warning("%s: linking against the history files instead", exc)
                    return None
                return dict(entry)
        return None

    @staticmethod
    def _last_files(manifest: dict[str, Any]) -> set[str]:
        """The files of the pages' last observations a manifest names."""
        last = manifest.get("last") or {}
        return {e["file"] for e in (last.get("after"), last.get("before")) if e}

    def _publish(self, manifest: dict[str, Any], retire: list[str]) -> None:
        """Replace the manifest atomically, then delete what the previous commit retired."""
        current = self.manifest()
        old_stats = current.get("stats")
        if old_stats and old_stats != manifest.get("stats"):
            retire = [*retire, old_stats["file"]]
        retire = [*retire, *sorted(self._last_files(current) - self._last_files(manifest))]
        previously_retired = manifest.get("retired", [])
        manifest["retired"] = retire
        manifest["committed_at"] = datetime.now(UTC).isoformat()
        self._record_digests(manifest)
        manifest[MANIFEST_DIGEST] = _manifest_digest(manifest)
        try:
            durable_write_text(self.dir / MANIFEST, json.dumps(manifest, indent=1, sort_keys=True))
        except OSError as exc:
            raise write_error("manifest", self.dir / MANIFEST, exc) from exc
        for rel_path in previously_retired:
            target = self.dir / rel_path
            if target.is_dir():
                shutil.rmtree(target, ignore_errors=True)
            else:
                target.unlink(missing_ok=True)
        self._collect_orphans(manifest)

    def _record_digests(self, manifest: dict[str, Any]) -> None:
        """Record the digests a store written before them lacks (its files as they are now;
        each published since has its own)."""
        with contextlib.suppress(OSError):  # a file gone: reading it says so, not this
            for entry in manifest["cycles"].values():
                if DIGEST not in entry:
                    paths = self._entry_files([entry], verify=False)
                    names = entry["files"]
                    entry[DIGEST] = {n: known_digest(f) for n, f in zip(names, paths, strict=True)}
            stats = manifest.get("stats")
            if stats and DIGEST not in stats:
                stats[DIGEST] = known_digest(self.dir / stats["file"])

    def _collect_orphans(self, manifest: dict[str, Any]) -> None:
        """Remove version folders no manifest names (left by killed writers)."""
        keep = {e["dir"] for e in manifest["cycles"].values()} | set(manifest["retired"])
        if manifest.get("stats"):
            keep.add(manifest["stats"]["file"])
        keep |= self._last_files(manifest)
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
        for last_file in (self.dir / "_last").glob("*.parquet"):
            rel_path = f"_last/{last_file.name}"
            if rel_path not in keep and now - last_file.stat().st_mtime > 60:
                last_file.unlink(missing_ok=True)
        for leftover in (self.dir / "_staging").glob("*"):
            if now - leftover.stat().st_mtime > STAGING_MAX_AGE_S:
                shutil.rmtree(leftover, ignore_errors=True)

    def _checked(self, read: Callable[[], _T], files: list[str]) -> _T:
        """Run a read; if DuckDB or Arrow fails, name the unreadable file(s)."""
        try:
            return read()
        except (duckdb.Error, pa.ArrowException, OSError) as exc:
            bad = []
            for f in files:
                try:
                    with _open(f) as handle:
                        pq.read_metadata(handle)
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

    def __init__(
        self, store: HistoryStore, cycle_id: int, *, link: bool, memory_limit: str | None = None
    ) -> None:
        self.store = store
        self.cycle_id = cycle_id
        self.link = link
        self.memory_limit = memory_limit or COMMIT_MEMORY_LIMIT
        self.staging = store.dir / "_staging" / uuid.uuid4().hex
        #: the validated parts, held in memory or appended to one Arrow IPC file
        #: (``StagedRows``)
        self.staged = StagedRows(
            self.staging / "staged.arrow",
            batch_rows=COMMIT_BATCH_ROWS,
            memory_bytes=COMMIT_STAGED_BYTES,
        )
        #: the staged rows as Parquet parts, for the DuckDB path (``_parquet_parts``)
        self.parts: list[Path] = []
        self.part_rows: list[int] = []
        #: the pages' last observations the cycle links against (``HistoryStore._prior_state``)
        self.prior_state: str | None = None
        self.result: CommitResult | None = None

    def write_part(self, rows: pa.Table | pd.DataFrame) -> Path:
        """Validate and stage rows of this cycle (any number of parts, e.g. one per host batch)."""
        table = validate_history_rows(rows, self.cycle_id, linked=not self.link)
        path = self.staged.path
        try:
            # staging: never published as is, so neither durable nor hashed (a crash leaves
            # the staging folder, which a later commit removes)
            self.staged.append(table)
        except OSError as exc:
            raise write_error(f"staged part of cycle {self.cycle_id}", path, exc) from exc
        return path

    def _close_staged(self) -> None:
        """Write the parts the staged rows still hold (``StagedRows`` writes them a batch
        of parts at a time) and complete their file."""
        try:
            self.staged.close()
        except OSError as exc:
            raise write_error(
                f"staged part of cycle {self.cycle_id}", self.staged.path, exc
            ) from exc

    def abort(self) -> None:
        self.staged.discard()
        shutil.rmtree(self.staging, ignore_errors=True)

    def _parquet_parts(self) -> None:
        """Write the staged rows as Parquet parts of about COMMIT_BATCH_ROWS rows (scratch
        files) for the DuckDB path, which reads staged rows as Parquet."""
        if self.parts:
            return
        pending: list[pa.Table] = []

        def flush() -> None:
            table = pa.concat_tables(pending)
            path = self.staging / f"part-{len(self.parts):05d}.parquet"
            try:
                _write_parquet(table, path, digest=False, durable=False)
            except OSError as exc:
                raise write_error(f"staged part of cycle {self.cycle_id}", path, exc) from exc
            self.parts.append(path)
            self.part_rows.append(table.num_rows)
            pending.clear()

        for batch in self.staged.batches():
            pending.append(pa.Table.from_batches([batch]))
            if sum(t.num_rows for t in pending) >= COMMIT_BATCH_ROWS:
                flush()
        if pending:
            flush()

    def commit(self) -> CommitResult:
        """Publish the staged parts as the cycle, reading them in record batches.

        Deduplication and linking run on the staged rows' keys (``tasks.store.link``),
        the kept rows stream into the cycle's Parquet file a row group at a time, and the
        statistics are then aggregated from that file, on a DuckDB connection with a memory
        limit that spills under the staging folder. Memory depends on the batch and bucket
        sizes and the limit, not on the cycle's rows. Anything that fails removes what the
        commit wrote.
        """
        store = self.store
        self._close_staged()
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
            old_entry = manifest["cycles"].get(str(self.cycle_id))
            prior_files = store.files([c for c in published if c != self.cycle_id])
            store.stats_files()  # checked before anything is written, as the parts are
            version = f"cycle={self.cycle_id}/v-{uuid.uuid4().hex}"
            data_path = store.dir / version / "part-0.parquet"
            stats_rel = f"_stats/v-{uuid.uuid4().hex}.parquet"
            old_files = store._entry_files([old_entry], verify=True) if old_entry else []
            prior_entry = store._prior_state(manifest, self.cycle_id)
            self.prior_state = str(store.dir / prior_entry["file"]) if prior_entry else None
            last_rel = f"_last/v-{uuid.uuid4().hex}.parquet"
            written: list[Path] = [store.dir / version]  # removed if the commit cannot finish
            written += [store.dir / stats_rel, store.dir / last_rel]
            stats_order: dict[str, str] = {}
            try:
                with commit_connection(self.staging / "spill", self.memory_limit) as con:
                    if old_entry is None:
                        rows, pages, in_order = self._commit_in_buckets(
                            con,
                            data_path,
                            prior_files,
                            prior_entry,
                            store.dir / stats_rel,
                            store.dir / last_rel,
                        )
                        if in_order:
                            stats_order = {"order": PAGE_HASH_ORDER}
                    else:  # a replaced version's sums are subtracted: the DuckDB path
                        self._parquet_parts()
                        walked = self._write_rows(con, data_path, prior_files, _pages(manifest))
                        rows = walked.counts
                        pages = self._write_page_stats(
                            con, data_path, walked, prior_files, old_files, store.dir / stats_rel
                        )
                        self._write_last(con, data_path, prior_files, store.dir / last_rel)
                    last_digest = known_digest(store.dir / last_rel)
            except BaseException:
                _remove(written)
                raise
            before = prior_entry if (prior_entry or not prior_files) else None
            last_order = {"order": PAGE_HASH_ORDER} if old_entry is None else {}
            manifest["last"] = {
                "after": {
                    "file": last_rel,
                    "through": self.cycle_id,
                    DIGEST: last_digest,
                    **last_order,
                },
                "before": before,
            }
            manifest["stats"] = {
                "file": stats_rel,
                "pages": pages,
                DIGEST: known_digest(store.dir / stats_rel),
                **stats_order,
            }
            manifest["cycles"][str(self.cycle_id)] = {
                "dir": version,
                "files": ["part-0.parquet"],
                DIGEST: {"part-0.parquet": known_digest(data_path)},
                "rows": rows.rows,
                "committed_at": datetime.now(UTC).isoformat(),
            }
            try:
                store._publish(manifest, retire=[old_entry["dir"]] if old_entry else [])
            except HistoryWriteError:
                _remove(written)
                raise
        self.abort()
        self.result = CommitResult(
            self.cycle_id,
            rows.rows,
            rows.observations,
            replaced,
            tuple(store.files([self.cycle_id])),
        )
        log.info(
            "committed cycle %s: %s rows (%s)",
            self.cycle_id,
            rows.rows,
            "replaced" if replaced else "new",
        )
        return self.result

    def _commit_in_buckets(
        self,
        con: duckdb.DuckDBPyConnection,
        data_path: Path,
        prior_files: list[str],
        prior_entry: dict[str, Any] | None,
        stats_path: Path,
        last_path: Path,
    ) -> tuple[LinkCounts, int, bool]:
        """Write the cycle's data file, the statistics and the pages' last observations in
        one pass over buckets of pages (``tasks.store.bucket_commit``), each published
        durably; return the counts, the statistics' pages and whether they are in
        page-hash order.

        The statistics are recomputed from the history instead (DuckDB, ``full_stats``)
        when the published ones lack the age sums or there are none yet beside a
        history, or when the cycle has an observation not later than the page's previous
        one. Without kept last observations (a store from before them) they are first
        taken from the history files.
        """
        store = self.store
        manifest = store.manifest()
        work = self.staging / "work"
        work.mkdir(parents=True, exist_ok=True)
        stats_files = store.stats_files()
        incremental = store.stats_current() if stats_files else not prior_files
        if self.prior_state is None and prior_files:
            state = work / "prior-last.parquet"
            self._guarded(
                "last observations",
                state,
                prior_files,
                lambda: write_last_state(con, None, prior_files, state),
            )
            last = SortedRuns(
                str(state), LAST_SCHEMA, in_hash_order=False, batch_rows=COMMIT_BATCH_ROWS
            )
        else:
            hashed = (prior_entry or {}).get("order") == PAGE_HASH_ORDER
            last = SortedRuns(
                self.prior_state, LAST_SCHEMA, in_hash_order=hashed, batch_rows=COMMIT_BATCH_ROWS
            )
        stats_entry = manifest.get("stats") or {}
        stats = SortedRuns(
            stats_files[0] if incremental and stats_files else None,
            PAGE_STATS_FILE_SCHEMA,
            in_hash_order=stats_entry.get("order") == PAGE_HASH_ORDER,
            batch_rows=COMMIT_BATCH_ROWS,
        )
        buckets = _buckets(max(self.staged.rows, _pages(manifest)))
        with (
            staged(data_path) as data_tmp,
            staged(stats_path) as stats_tmp,
            staged(last_path) as last_tmp,
        ):
            paths = BucketPaths(data_tmp, stats_tmp if incremental else None, last_tmp)
            inputs = [*stats_files, *prior_files]
            counts: LinkCounts = self._guarded(
                "data file",
                data_path,
                inputs,
                lambda: _link(con, self.staged, last, stats, paths, buckets, self.link),
            )
            if self.link and counts.backward:
                raise HistoryInputError(_backward_message(counts))
            whole = not incremental or counts.unordered > 0
            for tmp, path in ((data_tmp, data_path), (last_tmp, last_path)):
                _publish_file(tmp, path)
            if whole:
                log.info("cycle %s: statistics recomputed from the whole history", self.cycle_id)
                files = [*prior_files, str(data_path)]
                history_rows = self.staged.rows + _rows(manifest, skip=self.cycle_id)

                def write() -> int:
                    rel = full_stats(con, files, work / "full", _buckets(history_rows))
                    return _stream_stats(rel, stats_path)

                pages: int = self._guarded("statistics", stats_path, files, write)
            else:
                pages = pq.read_metadata(stats_tmp).num_rows
                _publish_file(stats_tmp, stats_path)
        return counts, pages, not whole

    def _write_rows(
        self, con: duckdb.DuckDBPyConnection, path: Path, prior_files: list[str], prior_pages: int
    ) -> LinkOutput:
        """Deduplicate and link the staged parts into the cycle's data file (streamed), and
        judge their Last-Modified (``LinkOutput.ages``).

        ``prior_pages`` (about how many pages the published history has) sizes the buckets.
        Unlinked rows (``link=False``) keep their own ``changed``/``interval_days``; they
        are walked with the history's last observations too, for the Last-Modified.
        """
        parts = [str(p) for p in self.parts]
        work = self.staging / "work"
        buckets = _buckets(sum(self.part_rows) + prior_pages)
        walked: LinkOutput
        if self.link:
            walked = self._guarded(
                "link",
                work,
                prior_files,
                lambda: _link_keys(con, parts, prior_files, work, buckets, self.prior_state),
            )
        else:
            walked = self._guarded(
                "deduplication",
                work,
                prior_files,
                lambda: _deduplicate(con, parts, prior_files, work, buckets, self.prior_state),
            )

        def write() -> int:
            in_order = linked_in_staged_order(
                con, walked.linked, self.part_rows, COMMIT_BUCKET_ROWS, COMMIT_BATCH_ROWS
            )
            rows = merge_rows(parts, in_order, relink=self.link, batch_rows=COMMIT_BATCH_ROWS)
            return _write_parquet(TableStream(HISTORY_SCHEMA, rows), path)

        self._guarded("data file", path, [], write)
        return walked

    def _write_page_stats(
        self,
        con: duckdb.DuckDBPyConnection,
        data_path: Path,
        walked: LinkOutput,
        prior_files: list[str],
        old_files: list[str],
        path: Path,
    ) -> int:
        """The statistics plus this cycle's sums (minus a replaced version's), streamed.

        Recomputed from the whole history instead when the published ones lack the age
        sums (written before them), or when this cycle or the version it replaces has an
        observation not later than the page's previous one (``LinkCounts.unordered``).
        """
        store = self.store
        work = self.staging / "work"
        stats_files = store.stats_files()
        checked = [*old_files, *stats_files, *prior_files]
        manifest = store.manifest()
        buckets = _buckets(sum(self.part_rows) + _pages(manifest))

        def write() -> int:
            stale = not store.stats_current() if stats_files else bool(prior_files)
            whole = stale or walked.counts.unordered > 0
            removed_ages = None
            if old_files and not whole:
                old = link_staged(
                    con,
                    old_files,
                    prior_files,
                    work / "old",
                    COMMIT_BATCH_ROWS,
                    buckets,
                    given_links=True,
                    prior_state=self.prior_state,
                )
                whole = old.counts.unordered > 0
                removed_ages = old.ages
            if whole:
                log.info("cycle %s: statistics recomputed from the whole history", self.cycle_id)
                history_rows = sum(self.part_rows) + _rows(manifest, skip=self.cycle_id)
                files = [*prior_files, str(data_path)]
                rel = full_stats(con, files, work / "full", _buckets(history_rows))
            else:
                added = rows_sums(
                    con, con.read_parquet(str(data_path)), str(walked.ages), work / "added"
                )
                removed = None
                if removed_ages is not None:
                    removed = rows_sums(
                        con,
                        con.read_parquet(old_files, union_by_name=True),
                        str(removed_ages),
                        work / "removed",
                    )
                rel = (
                    updated_stats(
                        con, con.read_parquet(stats_files[0]), added, removed, work / "stats"
                    )
                    if stats_files
                    else kept_stats(con, added)
                )
            return _stream_stats(rel, path)

        rows: int = self._guarded("statistics", path, checked, write)
        return rows

    def _write_last(
        self, con: duckdb.DuckDBPyConnection, data_path: Path, prior_files: list[str], path: Path
    ) -> str:
        """Write each page's last observation after this cycle to ``path`` (durably);
        return its digest. From the prior state and the cycle's file, or, without a prior
        state, from the whole history."""
        rows = [str(data_path)]
        if self.prior_state is None:
            rows = [*prior_files, *rows]

        def write() -> str:
            with staged(path) as tmp:
                write_last_state(con, self.prior_state, rows, tmp)
                digest = file_digest(tmp)
                durable_rename(tmp, path)
            _remember(path, digest)
            return digest

        digest: str = self._guarded("last observations", path, rows, write)
        return digest

    def _guarded(self, what: str, path: Path, inputs: list[str], step: Any) -> Any:
        """Run a step of the commit with the store's errors: a corrupt input file, a failed
        write, DuckDB out of memory or unable to spill (each names the file or folder)."""
        try:
            return self.store._checked(step, inputs)
        except OSError as exc:
            raise write_error(f"{what} of cycle {self.cycle_id}", path, exc) from exc
        except (duckdb.IOException, duckdb.OutOfMemoryException) as exc:
            raise HistoryWriteError(
                f"the commit of cycle {self.cycle_id} could not finish its {what} within its "
                f"memory limit {self.memory_limit} and the spill folder {self.staging}: {exc}. "
                "Nothing was published; free disk space (or raise the limit) and re-run."
            ) from exc


def _buckets(rows: int) -> int:
    """How many buckets of pages a walk over about ``rows`` rows takes."""
    return max(1, -(-rows // COMMIT_BUCKET_ROWS))


def _rows(manifest: dict[str, Any], skip: int | None = None) -> int:
    """Rows of the published history (but the cycle ``skip``)."""
    return sum(int(e.get("rows", 0)) for c, e in manifest["cycles"].items() if c != str(skip))


def _pages(manifest: dict[str, Any]) -> int:
    """About how many pages the published history has observed (sizes a commit's sorts)."""
    cycles = [int(entry.get("rows", 0)) for entry in manifest["cycles"].values()]
    stats = manifest.get("stats") or {}
    return max([int(stats.get("pages", 0)), *cycles])


# ---------------------------------------------------------------------- validation

_OUTCOME_SET = frozenset(OUTCOMES)


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
    # a part of a few thousand rows is validated in a fixed number of Arrow calls, each
    # costing about as much as its rows: columns already of their type are not cast, the
    # cycle_id column is built from numpy, not from a Python list (issue 19: 500 parts of
    # 2,000 rows took 0.74-0.81 s of CPU casting every column, 0.33-0.35 s so)
    columns = []
    for field in HISTORY_SCHEMA:
        if field.name == "cycle_id":
            columns.append(pa.array(np.full(rows.num_rows, cycle_id, dtype=np.int64)))
        elif field.name in names:
            column = rows[field.name]
            if column.type != field.type:
                try:
                    column = column.cast(field.type)
                except (pa.ArrowException, ValueError) as exc:
                    raise HistoryInputError(
                        f"column {field.name!r} cannot be read as {field.type}: {exc}"
                    ) from None
            columns.append(column)
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    table = pa.Table.from_arrays(columns, schema=HISTORY_SCHEMA.with_metadata(None))
    for field in HISTORY_SCHEMA:
        if not field.nullable and table[field.name].null_count:
            raise HistoryInputError(
                f"column {field.name!r} has {table[field.name].null_count} null value(s)"
            )
    if not set(pc.unique(table["outcome"]).to_pylist()) <= _OUTCOME_SET:
        bad = pc.invert(pc.is_in(table["outcome"], pa.array(OUTCOMES)))
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


def _deduplicate(
    con: duckdb.DuckDBPyConnection,
    parts: list[str],
    prior_files: list[str],
    work: Path,
    buckets: int,
    prior_state: str | None,
) -> LinkOutput:
    """One row per (url_id, fetched_at): a retried write of the same attempt counts once.

    Rows keep their own ``changed``/``interval_days`` (``link=False``); see ``_link``.
    """
    return link_staged(
        con,
        parts,
        prior_files,
        work,
        COMMIT_BATCH_ROWS,
        buckets,
        given_links=True,
        prior_state=prior_state,
    )


def _link(
    con: duckdb.DuckDBPyConnection,
    staged_rows: StagedRows,
    last: SortedRuns,
    stats: SortedRuns,
    paths: BucketPaths,
    buckets: int,
    link: bool,
) -> LinkCounts:
    """The commit's one pass (``tasks.store.bucket_commit.commit_in_buckets``): deduplicate,
    link (``link``) and write the cycle's rows, statistics and last observations to
    ``paths`` (temporary names)."""
    return commit_in_buckets(
        con,
        staged_rows,
        last,
        stats,
        paths,
        buckets=buckets,
        link=link,
        row_group_rows=2 * COMMIT_BATCH_ROWS,
    )


def _backward_message(counts: LinkCounts) -> str:
    return (
        f"{counts.backward} observation(s) are not later than the page's previous "
        f"stored observation (e.g. url_id {counts.backward_example}); check the "
        "fetcher's clock"
    )


def _publish_file(tmp: Path, path: Path) -> None:
    """Publish a complete temporary file durably under ``path``, its digest remembered."""
    digest = file_digest(tmp)
    durable_rename(tmp, path)
    _remember(path, digest)


def _link_keys(
    con: duckdb.DuckDBPyConnection,
    parts: list[str],
    prior_files: list[str],
    work: Path,
    buckets: int,
    prior_state: str | None,
) -> LinkOutput:
    """Deduplicate, and fill ``changed`` and ``interval_days`` against each page's previous
    observation (``tasks.store.link``): ``work/linked.parquet``, sorted by page.

    Refuses the cycle if an observation whose change is known is not later than the page's
    previous one.
    """
    walked = link_staged(
        con, parts, prior_files, work, COMMIT_BATCH_ROWS, buckets, prior_state=prior_state
    )
    if walked.counts.backward:
        raise HistoryInputError(_backward_message(walked.counts))
    return walked


def full_stats(
    con: duckdb.DuckDBPyConnection, files: list[str], work: Path, buckets: int
) -> duckdb.DuckDBPyRelation:
    """Every column of the statistics recomputed from these history files (all of the
    history, in cycle order): the stored rows walked page by page in time, with their own
    links, as the commits walked them."""
    if not files:
        return con.from_arrow(PAGE_STATS_FILE_SCHEMA.empty_table())
    walked = link_staged(
        con, files, [], work, COMMIT_BATCH_ROWS, buckets, given_links=True, deduplicate=False
    )
    rows = con.read_parquet(files, union_by_name=True)
    return kept_stats(con, rows_sums(con, rows, str(walked.ages), work / "sums"))


def _stream_stats(rel: duckdb.DuckDBPyRelation, path: Path) -> int:
    """Write a statistics relation into ``path`` a row group at a time."""
    with rel.to_arrow_reader(batch_size=COMMIT_BATCH_ROWS) as reader:
        tables = (pa.Table.from_batches([b]) for b in reader)
        return _write_parquet(TableStream(PAGE_STATS_FILE_SCHEMA, tables), path)


def _has_ages(rel: duckdb.DuckDBPyRelation) -> bool:
    """Whether a statistics file has the age columns (written since they exist)."""
    return set(AGE_COLUMNS) <= set(rel.columns)


# ---------------------------------------------------------------------- files


def _conform(table: pa.Table, schema: pa.Schema = HISTORY_SCHEMA) -> pa.Table:
    """The table in ``schema`` exactly: columns in its order and types, absent ones NULL."""
    cols = [
        table[f.name].cast(f.type)
        if f.name in table.column_names
        else pa.nulls(table.num_rows, f.type)
        for f in schema
    ]
    return pa.Table.from_arrays(cols, schema=schema)


def commit_connection(spill_dir: Path, memory_limit: str) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection for one commit: bounded memory, spilling under ``spill_dir``.

    Insertion order is not preserved (no query of the commit needs it, and keeping it
    buffers results); the folder is the commit's staging folder, removed with it.
    """
    spill_dir.mkdir(parents=True, exist_ok=True)
    try:
        return connect(
            config={
                "memory_limit": memory_limit,
                "temp_directory": str(spill_dir),
                "preserve_insertion_order": False,
                "threads": COMMIT_THREADS,
            }
        )
    except duckdb.Error as exc:
        raise HistoryInputError(f"bad commit memory limit {memory_limit!r}: {exc}") from None


@dataclass(frozen=True)
class TableStream:
    """Tables to write one after another into one Parquet file, conformed to ``schema``."""

    schema: pa.Schema
    tables: Iterable[pa.Table]


def _write_parquet(
    rows: pa.Table | TableStream,
    path: Path,
    *,
    digest: bool = True,
    sidecar: bool = False,
    durable: bool = True,
) -> int:
    """Write a Parquet file durably (``tasks.store.durable``: no leftover on error); return its
    row count.

    Not ``durable``: a scratch file of a private folder (a commit's staged parts), written
    in place with Snappy, unhashed, no fsync; an error removes it.

    A table is written at once; a stream a row group of about COMMIT_BATCH_ROWS at a
    time, so memory is one row group whatever the file's size. With ``digest`` the file
    is then read once to take its digest (``known_digest`` gives it without another
    read); with ``sidecar`` the digest is also kept next to it (``write_sidecar``), for a
    file no manifest names.
    """
    if not durable:
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            table = rows if isinstance(rows, pa.Table) else pa.concat_tables(rows.tables)
            pq.write_table(table, path, compression="snappy")
        except BaseException:
            path.unlink(missing_ok=True)
            raise
        return int(table.num_rows)
    with staged(path) as tmp:
        if isinstance(rows, TableStream):
            count = _write_row_groups(rows.tables, tmp, rows.schema)
        else:
            pq.write_table(rows, tmp, compression="zstd", row_group_size=1 << 20)
            count = rows.num_rows
        written = file_digest(tmp) if digest or sidecar else None
        if sidecar and written is not None:
            write_sidecar(tmp, path, written)
        else:
            durable_rename(tmp, path)
    if written is not None:
        _remember(path, written)
    return count


def write_checked_parquet(table: pa.Table, path: Path) -> int:
    """Write a Parquet file that no manifest names (the catalog, the cycle reports) durably
    (``tasks.store.durable``), its digest kept beside it for ``verify_sidecar``; return its row
    count."""
    return _write_parquet(table, path, sidecar=True)


# ---------------------------------------------------------------------- integrity

#: Files this process has checked or written, by (path, inode, size, mtime, ctime): their
#: digest. A file changed in place gets a new mtime and ctime (and ctime cannot be set back),
#: so it is checked again; published files are never changed in place.
_checked_digests: dict[tuple[str, int, int, int, int], str] = {}
_CHECKED_MAX = 65_536


def file_digest(path: str | Path) -> str:
    """The file's ``DIGEST`` as hex (one read of it)."""
    with open(path, "rb") as handle:
        return _handle_digest(handle)


def _handle_digest(handle: Any) -> str:
    handle.seek(0)
    return hashlib.file_digest(handle, DIGEST).hexdigest()


def _open(name: str) -> Any:
    """A published file opened for reading: a local path, or a URL (``tasks.store.location``:
    the filesystem of the store's root)."""
    if "://" in name:
        return open_url(name)
    return open(name, "rb")


def _handle_key(name: str, handle: Any) -> tuple[str, int, int, int, int] | None:
    """The cache key of an open file (``_stat_key``); None for an object-store file (no
    inode or ctime to tell a rewrite by: it is checked at each read)."""
    try:
        return _stat_key(name, os.fstat(handle.fileno()))
    except (AttributeError, OSError, ValueError):
        return None


def _stat_key(path: str, st: os.stat_result) -> tuple[str, int, int, int, int]:
    return (path, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)


def _remember(path: str | Path, digest: str) -> None:
    if len(_checked_digests) >= _CHECKED_MAX:
        _checked_digests.clear()
    _checked_digests[_stat_key(str(path), os.stat(path))] = digest


def known_digest(path: str | Path) -> str:
    """The file's digest: as this process wrote or checked it if the file is unchanged
    since, else read."""
    name = str(path)
    found = _checked_digests.get(_stat_key(name, os.stat(name)))
    if found is None:
        found = file_digest(name)
        _remember(name, found)
    return found


def verify_file(path: str | Path, accepted: Collection[str], what: str, remedy: str) -> None:
    """Raise HistoryCorruptError (one line naming the file, saying ``remedy``) unless the
    file's digest is one of ``accepted``. Checked once per process while the file is
    unchanged (``_checked_digests``)."""
    name = str(path)
    try:
        with _open(name) as handle:
            key = _handle_key(name, handle)
            if key is not None and _checked_digests.get(key, "") in accepted:
                return
            digest = _handle_digest(handle)
    except OSError as exc:
        raise HistoryCorruptError(
            f"{what} {name} is missing or unreadable ({exc}). Nothing was changed; {remedy}"
        ) from None
    if digest not in accepted:
        raise HistoryCorruptError(
            f"{what} {name} is corrupt: its {DIGEST} digest is not the one recorded when it "
            f"was written. Nothing was changed; {remedy}"
        )
    if key is None:
        return
    if len(_checked_digests) >= _CHECKED_MAX:
        _checked_digests.clear()
    _checked_digests[key] = digest


def verify_files(checks: list[tuple[str, Collection[str]]], what: str, remedy: str) -> None:
    """``verify_file`` for each (path, accepted digests), hashed on up to one thread a core
    (hashlib lets go of the GIL): a full scan of the history hashed its files in about a
    sixth of the time DuckDB took to aggregate them, on one thread."""
    if len(checks) <= 1:
        for path, accepted in checks:
            verify_file(path, accepted, what, remedy)
        return
    with ThreadPoolExecutor(max_workers=min(len(checks), os.cpu_count() or 1)) as pool:
        for _ in pool.map(lambda check: verify_file(check[0], check[1], what, remedy), checks):
            pass  # the first file that differs raises here, in the history's order


def sidecar_path(path: Path) -> Path:
    """Where the digest of a file no manifest names is kept: ``<name>.sha256`` beside it."""
    return path.with_name(f"{path.name}.{DIGEST}")


@contextlib.contextmanager
def _sidecar_lock(path: Path, *, shared: bool) -> Iterator[None]:
    """The lock a file's sidecar is read (shared) or replaced (exclusive) under. A reader
    creates nothing: where no writer has made the lock file yet (or the folder is
    read-only) it reads without one."""
    try:
        handle = open(path.with_name(f".{path.name}.lock"), "r" if shared else "a+")  # noqa: SIM115
    except OSError:
        yield
        return
    with handle:
        fcntl.flock(handle, fcntl.LOCK_SH if shared else fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def _sidecar_digests(path: Path) -> list[str] | None:
    """The digests a file's sidecar accepts; None if it has none (written before them)."""
    side = sidecar_path(path)
    try:
        data = json.loads(side.read_text())
    except FileNotFoundError:
        return None
    except (OSError, ValueError) as exc:
        raise HistoryCorruptError(
            f"digest file {side} is unreadable ({exc}); restore it with {path.name}"
        ) from None
    digests = data.get(DIGEST) if isinstance(data, dict) else None
    if not isinstance(digests, list) or not all(isinstance(d, str) for d in digests):
        raise HistoryCorruptError(f"digest file {side} is corrupt: it lists no {DIGEST} digest")
    return digests


def _put_sidecar(path: Path, digests: list[str]) -> None:
    durable_write_text(sidecar_path(path), json.dumps({"file": path.name, DIGEST: digests}))


def write_sidecar(tmp: Path, path: Path, digest: str) -> None:
    """Replace ``path`` with the written ``tmp`` (of ``digest``) and its sidecar with it.

    In two steps, so a reader or a crash at any point finds the file's digest listed: the
    sidecar first accepts both the old and the new file, then the rename, then only the
    new one. Under the sidecar's lock (readers hold it shared while they check).
    """
    with _sidecar_lock(path, shared=False):
        try:
            previous = _sidecar_digests(path)
        except HistoryCorruptError:
            previous = None  # the file is being replaced: what it was no longer matters
        if previous is None and path.exists():
            previous = [file_digest(path)]  # a file from before sidecars
        _put_sidecar(path, [*(previous or []), digest])
        durable_rename(tmp, path)
        _put_sidecar(path, [digest])


def verify_sidecar(path: Path, what: str, remedy: str) -> None:
    """Check a file written with ``sidecar=True`` against its sidecar (``verify_file``);
    one written before sidecars (none beside it) is not checked."""
    with _sidecar_lock(path, shared=True):
        accepted = _sidecar_digests(path)
        if accepted is not None:
            verify_file(path, accepted, what, remedy)


def _write_row_groups(tables: Iterable[pa.Table], path: Path, schema: pa.Schema) -> int:
    rows = 0
    pending: list[pa.Table] = []
    with pq.ParquetWriter(path, schema, compression="zstd") as writer:
        for table in tables:
            pending.append(_conform(table, schema))
            if sum(t.num_rows for t in pending) >= COMMIT_BATCH_ROWS:
                group = pa.concat_tables(pending)
                writer.write_table(group, row_group_size=2 * COMMIT_BATCH_ROWS)
                rows += group.num_rows
                pending = []
        if pending:
            group = pa.concat_tables(pending)
            writer.write_table(group, row_group_size=2 * COMMIT_BATCH_ROWS)
            rows += group.num_rows
    return rows


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
