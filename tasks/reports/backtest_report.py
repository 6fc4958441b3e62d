"""Write a backtest's report folder: plots (PNG), a markdown report, the daily metrics (CSV).

The figures come from ``models.backtest.runner``; this module only renders them. Plots use
matplotlib's Agg backend (no display needed).
"""

from __future__ import annotations

import json
import logging
import math
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from models.backtest.hosts import format_host_slices
from models.backtest.runner import (
    BAND_LABELS,
    BacktestResult,
    format_bands,
    format_table,
    recovery,
)

log = logging.getLogger(__name__)


def write_backtest_report(result: BacktestResult, out: Path | str) -> dict[str, Path]:
    """Write ``report.md``, ``freshness.png``, ``cost_per_change.png``, ``daily.csv`` and
    ``summary.json`` under ``out`` (created if needed); return their paths by name."""
    folder = Path(out)
    folder.mkdir(parents=True, exist_ok=True)
    paths = {
        "freshness": plot_freshness(result, folder / "freshness.png"),
        "cost_per_change": plot_cost_per_change(result, folder / "cost_per_change.png"),
        "daily": write_daily_csv(result, folder / "daily.csv"),
        "summary": write_summary_json(result, folder / "summary.json"),
    }
    paths["report"] = write_markdown(result, folder / "report.md")
    log.info("backtest report written to %s", folder)
    return paths


def _pyplot() -> Any:
    """matplotlib's pyplot on the Agg backend (imported on first use: it is slow to load)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def plot_freshness(result: BacktestResult, path: Path) -> Path:
    """Value-weighted freshness per day, one line per policy; the window shaded."""
    plt = _pyplot()
    fig, ax = plt.subplots(figsize=(9, 5))
    days = np.arange(result.config.days)
    for name, metrics in result.daily.items():
        style = "--" if name in ("oracle", "uniform") else "-"
        ax.plot(days[1:], metrics.freshness[1:], style, label=name, linewidth=1.4)
    lo, hi = result.window
    ax.axvspan(lo, hi - 1, color="0.9", zorder=0, label="averaged window")
    if result.shift_day is not None:
        ax.axvline(result.shift_day, color="0.4", linestyle=":", label="shift")
    ax.set_xlabel("simulated day")
    ax.set_ylabel("value-weighted freshness")
    ax.set_title(
        f"{result.workload}: {result.config.pages:,} pages, budget "
        f"{result.config.budget_share:g} N/day"
    )
    ax.legend(fontsize=8, ncol=2)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def plot_cost_per_change(result: BacktestResult, path: Path) -> Path:
    """Cost per change detected over the window, one bar per policy."""
    plt = _pyplot()
    names = [row.name for row in result.summary]
    values = [
        row.cost_per_change if math.isfinite(row.cost_per_change) else 0.0 for row in result.summary
    ]
    fig, ax = plt.subplots(figsize=(9, 4.5))
    bars = ax.bar(names, values, color="#4878a8")
    for bar, value in zip(bars, values, strict=True):
        ax.annotate(
            f"{value:.2f}",
            (bar.get_x() + bar.get_width() / 2, bar.get_height()),
            ha="center",
            va="bottom",
            fontsize=8,
        )
    ax.set_ylabel("cost per change detected (cost units)")
    lo, hi = result.window
    ax.set_title(f"cost per change detected, days {lo}-{hi - 1} (lower is better)")
    ax.tick_params(axis="x", rotation=25)
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def write_daily_csv(result: BacktestResult, path: Path) -> Path:
    """One row per policy and day with every daily metric."""
    names = list(next(iter(result.daily.values())).__dataclass_fields__)
    lines = ["policy,day," + ",".join(names)]
    for policy, metrics in result.daily.items():
        columns = [getattr(metrics, name) for name in names]
        for day in range(result.config.days):
            cells = ",".join(f"{column[day]:.6g}" for column in columns)
            lines.append(f"{policy},{day},{cells}")
    path.write_text("\n".join(lines) + "\n")
    return path


def write_summary_json(result: BacktestResult, path: Path) -> Path:
    """The run's configuration and per-policy summary, machine-readable."""
    payload = {
        "config": asdict(result.config),
        "budget": result.budget,
        "window": list(result.window),
        "workload": result.workload,
        "summary": [asdict(row) for row in result.summary],
        "gap_closed": {
            row.name: _finite(result.gap_closed(row.name))
            for row in result.summary
            if row.name not in ("oracle", "uniform")
        },
        "freshness_by_rate_band": {
            name: [_finite(v) for v in values] for name, values in result.bands.items()
        },
        "rate_bands": list(BAND_LABELS),
        "spent_by_reason": result.notes,
        "freshness_by_hosts": [
            {**asdict(part), "gap_closed": {n: _finite(part.gap_closed(n)) for n in part.freshness}}
            for part in result.host_slices
        ],
    }
    path.write_text(json.dumps(payload, indent=2, default=_finite))
    return path


def write_markdown(result: BacktestResult, path: Path) -> Path:
    lo, hi = result.window
    cfg = result.config
    parts = [
        f"# Policy backtest: {result.workload}",
        "",
        f"{result.description}. {cfg.pages:,} pages, {cfg.days} simulated days ("
        + (
            "a cold start: day 0 is a fetch day, every page never fetched"
            if cfg.cold_start
            else "day 0 is a seed crawl every policy shares"
        )
        + f"), budget {cfg.budget_share:g} N a day "
        f"({result.budget:,.0f} cost units), objective {cfg.objective}, seed {cfg.seed}. "
        f"Figures are averaged over days {lo}-{hi - 1}.",
        "",
        "```",
        format_table(result),
        "```",
        "",
        "Freshness is value-weighted and time-averaged over each day; age is the value-weighted "
        "mean time a stale copy has been stale (days); *changes* are fetches that found a change "
        "and *no change* those that did not; *captured* is the value-weighted share of the "
        "changes that happened which a fetch detected; *budget* is the share of the budget spent.",
        "",
        "![freshness over time](freshness.png)",
        "",
        "![cost per change detected](cost_per_change.png)",
    ]
    if result.shift_day is not None and "oracle" in result.daily:
        parts += ["", f"## Recovery after the shift (day {result.shift_day})", ""]
        for row in result.summary:
            if row.name == "oracle":
                continue
            rec = recovery(result, row.name)
            parts.append(
                f"- {row.name}: whole web back within 5% of the oracle after "
                f"{_days(rec.days_web)} (worst ratio {rec.worst_web:.3f}); shifted pages "
                f"after {_days(rec.days_shifted)} (worst ratio {rec.worst_shifted:.3f})"
            )
    if result.notes:
        parts += ["", "## Budget spent by reason (window and before)", ""]
        for name, spent in result.notes.items():
            total = sum(spent.values()) or 1.0
            shares = ", ".join(f"{k} {v / total:.1%}" for k, v in spent.items() if v > 0)
            parts.append(f"- {name}: {shares}")
    parts += ["", "## Freshness by true change rate", "", "```", format_bands(result), "```", ""]
    if result.host_slices:
        mine = [row.name for row in result.summary if row.name not in ("oracle", "uniform")]
        parts += [
            "## Where the gap is: freshness by slice of hosts",
            "",
            "Capacity-bound hosts cannot take the uniform visit rate for all their pages, so "
            "their pages compete for the host's visits and what counts is knowing which of them "
            "change slower; the Last-Modified slices are the simulator's truth about each "
            "host's header. *closes* is the share of the slice's own oracle-minus-uniform gap a "
            "policy closes; *lost* is how much of the whole web's freshness it loses to the "
            "oracle on the slice (the first two rows add up to the whole web's shortfall, and "
            "so do the last three).",
            "",
            "```",
            format_host_slices(result.host_slices, mine),
            "```",
            "",
        ]
    path.write_text("\n".join(parts))
    return path


def _days(value: float) -> str:
    return "never (in this run)" if not math.isfinite(value) else f"{value:.0f} days"


def _finite(value: object) -> object:
    if isinstance(value, float | np.floating):
        return float(value) if math.isfinite(float(value)) else None
    if isinstance(value, np.ndarray):
        return [_finite(v) for v in value.tolist()]
    return value
