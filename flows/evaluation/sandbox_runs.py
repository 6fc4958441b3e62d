"""Whole-loop runs on the sandbox web: discover, bootstrap, N daily recrawl cycles, score.

``run_sandbox_cycles`` starts the sandbox on loopback (simulated clock), discovers it
through its sitemaps (the ``discover`` flow), fetches everything once (cycle 0, the
bootstrap: the whole budget on the discovery slice), then runs ``cycles`` daily ``recrawl``
flows with ``budget`` credits each, moving the simulated clock one day per cycle and
passing the cycle's simulated time to the fetcher. ``backtest_flow`` wraps it as a flow
and scores the result against a uniform recrawl of the same budget (``flows.evaluation.compare``);
``make demo`` runs the same loop (``flows.evaluation.demo``).

Each cycle runs through ``recrawl_with_truth``: the production ``recrawl`` flow, which
knows no truth, then the sandbox's realized freshness added to the cycle's report
(``flows.evaluation.truth.record_realized``).
"""

from __future__ import annotations

import shutil
import time
from collections.abc import Callable
from contextlib import ExitStack
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from prefect import flow

from flows.discover import discover_flow
from flows.evaluation.compare import Comparison, compare_policies, plot_comparison
from flows.evaluation.truth import SandboxSpec, record_realized
from flows.progress import PhaseTimes
from flows.recrawl import recrawl_flow
from sandbox import SANDBOX_NETWORKS, HostBehaviour, SandboxWeb, SimClock, serve_sandbox

START = datetime(2026, 1, 1, tzinfo=UTC)
#: Politeness for our own sandbox: small delays, never more than one request in flight
#: per host (the engine's per-host limit), quick backoff so a throttling host does not
#: stall a simulated day for a real minute.
SANDBOX_FETCH: dict[str, Any] = {
    "min_delay_s": 0.02,
    "max_delay_s": 0.2,
    "delay_factor": 2.0,
    "throttle_backoff_s": 0.5,
    "throttle_backoff_cap_s": 4.0,
    "retry_base_s": 0.1,
    "retry_cap_s": 1.0,
    "request_timeout_s": 5.0,
    "robots_timeout_s": 2.0,
    "seed": 1,
    "allowed_networks": list(SANDBOX_NETWORKS),  # the address policy refuses loopback
}
BOOTSTRAP_SLICES = {"discovery": 1.0, "reestimation": 0.0, "verification": 0.0}


@dataclass(frozen=True)
class SandboxRun:
    root: Path
    start: datetime
    cycles: int
    budget: int
    pages: int
    spec: dict[str, int]
    cycle_summaries: list[dict[str, Any]] = field(default_factory=list)
    elapsed_s: float = 0.0


def demo_behaviours(hosts: int) -> dict[int, HostBehaviour]:
    """A few hosts that misbehave the way real ones do (none changes the true rates)."""
    chosen = {
        1: HostBehaviour(throttle_rate=10.0, throttle_burst=2.0, retry_after_s=1.0),
        2: HostBehaviour(validators="none"),
        3: HostBehaviour(latency_s=0.03, latency_jitter_s=0.03),
    }
    return {i: b for i, b in chosen.items() if i < hosts}


def run_sandbox_cycles(
    root: str | Path,
    *,
    hosts: int = 40,
    pages_per_host: int = 50,
    cycles: int = 30,
    budget: int | None = None,
    budget_share: float = 0.15,
    seed: int = 0,
    on_cycle: Callable[[dict[str, Any]], None] | None = None,
    phases: PhaseTimes | None = None,
) -> SandboxRun:
    """Discover the sandbox, bootstrap, and run ``cycles`` daily recrawl cycles under ``root``.

    ``root`` is emptied first. ``budget`` (credits per cycle) defaults to ``budget_share``
    of the pages. ``on_cycle`` is called with each cycle's flow result (progress display).
    ``phases`` gets the wall and CPU time of sandbox start, discovery, bootstrap and cycles.
    """
    phases = phases if phases is not None else PhaseTimes()
    if hosts < 1 or pages_per_host < 1 or cycles < 1:
        raise ValueError("hosts, pages_per_host and cycles must be >= 1")
    root = Path(root)
    if root.exists():
        shutil.rmtree(root)
    root.mkdir(parents=True)
    started = time.monotonic()
    clock = SimClock(START)
    pages = hosts * pages_per_host
    budget = budget or max(1, round(budget_share * pages))
    spec = {"hosts": hosts, "pages_per_host": pages_per_host, "seed": seed}
    summaries = []
    with ExitStack() as stack:
        with phases.phase("sandbox start"):
            web = SandboxWeb.generate(
                hosts, pages_per_host, seed=seed, behaviours=demo_behaviours(hosts), clock=clock
            )
            running = stack.enter_context(serve_sandbox(web))
        sitemaps = [f"{running.base_url(i)}/sitemap.xml" for i in range(hosts)]
        with phases.phase("discovery"):
            discover_flow(
                str(root),
                sitemaps=sitemaps,
                follow_seed_links=False,
                at=clock.now(),
                allowed_networks=list(SANDBOX_NETWORKS),
            )
        for cycle in range(cycles + 1):
            if cycle:
                clock.advance(days=1)
            with phases.phase("bootstrap (cycle 0)" if cycle == 0 else f"cycles 1-{cycles}"):
                result = recrawl_with_truth(
                    spec,
                    root=str(root),
                    at=clock.now(),
                    budget=float(pages if cycle == 0 else budget),
                    cycle=cycle,
                    fetch=SANDBOX_FETCH,
                    slices=BOOTSTRAP_SLICES if cycle == 0 else None,
                    seed=seed + cycle,
                )
            summaries.append(result)
            if on_cycle is not None:
                on_cycle(result)
    return SandboxRun(
        root, START, cycles, budget, pages, spec, summaries, time.monotonic() - started
    )


def recrawl_with_truth(
    spec: SandboxSpec | dict[str, Any], *, root: str, at: datetime, **recrawl_kwargs: Any
) -> dict[str, Any]:
    """One ``recrawl`` cycle on the sandbox web ``spec`` describes, scored by its truth.

    Runs ``recrawl_flow(root=root, at=at, **recrawl_kwargs)``, then records the realized
    freshness at ``at`` into the cycle's report, plots, ``summary.md`` and the flow run's
    ``recrawl-summary`` artifact; returns the flow's result with ``realized_freshness``
    set. A cycle that was already committed is returned as the flow returned it.
    """
    spec = spec if isinstance(spec, SandboxSpec) else SandboxSpec.from_dict(spec)
    state = recrawl_flow(root=root, at=at, **recrawl_kwargs, return_state=True)
    # raises what the flow raised; _sync: the plain value even where an event loop runs
    # (Prefect's async_dispatch would hand back a coroutine there, e.g. under Playwright)
    result: dict[str, Any] = state.result(_sync=True)  # type: ignore[call-overload]
    if result.get("status") != "committed":
        return result
    flow_run_id = state.state_details.flow_run_id
    realized = record_realized(root, result["cycle"], spec.web(), at, flow_run_id=flow_run_id)
    return {**result, "realized_freshness": realized}


def score_run(run: SandboxRun, *, seed: int = 0) -> tuple[Comparison, Path]:
    """The run's planner against uniform, by the sandbox's truth, and the comparison plot."""
    web = SandboxSpec.from_dict(run.spec).web()
    comparison = compare_policies(run.root, web, run.start, run.cycles, run.budget, seed=seed)
    plot = plot_comparison(
        comparison,
        run.root / "reports" / "planner_vs_uniform.png",
        f"{run.pages:,} pages, {run.budget:,} credits/day",
    )
    return comparison, plot


@flow(name="backtest")
def backtest_flow(
    root: str = "data/backtest",
    hosts: int = 40,
    pages_per_host: int = 50,
    cycles: int = 30,
    budget_share: float = 0.15,
    seed: int = 0,
) -> dict[str, Any]:
    """Run ``cycles`` sandbox cycles end to end (recrawl subflows) and score them."""
    run = run_sandbox_cycles(
        root,
        hosts=hosts,
        pages_per_host=pages_per_host,
        cycles=cycles,
        budget_share=budget_share,
        seed=seed,
    )
    comparison, plot = score_run(run, seed=seed)
    return {
        "root": str(run.root),
        "plot": str(plot),
        "budget": run.budget,
        "policies": comparison.table.reset_index().to_dict(orient="records"),
    }
