"""A cycle's rows linked to each page's previous observation, in bounded memory.

At commit every observation gets ``changed`` and ``interval_days`` against the page's
previous observation, and a (url_id, fetched_at) staged twice counts once. Doing that on
the cycle as Arrow tables costs about 1.5 KB a row, so a cycle of 10 million pages would
need gigabytes. Here nothing holds the cycle:

The pages are split into buckets by a hash of their url_id (about ``bucket_rows`` keys
each) and linked one bucket at a time, since the memory a DuckDB sort needs grows with its
input (it keeps a buffer per sorted run while it merges). For each bucket:

1. DuckDB writes each page's last observation in the published history to
   ``prior-<bucket>.parquet``: its time, and the hash of the page's last observation that
   has one (an aggregate of fixed-size states, then a join: both spill);
2. DuckDB sorts a narrow projection of the staged rows (``KEY_COLUMNS`` and the row's
   position: part index and row number) together with those prior observations by page,
   prior before cycle, time and position; ``LinkPass`` walks that stream once, a record
   batch at a time, carrying one page's state across batches, and writes position,
   ``changed`` and ``interval_days`` of every kept row to ``linked.parquet``;
3. ``linked_in_staged_order`` reads that back sorted by position, a range of positions
   at a time, so ``merge_rows`` can merge it with the staged parts read one batch at a
   time.

Each DuckDB query has one blocking operator: on DuckDB 2.0 several in one query (window,
join, aggregate, sort) must all fit the memory limit at once and fail with an
out-of-memory error where each alone spills. A window per page (the obvious SQL) was
also several times slower once spilling.

The same walk judges each observation's Last-Modified (``models.fetching.validators.
judge_last_modified``) against the page's previous observation and the last Last-Modified
among its earlier ones (the prior rows carry the history's, step 1), and writes the
judgements to ``ages.parquet``: summed per page, they are the statistics' age columns
(``tasks.store.stats``). Rebuilding them walks the whole history the same way, with no
prior rows and the rows' own ``changed``/``interval_days``. An observation not later than
the page's previous one is counted (``LinkCounts.unordered``): the history's order then
differs from the order of the commits, and the caller recomputes the ages from scratch.

The rules are the ones the store always applied: the first staged copy of a
(url_id, fetched_at) is kept; a row's previous observation is the page's last ``ok`` or
``not_modified`` before it (the history's last one precedes all of the cycle's, even when
it is later: that shows up as a backward interval, which the commit refuses; its hash is
the history's last non-NULL one); a 304 is unchanged, else the fetcher's flag, else the
record hashes compared; no previous observation or no observation: ``changed`` and
``interval_days`` NULL.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.fetching.validators import judge_last_modified
from models.outcomes import OBSERVED, sql_list
from models.schemas import HISTORY_SCHEMA

#: Bits of a row's position below the part index (a part of up to 2**40 rows).
PART_SHIFT = 40
#: Staged columns the link needs; the rest of a row is only read when it is written out.
KEY_COLUMNS = (
    "url_id",
    "fetched_at",
    "outcome",
    "record_hash",
    "changed",
    "interval_days",
    "last_modified",
)
DAY_US = 86_400e6

LINKED_SCHEMA = pa.schema(
    [
        pa.field("pos", pa.int64(), nullable=False),
        pa.field("changed", pa.bool_()),
        pa.field("interval_days", pa.float64()),
    ]
)

#: One judged observation: its page, the evidence code, and what it adds to the page's age
#: sums (``age`` and ``t``, the changed interval, are 0 where it adds nothing).
AGES_SCHEMA = pa.schema(
    [
        pa.field("url_id", pa.int64(), nullable=False),
        pa.field("code", pa.int8(), nullable=False),
        pa.field("aged", pa.bool_(), nullable=False),
        pa.field("dated", pa.bool_(), nullable=False),
        pa.field("age", pa.float64(), nullable=False),
        pa.field("hit", pa.bool_(), nullable=False),
        pa.field("t", pa.float64(), nullable=False),
    ]
)

# The queries spell out PART_SHIFT (no SQL is built from strings) and bind the outcome
# classes (``OUTCOME_PARAMS``).
assert PART_SHIFT == 40
#: The outcome a page's last prior observation walks with: an observation (``OBSERVED``).
PRIOR_OUTCOME = "ok"
assert PRIOR_OUTCOME in OBSERVED
#: The outcome parameters of the queries below.
OUTCOME_PARAMS: dict[str, object] = {"observed": sql_list(OBSERVED)}

#: ``lm_days(header)``: a raw Last-Modified in days since the epoch, parsed as RFC 9110
#: section 5.6.7 says (the IMF-fixdate and the two obsolete forms a recipient must accept;
#: anything else is NULL). A date before ``FIRST_WEB_DAY`` is no date either: the queries
#: and ``LinkPass`` drop it.
LM_DAYS_MACRO = """
CREATE OR REPLACE TEMP MACRO lm_days(header) AS epoch_us(try_strptime(trim(header), [
    '%a, %d %b %Y %H:%M:%S GMT', '%A, %d-%b-%y %H:%M:%S GMT', '%a %b %d %H:%M:%S %Y'
])) / 86400e6
"""
#: 1991-01-01 in days since the epoch (the queries spell it out).
FIRST_WEB_DAY = 7670.0

# The page's last observation time, the time of its last observation with a record hash
# (the old ``arg_max(record_hash, fetched_at)``, which skips NULL hashes: after a 304 the
# cycle's first observation is compared with the last hash seen), and its last parsed
# Last-Modified (in days; a fixed-size state, like the others).
_PRIOR_LAST_SQL = """
SELECT url_id, max(fetched_at) AS last_at,
       max(fetched_at) FILTER (WHERE record_hash IS NOT NULL) AS hash_at,
       arg_max(lm, fetched_at) FILTER (WHERE lm >= 7670) AS last_lm
FROM (
    SELECT url_id, fetched_at, record_hash, lm_days(last_modified) AS lm
    FROM prior_history
    WHERE outcome IN (SELECT unnest($observed)) AND hash(url_id) % $buckets = $bucket
)
GROUP BY url_id
"""

_PRIOR_ROWS_SQL = """
SELECT l.url_id, l.last_at AS fetched_at, p.record_hash, l.last_lm
FROM prior_last l LEFT JOIN prior_history p
    ON p.url_id = l.url_id AND p.fetched_at = l.hash_at
   AND p.record_hash IS NOT NULL AND p.outcome IN (SELECT unnest($observed))
"""

# The prior row carries the page's last Last-Modified as its own: the cycle's first
# observations take it as the previous one.
_SORTED_KEYS_SQL = """
SELECT url_id, true AS in_cycle, fetched_at,
       (file_index << 40) + file_row_number AS pos,
       outcome, record_hash, changed AS given_changed, interval_days AS given_interval,
       lm_days(last_modified) AS lm
FROM staged WHERE hash(url_id) % $buckets = $bucket
UNION ALL
SELECT url_id, false, fetched_at, NULL, $prior_outcome, record_hash, NULL, NULL, last_lm
FROM prior_rows
ORDER BY url_id, in_cycle, fetched_at, pos
"""

# The same from the pages' last observations kept by the previous commit (``LAST_COLUMNS``):
# no scan of the history.
_STATE_ROWS_SQL = """
SELECT url_id, last_at AS fetched_at, record_hash, last_lm
FROM last_state WHERE hash(url_id) % $buckets = $bucket
"""

#: The columns of the pages' last observations (``write_last_state``): the last observation
#: time, the time and hash of the last observation with a record hash, and the time and
#: value (days) of the last parsed Last-Modified: what ``_PRIOR_LAST_SQL`` and
#: ``_PRIOR_ROWS_SQL`` take from the whole history, kept so a commit reads one row per page.
LAST_COLUMNS = ("url_id", "last_at", "hash_at", "record_hash", "lm_at", "last_lm")

# The pages' last observations over the previous ones ({state}, LAST_COLUMNS) and some
# history rows ({rows}): each column is a max or an arg_max, so the previous commit's
# state and the cycle's rows give what the whole history gives (ties of a time aside).
_LAST_STATE_SQL = """
SELECT url_id, max(last_at) AS last_at, max(hash_at) AS hash_at,
       arg_max(record_hash, hash_at) FILTER (WHERE hash_at IS NOT NULL) AS record_hash,
       max(lm_at) AS lm_at,
       arg_max(last_lm, lm_at) FILTER (WHERE lm_at IS NOT NULL) AS last_lm
FROM (
    SELECT url_id, last_at, hash_at, record_hash, lm_at, last_lm FROM {state}
    UNION ALL
    SELECT url_id, fetched_at, if(record_hash IS NULL, NULL, fetched_at), record_hash,
           if(lm >= 7670, fetched_at, NULL), if(lm >= 7670, lm, NULL)
    FROM (
        SELECT url_id, fetched_at, record_hash, lm_days(last_modified) AS lm FROM {rows}
        WHERE outcome IN (SELECT unnest($observed))
    )
)
GROUP BY url_id
"""
_NO_STATE_SQL = """
SELECT NULL::BIGINT AS url_id, NULL::TIMESTAMPTZ AS last_at, NULL::TIMESTAMPTZ AS hash_at,
       NULL::VARCHAR AS record_hash, NULL::TIMESTAMPTZ AS lm_at, NULL::DOUBLE AS last_lm
WHERE false
"""
_UPDATED_STATE_SQL = _LAST_STATE_SQL.format(state="last_state", rows="last_rows")
_FIRST_STATE_SQL = _LAST_STATE_SQL.format(state=f"({_NO_STATE_SQL})", rows="last_rows")

_IN_STAGED_ORDER_SQL = """
SELECT pos, changed, interval_days FROM linked WHERE pos >= $low AND pos < $high ORDER BY pos
"""


@dataclass(frozen=True)
class LinkCounts:
    """What the pass saw: kept rows, observations, backward intervals (of those whose
    ``changed`` is known), and observations not later than the page's previous one."""

    rows: int
    observations: int
    backward: int
    backward_example: int | None
    unordered: int = 0


class LinkPass:
    """Walks the sorted keys once (see the module docstring), a record batch at a time.

    State carried between batches: the key of the last row (a duplicate may straddle two
    batches), the last observation (the previous one of the next batch's first rows) and
    the last observation with a Last-Modified. ``given_links``: judge Last-Modified with
    the rows' own ``changed``/``interval_days`` (unlinked commits, stored rows) instead of
    the ones this pass computes; ``deduplicate``: drop later copies of a (url_id,
    fetched_at) (not when walking the stored history, which has none within a cycle).
    """

    def __init__(self, *, given_links: bool = False, deduplicate: bool = True) -> None:
        self.given_links = given_links
        self.deduplicate = deduplicate
        self._last_key: tuple[int, bool, int] | None = None
        self._obs_url: int | None = None
        self._obs_at = 0
        self._obs_hash: str | None = None
        self._lm_url = -1  # no page: url_ids are compared with it
        self._lm = np.nan
        self.rows = 0
        self.observations = 0
        self.backward = 0
        self.backward_example: int | None = None
        self.unordered = 0

    def counts(self) -> LinkCounts:
        return LinkCounts(
            self.rows, self.observations, self.backward, self.backward_example, self.unordered
        )

    def step(self, batch: pa.RecordBatch) -> tuple[pa.Table, pa.Table]:
        """The batch's kept cycle rows as ``LINKED_SCHEMA`` (in the batch's order), and the
        Last-Modified judgements of its observations as ``AGES_SCHEMA``."""
        n = batch.num_rows
        if n == 0:
            return LINKED_SCHEMA.empty_table(), AGES_SCHEMA.empty_table()
        url = batch.column("url_id").to_numpy()
        cyc = batch.column("in_cycle").to_numpy(zero_copy_only=False)
        at = batch.column("fetched_at").cast(pa.int64()).to_numpy()
        keep = self._first_copies(url, cyc, at) if self.deduplicate else np.ones(n, dtype=bool)
        self._last_key = (int(url[-1]), bool(cyc[-1]), int(at[-1]))

        kept = batch  # no copy where every row is kept (no row was staged twice)
        if not keep.all():
            url, cyc, at = url[keep], cyc[keep], at[keep]
            kept = batch.filter(pa.array(keep))
        outcome = kept.column("outcome")
        record_hash = kept.column("record_hash").cast(pa.string())
        given = kept.column("given_changed")
        pos = kept.column("pos")
        observed = pc.is_in(outcome, pa.array(sql_list(OBSERVED))).to_numpy(zero_copy_only=False)
        lm = _floats(kept.column("lm"))
        lm = np.where(lm >= FIRST_WEB_DAY, lm, np.nan)  # NaN stays NaN

        m = len(url)
        index = np.arange(m)
        last_observed = np.maximum.accumulate(np.where(observed, index, -1))
        previous = np.concatenate(([-1], last_observed[:-1]))
        in_batch = previous >= 0
        in_batch &= url[np.maximum(previous, 0)] == url
        from_carry = (
            (previous < 0) & (url == self._obs_url)
            if self._obs_url is not None
            else (np.zeros(m, dtype=bool))
        )
        has_previous = in_batch | from_carry
        source = np.where(in_batch, previous, m)  # m: the carried observation
        prev_at = np.append(at, self._obs_at)[source]
        prev_hash = pa.concat_arrays([record_hash, pa.array([self._obs_hash], pa.string())]).take(
            pa.array(source)
        )

        not_modified = pc.equal(outcome, "not_modified").to_numpy(zero_copy_only=False)
        given_valid = given.is_valid().to_numpy(zero_copy_only=False)
        given_value = given.fill_null(False).to_numpy(zero_copy_only=False)
        differs = pc.not_equal(record_hash, prev_hash)
        hashes_known = differs.is_valid().to_numpy(zero_copy_only=False)
        differs_value = differs.fill_null(False).to_numpy(zero_copy_only=False)
        unknown = ~observed | ~has_previous | (~not_modified & ~given_valid & ~hashes_known)
        changed = np.where(not_modified, False, np.where(given_valid, given_value, differs_value))
        interval = (at - prev_at) / DAY_US

        ours = cyc
        judged = self._judge(
            kept.select(["given_changed", "given_interval"]),
            url,
            at,
            lm,
            (observed, ours, has_previous, not_modified),
            prev_at,
            (changed, ~unknown, interval),
        )
        if observed.any():
            last = int(last_observed[-1])
            self._obs_url, self._obs_at = int(url[last]), int(at[last])
            self._obs_hash = record_hash[last].as_py()

        backward = ours & ~unknown & (interval <= 0)
        self.unordered += int((ours & observed & has_previous & (at <= prev_at)).sum())
        self.rows += int(ours.sum())
        self.observations += int((ours & observed).sum())
        if backward.any():
            self.backward += int(backward.sum())
            if self.backward_example is None:
                self.backward_example = int(url[backward][0])
        null = unknown[ours]
        linked = pa.table(
            {
                "pos": pos.filter(pa.array(ours)),
                "changed": pa.array(changed[ours], pa.bool_(), mask=null),
                "interval_days": pa.array(interval[ours], pa.float64(), mask=null),
            },
            schema=LINKED_SCHEMA,
        )
        return linked, judged

    def _judge(
        self,
        given: pa.RecordBatch,
        url: np.ndarray,
        at: np.ndarray,
        lm: np.ndarray,
        flags: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
        prev_at: np.ndarray,
        computed: tuple[np.ndarray, np.ndarray, np.ndarray],
    ) -> pa.Table:
        """Judge the Last-Modified of the cycle's observations as the history records
        them: against the previous observation, the last earlier Last-Modified, ``changed``
        (-1 for a first observation) and ``interval_days``; only where either date is known.

        ``given`` holds the kept rows' own ``given_changed``/``given_interval``; ``flags``
        are per kept row ``observed, ours (a cycle row), has_previous, not_modified``;
        ``computed`` the pass's ``changed``, whether it is known, and ``interval``.
        """
        observed, ours, has_previous, not_modified = flags
        dated_row = np.isfinite(lm) & observed  # a prior row carries the page's last one
        index = np.arange(len(url))
        last_dated = np.maximum.accumulate(np.where(dated_row, index, -1))
        previous = np.concatenate(([-1], last_dated[:-1]))
        in_batch = (previous >= 0) & (url[np.maximum(previous, 0)] == url)
        carried = ~in_batch & (url == self._lm_url)
        prev_lm = np.where(
            in_batch, lm[np.maximum(previous, 0)], np.where(carried, self._lm, np.nan)
        )
        if last_dated[-1] >= 0:
            self._lm_url, self._lm = int(url[last_dated[-1]]), float(lm[last_dated[-1]])

        judged = ours & observed & (np.isfinite(lm) | np.isfinite(prev_lm))
        if not judged.any():
            return AGES_SCHEMA.empty_table()
        if self.given_links:
            changed = given.column("given_changed")
            known = not_modified | changed.is_valid().to_numpy(zero_copy_only=False)
            value = ~not_modified & changed.fill_null(False).to_numpy(zero_copy_only=False)
            interval = _floats(given.column("given_interval"))
        else:
            value, known, interval = computed
        code = np.where(~has_previous, -1, np.where(known, value.astype(np.int8), -3))
        code, interval = code[judged].astype(np.int8), interval[judged]
        age, dated, evidence = judge_last_modified(
            at[judged] / DAY_US,
            lm[judged],
            np.where(has_previous, prev_at / DAY_US, np.nan)[judged],
            prev_lm[judged],
            code,
        )
        aged = np.isfinite(age)
        hit = aged & (code == 1)
        return pa.table(
            {
                "url_id": url[judged],
                "code": evidence,
                "aged": aged,
                "dated": dated,
                "age": np.where(aged, age, 0.0),
                "hit": hit,
                "t": np.where(hit, interval, 0.0),
            },
            schema=AGES_SCHEMA,
        )

    def _first_copies(self, url: np.ndarray, cyc: np.ndarray, at: np.ndarray) -> np.ndarray:
        """False for a cycle row with the key of the row before it (a later copy)."""
        again = np.zeros(len(url), dtype=bool)
        again[1:] = (url[1:] == url[:-1]) & (at[1:] == at[:-1]) & cyc[1:] & cyc[:-1]
        if self._last_key is not None:
            again[0] = bool(cyc[0]) and self._last_key == (int(url[0]), True, int(at[0]))
        return ~again


def _floats(column: pa.Array) -> np.ndarray:
    """A nullable float column as float64 with NaN for NULL."""
    return np.asarray(column.cast(pa.float64()).fill_null(np.nan).to_numpy(zero_copy_only=False))


@dataclass(frozen=True)
class LinkOutput:
    """Files of one walk: linked rows (``LINKED_SCHEMA``, one per kept cycle row) and
    Last-Modified judgements (``AGES_SCHEMA``), with the counts."""

    linked: Path
    ages: Path
    counts: LinkCounts


def link_staged(
    con: duckdb.DuckDBPyConnection,
    parts: list[str],
    prior_files: list[str],
    work: Path,
    batch_rows: int,
    buckets: int,
    *,
    given_links: bool = False,
    deduplicate: bool = True,
    prior_state: str | None = None,
) -> LinkOutput:
    """Steps 1 and 2 of the module docstring: ``work/linked.parquet``, ``work/ages.parquet``
    and the counts (``LinkPass`` says what ``given_links`` and ``deduplicate`` do).

    ``prior_state``: the pages' last observations in ``prior_files`` as the previous commit
    kept them (``write_last_state``); step 1 then reads that file instead of the history.

    The pages are split into ``buckets`` by a hash of their url_id and linked one bucket
    at a time (see the module docstring).
    """
    work.mkdir(parents=True, exist_ok=True)
    con.execute(LM_DAYS_MACRO)
    con.register("staged", _staged_keys(con, parts))
    if prior_state is not None:
        con.register("last_state", con.read_parquet(prior_state))
    elif prior_files:
        con.register("prior_history", con.read_parquet(prior_files, union_by_name=True))
    linked_path, ages_path = work / "linked.parquet", work / "ages.parquet"
    # buckets hold disjoint pages: its carried state never crosses one
    walk = LinkPass(given_links=given_links, deduplicate=deduplicate)
    with (
        pq.ParquetWriter(linked_path, LINKED_SCHEMA) as linked_writer,
        pq.ParquetWriter(ages_path, AGES_SCHEMA) as ages_writer,
    ):
        for bucket in range(buckets):
            which = {"buckets": buckets, "bucket": bucket}
            if prior_state is not None:
                prior_path = work / f"prior-{bucket}.parquet"
                con.sql(_STATE_ROWS_SQL, params=which).to_parquet(str(prior_path))
                con.register("prior_rows", con.read_parquet(str(prior_path)))
            else:
                con.register("prior_rows", _prior_rows(con, prior_files, work, which))
            sorted_keys = con.sql(
                _SORTED_KEYS_SQL, params={**which, "prior_outcome": PRIOR_OUTCOME}
            )
            with sorted_keys.to_arrow_reader(batch_size=batch_rows) as reader:
                for batch in reader:
                    linked, ages = walk.step(batch)
                    linked_writer.write_table(linked)
                    ages_writer.write_table(ages)
    return LinkOutput(linked_path, ages_path, walk.counts())


def write_last_state(
    con: duckdb.DuckDBPyConnection, prior_state: str | None, rows: list[str], path: Path
) -> None:
    """Write the pages' last observations (``LAST_COLUMNS``) to ``path``: those of
    ``prior_state`` (a file this wrote; None: no earlier ones) updated with the history
    files ``rows`` (the cycle just written, or the whole history)."""
    con.execute(LM_DAYS_MACRO)
    if rows:
        con.register("last_rows", con.read_parquet(rows, union_by_name=True))
    else:
        con.register("last_rows", con.from_arrow(HISTORY_SCHEMA.empty_table()))
    if prior_state is not None:
        con.register("last_state", con.read_parquet(prior_state))
        query = _UPDATED_STATE_SQL
    else:
        query = _FIRST_STATE_SQL
    con.sql(query, params=OUTCOME_PARAMS).to_parquet(str(path))


def _prior_rows(
    con: duckdb.DuckDBPyConnection, prior_files: list[str], work: Path, which: dict[str, int]
) -> duckdb.DuckDBPyRelation:
    """Step 1 for one bucket: its pages' last observations in the published history."""
    if not prior_files:
        fields = [HISTORY_SCHEMA.field(c) for c in ("url_id", "fetched_at", "record_hash")]
        return con.from_arrow(pa.schema([*fields, pa.field("last_lm", pa.float64())]).empty_table())
    last_path = work / f"prior_last-{which['bucket']}.parquet"
    con.sql(_PRIOR_LAST_SQL, params={**which, **OUTCOME_PARAMS}).to_parquet(str(last_path))
    con.register("prior_last", con.read_parquet(str(last_path)))
    prior_path = work / f"prior-{which['bucket']}.parquet"
    con.sql(_PRIOR_ROWS_SQL, params=OUTCOME_PARAMS).to_parquet(str(prior_path))
    return con.read_parquet(str(prior_path))


def _staged_keys(con: duckdb.DuckDBPyConnection, parts: list[str]) -> duckdb.DuckDBPyRelation:
    columns = ", ".join(KEY_COLUMNS)
    if not parts:
        empty = pa.schema([HISTORY_SCHEMA.field(c) for c in KEY_COLUMNS]).empty_table()
        return con.from_arrow(empty).select(
            f"{columns}, 0::BIGINT AS file_index, 0::BIGINT AS file_row_number"
        )
    # by name: stored history files written before a column existed lack it
    return con.read_parquet(parts, union_by_name=True).select(
        f"{columns}, file_index, file_row_number"
    )


def linked_in_staged_order(
    con: duckdb.DuckDBPyConnection,
    linked_path: Path,
    part_rows: list[int],
    bucket_rows: int,
    batch_rows: int,
) -> Iterator[pa.RecordBatch]:
    """Step 3: the linked rows sorted by position, one range of positions (about
    ``bucket_rows`` staged rows) sorted at a time, for the same reason as the buckets of
    ``link_staged``."""
    con.register("linked", con.read_parquet(str(linked_path)))
    for low, high in position_ranges(part_rows, bucket_rows):
        rel = con.sql(_IN_STAGED_ORDER_SQL, params={"low": low, "high": high})
        with rel.to_arrow_reader(batch_size=batch_rows) as reader:
            yield from reader


def position_ranges(part_rows: list[int], bucket_rows: int) -> list[tuple[int, int]]:
    """Half-open ranges of positions, in order, covering every staged row, at most
    ``bucket_rows`` rows each (small parts share one, a large part is cut)."""
    ranges: list[tuple[int, int]] = []
    low = high = count = 0
    for index, rows in enumerate(part_rows):
        base = index << PART_SHIFT
        for start in range(0, rows, bucket_rows):
            piece = min(bucket_rows, rows - start)
            if count and count + piece <= bucket_rows:
                high, count = base + start + piece, count + piece
            else:
                if count:
                    ranges.append((low, high))
                low, high, count = base + start, base + start + piece, piece
    if count:
        ranges.append((low, high))
    return ranges


def merge_rows(
    parts: list[str], linked: Iterator[pa.RecordBatch], *, relink: bool, batch_rows: int
) -> Iterator[pa.Table]:
    """The kept staged rows, a part batch at a time, with the linked columns if ``relink``.

    ``linked`` is sorted by position and names exactly the rows kept, so both are walked
    once in step: memory is one part batch plus one batch of ``linked``.
    """
    pending = _Positions(linked)
    for index, part in enumerate(parts):
        offset = index << PART_SHIFT
        for batch in pq.ParquetFile(part).iter_batches(batch_size=batch_rows):
            picks = pending.below(offset + batch.num_rows)
            if picks.num_rows == 0:
                offset += batch.num_rows
                continue
            rows = pa.Table.from_batches([batch]).take(
                pc.subtract(picks["pos"], pa.scalar(offset, pa.int64()))
            )
            offset += batch.num_rows
            if relink:
                for name in ("changed", "interval_days"):
                    rows = rows.set_column(
                        rows.column_names.index(name), name, picks[name].combine_chunks()
                    )
            yield rows


class _Positions:
    """A sorted stream of linked rows, consumed by position bound."""

    def __init__(self, batches: Iterator[pa.RecordBatch]) -> None:
        self._batches = batches
        self._buffer = LINKED_SCHEMA.empty_table()
        self._done = False

    def below(self, bound: int) -> pa.Table:
        """Every remaining row with position < ``bound`` (removed from the stream)."""
        while not self._done and (
            self._buffer.num_rows == 0 or self._buffer["pos"][-1].as_py() < bound
        ):
            batch = next(self._batches, None)
            if batch is None:
                self._done = True
            else:
                self._buffer = pa.concat_tables(
                    [self._buffer, pa.Table.from_batches([batch]).cast(LINKED_SCHEMA)]
                ).combine_chunks()
        positions = self._buffer["pos"].to_numpy()
        cut = int(np.searchsorted(positions, bound))
        taken, self._buffer = self._buffer.slice(0, cut), self._buffer.slice(cut)
        return taken
