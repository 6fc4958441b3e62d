"""The issue's targets for the policy backtest, checked on results, with reasons when missed.

* never below uniform at any budget from 0.02 N to 0.5 N;
* at least 90% of the oracle-minus-uniform freshness gap closed at 0.2 N, 80% at 0.05 N;
* the lowest cost per change detected of all policies (the schedulers compared: the
  oracle is a bound, and planner variants are not rivals of each other);
* on the shifting population, back within 5% of the oracle within 10 days of the shift.

:func:`check_learning_targets` judges issue 18's targets from a cold start on a
``models.backtest.sweep.LearningSweep`` (families x seeds x budgets, no Last-Modified).

Freshness is averaged over the results' windows (days 30-59 of 60 by default). A miss
says by how much and points at the cause the figures show: the band of true change rate
where most freshness is lost against the oracle, or where the cheapest changes were found.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass

import numpy as np

from models.backtest.hosts import BOUND_HOSTS, OTHER_HOSTS
from models.backtest.runner import BAND_LABELS, BacktestResult, recovery
from models.backtest.sweep import LearningSweep


@dataclass(frozen=True)
class TargetCheck:
    policy: str
    target: str
    met: bool
    measured: str
    detail: str = ""


def check_targets(
    sweep: Mapping[float, BacktestResult],
    *,
    shift: BacktestResult | None = None,
    capture: BacktestResult | None = None,
    name: str = "planner",
) -> list[TargetCheck]:
    """Every target for policy ``name`` (``sweep`` maps budget share -> measured-web result)."""
    checks = [_never_below_uniform(sweep, name)]
    for share, goal in ((0.2, 0.9), (0.05, 0.8)):
        if share in sweep:
            checks.append(_gap(sweep[share], share, goal, name))
    checks.append(_cheapest(sweep, name, "freshness objective"))
    if capture is not None:
        checks.append(_cheapest({capture.config.budget_share: capture}, name, "change capture"))
    if shift is not None:
        checks.append(_recovery(shift, name))
    return checks


def format_checks(checks: list[TargetCheck]) -> str:
    lines = []
    for check in checks:
        mark = "MET   " if check.met else "MISSED"
        lines.append(f"[{mark}] {check.policy}: {check.target}: {check.measured}")
        if check.detail:
            lines.append(f"         {check.detail}")
    return "\n".join(lines)


def _never_below_uniform(sweep: Mapping[float, BacktestResult], name: str) -> TargetCheck:
    margins = {
        share: r.by_name(name).freshness - r.by_name("uniform").freshness
        for share, r in sorted(sweep.items())
    }
    worst = min(margins, key=lambda s: margins[s])
    below = [s for s, m in margins.items() if m < 0]
    measured = ", ".join(f"{s:g} N {m:+.4f}" for s, m in margins.items())
    detail = ""
    if below:
        detail = (
            "below uniform at "
            + ", ".join(f"{s:g} N" for s in below)
            + "; "
            + _loss_band(sweep[worst], name, "uniform")
        )
    return TargetCheck(
        name, "never below uniform (freshness - uniform)", not below, measured, detail
    )


def _gap(result: BacktestResult, share: float, goal: float, name: str) -> TargetCheck:
    closed = result.gap_closed(name)
    met = bool(closed >= goal)
    measured = f"{closed:.1%} of the gap at {share:g} N (target {goal:.0%})"
    detail = ""
    if not met:
        detail = f"short by {100 * (goal - closed):.1f} points; " + _loss_band(
            result, name, "oracle"
        )
        detail += _loss_hosts(result, name)
    return TargetCheck(
        name, f">= {goal:.0%} of the oracle-uniform gap at {share:g} N", met, measured, detail
    )


def _loss_band(result: BacktestResult, name: str, reference: str) -> str:
    """The rate band where ``name`` loses most value-weighted freshness to ``reference``."""
    value = result.bands["value"]
    loss = value * (result.bands[reference] - result.bands[name])
    worst = int(np.nanargmax(loss))
    return (
        f"most of it is lost on pages changing {BAND_LABELS[worst]}/day "
        f"({result.bands[name][worst]:.3f} vs {reference} {result.bands[reference][worst]:.3f}, "
        f"{value[worst]:.0%} of the value): estimates from few observations per page there"
    )


def _loss_hosts(result: BacktestResult, name: str) -> str:
    """Where capacity-bound hosts hold the shortfall: their share of it, and the gap the
    policy closes on them against the other hosts (empty when no host's capacity binds)."""
    slices = {part.label: part for part in result.host_slices}
    bound, other = slices.get(BOUND_HOSTS), slices.get(OTHER_HOSTS)
    if bound is None or other is None or bound.hosts == 0:
        return ""
    lost = bound.shortfall(name) + other.shortfall(name)
    share = bound.shortfall(name) / lost if lost > 0 else float("nan")
    return (
        f"; {share:.0%} of the shortfall is on {bound.hosts} capacity-bound host(s) with "
        f"{bound.pages:.0%} of the pages, where it closes {bound.gap_closed(name):.0%} of their "
        f"gap (other hosts: {other.gap_closed(name):.0%}): inside a host whose capacity binds, "
        "the oracle visits the pages it knows change slower, which a learner sees only "
        "through trusted Last-Modified ages or short revisits"
    )


def _cheapest(sweep: Mapping[float, BacktestResult], name: str, label: str) -> TargetCheck:
    parts, misses = [], []
    for share, result in sorted(sweep.items()):
        # the schedulers compared: not the oracle (a bound), not the other planner variants
        rivals = {
            row.name: row.cost_per_change
            for row in result.summary
            if (row.name == name or not row.name.startswith(("planner", "oracle")))
            and math.isfinite(row.cost_per_change)
        }
        mine = result.by_name(name).cost_per_change
        best = min(rivals, key=lambda n: rivals[n])
        parts.append(f"{share:g} N {mine:.2f} (lowest {best} {rivals[best]:.2f})")
        if best != name and rivals[best] < mine:
            misses.append((share, best, rivals[best], mine, result))
    detail = ""
    if misses:
        share, best, cheapest, mine, result = misses[0]
        fast = len(BAND_LABELS) - 1
        theirs = result.bands.get(f"{best}:fetches", np.full(fast + 1, np.nan))[fast]
        ours = result.bands.get(f"{name}:fetches", np.full(fast + 1, np.nan))[fast]
        detail = (
            f"e.g. at {share:g} N {best} pays {cheapest:.2f} per change, {name} {mine:.2f} "
            f"({mine / cheapest - 1:+.0%}): {best} spends {theirs:.0%} of its fetches on pages "
            f"changing {BAND_LABELS[fast]}/day, where almost every fetch finds a change, "
            f"{name} {ours:.0%}"
        )
        if label == "freshness objective":
            detail += (
                "; maximizing freshness gives those pages up (Cho & Garcia-Molina), so cost "
                "per change is the change-capture objective's target, not this one's"
            )
    return TargetCheck(
        name, f"lowest cost per change detected ({label})", not misses, "; ".join(parts), detail
    )


def _recovery(result: BacktestResult, name: str) -> TargetCheck:
    rec = recovery(result, name)
    met = bool(math.isfinite(rec.days_web) and rec.days_web <= 10)
    measured = (
        f"whole web within 5% of the oracle {_after(rec.days_web)} the shift (worst ratio "
        f"{rec.worst_web:.3f}); the shifted pages alone {_after(rec.days_shifted)} (worst "
        f"{rec.worst_shifted:.3f})"
    )
    detail = ""
    if not met:
        detail = "the shifted pages are visited at the rate of the static pages they were"
    return TargetCheck(
        name, "within 5% of the oracle within 10 days of the shift", met, measured, detail
    )


def _after(days: float) -> str:
    if not math.isfinite(days):
        return "never in the run after"
    return "throughout" if days == 0 else f"{days:.0f} days after"


# --------------------------------------------------------------------------- from scratch

#: Issue 18's gap targets from a cold start: budget share -> share of the gap to close.
LEARNING_GAP_TARGETS = {0.2: 0.90, 0.05: 0.85, 0.02: 0.75}
#: points of gap above the host-pooling baseline, at these budgets
BASELINE_MARGIN = 0.05
BASELINE_BUDGETS = (0.05, 0.2)
PERIODIC_TARGET = 0.80
SHIFT_DAYS = 10.0


def check_learning_targets(
    sweep: LearningSweep, *, name: str = "planner", baseline: str = "host-pooling"
) -> list[TargetCheck]:
    """Issue 18's targets on a learning sweep (``models.backtest.sweep``), with reasons."""
    c = sweep.config
    checks: list[TargetCheck] = []
    # the main part's targets only on budgets it ran (a periodic- or shift-only sweep has none)
    main = [b for b in c.budgets if sweep.part("main", b)]
    if main:
        checks.extend(_main_targets(sweep, main, name, baseline))
    checks.extend(_part_targets(sweep, name))
    return checks


def _main_targets(
    sweep: LearningSweep, budgets: list[float], name: str, baseline: str
) -> list[TargetCheck]:
    c = sweep.config
    checks = []
    margins = {b: sweep.margin_over_uniform(name, "main", b) for b in budgets}
    below = [b for b, m in margins.items() if m < 0]
    checks.append(
        TargetCheck(
            name,
            "never below uniform, 0.02-0.5 N (lowest run's freshness - uniform)",
            not below,
            ", ".join(f"{b:g} N {m:+.4f}" for b, m in margins.items()),
            (
                "below uniform at "
                + ", ".join(f"{b:g} N" for b in below)
                + "; "
                + _worst(sweep, name, min(margins, key=lambda b: margins[b]), "uniform")
            )
            if below
            else "",
        )
    )
    for budget, goal in sorted(LEARNING_GAP_TARGETS.items(), reverse=True):
        if budget not in budgets:
            continue
        mean, lo, _ = sweep.gap(name, "main", budget)
        met = bool(mean >= goal)
        checks.append(
            TargetCheck(
                name,
                f">= {goal:.0%} of the gap at {budget:g} N (mean of the runs)",
                met,
                f"{mean:.1%} (lowest run {lo:.1%})",
                ""
                if met
                else f"short by {100 * (goal - mean):.1f} points; "
                + _worst(sweep, name, budget, "oracle"),
            )
        )
    for budget in BASELINE_BUDGETS:
        if budget not in budgets or baseline not in c.policies:
            continue
        mine, theirs = sweep.gap(name, "main", budget)[0], sweep.gap(baseline, "main", budget)[0]
        lead = mine - theirs
        checks.append(
            TargetCheck(
                name,
                f">= {100 * BASELINE_MARGIN:.0f} points of gap above {baseline} at {budget:g} N",
                bool(lead >= BASELINE_MARGIN),
                f"{100 * lead:+.1f} points ({mine:.1%} vs {theirs:.1%})",
            )
        )
    return checks


def _part_targets(sweep: LearningSweep, name: str) -> list[TargetCheck]:
    """The shift, periodic and change-capture parts' targets, where they ran."""
    c = sweep.config
    checks = []
    for budget in c.shift_budgets:
        days = sweep.shifted_recovery(name, budget)
        if not days:
            continue
        ok = all(math.isfinite(d) and d <= SHIFT_DAYS for d in days)
        checks.append(
            TargetCheck(
                name,
                f"shifted pages within 5% of the oracle within {SHIFT_DAYS:g} days, {budget:g} N",
                ok,
                "days per seed: " + ", ".join(f"{d:g}" for d in days),
                ""
                if ok
                else "the shifted pages are revisited at the rate their old estimate earns; "
                "a page that slowed down is revisited until the evidence outweighs its past",
            )
        )
    for budget in c.periodic_budgets:
        if not sweep.part("periodic", budget):
            continue
        mean, lo, _ = sweep.gap(name, "periodic", budget)
        met = bool(mean >= PERIODIC_TARGET)
        checks.append(
            TargetCheck(
                name,
                f">= {PERIODIC_TARGET:.0%} of the gap on the periodic web at {budget:g} N",
                met,
                f"{mean:.1%} (lowest run {lo:.1%})",
                ""
                if met
                else "a Poisson model sees a page changing every P days as rate 1/P and "
                "does not time its visits to just after the expected change",
            )
        )
    for budget in c.capture_budgets:
        if not sweep.part("capture", budget):
            continue
        costs = {
            p: sweep.cost_per_change(p, "capture", budget) for p in c.policies if p != "oracle"
        }
        best = min(costs, key=lambda p: costs[p])
        checks.append(
            TargetCheck(
                name,
                f"lowest cost per change detected (change capture, {budget:g} N)",
                best == name,
                ", ".join(f"{p} {v:.3f}" for p, v in costs.items()),
                "" if best == name else f"{best} pays {costs[best]:.3f}, {name} {costs[name]:.3f}",
            )
        )
    return checks


def _worst(sweep: LearningSweep, name: str, budget: float, reference: str) -> str:
    runs = [
        (run, r) for run, r in sweep.results.items() if run.part == "main" and run.budget == budget
    ]
    if not runs:
        return ""
    run, result = min(runs, key=lambda item: item[1].gap_closed(name))
    return f"worst run {run.family} seed {run.seed}: " + _loss_band(result, name, reference)
