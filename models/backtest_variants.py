"""Planner variants measured in the policy backtest (``--policies`` names), beyond the
default comparison: each changes one thing, so its effect can be read off against
``planner+prior`` (see BENCHMARKS.md, "Policy backtest").

* ``planner+prior+probe`` - a probe slice (``backtest_select.select_with_probes``):
  revisit, one cycle later, pages whose rate is uncertain and not slow;
* ``planner+prior+recent`` - group levels from observations discounted with a 7-day
  half-life, and the prior refitted daily (for behaviour that shifts);
* ``planner+prior+lean`` - smaller reserved slices (re-estimation 2%, verification 1%);
* ``planner+prior+horizon`` - leftover budget ranked by what a visit buys before the page
  would be due anyway (``backtest_select.select_with_horizon``);
* ``planner+prior+nearest`` - leftover budget to the pages nearest their due time;
* ``oracle+slices`` - the oracle with the planner's reserved slices (what they cost).
"""

from __future__ import annotations

from models.backtest import FACTORIES, PolicyContext
from models.backtest_learning import MixturePriorLearner, OracleLearner
from models.backtest_policies import PlannerPolicy, Policy, Selector
from models.backtest_select import select_nearest_due, select_with_horizon, select_with_probes
from models.planning import Slices

VARIANTS = (
    "planner+prior+probe",
    "planner+prior+recent",
    "planner+prior+lean",
    "planner+prior+horizon",
    "planner+prior+nearest",
    "oracle+slices",
)


def _prior_variant(
    name: str,
    *,
    selector: Selector | None = None,
    slices: Slices | None = None,
    recent: bool = False,
) -> None:
    def build(ctx: PolicyContext) -> Policy:
        groups = ctx.workload.web.groups
        learner = (
            MixturePriorLearner(groups, refit=lambda day: True, recent_half_life=7.0)
            if recent
            else MixturePriorLearner(groups)
        )
        settings = ctx.planner_settings(slices=slices)
        return PlannerPolicy(
            ctx.workload.web, ctx.budget, learner, settings, name=name, selector=selector
        )

    FACTORIES[name] = build


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


def register_variants() -> None:
    """Add the variants to ``models.backtest.FACTORIES`` (idempotent)."""
    _prior_variant("planner+prior+probe", selector=select_with_probes)
    _prior_variant("planner+prior+recent", recent=True)
    _prior_variant("planner+prior+lean", slices=Slices(0.05, 0.02, 0.01))
    _prior_variant("planner+prior+horizon", selector=select_with_horizon)
    _prior_variant("planner+prior+nearest", selector=select_nearest_due)
    FACTORIES["oracle+slices"] = _oracle_with_slices
