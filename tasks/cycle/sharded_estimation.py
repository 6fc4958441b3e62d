"""Estimate change rates over host shards on Dask workers, each from its own statistics.

The statistics (one row per page, ``PAGE_STATS_FILE_SCHEMA``: the store's statistics
file, or any file like it) are split by :data:`tasks.cycle.sharded_planning.HOST_SHARD`
into Parquet shards (:func:`write_stats_shards`), so shard k of the statistics holds the
hosts of shard k of the planner's pages. Each worker reads its shards once
(``tasks.cycle.estimation.estimation_inputs``: the single-process reader, grouped by host)
and keeps them; the driver fits the mixture prior's web-level parameters from the shards'
sums (``models.estimation.sharded_mixture.fit_sharded_mixture``); every shard then writes
its estimates beside it (``<out>/shard=<k>/estimates.parquet``, the columns of
``tasks.cycle.estimation.load_rate_estimates`` but ``group``, which is the host).

Only the mixture prior (the planner's) is sharded, grouped by host. Where it cannot be
fitted the single-process estimator falls back to weaker priors; this one raises
(``EstimationInputError``) naming the shard and what was wrong.
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import pandas as pd
import pyarrow as pa

from models.estimation.change_rate import _implausible
from models.estimation.gamma_core import MAX_RATE, MIN_RATE, rate_cap
from models.estimation.mixture_prior import MixturePrior
from models.estimation.rate_data import EstimationInputError
from models.estimation.sharded_mixture import (
    FitRecord,
    FitSettings,
    FloatArray,
    MixtureShard,
    WebPrior,
    fit_sharded_mixture,
)
from models.estimation.synthetic import allocation_web, observation_cycles
from models.schemas import PAGE_STATS_FILE_SCHEMA
from tasks.cycle.estimation import EstimationInputs, estimation_inputs
from tasks.cycle.sharded_planning import PinnedShards, ShardSet, partition_by_host
from tasks.store.durable import durable_write_parquet
from tasks.store.history import connect

if TYPE_CHECKING:
    from distributed import Client

#: the statistics' columns every shard needs (the rest default to 0: no ages, no evidence)
STATS_REQUIRED = ("url_id", "host", "n_intervals", "n_changed", "unchanged_days")


def write_stats_shards(
    source: str | Path, directory: str | Path, shards: int, *, memory_limit: str = "1GB"
) -> ShardSet:
    """Split the statistics of ``source`` into ``shards`` host shards under ``directory``
    (the planner's split: the same host lands in the same shard number)."""
    defaults = {f.name: f"0::{_sql_type(f.type)}" for f in PAGE_STATS_FILE_SCHEMA}
    columns = ", ".join(f.name for f in PAGE_STATS_FILE_SCHEMA)
    return partition_by_host(
        source,
        directory,
        shards,
        columns,
        required=STATS_REQUIRED,
        what="the statistics to estimate from",
        defaults={k: v for k, v in defaults.items() if k not in STATS_REQUIRED},
        memory_limit=memory_limit,
    )


def _sql_type(kind: pa.DataType) -> str:
    return "BIGINT" if pa.types.is_integer(kind) else "DOUBLE"


def read_stats_shard(folder: Path) -> EstimationInputs:
    """A shard's estimation inputs (``estimation_inputs``, grouped by host), its pages in
    the global order's share: by host (codes in host order), then url_id."""
    con = connect()
    try:
        stats = con.read_parquet(str(folder / "*.parquet"))
        inputs = estimation_inputs(con, stats, None)
    finally:
        con.close()
    order = np.lexsort((inputs.moments.page_ids, inputs.host_codes))
    return EstimationInputs(
        inputs.moments.rows(order),
        inputs.group_codes[order],
        inputs.group_names,
        inputs.host_codes[order],
        inputs.host_names,
    )


@dataclass
class HeldStats:
    """One statistics shard as its worker keeps it between rounds."""

    inputs: EstimationInputs
    shard: MixtureShard


#: on each worker process: the statistics shards it holds, by token and folder
_HELD: dict[tuple[str, str], HeldStats] = {}


def _held(token: str, folder: Path) -> HeldStats:
    try:
        return _HELD[(token, str(folder))]
    except KeyError:
        raise RuntimeError(
            f"statistics shard {folder} is not held by this worker (restarted mid-fit?)"
        ) from None


def _shards(token: str, folders: Sequence[Path]) -> list[MixtureShard]:
    return [_held(token, f).shard for f in folders]


def load_stats_task(token: str, folders: Sequence[Path]) -> list[int]:
    out = []
    for folder in folders:
        inputs = read_stats_shard(folder)
        shard = MixtureShard(inputs.moments, inputs.group_codes, len(inputs.group_names))
        _HELD[(token, str(folder))] = HeldStats(inputs, shard)
        out.append(inputs.moments.size)
    return out


def release_stats_task(token: str) -> int:
    held = [key for key in _HELD if key[0] == token]
    for key in held:
        del _HELD[key]
    return len(held)


def counts_task(token: str, folders: Sequence[Path]) -> list[tuple[int, int]]:
    return [s.counts() for s in _shards(token, folders)]


def draw_sample_task(
    token: str, folders: Sequence[Path], offsets: Sequence[int], take: float, seed: int
) -> list[int]:
    return [
        s.draw_sample(take, o, seed) for s, o in zip(_shards(token, folders), offsets, strict=True)
    ]


def level_likelihood_task(
    token: str, folders: Sequence[Path], every_page: MixturePrior | None
) -> list[int]:
    return [s.level_likelihood(every_page) for s in _shards(token, folders)]


def level_share_task(token: str, folders: Sequence[Path], prior: FloatArray) -> list[FloatArray]:
    return [s.level_share(prior) for s in _shards(token, folders)]


def level_posterior_task(token: str, folders: Sequence[Path], prior: FloatArray) -> list[None]:
    for s in _shards(token, folders):
        s.level_posterior(prior)
    return [None] * len(folders)


def shape_loss_task(token: str, folders: Sequence[Path], log_shape: float) -> list[float]:
    return [s.shape_loss(log_shape) for s in _shards(token, folders)]


def odd_sum_task(token: str, folders: Sequence[Path], web: WebPrior) -> list[float]:
    return [s.odd_sum(web) for s in _shards(token, folders)]


def estimate_task(
    token: str, folders: Sequence[Path], out: Path, web: WebPrior
) -> list[tuple[str, int]]:
    """Worker task: each shard's estimates under the fitted prior, written as
    ``<out>/<shard folder name>/estimates.parquet``; their paths and row counts."""
    done = []
    for folder in folders:
        held = _held(token, folder)
        est = held.shard.estimate(web)
        problem = _implausible(est, rate_cap(held.inputs.moments.ages()[0], MAX_RATE), MIN_RATE)
        if problem:
            raise EstimationInputError(
                f"shard {folder.name}: the mixture prior gives implausible estimates ({problem})"
            )
        inputs = held.inputs
        host = pa.DictionaryArray.from_arrays(
            pa.array(inputs.host_codes.astype(np.int32)), inputs.host_names
        )
        table = pa.table(
            {
                "url_id": est.page_ids,
                "host": host,
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
        path = out / folder.name / "estimates.parquet"
        path.parent.mkdir(parents=True, exist_ok=True)
        durable_write_parquet(table, path)
        done.append((str(path), table.num_rows))
    return done


class DaskMixtureShards(PinnedShards):
    """:class:`models.estimation.sharded_mixture.MixtureShards` over statistics shards
    held by Dask workers (read once, by :meth:`load`)."""

    def load(self) -> list[int]:
        return self.call(load_stats_task)

    def release(self) -> None:
        self.client.run(release_stats_task, self.token)

    def counts(self) -> list[tuple[int, int]]:
        return self.call(counts_task)

    def draw_sample(self, take: float, offsets: Sequence[int], seed: int) -> list[int]:
        return self.call(draw_sample_task, take, seed, per_shard=offsets)

    def level_likelihood(self, every_page: MixturePrior | None) -> list[int]:
        return self.call(level_likelihood_task, every_page)

    def level_share(self, prior: FloatArray) -> list[FloatArray]:
        return self.call(level_share_task, prior)

    def level_posterior(self, prior: FloatArray) -> None:
        self.call(level_posterior_task, prior)

    def shape_loss(self, log_shape: float) -> list[float]:
        return self.call(shape_loss_task, log_shape)

    def odd_sum(self, web: WebPrior) -> list[float]:
        return self.call(odd_sum_task, web)

    def estimate(self, out: Path, web: WebPrior) -> list[tuple[str, int]]:
        return self.call(estimate_task, out, web)


@dataclass(frozen=True)
class ShardedEstimates:
    """What :func:`estimate_sharded` did: the estimates' files, the fit, the figures."""

    paths: tuple[Path, ...]
    rows: int
    fit: FitRecord
    seconds: dict[str, float]
    rounds: int


def estimate_sharded(
    client: Client,
    shards: ShardSet,
    out: str | Path,
    settings: FitSettings | None = None,
) -> ShardedEstimates:
    """Fit the mixture prior over ``shards`` on ``client``'s workers and write every
    shard's estimates under ``out`` (``<out>/shard=<k>/estimates.parquet``)."""
    seconds: dict[str, float] = {}
    view = DaskMixtureShards(client, shards.folders, shards.pages)
    t = time.perf_counter()
    try:
        view.load()
        seconds["load"] = time.perf_counter() - t
        t = time.perf_counter()
        fit = fit_sharded_mixture(view, settings)
        seconds["fit"] = time.perf_counter() - t
        t = time.perf_counter()
        written = view.estimate(Path(out), fit.web)
        seconds["estimate"] = time.perf_counter() - t
    finally:
        view.release()
    return ShardedEstimates(
        tuple(Path(p) for p, _ in written),
        sum(n for _, n in written),
        fit,
        seconds,
        view.calls,
    )


def synthetic_stats(pages: int, hosts: int, cycles: int, seed: int = 3) -> pa.Table:
    """Statistics of a synthetic web (``PAGE_STATS_FILE_SCHEMA``): ``allocation_web``'s
    pages observed once a cycle (``observation_cycles``), each from a random first cycle
    (a page first seen in the last cycle has no interval: never observed); no ages."""
    web = allocation_web(pages, hosts, seed=seed)
    first = np.random.default_rng(seed + 1).integers(0, cycles + 1, pages)
    sums = {k: np.zeros(pages) for k in ("n", "c", "u", "s1", "s2", "s3")}
    for cycle, interval, changed, _ in observation_cycles(web.rates, cycles, seed=seed):
        seen = ~np.isnan(interval) & (cycle > first)
        hit = changed & seen
        t = np.where(hit, interval, 0.0)
        sums["n"] += seen
        sums["c"] += hit
        sums["u"] += np.where(seen & ~hit, interval, 0.0)
        sums["s1"] += t
        sums["s2"] += t * t
        sums["s3"] += t * t * t
    columns: dict[str, Any] = {
        "url_id": np.arange(pages, dtype=np.int64) * 7919 + 1,
        "host": pa.array([f"h{h}.shard.test" for h in range(hosts)]).take(pa.array(web.hosts)),
        "n_intervals": sums["n"].astype(np.int64),
        "n_changed": sums["c"].astype(np.int64),
        "unchanged_days": sums["u"],
        "changed_sum": sums["s1"],
        "changed_sum_sq": sums["s2"],
        "changed_sum_cube": sums["s3"],
    }
    zeros = np.zeros(pages)
    for field in PAGE_STATS_FILE_SCHEMA:
        columns.setdefault(field.name, pa.array(zeros).cast(field.type))
    table = pa.table({f.name: columns[f.name] for f in PAGE_STATS_FILE_SCHEMA})
    return table.cast(PAGE_STATS_FILE_SCHEMA)


def single_process_estimates(shards: ShardSet) -> tuple[pd.DataFrame, MixturePrior]:
    """The single-process estimator (``estimate_with_mixture_prior``, what
    ``estimate_from_moments(prior="mixture")`` runs) on every shard's pages laid end to end,
    hosts coded shard by shard: the sharded estimates' reference."""
    from models.estimation.mixture_prior import estimate_with_mixture_prior
    from models.estimation.rate_data import PageMoments

    parts = [read_stats_shard(f) for f in shards.folders]
    shift = np.cumsum([0] + [len(p.group_names) for p in parts[:-1]])
    codes = np.concatenate([p.group_codes + s for p, s in zip(parts, shift, strict=True)])
    values: dict[str, Any] = {}
    for name in PageMoments.__dataclass_fields__:
        present = getattr(parts[0].moments, name) is not None
        values[name] = (
            np.concatenate([getattr(p.moments, name) for p in parts]) if present else None
        )
    moments = PageMoments(**values)
    est, prior = estimate_with_mixture_prior(moments, codes)
    frame = pd.DataFrame(
        {
            "url_id": est.page_ids,
            "rate": est.rate,
            "rate_low": est.rate_low,
            "rate_high": est.rate_high,
            "log_std": est.log_std,
            "prior_rate": est.prior_rate,
        }
    )
    return frame, prior
