"""Per-page statistics of the history: interval sums and Last-Modified age sums, in SQL.

The statistics file (``PAGE_STATS_FILE_SCHEMA``) holds one row per page with an observed
interval or a judged Last-Modified: the interval sums (``PAGE_STATS_SCHEMA``) and the age
sums and evidence counts (``PAGE_AGE_FIELDS``). Every column is a sum over the page's
observations, so a commit adds its cycle's sums (and subtracts those of a version it
replaces), and estimation reads one row per page however long the history grows.

The interval sums come from the stored rows' ``changed``/``interval_days``; the age sums
from the judgements ``tasks.store.link`` writes while it walks the rows (``ages``
files, ``AGES_SCHEMA``). Each query has one blocking operator (an aggregate or a join)
and goes through a Parquet file, as in ``tasks.store.link``, so each spills on its own
under a commit's memory limit.
"""

from __future__ import annotations

from pathlib import Path

import duckdb

from models.outcomes import OBSERVED, sql_list
from models.schemas import LM_EVIDENCE_COLUMNS, PAGE_AGE_FIELDS, PAGE_STATS_SCHEMA

INTERVAL_COLUMNS: tuple[str, ...] = tuple(PAGE_STATS_SCHEMA.names[2:])
AGE_COLUMNS: tuple[str, ...] = tuple(f.name for f in PAGE_AGE_FIELDS)
SUM_COLUMNS: tuple[str, ...] = INTERVAL_COLUMNS + AGE_COLUMNS

# The queries below spell the columns out; these keep them in step with the schema.
assert INTERVAL_COLUMNS == (
    "n_intervals",
    "n_changed",
    "unchanged_days",
    "changed_sum",
    "changed_sum_sq",
    "changed_sum_cube",
)
assert (
    "age_terms",
    "age_count",
    "age_days",
    "age_n_changed",
    "age_changed_sum",
    "age_changed_sum_sq",
    "age_changed_sum_cube",
    *LM_EVIDENCE_COLUMNS,
) == AGE_COLUMNS
assert LM_EVIDENCE_COLUMNS == (
    "lm_absent",
    "lm_dated",
    "lm_consistent",
    "lm_hidden_change",
    "lm_volatile",
    "lm_now",
)

# Every page with a {kept} row in {rows} (a linked interval, or an observation), or a
# judged observation in {ages} (``AGES_SCHEMA``): its host, interval sums and age sums
# (zeros for a page seen once). One aggregate over both (a union, not a join: one blocking
# operator).
_PAGE_SUMS_SQL = """
SELECT url_id, any_value(host) AS host,
       count(*) FILTER (WHERE linked) AS n_intervals,
       coalesce(sum(c), 0)::BIGINT AS n_changed,
       coalesce(sum(interval_days) - sum(tc), 0) AS unchanged_days,
       coalesce(sum(tc), 0) AS changed_sum,
       coalesce(sum(tc * tc), 0) AS changed_sum_sq,
       coalesce(sum(tc * tc * tc), 0) AS changed_sum_cube,
       count(*) FILTER (WHERE aged) AS age_terms,
       count(*) FILTER (WHERE dated) AS age_count,
       coalesce(sum(age), 0) AS age_days,
       count(*) FILTER (WHERE hit) AS age_n_changed,
       coalesce(sum(t), 0) AS age_changed_sum,
       coalesce(sum(t * t), 0) AS age_changed_sum_sq,
       coalesce(sum(t * t * t), 0) AS age_changed_sum_cube,
       count(*) FILTER (WHERE code = 0) AS lm_absent,
       count(*) FILTER (WHERE code = 1) AS lm_dated,
       count(*) FILTER (WHERE code = 2) AS lm_consistent,
       count(*) FILTER (WHERE code = 3) AS lm_hidden_change,
       count(*) FILTER (WHERE code = 4) AS lm_volatile,
       count(*) FILTER (WHERE code = 5) AS lm_now
FROM (
    SELECT url_id, host, linked,
           if(linked, interval_days, NULL) AS interval_days,
           if(linked, changed::INTEGER, NULL) AS c,
           if(linked, interval_days * changed::DOUBLE, NULL) AS tc,
           NULL::TINYINT AS code, false AS aged, false AS dated, NULL::DOUBLE AS age,
           false AS hit, NULL::DOUBLE AS t
    FROM (
        SELECT url_id, host, interval_days, changed,
               interval_days IS NOT NULL AND changed IS NOT NULL AS linked
        FROM {rows}
        WHERE {kept}
    )
    UNION ALL
    SELECT url_id, NULL, false, NULL, NULL, NULL, code, aged, dated, age, hit, t FROM {ages}
)
GROUP BY url_id
"""

_STATS_SQL = """
SELECT url_id, host, n_intervals, n_changed, unchanged_days, changed_sum, changed_sum_sq,
       changed_sum_cube
FROM ({pages}) WHERE n_intervals > 0
"""

#: No judged observations (the interval statistics alone).
_NO_AGES_SQL = """
SELECT NULL::BIGINT AS url_id, NULL::TINYINT AS code, false AS aged, false AS dated,
       NULL::DOUBLE AS age, false AS hit, NULL::DOUBLE AS t
WHERE false
"""


#: a + b or a - b, column by column ({op}), over every page of either.
_COMBINE_SQL = """
SELECT url_id, coalesce(a.host, b.host) AS host,
       coalesce(a.n_intervals, 0) {op} coalesce(b.n_intervals, 0) AS n_intervals,
       coalesce(a.n_changed, 0) {op} coalesce(b.n_changed, 0) AS n_changed,
       coalesce(a.unchanged_days, 0) {op} coalesce(b.unchanged_days, 0) AS unchanged_days,
       coalesce(a.changed_sum, 0) {op} coalesce(b.changed_sum, 0) AS changed_sum,
       coalesce(a.changed_sum_sq, 0) {op} coalesce(b.changed_sum_sq, 0) AS changed_sum_sq,
       coalesce(a.changed_sum_cube, 0) {op} coalesce(b.changed_sum_cube, 0) AS changed_sum_cube,
       coalesce(a.age_terms, 0) {op} coalesce(b.age_terms, 0) AS age_terms,
       coalesce(a.age_count, 0) {op} coalesce(b.age_count, 0) AS age_count,
       coalesce(a.age_days, 0) {op} coalesce(b.age_days, 0) AS age_days,
       coalesce(a.age_n_changed, 0) {op} coalesce(b.age_n_changed, 0) AS age_n_changed,
       coalesce(a.age_changed_sum, 0) {op} coalesce(b.age_changed_sum, 0) AS age_changed_sum,
       coalesce(a.age_changed_sum_sq, 0) {op} coalesce(b.age_changed_sum_sq, 0)
           AS age_changed_sum_sq,
       coalesce(a.age_changed_sum_cube, 0) {op} coalesce(b.age_changed_sum_cube, 0)
           AS age_changed_sum_cube,
       coalesce(a.lm_absent, 0) {op} coalesce(b.lm_absent, 0) AS lm_absent,
       coalesce(a.lm_dated, 0) {op} coalesce(b.lm_dated, 0) AS lm_dated,
       coalesce(a.lm_consistent, 0) {op} coalesce(b.lm_consistent, 0) AS lm_consistent,
       coalesce(a.lm_hidden_change, 0) {op} coalesce(b.lm_hidden_change, 0)
           AS lm_hidden_change,
       coalesce(a.lm_volatile, 0) {op} coalesce(b.lm_volatile, 0) AS lm_volatile,
       coalesce(a.lm_now, 0) {op} coalesce(b.lm_now, 0) AS lm_now
FROM {a} a FULL OUTER JOIN {b} b USING (url_id)
"""

#: After replacing a cycle, sums that cancel are snapped to exact zero: a page with no
#: unchanged interval left has exactly zero unchanged days, one with no changed interval
#: (no aged one, no aged changed one) exactly zero changed sums (age days, age changed
#: sums), not the rounding residue of subtracting what the replaced version had added.
_SNAP_SQL = """
SELECT * REPLACE (
       if(n_intervals = n_changed, 0, unchanged_days) AS unchanged_days,
       if(n_changed = 0, 0, changed_sum) AS changed_sum,
       if(n_changed = 0, 0, changed_sum_sq) AS changed_sum_sq,
       if(n_changed = 0, 0, changed_sum_cube) AS changed_sum_cube,
       if(age_terms = 0, 0, age_days) AS age_days,
       if(age_n_changed = 0, 0, age_changed_sum) AS age_changed_sum,
       if(age_n_changed = 0, 0, age_changed_sum_sq) AS age_changed_sum_sq,
       if(age_n_changed = 0, 0, age_changed_sum_cube) AS age_changed_sum_cube)
FROM ({stats})
"""

#: Pages with neither an interval nor a judged observation left are dropped (all of theirs
#: were in a replaced version, or they were seen once without a Last-Modified).
_KEPT_SQL = """
SELECT * FROM ({stats})
WHERE n_intervals > 0
   OR lm_absent + lm_dated + lm_consistent + lm_hidden_change + lm_volatile + lm_now > 0
"""


#: Rows that add to a page's sums: a linked interval, or an observation (``$observed``,
#: ``OUTCOME_PARAMS``: it carries the page's host where its judged observations do not).
_ROWS_KEPT = (
    "(interval_days IS NOT NULL AND changed IS NOT NULL) OR outcome IN (SELECT unnest($observed))"
)
#: The interval statistics alone keep pages with an interval, whose linked rows carry the
#: host: the other observations add nothing there (and the query binds no parameter).
_LINKED_KEPT = "interval_days IS NOT NULL AND changed IS NOT NULL"
#: The outcome parameters of the queries that keep ``_ROWS_KEPT`` rows.
OUTCOME_PARAMS: dict[str, object] = {"observed": sql_list(OBSERVED)}

# The queries the functions below run, built once from constant relation names (no SQL
# text is built at run time).
_ROWS_SUMS_SQL = _PAGE_SUMS_SQL.format(rows="sum_rows", ages="judged", kept=_ROWS_KEPT)
_CHANGE_SQL = _COMBINE_SQL.format(a="stats_added", b="stats_removed", op="-")
_ADDED_SQL = _KEPT_SQL.format(stats=_COMBINE_SQL.format(a="stats_base", b="stats_change", op="+"))
_REPLACED_SQL = _KEPT_SQL.format(
    stats=_SNAP_SQL.format(stats=_COMBINE_SQL.format(a="stats_base", b="stats_change", op="+"))
)
_KEPT_FULL_SQL = _KEPT_SQL.format(stats="SELECT * FROM stats_full")


def stats_sql(source: str) -> str:
    """The per-page interval statistics (``PAGE_STATS_SCHEMA``, pages with an interval)
    over a named relation of history rows (a view or table)."""
    pages = _PAGE_SUMS_SQL.format(rows=source, ages=f"({_NO_AGES_SQL})", kept=_LINKED_KEPT)
    return _STATS_SQL.format(pages=pages)


def rows_sums(
    con: duckdb.DuckDBPyConnection, rows: duckdb.DuckDBPyRelation, ages: str, work: Path
) -> duckdb.DuckDBPyRelation:
    """Every column of the statistics over some history rows and their judgements (the
    ``ages`` file ``tasks.store.link`` wrote while walking them), one row per page they
    observe, written under ``work``."""
    work.mkdir(parents=True, exist_ok=True)
    con.register("sum_rows", rows)
    con.register("judged", con.read_parquet(ages))
    sums = work / "sums.parquet"
    con.sql(_ROWS_SUMS_SQL, params=OUTCOME_PARAMS).to_parquet(str(sums))
    return con.read_parquet(str(sums))


def updated_stats(
    con: duckdb.DuckDBPyConnection,
    base: duckdb.DuckDBPyRelation,
    added: duckdb.DuckDBPyRelation,
    removed: duckdb.DuckDBPyRelation | None,
    work: Path,
) -> duckdb.DuckDBPyRelation:
    """``base + added - removed`` (a replaced version's sums), snapped and without empty
    pages, as a lazy relation (the caller streams it into the new statistics file)."""
    work.mkdir(parents=True, exist_ok=True)
    con.register("stats_base", base)
    if removed is None:
        con.register("stats_change", added)
        return con.sql(_ADDED_SQL)
    con.register("stats_added", added)
    con.register("stats_removed", removed)
    difference = work / "stats_change.parquet"
    con.sql(_CHANGE_SQL).to_parquet(str(difference))
    con.register("stats_change", con.read_parquet(str(difference)))
    return con.sql(_REPLACED_SQL)


def kept_stats(
    con: duckdb.DuckDBPyConnection, sums: duckdb.DuckDBPyRelation
) -> duckdb.DuckDBPyRelation:
    """Sums computed from the whole history, without the pages that have nothing."""
    con.register("stats_full", sums)
    return con.sql(_KEPT_FULL_SQL)
