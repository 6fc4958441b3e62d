import os

import numpy as np
import pytest
from hypothesis import assume, given, seed, settings
from hypothesis import strategies as st

from models.allocation import local as allocation_local
from models.allocation.allocate import (
    AllocationInputError,
    AllocationProblem,
    allocate,
    proportional_allocation,
    solve,
    uniform_allocation,
)
from models.allocation.freshness import (
    AGE,
    CHANGE_CAPTURE,
    FRESHNESS,
    age,
    changes_captured,
    freshness,
    freshness_gain,
    priority,
)
from models.allocation.local import DIRECT_PAGES, _LocalSolver, _start, solve_local
from models.allocation.model import MOMENTS, BoundaryPages, Centres, Model, UnresolvedError
from models.allocation.refresh import Pages
from models.allocation.solver import (
    TOLERANCE,
    _HostSolver,
    fresh_values,
    page_scale,
    solve_direct,
)
from models.allocation.table import inverse_of
from models.estimation.synthetic import allocation_web

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


def test_the_solvers_freshness_is_the_same_floats_as_the_library_s():
    rng = np.random.default_rng(1)
    rate = rng.lognormal(-4, 3, 20_000)  # r = rate / f on both sides of the series' 1e-3
    f = rng.lognormal(-2, 2, 20_000)
    rate[::17] = 0.0
    f[::13] = 0.0
    np.testing.assert_array_equal(fresh_values(rate, f), freshness(rate, f))


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


# 50 examples, 100 solves (each ~60 ms of per-iteration overhead whatever n): 150 cost 22 s
# of CPU three times per make test; the regressions it found have their own tests below.
@settings(max_examples=50, deadline=None)
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


# ---------------------------------------------------------------- big problems: local models


def web_problem(n, n_hosts, seed=7, objective=FRESHNESS, budget_share=0.2):
    """The benchmark's synthetic web (``synthetic.allocation_web``) as a problem."""
    web = allocation_web(n, n_hosts, seed=seed)
    rates, weights, costs, hosts, per_host = (
        web.rates,
        web.weights,
        web.costs,
        web.hosts,
        web.pages_per_host,
    )
    capacity = np.minimum(1440.0, np.maximum(1.0, 0.5 * per_host))[np.unique(hosts)]
    return AllocationProblem.build(
        rates,
        budget_share * float(costs.sum()),
        weights=weights,
        costs=costs,
        hosts=hosts,
        host_capacity=capacity,
        max_frequency=1.0,
        objective=objective,
    )


def assert_same_answer(problem, local, direct):
    """Two solutions of one problem agree to the solvers' precision, and are feasible.

    The multipliers agree as far as the budget pins them: both solvers meet it to
    ``TOLERANCE`` relative, so they may differ by 2 TOLERANCE B / |d spend / d mu| (hosts
    following mu), doubled for margin; where every page's host binds the spend hardly moves
    with mu, and that bound is above the 1e-8 kept elsewhere.
    """
    p = problem
    slope = _HostSolver(p, page_scale(p)).evaluate(direct.multiplier).slope
    pinned = 4 * TOLERANCE * p.budget / (direct.multiplier * abs(slope))
    assert local.multiplier == pytest.approx(direct.multiplier, rel=max(1e-8, pinned))
    np.testing.assert_allclose(local.frequencies, direct.frequencies, rtol=1e-7, atol=1e-9)
    spent = float(np.sum(p.costs * local.frequencies))
    assert spent == pytest.approx(p.budget, rel=1e-10)
    load = np.bincount(p.hosts, local.frequencies, minlength=p.host_capacity.shape[0])
    assert (load <= p.host_capacity * (1 + 1e-10)).all()
    binding = local.host_multipliers > 0
    np.testing.assert_allclose(load[binding], p.host_capacity[binding], rtol=1e-10)


def run_local(problem, perturb=None):
    """The local solver alone (no fallback), from the reduced problem's start or a given one."""
    scale = page_scale(problem)
    pages = Pages.of(problem, scale)
    start = _start(problem)
    assert start is not None
    mu, nu, candidates = start
    if perturb is not None:
        mu, nu = perturb(mu, nu)
    solution = _LocalSolver(problem, pages, candidates).run(mu, nu)
    assert solution is not None, "the local models did not settle"
    return solution


@st.composite
def local_problems(draw, crowded=False):
    """A small web and a start off by up to 2x in mu and in every host's nu. ``crowded``:
    100-200 pages on 6-8 hosts at a large budget, where several hosts bind with a page on
    their give-up ramp (the draws the session-14 find came from)."""
    if crowded:
        n, n_hosts = draw(st.integers(100, 200)), draw(st.integers(6, 8))
        share, objective = draw(st.floats(0.3, 0.5)), FRESHNESS
    else:
        n, n_hosts = draw(st.integers(40, 400)), draw(st.integers(1, 8))
        share = draw(st.floats(0.05, 0.5))
        objective = draw(st.sampled_from([FRESHNESS, AGE, CHANGE_CAPTURE]))
    seed = draw(st.integers(0, 10_000))
    tilt = 2.0 ** draw(st.floats(-1.0, 1.0)), 2.0 ** draw(st.floats(-1.0, 1.0))
    return web_problem(n, n_hosts, seed, objective, share), tilt


#: Examples of each property test below (~40 ms each). The same random draws on every run
#: (a fixed seed; derandomize=True draws only tiny problems), so a find cannot fail an
#: unrelated change's CI by chance; search wider by hand with more examples (this
#: variable: 2,000 each passed in session 15) and another seed. Finds are regression
#: tests below.
LOCAL_EXAMPLES = int(os.environ.get("RECRAWL_LOCAL_EXAMPLES", "60"))


def _reaches_the_direct_answer(problem, tilt_mu, tilt_nu):
    direct = solve_direct(problem, page_scale(problem))
    if not 0 < direct.multiplier < np.inf:
        return  # the budget does not bind: the local solver is not asked
    try:
        local = run_local(problem, lambda mu, nu: (mu * tilt_mu, nu * tilt_nu))
    except UnresolvedError:
        # A page on its ramp holds the budget's root between two floats: the direct
        # solver's mixing takes it (solve_local falls back). Small problems only.
        assume(False)
    assert_same_answer(problem, local, direct)


@seed(20261204)
@settings(max_examples=LOCAL_EXAMPLES, deadline=None)
@given(local_problems())
def test_local_models_reach_the_direct_answer_from_a_rough_start(case):
    problem, (tilt_mu, tilt_nu) = case
    _reaches_the_direct_answer(problem, tilt_mu, tilt_nu)


@seed(20261205)
@settings(max_examples=LOCAL_EXAMPLES, deadline=None)
@given(local_problems(crowded=True))
def test_local_models_settle_where_hosts_bind_on_their_ramps(case):
    problem, (tilt_mu, tilt_nu) = case
    _reaches_the_direct_answer(problem, tilt_mu, tilt_nu)


def test_a_host_mixed_across_its_capacity_keeps_the_budget_exact():
    # Regression (found by the property test above): a host whose root lies on a page's
    # ramp below phi's limit gets its ramp pages mixed to fill its capacity exactly; the
    # model's budget must count that mix (the exact spend was 5e-11 over, so the local
    # models never settled).
    problem = web_problem(103, 6, seed=1101, budget_share=0.375)
    local = run_local(problem)
    assert_same_answer(problem, local, solve_direct(problem, page_scale(problem)))


@pytest.mark.parametrize("tilt", [1.0625, 0.94])
def test_a_start_six_percent_off_settles(tilt):
    # Found by the property test above (session 14). From mu x 1.0625 the local models
    # cycled: a host whose root lay on a page's ramp (mixed across its capacity) was given
    # no d nu / d mu, so its next box was not sheared along mu and it was held at the box's
    # edge as soon as mu moved; held hosts move alone, with boxes sized for mu's own small
    # error rather than for the free pages' box mu may still cross, and two such hosts took
    # turns being held while mu crept 0.1% a refresh. From mu x 0.94 the first box's model
    # jumped across the budget (a host held at its box's edge) and the solver gave up,
    # although the jump was the box's, not the problem's.
    problem = web_problem(134, 8, seed=614, budget_share=0.484375)
    direct = solve_direct(problem, page_scale(problem))
    assert_same_answer(problem, run_local(problem), direct)
    assert_same_answer(problem, run_local(problem, lambda mu, nu: (mu * tilt, nu)), direct)


def test_a_third_order_term_over_a_vanishing_second_keeps_the_error_finite():
    # Found in session 15 (a crowded draw, before the fix of the root between two floats
    # below made that draw settle another way). Where a slot's second-order terms vanish or
    # cancel, the error's fourth-order estimate third^2 / second was inf, taken as the
    # largest float: every host's box became as wide as allowed, the answer was never
    # final, and the same host refresh repeated until the refreshes ran out. The series'
    # ratio is taken at most 1: the fourth-order term at most the third's size.
    moments = np.zeros((MOMENTS, 1))
    moments[13, 0] = 1.0  # the spend is cubic in mu - mu_c, with no second-order term
    none = np.zeros(0)
    boundary = BoundaryPages(none.astype(np.intp), none, none, none, none, none, none)
    centres = Centres(
        np.ones(1), np.zeros(1), np.full(1, 0.2), np.zeros(1), np.zeros(1), np.zeros(1, bool)
    )
    model = Model(centres, moments, boundary, np.full(1, np.inf), 1.0, inverse_of(FRESHNESS), 1e-10)
    _, spend_error = model._truncation(1.1, np.zeros(1), np.zeros(1), np.zeros(1))
    third = 0.1**3  # the cubic's value at mu - mu_c = 0.1
    # half the estimate, a twentieth of its worst case, and a fourth term of at most third
    assert spend_error == pytest.approx(0.5 * third + 0.05 * third + third, rel=1e-12)


def test_a_budget_root_between_two_floats_within_tolerance_is_taken():
    # Found by the crowded property test (session 15). The spend falls so steeply at the
    # root (d gap / d log mu ~ -8e4) that one float of mu moves it by 1.7e-11: the model
    # cannot meet its own 1e-12, but the float nearer the budget is within the 1e-11 the
    # answer is checked to, and is the answer (it was an UnresolvedError: direct solve).
    problem = web_problem(200, 6, seed=3143, budget_share=0.4107883333667889)
    direct = solve_direct(problem, page_scale(problem))
    local = run_local(problem, lambda mu, nu: (mu * 0.8137148569235301, nu * 1.1891803373058705))
    assert_same_answer(problem, local, direct)


def test_where_every_page_s_host_binds_the_multiplier_is_pinned_only_so_far():
    # Found by a wide draw (session 15): all three hosts bind, so the spend hardly moves
    # with mu (d spend / d mu = -15 at mu = 0.0034, B = 139); the two solvers' multipliers
    # differ by 1.9e-8 relative, inside the 1.1e-7 the budget's tolerance allows, with the
    # frequencies equal to 1.3e-10.
    problem = web_problem(256, 3, seed=4509, objective=AGE, budget_share=0.49578536859964917)
    direct = solve_direct(problem, page_scale(problem))
    local = run_local(problem, lambda mu, nu: (mu * 1.8662415285374523, nu * 0.530233474588548))
    assert_same_answer(problem, local, direct)


def test_hosts_two_four_five_and_seven_of_eight_binding_first():
    # Found by the property test's check (session 15): the direct solver caches the
    # binding hosts' bounds under the binding set's packed bits, and began with the key
    # b"-", which is hosts 2, 4, 5 and 7 of 8 (0b00101101): a first evaluation binding
    # exactly those read empty bounds (a ValueError from np.clip).
    problem = web_problem(129, 8, seed=7694, budget_share=0.43356477566738155)
    direct = solve_direct(problem, page_scale(problem))
    binding = np.flatnonzero(direct.host_multipliers > 0)
    assert np.packbits(direct.host_multipliers > 0).tobytes() == b"-", binding
    point = _HostSolver(problem, page_scale(problem)).evaluate(direct.multiplier)
    # each binding host solved to TOLERANCE (1e-11) on its load again, from a cold start
    np.testing.assert_allclose(point.frequencies, direct.frequencies, rtol=1e-9, atol=1e-12)


def test_an_overflowing_error_estimate_widens_the_box():
    # Regression (found by the property test above, before the phi table was made exact):
    # far from a refresh's centre the third-order error estimate overflowed, a host that
    # does not follow mu got 0 x inf = NaN for its error, and the NaN box sent a NaN
    # multiplier to the table (an IndexError). An unknown error takes the widest box.
    assert allocation_local._reach(float("nan"), 2.0, 0.1, False) == 1.0
    assert allocation_local._reach(float("inf"), 2.0, 0.1, False) == 1.0


@pytest.mark.parametrize("objective", [FRESHNESS, AGE, CHANGE_CAPTURE], ids=lambda o: o.name)
def test_local_models_agree_with_the_direct_solver(objective):
    problem = web_problem(30_000, 300, seed=3, objective=objective)
    local = run_local(problem, lambda mu, nu: (1.02 * mu, 0.9 * nu))
    assert_same_answer(problem, local, solve_direct(problem, page_scale(problem)))


def test_big_problems_take_the_local_path_and_are_optimal():
    problem = web_problem(DIRECT_PAGES + 40_000, 3_000, seed=11)
    result = solve(problem)
    assert result.spent == pytest.approx(problem.budget, rel=1e-10)
    load = np.bincount(problem.hosts, result.frequencies, minlength=problem.host_capacity.shape[0])
    assert (load <= problem.host_capacity * (1 + 1e-10)).all()
    assert (result.host_multipliers > 0).any()
    assert kkt_residual(problem, result) < 1e-6


def test_the_direct_solver_takes_over_when_local_models_do_not_settle(monkeypatch):
    problem = web_problem(20_000, 200, seed=5)
    monkeypatch.setattr(allocation_local, "_REFRESHES", 0)
    result = solve_local(problem, page_scale(problem))
    direct = solve_direct(problem, page_scale(problem))
    np.testing.assert_array_equal(result.frequencies, direct.frequencies)


EPS = float(np.finfo(np.float64).eps)
EPS32 = float(np.finfo(np.float32).eps)
# The table's accuracy in y = log r, i.e. relative in f = rate e^-y (the module's "~1e-11"):
# a second-order Taylor step from the nearest node, |offset| <= 1/2 grid step, leaves
# max|y'''| (1/2)^3 / 6 (in grid steps; 3.2e-12 for q, 2.7e-12 for the age phi, from the
# tables' own third differences, checked below), and the nodes' y are phi's inverse to a
# few eps (phi to 2 eps, its series and closed forms; u from log to 1 ulp; libm or numpy's
# SIMD exp/log to a few ulps). 1e-11 leaves room for both.
TABLE_Y_ERROR = 1e-11


@pytest.mark.parametrize("objective", [FRESHNESS, AGE, CHANGE_CAPTURE], ids=lambda o: o.name)
def test_the_table_cells_meet(objective):
    # Two neighbouring nodes' expansions at the cell boundary differ by at most both
    # Taylor remainders, max|y'''| / 48 each, y''' read from the table's own y''/2
    # (a node's c2) as 2 dc2 per grid step; plus the nodes' rounding, a few eps |y|.
    table = inverse_of(objective)
    c0, c1, c2 = table.c0, table.c1, table.c2
    left = c0[:-1] + 0.5 * c1[:-1] + 0.25 * c2[:-1]
    right = c0[1:] - 0.5 * c1[1:] + 0.25 * c2[1:]
    third = 2 * np.abs(np.diff(c2[1:-1]))  # the end nodes extrapolate (c2 = 0 there)
    remainder = 1.25 * float(third.max()) / 48  # 1.25: y''' varies within a cell
    assert 2 * remainder <= TABLE_Y_ERROR
    jump = np.abs(left - right)
    assert np.all(jump <= 2 * remainder + 8 * EPS * np.maximum(np.abs(c0[:-1]), 1.0))


@pytest.mark.parametrize("objective", [FRESHNESS, AGE, CHANGE_CAPTURE], ids=lambda o: o.name)
def test_the_table_inverts_phi_with_its_derivatives(objective):
    table = inverse_of(objective)
    top = 0.999 * table.edge if table.bounded else 1e8
    t = np.exp(np.linspace(np.log(1e-12), np.log(top), 20_001))
    ones = np.ones_like(t)
    f, d1, d2 = table.raw_expansion(t, ones, ones)
    # phi(1/f) = t: f off by TABLE_Y_ERROR relative moves phi by that times
    # dlog phi / dlog r = 1 / (A (1 + x)) <= 3 (A = dy/du >= 1/3: the age phi's r^3 end),
    # plus phi's own 2 eps and the read's log (1 ulp of u times A).
    np.testing.assert_allclose(objective.phi(1.0 / f), t, rtol=3 * TABLE_Y_ERROR + 8 * EPS)
    room = np.minimum(t, table.limit - t) if table.bounded else t

    def read(at):
        return table.raw_expansion(at, ones, ones)[0]

    for step in (1e-5, 1e-3):  # small steps for f', larger for f''
        # Central differences at h and h/2, Richardson-combined: (4 D(h/2) - D(h)) / 3
        # leaves a truncation of order step^4 (1e-20 of f', 1e-12 of f''s natural size
        # f / room^2, times derivatives of f of order room^-k at most: negligible). Each
        # read is off by up to TABLE_Y_ERROR f (reads may fall in different cells, so
        # the errors need not cancel): at most 3 E f / h in f' and (4 * 16 + 4) / 3 < 23
        # E f / h^2 in f''; and t +- h rounds to 1/2 ulp of t, moving a read by
        # |f'| eps t / 2: 3 eps t / h |f'| and 23 eps t / h^2 |f'|.
        h = step * room
        up, down, half_up, half_down = (read(t + k * h) for k in (1, -1, 0.5, -0.5))
        if step < 1e-4:
            wide, narrow = (up - down) / (2 * h), (half_up - half_down) / h
            bound = 3 * (TABLE_Y_ERROR * f + EPS * t * np.abs(d1)) / h
            assert np.all(np.abs(d1 - (4 * narrow - wide) / 3) <= bound)
        else:  # f'' crosses 0: measured against the reads' errors, not its own size
            wide = (up - 2 * f + down) / (h * h)
            narrow = (half_up - 2 * f + half_down) / (h * h / 4)
            bound = 23 * (TABLE_Y_ERROR * f + EPS * t * np.abs(d1)) / (h * h)
            assert np.all(np.abs(2 * d2 - (4 * narrow - wide) / 3) <= bound)
    # The float32 reading (refreshes whose boxes are not final): the node's exp(-y) and
    # coefficients rounded to float32 (1/2 ulp each), the offset's polynomial and float32
    # exp of it (numpy's SIMD float32 exp is good to a few ulps: 2 measured under AVX2,
    # 1/2 without; 4 allowed), then about ten roundings for f' and f'' (products of
    # float32 terms): 16 float32 ulps of each's natural size, f'' against f / room^2 (it
    # crosses 0), plus the float64 table's own error.
    single = table.raw_expansion(
        t, ones.astype(np.float32), ones.astype(np.float32), dtype=np.float32
    )
    sizes = (f, np.abs(d1), f / room**2)
    for exact, value, size in zip((f, d1, d2), single, sizes, strict=True):
        assert value.dtype == np.float32
        assert np.all(np.abs(value - exact) <= (16 * EPS32 + TABLE_Y_ERROR) * size)
