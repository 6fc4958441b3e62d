"""Policy backtest: how much freshness each unit of budget buys, per recrawl policy.

A simulated web (``models/backtest/workloads.py``) with exact Poisson changes
(``models/backtest/web.py``) is recrawled for ``days`` simulated days by every policy of
``models/backtest/policies.py`` under the same daily budget, host capacities, web and seed
(``models/backtest/sim.py``). Learning policies start from a seed crawl with no history and
learn rates only from what their own fetches found; with ``cold_start`` there is no seed
crawl either (a freshly imported catalog: every page never fetched, day 0 an ordinary
fetch day, and the default window days 0 to the end).

>>> result = run_backtest(BacktestConfig(pages=20_000, budget_share=0.2))
>>> print(format_table(result))  # doctest: +SKIP

Metrics over the window (default: the second half of the run, days 30-59 of 60): value-
weighted time-averaged freshness, value-weighted mean age, fetches, changes detected
(fetches that found a change), fetches that found none, cost per change detected and the
value-weighted share of the changes that happened which a fetch detected. For this planner
also the share of the oracle-minus-uniform freshness gap it closes.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from models.allocation.freshness import OBJECTIVES
from models.backtest.baselines import HostPoolingLearner, LambdaLearnAndCrawlPolicy
from models.backtest.deployed import DeployedPlannerPolicy
from models.backtest.hosts import HostSlice, format_host_slices, freshness_by_hosts, gap_share
from models.backtest.last_modified import LastModifiedClock, LastModifiedShares
from models.backtest.learning import (
    MixturePriorLearner,
    NaiveLearner,
    OracleLearner,
)
from models.backtest.policies import (
    NutchPolicy,
    PlannerPolicy,
    Policy,
    ProportionalPolicy,
    StormCrawlerPolicy,
    UniformPolicy,
)
from models.backtest.registry import (
    FACTORIES,
    PolicyContext,
    check_policy_names,
    default_policies,
    register_policy,
)
from models.backtest.sim import DailyMetrics, PageTotals, simulate
from models.backtest.web import BacktestInputError, ChangeStream, FloatArray
from models.backtest.workloads import DEFAULT_HOST_CAPACITY, Workload, build_workload
from models.planning.select import Slices

log = logging.getLogger(__name__)

# The policies every backtest compares, registered in report order (``POLICIES``).


@register_policy("planner", default=True)
def _planner(ctx: PolicyContext) -> Policy:
    """This project's planner as deployed: ``models.planning.core.plan_from_moments`` every
    cycle (the code path of ``plan_cycle``), pages grouped by host as a catalog without
    groups has them."""
    settings = ctx.planner_settings()
    return DeployedPlannerPolicy(
        ctx.workload.web, ctx.budget, objective=settings.objective, seed=settings.seed
    )


@register_policy("oracle", default=True)
def _oracle(ctx: PolicyContext) -> Policy:
    # Told the true rates, nothing to learn: no reserved slices (an upper bound).
    settings = ctx.planner_settings(slices=Slices(0.0, 0.0, 0.0), solve_every=10**9)
    learner = OracleLearner(ctx.workload.truth)
    truth = ctx.workload.truth
    return PlannerPolicy(
        ctx.workload.web,
        ctx.budget,
        learner,
        settings,
        name="oracle",
        resolve_when=truth.changes_between,
    )


@register_policy("uniform", default=True)
def _uniform(ctx: PolicyContext) -> Policy:
    return UniformPolicy(ctx.workload.web, ctx.budget, seed=ctx.config.seed)


@register_policy("proportional", default=True)
def _proportional(ctx: PolicyContext) -> Policy:
    learner = MixturePriorLearner(ctx.workload.web.groups)
    return ProportionalPolicy(
        ctx.workload.web,
        ctx.budget,
        learner,
        solve_every=ctx.config.solve_every,
        seed=ctx.config.seed,
    )


@register_policy("nutch", default=True)
def _nutch(ctx: PolicyContext) -> Policy:
    return NutchPolicy(ctx.workload.web, ctx.budget, seed=ctx.config.seed)


@register_policy("stormcrawler", default=True)
def _stormcrawler(ctx: PolicyContext) -> Policy:
    return StormCrawlerPolicy(ctx.workload.web, ctx.budget, seed=ctx.config.seed)


@register_policy("host-pooling", default=True)
def _host_pooling(ctx: PolicyContext) -> Policy:
    learner = HostPoolingLearner(ctx.workload.web.hosts)
    return PlannerPolicy(
        ctx.workload.web, ctx.budget, learner, ctx.planner_settings(), name="host-pooling"
    )


@register_policy("lambda-learn-crawl", default=True)
def _lambda_learn_crawl(ctx: PolicyContext) -> Policy:
    return LambdaLearnAndCrawlPolicy(ctx.workload.web, ctx.budget, seed=ctx.config.seed)


@register_policy("naive", default=True)
def _naive(ctx: PolicyContext) -> Policy:
    return PlannerPolicy(
        ctx.workload.web, ctx.budget, NaiveLearner(), ctx.planner_settings(), name="naive"
    )


#: The policies every backtest compares, in report order (the ``default`` registrations).
POLICIES = default_policies()


def build_policies(names: Sequence[str], ctx: PolicyContext) -> list[Policy]:
    return [FACTORIES[name](ctx) for name in check_policy_names(names)]


@dataclass(frozen=True)
class BacktestConfig:
    """One backtest run. ``budget_share`` x the pages' total cost is the daily budget."""

    workload: str = "measured"
    pages: int = 100_000
    days: int = 60
    budget_share: float = 0.2
    seed: int = 0
    host_capacity: float = DEFAULT_HOST_CAPACITY
    objective: str = "freshness"
    policies: tuple[str, ...] = POLICIES
    #: first and last+1 day averaged (default: the second half of the run)
    window: tuple[int, int] | None = None
    #: day the shift workload's pages wake up (default: the middle of the run)
    shift_day: int | None = None
    #: days between the learners' re-estimations (and re-allocations)
    solve_every: int = 1
    #: shares of hosts whose Last-Modified is honest / a "now" stamp (the rest send none);
    #: an assumption (``models/backtest/last_modified.py``)
    last_modified_honest: float = 0.5
    last_modified_now: float = 0.25
    #: no seed crawl: every page starts never fetched and day 0 is a fetch day
    cold_start: bool = False

    def checked_window(self) -> tuple[int, int]:
        first = 0 if self.cold_start else 1  # day 0 is the seed crawl unless cold
        lo, hi = self.window or ((0, self.days) if self.cold_start else (self.days // 2, self.days))
        if not first <= lo < hi <= self.days:
            raise BacktestInputError(
                f"window {lo}-{hi - 1} must lie within days {first}-{self.days - 1}"
            )
        return lo, hi


@dataclass(frozen=True)
class PolicySummary:
    """One policy's figures over the window (see the module docstring)."""

    name: str
    freshness: float
    age: float
    fetches: float
    cost: float
    detected: float
    no_change: float
    cost_per_change: float
    captured_share: float  # value-weighted share of the changes that happened
    budget_used: float  # share of the window's budget spent
    planning_seconds: float  # mean per day


@dataclass(frozen=True)
class BacktestResult:
    config: BacktestConfig
    budget: float
    window: tuple[int, int]
    workload: str
    description: str
    daily: dict[str, DailyMetrics]
    summary: list[PolicySummary]
    notes: dict[str, dict[str, float]] = field(default_factory=dict)
    bands: dict[str, FloatArray] = field(default_factory=dict)
    shift_day: int | None = None
    #: the window's freshness by slices of hosts (``models/backtest/hosts.py``)
    host_slices: list[HostSlice] = field(default_factory=list)

    def by_name(self, name: str) -> PolicySummary:
        for row in self.summary:
            if row.name == name:
                return row
        raise KeyError(name)

    def gap_closed(self, name: str = "planner") -> float:
        """Share of the oracle-minus-uniform freshness gap ``name`` closes (NaN if absent)."""
        try:
            oracle, uniform = self.by_name("oracle"), self.by_name("uniform")
            mine = self.by_name(name)
        except KeyError:
            return float("nan")
        return gap_share(mine.freshness, oracle.freshness, uniform.freshness)


def run_backtest(config: BacktestConfig, workload: Workload | None = None) -> BacktestResult:
    """Build the workload (unless given), run every policy, summarize the window."""
    if config.objective not in OBJECTIVES:
        raise BacktestInputError(
            f"unknown objective {config.objective!r}; use one of {', '.join(OBJECTIVES)}"
        )
    if config.pages <= 0:
        raise BacktestInputError(f"pages must be positive, got {config.pages}")
    window = config.checked_window()
    if workload is None:
        workload = build_workload(
            config.workload,
            config.pages,
            seed=config.seed,
            host_capacity=config.host_capacity,
            shift_day=config.shift_day or config.days // 2,
            last_modified=LastModifiedShares(config.last_modified_honest, config.last_modified_now),
        )
    budget = workload.web.budget_for_share(config.budget_share)
    ctx = PolicyContext(workload, budget, config)
    policies = build_policies(config.policies, ctx)
    daily, totals = simulate(
        workload.web,
        ChangeStream(workload.truth, config.seed, workload.periodic),
        policies,
        config.days,
        budget,
        window=window,
        tracked=workload.truth.shift_pages,
        last_modified=LastModifiedClock(
            workload.truth.on_day(0), workload.page_last_modified(), seed=config.seed
        ),
        cold_start=config.cold_start,
    )
    bands = freshness_by_band(workload, totals, window)
    host_slices = freshness_by_hosts(workload, totals, budget)
    summary = [summarize(p.name, daily[p.name], window, budget) for p in policies]
    notes = {p.name: dict(p.spent_by_reason) for p in policies if p.spent_by_reason}
    return BacktestResult(
        config,
        budget,
        window,
        workload.name,
        f"{workload.description}; Last-Modified honest on {config.last_modified_honest:.0%} "
        f'of the hosts, "now" on {config.last_modified_now:.0%}'
        + ("; cold start (no seed crawl, every page never fetched)" if config.cold_start else ""),
        daily,
        summary,
        notes,
        bands,
        workload.truth.shift_day,
        host_slices,
    )


#: Bands of true rate (changes/day) the per-page results are broken down by.
RATE_BANDS = (0.0, 0.01, 0.1, 0.5, 2.0, np.inf)
BAND_LABELS = ("< 0.01", "0.01-0.1", "0.1-0.5", "0.5-2", ">= 2")


def freshness_by_band(
    workload: Workload, totals: PageTotals, window: tuple[int, int]
) -> dict[str, FloatArray]:
    """Value-weighted window freshness per band of true rate (at the window's start).

    Also ``"pages"`` (the band's share of pages), ``"value"`` (its share of value) and, per
    policy, ``"<name>:fetches"`` (the band's share of the policy's fetches).
    """
    rate = workload.truth.on_day(window[0])
    band = np.digitize(rate, RATE_BANDS[1:-1])
    value = workload.web.value
    k = len(BAND_LABELS)
    weight = np.bincount(band, weights=value, minlength=k)
    out = {
        "pages": np.bincount(band, minlength=k) / max(rate.shape[0], 1),
        "value": weight / max(float(value.sum()), 1e-300),
    }
    for name, fresh in totals.freshness.items():
        fetches = np.bincount(band, weights=totals.fetches[name], minlength=k)
        with np.errstate(invalid="ignore", divide="ignore"):
            out[name] = np.bincount(band, weights=value * fresh, minlength=k) / weight
            out[f"{name}:fetches"] = fetches / fetches.sum()
    return out


@dataclass(frozen=True)
class Recovery:
    """How fast a policy is back near the oracle after the truth shifts.

    ``days`` counts from the shift day to the first day from which the policy's freshness
    stays within ``tolerance`` of the oracle's (relative) to the end of the run (NaN if it
    never does); ``worst`` is the lowest ratio to the oracle after the shift. ``*_web`` is
    over all pages, ``*_shifted`` over the pages that shifted.
    """

    shift_day: int
    tolerance: float
    days_web: float
    worst_web: float
    days_shifted: float
    worst_shifted: float


def recovery(result: BacktestResult, name: str = "planner", tolerance: float = 0.05) -> Recovery:
    """Recovery of ``name`` after the shift (needs the oracle and a shifting workload)."""
    shift = result.shift_day
    if shift is None or "oracle" not in result.daily or name not in result.daily:
        raise BacktestInputError("recovery needs a shifting workload, the oracle and the policy")
    mine, oracle = result.daily[name], result.daily["oracle"]

    def settle(ratio: FloatArray) -> tuple[float, float]:
        after = ratio[shift:]
        bad = np.flatnonzero(~(after >= 1.0 - tolerance))
        if bad.shape[0] == 0:
            return 0.0, float(after.min())
        last = int(bad[-1])
        days = float(last + 1) if last + 1 < after.shape[0] else float("nan")
        return days, float(after.min())

    with np.errstate(divide="ignore", invalid="ignore"):
        web_days, web_worst = settle(mine.freshness / oracle.freshness)
        shifted_days, shifted_worst = settle(mine.tracked_freshness / oracle.tracked_freshness)
    return Recovery(shift, tolerance, web_days, web_worst, shifted_days, shifted_worst)


def summarize(
    name: str, metrics: DailyMetrics, window: tuple[int, int], budget: float
) -> PolicySummary:
    lo, hi = window
    part = slice(lo, hi)
    detected = float(metrics.detected[part].sum())
    cost = float(metrics.cost[part].sum())
    true_value = float(metrics.true_change_value[part].sum())
    return PolicySummary(
        name=name,
        freshness=float(metrics.freshness[part].mean()),
        age=float(metrics.age[part].mean()),
        fetches=float(metrics.fetches[part].sum()),
        cost=cost,
        detected=detected,
        no_change=float(metrics.no_change[part].sum()),
        cost_per_change=cost / detected if detected > 0 else float("inf"),
        captured_share=float(metrics.detected_value[part].sum()) / true_value
        if true_value > 0
        else float("nan"),
        budget_used=cost / (budget * (hi - lo)),
        planning_seconds=float(metrics.seconds[1:].mean()),
    )


def format_table(result: BacktestResult) -> str:
    """The comparison table as fixed-width text."""
    lo, hi = result.window
    head = (
        f"{'policy':<22}{'freshness':>10}{'age d':>8}{'fetches':>11}{'changes':>11}"
        f"{'no change':>11}{'cost/chg':>9}{'captured':>9}{'budget':>8}{'s/day':>7}"
    )
    lines = [
        f"workload {result.workload}: {result.description}",
        f"{result.config.pages:,} pages, days {lo}-{hi - 1} of {result.config.days}, budget "
        f"{result.config.budget_share:g} N ({result.budget:,.0f} cost units/day), objective "
        f"{result.config.objective}",
        head,
        "-" * len(head),
    ]
    for row in result.summary:
        lines.append(
            f"{row.name:<22}{row.freshness:>10.4f}{row.age:>8.2f}{row.fetches:>11,.0f}"
            f"{row.detected:>11,.0f}{row.no_change:>11,.0f}{row.cost_per_change:>9.2f}"
            f"{row.captured_share:>9.1%}{row.budget_used:>8.1%}{row.planning_seconds:>7.2f}"
        )
    gap = result.gap_closed()
    if np.isfinite(gap):
        lines.append(f"planner closes {gap:.1%} of the oracle-minus-uniform freshness gap")
    if result.bands:
        lines.append("")
        lines.append(format_bands(result))
    if result.host_slices:
        lines.append("")
        mine = [name for name in ("planner",) if name in result.daily]
        lines.append(format_host_slices(result.host_slices, mine))
    return "\n".join(lines)


def format_bands(result: BacktestResult) -> str:
    """Value-weighted window freshness per band of true rate, one column per policy."""
    names = [row.name for row in result.summary]
    head = f"{'true rate/day':<14}{'pages':>7}{'value':>7}" + "".join(
        f"{name[:12]:>13}" for name in names
    )
    lines = [head, "-" * len(head)]
    for i, label in enumerate(BAND_LABELS):
        cells = "".join(f"{result.bands[name][i]:>13.3f}" for name in names)
        lines.append(
            f"{label:<14}{result.bands['pages'][i]:>7.1%}{result.bands['value'][i]:>7.1%}{cells}"
        )
    return "\n".join(lines)


# The planner variants register on import, after the default comparison: importing this
# module fills the one registry (``models.backtest.registry``).
from models.backtest import variants as _variants  # noqa: E402, F401
