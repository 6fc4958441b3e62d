"""Estimation against a known truth: a synthetic web's history written, rates estimated.

``recrawl synthetic`` runs it: no network, no Prefect; it writes ``cycles`` daily cycles of
a synthetic web through the real history store and scores the estimators per band of
true rate. (The project's demo, ``flows.evaluation.demo``, runs the whole loop on the sandbox web.)
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd

from models.estimation.change_rate import improved_rate, naive_rate
from models.estimation.synthetic import generate_history, generate_web
from tasks.cycle.estimation import load_rate_estimates
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_text
from tasks.store.history import HistoryStore

RATE_BANDS = [0.0, 0.01, 0.1, 0.5, 2.0, 7.0, np.inf]
BAND_LABELS = ["< 0.01", "0.01-0.1", "0.1-0.5", "0.5-2", "2-7", "> 7"]


@dataclass(frozen=True)
class EstimationDemoResult:
    pages: int
    cycles: int
    rows: int
    table: pd.DataFrame  # median estimate / true rate, per band of true rate and estimator


#: Marks a root this demo wrote, so that only such a root is ever replaced.
MARKER = "synthetic-store.txt"


def clear_synthetic_root(root: Path) -> None:
    """Remove ``root`` if it is missing, empty or a store this demo wrote, else refuse.

    The demo replaces its root wholesale; pointed by mistake at a real store (``--root data``)
    it must not delete it.
    """
    if root.exists() and not root.is_dir():
        raise ValueError(f"--root {root} is a file, not a folder")
    if root.is_dir() and any(root.iterdir()):
        if not (root / MARKER).exists():
            raise ValueError(
                f"--root {root} holds files that no synthetic run wrote; "
                "choose an empty or new folder"
            )
        shutil.rmtree(root)
    root.mkdir(parents=True, exist_ok=True)
    durable_write_text(root / MARKER, "written by recrawl synthetic; it replaces this folder\n")


def run_estimation_demo(
    root: Path, *, pages: int = 20_000, cycles: int = 30, seed: int = 0
) -> EstimationDemoResult:
    """Write ``cycles`` daily cycles of a synthetic web under ``root`` and score estimators."""
    clear_synthetic_root(root)
    web = generate_web(pages, seed=seed)
    CatalogStore(root).upsert(web.catalog_table())
    store = HistoryStore(root)
    rows = 0
    for cycle_id, table in generate_history(web, cycles, seed=seed, visit_probability=0.9):
        rows += store.write_cycle(cycle_id, table, link=False).rows

    est = load_rate_estimates(root)
    truth = pd.Series(web.rate, index=web.url_ids)
    true_rate = truth.reindex(est["url_id"]).to_numpy()
    seen = est["n_intervals"].to_numpy() > 0
    n = est["n_intervals"].to_numpy()[seen]
    x = est["n_changed"].to_numpy()[seen]
    days = est["observed_days"].to_numpy()[seen]
    candidates = {
        "naive changes/time": naive_rate(n, x, days / n),
        "Cho improved (regular)": improved_rate(n, x, days / n),
        "MLE + empirical Bayes": est["rate"].to_numpy()[seen],
    }
    lo, hi = est["rate_low"].to_numpy()[seen], est["rate_high"].to_numpy()[seen]
    truth_seen = true_rate[seen]
    bands = pd.CategoricalIndex(pd.cut(truth_seen, RATE_BANDS, labels=BAND_LABELS))
    columns = {}
    for name, rate in candidates.items():
        ratio = pd.Series(np.abs(rate) / truth_seen)
        columns[name] = ratio.groupby(bands, observed=False).median()
    table = pd.DataFrame(columns)
    table.index.name = "true rate (changes/day)"
    table.insert(0, "pages", pd.Series(bands).value_counts().reindex(table.index).to_numpy())
    covered = (truth_seen >= lo) & (truth_seen <= hi)
    table["EB 90% interval covers"] = pd.Series(covered).groupby(bands, observed=False).mean()
    table.attrs["coverage_90"] = float(covered.mean())
    return EstimationDemoResult(pages, cycles, rows, table)
