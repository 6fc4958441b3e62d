"""Sharded planning on Dask workers over Parquet shards equals the single-process plan."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from models.allocation.allocate import allocate
from models.allocation.solver import TOLERANCE
from models.planning.select import REASONS, Candidates, PlanningInputError, select_batch
from tasks.cycle.sharded_planning import (
    PlanSettings,
    ShardSet,
    plan_sharded,
    single_process_inputs,
    write_shards,
)

distributed = pytest.importorskip(
    "distributed",
    reason="dask.distributed is not installed (pip install 'dask[distributed]'): "
    "the sharded planner's Dask path is not tested",
)


@pytest.fixture(scope="module")
def client() -> Iterator[Any]:
    """Two single-threaded workers in this process, over Dask's in-process transport
    (starts in a fraction of a second; the tasks, their arguments and results are those
    of worker processes)."""
    cluster = distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


@pytest.fixture(scope="module")
def process_client() -> Iterator[Any]:
    """Two worker processes, as on separate machines sharing a folder."""
    cluster = distributed.LocalCluster(
        n_workers=2,
        threads_per_worker=1,
        processes=True,
        host="127.0.0.1",
        dashboard_address=None,
    )
    with distributed.Client(cluster) as c:
        yield c
    cluster.close()


def pages_table(pages: int, hosts: int, seed: int) -> pd.DataFrame:
    """Pages to plan: string hosts, value tiers, costs, rates, some never fetched, and a
    per-host capacity on half the hosts (the rest take the settings' capacity)."""
    rng = np.random.default_rng(seed)
    host = rng.integers(0, hosts, pages)
    capacity = np.where(rng.random(hosts) < 0.5, rng.integers(2, 40, hosts), np.nan)
    known = rng.random(pages) < 0.85
    return pd.DataFrame(
        {
            "url_id": rng.permutation(pages).astype(np.int64) + 1000,
            "host": np.char.add("host-", host.astype(str)),
            "rate": rng.lognormal(-2.5, 1.5, pages),
            "log_std": rng.uniform(0.0, 3.0, pages),
            "value": rng.choice([1.0, 2.0, 5.0, 10.0], pages),
            "cost": np.round(rng.lognormal(0.0, 0.4, pages), 3),
            "days_since_visit": np.where(known, rng.exponential(8.0, pages), np.nan),
            "capacity": capacity[host],
        }
    )


def single_process_plan(shards: ShardSet, settings: PlanSettings) -> tuple[pd.DataFrame, Any]:
    """``models.planning.core``'s allocate-then-select on every shard laid end to end."""
    parts = single_process_inputs(shards, settings)
    cat = {
        k: np.concatenate([getattr(p, k) for p in parts])
        for k in parts[0].__dict__
        if k not in ("change_ratio", "intervals")
    }
    # a shard whose pages all have ratio 1 keeps none (read_shard): 1 is "no signal"
    ratios = [np.ones(p.size) if p.change_ratio is None else p.change_ratio for p in parts]
    change_ratio = np.concatenate(ratios) if ratios else None
    known = [p.intervals is not None for p in parts]
    assert len(set(known)) == 1  # a column every shard has or none
    intervals = np.concatenate([p.intervals for p in parts]) if all(known) else None
    shift = np.cumsum([0] + [p.capacity.shape[0] for p in parts[:-1]])
    hosts = np.concatenate([p.codes + s for p, s in zip(parts, shift, strict=True)])
    days = settings.cycle_days
    allocation = allocate(
        cat["rate"],
        settings.allocation_budget,
        weights=cat["value"],
        costs=cat["cost"],
        hosts=hosts,
        host_capacity=cat["capacity"] / days,
        max_frequency=1.0 / days,
    )
    candidates = Candidates(
        cat["url_id"],
        hosts,
        cat["value"],
        cat["cost"],
        cat["rate"],
        allocation.frequencies,
        cat["log_std"],
        cat["days_since_visit"],
        intervals,
    )
    plan = select_batch(
        candidates,
        settings.budget,
        cat["capacity"],
        slices=settings.slices,
        cycle_days=days,
        seed=settings.seed,
        change_ratio=change_ratio,
    )
    frame = pd.DataFrame(
        {
            "url_id": cat["url_id"][plan.index],
            "reason": np.asarray(REASONS, dtype=object)[plan.reason],
            "score": plan.score,
            "frequency": allocation.frequencies[plan.index],
        }
    )
    return frame, (allocation, hosts, cat["capacity"])


def check_sharded_plan(
    client: Any,
    tmp_path: Path,
    pages: int,
    hosts: int,
    *,
    signals: bool = False,
    intervals: bool = False,
) -> pd.DataFrame:
    """Plan on the workers and in one process; the same batch, the same frequencies.

    ``signals``: a third of the hosts carry cheap change signals (``change_ratio``), which
    reorder their revisits after the takes, shard by shard as in one process.
    ``intervals``: pages carry their observed intervals (``n_intervals``), a quarter of the
    hosts cold (none observed), so the cold-start re-estimation rule takes pages."""
    frame = pages_table(pages, hosts, seed=3)
    if intervals:
        rng = np.random.default_rng(11)
        cold = np.isin(frame["host"], [f"host-{h}" for h in range(0, hosts, 4)])
        frame["n_intervals"] = np.where(cold, 0, rng.integers(0, 20, len(frame)))
    if signals:
        rng = np.random.default_rng(9)
        signalling = rng.random(len(frame)) < 1 / 3
        frame["change_ratio"] = np.where(
            signalling, rng.choice([0.2, 8.0], len(frame), p=[0.6, 0.4]), 1.0
        )
    source = tmp_path / "pages.parquet"
    frame.to_parquet(source, index=False)
    shards = write_shards(source, tmp_path / "shards", 5)
    assert len(shards.folders) == 5 and shards.size == len(frame)
    # every host lives in exactly one shard
    seen = [set(pq.read_table(f).column("host").to_pylist()) for f in shards.folders]
    assert sum(len(s) for s in seen) == len(set().union(*seen))
    budget = 0.1 * float(frame["cost"].sum())
    settings = PlanSettings(budget, host_capacity=25.0, seed=4)
    result = plan_sharded(client, shards, settings, tmp_path / "plan.parquet")
    single, (allocation, hosts, capacity) = single_process_plan(shards, settings)
    assert result.root.multiplier > 0 and allocation.multiplier > 0  # the budget binds
    load = np.bincount(hosts, allocation.frequencies)
    assert (load >= capacity - 1e-9).sum() >= 5  # and host capacities bind
    plan = pd.read_parquet(result.path)
    assert len(plan) == result.rows == len(single) > 100
    # the same pages, same reasons, same order; frequencies to the allocation's bound
    # (1e-9 relative, plus twice the single-process solver's capacity slack: see
    # tests/models/allocation/test_shards.py)
    np.testing.assert_array_equal(plan["url_id"].to_numpy(), single["url_id"].to_numpy())
    np.testing.assert_array_equal(plan["reason"].to_numpy(), single["reason"].to_numpy())
    np.testing.assert_allclose(plan["score"], single["score"], rtol=1e-6)
    np.testing.assert_allclose(
        plan["frequency"], single["frequency"], rtol=1e-9, atol=2 * TOLERANCE * 40
    )
    assert result.spent <= budget * (1 + 1e-12)
    return plan


def test_sharded_plan_on_dask_equals_the_single_process_plan(client: Any, tmp_path: Path) -> None:
    check_sharded_plan(client, tmp_path, 4_000, 80)


def test_sharded_plan_with_change_signals_equals_the_single_process_plan(
    client: Any, tmp_path: Path
) -> None:
    check_sharded_plan(client, tmp_path, 4_000, 80, signals=True)


def test_sharded_plan_with_observed_intervals_applies_the_cold_start_rule(
    client: Any, tmp_path: Path
) -> None:
    """The shards carry n_intervals to the selection: the cold hosts' pages are re-estimated
    as in one process (the rule was off in sharded plans before: no intervals reached it)."""
    (tmp_path / "on").mkdir()
    (tmp_path / "off").mkdir()
    with_rule = check_sharded_plan(client, tmp_path / "on", 4_000, 80, intervals=True)
    without = check_sharded_plan(client, tmp_path / "off", 4_000, 80)
    reestimated = (with_rule["reason"] == "re-estimation").sum()
    assert reestimated > (without["reason"] == "re-estimation").sum()


@pytest.mark.scale
def test_sharded_plan_on_worker_processes_at_200k_pages(
    process_client: Any, tmp_path: Path
) -> None:
    check_sharded_plan(process_client, tmp_path, 200_000, 3_000)


def test_write_shards_refuses_pages_without_their_columns(tmp_path: Path) -> None:
    source = tmp_path / "pages.parquet"
    pages_table(100, 5, seed=1).drop(columns=["rate"]).to_parquet(source, index=False)
    with pytest.raises(PlanningInputError, match="lack the columns rate"):
        write_shards(source, tmp_path / "shards", 3)
