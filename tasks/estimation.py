"""Per-page change-rate estimates from a stored history (the notebook-facing entry point)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from models.change_rate import PageMoments, PriorChoice, RateEstimates, estimate_from_moments
from models.rate_data import PageAges, moments_with_last_modified
from models.validators import LM_CODES, judge_last_modified
from tasks.catalog import CatalogStore
from tasks.history import HistoryStore, connect


@dataclass(frozen=True)
class EstimationInputs:
    """Per-page statistics plus each page's group and host as dictionary codes.

    ``moments`` are what the planner estimates from: "changed since the last visit", plus
    the Last-Modified ages of the pages whose host dates its changes honestly
    (``models.rate_data.moments_with_last_modified``, the backtest planner's step too).
    """

    moments: PageMoments
    group_codes: np.ndarray
    group_names: pa.Array
    host_codes: np.ndarray
    host_names: pa.Array


def load_rate_estimates(
    root: str | Path = "data",
    *,
    prior: PriorChoice = "mixture",
    use_catalog: bool = True,
) -> pd.DataFrame:
    """Estimate every page's change rate from the history under ``root``.

    Returns one row per page: ``url_id, host, group, rate, rate_low, rate_high, log_std,
    n_intervals, n_changed, observed_days, prior_rate`` (rates in changes/day; host and
    group are categoricals). With a catalog, every catalog page is included (pages never
    observed get their group's prior) and ``group`` comes from the catalog, split by the
    sitemap ``changefreq`` a page has (group ``"<group> changefreq=daily"``), so a new page
    gets the prior learned from the pages its site declares alike; otherwise pages are
    grouped by host. ``prior`` is the planner's mixture prior by default
    (``models/mixture_prior.py``); ``"empirical"`` is one Gamma prior per group.
    """
    inputs = read_estimation_inputs(root, use_catalog=use_catalog)
    estimates = estimate_from_moments(inputs.moments, groups=inputs.group_codes, prior=prior)
    return estimates_frame(estimates, inputs)


_STAT_COLUMNS = (
    "n_intervals",
    "n_changed",
    "unchanged_days",
    "changed_sum",
    "changed_sum_sq",
    "changed_sum_cube",
)

# Every catalog page, with the statistics of those observed (zeros for the others), and
# the observed pages the catalog lacks; the group comes from the catalog, else the host,
# split by the sitemap's changefreq where the page has one: a page with little history
# gets the prior of the pages its site declares alike (learned from how they did change).
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
# Without a catalog: the observed pages, grouped by host.
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


# Every observation (ok / 304) with its Last-Modified parsed (RFC 9110 section 5.6.7: the
# IMF-fixdate and the two obsolete forms a recipient must accept; anything else, or a date
# before the web existed, is NULL) and the page's previous observation, in days since the
# epoch. ``changed``: 1 / 0 against the previous observation, -1 for a first observation,
# NULL (unknown) otherwise.
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
    """Per page the Last-Modified ages the history tells, and per host the evidence.

    Reads the registered ``history`` and ``host_names`` relations in batches and judges
    every observation with ``models.validators.judge_last_modified`` (what the backtest's
    learner calls on each simulated fetch). Pages not in ``page_ids`` are skipped.
    """
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


def read_estimation_inputs(root: str | Path, *, use_catalog: bool = True) -> EstimationInputs:
    """Per-page statistics joined with the catalog's groups, hosts and groups as codes.

    DuckDB does the join and turns host and group names into dense integer codes (by
    joining with the small table of distinct names), so no per-page string reaches
    Python.
    """
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
    coded = con.sql(_CODED_PAGES if by_catalog else _CODED_PAGES_BY_HOST)
    table = coded.to_arrow_table(batch_size=1 << 22)  # few chunks: cheap to_numpy
    col = {name: table[name].to_numpy() for name in table.column_names}
    moments = PageMoments.checked(
        col["url_id"],
        *(col[c] for c in _STAT_COLUMNS),
        check_unique=False,  # one row per url_id: GROUP BY / join on the catalog's key
    )
    con.register("history", HistoryStore(root).relation(con))
    ages, evidence = last_modified_ages(con, moments.page_ids, len(host_names))
    moments = moments_with_last_modified(moments, ages, evidence, col["host_code"])
    return EstimationInputs(
        moments,
        col["group_code"],
        group_names["name"].combine_chunks(),
        col["host_code"],
        host_names["name"].combine_chunks(),
    )


def estimates_frame(est: RateEstimates, inputs: EstimationInputs) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "url_id": est.page_ids,
            "host": pd.Categorical.from_codes(inputs.host_codes, inputs.host_names.to_pylist()),
            "group": pd.Categorical.from_codes(inputs.group_codes, inputs.group_names.to_pylist()),
            "rate": est.rate,
            "rate_low": est.rate_low,
            "rate_high": est.rate_high,
            "log_std": est.log_std,
            "n_intervals": est.n_intervals,
            "n_changed": est.n_changed,
            "observed_days": est.observed_days,
            "prior_rate": est.prior_rate,
        },
        copy=False,  # the arrays are fresh; copying them into one block costs seconds
    )


def write_rate_estimates(
    root: str | Path = "data", *, prior: PriorChoice = "mixture"
) -> tuple[Path, int]:
    """Estimate and write ``<root>/estimates/latest.parquet``; return its path and row count.

    The file is written to a temporary name and renamed, so readers see the old or the
    new estimates, never a partial file.
    """
    frame = load_rate_estimates(root, prior=prior)
    path = Path(root) / "estimates" / "latest.parquet"
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    frame.to_parquet(tmp, index=False)
    tmp.replace(path)
    return path, len(frame)
