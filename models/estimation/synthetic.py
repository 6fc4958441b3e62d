"""Synthetic webs and fetch histories with known true change rates.

Used by tests and benchmarks to check estimates against the truth. The rate
distribution follows the measured web: a large share of pages that practically never
change (Fetterly et al. 2003: ~65% unchanged over 11 weekly crawls), a fifth that change
at every daily visit or faster (Cho & Garcia-Molina 2000), and a long middle. Host sizes
are heavy-tailed and each host scales its pages' rates, so smoothing toward the host pays.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import numpy as np
import pyarrow as pa
from numpy.typing import NDArray

from models.discovery.urls import url_id
from models.schemas import HISTORY_SCHEMA

VALUE_TIERS = np.array([1.0, 2.0, 5.0, 10.0])
TIER_SHARES = np.array([0.6, 0.25, 0.1, 0.05])
_EPOCH_US = 1_767_225_600_000_000  # 2026-01-01T00:00:00Z in microseconds
_DAY_US = 86_400_000_000


@dataclass(frozen=True)
class SyntheticWeb:
    """Pages with known true change rates (changes/day), values and costs."""

    url_ids: NDArray[np.int64]
    urls: list[str]
    host_index: NDArray[np.int64]
    host_names: list[str]
    rate: NDArray[np.float64]
    value: NDArray[np.float64]
    cost: NDArray[np.float64]

    @property
    def size(self) -> int:
        return int(self.url_ids.shape[0])

    def catalog_table(self) -> pa.Table:
        """The web as a page catalog (models.schemas.CATALOG_SCHEMA)."""
        from models.schemas import CATALOG_SCHEMA

        hosts = pa.DictionaryArray.from_arrays(
            pa.array(self.host_index, pa.int32()), pa.array(self.host_names)
        ).cast(pa.string())
        n = self.size
        return pa.table(
            {
                "url_id": self.url_ids,
                "url": self.urls,
                "host": hosts,
                "value": self.value,
                "cost": self.cost,
                "group": hosts,
                "source": pa.array(["synthetic"] * n),
                "discovered_at": pa.array(np.full(n, _EPOCH_US), pa.timestamp("us", tz="UTC")),
                "lastmod": pa.nulls(n, pa.timestamp("us", tz="UTC")),
                "changefreq": pa.nulls(n, pa.string()),
                "canonical": pa.nulls(n, pa.string()),
                "near_duplicate_of": pa.nulls(n, pa.int64()),
            },
            schema=CATALOG_SCHEMA,
        )


def generate_web(n_pages: int, *, n_hosts: int | None = None, seed: int = 0) -> SyntheticWeb:
    """A web of ``n_pages`` over heavy-tailed hosts (default one host per 200 pages)."""
    if n_pages <= 0:
        raise ValueError("n_pages must be positive")
    rng = np.random.default_rng(seed)
    n_hosts = n_hosts or max(1, n_pages // 200)
    host_weight = rng.pareto(1.2, n_hosts) + 1.0
    host_index = rng.choice(n_hosts, size=n_pages, p=host_weight / host_weight.sum())
    host_effect = rng.lognormal(0.0, 0.8, n_hosts)

    kind = rng.choice(3, size=n_pages, p=[0.45, 0.35, 0.20])
    static = rng.lognormal(np.log(1 / 400), 1.0, n_pages)  # about once a year or less
    middle = rng.lognormal(np.log(1 / 15), 1.3, n_pages)  # weeks to days
    fast = rng.lognormal(np.log(2.5), 0.8, n_pages)  # daily or faster
    base = np.choose(kind, [static, middle, fast])
    rate = np.clip(base * host_effect[host_index], 1e-5, 48.0)

    value = VALUE_TIERS[rng.choice(len(VALUE_TIERS), size=n_pages, p=TIER_SHARES)]
    cost = np.round(rng.lognormal(0.0, 0.4, n_pages), 3)
    host_names = [f"h{h}.sandbox.test" for h in range(n_hosts)]
    urls = [f"http://{host_names[h]}/p/{i}" for i, h in enumerate(host_index.tolist())]
    ids = np.fromiter((url_id(u) for u in urls), dtype=np.int64, count=n_pages)
    return SyntheticWeb(ids, urls, host_index.astype(np.int64), host_names, rate, value, cost)


def generate_history(
    web: SyntheticWeb,
    n_cycles: int,
    *,
    cycle_days: float = 1.0,
    visit_probability: float = 1.0,
    failure_rate: float = 0.02,
    first_cycle: int = 0,
    seed: int = 0,
) -> Iterator[tuple[int, pa.Table]]:
    """Yield ``(cycle_id, table)`` for each cycle, tables in HISTORY_SCHEMA.

    Every page is visited in a cycle with ``visit_probability`` at a random time of the
    cycle; a visit fails (outcome ``error``, not an observation) with ``failure_rate``.
    ``changed`` and ``interval_days`` are filled relative to the page's previous
    successful observation, exactly as the history store would link them; the first
    observation of a page has both NULL. Changes follow a Poisson process of ``web.rate``.
    """
    rng = np.random.default_rng(seed)
    n = web.size
    last_seen = np.full(n, np.nan)  # days since epoch of the last observation
    host_codes = pa.array(web.host_index, pa.int32())
    host_dict = pa.array(web.host_names)
    for c in range(n_cycles):
        cycle_id = first_cycle + c
        visited = np.flatnonzero(rng.random(n) < visit_probability)
        when = (cycle_id + rng.random(visited.shape[0])) * cycle_days
        ok = rng.random(visited.shape[0]) >= failure_rate
        prev = last_seen[visited]
        has_prev = ok & ~np.isnan(prev)
        interval = np.where(has_prev, when - prev, np.nan)
        p_change = -np.expm1(-web.rate[visited] * np.where(has_prev, interval, 0.0))
        changed = rng.random(visited.shape[0]) < p_change
        last_seen[visited[ok]] = when[ok]

        m = visited.shape[0]
        fetched_us = (_EPOCH_US + when * _DAY_US).astype(np.int64)
        hosts = pa.DictionaryArray.from_arrays(host_codes.take(pa.array(visited)), host_dict)
        table = pa.table(
            {
                "url_id": web.url_ids[visited],
                "host": hosts.cast(pa.string()),
                "cycle_id": np.full(m, cycle_id, dtype=np.int64),
                "fetched_at": pa.array(fetched_us, pa.timestamp("us", tz="UTC")),
                "status": pa.array(np.where(ok, 200, 503).astype(np.int16)),
                "outcome": pa.array(np.where(ok, "ok", "error")),
                "changed": pa.array(changed, mask=~has_prev),
                "interval_days": pa.array(interval, mask=~has_prev),
                "bytes": pa.array(np.where(ok, 20_000, 300).astype(np.int64)),
                "latency_s": pa.array(np.full(m, 0.05)),
                "cost": pa.array(web.cost[visited]),
            }
        )
        yield cycle_id, _conform(table)


def _conform(table: pa.Table) -> pa.Table:
    """Add the schema's missing columns as NULL and order columns as the schema does."""
    cols = [
        table.column(f.name) if f.name in table.column_names else pa.nulls(table.num_rows, f.type)
        for f in HISTORY_SCHEMA
    ]
    return pa.Table.from_arrays(cols, schema=HISTORY_SCHEMA)


@dataclass(frozen=True)
class AllocationWeb:
    """Pages of a synthetic web for allocation benchmarks and tests (no history)."""

    rates: NDArray[np.float64]
    weights: NDArray[np.float64]
    costs: NDArray[np.float64]
    hosts: NDArray[np.int64]
    pages_per_host: NDArray[np.int64]


def allocation_web(n_pages: int, n_hosts: int, *, seed: int = 7) -> AllocationWeb:
    """A web like the measured one for the allocation solver: heavy-tailed host sizes,
    static / middle / fast page kinds, value tiers 1/2/5/10, lognormal costs."""
    rng = np.random.default_rng(seed)
    host_weight = rng.pareto(1.2, n_hosts) + 1.0
    hosts = rng.choice(n_hosts, size=n_pages, p=host_weight / host_weight.sum())
    kind = rng.choice(3, size=n_pages, p=[0.45, 0.35, 0.20])
    rates = np.choose(
        kind,
        [
            rng.lognormal(np.log(1 / 400), 1.0, n_pages),
            rng.lognormal(np.log(1 / 15), 1.3, n_pages),
            rng.lognormal(np.log(2.5), 0.8, n_pages),
        ],
    )
    tiers = rng.choice(4, size=n_pages, p=[0.6, 0.25, 0.1, 0.05])
    weights = np.array([1.0, 2.0, 5.0, 10.0])[tiers]
    costs = np.round(rng.lognormal(0.0, 0.4, n_pages), 3)
    return AllocationWeb(rates, weights, costs, hosts, np.bincount(hosts, minlength=n_hosts))


def observation_cycles(
    rates: NDArray[np.float64], n_cycles: int, *, cycle_days: float = 1.0, seed: int = 0
) -> Iterator[tuple[int, NDArray[np.float64], NDArray[np.bool_], NDArray[np.float64]]]:
    """Every page visited once a cycle at a random time of it, changes Poisson(``rates``).

    Yields per cycle ``(cycle, interval_days, changed, visit_day)``, one entry per page
    (NaN intervals and False changes in the first cycle, which has no previous visit):
    what a store would link, without building URLs or history tables (the planning
    benchmark writes millions of pages' worth). Vectorized over pages, one step a cycle.
    """
    rng = np.random.default_rng(seed)
    n = rates.shape[0]
    last = np.full(n, np.nan)
    for cycle in range(n_cycles):
        when = np.asarray((cycle + rng.random(n)) * cycle_days, dtype=np.float64)
        interval = when - last
        seen = ~np.isnan(interval)
        changed = seen & (rng.random(n) < -np.expm1(-rates * np.where(seen, interval, 0.0)))
        last = when
        yield cycle, interval, changed, when
