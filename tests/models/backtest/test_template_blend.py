"""The ``planner+templates`` variant: host estimates moved toward template estimates by evidence."""

from __future__ import annotations

import numpy as np

from models.backtest.families import family_web
from models.backtest.runner import run_backtest
from models.backtest.sim import simulate
from models.backtest.variants import (
    TEMPLATE_EVIDENCE,
    TemplateBlendPlannerPolicy,
    blend_estimates,
)
from models.backtest.web import ChangeStream
from models.estimation.change_rate import estimate_from_moments
from models.estimation.rate_data import RateEstimates
from models.planning import core as planning_core

assert run_backtest  # the runner first: it registers the default policies before the variants

# exp(w log a + (1 - w) log b) in float64: a few ulps of error per operation, far inside this
RTOL = 1e-12


def estimates(rate: list[float], log_std: list[float]) -> RateEstimates:
    n = len(rate)
    r = np.asarray(rate, dtype=np.float64)
    return RateEstimates(
        page_ids=np.arange(n, dtype=np.int64),
        rate=r,
        log_std=np.asarray(log_std, dtype=np.float64),
        rate_low=r / 2,
        rate_high=r * 2,
        n_intervals=np.zeros(n, dtype=np.int64),
        n_changed=np.zeros(n, dtype=np.int64),
        observed_days=np.zeros(n),
        prior_rate=r,
    )


def test_a_template_never_revisited_keeps_its_hosts_estimate_and_evidence_moves_it():
    host = estimates([1.0, 1.0, 1.0, 1.0], [0.5, 0.5, 0.5, 0.5])
    template = estimates([0.1, 0.1, 4.0, 4.0], [1.5, 1.5, 2.5, 2.5])
    templates = np.array([0, 0, 1, 1], dtype=np.int64)
    # template 0: its two pages have no interval; template 1: 3 + 2 intervals
    n_intervals = np.array([0, 0, 3, 2], dtype=np.int64)
    out = blend_estimates(host, template, n_intervals, templates)
    np.testing.assert_allclose(out.rate[:2], 1.0, rtol=RTOL)
    np.testing.assert_allclose(out.log_std[:2], 0.5, rtol=RTOL)
    w = 5.0 / (5.0 + TEMPLATE_EVIDENCE)
    np.testing.assert_allclose(out.rate[2:], np.exp(w * np.log(4.0)), rtol=RTOL)
    np.testing.assert_allclose(out.log_std[2:], w * 2.5 + (1 - w) * 0.5, rtol=RTOL)
    assert out.rate_low is host.rate_low  # the rest is the host estimate's


def test_the_variant_plans_with_the_blend_and_gives_the_estimator_back():
    workload = family_web("templates", 300, seed=1)
    web = workload.web
    budget = web.budget_for_share(0.1)
    blended = TemplateBlendPlannerPolicy(web, budget, templates=web.groups)
    seen: list[int] = []
    plain = planning_core.plan_from_moments

    def spy(*args, **kwargs):  # type: ignore[no-untyped-def]
        cycle = plain(*args, **kwargs)
        by_host = estimate_from_moments(args[0], groups=web.hosts, prior="mixture")
        # the same estimator on the same sums is deterministic, so an unmoved page is equal to
        # the bit; a moved one differs by its template's pull, orders of magnitude over 1e-9
        seen.append(int((~np.isclose(cycle.estimates.rate, by_host.rate, rtol=1e-9)).sum()))
        return cycle

    import models.backtest.deployed as deployed

    deployed.plan_from_moments = spy  # type: ignore[assignment]
    try:
        simulate(web, ChangeStream(workload.truth, 1), [blended], 12, budget, cold_start=True)
    finally:
        deployed.plan_from_moments = plain
    assert planning_core.estimate_from_moments is estimate_from_moments
    assert seen[0] == 0  # day 0: nothing observed, every template at its host's rate
    assert max(seen) > 0  # once templates have intervals, pages leave their host's rate
