"""Learning from scratch, judged over web families, seeds and budgets (issue 18).

Every run starts cold (no page ever fetched, no seed crawl) on a web of a family of
``models/backtest/families.py`` drawn from its seed, with no Last-Modified header (unless
``last_modified`` is set: then half the hosts date their changes honestly and a quarter
stamp "now", the backtest's default assumption). Freshness is averaged over days 30-59.
The sweep has four parts:

* ``main``: every main family x seed x budget, freshness objective: the gap to the oracle
  each policy closes, and its margin over uniform;
* ``periodic``: the family with 40% of pages changing on a fixed period;
* ``shift``: the family where 20% of the pages change rate tenfold (up or down) at day 30:
  how soon each policy is within 5% of the oracle's freshness *on the shifted pages*;
* ``capture``: the main families under the change-capture objective: cost per change
  detected.

:class:`LearningSweep` holds the results and the figures; ``models.backtest.targets.
check_learning_targets`` judges them.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field, replace

import numpy as np

from models.backtest.families import MAIN_FAMILIES, family_web
from models.backtest.runner import BacktestConfig, BacktestResult, recovery, run_backtest

#: The policies judged: the deployed planner, the bounds and the baselines.
SWEEP_POLICIES = ("planner", "oracle", "uniform", "host-pooling", "lambda-learn-crawl")
BUDGETS = (0.02, 0.05, 0.1, 0.2, 0.5)


@dataclass(frozen=True)
class SweepConfig:
    """What the sweep runs (see the module docstring)."""

    families: tuple[str, ...] = MAIN_FAMILIES
    seeds: tuple[int, ...] = (0, 1, 2, 3)
    budgets: tuple[float, ...] = BUDGETS
    pages: int = 20_000
    days: int = 60
    window: tuple[int, int] = (30, 60)
    policies: tuple[str, ...] = SWEEP_POLICIES
    periodic_budgets: tuple[float, ...] = (0.05, 0.2)
    shift_budgets: tuple[float, ...] = (0.05, 0.2)
    capture_budgets: tuple[float, ...] = (0.2,)
    shift_day: int = 30
    last_modified: bool = False
    #: seeds of the periodic, shift and capture parts (default: ``seeds``)
    extra_seeds: tuple[int, ...] | None = None
    #: which parts run (``main``, ``periodic``, ``shift``, ``capture``)
    parts: tuple[str, ...] = ("main", "periodic", "shift", "capture")

    def conditions(self) -> str:
        lm = (
            "Last-Modified honest on 50% of hosts, 'now' on 25%"
            if self.last_modified
            else "no Last-Modified"
        )
        return (
            f"cold start (no page fetched before day 0, no seed crawl), {lm}, "
            f"{self.pages:,} pages per web, seeds {','.join(map(str, self.seeds))}, "
            f"freshness over days {self.window[0]}-{self.window[1] - 1} of {self.days}, "
            "production default slices, re-planned daily"
        )


@dataclass(frozen=True)
class SweepRun:
    part: str  # main, periodic, shift, capture
    family: str
    seed: int
    budget: float
    objective: str


@dataclass
class LearningSweep:
    config: SweepConfig
    results: dict[SweepRun, BacktestResult] = field(default_factory=dict)

    def merged(self, other: LearningSweep) -> LearningSweep:
        """Both sweeps' runs (run in separate processes), under a config naming them all."""
        a, b = self.config, other.config
        config = replace(
            a,
            families=tuple(dict.fromkeys(a.families + b.families)),
            seeds=tuple(dict.fromkeys(a.seeds + b.seeds)),
            parts=tuple(dict.fromkeys(a.parts + b.parts)),
        )
        return LearningSweep(config, {**self.results, **other.results})

    def part(self, part: str, budget: float | None = None) -> list[BacktestResult]:
        return [
            r
            for run, r in self.results.items()
            if run.part == part and (budget is None or run.budget == budget)
        ]

    def gap(self, policy: str, part: str, budget: float) -> tuple[float, float, float]:
        """Mean, lowest and highest share of the oracle-uniform gap ``policy`` closes."""
        shares = [r.gap_closed(policy) for r in self.part(part, budget)]
        shares = [s for s in shares if math.isfinite(s)]
        if not shares:
            return (math.nan, math.nan, math.nan)
        return (float(np.mean(shares)), float(min(shares)), float(max(shares)))

    def margin_over_uniform(self, policy: str, part: str, budget: float) -> float:
        """The lowest (freshness - uniform's) over the runs of ``part`` at ``budget``."""
        margins = [
            r.by_name(policy).freshness - r.by_name("uniform").freshness
            for r in self.part(part, budget)
        ]
        return float(min(margins)) if margins else math.nan

    def shifted_recovery(self, policy: str, budget: float) -> list[float]:
        """Per shift run: days after the shift until ``policy`` stays within 5% of the
        oracle's freshness on the shifted pages (NaN: not by the end of the run)."""
        return [recovery(r, policy).days_shifted for r in self.part("shift", budget)]

    def shifted_ratio(self, policy: str, budget: float, days: tuple[int, int]) -> float:
        """Mean over the shift runs of ``policy``'s freshness on the shifted pages over the
        oracle's, averaged over days ``shift + days[0]`` to ``shift + days[1] - 1`` (negative
        offsets: before the shift). Where ``shifted_recovery`` says "never", this says by how
        much: the ratio of each block of days after the shift, and the one before it."""
        ratios = []
        for r in self.part("shift", budget):
            if r.shift_day is None:
                continue
            lo, hi = r.shift_day + days[0], r.shift_day + days[1]
            mine = r.daily[policy].tracked_freshness[max(lo, 0) : hi]
            oracle = r.daily["oracle"].tracked_freshness[max(lo, 0) : hi]
            with np.errstate(divide="ignore", invalid="ignore"):
                ratio = mine / oracle
            if np.isfinite(ratio).any():
                ratios.append(float(np.nanmean(np.where(np.isfinite(ratio), ratio, np.nan))))
        return float(np.mean(ratios)) if ratios else math.nan

    def cost_per_change(self, policy: str, part: str, budget: float) -> float:
        """Window cost over window changes detected, summed over the runs."""
        runs = self.part(part, budget)
        cost = sum(r.by_name(policy).cost for r in runs)
        found = sum(r.by_name(policy).detected for r in runs)
        return cost / found if found > 0 else math.inf


def sweep_runs(config: SweepConfig) -> Iterator[SweepRun]:
    for run in _all_runs(config):
        if run.part in config.parts:
            yield run


def _all_runs(config: SweepConfig) -> Iterator[SweepRun]:
    for family in config.families:
        for seed in config.seeds:
            for budget in config.budgets:
                yield SweepRun("main", family, seed, budget, "freshness")
    extra = config.extra_seeds if config.extra_seeds is not None else config.seeds
    for seed in extra:
        for budget in config.periodic_budgets:
            yield SweepRun("periodic", "periodic", seed, budget, "freshness")
        for budget in config.shift_budgets:
            yield SweepRun("shift", "shift", seed, budget, "freshness")
    for family in config.families:
        for seed in extra:
            for budget in config.capture_budgets:
                yield SweepRun("capture", family, seed, budget, "change_capture")


def run_one(config: SweepConfig, run: SweepRun) -> BacktestResult:
    """One run of the sweep: the family's web of the seed, cold, every policy."""
    workload = family_web(run.family, config.pages, seed=run.seed, shift_day=config.shift_day)
    backtest = BacktestConfig(
        workload=run.family,
        pages=config.pages,
        days=config.days,
        budget_share=run.budget,
        seed=run.seed,
        objective=run.objective,
        policies=config.policies,
        window=config.window,
        shift_day=config.shift_day,
        last_modified_honest=0.5 if config.last_modified else 0.0,
        last_modified_now=0.25 if config.last_modified else 0.0,
        cold_start=True,
    )
    return run_backtest(backtest, workload)


def run_sweep(
    config: SweepConfig, progress: Callable[[SweepRun, BacktestResult], None] | None = None
) -> LearningSweep:
    sweep = LearningSweep(config)
    for run in sweep_runs(config):
        result = run_one(config, run)
        sweep.results[run] = result
        if progress is not None:
            progress(run, result)
    return sweep


def format_sweep(sweep: LearningSweep) -> str:
    """The sweep's figures as text: gap closed per policy and budget, and the parts."""
    c = sweep.config
    learners = [p for p in c.policies if p not in ("oracle", "uniform")]
    lines = [f"Conditions: {c.conditions()}", ""]
    runs = {b: len(sweep.part("main", b)) for b in c.budgets}
    lines.append(
        f"Share of the oracle-uniform gap closed, families {', '.join(c.families)} "
        f"x seeds (mean, [lowest run .. highest]); runs per budget: "
        + ", ".join(f"{b:g} N {n}" for b, n in runs.items())
    )
    head = f"{'policy':<20}" + "".join(f"{b:>22g} N" for b in c.budgets)
    lines += [head, "-" * len(head)]
    for policy in learners:
        cells = ""
        for b in c.budgets:
            mean, lo, hi = sweep.gap(policy, "main", b)
            cells += f"{mean:>8.1%} [{lo:>5.0%}..{hi:>4.0%}]  "
        lines.append(f"{policy:<20}{cells}")
    lines.append(
        "lowest margin over uniform (freshness points): "
        + ", ".join(
            f"{b:g} N {100 * sweep.margin_over_uniform('planner', 'main', b):+.2f}"
            for b in c.budgets
        )
    )
    if sweep.part("periodic"):
        lines += ["", "Periodic web (40% of pages change every 1, 2, 7 or 30 days): gap closed"]
        for policy in learners:
            lines.append(
                f"{policy:<20}"
                + "".join(
                    f"{b:g} N {sweep.gap(policy, 'periodic', b)[0]:>7.1%}   "
                    for b in c.periodic_budgets
                )
            )
    if sweep.part("shift"):
        lines += [
            "",
            f"Shift (20% of pages x10 or /10 at day {c.shift_day}): days until within 5% of "
            "the oracle on the shifted pages, per seed (nan: not by day 59); gap closed",
        ]
        for policy in learners:
            cells = ""
            for b in c.shift_budgets:
                days = sweep.shifted_recovery(policy, b)
                cells += (
                    f"{b:g} N days {','.join(f'{d:g}' for d in days)} gap "
                    f"{sweep.gap(policy, 'shift', b)[0]:.1%}   "
                )
            lines.append(f"{policy:<20}{cells}")
        blocks = ((-10, 0), (0, 10), (10, 20), (20, 30))
        lines.append(
            "shifted pages' freshness over the oracle's (mean of the seeds), days from the "
            "shift: " + ", ".join(f"{lo:+d}..{hi - 1:+d}" for lo, hi in blocks)
        )
        for policy in learners:
            cells = ""
            for b in c.shift_budgets:
                ratios = " ".join(f"{sweep.shifted_ratio(policy, b, d):.3f}" for d in blocks)
                cells += f"{b:g} N {ratios}   "
            lines.append(f"{policy:<20}{cells}")
    if sweep.part("capture"):
        lines += ["", "Change-capture objective: cost per change detected (all runs pooled)"]
        for policy in c.policies:
            lines.append(
                f"{policy:<20}"
                + "".join(
                    f"{b:g} N {sweep.cost_per_change(policy, 'capture', b):>7.3f}   "
                    for b in c.capture_budgets
                )
            )
    return "\n".join(lines)
