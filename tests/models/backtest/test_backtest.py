"""The policy backtest: exact simulator, baselines' rules, budget and politeness, no peeking."""

from __future__ import annotations

import numpy as np
import pytest

from models.backtest.policies import (
    NutchPolicy,
    NutchSettings,
    Policy,
    StormCrawlerPolicy,
    StormCrawlerSettings,
    UniformPolicy,
    nutch_update,
    proportional_frequencies,
    stormcrawler_update,
    uniform_frequencies,
)
from models.backtest.runner import (
    FACTORIES,
    POLICIES,
    BacktestConfig,
    BacktestResult,
    PolicyContext,
    build_policies,
    recovery,
    run_backtest,
)
from models.backtest.sim import PolicyViolationError, simulate
from models.backtest.web import (
    BacktestInputError,
    ChangeStream,
    PublicWeb,
    RateSchedule,
    draw_day_changes,
)
from models.backtest.workloads import build_workload, measure_web_shape


def flat_web(n: int, *, hosts: int = 1, capacity: float = 1e9) -> PublicWeb:
    return PublicWeb(
        hosts=np.arange(n, dtype=np.int64) % hosts,
        groups=np.zeros(n, dtype=np.int64),
        value=np.ones(n),
        cost=np.ones(n),
        host_capacity=np.full(hosts, capacity),
    )


# --------------------------------------------------------------------------- the simulator


def test_day_changes_have_the_poisson_probabilities():
    rates = np.repeat([0.1, 1.0, 3.0], 40_000)
    changes = draw_day_changes(rates, seed=3, day=5)
    for rate in (0.1, 1.0, 3.0):
        pick = rates == rate
        n = int(pick.sum())
        # 4 standard errors: a share's sqrt(p (1 - p) / n) <= 0.5 / sqrt(n), and a Poisson
        # count mean's relative 1 / sqrt(rate n)
        p_change = float(np.mean(changes.first[pick] < 1.0))
        assert p_change == pytest.approx(1 - np.exp(-rate), abs=2 / np.sqrt(n))
        count = float(changes.count[pick].mean())
        assert count == pytest.approx(rate, rel=4 / np.sqrt(rate * n))
    assert np.array_equal(changes.count > 0, np.isfinite(changes.first))


def test_uniform_revisits_match_the_closed_form_freshness():
    # every page revisited exactly every 4 days: F = (1 - e^-r) / r with r = 4 rate
    bands = np.array([0.05, 0.2, 0.5, 1.0])
    rates = np.repeat(bands, 2_000)  # the bound below is 4 standard errors of these
    web = flat_web(rates.shape[0])
    budget = rates.shape[0] / 4
    policy = UniformPolicy(web, budget)
    assert np.all(policy.interval == 4.0)
    window = (12, 44)
    daily, totals = simulate(
        web, ChangeStream(RateSchedule(rates), seed=1), [policy], 44, budget, window=window
    )
    assert np.all(daily["uniform"].fetches[1:] == rates.shape[0] / 4)
    fresh = totals.freshness["uniform"]
    assert np.all(totals.fetches["uniform"] == 8)  # every 4 days over 32 days
    for rate in bands:
        pick = rates == rate
        r = 4 * rate
        expected = (1 - np.exp(-r)) / r
        error = 4 * fresh[pick].std() / np.sqrt(pick.sum()) + 1e-3
        assert fresh[pick].mean() == pytest.approx(expected, abs=error)


def test_a_never_visited_page_has_the_exact_expected_age():
    # no revisits: a page is stale from its first change; mean age over day d is known
    rates = np.full(50_000, 0.5)
    web = flat_web(rates.shape[0])

    class Idle(Policy):
        name = "idle"

        def choose(self, day: int) -> np.ndarray:
            return np.zeros(0, dtype=np.int64)

    daily, _ = simulate(web, ChangeStream(RateSchedule(rates), seed=2), [Idle(web, 1.0)], 6, 1.0)
    # E[age at t] = t - (1 - e^-rt)/r; freshness at t = e^-rt, both averaged over day 5
    # (the day's mean from 2001 points is within 1e-5 of the integral). 4 standard errors
    # over n pages: a share's <= 0.5 / sqrt(n); an age within day 5 is at most 6 days,
    # so its standard deviation is at most 6 and its mean's 6 / sqrt(n)
    n = rates.shape[0]
    t = np.linspace(5, 6, 2001)
    fresh = np.mean(np.exp(-0.5 * t))
    assert daily["idle"].freshness[5] == pytest.approx(fresh, abs=2 / np.sqrt(n))
    expected_age = np.mean(t - (1 - np.exp(-0.5 * t)) / 0.5)
    assert daily["idle"].age[5] == pytest.approx(expected_age, abs=24 / np.sqrt(n))


def test_a_batch_over_budget_or_host_capacity_stops_the_run():
    web = flat_web(100, hosts=2, capacity=10)

    class Greedy(Policy):
        name = "greedy"

        def __init__(self, web: PublicWeb, budget: float, pages: np.ndarray) -> None:
            super().__init__(web, budget)
            self.pages = pages

        def choose(self, day: int) -> np.ndarray:
            return self.pages

    stream = ChangeStream(RateSchedule(np.full(100, 0.1)), seed=0)
    over_budget = Greedy(web, 5.0, np.arange(0, 12, 2))  # 6 pages of cost 1
    with pytest.raises(PolicyViolationError, match="over the budget"):
        simulate(web, stream, [over_budget], 3, 5.0)
    over_host = Greedy(web, 50.0, np.arange(0, 40, 2))  # 20 visits to host 0
    with pytest.raises(PolicyViolationError, match="capacity"):
        simulate(web, stream, [over_host], 3, 50.0)
    twice = Greedy(web, 50.0, np.array([1, 1]))
    with pytest.raises(PolicyViolationError, match="twice"):
        simulate(web, stream, [twice], 3, 50.0)


# --------------------------------------------------------------------------- policies


def test_every_policy_respects_the_budget_and_host_capacities_every_day():
    # 1,000 pages on 5 hosts (3,000 on 15 cost 3x the CPU for the same per-batch checks)
    workload = build_workload("measured", 1_000, seed=4, host_capacity=15)
    config = BacktestConfig(pages=1_000, days=12, budget_share=0.3, seed=4)
    budget = workload.web.budget_for_share(0.3)
    policies = build_policies(POLICIES, PolicyContext(workload, budget, config))
    seen: dict[str, list[np.ndarray]] = {p.name: [] for p in policies}
    for policy in policies:
        original = policy.choose

        def recording(day: int, policy=policy, original=original) -> np.ndarray:
            batch = original(day)
            seen[policy.name].append(np.asarray(batch))
            return batch

        policy.choose = recording  # type: ignore[method-assign]
    simulate(workload.web, ChangeStream(workload.truth, 4), policies, 12, budget)
    web = workload.web
    binding = False
    for name, batches in seen.items():
        assert len(batches) == 11, name
        for batch in batches:
            assert np.unique(batch).shape[0] == batch.shape[0], name
            assert web.cost[batch].sum() <= budget * (1 + 1e-9), name
            load = np.bincount(web.hosts[batch], minlength=web.n_hosts)
            assert (load <= web.host_capacity).all(), name
            binding |= bool((load == web.host_capacity).any())
    assert binding  # the capacities were tight enough to matter


def test_nutch_follows_adaptive_fetch_schedule():
    s = NutchSettings()
    # unchanged since the last change at day 0, fetched at day 10 with a 10-day interval:
    # x1.4 -> 14 (already >= delta 10); next fetch 10 - 0.3 * 10 + 14 = 21
    interval, nxt, modified = nutch_update(
        s, np.array([10.0]), np.array([0.0]), 10.0, np.array([False])
    )
    assert interval[0] == pytest.approx(14.0)
    assert nxt[0] == pytest.approx(21.0)
    assert modified[0] == 0.0
    # a long silence: the interval is at least the time since the last change
    interval, nxt, _ = nutch_update(s, np.array([2.0]), np.array([0.0]), 40.0, np.array([False]))
    assert interval[0] == pytest.approx(40.0)
    assert nxt[0] == pytest.approx(40.0 - 12.0 + 40.0)
    # changed: x0.8, the modification time becomes the fetch time, no shift
    interval, nxt, modified = nutch_update(
        s, np.array([10.0]), np.array([0.0]), 10.0, np.array([True])
    )
    assert interval[0] == pytest.approx(8.0)
    assert nxt[0] == pytest.approx(18.0)
    assert modified[0] == 10.0
    # bounds: 60 s and 90 days
    interval, _, _ = nutch_update(s, np.array([1e-4]), np.array([5.0]), 5.0, np.array([True]))
    assert interval[0] == pytest.approx(60 / 86_400)
    interval, _, _ = nutch_update(s, np.array([80.0]), np.array([99.0]), 99.0, np.array([False]))
    assert interval[0] == 90.0
    # without sync_delta: plain x1.4 from the fetch time
    plain = NutchSettings(sync_delta=False)
    interval, nxt, _ = nutch_update(
        plain, np.array([2.0]), np.array([0.0]), 40.0, np.array([False])
    )
    assert (interval[0], nxt[0]) == pytest.approx((2.8, 42.8))


def test_nutch_first_revisits_spread_over_the_initial_interval():
    policy = NutchPolicy(flat_web(10_000), 100.0)
    assert policy.next_due.min() > 0 and policy.next_due.max() <= 30.0
    assert np.histogram(policy.next_due, bins=3, range=(0, 30))[0].min() > 3_000


def test_stormcrawler_follows_adaptive_scheduler():
    s = StormCrawlerSettings()
    changed = stormcrawler_update(s, np.array([1.0, 4.0]), np.array([True, True]))
    assert changed == pytest.approx([0.5 + 0.5 / 24, 2.0 + 0.5 / 24])
    unchanged = stormcrawler_update(s, np.array([1.0, 10.0]), np.array([False, False]))
    assert unchanged == pytest.approx([1.5, 14.0])
    policy = StormCrawlerPolicy(flat_web(10), 10.0)
    policy.observe(1, np.array([0, 1]), np.array([True, False]))
    assert policy.next_due[:2] == pytest.approx([1 + 0.5 + 0.5 / 24, 2.5])


def test_uniform_gives_a_capped_host_what_it_can_take_and_the_rest_to_the_others():
    web = PublicWeb(
        hosts=np.r_[np.zeros(100, dtype=np.int64), np.ones(100, dtype=np.int64)],
        groups=np.zeros(200, dtype=np.int64),
        value=np.ones(200),
        cost=np.ones(200),
        host_capacity=np.array([10.0, 1e9]),
    )
    f = uniform_frequencies(web, 60.0)  # 0.3 a day for all would give host 0 30 visits
    assert f[:100] == pytest.approx(0.1)
    assert f[100:] == pytest.approx(0.5)
    assert np.dot(f, web.cost) == pytest.approx(60.0)


def test_proportional_frequencies_spend_the_budget_and_cap_at_one_visit_a_day():
    rates = np.array([0.01, 0.1, 1.0, 5.0, 20.0])
    cost = np.array([1.0, 2.0, 1.0, 1.0, 3.0])
    f = proportional_frequencies(rates, cost, 4.5)
    assert np.dot(f, cost) == pytest.approx(4.5)
    assert f.max() == 1.0
    uncapped = f < 1
    assert np.allclose(f[uncapped] / rates[uncapped], f[uncapped][0] / rates[uncapped][0])
    assert np.all(proportional_frequencies(rates, cost, 100.0) == 1.0)


# --------------------------------------------------------------------------- learning


class _Forbidden:
    """Stands in for the truth: any access from a learning policy is a failure."""

    def __getattr__(self, name: str) -> object:
        raise AssertionError(f"a learner read the true rates ({name})")


def test_learners_never_read_the_true_rates():
    # A structural check (any read of the truth raises), so a small web does: 600 pages
    workload = build_workload("shift", 600, seed=5, shift_day=3)
    changes = ChangeStream(workload.truth, seed=5)  # the simulator's nature, not a policy's
    hidden = type(workload)(
        workload.name, workload.web, _Forbidden(), workload.group_class, workload.description
    )
    config = BacktestConfig(pages=600, days=6, budget_share=0.2)
    budget = workload.web.budget_for_share(0.2)
    ctx = PolicyContext(hidden, budget, config)  # type: ignore[arg-type]
    learners = [name for name in FACTORIES if "oracle" not in name]
    policies = build_policies(learners, ctx)
    daily, _ = simulate(workload.web, changes, policies, 6, budget)
    assert all(daily[p.name].fetches[1:].sum() > 0 for p in policies)
    with pytest.raises(AssertionError, match="true rates"):  # the guard works
        simulate(workload.web, changes, build_policies(["oracle"], ctx), 3, budget)


def _small(workload: str = "measured", **changes: object) -> BacktestResult:
    base = {"pages": 4_000, "days": 24, "budget_share": 0.1, "seed": 2, "workload": workload}
    return run_backtest(BacktestConfig(**{**base, **changes}))  # type: ignore[arg-type]


def test_the_oracle_is_never_worse_than_uniform_on_a_tiny_web():
    for share in (0.05, 0.3):
        result = _small(budget_share=share, policies=("oracle", "uniform"))
        assert result.by_name("oracle").freshness > result.by_name("uniform").freshness
        assert result.by_name("oracle").budget_used <= 1 + 1e-9


@pytest.fixture(scope="module")
def measured() -> BacktestResult:
    """The measured workload (no shift) with the planner, the oracle and uniform."""
    # The checks on it are bookkeeping (counts, the gap's formula): 1,000 pages over 12 days
    return _small(pages=1_000, days=12, policies=("planner", "oracle", "uniform"))


def test_summary_counts_add_up_and_the_gap_is_reported(measured: BacktestResult):
    result = measured
    for row in result.summary:
        assert row.detected + row.no_change == row.fetches
        assert 0 <= row.freshness <= 1 and row.age >= 0
        assert row.cost_per_change == pytest.approx(row.cost / row.detected)
    gap = result.gap_closed()
    oracle, uniform = result.by_name("oracle").freshness, result.by_name("uniform").freshness
    expected = (result.by_name("planner").freshness - uniform) / (oracle - uniform)
    assert gap == pytest.approx(expected)
    assert set(result.bands) >= {"pages", "value", "planner", "oracle", "uniform"}


def test_recovery_after_the_shift_is_measured_against_the_oracle(measured: BacktestResult):
    result = _small("shift", shift_day=12, policies=("planner", "oracle", "uniform"))
    assert result.shift_day == 12
    planner = recovery(result, "planner")
    assert planner.worst_web <= 1.05
    assert np.isnan(result.daily["planner"].tracked_freshness).sum() == 0
    with pytest.raises(BacktestInputError):
        recovery(measured, "planner")  # it has the oracle and the planner, but no shift


def test_the_measured_workload_looks_like_the_measured_web():
    shape = measure_web_shape(build_workload("measured", 20_000, seed=0))
    assert 0.15 < shape.changed_every_daily_visit < 0.3  # Cho & Garcia-Molina: over 20%
    assert shape.institutional_never_4_months > 0.5  # half of .edu/.gov never changed
    assert 0.4 < shape.never_changed_11_weekly < 0.7  # Fetterly et al.: about 65%


def test_bad_input_is_named():
    with pytest.raises(BacktestInputError, match="workload"):
        build_workload("nope", 10)
    with pytest.raises(BacktestInputError, match="objective"):
        run_backtest(BacktestConfig(pages=100, objective="nope"))
    with pytest.raises(BacktestInputError, match="window"):
        run_backtest(BacktestConfig(pages=100, days=10, window=(5, 20)))
    with pytest.raises(BacktestInputError, match="budget share"):
        flat_web(3).budget_for_share(0)
