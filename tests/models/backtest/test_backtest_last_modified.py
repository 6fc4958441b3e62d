"""Last-Modified in the policy backtest: what hosts send, what the planner makes of it."""

from __future__ import annotations

import numpy as np
import pytest

import models.backtest.learning as learning
from models.backtest.last_modified import (
    LM_ABSENT,
    LM_HONEST,
    LM_NOW,
    LastModifiedClock,
    LastModifiedShares,
    host_behaviour,
)
from models.backtest.learning import PageObservations
from models.backtest.runner import BacktestConfig, run_backtest
from models.backtest.web import BacktestInputError, draw_day_changes


def test_headers_follow_each_hosts_behaviour_and_the_true_last_change():
    rate = np.full(6, 3.0)
    kind = np.array([LM_HONEST, LM_HONEST, LM_ABSENT, LM_NOW, LM_HONEST, LM_NOW])
    clock = LastModifiedClock(rate, kind, seed=1)
    start = clock.headers(np.arange(6), 0.0)
    assert (start[[0, 1, 4]] < 0).all() and np.isnan(start[2]) and (start[[3, 5]] == 0).all()
    for day in range(3):
        today = draw_day_changes(rate, seed=1, day=day)
        hit = np.isfinite(today.first)
        assert (today.last[hit] >= today.first[hit]).all() and (today.last[hit] < 1).all()
        clock.advance(day, today)
        seen = clock.headers(np.arange(6), day + 1.0)
        np.testing.assert_allclose(
            seen[hit & (kind == LM_HONEST)], (day + today.last)[hit & (kind == LM_HONEST)]
        )
        assert (seen[kind == LM_NOW] == day + 1.0).all()


def test_shares_are_checked_and_seeded():
    first = host_behaviour(1_000, LastModifiedShares(0.5, 0.25), seed=3)
    assert np.array_equal(first, host_behaviour(1_000, LastModifiedShares(0.5, 0.25), seed=3))
    assert abs((first == LM_HONEST).mean() - 0.5) < 0.05
    assert (host_behaviour(50, LastModifiedShares(0.0, 0.0), seed=3) == LM_ABSENT).all()
    with pytest.raises(BacktestInputError, match="shares"):
        LastModifiedShares(0.8, 0.3)


def test_the_learner_takes_ages_from_honest_hosts_only():
    obs = PageObservations(4, hosts=np.array([0, 0, 1, 1]))
    obs.record_seed(np.array([-2.0, -1.0, 0.0, 0.0]))  # host 1 stamps "now"
    obs.record(1.0, np.arange(4), np.ones(4, bool), np.array([0.5, 0.9, 1.0, 1.0]))
    moments = obs.moments()
    np.testing.assert_allclose(moments.ages()[0], [2.0, 2.0, 0.0, 0.0])
    np.testing.assert_allclose(moments.ages()[1], [2.5, 1.1, 0.0, 0.0])
    assert moments.n_changed.tolist() == [0, 0, 1, 1]
    assert obs.censored_moments().n_changed.tolist() == [1, 1, 1, 1]


def test_the_backtest_planner_builds_its_moments_with_the_production_function(monkeypatch):
    calls: list[float] = []
    production = learning.moments_with_last_modified

    def spy(*args, **kwargs):
        out = production(*args, **kwargs)
        calls.append(float(out.ages()[0].sum()))
        return out

    monkeypatch.setattr(learning, "moments_with_last_modified", spy)
    config = BacktestConfig(pages=2_000, days=4, budget_share=0.2, policies=("planner",))
    run_backtest(config)
    assert calls and calls[-1] > 0  # honest hosts' ages reached the planner's estimator


def test_no_honest_host_gives_the_same_run_as_no_header_at_all():
    base = {"pages": 3_000, "days": 10, "budget_share": 0.1, "seed": 4}
    policies = ("planner", "uniform", "nutch")
    dishonest = run_backtest(
        BacktestConfig(**base, policies=policies, last_modified_honest=0.0, last_modified_now=0.5)
    )
    silent = run_backtest(
        BacktestConfig(**base, policies=policies, last_modified_honest=0.0, last_modified_now=0.0)
    )
    for name in policies:
        np.testing.assert_array_equal(dishonest.daily[name].freshness, silent.daily[name].freshness)
