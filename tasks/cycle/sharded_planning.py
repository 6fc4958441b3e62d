"""Plan a cycle over host shards on Dask workers: allocate and select shard by shard.

The pages to plan (one row per page: ``url_id, host, rate, log_std, value, cost,
days_since_visit``, optionally ``capacity``, the visits per cycle its host allows) are
split by a hash of the host into Parquet shards with DuckDB's ``PARTITION_BY``, so every
page of a host is in one shard. Then, with :mod:`models.allocation.shards`:

1. the driver finds the budget's multiplier from each shard's spend at a trial multiplier
   (a task per shard per trial: the shard is read, its hosts solved, two floats returned);
2. each shard writes its frequencies at that multiplier beside it (a ``.npy``);
3. the batch is chosen take by take (verification, discovery, re-estimation, due, ahead):
   a task per shard ranks its pool and sends the driver a few keys, the driver finds where
   the take stops, and the shards mark what they took (their state, an ``.npz`` beside
   them);
4. the chosen rows are gathered and the plan Parquet written (durably).

Memory: a worker holds one shard at a time (its pages, their frequencies and the
selection's state), the driver a few numbers per shard plus the batch. Shards are
independent files, so workers on other machines work the same way given a shared folder.
The global order of the pages (which the verification sample's random stream and the
ties follow) is shard by shard, within a shard by host then ``url_id``: the order
:func:`single_process_inputs` lays them out in for the single-process planner.

Estimation is not sharded here: the rates come in with the pages (the estimates Parquet
``tasks.cycle.estimation.write_rate_estimates`` writes, joined with the values and costs).
"""

from __future__ import annotations

import logging
import math
import time
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, cast

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq
from numpy.typing import NDArray

from models.allocation.allocate import AllocationProblem
from models.allocation.shards import (
    Band,
    BudgetRoot,
    Cut,
    HostWarmth,
    Ranked,
    SelectionSettings,
    SelectionState,
    ShardPoint,
    ShardSelection,
    apply_cut,
    finish_shard,
    rank_shard,
    run_takes,
    shard_band,
    shard_cheap_after,
    shard_cost_upto,
    shard_frequencies,
    shard_knots,
    shard_point,
    solve_multiplier,
)
from models.planning.select import REASONS, Candidates, PlanningInputError, Slices
from tasks.store.durable import durable_write_parquet
from tasks.store.history import connect

if TYPE_CHECKING:
    from distributed import Client

log = logging.getLogger(__name__)
PAGE_COLUMNS = ("url_id", "host", "rate", "log_std", "value", "cost", "days_since_visit")
_SPLIT = """
SELECT url_id, host, rate, log_std, value, cost, days_since_visit, capacity::DOUBLE AS capacity,
       (hash(host) % $shards)::BIGINT AS shard
FROM pages
"""


@dataclass(frozen=True)
class PlanSettings:
    """The cycle's planning settings, as ``plan_cycle`` takes them."""

    budget: float
    host_capacity: float = 500.0  # visits per host per cycle where a page has no capacity
    cycle_days: float = 1.0
    slices: Slices = field(default_factory=Slices)
    seed: int = 0

    @property
    def allocation_budget(self) -> float:
        """What the allocation spends per day: the budget the reserved slices leave."""
        s = self.slices
        return self.budget * (1 - s.discovery - s.reestimation - s.verification) / self.cycle_days

    @property
    def selection(self) -> SelectionSettings:
        return SelectionSettings(self.budget, self.slices, self.cycle_days, self.seed)


@dataclass(frozen=True)
class ShardSet:
    """The shards on disk: one folder per non-empty shard, its pages and its offset."""

    folders: tuple[Path, ...]
    pages: tuple[int, ...]

    @property
    def offsets(self) -> tuple[int, ...]:
        return tuple(int(x) for x in np.r_[0, np.cumsum(self.pages)[:-1]]) if self.pages else ()

    @property
    def size(self) -> int:
        return int(sum(self.pages))


def write_shards(
    source: str | Path, directory: str | Path, shards: int, *, memory_limit: str = "1GB"
) -> ShardSet:
    """Split the pages of ``source`` (Parquet files, a glob allowed) into ``shards`` host
    shards under ``directory`` (``shard=<k>/*.parquet``), with DuckDB's ``PARTITION_BY``
    on a hash of the host; DuckDB spills to ``directory`` past ``memory_limit``."""
    if shards < 1:
        raise PlanningInputError(f"need at least one shard, got {shards}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    con = connect({"memory_limit": memory_limit, "temp_directory": str(out / ".spill")})
    pages = con.read_parquet(str(source))
    missing = [c for c in PAGE_COLUMNS if c not in pages.columns]
    if missing:
        raise PlanningInputError(f"the pages to plan lack the columns {', '.join(missing)}")
    if "capacity" not in pages.columns:  # the settings' capacity applies (read_shard)
        pages = pages.project("*, NULL::DOUBLE AS capacity")
    con.register("pages", pages)
    split = con.sql(_SPLIT, params={"shards": int(shards)})
    split.write_parquet(str(out), partition_by=["shard"], overwrite=True)
    written = con.read_parquet(str(out / "shard=*" / "*.parquet"), hive_partitioning=True)
    counts = written.aggregate("shard, count(*) AS n", "shard").order("shard").fetchall()
    con.close()
    return ShardSet(tuple(out / f"shard={k}" for k, _ in counts), tuple(int(n) for _, n in counts))


# --------------------------------------------------------------------------- one shard


@dataclass(frozen=True)
class ShardPages:
    """One shard's pages in the global order's share (by host, then url_id)."""

    url_id: NDArray[Any]
    host: NDArray[Any]  # the host labels
    codes: NDArray[Any]  # dense host codes 0..hosts-1 in the shard
    capacity: NDArray[Any]  # per shard host code, visits per cycle
    rate: NDArray[Any]
    log_std: NDArray[Any]
    value: NDArray[Any]
    cost: NDArray[Any]
    days_since_visit: NDArray[Any]

    @property
    def size(self) -> int:
        return int(self.url_id.shape[0])


def read_shard(folder: Path, host_capacity: float) -> ShardPages:
    """A shard's pages, sorted by host then url_id, hosts as dense codes.

    pyarrow reads and sorts the shard (a DuckDB connection costs more than the read at
    the sizes a shard has when many are read per second).
    """
    files = sorted(folder.glob("*.parquet"))
    table = pq.read_table(files, columns=[*PAGE_COLUMNS, "capacity"])
    table = table.sort_by([("host", "ascending"), ("url_id", "ascending")])

    def floats(name: str, fill: float) -> NDArray[np.float64]:
        column = pc.fill_null(table[name].cast(pa.float64()), fill)
        return np.asarray(column.to_numpy(), dtype=np.float64)

    host = table["host"].to_numpy(zero_copy_only=False)
    starts = np.r_[0, np.flatnonzero(host[1:] != host[:-1]) + 1] if host.size else np.zeros(0, int)
    marks = np.zeros(host.shape[0], dtype=np.int64)
    marks[starts[1:]] = 1
    return ShardPages(
        table["url_id"].to_numpy(),
        host,
        np.cumsum(marks),
        floats("capacity", float(host_capacity))[starts],
        floats("rate", np.nan),
        floats("log_std", np.nan),
        floats("value", np.nan),
        floats("cost", np.nan),
        floats("days_since_visit", np.nan),
    )


def shard_problem(pages: ShardPages, settings: PlanSettings) -> AllocationProblem:
    """The shard's allocation problem, as ``plan_cycle`` poses the whole one."""
    days = settings.cycle_days
    return AllocationProblem.build(
        pages.rate,
        settings.allocation_budget,
        weights=pages.value,
        costs=pages.cost,
        hosts=pages.codes,
        host_capacity=pages.capacity / days,
        max_frequency=1.0 / days,
    )


def _frequency_path(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.frequency.npy"


def _state_path(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.selection.npz"


def _ranked_path(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.ranked.npz"


def _warm_path(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.hosts.npz"


def _load_warmth(folder: Path) -> HostWarmth | None:
    path = _warm_path(folder)
    if not path.exists():
        return None
    with np.load(path) as z:
        return HostWarmth(float(z["mu"]), z["nu"], z["nu_slope"])


def shard_spend_task(
    folder: Path, mu: float, with_hosts: bool, settings: PlanSettings
) -> ShardPoint:
    """Dask task: the shard's spend at budget multiplier ``mu`` (its hosts solved, from
    the host multipliers of its previous trial, kept beside it)."""
    problem = shard_problem(read_shard(folder, settings.host_capacity), settings)
    point, warm = shard_point(problem, mu, with_hosts=with_hosts, warm=_load_warmth(folder))
    if with_hosts and warm is not None:
        np.savez(_warm_path(folder), mu=warm.mu, nu=warm.nu, nu_slope=warm.nu_slope)
    return point


def shard_allocate_task(folder: Path, root: BudgetRoot, settings: PlanSettings) -> float:
    """Dask task: the shard's frequencies at the root, written beside it; returns its spend."""
    pages = read_shard(folder, settings.host_capacity)
    problem = shard_problem(pages, settings)
    f = shard_frequencies(problem, root, warm=_load_warmth(folder))
    np.save(_frequency_path(folder), f)
    state = SelectionState.start(pages.size, pages.capacity.shape[0])
    _save_state(folder, state)
    return math.fsum(pages.cost * f)


def _selection(
    folder: Path, offset: int, settings: PlanSettings
) -> tuple[ShardSelection, ShardPages]:
    pages = read_shard(folder, settings.host_capacity)
    candidates = Candidates(
        page_ids=pages.url_id,
        hosts=pages.codes,
        value=pages.value,
        cost=pages.cost,
        rate=pages.rate,
        frequency=np.load(_frequency_path(folder)),
        log_std=pages.log_std,
        days_since_visit=pages.days_since_visit,
    )
    state = _load_state(folder)
    return ShardSelection(candidates, pages.capacity, offset, state), pages


def _save_state(folder: Path, state: SelectionState) -> None:
    np.savez(
        _state_path(folder),
        taken=state.taken,
        reason=state.reason.astype(np.int8),
        score=state.score,
        used=state.used,
    )


def _load_state(folder: Path) -> SelectionState:
    with np.load(_state_path(folder)) as z:
        return SelectionState(z["taken"], z["reason"].astype(np.int64), z["score"], z["used"])


def _load_ranked(folder: Path) -> Ranked:
    with np.load(_ranked_path(folder)) as z:
        return Ranked(z["index"], z["score"], z["position"], z["cost"], z["host"])


def rank_task(folder: Path, offset: int, code: int, allowed: float, settings: PlanSettings) -> Band:
    """Dask task: rank the shard's pool for take ``code``, keep it beside the shard, and
    return its knots (``models.allocation.shards.shard_knots``)."""
    shard, _ = _selection(folder, offset, settings)
    ranked = rank_shard(shard, code, settings.selection)
    np.savez(
        _ranked_path(folder),
        index=ranked.index,
        score=ranked.score,
        position=ranked.position,
        cost=ranked.cost,
        host=ranked.host,
    )
    return shard_knots(ranked, allowed)


def cost_upto_task(folder: Path, keys: Band) -> NDArray[Any]:
    return shard_cost_upto(_load_ranked(folder), keys)


def band_task(folder: Path, after: Band, upto: Band) -> Band:
    return shard_band(_load_ranked(folder), after, upto)


def cheap_after_task(folder: Path, last: Band, left: float) -> Band:
    return shard_cheap_after(_load_ranked(folder), last, left)


def apply_task(folder: Path, cut: Cut) -> float:
    """Dask task: mark the take's pages of this shard as taken; return their cost."""
    state = _load_state(folder)
    spent = apply_cut(state, _load_ranked(folder), cut)
    _save_state(folder, state)
    return spent


def finish_task(folder: Path, offset: int, settings: PlanSettings) -> pa.Table:
    """Dask task: the shard's chosen rows (global positions, reasons, scores...)."""
    shard, pages = _selection(folder, offset, settings)
    rows = finish_shard(shard, settings.selection)
    local = rows["position"] - offset
    return pa.table(
        {
            **{k: v for k, v in rows.items()},
            "url_id": pages.url_id[local],
            "host": pages.host[local],
            "frequency": shard.candidates.frequency[local],
        }
    )


# --------------------------------------------------------------------------- the driver


class DaskShards:
    """:class:`models.allocation.shards.SelectionShards` over shard folders on Dask."""

    def __init__(self, client: Client, shards: ShardSet, settings: PlanSettings) -> None:
        self.client = client
        self.folders = list(shards.folders)
        self.offsets = list(shards.offsets)
        self.settings = settings
        self.calls = 0

    def _map(self, fn: Any, *iterables: Sequence[Any], **kwargs: Any) -> list[Any]:
        self.calls += 1
        futures = self.client.map(fn, *iterables, pure=False, **kwargs)
        return cast(list[Any], self.client.gather(futures))  # type: ignore[no-untyped-call]

    def _each(self, fn: Any, *args: Any) -> list[Any]:
        n = len(self.folders)
        return self._map(fn, self.folders, *([a] * n for a in args))

    def knots(self, code: int, allowed: float) -> list[Band]:
        n = len(self.folders)
        return self._map(
            rank_task, self.folders, self.offsets, [code] * n, [allowed] * n, [self.settings] * n
        )

    def cost_upto(self, code: int, keys: Band) -> list[NDArray[Any]]:
        return self._each(cost_upto_task, keys)

    def band(self, code: int, after: Band, upto: Band) -> list[Band]:
        return self._each(band_task, after, upto)

    def cheap_after(self, code: int, last: Band, left: float) -> list[Band]:
        return self._each(cheap_after_task, last, left)

    def apply(self, cut: Cut) -> list[float]:
        return self._each(apply_task, cut)


@dataclass(frozen=True)
class ShardedPlan:
    """What :func:`plan_sharded` did: the plan's path and figures."""

    path: Path
    rows: int
    spent: float
    root: BudgetRoot
    shards: int
    pages: int
    seconds: dict[str, float]
    shard_calls: int


def plan_sharded(
    client: Client,
    shards: ShardSet,
    settings: PlanSettings,
    out: str | Path,
) -> ShardedPlan:
    """Allocate and select over ``shards`` on ``client``'s workers; write the plan Parquet.

    The plan has the columns of ``plan_cycle``'s (``url_id, host, reason, score,
    expected_gain, p_changed, cost, frequency``), ordered by reason then score.
    """
    n = len(shards.folders)
    seconds: dict[str, float] = {}
    calls = 0
    t0 = time.perf_counter()

    for folder in shards.folders:  # no warmth from an earlier plan
        _warm_path(folder).unlink(missing_ok=True)

    def oracle(mu: float, with_hosts: bool) -> list[ShardPoint]:
        nonlocal calls
        calls += 1
        started = time.perf_counter()
        futures = client.map(
            shard_spend_task,
            shards.folders,
            [mu] * n,
            [with_hosts] * n,
            [settings] * n,
            pure=False,
        )
        points = cast(list[ShardPoint], client.gather(futures))  # type: ignore[no-untyped-call]
        log.info(
            "round %d: multiplier %.17g (capacities %s) spends %.6e of %.6e (%.1f s)",
            calls,
            mu,
            "solved" if with_hosts else "ignored",
            math.fsum(p.spend for p in points),
            settings.allocation_budget,
            time.perf_counter() - started,
        )
        return points

    root = solve_multiplier(oracle, settings.allocation_budget)
    seconds["multiplier"] = time.perf_counter() - t0
    t1 = time.perf_counter()
    client.gather(  # type: ignore[no-untyped-call]
        client.map(shard_allocate_task, shards.folders, [root] * n, [settings] * n, pure=False)
    )
    seconds["frequencies"] = time.perf_counter() - t1
    t2 = time.perf_counter()
    view = DaskShards(client, shards, settings)
    run_takes(view, settings.selection)
    log.info("selection: %d rounds of shard tasks", view.calls)
    seconds["selection"] = time.perf_counter() - t2
    t3 = time.perf_counter()
    parts = client.gather(  # type: ignore[no-untyped-call]
        client.map(finish_task, shards.folders, list(shards.offsets), [settings] * n, pure=False)
    )
    table = pa.concat_tables(parts)
    order = np.lexsort((-table["score"].to_numpy(), table["reason"].to_numpy()))
    frame = table.take(pa.array(order)).to_pandas()
    plan = pd.DataFrame(
        {
            "url_id": frame["url_id"],
            "host": frame["host"],
            "reason": np.asarray(REASONS, dtype=object)[frame["reason"].to_numpy()],
            "score": frame["score"],
            "expected_gain": frame["expected_gain"],
            "p_changed": frame["expected_change"],
            "cost": frame["cost"],
            "frequency": frame["frequency"],
        }
    )
    path = Path(out)
    durable_write_parquet(pa.Table.from_pandas(plan, preserve_index=False), path)
    seconds["write"] = time.perf_counter() - t3
    return ShardedPlan(
        path,
        len(plan),
        float(plan["cost"].sum()),
        root,
        n,
        shards.size,
        seconds,
        calls + view.calls + 2,
    )


def single_process_inputs(shards: ShardSet, settings: PlanSettings) -> tuple[ShardPages, ...]:
    """Every shard read in the global order (for the single-process planner in tests and
    the benchmark's check at sizes that fit in memory)."""
    return tuple(read_shard(folder, settings.host_capacity) for folder in shards.folders)
