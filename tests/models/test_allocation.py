import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.allocation import (
    AllocationInputError,
    AllocationProblem,
    allocate,
    proportional_allocation,
    solve,
    uniform_allocation,
)
from models.freshness import (
    AGE,
    CHANGE_CAPTURE,
    age,
    changes_captured,
    freshness,
    freshness_gain,
    priority,
)

# ---------------------------------------------------------------- known answers


def test_cho_garcia_molina_five_pages():
    result = allocate([1, 2, 3, 4, 5], 5.0)
    np.testing.assert_allclose(result.frequencies, [1.15, 1.36, 1.35, 1.14, 0.0], atol=0.005)
    assert result.expected_freshness == pytest.approx(0.374, abs=5e-4)
    problem = AllocationProblem.build([1, 2, 3, 4, 5], 5.0)
    uniform = freshness(problem.rates, uniform_allocation(problem)).mean()
    proportional = freshness(problem.rates, proportional_allocation(problem)).mean()
    assert uniform == pytest.approx(0.365, abs=5e-4)
    assert proportional == pytest.approx(0.317, abs=5e-4)
    assert result.spent == pytest.approx(5.0, rel=1e-10)


@pytest.mark.parametrize(
    ("rate", "expected"),
    [
        (96, 0.010),
        (24, 0.042),
        (4, 0.241),
        (1, 0.400),
        (1 / 7, 0.124),
        (1 / 30, 0.032),
        (1 / 365, 0.003),
    ],
)
def test_seed_table_fresh_days_per_visit(rate, expected):
    assert freshness_gain(rate, 1.0, 1.0) == pytest.approx(expected, abs=5e-4)


def test_priority_is_value_times_gain_over_cost():
    assert priority(5.0, 1.0, 1.0, 2.0) == pytest.approx(5.0 * 0.39958 / 2.0, rel=1e-3)
    assert freshness_gain(0.0, 3.0, 1.0) == 0.0  # a page that never changes gains nothing


def test_closed_forms():
    assert freshness(1.0, 1.0) == pytest.approx(1 - np.exp(-1))
    assert freshness(0.0, 1.0) == 1.0 and freshness(1.0, 0.0) == 0.0
    # age: I (1/2 - 1/r + (1 - e^-r)/r^2) with I = 1, r = 2
    assert age(2.0, 1.0) == pytest.approx(0.5 - 0.5 + (1 - np.exp(-2)) / 4)
    assert changes_captured(2.0, 1.0) == pytest.approx(1 - np.exp(-2))
    assert freshness(1e-9, 1.0) == pytest.approx(1.0)


def test_age_and_capture_objectives_behave_as_the_seed_says():
    rates = np.array([1.0, 2.0, 3.0, 4.0, 5.0])
    fresh = allocate(rates, 5.0).frequencies
    by_age = allocate(rates, 5.0, objective=AGE).frequencies
    capture = allocate(rates, 5.0, objective=CHANGE_CAPTURE).frequencies
    assert fresh[-1] == 0.0 and (by_age > 0).all()  # age never gives up on a page
    np.testing.assert_allclose(capture, rates / 3.0, rtol=1e-8)  # more visits to fast pages
    assert np.all(np.diff(capture) > 0)


# ---------------------------------------------------------------- properties


def problems(draw, n_max=40):
    n = draw(st.integers(1, n_max))
    floats = st.floats(0.001, 20.0)
    rates = np.array(draw(st.lists(floats, min_size=n, max_size=n)))
    costs = np.array(draw(st.lists(st.floats(0.1, 5.0), min_size=n, max_size=n)))
    weights = np.array(draw(st.lists(st.floats(0.1, 10.0), min_size=n, max_size=n)))
    hosts = np.array(draw(st.lists(st.integers(0, 3), min_size=n, max_size=n)))
    n_hosts = len(np.unique(hosts))
    capacity = np.array(draw(st.lists(st.floats(0.2, 10.0), min_size=n_hosts, max_size=n_hosts)))
    budget = draw(st.floats(0.05, 50.0))
    cap = draw(st.sampled_from([None, 1.0, 3.0]))
    return rates, costs, weights, hosts, capacity, budget, cap


@st.composite
def problem_strategy(draw):
    return problems(draw)


def kkt_residual(problem, result):
    """Largest violation of the optimality conditions, relative to the marginal values."""
    p = problem
    f = result.frequencies
    lam, w, c = p.rates, p.weights, p.costs
    r = lam / np.where(f > 0, f, 1.0)
    marginal = w / lam * (-np.expm1(-r) - r * np.exp(-r))  # w dF/df
    price = result.multiplier * c + result.host_multipliers[p.hosts]
    inside = (f > 1e-9) & (f < p.max_frequency * (1 - 1e-9))
    at_zero = f <= 1e-9
    worst = 0.0
    if inside.any():
        worst = max(worst, float(np.max(np.abs(marginal[inside] - price[inside]) / price[inside])))
    if at_zero.any():  # dF/df at f -> 0 is w / rate; giving up must be right
        worst = max(worst, float(np.max((w / lam - price)[at_zero] / price[at_zero])))
    return worst


@settings(max_examples=150, deadline=None)
@given(problem_strategy())
def test_allocation_properties(args):
    rates, costs, weights, hosts, capacity, budget, cap = args
    problem = AllocationProblem.build(
        rates,
        budget,
        costs=costs,
        weights=weights,
        hosts=hosts,
        host_capacity=capacity,
        max_frequency=cap,
    )
    result = solve(problem)
    f = result.frequencies
    assert (f >= 0).all() and np.isfinite(f).all()
    spent = float(np.sum(costs * f))
    assert spent <= budget * (1 + 1e-9)
    load = np.bincount(problem.hosts, f)
    if result.multiplier > 0:  # the budget binds: spent exactly, binding hosts or not
        assert spent == pytest.approx(budget, rel=1e-8)
    assert (load <= problem.host_capacity * (1 + 1e-8)).all()
    if cap is not None:
        assert (f <= cap * (1 + 1e-12)).all()
    assert kkt_residual(problem, result) < 1e-6
    # more budget never lowers the objective
    richer = solve(
        AllocationProblem.build(
            rates,
            budget * 1.5,
            costs=costs,
            weights=weights,
            hosts=hosts,
            host_capacity=capacity,
            max_frequency=cap,
        )
    )
    assert richer.objective_value >= result.objective_value - 1e-9 * abs(result.objective_value)


@settings(max_examples=100, deadline=None)
@given(
    st.lists(st.floats(0.001, 20.0), min_size=1, max_size=30),
    st.floats(0.05, 50.0),
)
def test_uniform_is_never_better_than_the_optimum(rates, budget):
    problem = AllocationProblem.build(rates, budget)
    best = solve(problem)
    uniform = float(np.sum(freshness(problem.rates, uniform_allocation(problem))))
    proportional = float(np.sum(freshness(problem.rates, proportional_allocation(problem))))
    assert best.objective_value >= uniform - 1e-9 * uniform
    assert best.objective_value >= proportional - 1e-9 * proportional


# ---------------------------------------------------------------- degenerate input


def test_zero_budget_visits_nothing():
    result = allocate([1.0, 2.0], 0.0)
    assert (result.frequencies == 0).all() and result.spent == 0.0


def test_all_rates_zero_need_no_visits():
    result = allocate([0.0, 0.0], 3.0, max_frequency=1.0)
    assert (result.frequencies == 0).all()
    assert result.expected_freshness == 1.0


def test_one_page():
    result = allocate([2.0], 1.5)
    assert result.frequencies[0] == pytest.approx(1.5)


def test_budget_larger_than_pages_can_use():
    result = allocate([1.0, 2.0, 0.5], 100.0, max_frequency=1.0)
    np.testing.assert_allclose(result.frequencies, 1.0)
    assert result.multiplier == 0.0 and result.spent == pytest.approx(3.0)


def test_host_capacity_binds():
    result = allocate(
        [1.0, 1.0, 1.0], 10.0, hosts=["a", "a", "b"], host_capacity=[0.5, 5.0], max_frequency=2.0
    )
    f = result.frequencies
    assert f[0] + f[1] == pytest.approx(0.5, rel=1e-9)
    assert f[2] == pytest.approx(2.0)
    assert result.host_multipliers[0] > 0 and result.host_multipliers[1] == 0


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"rates": [1.0, np.nan], "budget": 1.0}, "NaN"),
        ({"rates": [1.0, -1.0], "budget": 1.0}, "non-negative"),
        ({"rates": [1.0], "budget": -1.0}, "budget"),
        ({"rates": [1.0], "budget": np.inf}, "budget"),
        ({"rates": [1.0], "budget": 1.0, "costs": [0.0]}, "costs must be positive"),
        ({"rates": [1.0, 2.0], "budget": 1.0, "weights": [1.0]}, "weights"),
        ({"rates": [1.0], "budget": 1.0, "host_capacity": 1.0}, "needs hosts"),
        ({"rates": [1.0], "budget": 1.0, "min_frequency": 2.0}, "over the budget"),
    ],
)
def test_bad_problems_are_named(kwargs, message):
    with pytest.raises(AllocationInputError, match=message):
        allocate(**kwargs)


def test_budget_spent_exactly_with_binding_hosts_and_tied_pages_at_the_edge():
    # Regression: many identical pages at the edge of being given up on a binding host made
    # the spend jump across the budget (in float64 f falls from ~rate/37 to 0 in one ulp).
    rates = [
        6.0,
        1.0,
        6.5625,
        7.0,
        6.15625,
        0.0234375,
        7.0,
        1.203125,
        14.515625,
        1.0,
        7.0,
        7.0,
        13.265625,
        1.0,
        4.0,
        17.484375,
        7.0,
        7.0,
        2.0078125,
    ]
    costs = [
        3.0,
        2.75,
        1.0,
        1.0,
        0.78425429,
        0.453125,
        1.0,
        2.83896518,
        2.21289062,
        1.0,
        1.0,
        1.0,
        0.1,
        0.1,
        0.1,
        2.515625,
        1.0,
        1.0,
        0.1,
    ]
    weights = [
        2.75390625,
        3.0,
        1.0,
        1.0,
        0.78425429,
        0.453125,
        1.0,
        2.83896518,
        2.21289062,
        1.0,
        1.0,
        1.0,
        8.18132907,
        9.42273609,
        5.82712465,
        2.515625,
        1.0,
        1.0,
        5.1900931,
    ]
    hosts = [0, 0, 0, 0, 3, 3, 0, 1, 3, 0, 0, 0, 1, 2, 0, 3, 0, 0, 3]
    result = allocate(
        rates,
        6.15625,
        costs=costs,
        weights=weights,
        hosts=hosts,
        host_capacity=[0.2, 1.5, 6.578125, 7.22851562],
    )
    assert result.multiplier > 0
    assert result.spent == pytest.approx(6.15625, rel=1e-8)
