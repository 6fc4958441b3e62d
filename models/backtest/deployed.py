"""The planner exactly as the daily deployment runs it, on a backtest's simulated fetches.

``tasks.cycle.planning.plan_cycle`` reads the store's per-page sums, then calls
``models.planning.core.plan_from_moments``; :class:`DeployedPlannerPolicy` calls the same
function every simulated day on the sums its own fetches gave (``PageObservations.moments``:
"changed since the last visit", plus the Last-Modified ages of hosts judged honest, where
the run's web sends any). Nothing else differs from the deployment: the production default
slices, the mixture prior with its fallbacks, re-planned every cycle, the verification
sample seeded by the cycle (the simulated day), and, from a cold start, no free crawl.

``groups`` are the smoothing groups the catalog would give: by default each page's host
(a catalog import without groups); a URL-template grouping is a choice a catalog can make
(``DeployedPlannerPolicy(groups=web.groups)``).
"""

from __future__ import annotations

from models.allocation.freshness import FRESHNESS, Objective
from models.backtest.policies import Policy
from models.backtest.web import IntArray, PublicWeb
from models.estimation.change_rate import PriorChoice
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.select import REASONS, Slices


class DeployedPlannerPolicy(Policy):
    """``plan_from_moments`` every simulated day, as ``plan_cycle`` runs it each cycle."""

    def __init__(
        self,
        web: PublicWeb,
        budget: float,
        *,
        groups: IntArray | None = None,
        prior: PriorChoice = "mixture",
        slices: Slices | None = None,
        objective: Objective = FRESHNESS,
        seed: int = 0,
        name: str = "planner",
    ) -> None:
        super().__init__(web, budget)
        self.name = name
        self.groups = web.hosts if groups is None else groups
        self.prior = prior
        self.slices = slices or Slices()
        self.objective = objective
        self.seed = seed
        self.prior_used: dict[str, int] = {}

    def choose(self, day: int) -> IntArray:
        web = self.web
        cycle = plan_from_moments(
            self.observations.moments(),
            self.groups,
            PlanningPages(
                hosts=web.hosts,
                value=web.value,
                cost=web.cost,
                days_since_visit=self.observations.days_since(day),
            ),
            self.budget,
            web.host_capacity,
            slices=self.slices,
            seed=self.seed + day,  # the deployment seeds each cycle's sample by its id
            prior=self.prior,
            objective=self.objective,
        )
        used = cycle.estimates.prior_used
        self.prior_used[used] = self.prior_used.get(used, 0) + 1
        plan = cycle.plan
        for code, reason in enumerate(REASONS):
            spent = float(web.cost[plan.index[plan.reason == code]].sum())
            self.spent_by_reason[reason] = self.spent_by_reason.get(reason, 0.0) + spent
        out: IntArray = plan.index
        return out
