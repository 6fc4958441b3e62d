"""Per-page change-rate estimates from a stored history (the notebook-facing entry point)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from models.estimation.change_rate import (
    PageMoments,
    PriorChoice,
    RateEstimates,
    estimate_from_moments,
)
from models.estimation.rate_data import PageAges, moments_with_last_modified
from models.fetching.validators import LM_CODES
from models.schemas import LM_EVIDENCE_COLUMNS
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write
from tasks.store.history import HistoryStore, connect
from tasks.store.stats import AGE_COLUMNS, INTERVAL_COLUMNS


@dataclass(frozen=True)
class EstimationInputs:
    """Per-page statistics plus each page's group and host as dictionary codes.

    ``moments`` are what the planner estimates from: "changed since the last visit", plus
    the Last-Modified ages of the pages whose host dates its changes honestly
    (``models.estimation.rate_data.moments_with_last_modified``, the backtest planner's step too).
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
    (``models/estimation/mixture_prior.py``); ``"empirical"`` is one Gamma prior per group.

    Where the prior cannot be fitted a weaker one is used (``models.estimation.change_rate.
    FALLBACKS``); ``frame.attrs`` says which: ``prior`` (asked for), ``prior_used``,
    ``prior_fallback`` (why, "" if none) and ``prior_description`` (one line for reports).
    """
    inputs = read_estimation_inputs(root, use_catalog=use_catalog)
    estimates = estimate_from_moments(inputs.moments, groups=inputs.group_codes, prior=prior)
    frame = estimates_frame(estimates, inputs)
    frame.attrs.update(
        prior=prior if isinstance(prior, str) else "given",
        prior_used=estimates.prior_used,
        prior_fallback=estimates.prior_fallback,
        prior_description=estimates.prior_description(),
    )
    return frame


_STAT_COLUMNS = INTERVAL_COLUMNS
#: The statistics' age sums in the order of ``PageAges``'s fields (not the term count, not
#: the evidence counts).
_AGE_COLUMNS = tuple(c for c in AGE_COLUMNS if c != "age_terms" and not c.startswith("lm_"))
assert len(LM_EVIDENCE_COLUMNS) == LM_CODES

# The statistics file has a row for every page with an interval or a judged Last-Modified
# (``tasks.store.stats``); the pages estimated are the catalog's and those with an
# interval (a page seen once that the catalog lacks is not estimated, but its host's
# evidence counts). Every catalog page, with the sums of those observed (zeros for the
# others), and the observed pages the catalog lacks; the group comes from the catalog,
# else the host, split by the sitemap's changefreq where the page has one: a page with
# little history gets the prior of the pages its site declares alike (learned from how
# they did change).
_CATALOG_PAGES = """
CREATE TEMP TABLE pages AS
SELECT url_id, coalesce(c.host, s.host) AS host,
       coalesce(c."group", s.host) || coalesce(' changefreq=' || c.changefreq, '') AS grp,
       coalesce(s.n_intervals, 0) AS n_intervals, coalesce(s.n_changed, 0) AS n_changed,
       coalesce(s.unchanged_days, 0) AS unchanged_days,
       coalesce(s.changed_sum, 0) AS changed_sum,
       coalesce(s.changed_sum_sq, 0) AS changed_sum_sq,
       coalesce(s.changed_sum_cube, 0) AS changed_sum_cube,
       coalesce(s.age_count, 0)::DOUBLE AS age_count, coalesce(s.age_days, 0) AS age_days,
       coalesce(s.age_n_changed, 0) AS age_n_changed,
       coalesce(s.age_changed_sum, 0) AS age_changed_sum,
       coalesce(s.age_changed_sum_sq, 0) AS age_changed_sum_sq,
       coalesce(s.age_changed_sum_cube, 0) AS age_changed_sum_cube
FROM catalog c FULL OUTER JOIN stats s USING (url_id)
WHERE c.url_id IS NOT NULL OR s.n_intervals > 0
"""
# Without a catalog: the pages with an interval, grouped by host.
_HISTORY_PAGES = """
CREATE TEMP VIEW pages AS
SELECT * REPLACE (age_count::DOUBLE AS age_count), host AS grp FROM stats
WHERE n_intervals > 0
"""
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
       p.unchanged_days, p.changed_sum, p.changed_sum_sq, p.changed_sum_cube,
       p.age_count, p.age_days, p.age_n_changed, p.age_changed_sum, p.age_changed_sum_sq,
       p.age_changed_sum_cube
FROM pages p JOIN host_names h ON p.host = h.name JOIN group_names g ON p.grp = g.name
"""
_CODED_PAGES_BY_HOST = """
SELECT p.url_id, h.code AS host_code, h.code AS group_code, p.n_intervals, p.n_changed,
       p.unchanged_days, p.changed_sum, p.changed_sum_sq, p.changed_sum_cube,
       p.age_count, p.age_days, p.age_n_changed, p.age_changed_sum, p.age_changed_sum_sq,
       p.age_changed_sum_cube
FROM pages p JOIN host_names h ON p.host = h.name
"""
# Per host estimated, what ``judge_last_modified`` said of its pages' observations (every
# page of the statistics, estimated or not), in the order of the LM_* codes. Summed per
# host name first, then joined: the join reads one row a host, not one a page (10 M pages:
# 1.8 -> 1.2 s of CPU; the same integer sums).
_HOST_EVIDENCE = """
SELECT h.code, s.lm_absent, s.lm_dated, s.lm_consistent, s.lm_hidden_change, s.lm_volatile,
       s.lm_now
FROM (SELECT host, sum(lm_absent) AS lm_absent, sum(lm_dated) AS lm_dated,
             sum(lm_consistent) AS lm_consistent, sum(lm_hidden_change) AS lm_hidden_change,
             sum(lm_volatile) AS lm_volatile, sum(lm_now) AS lm_now
      FROM stats GROUP BY host) s
JOIN host_names h ON s.host = h.name
"""


def host_evidence(con: duckdb.DuckDBPyConnection, n_hosts: int) -> np.ndarray:
    """Per host (``host_names`` codes) the Last-Modified evidence counts (hosts x LM_CODES)
    summed from the registered ``stats`` (one row per page: cheap)."""
    table = con.sql(_HOST_EVIDENCE).to_arrow_table()
    evidence = np.zeros((n_hosts, LM_CODES), dtype=np.int64)
    codes = table["code"].to_numpy()
    for k, name in enumerate(LM_EVIDENCE_COLUMNS):
        evidence[codes, k] = table[name].to_numpy()
    return evidence


def read_estimation_inputs(root: str | Path, *, use_catalog: bool = True) -> EstimationInputs:
    """Per-page statistics joined with the catalog's groups, hosts and groups as codes.

    DuckDB does the join and turns host and group names into dense integer codes (by
    joining with the small table of distinct names), so no per-page string reaches
    Python. The Last-Modified ages and each host's evidence come from the same one row
    per page (kept at commit), never from a scan of the history.
    """
    con = connect()
    stats = HistoryStore(root).page_sums_relation(con)
    catalog = CatalogStore(root)
    by_catalog = use_catalog and catalog.path.exists()
    return estimation_inputs(con, stats, catalog.relation(con) if by_catalog else None)


def estimation_inputs(
    con: duckdb.DuckDBPyConnection,
    stats: duckdb.DuckDBPyRelation,
    catalog: duckdb.DuckDBPyRelation | None = None,
) -> EstimationInputs:
    """``read_estimation_inputs`` over given relations: ``stats`` in
    ``PAGE_STATS_FILE_SCHEMA`` (the store's statistics file, or any file like it: the
    planning benchmark's), ``catalog`` in ``CATALOG_SCHEMA`` or None (grouped by host)."""
    con.register("stats", stats)
    by_catalog = catalog is not None
    if catalog is not None:
        con.register("catalog", catalog)
    con.execute(_CATALOG_PAGES if by_catalog else _HISTORY_PAGES)
    host_names = con.sql(_HOST_NAMES).to_arrow_table()
    group_names = con.sql(_GROUP_NAMES).to_arrow_table() if by_catalog else host_names
    con.register("host_names", host_names)
    con.register("group_names", group_names)
    coded = con.sql(_CODED_PAGES if by_catalog else _CODED_PAGES_BY_HOST)
    # DuckDB writes each column into one numpy array: no Arrow chunks to concatenate (at
    # 10 M pages that copy was 1.2 GB of fresh memory, 1-3 s of page faults on this VM)
    col = {name: _unmasked(values) for name, values in coded.fetchnumpy().items()}
    moments = PageMoments.checked(
        col["url_id"],
        *(col[c] for c in _STAT_COLUMNS),
        check_unique=False,  # one row per url_id: GROUP BY / join on the catalog's key
    )
    ages = PageAges(*(col[c] for c in _AGE_COLUMNS))
    evidence = host_evidence(con, len(host_names))
    moments = moments_with_last_modified(moments, ages, evidence, col["host_code"])
    return EstimationInputs(
        moments,
        col["group_code"],
        group_names["name"].combine_chunks(),
        col["host_code"],
        host_names["name"].combine_chunks(),
    )


def _unmasked(values: np.ndarray) -> np.ndarray:
    """A fetched column as a plain array: DuckDB returns a masked array for a column with
    NULLs, which become NaN (floats) as Arrow's ``to_numpy`` gave them, so ``PageMoments.
    checked`` rejects them (the statistics' columns are NOT NULL)."""
    if not isinstance(values, np.ma.MaskedArray):
        return values
    if not values.mask.any():
        return np.asarray(values.data)
    return np.asarray(np.ma.filled(values.astype(np.float64), np.nan))


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
) -> tuple[Path, int, str]:
    """Estimate and write ``<root>/estimates/latest.parquet``; return its path, row count
    and the line naming the prior used (``frame.attrs["prior_description"]``).

    The file is written durably (``tasks.store.durable``), so readers see the old or the new
    estimates, never a partial file.
    """
    frame = load_rate_estimates(root, prior=prior)
    path = Path(root) / "estimates" / "latest.parquet"
    durable_write(path, lambda handle: frame.to_parquet(handle, index=False))
    return path, len(frame), str(frame.attrs["prior_description"])
