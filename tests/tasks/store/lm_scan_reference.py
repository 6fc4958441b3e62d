"""The Last-Modified ages as estimation computed them before they were kept at commit.

``tasks/cycle/estimation.py`` used to scan and window-sort the whole history at every estimate
(``_LAST_MODIFIED_ROWS`` below, verbatim) and judge every observation. It is kept here,
for tests only, as the reference the commit-time sums must reproduce: ``scan_ages`` gives
what that scan gave, ``reference_inputs`` what ``read_estimation_inputs`` returned.
"""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pyarrow as pa

from models.estimation.change_rate import PageMoments
from models.estimation.rate_data import PageAges, moments_with_last_modified
from models.fetching.validators import LM_CODES, judge_last_modified
from tasks.cycle.estimation import EstimationInputs
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore, connect

_LAST_MODIFIED_ROWS = """
WITH obs AS (
    SELECT url_id, host, epoch_us(fetched_at) / 86400e6 AS t_fetch,
           CASE WHEN outcome = 'not_modified' THEN false ELSE changed END AS changed,
           interval_days,
           try_strptime(trim(last_modified), [
               '%a, %d %b %Y %H:%M:%S GMT', '%A, %d-%b-%y %H:%M:%S GMT', '%a %b %d %H:%M:%S %Y'
           ]) AS lm_ts
    FROM history WHERE outcome IN ('ok', 'not_modified')
),
dated AS (
    SELECT *, CASE WHEN lm_ts >= TIMESTAMP '1991-01-01'
                   THEN epoch_us(lm_ts) / 86400e6 END AS lm
    FROM obs
),
linked AS (
    SELECT url_id, host, t_fetch, lm, interval_days,
           lag(t_fetch) OVER w AS prev_fetch,
           last_value(lm IGNORE NULLS) OVER (
               w ROWS BETWEEN UNBOUNDED PRECEDING AND 1 PRECEDING) AS prev_lm,
           CASE WHEN lag(t_fetch) OVER w IS NULL THEN -1
                WHEN changed IS NULL THEN NULL ELSE changed::INTEGER END AS changed
    FROM dated
    WINDOW w AS (PARTITION BY url_id ORDER BY t_fetch)
)
SELECT l.url_id, h.code AS host_code, l.t_fetch, l.lm, l.prev_fetch, l.prev_lm, l.changed,
       l.interval_days
FROM linked l JOIN host_names h ON l.host = h.name
WHERE l.lm IS NOT NULL OR l.prev_lm IS NOT NULL
"""


def last_modified_ages(
    con: duckdb.DuckDBPyConnection, page_ids: np.ndarray, n_hosts: int
) -> tuple[PageAges, np.ndarray]:
    """The old ``tasks.cycle.estimation.last_modified_ages``: per page (of ``page_ids``) the
    ages, per host (``host_names`` codes) the evidence, from the registered ``history``."""
    ages = PageAges.zeros(page_ids.shape[0])
    evidence = np.zeros((n_hosts, LM_CODES), dtype=np.int64)
    order = np.argsort(page_ids, kind="stable")
    sorted_ids = page_ids[order]
    reader = con.sql(_LAST_MODIFIED_ROWS).to_arrow_reader(1 << 20)
    for batch in reader:
        col = {name: batch.column(name) for name in batch.schema.names}

        def floats(name: str, col: dict[str, pa.Array] = col) -> np.ndarray:
            return np.asarray(col[name].to_numpy(zero_copy_only=False), dtype=np.float64)

        changed = col["changed"].fill_null(-3).to_numpy(zero_copy_only=False).astype(np.int8)
        age, dated, code = judge_last_modified(
            floats("t_fetch"), floats("lm"), floats("prev_fetch"), floats("prev_lm"), changed
        )
        host = col["host_code"].to_numpy(zero_copy_only=False).astype(np.int64)
        evidence += np.bincount(host * LM_CODES + code, minlength=evidence.size).reshape(
            evidence.shape
        )
        ids = col["url_id"].to_numpy(zero_copy_only=False)
        slot = np.minimum(np.searchsorted(sorted_ids, ids), max(sorted_ids.shape[0] - 1, 0))
        known = np.isfinite(age) & (sorted_ids[slot] == ids if sorted_ids.shape[0] else False)
        page = order[slot[known]]
        hit = changed[known] == 1
        t = np.where(hit, floats("interval_days")[known], 0.0)

        def add(total: np.ndarray, values: np.ndarray, page: np.ndarray = page) -> None:
            total += np.bincount(page, weights=values, minlength=total.shape[0]).astype(total.dtype)

        add(ages.count, dated[known].astype(np.float64))
        add(ages.days, age[known])
        add(ages.n_changed, hit.astype(np.float64))
        add(ages.changed_sum, t)
        add(ages.changed_sum_sq, t * t)
        add(ages.changed_sum_cube, t * t * t)
    return ages, evidence


def scan_ages(
    root: str | Path, page_ids: np.ndarray, hosts: list[str]
) -> tuple[PageAges, np.ndarray]:
    """The old scan over the history under ``root``: ages of ``page_ids``, evidence of
    ``hosts`` (rows in that order)."""
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register(
        "host_names",
        pa.table({"name": pa.array(hosts, pa.string()), "code": np.arange(len(hosts))}),
    )
    return last_modified_ages(con, np.asarray(page_ids, dtype=np.int64), len(hosts))


# The old read_estimation_inputs' queries over the interval statistics.
_CATALOG_PAGES = """
CREATE TEMP TABLE pages AS
SELECT url_id, coalesce(c.host, s.host) AS host,
       coalesce(c."group", s.host) || coalesce(' changefreq=' || c.changefreq, '') AS grp,
       coalesce(s.n_intervals, 0) AS n_intervals, coalesce(s.n_changed, 0) AS n_changed,
       coalesce(s.unchanged_days, 0) AS unchanged_days,
       coalesce(s.changed_sum, 0) AS changed_sum,
       coalesce(s.changed_sum_sq, 0) AS changed_sum_sq,
       coalesce(s.changed_sum_cube, 0) AS changed_sum_cube
FROM catalog c FULL OUTER JOIN stats s USING (url_id)
"""
_HISTORY_PAGES = "CREATE TEMP VIEW pages AS SELECT *, host AS grp FROM stats"
_HOST_NAMES = """
SELECT host AS name, (row_number() OVER () - 1)::BIGINT AS code
FROM (SELECT DISTINCT host FROM pages ORDER BY host)
"""
_GROUP_NAMES = """
SELECT grp AS name, (row_number() OVER () - 1)::BIGINT AS code
FROM (SELECT DISTINCT grp FROM pages ORDER BY grp)
"""
_CODED_PAGES = """
SELECT p.url_id, h.code AS host_code, g.code AS group_code, p.n_intervals, p.n_changed,
       p.unchanged_days, p.changed_sum, p.changed_sum_sq, p.changed_sum_cube
FROM pages p JOIN host_names h ON p.host = h.name JOIN group_names g ON p.grp = g.name
"""
_CODED_PAGES_BY_HOST = """
SELECT p.url_id, h.code AS host_code, h.code AS group_code, p.n_intervals, p.n_changed,
       p.unchanged_days, p.changed_sum, p.changed_sum_sq, p.changed_sum_cube
FROM pages p JOIN host_names h ON p.host = h.name
"""
_STAT_COLUMNS = (
    "n_intervals",
    "n_changed",
    "unchanged_days",
    "changed_sum",
    "changed_sum_sq",
    "changed_sum_cube",
)


def reference_inputs(
    root: str | Path, *, use_catalog: bool = True
) -> tuple[EstimationInputs, PageAges, np.ndarray]:
    """What ``read_estimation_inputs`` returned with the scan, with the scan's ages and
    evidence (before ``moments_with_last_modified``)."""
    con = connect()
    con.register("stats", HistoryStore(root).page_stats_relation(con))
    catalog = CatalogStore(root)
    by_catalog = use_catalog and catalog.path.exists()
    if by_catalog:
        con.register("catalog", catalog.relation(con))
    con.execute(_CATALOG_PAGES if by_catalog else _HISTORY_PAGES)
    host_names = con.sql(_HOST_NAMES).to_arrow_table()
    group_names = con.sql(_GROUP_NAMES).to_arrow_table() if by_catalog else host_names
    con.register("host_names", host_names)
    con.register("group_names", group_names)
    table = con.sql(_CODED_PAGES if by_catalog else _CODED_PAGES_BY_HOST).to_arrow_table()
    col = {name: table[name].to_numpy() for name in table.column_names}
    moments = PageMoments.checked(
        col["url_id"], *(col[c] for c in _STAT_COLUMNS), check_unique=False
    )
    con.register("history", HistoryStore(root).relation(con))
    ages, evidence = last_modified_ages(con, moments.page_ids, len(host_names))
    inputs = EstimationInputs(
        moments_with_last_modified(moments, ages, evidence, col["host_code"]),
        col["group_code"],
        group_names["name"].combine_chunks(),
        col["host_code"],
        host_names["name"].combine_chunks(),
    )
    return inputs, ages, evidence
