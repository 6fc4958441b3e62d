"""Learning from scratch (issue 18): families, baselines, the deployed planner, the sweep.

Small and fast: the structure and the exact parts; the figures come from the long suite
(``-m long_backtest``) and ``benchmarks/bench_backtest_learning.py``.
"""

from __future__ import annotations

import math

import numpy as np
import pytest

from models.backtest import deployed
from models.backtest.baselines import (
    HostPoolingLearner,
    SmoothedMleLearner,
    harmonic_crawl_rates,
)
from models.backtest.families import FAMILIES, family_web
from models.backtest.learning import PageObservations
from models.backtest.sweep import LearningSweep, SweepConfig, format_sweep, run_sweep
from models.backtest.targets import check_learning_targets, format_checks
from models.backtest.web import ChangeStream, Periodic, RateSchedule


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_every_family_draws_a_new_web_per_seed_with_its_shape(name):
    a, b = family_web(name, 3_000, seed=1), family_web(name, 3_000, seed=2)
    assert not np.array_equal(a.truth.base, b.truth.base)
    assert np.array_equal(family_web(name, 3_000, seed=1).truth.base, a.truth.base)
    fam = FAMILIES[name]
    assert (a.web.cost == 1).all() and set(np.unique(a.web.value)) <= {1.0, 2.0, 4.0}
    periodic = 0 if a.periodic is None else a.periodic.pages.shape[0]
    assert periodic == pytest.approx(fam.periodic_share * 3_000, abs=4 * math.sqrt(3_000))
    shifted = 0 if a.truth.shift_pages is None else a.truth.shift_pages.shape[0]
    assert shifted == int(fam.shift_share * 3_000)
    # the groups (URL templates) nest in hosts: one host per group
    first_host = np.full(int(a.web.groups.max()) + 1, -1)
    first_host[a.web.groups] = a.web.hosts
    assert np.array_equal(first_host[a.web.groups], a.web.hosts)


def test_periodic_pages_change_exactly_on_their_period():
    truth = RateSchedule(np.array([0.5, 1.0, 0.5]))
    periodic = Periodic(np.array([1, 2]), np.array([1.0, 2.0]), np.array([0.25, 1.5]))
    stream = ChangeStream(truth, 0, periodic)
    firsts = np.array([stream.on_day(d).first[1:] for d in range(6)])
    assert firsts[:, 0] == pytest.approx([0.25] * 6)  # every day at 0.25
    assert firsts[:, 1] == pytest.approx([np.inf, 0.5, np.inf, 0.5, np.inf, 0.5])
    assert [stream.on_day(d).count[2] for d in range(6)] == [0, 1, 0, 1, 0, 1]


def test_host_pooling_shrinks_a_page_toward_its_host():
    # host 0: ten pages, each of five daily intervals: nine never changed, one always did
    n = 10
    obs = PageObservations(n, hosts=np.zeros(n, dtype=np.int64))
    obs.start_cold()
    pages = np.arange(n)
    obs.record(0.0, pages, np.zeros(n, dtype=bool))
    for day in range(1, 6):
        obs.record(float(day), pages, pages == 0)
    est = HostPoolingLearner(np.zeros(n, dtype=np.int64)).estimate(obs, 6)
    alone = HostPoolingLearner(np.arange(n, dtype=np.int64)).estimate(obs, 6)
    # pooled: 5 changes in 50 days of daily visits -> -ln(1 - 0.1) a day for the host
    host = -math.log(0.9)
    weight = 5 / (5 + 2)
    assert est.rate[1] == pytest.approx(
        math.exp(weight * math.log(alone.rate[1]) + (1 - weight) * math.log(host)), rel=1e-6
    )
    assert min(alone.rate[1], host) < est.rate[1] < max(alone.rate[1], host)
    assert host < est.rate[0] < alone.rate[0]


def test_the_smoothed_mle_of_a_page_never_observed_is_ln2_over_half_a_day():
    obs = PageObservations(3)
    obs.start_cold()
    est = SmoothedMleLearner().estimate(obs, 0)
    assert est.rate == pytest.approx(np.full(3, math.log(2) / 0.5), rel=1e-6)


def test_harmonic_crawl_rates_spend_the_budget_and_meet_their_optimality_condition():
    rng = np.random.default_rng(4)
    rate, value, cost = rng.lognormal(-1, 1.5, 500), rng.choice([1.0, 2.0, 4.0], 500), np.ones(500)
    rho = harmonic_crawl_rates(rate, value, cost, 60.0)
    assert np.dot(cost, rho) == pytest.approx(60.0, rel=1e-9)
    assert (rho > 0).all() and (rho <= 1).all()  # every page keeps a positive rate
    # d/d rho of v log(rho / (rho + r)) = v r / (rho (rho + r)): equal to lambda c where
    # rho < 1 (the harmonic penalty's optimality condition)
    free = rho < 1 - 1e-9
    marginal = value * rate / (rho * (rho + rate))
    assert np.ptp(marginal[free]) / marginal[free].mean() < 1e-6


def test_the_backtest_planner_runs_the_deployed_code_path(monkeypatch):
    calls = []
    real = deployed.plan_from_moments

    def spy(*args, **kwargs):
        calls.append(kwargs["seed"])
        return real(*args, **kwargs)

    monkeypatch.setattr(deployed, "plan_from_moments", spy)
    config = SweepConfig(
        families=("tight",),
        seeds=(3,),
        budgets=(0.2,),
        pages=300,
        days=6,
        window=(3, 6),
        periodic_budgets=(),
        shift_budgets=(),
        capture_budgets=(),
    )
    run_sweep(config)
    assert calls == [3 + day for day in range(6)]  # every cycle, seeded by the cycle


def test_a_small_sweep_has_every_part_and_judges_every_target():
    config = SweepConfig(
        families=("wide",),
        seeds=(0,),
        budgets=(0.2,),
        pages=300,
        days=6,
        window=(3, 6),
        shift_day=3,
        periodic_budgets=(0.2,),
        shift_budgets=(0.2,),
        capture_budgets=(0.2,),
    )
    sweep = run_sweep(config)
    assert [len(sweep.part(p)) for p in ("main", "periodic", "shift", "capture")] == [1, 1, 1, 1]
    for result in sweep.results.values():
        assert "cold start" in result.description
        assert result.config.last_modified_honest == result.config.last_modified_now == 0
        assert {r.name for r in result.summary} == set(config.policies)
    mean, lo, hi = sweep.gap("planner", "main", 0.2)
    assert lo <= mean <= hi and math.isfinite(mean)
    # the shifted pages' freshness over the oracle's, days 3-5: the oracle's is itself
    assert sweep.shifted_ratio("oracle", 0.2, (0, 3)) == 1.0
    (shift,) = sweep.part("shift")
    mine = shift.daily["planner"].tracked_freshness[3:6]
    oracle = shift.daily["oracle"].tracked_freshness[3:6]
    assert sweep.shifted_ratio("planner", 0.2, (0, 3)) == pytest.approx(np.mean(mine / oracle))
    assert "shifted pages' freshness over the oracle's" in format_sweep(sweep)
    text = format_sweep(sweep)
    assert "no Last-Modified" in text and "host-pooling" in text and "lambda-learn-crawl" in text
    checks = check_learning_targets(sweep)
    targets = " | ".join(c.target for c in checks)
    for part in (
        "never below uniform",
        "of the gap at 0.2 N",
        "above host-pooling",
        "shifted pages",
        "periodic web",
        "cost per change",
    ):
        assert part in targets
    # a missed target says why (the baseline margin's figures are their own reason)
    assert all(c.met or c.detail or "above" in c.target for c in checks)
    assert format_checks(checks).count("\n[") == len(checks) - 1
    # a sweep without the main part (--parts periodic) judges none of the main part's targets
    # (they were judged "met" on NaN margins)
    parts_only = LearningSweep(config)
    parts_only.results = {r: v for r, v in sweep.results.items() if r.part != "main"}
    targets = [c.target for c in check_learning_targets(parts_only)]
    assert not any("never below" in t or "of the gap at" in t or "above" in t for t in targets)
    assert any("periodic web" in t for t in targets)
