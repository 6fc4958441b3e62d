"""Per-cycle reports: the numbers of a committed cycle, hosts under pressure, plots, markdown.

Everything here reads files (the plan, the committed cycle, the batches' metrics) and
writes under ``<root>/reports/``; no Prefect. The recrawl flow turns the results into keyed
artifacts. ``reports/cycles.parquet`` keeps one row of numbers per cycle (a re-run replaces
its row), which is what the freshness-over-cycles plot draws.
"""

from __future__ import annotations

import base64
import io
import json
import math
import mimetypes
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
import pyarrow as pa
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from models.outcomes import NOT_SENT, OBSERVED, sql_list
from models.planning.select import REASONS
from tasks.store.durable import durable_write_bytes
from tasks.store.history import HistoryStore, connect, verify_sidecar, write_checked_parquet

REPORTS = "reports"
#: At most this many base64 bytes of plots go into the summary artifact. Prefect 3's server
#: sets no limit of its own (Prefect 1 refused artifacts over 1 MB), but the whole artifact
#: travels with every view of its page: the three plots at 600x320 px take about 64 kB.
EMBEDDED_PLOTS_MAX_BYTES = 768 * 1024


@dataclass(frozen=True)
class CycleNumbers:
    """What one cycle planned, fetched and found, in the budget's cost units."""

    cycle_id: int
    at: str
    budget: float
    planned_pages: int
    planned_cost: float
    fetched: int  # history rows (one per URL attempted or shed)
    requests_sent: int  # rows that sent a request (not shed, not denied by robots.txt)
    observations: int  # ok + not_modified
    changes_found: int
    unchanged: int  # observations that found no change (wasted for freshness)
    first_seen: int  # first observations (no previous one to compare with)
    failed: int
    cost: float
    bytes: int
    expected_changes: float
    expected_freshness: float  # the allocation's steady-state value-weighted freshness
    realized_freshness: float  # ground truth at the cycle's end (NaN without a sandbox)
    failed_batches: int = 0
    spent_by_slice: dict[str, float] = field(default_factory=dict)

    @property
    def cost_per_change(self) -> float:
        return self.cost / self.changes_found if self.changes_found else math.inf


_CYCLE_SQL = """
SELECT count(*) AS fetched,
       count(*) FILTER (WHERE outcome NOT IN (SELECT unnest($not_sent))) AS requests_sent,
       count(*) FILTER (WHERE outcome IN (SELECT unnest($observed))) AS observations,
       count(*) FILTER (WHERE changed) AS changes_found,
       count(*) FILTER (WHERE changed = false) AS unchanged,
       count(*) FILTER (WHERE outcome IN (SELECT unnest($observed)) AND changed IS NULL)
           AS first_seen,
       count(*) FILTER (WHERE outcome NOT IN (SELECT unnest($observed))) AS failed,
       coalesce(sum(cost), 0) AS cost,
       coalesce(sum(bytes), 0) AS bytes
FROM cycle_rows
"""


def plan_summary(plan_path: str | Path) -> dict[str, float]:
    """The plan's summary numbers (from the JSON the plan task wrote, else from the plan)."""
    plan_path = Path(plan_path)
    side = plan_path.with_name(plan_path.name.replace(".parquet", ".summary.json"))
    if side.exists():
        data: dict[str, float] = json.loads(side.read_text())
        return data
    plan = pd.read_parquet(plan_path, columns=["reason", "cost", "p_changed"])
    spent = plan.groupby("reason")["cost"].sum()
    return {
        "pages": float(len(plan)),
        "spent": float(plan["cost"].sum()),
        "expected_changes": float(plan["p_changed"].sum()),
        **{f"spent_{name}": float(spent.get(name, 0.0)) for name in REASONS},
    }


def cycle_numbers(
    root: str | Path,
    cycle_id: int,
    plan: dict[str, float],
    *,
    at: str = "",
    realized_freshness: float = math.nan,
    failed_batches: int = 0,
) -> CycleNumbers:
    """Count what the committed cycle holds (one DuckDB pass over its file)."""
    store = HistoryStore(root)
    con = connect()
    files = store.files([int(cycle_id)])
    con.register("cycle_rows", con.read_parquet(files, union_by_name=True))
    params = {"not_sent": sql_list(NOT_SENT), "observed": sql_list(OBSERVED)}
    row = con.sql(_CYCLE_SQL, params=params).fetchall()[0]
    names = [
        "fetched",
        "requests_sent",
        "observations",
        "changes_found",
        "unchanged",
        "first_seen",
        "failed",
        "cost",
        "bytes",
    ]
    counts = dict(zip(names, row, strict=True))
    return CycleNumbers(
        cycle_id=int(cycle_id),
        at=at,
        budget=float(plan.get("budget", math.nan)),
        planned_pages=int(plan.get("pages", 0)),
        planned_cost=float(plan.get("spent", 0.0)),
        fetched=int(counts["fetched"]),
        requests_sent=int(counts["requests_sent"]),
        observations=int(counts["observations"]),
        changes_found=int(counts["changes_found"]),
        unchanged=int(counts["unchanged"]),
        first_seen=int(counts["first_seen"]),
        failed=int(counts["failed"]),
        cost=float(counts["cost"]),
        bytes=int(counts["bytes"]),
        expected_changes=float(plan.get("expected_changes", math.nan)),
        expected_freshness=float(plan.get("allocated_expected_freshness", math.nan)),
        realized_freshness=float(realized_freshness),
        failed_batches=int(failed_batches),
        spent_by_slice={name: float(plan.get(f"spent_{name}", 0.0)) for name in REASONS},
    )


def hosts_under_pressure(metrics: list[dict[str, Any]], *, limit: int = 50) -> pd.DataFrame:
    """Hosts whose adaptive limit fell, that throttled, or that are paused, worst first.

    ``metrics`` are the batches' ``BatchMetrics`` as dicts; a host's retry ratio is its
    batch's (the engine counts retries per batch).
    """
    rows = []
    for batch in metrics:
        for host, p in batch.get("hosts", {}).items():
            pressured = p["throttles"] > 0 or p["lowest_limit"] < 1.0 or p["paused_s"] > 0
            if pressured or batch.get("retry_ratio", 0.0) > 0.2:
                rows.append(
                    {
                        "host": host,
                        "requests": p["requests"],
                        "throttles": p["throttles"],
                        "limit": round(p["limit"], 3),
                        "lowest_limit": round(p["lowest_limit"], 3),
                        "paused_s": round(p["paused_s"], 1),
                        "batch_retry_ratio": round(batch.get("retry_ratio", 0.0), 3),
                    }
                )
    frame = pd.DataFrame(
        rows,
        columns=[
            "host",
            "requests",
            "throttles",
            "limit",
            "lowest_limit",
            "paused_s",
            "batch_retry_ratio",
        ],
    )
    frame = frame.sort_values(["lowest_limit", "throttles"], ascending=[True, False])
    return frame.head(limit).reset_index(drop=True)


def record_cycle(root: str | Path, numbers: CycleNumbers) -> pd.DataFrame:
    """Add (or replace) the cycle's row in ``reports/cycles.parquet``; return all rows."""
    path = Path(root) / REPORTS / "cycles.parquet"
    row = {k: v for k, v in asdict(numbers).items() if k != "spent_by_slice"}
    row["cost_per_change"] = numbers.cost_per_change
    for name, value in numbers.spent_by_slice.items():
        row[f"spent_{name}"] = value
    new = pd.DataFrame([row])
    if path.exists():
        # checked against the digest kept beside it (tasks.store.history.verify_sidecar)
        verify_sidecar(path, "cycle report", "restore it from a backup, or remove it to start anew")
        old = pd.read_parquet(path)
        new = pd.concat([old[old["cycle_id"] != numbers.cycle_id], new], ignore_index=True)
    new = new.sort_values("cycle_id").reset_index(drop=True)
    write_checked_parquet(pa.Table.from_pandas(new, preserve_index=False), path)
    return new


def report_dir(root: str | Path, cycle_id: int) -> Path:
    return Path(root) / REPORTS / f"cycle={int(cycle_id)}"


def _figure() -> tuple[Figure, Any]:
    """One 6 x 3.2 in axes with fixed margins that fit the labels and titles used here.

    A layout engine (constrained or tight) measures every text's extent on each draw: half
    of a cycle's plot time, every cycle, for margins that never change.
    """
    fig = Figure(figsize=(6, 3.2))
    fig.subplots_adjust(left=0.11, right=0.98, bottom=0.15, top=0.91)
    return fig, fig.subplots()


def _save_png(fig: Figure, path: Path) -> None:
    buffer = io.BytesIO()
    fig.savefig(buffer, dpi=100, format="png")
    durable_write_bytes(path, buffer.getvalue())


#: Each cycle plot's file in the cycle's report folder, by its name in ``write_plots``.
PLOT_FILES = {
    "freshness": "freshness.png",
    "budget": "budget_by_slice.png",
    "rates": "rate_distribution.png",
}


def plot_paths(root: str | Path, cycle_id: int) -> dict[str, Path]:
    """Where ``write_plots`` puts the cycle's plots (whether drawn yet or not)."""
    folder = report_dir(root, cycle_id)
    return {name: folder / file for name, file in PLOT_FILES.items()}


def write_freshness_plot(root: str | Path, cycle_id: int, cycles: pd.DataFrame) -> Path:
    """Freshness over the cycles so far (expected; realized where a truth gave it)."""
    path = plot_paths(root, cycle_id)["freshness"]
    path.parent.mkdir(parents=True, exist_ok=True)
    fig, ax = _figure()
    ax.plot(cycles["cycle_id"], cycles["expected_freshness"], marker="o", label="expected (model)")
    if cycles["realized_freshness"].notna().any():
        ax.plot(
            cycles["cycle_id"], cycles["realized_freshness"], marker="o", label="realized (truth)"
        )
    ax.xaxis.set_major_locator(MaxNLocator(integer=True, min_n_ticks=1))  # cycles, even one
    ax.set_xlim(cycles["cycle_id"].min() - 0.5, cycles["cycle_id"].max() + 0.5)
    ax.set_xlabel("cycle")
    ax.set_ylabel("freshness")
    ax.set_ylim(-0.02, 1.02)  # points at 0 and 1 stay whole
    ax.legend(loc="best")
    _save_png(fig, path)
    return path


def write_plots(
    root: str | Path,
    cycle_id: int,
    cycles: pd.DataFrame,
    numbers: CycleNumbers,
    rates: np.ndarray,
) -> dict[str, Path]:
    """Freshness over cycles, budget by slice, rate distribution: PNGs in the cycle's folder."""
    paths = plot_paths(root, cycle_id)
    write_freshness_plot(root, cycle_id, cycles)

    fig, ax = _figure()
    names = list(numbers.spent_by_slice)
    ax.bar(names, [numbers.spent_by_slice[n] for n in names], color="tab:blue")
    ax.set_ylabel("budget spent (planned)")
    ax.set_title(f"cycle {cycle_id}: budget by slice")
    _save_png(fig, paths["budget"])

    fig, ax = _figure()
    positive = rates[np.isfinite(rates) & (rates > 0)]
    if positive.size:
        ax.hist(np.log10(positive), bins=40, color="tab:green")
    ax.set_xlabel("log10 estimated change rate (per day)")
    ax.set_ylabel("pages")
    _save_png(fig, paths["rates"])
    return paths


def summary_markdown(
    numbers: CycleNumbers,
    pressure: pd.DataFrame,
    plots: dict[str, Path],
    cost_model: str,
    near_duplicates: dict[str, Any] | None = None,
    prior: str = "",
) -> str:
    """The cycle's summary as markdown (``summary.md``, beside the plots it links).

    The flow's keyed ``recrawl-summary`` artifact is this with the plots embedded
    (``embed_plots``).

    ``near_duplicates`` is the cycle's near-duplicate report
    (``tasks.cycle.content.read_near_duplicate_report``), if there is one. ``prior`` is
    the estimator's line (``RateEstimates.prior_description``): the prior the rates came
    from, and why if a weaker one stood in.
    """
    n = numbers
    realized = (
        "n/a (no ground truth)"
        if math.isnan(n.realized_freshness)
        else (f"{n.realized_freshness:.3f}")
    )
    lines = [
        f"# Recrawl cycle {n.cycle_id}" + (f" ({n.at})" if n.at else ""),
        "",
        "| | |",
        "|---|---|",
        f"| budget ({cost_model}) | {n.budget:,.1f} |",
        f"| planned pages / cost | {n.planned_pages:,} / {n.planned_cost:,.1f} |",
        f"| pages fetched (rows) | {n.fetched:,} ({n.requests_sent:,} sent a request) |",
        f"| observations | {n.observations:,} |",
        f"| changes found | {changes_found_text(n)} |",
        f"| fetches that found no change | {n.unchanged:,} |",
        f"| first observations | {n.first_seen:,} |",
        f"| failed attempts | {n.failed:,} ({n.failed_batches} failed batches) |",
        f"| cost | {n.cost:,.2f} |",
        f"| cost per change detected | {cost_per_change_text(n)} |",
        f"| expected freshness (model) | {n.expected_freshness:.3f} |",
        f"| realized freshness (truth) | {realized} |",
        *([f"| rate estimates | {prior} |"] if prior else []),
        "",
        "## Budget by slice (planned)",
        "",
        "| slice | spent |",
        "|---|---|",
        *[f"| {name} | {value:,.1f} |" for name, value in n.spent_by_slice.items()],
        "",
        f"## Hosts under pressure: {len(pressure)}",
        "",
    ]
    if len(pressure):
        lines.append(markdown_table(pressure.head(10)))
        lines.append("")
    if near_duplicates is not None:
        lines += near_duplicate_section(near_duplicates)
    lines += ["## Plots", ""]
    for name, path in plots.items():
        lines += [_plot_image(name, Path(path).name), ""]
    return "\n".join(lines) + "\n"


def changes_found_text(n: CycleNumbers) -> str:
    """Changes found, against the revisits that could find one (a first visit cannot)."""
    revisits = n.observations - n.first_seen
    if revisits == 0:
        return f"0 on 0 revisits ({n.first_seen:,} first visits: nothing to compare yet)"
    expected = f"plan expected {n.expected_changes:,.1f}"
    if n.first_seen:  # the plan counts a first visit as a change (p = 1)
        expected += f", counting {n.first_seen:,} first visits"
    return f"{n.changes_found:,} on {revisits:,} revisits ({expected})"


def cost_per_change_text(n: CycleNumbers) -> str:
    if n.changes_found:
        return f"{n.cost_per_change:,.3f}"
    if n.observations == n.first_seen:
        return "n/a (no revisits yet)"
    return "n/a (no change found)"


def _plot_image(name: str, src: str) -> str:
    return f"![{name}]({src})"


def embed_plots(markdown: str, plots: dict[str, Path]) -> str:
    """The summary with its plots embedded as ``data:`` URIs: what the Prefect UI can show.

    ``summary_markdown`` links each plot by its file name (``summary.md`` lies beside them);
    the UI cannot follow such a link, nor a ``file://`` one, and an image artifact takes a
    URL only. Both Prefect UIs render ``data:image/...`` sources in markdown (the React UI
    allows exactly that scheme in its sanitizer), so each link is replaced by its PNG, until
    the embedded bytes would pass ``EMBEDDED_PLOTS_MAX_BYTES``; a plot past that keeps its
    path, marked as not embedded.
    """
    room = EMBEDDED_PLOTS_MAX_BYTES
    for name, path in plots.items():
        path = Path(path)
        link = _plot_image(name, path.name)
        mime = mimetypes.guess_type(path.name)[0] or "image/png"
        encoded = base64.b64encode(path.read_bytes()).decode("ascii")
        if len(encoded) <= room:
            room -= len(encoded)
            markdown = markdown.replace(link, _plot_image(name, f"data:{mime};base64,{encoded}"))
        else:
            markdown = markdown.replace(link, f"{name}: `{path.resolve()}` (too large to embed)")
    return markdown


def near_duplicate_section(report: dict[str, Any]) -> list[str]:
    """Markdown lines of the near-duplicate report: counts, then the largest clusters."""
    lines = [
        f"## Near-duplicate clusters: {report['clusters']:,}",
        "",
        f"{report['pages_in_clusters']:,} of {report['pages_with_fingerprint']:,} pages with a "
        f"fingerprint are within {report['max_distance_bits']} bits of another page; "
        f"{report['down_ranked']:,} are down-ranked (one page per cluster keeps its value); "
        f"{report['fetched_this_cycle_in_clusters']:,} of them were fetched this cycle.",
        "",
    ]
    top = report.get("largest_clusters") or []
    if top:
        frame = pd.DataFrame(
            {
                "pages": [c["size"] for c in top],
                "kept": [c["kept"] for c in top],
                "e.g.": [", ".join(c["examples"][:3]) for c in top],
            }
        )
        lines += [markdown_table(frame), ""]
    return lines


def markdown_table(frame: pd.DataFrame) -> str:
    """A DataFrame as a markdown table (no extra dependency)."""
    header = "| " + " | ".join(str(c) for c in frame.columns) + " |"
    rule = "|" + "---|" * len(frame.columns)
    body = ["| " + " | ".join(str(v) for v in row) + " |" for row in frame.itertuples(index=False)]
    return "\n".join([header, rule, *body])
