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

``signals`` gives the planner cheap change signals, as ``plan_cycle`` reads them from the
store: each cycle every page's likelihood ratio of having changed since its last visit
(``PlanningPages.change_ratio``), and after the fetches what they found, to learn each
host's trust from (``models.backtest.signals.LearnedSignals``: sitemap lastmod and feeds).

``periodic`` (a ``models.estimation.periodic.DetectionRule``; off by default, as in
``plan_cycle``) detects pages that change once every P cycles from the policy's own visits and
plans them on the first cycle after their expected change (the ``planner+periodic`` variant).

``drift`` (a ``models.backtest.drift.DriftRule``) adds a change detector before each cycle:
pages observed since the last cycle whose discounted recent observations disagree with the
rate they were last planned at get their history re-opened (a variant, not the deployment).
"""

from __future__ import annotations

from typing import Protocol

import numpy as np

from models.allocation.freshness import FRESHNESS, Objective
from models.backtest.drift import DriftRule, surprised_pages
from models.backtest.learning import BoolArray
from models.backtest.policies import Policy
from models.backtest.web import FloatArray, IntArray, PublicWeb
from models.estimation.change_rate import PriorChoice
from models.estimation.periodic import (
    DetectionRule,
    PeriodicPages,
    detect,
    planning_outlook,
    to_cells,
)
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.select import REASONS, Slices


class ChangeSignals(Protocol):
    """Cheap change signals a planner reads before a cycle and learns from after it."""

    def ratios(self, day: int, last_fetch: FloatArray) -> FloatArray:
        """Each page's likelihood ratio of having changed since ``last_fetch`` (1: none)."""
        ...

    def learn(self, day: int, pages: IntArray, changed: BoolArray) -> None:
        """What the day's revisits of ``pages`` found (first visits left out)."""
        ...


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
        signals: ChangeSignals | None = None,
        periodic: DetectionRule | None = None,
        drift: DriftRule | None = None,
    ) -> None:
        super().__init__(web, budget, recent_half_life=drift.half_life if drift else None)
        self.drift = drift
        self.reopened = 0
        self._planned_rate: FloatArray | None = None
        self._observed = np.zeros(0, dtype=np.int64)
        self.name = name
        self.groups = web.hosts if groups is None else groups
        self.prior = prior
        self.slices = slices or Slices()
        self.objective = objective
        self.seed = seed
        self.prior_used: dict[str, int] = {}
        self.signals = signals
        self.periodic = periodic
        #: pages believed periodic, per day, and the last detection
        self.detected_on: dict[int, int] = {}
        self.detected: PeriodicPages | None = None

    def choose(self, day: int) -> IntArray:
        web = self.web
        o = self.observations
        periodic = None
        if self.periodic is not None:
            found = detect(o.phases, o.n_changed, self.periodic)
            self.detected_on[day] = int(found.detected.sum())
            self.detected = found
            periodic = planning_outlook(
                o.phases, o.n_changed, to_cells(o.last_fetch), float(day), rule=self.periodic
            )
        if self.drift is not None and self._planned_rate is not None and o.recent is not None:
            moved = surprised_pages(o.recent, self._planned_rate, self._observed, self.drift)
            o.reopen(moved)
            self.reopened += int(moved.shape[0])
        cycle = plan_from_moments(
            self.observations.moments(),
            self.groups,
            PlanningPages(
                hosts=web.hosts,
                value=web.value,
                cost=web.cost,
                days_since_visit=self.observations.days_since(day),
                change_ratio=None
                if self.signals is None
                else self.signals.ratios(day, self.observations.last_fetch),
                periodic=periodic,
            ),
            self.budget,
            web.host_capacity,
            slices=self.slices,
            seed=self.seed + day,  # the deployment seeds each cycle's sample by its id
            prior=self.prior,
            objective=self.objective,
        )
        self._planned_rate = cycle.estimates.rate
        used = cycle.estimates.prior_used
        self.prior_used[used] = self.prior_used.get(used, 0) + 1
        plan = cycle.plan
        for code, reason in enumerate(REASONS):
            spent = float(web.cost[plan.index[plan.reason == code]].sum())
            self.spent_by_reason[reason] = self.spent_by_reason.get(reason, 0.0) + spent
        out: IntArray = plan.index
        return out

    def after_fetch(self, day: int, pages: IntArray, changed: BoolArray, first: BoolArray) -> None:
        again = ~np.asarray(first, dtype=bool)
        self._observed = np.sort(pages[again])
        if self.signals is not None:
            self.signals.learn(day, pages[again], np.asarray(changed, dtype=bool)[again])
