"""Per-page change-rate estimates from a stored history (the notebook-facing entry point)."""

from __future__ import annotations

from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from models.change_rate import IntervalStats, PriorChoice, RateEstimates, estimate_from_stats
from tasks.catalog import CatalogStore
from tasks.history import HistoryStore


def load_rate_estimates(
    root: str | Path = "data",
    *,
    prior: PriorChoice = "empirical",
    use_catalog: bool = True,
) -> pd.DataFrame:
    """Estimate every page's change rate from the history under ``root``.

    Returns one row per page: ``url_id, host, group, rate, rate_low, rate_high, log_std,
    n_intervals, n_changed, observed_days, prior_rate`` (rates in changes/day). With a
    catalog, every catalog page is included (pages never observed get their group's
    prior) and ``group`` comes from the catalog; otherwise pages are grouped by host.
    """
    stats, groups, hosts = read_estimation_inputs(root, use_catalog=use_catalog)
    estimates = estimate_from_stats(stats, groups=groups, prior=prior)
    return estimates_frame(estimates, hosts, groups)


def read_estimation_inputs(
    root: str | Path, *, use_catalog: bool = True
) -> tuple[IntervalStats, np.ndarray, np.ndarray]:
    """Per-page statistics joined (in DuckDB) with the catalog's groups, as numpy arrays."""
    stats = HistoryStore(root).page_stats()
    con = duckdb.connect()
    con.register("stats", stats)
    catalog = CatalogStore(root)
    if use_catalog and catalog.path.exists():
        con.register("catalog", catalog.read())
        sql = """SELECT url_id, coalesce(c.host, s.host) AS host,
                        coalesce(c."group", s.host) AS grp,
                        coalesce(n_intervals, 0) AS n_intervals,
                        coalesce(n_changed, 0) AS n_changed,
                        coalesce(unchanged_days, 0) AS unchanged_days,
                        coalesce(changed_sum, 0) AS changed_sum,
                        coalesce(changed_sum_sq, 0) AS changed_sum_sq,
                        coalesce(changed_sum_cube, 0) AS changed_sum_cube
                 FROM catalog c FULL OUTER JOIN stats s USING (url_id)"""
    else:
        sql = "SELECT *, host AS grp FROM stats"
    table: pa.Table = con.sql(sql).to_arrow_table()
    col = {name: table[name].to_numpy() for name in table.column_names}
    return (
        IntervalStats.from_moments(
            col["url_id"],
            col["n_intervals"],
            col["n_changed"],
            col["unchanged_days"],
            col["changed_sum"],
            col["changed_sum_sq"],
            col["changed_sum_cube"],
        ),
        col["grp"],
        col["host"],
    )


def estimates_frame(est: RateEstimates, hosts: np.ndarray, groups: np.ndarray) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "url_id": est.page_ids,
            "host": hosts,
            "group": groups,
            "rate": est.rate,
            "rate_low": est.rate_low,
            "rate_high": est.rate_high,
            "log_std": est.log_std,
            "n_intervals": est.n_intervals,
            "n_changed": est.n_changed,
            "observed_days": est.observed_days,
            "prior_rate": est.prior_rate,
        }
    )
