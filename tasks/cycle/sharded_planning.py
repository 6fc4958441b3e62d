"""Plan a cycle over host shards on Dask workers: allocate and select shard by shard.

The pages to plan (one row per page: ``url_id, host, rate, log_std, value, cost,
days_since_visit``, optionally ``capacity``, the visits per cycle its host allows,
``change_ratio`` and ``n_intervals``, the intervals observed, for the cold-start
re-estimation rule) are
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
import uuid
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
from models.allocation.freshness import FRESHNESS
from models.allocation.shards import (
    Band,
    BudgetRoot,
    Cut,
    FloatArray,
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
#: a page's shard: every page of a host in the same one, for any table with a host column
#: (the planner's pages, the estimator's statistics: shard k of one is shard k of the other)
HOST_SHARD = "(hash(host) % {shards})::BIGINT"


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
    columns = ", ".join(
        [
            *PAGE_COLUMNS,
            "capacity::DOUBLE AS capacity",
            "change_ratio::DOUBLE AS change_ratio",
            "n_intervals::DOUBLE AS n_intervals",
        ]
    )
    return partition_by_host(
        source,
        directory,
        shards,
        columns,
        required=PAGE_COLUMNS,
        what="the pages to plan",
        defaults={
            "capacity": "NULL::DOUBLE",  # the settings' capacity applies (read_shard)
            "change_ratio": "1.0::DOUBLE",  # no cheap signal (select_batch's change_ratio)
            "n_intervals": "NULL::DOUBLE",  # not known: no cold-start re-estimation
        },
        memory_limit=memory_limit,
    )


def partition_by_host(
    source: str | Path,
    directory: str | Path,
    shards: int,
    columns: str,
    *,
    required: Sequence[str],
    what: str,
    defaults: dict[str, str] | None = None,
    memory_limit: str = "1GB",
) -> ShardSet:
    """``source``'s rows (``columns``, SQL) split by :data:`HOST_SHARD` into
    ``directory/shard=<k>/``; ``defaults`` fill columns the source lacks (SQL values)."""
    if shards < 1:
        raise PlanningInputError(f"need at least one shard, got {shards}")
    out = Path(directory)
    out.mkdir(parents=True, exist_ok=True)
    con = connect({"memory_limit": memory_limit, "temp_directory": str(out / ".spill")})
    rows = con.read_parquet(str(source))
    missing = [c for c in required if c not in rows.columns]
    if missing:
        raise PlanningInputError(f"{what} lack the columns {', '.join(missing)}")
    for name, value in (defaults or {}).items():
        if name not in rows.columns:
            rows = rows.project(f"*, {value} AS {name}")
    split = rows.project(f"{columns}, {HOST_SHARD.format(shards=int(shards))} AS shard")
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
    #: each page's likelihood ratio from cheap signals; None where every page's is 1
    change_ratio: NDArray[Any] | None = None
    #: intervals observed per page (``Candidates.intervals``, the cold-start rule's input);
    #: None where no page's is known. A page without its count is never cold, nor its host
    intervals: NDArray[Any] | None = None

    @property
    def size(self) -> int:
        return int(self.codes.shape[0])


def _sorted_table(folder: Path, columns: Sequence[str]) -> pa.Table:
    files = sorted(folder.glob("*.parquet"))
    table = pq.read_table(files, columns=list(columns))
    return table.sort_by([("host", "ascending"), ("url_id", "ascending")])


def read_shard(folder: Path, host_capacity: float, *, compact: bool = False) -> ShardPages:
    """A shard's pages, sorted by host then url_id, hosts as dense codes.

    pyarrow reads and sorts the shard (a DuckDB connection costs more than the read at
    the sizes a shard has when many are read per second). ``compact``: what a worker keeps
    between rounds: a float32 column stays float32 (every float32 is a float64 exactly, so
    the planner computing in float64 from it sees the values the single-process planner
    sees), host codes are int32, and the labels (``url_id``, ``host``) are left out (empty):
    only the chosen rows need them, read again at the end (:func:`_labels`).
    """
    files = sorted(folder.glob("*.parquet"))
    names = pq.read_schema(files[0]).names if files else []
    optional = [c for c in ("change_ratio", "n_intervals") if c in names]
    table = _sorted_table(folder, [*PAGE_COLUMNS, "capacity", *optional])

    def floats(name: str, fill: float) -> NDArray[Any]:
        column = table[name]
        narrow = compact and column.type == pa.float32()
        column = pc.fill_null(column.cast(pa.float32() if narrow else pa.float64()), fill)
        return np.asarray(column.to_numpy(), dtype=np.float32 if narrow else np.float64)

    host = table["host"].to_numpy(zero_copy_only=False)
    starts = np.r_[0, np.flatnonzero(host[1:] != host[:-1]) + 1] if host.size else np.zeros(0, int)
    marks = np.zeros(host.shape[0], dtype=np.int32 if compact else np.int64)
    marks[starts[1:]] = 1
    capacity = pc.fill_null(table["capacity"].cast(pa.float64()), float(host_capacity))
    url_id = table["url_id"].to_numpy()
    if compact:
        url_id, host = url_id[:0], host[:0]
    ratio = floats("change_ratio", 1.0) if "change_ratio" in optional else None
    if ratio is not None and (ratio == 1.0).all():
        ratio = None
    intervals = None
    if "n_intervals" in optional and table["n_intervals"].null_count < table.num_rows:
        intervals = floats("n_intervals", np.inf)  # unknown: never cold (nor its host)
    return ShardPages(
        url_id,
        host,
        np.cumsum(marks, dtype=marks.dtype),
        np.asarray(capacity.to_numpy(), dtype=np.float64)[starts],
        floats("rate", np.nan),
        floats("log_std", np.nan),
        floats("value", np.nan),
        floats("cost", np.nan),
        floats("days_since_visit", np.nan),
        ratio,
        intervals,
    )


def _labels(folder: Path) -> tuple[NDArray[Any], NDArray[Any]]:
    """The shard's ``url_id`` and ``host`` in its order (as :func:`read_shard` sorts)."""
    table = _sorted_table(folder, ["url_id", "host"])
    return table["url_id"].to_numpy(), table["host"].to_numpy(zero_copy_only=False)


def _f64(values: NDArray[Any]) -> FloatArray:
    return np.asarray(values, dtype=np.float64)


def shard_problem(pages: ShardPages, settings: PlanSettings) -> AllocationProblem:
    """The shard's allocation problem, as ``plan_cycle`` poses the whole one (validated)."""
    days = settings.cycle_days
    return AllocationProblem.build(
        _f64(pages.rate),
        settings.allocation_budget,
        weights=_f64(pages.value),
        costs=_f64(pages.cost),
        hosts=np.asarray(pages.codes, dtype=np.int64),
        host_capacity=pages.capacity / days,
        max_frequency=1.0 / days,
    )


def _round_problem(pages: ShardPages, settings: PlanSettings) -> AllocationProblem:
    """:func:`shard_problem` without its checks (passed once, at load), in float64 for one
    round, the page bounds as zero-stride views: the same numbers, none kept."""
    n, days = pages.size, settings.cycle_days
    return AllocationProblem(
        _f64(pages.rate),
        settings.allocation_budget,
        _f64(pages.cost),
        _f64(pages.value),
        np.broadcast_to(np.float64(0.0), (n,)),
        np.broadcast_to(np.float64(1.0 / days), (n,)),
        np.asarray(pages.codes, dtype=np.int64),
        pages.capacity / days,
        FRESHNESS,
    )


def _frequency_path(folder: Path) -> Path:
    return folder.parent / f".{folder.name}.frequency.npy"


@dataclass
class Resident:
    """One shard as its worker keeps it between rounds (compact pages, solver warmth,
    frequencies, the selection's state and the take's ranked pool)."""

    folder: Path
    offset: int
    pages: ShardPages
    settings: PlanSettings
    warm: HostWarmth | None = None
    frequency: FloatArray | None = None
    state: SelectionState | None = None
    ranked: Ranked | None = None

    def selection(self) -> ShardSelection:
        """The shard's candidates in float64 (transient) and its selection state."""
        p = self.pages
        if self.frequency is None or self.state is None:
            raise RuntimeError(f"shard {self.folder} has no frequencies yet")
        candidates = Candidates(
            page_ids=np.arange(p.size),
            hosts=np.asarray(p.codes, dtype=np.int64),
            value=_f64(p.value),
            cost=_f64(p.cost),
            rate=_f64(p.rate),
            frequency=self.frequency,
            log_std=_f64(p.log_std),
            days_since_visit=_f64(p.days_since_visit),
            intervals=None if p.intervals is None else _f64(p.intervals),
        )
        ratio = None if p.change_ratio is None else _f64(p.change_ratio)
        return ShardSelection(candidates, p.capacity, self.offset, self.state, ratio)

    def pool(self) -> Ranked:
        if self.ranked is None:
            raise RuntimeError(f"shard {self.folder} has no ranked pool (knots come first)")
        return self.ranked

    @property
    def nbytes(self) -> int:
        p = self.pages
        arrays = [p.codes, p.capacity, p.rate, p.log_std, p.value, p.cost, p.days_since_visit]
        arrays += [a for a in (p.change_ratio, p.intervals) if a is not None]
        if self.frequency is not None:
            arrays.append(self.frequency)
        if self.state is not None:
            s = self.state
            arrays += [s.taken, s.reason, s.score, s.used]
        if self.ranked is not None:
            r = self.ranked
            arrays += [r.index, r.score, r.position, r.cost, r.host]
        return int(sum(a.nbytes for a in arrays))


#: on each worker process: the shards it holds, by plan token and folder (see DaskShards)
_RESIDENT: dict[tuple[str, str], Resident] = {}


def _held(token: str, folder: Path) -> Resident:
    try:
        return _RESIDENT[(token, str(folder))]
    except KeyError:
        raise RuntimeError(
            f"shard {folder} is not held by this worker (was it restarted mid-plan?)"
        ) from None


def load_task(
    token: str, folders: Sequence[Path], offsets: Sequence[int], settings: PlanSettings
) -> list[int]:
    """Worker task: read these shards once, check their problems, keep them; their sizes."""
    sizes = []
    for folder, offset in zip(folders, offsets, strict=True):
        pages = read_shard(folder, settings.host_capacity, compact=True)
        shard_problem(pages, settings)  # the checks, once: bad input fails here
        _RESIDENT[(token, str(folder))] = Resident(folder, int(offset), pages, settings)
        sizes.append(pages.size)
    return sizes


def release_task(token: str) -> int:
    """Worker task (``client.run``): forget a plan's shards; how many bytes were held."""
    held = [key for key in _RESIDENT if key[0] == token]
    freed = sum(_RESIDENT[key].nbytes for key in held)
    for key in held:
        del _RESIDENT[key]
    return freed


def held_bytes_task(token: str) -> int:
    """Worker task (``client.run``): the bytes of a plan's shards this worker holds."""
    return sum(r.nbytes for key, r in _RESIDENT.items() if key[0] == token)


def spend_task(
    token: str, folders: Sequence[Path], mu: float, with_hosts: bool
) -> list[ShardPoint]:
    """Worker task: each shard's spend at budget multiplier ``mu`` (its hosts solved from
    the host multipliers of its previous trial)."""
    out = []
    for folder in folders:
        r = _held(token, folder)
        problem = _round_problem(r.pages, r.settings)
        point, r.warm = shard_point(problem, mu, with_hosts=with_hosts, warm=r.warm)
        out.append(point)
    return out


def allocate_task(token: str, folders: Sequence[Path], root: BudgetRoot) -> list[float]:
    """Worker task: each shard's frequencies at the root (kept, and written beside the
    shard as a ``.npy``); returns their spends."""
    out = []
    for folder in folders:
        r = _held(token, folder)
        f = shard_frequencies(_round_problem(r.pages, r.settings), root, warm=r.warm)
        np.save(_frequency_path(folder), f)
        r.frequency = f
        r.state = SelectionState.start(r.pages.size, r.pages.capacity.shape[0])
        out.append(math.fsum(_f64(r.pages.cost) * f))
    return out


def knots_task(token: str, folders: Sequence[Path], code: int, allowed: float) -> list[Band]:
    """Worker task: rank each shard's pool for take ``code`` (kept until the take is
    applied) and return its knots (``models.allocation.shards.shard_knots``)."""
    out = []
    for folder in folders:
        r = _held(token, folder)
        r.ranked = None  # the last take's pool goes before this one is built
        r.ranked = rank_shard(r.selection(), code, r.settings.selection)
        out.append(shard_knots(r.ranked, allowed))
    return out


def cost_upto_task(token: str, folders: Sequence[Path], keys: Band) -> list[NDArray[Any]]:
    return [shard_cost_upto(_held(token, f).pool(), keys) for f in folders]


def band_task(token: str, folders: Sequence[Path], after: Band, upto: Band) -> list[Band]:
    return [shard_band(_held(token, f).pool(), after, upto) for f in folders]


def cheap_after_task(token: str, folders: Sequence[Path], last: Band, left: float) -> list[Band]:
    return [shard_cheap_after(_held(token, f).pool(), last, left) for f in folders]


def apply_task(token: str, folders: Sequence[Path], cut: Cut) -> list[float]:
    """Worker task: mark the take's pages of each shard as taken; return their costs."""
    out = []
    for folder in folders:
        r = _held(token, folder)
        if r.state is None:
            raise RuntimeError(f"shard {folder} has no selection state")
        out.append(apply_cut(r.state, r.pool(), cut))
        r.ranked = None
    return out


def finish_task(token: str, folders: Sequence[Path]) -> list[pa.Table]:
    """Worker task: each shard's chosen rows (global positions, reasons, scores...)."""
    out = []
    for folder in folders:
        r = _held(token, folder)
        shard = r.selection()
        rows = finish_shard(shard, r.settings.selection)
        local = rows["position"] - r.offset
        url_id, host = _labels(folder)
        out.append(
            pa.table(
                {
                    **{k: v for k, v in rows.items()},
                    "url_id": url_id[local],
                    "host": host[local],
                    "frequency": shard.candidates.frequency[local],
                }
            )
        )
    return out


# --------------------------------------------------------------------------- the driver


def assign_shards(pages: Sequence[int], workers: Sequence[str]) -> dict[str, list[int]]:
    """Shards to workers, largest first to the least loaded (pages), each worker's in
    shard order."""
    if not workers:
        raise PlanningInputError("no Dask workers to plan on")
    load = dict.fromkeys(workers, 0)
    out: dict[str, list[int]] = {w: [] for w in workers}
    for k in sorted(range(len(pages)), key=lambda k: (-pages[k], k)):
        w = min(workers, key=lambda w: (load[w], w))
        out[w].append(k)
        load[w] += pages[k]
    return {w: sorted(ks) for w, ks in out.items() if ks}


class PinnedShards:
    """Shard folders pinned to Dask workers, each worker holding its shards between
    rounds (under :attr:`token`, in its process: see :class:`Resident`).

    Every shard goes to one worker (:func:`assign_shards`); a round is one task per worker
    over all of its shards (:meth:`call`), so its overhead does not grow with the number
    of shards, and the answers come back in shard order.
    """

    def __init__(self, client: Client, folders: Sequence[Path], pages: Sequence[int]) -> None:
        self.client = client
        self.folders = list(folders)
        self.token = uuid.uuid4().hex
        workers = sorted(client.scheduler_info()["workers"])
        self.assignment = assign_shards(list(pages), workers)
        self.calls = 0

    def call(self, fn: Any, *args: Any, per_shard: Sequence[Any] | None = None) -> list[Any]:
        """``fn(token, its folders, [its per_shard values,] *args)`` on every worker."""
        self.calls += 1
        futures = []
        for worker, ks in self.assignment.items():
            extra = ([per_shard[k] for k in ks],) if per_shard is not None else ()
            futures.append(
                self.client.submit(
                    fn,
                    self.token,
                    [self.folders[k] for k in ks],
                    *extra,
                    *args,
                    workers=[worker],
                    allow_other_workers=False,
                    pure=False,
                )
            )
        answers = self.client.gather(futures)  # type: ignore[no-untyped-call]
        out: list[Any] = [None] * len(self.folders)
        for ks, answer in zip(self.assignment.values(), answers, strict=True):
            for k, value in zip(ks, answer, strict=True):
                out[k] = value
        return out


class DaskShards(PinnedShards):
    """The planner's shards held by Dask workers between rounds: the driver's view.

    Each worker reads its shards once (:meth:`load`) and keeps them, compact
    (:class:`Resident`), until :meth:`release`. Implements
    :class:`models.allocation.shards.SelectionShards` and the allocation's spend oracle.
    """

    def __init__(self, client: Client, shards: ShardSet, settings: PlanSettings) -> None:
        super().__init__(client, shards.folders, shards.pages)
        self.offsets = list(shards.offsets)
        self.settings = settings

    def _call(self, fn: Any, *args: Any, per_shard: Sequence[Any] | None = None) -> list[Any]:
        return self.call(fn, *args, per_shard=per_shard)

    def load(self) -> None:
        self._call(load_task, self.settings, per_shard=self.offsets)

    def held_bytes(self) -> dict[str, int]:
        return cast(dict[str, int], self.client.run(held_bytes_task, self.token))

    def release(self) -> None:
        self.client.run(release_task, self.token)

    def spend(self, mu: float, with_hosts: bool) -> list[ShardPoint]:
        return self._call(spend_task, mu, with_hosts)

    def allocate(self, root: BudgetRoot) -> list[float]:
        return self._call(allocate_task, root)

    def knots(self, code: int, allowed: float) -> list[Band]:
        return self._call(knots_task, code, allowed)

    def cost_upto(self, code: int, keys: Band) -> list[NDArray[Any]]:
        return self._call(cost_upto_task, keys)

    def band(self, code: int, after: Band, upto: Band) -> list[Band]:
        return self._call(band_task, after, upto)

    def cheap_after(self, code: int, last: Band, left: float) -> list[Band]:
        return self._call(cheap_after_task, last, left)

    def apply(self, cut: Cut) -> list[float]:
        return self._call(apply_task, cut)

    def finish(self) -> list[pa.Table]:
        return self._call(finish_task)


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
    held_bytes: dict[str, int]


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
    seconds: dict[str, float] = {}
    view = DaskShards(client, shards, settings)
    t0 = time.perf_counter()
    try:
        view.load()
        seconds["load"] = time.perf_counter() - t0
        t0 = time.perf_counter()
        rounds = 0

        def oracle(mu: float, with_hosts: bool) -> list[ShardPoint]:
            nonlocal rounds
            rounds += 1
            started = time.perf_counter()
            points = view.spend(mu, with_hosts)
            log.info(
                "round %d: multiplier %.17g (capacities %s) spends %.6e of %.6e (%.1f s)",
                rounds,
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
        view.allocate(root)
        seconds["frequencies"] = time.perf_counter() - t1
        t2 = time.perf_counter()
        before = view.calls
        run_takes(view, settings.selection)
        log.info("selection: %d rounds of shard tasks", view.calls - before)
        seconds["selection"] = time.perf_counter() - t2
        held = view.held_bytes()
        t3 = time.perf_counter()
        parts = view.finish()
    finally:
        view.release()
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
        len(shards.folders),
        shards.size,
        seconds,
        view.calls,
        held,
    )


def single_process_inputs(shards: ShardSet, settings: PlanSettings) -> tuple[ShardPages, ...]:
    """Every shard read in the global order (for the single-process planner in tests and
    the benchmark's check at sizes that fit in memory)."""
    return tuple(read_shard(folder, settings.host_capacity) for folder in shards.folders)
