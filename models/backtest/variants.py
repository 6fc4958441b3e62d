"""Planner variants measured in the policy backtest (``--policies`` names), beyond the
default comparison: each changes one thing, so its effect can be read off against
``planner`` (see BENCHMARKS.md, "Policy backtest").

* ``planner-gamma`` - the earlier estimator: one empirical-Bayes Gamma prior per group
  (``models/estimation/rate_prior.py``) instead of the mixture prior;
* ``planner-weekly`` - the mixture prior refitted daily in the first week, then weekly;
* ``planner+probe`` - a probe slice (``backtest_select.select_with_probes``):
  revisit, one cycle later, pages whose rate is uncertain and not slow;
* ``planner+recent`` - group levels from observations discounted with a 7-day
  half-life, and the prior refitted daily (for behaviour that shifts);
* ``planner+lean`` - smaller reserved slices (re-estimation 2%, verification 1%);
* ``planner+horizon`` - leftover budget ranked by what a visit buys before the page
  would be due anyway (``backtest_select.select_with_horizon``);
* ``planner+nearest`` - leftover budget to the pages nearest their due time;
* ``planner-centre`` - the deployed planner (``plan_from_moments``) with every page planned at
  its posterior's centre, as before session 9, not at its freshness-equivalent rate
  (``models.estimation.mixture_prior.CERTAINTY_EQUIVALENT``);
* ``planner+templates`` - the deployed planner (``plan_from_moments``, pages grouped by
  host) with each page's rate blended, in log space, with its estimate under the web's URL
  templates as groups (``blend_estimates``): a template's evidence moves its pages away from
  their host's rate, a template seen little leaves them at it (issue 18: a page visited once
  is planned at its host's rate; what a hierarchy host -> template would buy, before one is
  built into the estimator; it estimates twice);
* ``planner+periodic`` - the deployed planner with the periodicity detector on
  (``plan_cycle(periodic=DEFAULT_RULE)``, ``models.estimation.periodic``): pages believed to
  change once every P cycles are visited on the first cycle after their expected change;
* ``planner+drift`` / ``planner+drift-c2`` - the deployed planner with a change detector
  (``models/backtest/drift.py``): a page whose recent observations (discounted with a
  14-day half-life) disagree with the rate it was planned at by a log-likelihood ratio
  over 3 (over 2) has its history re-opened (older intervals discounted by their age);
  ``planner+decay`` re-opens every page observed (recency weighting of every page's
  history, half-life 14 days). Measured for behaviour shifts (issue 18), not adopted;
* ``oracle+slices`` - the oracle with the planner's reserved slices (what they cost);
* ``oracle-groups`` - the oracle told each group's mean true rate, not each page's: what
  knowing every group exactly buys, without any page's own behaviour (a diagnostic, not a
  bound: a learner also sees pages that are odd in their group).
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import numpy as np
from numpy.typing import ArrayLike

from models.allocation.freshness import FRESHNESS, Objective
from models.backtest.deployed import DeployedPlannerPolicy
from models.backtest.drift import DriftRule
from models.backtest.learning import (
    EmpiricalBayesLearner,
    Estimate,
    MixturePriorLearner,
    OracleLearner,
    PageObservations,
    default_refit_days,
    every_day,
)
from models.backtest.policies import PlannerPolicy, Policy, Selector
from models.backtest.registry import FACTORIES, PolicyContext, register_policy
from models.backtest.select import select_nearest_due, select_with_horizon, select_with_probes
from models.backtest.web import IntArray, PublicWeb, RateSchedule
from models.estimation import mixture_prior
from models.estimation.change_rate import PriorChoice, estimate_from_moments
from models.estimation.periodic import DEFAULT_RULE
from models.estimation.rate_data import PageMoments, RateEstimates
from models.planning import core as planning_core
from models.planning.select import Slices


def _prior_variant(
    name: str,
    *,
    selector: Selector | None = None,
    slices: Slices | None = None,
    recent: bool = False,
    weekly: bool = False,
) -> None:
    @register_policy(name)
    def build(ctx: PolicyContext) -> Policy:
        groups = ctx.workload.web.groups
        refit = default_refit_days if weekly else every_day
        half_life = 7.0 if recent else None
        learner = MixturePriorLearner(groups, refit=refit, recent_half_life=half_life)
        settings = ctx.planner_settings(slices=slices)
        return PlannerPolicy(
            ctx.workload.web, ctx.budget, learner, settings, name=name, selector=selector
        )


def _oracle_with_slices(ctx: PolicyContext) -> Policy:
    truth = ctx.workload.truth
    return PlannerPolicy(
        ctx.workload.web,
        ctx.budget,
        OracleLearner(truth),
        ctx.planner_settings(solve_every=10**9),
        name="oracle+slices",
        resolve_when=truth.changes_between,
    )


class GroupOracleLearner:
    """Every page at its group's mean true rate of the day (``oracle-groups``)."""

    name = "oracle-groups"

    def __init__(self, truth: RateSchedule, groups: IntArray) -> None:
        self._truth = truth
        self._groups = groups
        self._pages = np.maximum(np.bincount(groups), 1).astype(np.float64)

    def estimate(self, observations: PageObservations, day: int) -> Estimate:
        rate = self._truth.on_day(day)
        mean = np.bincount(self._groups, weights=rate, minlength=self._pages.shape[0])
        per_page = (mean / self._pages)[self._groups]
        return Estimate(np.maximum(per_page, 1e-9), np.zeros(rate.shape[0]))


def _group_oracle(ctx: PolicyContext) -> Policy:
    truth = ctx.workload.truth
    return PlannerPolicy(
        ctx.workload.web,
        ctx.budget,
        GroupOracleLearner(truth, ctx.workload.web.groups),
        ctx.planner_settings(slices=Slices(0.0, 0.0, 0.0), solve_every=10**9),
        name="oracle-groups",
        resolve_when=truth.changes_between,
    )


class CentrePlannerPolicy(DeployedPlannerPolicy):
    """The deployed planner with the mixture prior's posterior centres as the rates planned
    (``planner-centre``): the freshness-equivalent rate switched off around each cycle."""

    def choose(self, day: int) -> IntArray:
        saved = mixture_prior.CERTAINTY_EQUIVALENT
        mixture_prior.CERTAINTY_EQUIVALENT = False
        try:
            return super().choose(day)
        finally:
            mixture_prior.CERTAINTY_EQUIVALENT = saved


def _deployed(
    ctx: PolicyContext,
    name: str,
    policy: type[DeployedPlannerPolicy] = DeployedPlannerPolicy,
    **options: Any,
) -> Policy:
    """``policy`` (the deployed planner or a subclass) on the run's web, budget, objective
    and seed, under ``name``, with ``options`` (its one change)."""
    settings = ctx.planner_settings()
    return policy(
        ctx.workload.web,
        ctx.budget,
        objective=settings.objective,
        seed=settings.seed,
        name=name,
        **options,
    )


def _centre_planner(ctx: PolicyContext) -> Policy:
    return _deployed(ctx, "planner-centre", CentrePlannerPolicy)


#: intervals a template needs for its estimate to weigh as much as its host's
TEMPLATE_EVIDENCE = 5.0


def blend_estimates(
    outer: RateEstimates,
    inner: RateEstimates,
    n_intervals: IntArray,
    inner_groups: IntArray,
    evidence: float = TEMPLATE_EVIDENCE,
) -> RateEstimates:
    """``outer`` (pages grouped by host) with each page's log-rate and its standard error moved
    toward ``inner``'s (grouped by template) by ``w = n / (n + evidence)``, ``n`` the
    intervals observed on the page's inner group: a template never revisited keeps its
    host's estimates, one with many intervals gets its own."""
    n = np.bincount(inner_groups, weights=n_intervals.astype(np.float64))[inner_groups]
    w = n / (n + evidence)
    moved = w > 0  # only there is the inner estimate read (it may be unbounded elsewhere)
    with np.errstate(invalid="ignore", divide="ignore"):
        log_rate = w * np.log(inner.rate) + (1.0 - w) * np.log(outer.rate)
        log_std = w * inner.log_std + (1.0 - w) * outer.log_std
    rate = np.where(moved, np.exp(log_rate), outer.rate)
    return replace(outer, rate=rate, log_std=np.where(moved, log_std, outer.log_std))


class TemplateBlendPlannerPolicy(DeployedPlannerPolicy):
    """The deployed planner with every page's estimate blended with its template's
    (``planner+templates``; ``blend_estimates``): ``plan_from_moments``'s estimator swapped
    around each cycle, as ``planner-centre`` swaps the freshness-equivalent rate."""

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        *,
        templates: IntArray,
        objective: Objective = FRESHNESS,
        seed: int = 0,
        name: str = "planner+templates",
    ) -> None:
        super().__init__(web, budget, objective=objective, seed=seed, name=name)
        self.templates = templates

    def choose(self, day: int) -> IntArray:
        plain = estimate_from_moments
        templates = self.templates

        def blended(
            moments: PageMoments, *, groups: ArrayLike | None = None, prior: PriorChoice = "mixture"
        ) -> RateEstimates:
            by_host = plain(moments, groups=groups, prior=prior)
            by_template = plain(moments, groups=templates, prior=prior)
            return blend_estimates(by_host, by_template, moments.n_intervals, templates)

        planning_core.estimate_from_moments = blended  # type: ignore[assignment,attr-defined,unused-ignore]
        try:
            return super().choose(day)
        finally:
            planning_core.estimate_from_moments = plain  # type: ignore[attr-defined,unused-ignore]


def _template_blend_planner(ctx: PolicyContext) -> Policy:
    return _deployed(
        ctx, "planner+templates", TemplateBlendPlannerPolicy, templates=ctx.workload.web.groups
    )


def _periodic_planner(ctx: PolicyContext) -> Policy:
    return _deployed(ctx, "planner+periodic", periodic=DEFAULT_RULE)


def _drift_variant(name: str, rule: DriftRule) -> None:
    """The deployed planner with pages re-opened by ``rule`` (``models.backtest.drift``)."""

    @register_policy(name)
    def build(ctx: PolicyContext) -> Policy:
        return _deployed(ctx, name, drift=rule)


def _gamma_planner(ctx: PolicyContext) -> Policy:
    learner = EmpiricalBayesLearner(ctx.workload.web.groups)
    return PlannerPolicy(
        ctx.workload.web, ctx.budget, learner, ctx.planner_settings(), name="planner-gamma"
    )


# Registered in report order (``VARIANTS``).
register_policy("planner-gamma")(_gamma_planner)
_prior_variant("planner-weekly", weekly=True)
_prior_variant("planner+probe", selector=select_with_probes)
_prior_variant("planner+recent", recent=True)
_prior_variant("planner+lean", slices=Slices(0.05, 0.02, 0.01))
_prior_variant("planner+horizon", selector=select_with_horizon)
_prior_variant("planner+nearest", selector=select_nearest_due)
register_policy("planner-centre")(_centre_planner)
register_policy("planner+templates")(_template_blend_planner)
register_policy("planner+periodic")(_periodic_planner)
_drift_variant("planner+drift", DriftRule(14.0, 3.0))
_drift_variant("planner+drift-c2", DriftRule(14.0, 2.0))
_drift_variant("planner+decay", DriftRule(14.0, 0.0))
register_policy("oracle+slices")(_oracle_with_slices)
register_policy("oracle-groups")(_group_oracle)

#: The variants' names, in registration order (the ones this module registered).
VARIANTS = tuple(name for name, build in FACTORIES.items() if build.__module__ == __name__)
