"""A cycle's commit in one pass over buckets of pages, in memory per bucket (issue 19).

The pages are split into buckets by a 64-bit mix of their url_id (``page_hash``, a
bijection, so it orders pages without ties): bucket ``b`` of ``n`` holds the pages whose
hash lies in the ``b``-th of ``n`` equal ranges. Every per-page file this writes (the
cycle's data file, the statistics, the pages' last observations) is in page-hash order,
so a later commit reads the bucket's rows of the previous files as one contiguous run,
sequentially (``SortedRuns``), whatever its own number of buckets. A file in another order
(written before this, or by ``rebuild_stats``) is read whole once per bucket and filtered.

For each bucket, in memory (about ``COMMIT_BUCKET_ROWS`` cycle rows and as many pages):

1. its staged rows (``StagedRows``: the parts appended to one Arrow IPC file, uncompressed),
   its pages' last observations and statistics from the previous files;
2. the rows and the last observations of the cycle's pages sorted by page, prior first,
   time and staging position (numpy), walked by ``tasks.store.link.LinkPass`` as one batch
   (the same walk, hence the same links and Last-Modified judgements, as the streamed
   commit's);
3. the kept rows, linked, appended to the data file; their sums per page
   (``tasks.store.stats``' ``_PAGE_SUMS_SQL`` in numpy: ``page_sums``) added to the
   previous statistics (``add_stats``), the pages' last observations updated
   (``update_last``); both appended to their files.

Each file is written once, by pyarrow, straight from the bucket's arrays: no intermediate
file, no DuckDB pass but the parse of the distinct Last-Modified values. Memory is one
bucket, whatever the cycle's size. What stays with ``tasks.store.history``'s DuckDB path:
replacing a published cycle (its sums are subtracted), a store whose statistics lack the
age sums, and a cycle whose observations are not later than the pages' previous ones
(statistics recomputed from the history); the data file and the last observations are this
module's there too.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.outcomes import OBSERVED, sql_list
from models.schemas import HISTORY_SCHEMA, PAGE_STATS_FILE_SCHEMA
from tasks.store.link import FIRST_WEB_DAY, LM_DAYS_MACRO, PRIOR_OUTCOME, LinkCounts, LinkPass

#: The manifest's ``order`` of a file in page-hash order (``page_hash``).
PAGE_HASH_ORDER = "page_hash"

#: The pages' last observations (``tasks.store.link.LAST_COLUMNS``) as this writes them.
LAST_SCHEMA = pa.schema(
    [
        pa.field("url_id", pa.int64()),
        pa.field("last_at", HISTORY_SCHEMA.field("fetched_at").type),
        pa.field("hash_at", HISTORY_SCHEMA.field("fetched_at").type),
        pa.field("record_hash", pa.string()),
        pa.field("lm_at", HISTORY_SCHEMA.field("fetched_at").type),
        pa.field("last_lm", pa.float64()),
    ]
)

#: Columns of the data file that few values fill (dictionary-encoded); the others are
#: written plain: ids, times, hashes and measurements rarely repeat, and trying a
#: dictionary on them first costs time for nothing.
DICTIONARY_COLUMNS = ["host", "outcome", "status", "last_modified", "reason", "warc_file"]
#: The statistics' codec: their 20 numeric columns took 0.40 s of CPU a million pages with
#: zstd, 0.18 s with LZ4 (14 and 19 MB); they are rewritten whole at every commit.
STATS_COMPRESSION = "lz4"
#: The last observations' codec: like the statistics, read and rewritten whole at every
#: commit; bench_commit's million pages: written in 0.121 s of user CPU with zstd, 0.084 s
#: with LZ4, read in 0.056 and 0.034 s (34 and 50 MB: the record hashes barely compress).
LAST_COMPRESSION = "lz4"
#: The data file's columns with min/max statistics: not the strings. The file is written
#: by ranges of the page hash, so a row group's hosts, outcomes or hashes span nearly all
#: of them and prune nothing; their statistics cost 0.03 s of a million rows' 0.28 s of
#: user CPU to write. The per-page files (statistics, last observations), in page-hash
#: order, read whole at every commit, get none.
DATA_STATISTICS = [f.name for f in HISTORY_SCHEMA if not pa.types.is_string(f.type)]

_OBSERVED = pa.array(sql_list(OBSERVED))
_NO_TIME = np.iinfo(np.int64).min  # a NULL time in the int64 arrays below
_M1, _M2 = np.uint64(0xBF58476D1CE4E5B9), np.uint64(0x94D049BB133111EB)


def page_hash(url_id: np.ndarray) -> np.ndarray:
    """The splitmix64 finalizer of each url_id (a bijection of 64-bit values), as uint64."""
    z = url_id.astype(np.int64).view(np.uint64)
    with np.errstate(over="ignore"):
        z = (z ^ (z >> np.uint64(30))) * _M1
        z = (z ^ (z >> np.uint64(27))) * _M2
    return np.asarray(z ^ (z >> np.uint64(31)))


def bucket_of(hashes: np.ndarray, buckets: int) -> np.ndarray:
    """The bucket (of ``buckets`` equal ranges of the hash) of each page hash: increasing
    with the hash, so a file in hash order is in bucket order for any ``buckets``."""
    return np.asarray(((hashes >> np.uint64(32)) * np.uint64(buckets)) >> np.uint64(32))


def _bucket_rows(table: pa.Table, bucket: int, buckets: int) -> pa.Table:
    if buckets == 1 or table.num_rows == 0:
        return table
    which = bucket_of(page_hash(table["url_id"].to_numpy()), buckets)
    return table.filter(pa.array(which == bucket))


# ---------------------------------------------------------------------- inputs


class StagedRows:
    """A cycle's validated parts, held in memory up to ``memory_bytes`` and beyond that
    appended to one Arrow IPC file (scratch: no fsync).

    Writing the staged rows to the file and mapping them back is system CPU (page cache
    copies and faults): bench_commit's million-row cycle (210 MB staged), its 500 parts
    read, staged and read back in four buckets, took 0.62 s of system and 0.71 s of user
    CPU so, 0.19 and 0.77 s held (medians of 5 alternating runs, load 11). A cycle whose
    staged rows fit the budget never writes the file; a larger one writes what it held
    and every later batch to it, so memory stays bounded by the budget.

    Each part is stored sorted by page hash (stably: a page's rows keep their staging
    order), with the hash as an extra column, so a bucket's rows of a part are one slice.
    Parts are held until they make ``batch_rows`` rows and then written as one record
    batch (each part's rows still sorted on their own, in staging order; where each part
    starts is kept): the sort's copy and the write cost a few calls a batch, not a part
    (issue 19: bench_commit's 500 parts of 2,000 rows staged in 0.53-0.64 s of CPU one
    batch a part, 0.33-0.41 s so, and read in four buckets in 0.32-0.70 s, 0.17-0.62 s so;
    8 alternating runs in one process, load 7). The file is complete once ``close`` has
    written the rest.
    """

    def __init__(self, path: Path, batch_rows: int = 65_536, memory_bytes: int = 0) -> None:
        self.path = path
        self.rows = 0
        self.batch_rows = batch_rows
        self.memory_bytes = memory_bytes
        #: the written batches while they fit ``memory_bytes`` (none once the file is open)
        self._held: list[pa.RecordBatch] = []
        self._held_bytes = 0
        self._sink: pa.OSFile | None = None
        self._writer: pa.ipc.RecordBatchFileWriter | None = None
        self._pending: list[tuple[pa.Table, np.ndarray]] = []  # parts and their hashes
        self._pending_rows = 0
        self._buckets: list[Path] = []  # the rows split by bucket (``partition``)
        #: each written batch's parts (those with rows): their first rows in the batch
        self._part_starts: list[np.ndarray] = []

    def append(self, table: pa.Table) -> None:
        self._pending.append((table, page_hash(table["url_id"].to_numpy())))
        self._pending_rows += table.num_rows
        self.rows += table.num_rows
        if self._pending_rows >= self.batch_rows:
            self._flush()

    def _flush(self) -> None:
        """Write the held parts as one batch, each part's rows sorted by page hash."""
        pending, self._pending, self._pending_rows = self._pending, [], 0
        orders, hashes, start = [], [], 0
        for table, part_hashes in pending:
            order = np.argsort(part_hashes, kind="stable")
            orders.append(order + start)
            hashes.append(part_hashes[order])
            start += table.num_rows
        tables = [table for table, _ in pending]
        rows = pa.concat_tables(tables) if len(tables) > 1 else tables[0]
        order = np.concatenate(orders)
        rows = rows.take(pa.array(order)).append_column(_HASH, pa.array(np.concatenate(hashes)))
        if rows.num_rows == 0:
            return
        # one record batch a flush: ``bucket`` finds the batch's parts by its index
        self._keep(rows.combine_chunks().to_batches()[0])
        sizes = np.array([table.num_rows for table in tables])
        self._part_starts.append((np.cumsum(sizes) - sizes)[sizes > 0])

    def _keep(self, batch: pa.RecordBatch) -> None:
        """Hold a written batch in memory while the held ones fit the budget; past it,
        write them and every later one to the file."""
        if self._writer is None and self._held_bytes + batch.nbytes <= self.memory_bytes:
            self._held.append(batch)
            self._held_bytes += batch.nbytes
            return
        if self._writer is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._sink = pa.OSFile(str(self.path), "wb")
            self._writer = pa.ipc.new_file(self._sink, _STAGED_SCHEMA)
            held, self._held, self._held_bytes = self._held, [], 0
            for earlier in held:
                self._writer.write_batch(earlier)
        self._writer.write_batch(batch)

    def close(self) -> None:
        """Write the held parts and complete the file."""
        if self._pending:
            self._flush()
        writer, sink = self._writer, self._sink
        self._writer = self._sink = None
        try:
            if writer is not None:
                writer.close()
        finally:
            if sink is not None:
                sink.close()

    def discard(self) -> None:
        """Close without completing the file (it is being removed): a full disk that failed
        the commit must not fail this too."""
        self._pending, self._pending_rows = [], 0
        self._held, self._held_bytes = [], 0
        with contextlib.suppress(OSError, pa.ArrowException):
            self.close()

    def batches(self) -> Iterator[pa.RecordBatch]:
        """The staged parts in staging order (each in page-hash order, without the hash),
        a batch of parts at a time (``_staged_batches``)."""
        for batch in self._staged_batches():
            yield batch.drop_columns([_HASH])

    def _staged_batches(self) -> Iterator[pa.RecordBatch]:
        """The staged batches, memory-mapped: a batch is the file's pages, not a copy, so
        taking a bucket's rows of every batch copies only those rows (Arrow allocates one
        bucket, not a batch more; reading each part and copying its slice cost twice the
        CPU at a million rows); the held batches where the file was never written."""
        self.close()
        if self._held:
            yield from self._held
            return
        if not self.path.exists():
            return
        with pa.memory_map(str(self.path), "r") as source:
            reader = pa.ipc.open_file(source)
            for index in range(reader.num_record_batches):
                yield reader.get_batch(index)

    def partition(self, buckets: int) -> None:
        """Split the staged rows into one IPC file per bucket (one more write and read of
        them), so each bucket reads its own rows only: with more than
        ``PARTITION_ABOVE`` buckets, reading every part once per bucket would cost more."""
        if buckets <= PARTITION_ABOVE or self._buckets:
            return
        paths = [self.path.with_name(f"bucket-{b:05d}.arrow") for b in range(buckets)]
        with contextlib.ExitStack() as stack:
            writers = []
            for path in paths:
                sink = stack.enter_context(pa.OSFile(str(path), "wb"))
                writers.append(stack.enter_context(pa.ipc.new_file(sink, _STAGED_SCHEMA)))
            for batch in self._staged_batches():
                which = bucket_of(batch.column(_HASH).to_numpy(), buckets)
                # by bucket, stably: each part's rows stay in page-hash order, the parts
                # in staging order
                order = np.argsort(which, kind="stable")
                grouped = batch.take(pa.array(order))
                bounds = np.searchsorted(which[order], np.arange(buckets + 1))
                for b in np.flatnonzero(np.diff(bounds)):
                    writers[b].write_batch(grouped.slice(bounds[b], bounds[b + 1] - bounds[b]))
        self._buckets = paths
        self._held, self._held_bytes = [], 0  # the bucket files hold them now

    def bucket(self, bucket: int, buckets: int) -> tuple[pa.Table, np.ndarray]:
        """The staged rows of one bucket's pages (a page's rows in staging order) and
        their page hashes."""
        if self._buckets:
            assert len(self._buckets) == buckets
            table = _read_ipc(self._buckets[bucket]).combine_chunks()
            self._buckets[bucket].unlink()
            return table.drop_columns([_HASH]), table[_HASH].to_numpy()
        pieces = []
        for index, batch in enumerate(self._staged_batches()):
            if buckets == 1:
                pieces.append(batch)
                continue
            # a batch holds several parts, each in page-hash order: the bucket's rows are a
            # run of each part, sliced out of the mapped file (the one copy is below)
            starts = self._part_starts[index]
            which = bucket_of(batch.column(_HASH).to_numpy(), buckets)
            low = starts + np.add.reduceat(which < bucket, starts, dtype=np.int64)
            high = starts + np.add.reduceat(which <= bucket, starts, dtype=np.int64)
            for start, end in zip(low.tolist(), high.tolist(), strict=True):
                if end > start:
                    pieces.append(batch.slice(start, end - start))
        if not pieces:
            return HISTORY_SCHEMA.empty_table(), np.zeros(0, dtype=np.uint64)
        table = pa.Table.from_batches(pieces, schema=_STAGED_SCHEMA).combine_chunks()
        hashes = table[_HASH].to_numpy()
        return table.drop_columns([_HASH]), hashes


_HASH = "_page_hash"
_STAGED_SCHEMA = HISTORY_SCHEMA.append(pa.field(_HASH, pa.uint64()))
#: Above this many buckets the staged rows are first split by bucket (``partition``).
PARTITION_ABOVE = 4


def _read_ipc(path: Path) -> pa.Table:
    """An IPC file's batches, memory-mapped (the caller's ``combine_chunks`` is the copy)."""
    with pa.memory_map(str(path), "r") as source:
        reader = pa.ipc.open_file(source)
        return pa.Table.from_batches(
            [reader.get_batch(i) for i in range(reader.num_record_batches)],
            schema=_STAGED_SCHEMA,
        )


class SortedRuns:
    """The rows of a per-page Parquet file, bucket by bucket (``bucket`` called with
    increasing buckets), each sorted by page hash: a file in page-hash order is read once,
    sequentially; another is read and filtered at each bucket."""

    def __init__(
        self, path: str | None, schema: pa.Schema, *, in_hash_order: bool, batch_rows: int
    ) -> None:
        self.path, self.schema, self.in_hash_order = path, schema, in_hash_order
        self.batch_rows = batch_rows
        self._batches: Iterator[pa.RecordBatch] | None = None
        self._held: pa.Table | None = None

    def bucket(self, bucket: int, buckets: int) -> pa.Table:
        if self.path is None:
            return self.schema.empty_table()
        if not self.in_hash_order:
            reader = pq.ParquetFile(self.path).iter_batches(
                batch_size=self.batch_rows, columns=self.schema.names
            )
            table = pa.concat_tables(
                [_bucket_rows(pa.Table.from_batches([b]), bucket, buckets) for b in reader]
                or [self.schema.empty_table()]
            )
            order = np.argsort(page_hash(table["url_id"].to_numpy()), kind="stable")
            return table.take(pa.array(order)).cast(self.schema)
        if self._batches is None:
            self._batches = pq.ParquetFile(self.path).iter_batches(
                batch_size=self.batch_rows, columns=self.schema.names
            )
        pieces: list[pa.Table] = []
        while True:
            if self._held is None:
                batch = next(self._batches, None)
                if batch is None:
                    break
                self._held = pa.Table.from_batches([batch])
            which = bucket_of(page_hash(self._held["url_id"].to_numpy()), buckets)
            cut = int(np.searchsorted(which, bucket, side="right"))
            pieces.append(self._held.slice(0, cut))
            if cut < self._held.num_rows:
                self._held = self._held.slice(cut)
                break
            self._held = None
        if not pieces:
            return self.schema.empty_table()
        return pa.concat_tables(pieces).combine_chunks().cast(self.schema)


# ---------------------------------------------------------------------- one bucket


def _times(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    """A timestamp column as int64 microseconds, NULL as ``_NO_TIME``."""
    return np.asarray(column.cast(pa.int64()).fill_null(_NO_TIME).to_numpy(zero_copy_only=False))


def _floats(column: pa.ChunkedArray | pa.Array) -> np.ndarray:
    return np.asarray(column.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False))


def _bools(column: pa.ChunkedArray | pa.Array, null: bool = False) -> np.ndarray:
    return np.asarray(column.fill_null(null).to_numpy(zero_copy_only=False), dtype=bool)


def last_modified_days(con: duckdb.DuckDBPyConnection, column: pa.ChunkedArray) -> np.ndarray:
    """``lm_days`` (``tasks.store.link.LM_DAYS_MACRO``) of each raw Last-Modified, NaN for
    none: DuckDB parses the distinct values once each."""
    encoded = pc.dictionary_encode(column).combine_chunks()
    values = encoded.dictionary
    if len(values) == 0:
        return np.full(len(column), np.nan)
    con.execute(LM_DAYS_MACRO)
    con.register("lm_values", pa.table({"i": np.arange(len(values)), "v": values}))
    parsed = con.sql("SELECT i, lm_days(v) AS d FROM lm_values").to_arrow_table()
    con.unregister("lm_values")
    days = np.full(len(values), np.nan)
    days[parsed["i"].to_numpy()] = _floats(parsed["d"])
    codes = encoded.indices.fill_null(-1).to_numpy(zero_copy_only=False)
    return np.where(codes >= 0, days[np.maximum(codes, 0)], np.nan)


@dataclass(frozen=True)
class BucketOutput:
    """What one bucket adds to the three files."""

    rows: pa.Table  # the kept rows, linked (HISTORY_SCHEMA; a page's rows in staging order)
    stats: pa.Table  # the statistics of the bucket's pages (PAGE_STATS_FILE_SCHEMA)
    last: pa.Table  # the last observations of the bucket's pages (LAST_SCHEMA)


@dataclass(frozen=True)
class KeptRows:
    """The kept rows of a bucket in walk order (by page hash, then time), as arrays."""

    staged: np.ndarray  # each row's index in the bucket's staged rows
    url: np.ndarray
    at: np.ndarray  # microseconds
    observed: np.ndarray
    lm: np.ndarray  # Last-Modified in days, NaN for none
    changed: pa.Array  # the row's changed / interval_days as published
    interval: pa.Array


def _contains(sorted_values: np.ndarray, values: np.ndarray) -> np.ndarray:
    """Whether each of ``values`` is in ``sorted_values`` (ascending)."""
    if len(sorted_values) == 0:
        return np.zeros(len(values), dtype=bool)
    at = np.minimum(np.searchsorted(sorted_values, values), len(sorted_values) - 1)
    return np.asarray(sorted_values[at] == values)


def _union(a: np.ndarray, b: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """The ascending union of two ascending arrays of distinct values, and where each
    value of ``a`` and of ``b`` is in it (one search of ``b`` in ``a``; the positions are
    counted from it, not searched for in the union: two fewer searches of a million)."""
    at = np.searchsorted(a, b)
    found = at < len(a)
    found[found] = a[at[found]] == b[found]
    new = ~found
    inserted = at[new]  # each new value goes before a[inserted]
    # a[i] moves up by the new values inserted before it, at or below i
    into_a = np.arange(len(a)) + np.cumsum(np.bincount(inserted, minlength=len(a) + 1))[: len(a)]
    into_b = np.empty(len(b), dtype=np.int64)
    into_b[new] = inserted + np.arange(len(inserted))  # the k-th new one: k new ones before
    into_b[found] = into_a[at[found]]
    return np.insert(a, inserted, b[new]), into_a, into_b


def walk_order(keys: np.ndarray, times: np.ndarray) -> np.ndarray:
    """``np.lexsort((times, keys))``: the rows by key, then time, then index (stably).

    A stable sort by key alone, then only the pages whose rows it leaves out of time order
    sorted again (few: a page has its prior row, earliest, and one row a cycle but where a
    fetch was retried). The keys come in long ascending runs (the prior rows, each part's
    rows), which the stable sort (timsort) merges: a bucket
    of bench_commit's million-row cycle (250,000 pages, 500,000 rows with the prior ones)
    took 19-21 ms of CPU against lexsort's 53-55 (7 alternating runs, load 6).
    """
    order = np.argsort(keys, kind="stable")
    if len(order) < 2:
        return order
    ordered = keys[order]
    same = ordered[1:] == ordered[:-1]  # row i + 1 is of row i's page
    t = times[order]
    descent = same & (t[1:] < t[:-1])
    if not descent.any():
        return order
    page = np.concatenate([[0], np.cumsum(~same)])
    unsorted = np.zeros(int(page[-1]) + 1, dtype=bool)
    unsorted[page[1:][descent]] = True
    rows = np.flatnonzero(unsorted[page])
    order[rows] = order[rows[np.lexsort((t[rows], page[rows]))]]
    return order


def commit_bucket(
    con: duckdb.DuckDBPyConnection,
    walk: LinkPass,
    staged: pa.Table,
    hashes: np.ndarray,
    last: pa.Table,
    stats: pa.Table,
    *,
    link: bool,
) -> BucketOutput:
    """Link one bucket's staged rows (their page ``hashes``) against its pages' last
    observations ``last``, and update ``last`` and the statistics ``stats`` (both in
    page-hash order) with them."""
    at = _times(staged["fetched_at"])
    lm = last_modified_days(con, staged["last_modified"])
    last_hash = page_hash(last["url_id"].to_numpy())
    seen = _contains(np.sort(hashes), last_hash)  # prior rows of the cycle's pages only
    prior = last.filter(pa.array(seen))
    m = prior.num_rows
    # prior rows first in their page (the earliest time), then by time; ties (copies of
    # one observation) in staging order (``walk_order``: lexsort's order)
    first = np.full(m, _NO_TIME)
    order = walk_order(np.concatenate([last_hash[seen], hashes]), np.concatenate([first, at]))
    take = pa.array(order)

    def both(prior_column: pa.Array, staged_column: pa.ChunkedArray) -> pa.Array:
        return pa.concat_arrays([prior_column, staged_column.combine_chunks()]).take(take)

    batch = pa.RecordBatch.from_arrays(
        [
            both(prior["url_id"].combine_chunks(), staged["url_id"]),
            pa.array(order >= m),
            both(prior["last_at"].combine_chunks(), staged["fetched_at"]),
            pa.array(order - m, pa.int64()),  # the staged row (negative: a prior row)
            both(pa.repeat(pa.scalar(PRIOR_OUTCOME, pa.string()), m), staged["outcome"]),
            both(prior["record_hash"].combine_chunks(), staged["record_hash"]),
            both(pa.nulls(m, pa.bool_()), staged["changed"]),
            both(pa.nulls(m, pa.float64()), staged["interval_days"]),
            pa.array(np.concatenate([_floats(prior["last_lm"]), lm])[order]),
        ],
        names=[
            "url_id",
            "in_cycle",
            "fetched_at",
            "pos",
            "outcome",
            "record_hash",
            "given_changed",
            "given_interval",
            "lm",
        ],
    )
    linked, ages = walk.step(batch)
    pos = linked["pos"].to_numpy()
    if link:
        changed, interval = linked["changed"], linked["interval_days"]
    else:
        changed = staged["changed"].combine_chunks().take(pa.array(pos))
        interval = staged["interval_days"].combine_chunks().take(pa.array(pos))
    observed = _bools(pc.is_in(staged["outcome"], _OBSERVED))
    url = staged["url_id"].to_numpy()
    kept = KeptRows(pos, url[pos], at[pos], observed[pos], lm[pos], changed, interval)
    return BucketOutput(
        _published_rows(staged, kept, link=link),
        add_stats(stats, page_sums(kept, staged, ages)),
        update_last(last, kept, staged),
    )


def _published_rows(staged: pa.Table, kept: KeptRows, *, link: bool) -> pa.Table:
    """The kept rows in staging order, with their links if ``link``."""
    in_order = np.argsort(kept.staged, kind="stable")
    rows = staged if len(in_order) == staged.num_rows else staged.take(kept.staged[in_order])
    if link:
        take = pa.array(in_order)
        for name, values in (("changed", kept.changed), ("interval_days", kept.interval)):
            rows = rows.set_column(rows.schema.get_field_index(name), name, values.take(take))
    return rows


# ---------------------------------------------------------------------- sums


_INTS = {f.name for f in PAGE_STATS_FILE_SCHEMA if pa.types.is_integer(f.type)}


def page_sums(kept: KeptRows, staged: pa.Table, ages: pa.Table) -> pa.Table:
    """``tasks.store.stats.rows_sums`` of the kept rows and their judgements
    (``AGES_SCHEMA``, in walk order): one row per page with a linked interval or an
    observation, in page-hash order; the host is the page's first such row's."""
    interval = _floats(kept.interval)
    linked = ~np.isnan(interval) & _bools(kept.changed.is_valid())
    counted = linked | kept.observed
    url = kept.url[counted]
    if len(url) == 0:
        return PAGE_STATS_FILE_SCHEMA.empty_table()
    first = np.concatenate([[True], url[1:] != url[:-1]])
    page = np.cumsum(first) - 1
    pages = int(page[-1]) + 1
    linked, interval = linked[counted], np.where(linked, interval, 0.0)[counted]
    c = _bools(kept.changed)[counted] & linked
    tc = np.where(c, interval, 0.0)

    def total(values: np.ndarray) -> np.ndarray:
        return np.bincount(page, weights=values, minlength=pages)

    def count(where: np.ndarray) -> np.ndarray:
        return np.bincount(page[where], minlength=pages).astype(np.int64)

    hosts = staged["host"].combine_chunks().take(pa.array(kept.staged[counted][first]))
    columns: dict[str, np.ndarray | pa.Array] = {
        "url_id": url[first],
        "host": hosts,
        "n_intervals": count(linked),
        "n_changed": count(c),
        "unchanged_days": total(interval) - total(tc),
        "changed_sum": total(tc),
        "changed_sum_sq": total(tc * tc),
        "changed_sum_cube": total(tc * tc * tc),
    }
    judged = ages["url_id"].to_numpy()
    at = np.searchsorted(page_hash(url[first]), page_hash(judged))
    code = ages["code"].to_numpy()
    t = ages["t"].to_numpy()

    def age_total(values: np.ndarray) -> np.ndarray:
        return np.bincount(at, weights=values, minlength=pages)

    def age_count(where: np.ndarray) -> np.ndarray:
        return np.bincount(at[where], minlength=pages).astype(np.int64)

    columns |= {
        "age_terms": age_count(_bools(ages["aged"])),
        "age_count": age_count(_bools(ages["dated"])),
        "age_days": age_total(ages["age"].to_numpy()),
        "age_n_changed": age_count(_bools(ages["hit"])),
        "age_changed_sum": age_total(t),
        "age_changed_sum_sq": age_total(t * t),
        "age_changed_sum_cube": age_total(t * t * t),
    }
    for value, name in enumerate(PAGE_STATS_FILE_SCHEMA.names[-6:]):
        columns[name] = age_count(code == value)
    return pa.table(columns, schema=PAGE_STATS_FILE_SCHEMA)


def add_stats(base: pa.Table, added: pa.Table) -> pa.Table:
    """``tasks.store.stats``' ``_ADDED_SQL``: ``base + added`` column by column over the
    pages of either (the base's host first), without pages that have nothing; both and
    the result in page-hash order."""
    base_hash = page_hash(base["url_id"].to_numpy())
    every, into_base, into_added = _union(base_hash, page_hash(added["url_id"].to_numpy()))
    pages = len(every)
    columns: dict[str, np.ndarray | pa.Array] = {}
    ids = np.zeros(pages, dtype=np.int64)
    ids[into_added] = added["url_id"].to_numpy()
    ids[into_base] = base["url_id"].to_numpy()
    columns["url_id"] = ids
    source = np.zeros(pages, dtype=np.int64)
    source[into_added] = np.arange(added.num_rows) + base.num_rows
    source[into_base] = np.arange(base.num_rows)
    hosts = pa.concat_arrays([base["host"].combine_chunks(), added["host"].combine_chunks()])
    columns["host"] = hosts.take(pa.array(source))
    for field in PAGE_STATS_FILE_SCHEMA:
        if field.name in ("url_id", "host"):
            continue
        kind = np.int64 if field.name in _INTS else np.float64
        total = np.zeros(pages, dtype=kind)
        total[into_base] = base[field.name].to_numpy()
        total[into_added] += added[field.name].to_numpy()  # distinct pages: no lost adds
        columns[field.name] = total
    evidence = sum(np.asarray(columns[name]) for name in PAGE_STATS_FILE_SCHEMA.names[-6:])
    keep = (np.asarray(columns["n_intervals"]) > 0) | (np.asarray(evidence) > 0)
    table = pa.table(columns, schema=PAGE_STATS_FILE_SCHEMA)
    return table if keep.all() else table.filter(pa.array(keep))


def _last_rows(url: np.ndarray, where: np.ndarray) -> np.ndarray:
    """Indices of the last row of each page among the rows ``where`` (rows grouped by
    page, in time order within it)."""
    index = np.flatnonzero(where)
    if len(index) == 0:
        return index
    chosen = url[index]
    final = np.concatenate([chosen[1:] != chosen[:-1], [True]])
    return np.asarray(index[final])


def _latest(
    pages: int,
    into_old: np.ndarray,
    old_at: np.ndarray,
    old_value: pa.Array,
    into_new: np.ndarray,
    new_at: np.ndarray,
    new_value: pa.Array,
) -> tuple[np.ndarray, pa.Array]:
    """Per page: the later of the old (time, value) and the new one (the new one on a
    tie), NULL time and value where neither has one."""
    at = np.full(pages, _NO_TIME, dtype=np.int64)
    source = np.full(pages, -1, dtype=np.int64)
    at[into_old] = old_at
    source[into_old] = np.where(old_at != _NO_TIME, np.arange(len(old_at)), -1)
    later = new_at >= at[into_new]
    at[into_new[later]] = new_at[later]
    source[into_new[later]] = np.flatnonzero(later) + len(old_at)
    values = pa.concat_arrays([old_value, new_value])
    return at, values.take(pa.array(source, mask=source < 0))


def update_last(last: pa.Table, kept: KeptRows, staged: pa.Table) -> pa.Table:
    """``tasks.store.link``'s ``_UPDATED_STATE_SQL``: each page's last observation, last
    hashed observation and last Last-Modified over ``last`` and the kept rows; in
    page-hash order."""
    obs = _last_rows(kept.url, kept.observed)
    old_hash = page_hash(last["url_id"].to_numpy())
    every, into_old, into_new = _union(old_hash, page_hash(kept.url[obs]))
    pages = len(every)
    ids = np.zeros(pages, dtype=np.int64)
    ids[into_new] = kept.url[obs]
    ids[into_old] = last["url_id"].to_numpy()
    last_at = np.full(pages, _NO_TIME, dtype=np.int64)
    last_at[into_old] = _times(last["last_at"])
    last_at[into_new] = np.maximum(last_at[into_new], kept.at[obs])

    staged_hash = staged["record_hash"].combine_chunks()
    has_hash = _bools(staged_hash.is_valid())[kept.staged]
    hashed = _last_rows(kept.url, kept.observed & has_hash)
    hash_at, record_hash = _latest(
        pages,
        into_old,
        _times(last["hash_at"]),
        last["record_hash"].combine_chunks(),
        np.searchsorted(every, page_hash(kept.url[hashed])),
        kept.at[hashed],
        staged_hash.take(pa.array(kept.staged[hashed])),
    )
    dated = _last_rows(kept.url, kept.observed & (kept.lm >= FIRST_WEB_DAY))
    lm_at, last_lm = _latest(
        pages,
        into_old,
        _times(last["lm_at"]),
        last["last_lm"].combine_chunks(),
        np.searchsorted(every, page_hash(kept.url[dated])),
        kept.at[dated],
        pa.array(kept.lm[dated], pa.float64()),
    )
    time_type = LAST_SCHEMA.field("last_at").type

    def times(values: np.ndarray) -> pa.Array:
        return pa.array(values, pa.int64(), mask=values == _NO_TIME).cast(time_type)

    return pa.Table.from_arrays(
        [pa.array(ids), times(last_at), times(hash_at), record_hash, times(lm_at), last_lm],
        schema=LAST_SCHEMA,
    )


# ---------------------------------------------------------------------- the pass


@dataclass(frozen=True)
class BucketPaths:
    """Where the pass writes: the data file, the statistics (None: not written, they are
    recomputed elsewhere) and the last observations (all temporary names)."""

    rows: Path
    stats: Path | None
    last: Path


def commit_in_buckets(
    con: duckdb.DuckDBPyConnection,
    staged: StagedRows,
    last: SortedRuns,
    stats: SortedRuns,
    paths: BucketPaths,
    *,
    buckets: int,
    link: bool,
    row_group_rows: int,
) -> LinkCounts:
    """Write the three files bucket by bucket (see the module docstring); return the
    walk's counts (a caller refuses backward intervals and acts on unordered ones)."""
    walk = LinkPass(given_links=not link)
    with (
        pq.ParquetWriter(
            paths.rows,
            HISTORY_SCHEMA,
            use_dictionary=DICTIONARY_COLUMNS,
            compression="zstd",
            write_statistics=DATA_STATISTICS,
        ) as rows_out,
        pq.ParquetWriter(
            paths.last,
            LAST_SCHEMA,
            use_dictionary=False,
            compression=LAST_COMPRESSION,
            write_statistics=False,
        ) as last_out,
    ):
        stats_out = (
            pq.ParquetWriter(
                paths.stats,
                PAGE_STATS_FILE_SCHEMA,
                use_dictionary=["host"],
                compression=STATS_COMPRESSION,
                write_statistics=False,
            )
            if paths.stats is not None
            else None
        )
        try:
            staged.partition(buckets)
            for bucket in range(buckets):
                rows, hashes = staged.bucket(bucket, buckets)
                out = commit_bucket(
                    con,
                    walk,
                    rows,
                    hashes,
                    last.bucket(bucket, buckets),
                    stats.bucket(bucket, buckets) if stats_out is not None else _NO_STATS,
                    link=link,
                )
                rows_out.write_table(out.rows, row_group_size=row_group_rows)
                last_out.write_table(out.last, row_group_size=row_group_rows)
                if stats_out is not None:
                    stats_out.write_table(out.stats, row_group_size=row_group_rows)
        finally:
            if stats_out is not None:
                stats_out.close()
    return walk.counts()


_NO_STATS = PAGE_STATS_FILE_SCHEMA.empty_table()
