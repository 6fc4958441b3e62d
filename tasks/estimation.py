"""Per-page change-rate estimates from a stored history (the notebook-facing entry point)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa

from models.change_rate import IntervalStats, PriorChoice, RateEstimates, estimate_from_stats
from tasks.catalog import CatalogStore
from tasks.history import HistoryStore, connect


@dataclass(frozen=True)
class EstimationInputs:
    """Per-page statistics plus each page's group and host as dictionary codes."""

    stats: IntervalStats
    group_codes: np.ndarray
    group_names: pa.Array
    host_codes: np.ndarray
    host_names: pa.Array


def load_rate_estimates(
    root: str | Path = "data",
    *,
    prior: PriorChoice = "empirical",
    use_catalog: bool = True,
) -> pd.DataFrame:
    """Estimate every page's change rate from the history under ``root``.

    Returns one row per page: ``url_id, host, group, rate, rate_low, rate_high, log_std,
    n_intervals, n_changed, observed_days, prior_rate`` (rates in changes/day; host and
    group are categoricals). With a catalog, every catalog page is included (pages never
    observed get their group's prior) and ``group`` comes from the catalog; otherwise
    pages are grouped by host.
    """
    inputs = read_estimation_inputs(root, use_catalog=use_catalog)
    estimates = estimate_from_stats(inputs.stats, groups=inputs.group_codes, prior=prior)
    return estimates_frame(estimates, inputs)


def read_estimation_inputs(root: str | Path, *, use_catalog: bool = True) -> EstimationInputs:
    """Per-page statistics joined (in DuckDB) with the catalog's groups."""
    stats = HistoryStore(root).page_stats()
    con = connect()
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
    col = {name: table[name].to_numpy() for name in table.column_names if name not in TEXT}
    # Dictionary codes are hash-based in Arrow; a numpy unique over strings is slow.
    groups = table["grp"].combine_chunks().dictionary_encode()
    hosts = table["host"].combine_chunks().dictionary_encode()
    stats_ = IntervalStats.from_moments(
        col["url_id"],
        col["n_intervals"],
        col["n_changed"],
        col["unchanged_days"],
        col["changed_sum"],
        col["changed_sum_sq"],
        col["changed_sum_cube"],
        check_unique=False,  # one row per url_id: GROUP BY / join on the catalog's key
    )
    return EstimationInputs(
        stats_,
        groups.indices.to_numpy(),
        groups.dictionary,
        hosts.indices.to_numpy(),
        hosts.dictionary,
    )


TEXT = ("grp", "host")


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
        }
    )


def write_rate_estimates(
    root: str | Path = "data", *, prior: PriorChoice = "empirical"
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
