"""The planner against a uniform recrawl of the same budget, scored by the sandbox's truth.

Both policies start from the same bootstrap crawl (the planner's cycle 0). The planner's
visits are its history's successful observations; the uniform policy visits ``budget``
pages per cycle in a fixed random round-robin order, at the same instants, as if every
visit succeeded (a slight advantage for it: the planner's failed fetches count against
it). Freshness is sampled every hour of simulated time after the bootstrap; a visit
"catches" a change if the page really changed since its previous visit; cost is one
credit per visit (a delivered response), as the demo's cost model bills.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import numpy as np
import pandas as pd
from matplotlib.figure import Figure

from flows.evaluation.truth import TruthSource, catalog_urls, change_events, visit_events
from models.backtest.realized import Events, changes_caught, fresh_share

_DAY = 86_400.0
SAMPLES_PER_DAY = 24


@dataclass(frozen=True)
class Comparison:
    table: pd.DataFrame  # one row per policy
    daily: pd.DataFrame  # mean freshness per simulated day, one column per policy


def uniform_visits(n_pages: int, budget: int, cycles: int, seed: int = 0) -> Events:
    """Round-robin visits: cycle ``k`` (1..cycles, at day k) takes the next ``budget`` pages."""
    order = np.random.default_rng(seed).permutation(n_pages)
    k = np.repeat(np.arange(1, cycles + 1), budget)
    slot = np.tile(np.arange(budget), cycles) + (k - 1) * budget
    return Events(order[slot % n_pages].astype(np.int64), k.astype(np.float64))


def compare_policies(
    root: str | Path,
    web: TruthSource,
    start: datetime,
    cycles: int,
    budget: int,
    *,
    seed: int = 0,
) -> Comparison:
    """Score the planner's history and a uniform schedule over days ``(0, cycles + 1]``."""
    pages = catalog_urls(root)
    urls = pages["url"].tolist()
    n = len(urls)
    planner = visit_events(root, pages, start)
    bootstrap = planner.time <= 0.5  # cycle 0, at day 0
    first = Events(planner.page[bootstrap], planner.time[bootstrap])
    later = uniform_visits(n, budget, cycles, seed)
    uniform = Events(np.r_[first.page, later.page], np.r_[first.time, later.time])
    end = start.timestamp() + (cycles + 1) * _DAY
    changes = change_events(web, urls, start, datetime.fromtimestamp(end, tz=start.tzinfo), start)
    samples = np.arange(1, (cycles + 1) * SAMPLES_PER_DAY + 1) / SAMPLES_PER_DAY
    rows = []
    daily = {}
    for name, visits in (("planner", planner), ("uniform", uniform)):
        share = fresh_share(visits, changes, samples, n)
        caught, missed = changes_caught(visits, changes)
        paid = int((visits.time > 0.5).sum())
        rows.append(
            {
                "policy": name,
                "visits": paid,
                "changes caught": caught,
                "visits without change": missed,
                "cost per change": paid / caught if caught else float("inf"),
                "mean freshness": float(share.mean()),
            }
        )
        daily[name] = share.reshape(cycles + 1, SAMPLES_PER_DAY).mean(axis=1)
    frame = pd.DataFrame(daily, index=pd.RangeIndex(1, cycles + 2, name="day"))
    return Comparison(pd.DataFrame(rows).set_index("policy"), frame)


def plot_comparison(comparison: Comparison, path: str | Path, title: str) -> Path:
    """Daily freshness of both policies (left) and cost per change caught (right)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig = Figure(figsize=(9, 3.4), layout="constrained")
    left, right = fig.subplots(1, 2, width_ratios=[2, 1])
    for name in comparison.daily.columns:
        left.plot(comparison.daily.index, comparison.daily[name], marker=".", label=name)
    left.set_xlabel("simulated day")
    left.set_ylabel("share of pages fresh")
    left.set_ylim(0, 1)
    left.legend(loc="lower left")
    left.set_title(title)
    costs = comparison.table["cost per change"]
    right.bar(costs.index, costs.to_numpy(), color=["tab:blue", "tab:orange"][: len(costs)])
    right.set_ylabel("credits per change caught")
    fig.savefig(path, dpi=100)
    return path
