"""Sharded estimation on Dask workers, each shard from its own statistics Parquet, equals
the single-process mixture-prior estimates (bound: tests/models/estimation/
test_sharded_mixture.py, 1e-9 relative)."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from models.planning.select import PlanningInputError
from tasks.cycle.sharded_estimation import (
    estimate_sharded,
    single_process_estimates,
    synthetic_stats,
    write_stats_shards,
)
from tasks.cycle.sharded_planning import write_shards

distributed = pytest.importorskip(
    "distributed",
    reason="dask.distributed is not installed (pip install 'dask[distributed]'): "
    "the sharded estimator's Dask path is not tested",
)

RELATIVE = 1e-9


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two single-threaded workers in this process (Dask's in-process transport)."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def test_sharded_estimates_on_dask_equal_the_single_process_estimates(
    client: Any, tmp_path: Path
) -> None:
    source = tmp_path / "stats.parquet"
    pq.write_table(synthetic_stats(20_000, 400, 8, seed=3), source)
    shards = write_stats_shards(source, tmp_path / "shards", 5)
    assert len(shards.folders) == 5 and shards.size == 20_000
    seen = [set(pq.read_table(f).column("host").to_pylist()) for f in shards.folders]
    assert sum(len(s) for s in seen) == len(set().union(*seen))  # whole hosts per shard
    result = estimate_sharded(client, shards, tmp_path / "estimates")
    # without a catalog the pages with an interval are estimated (as load_rate_estimates)
    observed = int(np.sum(pq.read_table(source).column("n_intervals").to_numpy() > 0))
    assert result.rows == observed < 20_000 and len(result.paths) == 5
    assert 0 < result.fit.sampled < result.fit.observed == observed  # the fit sampled
    got = pd.concat([pd.read_parquet(p) for p in result.paths], ignore_index=True)
    want, prior = single_process_estimates(shards)
    np.testing.assert_array_equal(got["url_id"].to_numpy(), want["url_id"].to_numpy())
    for name in ("rate", "rate_low", "rate_high", "log_std", "prior_rate"):
        np.testing.assert_allclose(got[name], want[name], rtol=RELATIVE, err_msg=name)
    np.testing.assert_allclose(result.fit.web.shape, prior.shape, rtol=RELATIVE)
    # every page of a host in one shard file, its estimate beside its host
    assert got.groupby("host", observed=True)["url_id"].count().sum() == observed


def test_the_statistics_split_matches_the_planners(tmp_path: Path) -> None:
    """Shard k of the statistics holds the hosts of shard k of the pages to plan."""
    stats = synthetic_stats(2_000, 50, 3, seed=1)
    pq.write_table(stats, tmp_path / "stats.parquet")
    a = write_stats_shards(tmp_path / "stats.parquet", tmp_path / "a", 4)
    pages = pd.DataFrame(
        {
            "url_id": stats["url_id"].to_numpy(),
            "host": stats["host"].to_pylist(),
            "rate": 0.1,
            "log_std": 0.5,
            "value": 1.0,
            "cost": 1.0,
            "days_since_visit": 1.0,
        }
    )
    pages.to_parquet(tmp_path / "pages.parquet", index=False)
    b = write_shards(tmp_path / "pages.parquet", tmp_path / "b", 4)
    assert [f.name for f in a.folders] == [f.name for f in b.folders]
    for fa, fb in zip(a.folders, b.folders, strict=True):
        hosts_a = set(pq.read_table(fa).column("host").to_pylist())
        assert hosts_a == set(pq.read_table(fb).column("host").to_pylist())


def test_statistics_without_their_columns_are_refused(tmp_path: Path) -> None:
    stats = synthetic_stats(100, 5, 2, seed=1).drop_columns(["n_changed"])
    pq.write_table(stats, tmp_path / "stats.parquet")
    with pytest.raises(PlanningInputError, match="lack the columns n_changed"):
        write_stats_shards(tmp_path / "stats.parquet", tmp_path / "shards", 3)
