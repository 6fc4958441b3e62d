"""The backtest from an empty history: no seed crawl, every page never fetched at day 0."""

from __future__ import annotations

import numpy as np
import pytest

from models.backtest.learning import NaiveLearner, PageObservations
from models.backtest.policies import (
    NutchPolicy,
    Policy,
    ProportionalPolicy,
    StormCrawlerPolicy,
    UniformPolicy,
)
from models.backtest.runner import BacktestConfig, BacktestResult, run_backtest
from models.backtest.sim import simulate
from models.backtest.web import BacktestInputError, ChangeStream, PublicWeb, RateSchedule
from models.backtest.workloads import build_workload


def flat_web(n: int) -> PublicWeb:
    return PublicWeb(
        hosts=np.zeros(n, dtype=np.int64),
        groups=np.zeros(n, dtype=np.int64),
        value=np.ones(n),
        cost=np.ones(n),
        host_capacity=np.array([1e9]),
    )


class Idle(Policy):
    name = "idle"

    def choose(self, day: int) -> np.ndarray:
        return np.zeros(0, dtype=np.int64)


def test_a_page_never_fetched_is_never_fresh_and_ages_from_day_0():
    web = flat_web(1_000)
    stream = ChangeStream(RateSchedule(np.full(1_000, 0.5)), seed=2)
    daily, _ = simulate(web, stream, [Idle(web, 1.0)], 5, 1.0, cold_start=True)
    assert (daily["idle"].freshness == 0.0).all()
    # stale from time 0: the age averaged over day d is exactly d + 1/2
    assert daily["idle"].age == pytest.approx(np.arange(5) + 0.5, rel=1e-12)
    seeded, _ = simulate(web, stream, [Idle(web, 1.0)], 5, 1.0)
    assert seeded["idle"].freshness[0] > 0.7  # the seed crawl's copies: e^-0.5 on average


def test_uniform_from_a_cold_start_makes_one_pass_in_n_over_b_days():
    n, budget = 4_000, 1_000.0  # interval 4 days
    web = flat_web(n)
    stream = ChangeStream(RateSchedule(np.full(n, 0.3)), seed=1)
    policy = UniformPolicy(web, budget)
    daily, totals = simulate(web, stream, [policy], 12, budget, window=(0, 4), cold_start=True)
    m = daily["uniform"]
    assert m.fetches.tolist() == [budget] * 12  # day 0 is a fetch day
    assert m.first_fetches[:4].tolist() == [budget] * 4 and m.first_fetches[4:].sum() == 0
    assert (totals.fetches["uniform"] == 1).all()  # the first pass: every page once
    assert np.array_equal(m.detected + m.no_change + m.first_fetches, m.fetches)
    assert m.detected[:4].sum() == 0 and m.detected[4:].sum() > 0


@pytest.mark.parametrize("make", [NutchPolicy, StormCrawlerPolicy])
def test_adaptive_schedules_fetch_every_new_page_at_once_as_far_as_the_budget_goes(make):
    n, budget = 3_000, 1_000.0
    web = flat_web(n)
    stream = ChangeStream(RateSchedule(np.full(n, 0.3)), seed=1)
    daily, _ = simulate(web, stream, [make(web, budget)], 5, budget, cold_start=True)
    m = daily[make.name]
    assert m.first_fetches[:3].tolist() == [budget] * 3 and m.first_fetches[3:].sum() == 0


def test_proportional_spreads_its_first_pass_from_day_0():
    n, budget = 3_000, 1_000.0
    web = flat_web(n)
    stream = ChangeStream(RateSchedule(np.full(n, 0.3)), seed=1)
    policy = ProportionalPolicy(web, budget, NaiveLearner())
    daily, _ = simulate(web, stream, [policy], 5, budget, cold_start=True)
    assert daily["proportional"].first_fetches[:3].tolist() == [budget] * 3


def test_a_first_fetch_dates_the_page_but_yields_no_interval():
    obs = PageObservations(4)
    obs.start_cold()
    assert obs.never_fetched(np.arange(4)).all() and np.isnan(obs.days_since(0.0)).all()
    got = obs.record(0.0, np.array([0, 1]), np.array([True, True]), np.array([-3.0, np.nan]))
    assert np.isnan(got).all() and obs.n_intervals.sum() == 0 and obs.n_changed.sum() == 0
    assert obs.days_since(2.0)[:2].tolist() == [2.0, 2.0]
    assert np.isnan(obs.days_since(2.0)[2:]).all()
    assert obs.last_modified[0] == -3.0  # the header is kept to judge the next one by
    # a revisit and a first visit on the same day: one interval, for the revisit only
    got = obs.record(2.0, np.array([1, 2]), np.array([True, False]))
    assert got[0] == 2.0 and np.isnan(got[1])
    assert obs.n_intervals.tolist() == [0, 1, 0, 0] and obs.n_changed.tolist() == [0, 1, 0, 0]
    with pytest.raises(BacktestInputError, match="cold start"):
        obs.start_cold()


def _cold(share: float) -> BacktestResult:
    config = BacktestConfig(
        pages=4_000,
        days=14,
        budget_share=share,
        seed=2,
        cold_start=True,
        policies=("planner", "oracle", "uniform"),
    )
    return run_backtest(config)


def test_the_planner_spends_the_whole_budget_from_day_0_and_never_trails_uniform_after_its_pass():
    result = _cold(0.2)
    assert result.window == (0, 14)
    planner, uniform = result.daily["planner"], result.daily["uniform"]
    # the greedy fill leaves less than one page's cost unspent
    dearest = build_workload("measured", 4_000, seed=2).web.cost.max()
    assert (planner.cost[:5] > result.budget - dearest).all()
    assert planner.first_fetches[0] == planner.fetches[0]
    # uniform's first pass takes N / B = 5 days; from then on the planner is never below it
    assert (planner.freshness[5:] >= uniform.freshness[5:]).all()
    for row in result.summary:
        metrics = result.daily[row.name]
        total = metrics.detected + metrics.no_change + metrics.first_fetches
        assert np.array_equal(total, metrics.fetches)


def test_window_day_0_only_from_a_cold_start():
    with pytest.raises(BacktestInputError, match="window"):
        run_backtest(BacktestConfig(pages=100, days=10, window=(0, 5)))
    assert BacktestConfig(days=10, cold_start=True).checked_window() == (0, 10)
    assert BacktestConfig(days=10).checked_window() == (5, 10)
