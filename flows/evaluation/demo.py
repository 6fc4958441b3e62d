"""The demo (``make demo`` = ``recrawl demo``): the whole loop on the sandbox web.

It starts the sandbox web on loopback, discovers it through its sitemaps, fetches it once,
then runs 30 simulated daily recrawl cycles as Prefect flows (local mode: Prefect starts a
temporary server by itself) with a budget well below a full daily recrawl, and compares
the planner with a uniform recrawl of the same budget against the sandbox's ground truth:
freshness (share of pages whose stored copy is the live version) and cost per change
caught. It ends with a short table, a plot, where the reports and data are, and where
the time went (wall and CPU seconds per phase: Prefect start, sandbox start, discovery,
bootstrap, cycles, comparison).
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from pathlib import Path

import pandas as pd

from flows.evaluation.sandbox_runs import run_sandbox_cycles, score_run
from flows.local_prefect import local_server_cpu_s, start_local_prefect, without_flow_heartbeats
from flows.progress import PhaseTimes, ProgressLine


@dataclass(frozen=True)
class DemoResult:
    root: Path
    pages: int
    hosts: int
    cycles: int
    budget: int
    table: pd.DataFrame  # one row per policy
    plot: Path
    reports: Path
    detected_changes: int  # what the planner's own record hashes said changed
    elapsed_s: float  # the whole demo, Prefect's start included
    phases: PhaseTimes = field(default_factory=PhaseTimes)
    prefect_server_cpu_s: float | None = None  # the local server's process, if we started it


def run_demo(
    root: Path,
    *,
    hosts: int = 40,
    pages_per_host: int = 50,
    cycles: int = 30,
    budget_share: float = 0.15,
    seed: int = 0,
    show_progress: bool = True,
) -> DemoResult:
    """Run the demo under ``root`` (emptied first); see the module docstring."""
    started = time.monotonic()
    phases = PhaseTimes()
    with phases.phase("Prefect start"):
        start_local_prefect()
    progress = ProgressLine("recrawl cycles", cycles + 1) if show_progress else None

    def on_cycle(result: dict[str, object]) -> None:
        if progress is not None:
            found = result.get("changes_found", 0)
            progress.step(f"cycle {result['cycle']}: {found} changes found")

    with without_flow_heartbeats():
        run = run_sandbox_cycles(
            root,
            hosts=hosts,
            pages_per_host=pages_per_host,
            cycles=cycles,
            budget_share=budget_share,
            seed=seed,
            on_cycle=on_cycle,
            phases=phases,
        )
    with phases.phase("comparison (truth, plot)"):
        comparison, plot = score_run(run, seed=seed)
    detected = sum(int(str(s.get("changes_found", 0))) for s in run.cycle_summaries[1:])
    return DemoResult(
        root=run.root,
        pages=run.pages,
        hosts=hosts,
        cycles=cycles,
        budget=run.budget,
        table=comparison.table,
        plot=plot,
        reports=run.root / "reports",
        detected_changes=detected,
        elapsed_s=time.monotonic() - started,
        phases=phases,
        prefect_server_cpu_s=local_server_cpu_s(),
    )


def format_result(result: DemoResult) -> str:
    """The demo's closing text: the table, what it means, where things are."""
    table = result.table.copy()
    table["cost per change"] = table["cost per change"].map("{:.2f}".format)
    table["mean freshness"] = table["mean freshness"].map("{:.3f}".format)
    planner, uniform = result.table.loc["planner"], result.table.loc["uniform"]
    lines = [
        f"sandbox web: {result.hosts} hosts, {result.pages:,} pages; {result.cycles} simulated "
        f"days at {result.budget:,} credits/day ({result.budget / result.pages:.0%} of a full "
        f"daily recrawl), after one full bootstrap crawl; {result.elapsed_s:.0f} s",
        "",
        "against the sandbox's ground truth (freshness sampled hourly, days 1 to "
        f"{result.cycles + 1}):",
        table.to_string(),
        "",
        f"freshness {planner['mean freshness']:.3f} vs {uniform['mean freshness']:.3f}; "
        f"cost per change caught {planner['cost per change']:.2f} vs "
        f"{uniform['cost per change']:.2f} credits (planner vs uniform)",
        f"the planner's record hashes flagged {result.detected_changes:,} changes "
        f"(ground truth: {int(result.table['changes caught'].loc['planner']):,} of its visits "
        "followed a change)",
        "",
        f"plot:    {result.plot}",
        f"reports: {result.reports}/cycle=<n>/summary.md (and PNGs), "
        f"{result.reports}/cycles.parquet",
        f"data:    {result.root}/history (fetch history), {result.root}/pages (catalog), "
        f"{result.root}/plans (plans)",
        "",
        "where the time went (CPU: this process; Prefect's server runs in its own):",
        result.phases.table(),
    ]
    if result.prefect_server_cpu_s is not None:
        lines.append(f"Prefect's local server process: {result.prefect_server_cpu_s:.1f} s CPU")
    return "\n".join(lines)
