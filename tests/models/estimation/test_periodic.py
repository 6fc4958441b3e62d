"""The periodicity detector: a page changing every P cycles is found with its phase; Poisson
pages are not; planning visits a detected page on the first cycle after its change."""

import itertools

import numpy as np
import pytest

from models.estimation.periodic import (
    PERIODS,
    DetectionRule,
    PeriodicInputError,
    PeriodicOutlook,
    PhaseHistory,
    covered_cells,
    detect,
    outlook,
    planning_outlook,
)
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.select import Slices


def periodic_changes(visits, period, phase):
    """Whether a page changing at ``phase + k * period`` changed between each two visits."""
    times = phase + period * np.arange(200)
    return np.array([np.any((times > a) & (times <= b)) for a, b in itertools.pairwise(visits)])


def history_of(visits, changed):
    h = PhaseHistory.empty(1)
    for a, b, c in zip(visits[:-1], visits[1:], changed, strict=True):
        h.record(np.array([0]), [a], [b], [float(b - a)], [c])
    return h


def test_covered_cells_wrap_around_the_period():
    # cells 6, 7, 8 mod 7 = 6, 0, 1; and an interval of 7 cells or more covers them all
    cover = covered_cells([5, 0], [8, 9])[:, PERIODS.tolist().index(7)]
    assert cover.tolist() == [0b1000011, 0b1111111]
    with pytest.raises(PeriodicInputError, match="ends before"):
        covered_cells([3], [2])


def test_a_period_7_page_is_detected_with_its_phase_window():
    rng = np.random.default_rng(5)
    visits = np.sort(rng.choice(np.arange(60), 25, replace=False))
    changed = periodic_changes(visits, 7.0, 3.4)  # changes in cells 4, 11, 18, ...
    found = detect(history_of(visits, changed), [changed.sum()])
    assert found.period.tolist() == [7]
    phases = int(found.phases[0])
    assert phases & (1 << 4), "the true phase (cell 4 mod 7) is in the window"
    assert 1 <= found.width()[0] <= DetectionRule().max_phases


def test_rows_at_once_give_what_recording_one_by_one_gives():
    rng = np.random.default_rng(2)
    pages, start, end, changed = [], [], [], []
    for page in range(30):
        visits = np.sort(rng.choice(np.arange(50), 12, replace=False))
        pages += [page] * 11
        start += visits[:-1].tolist()
        end += visits[1:].tolist()
        changed += (rng.random(11) < 0.4).tolist()
    pages, start, end = np.array(pages), np.array(start), np.array(end)
    days = (end - start).astype(float)
    shuffled = rng.permutation(pages.shape[0])
    at_once = PhaseHistory.from_rows(
        pages[shuffled], start[shuffled], end[shuffled], days[shuffled],
        np.array(changed)[shuffled], 30,
    )  # fmt: skip
    one_by_one = PhaseHistory.empty(30)
    for i in range(pages.shape[0]):
        one_by_one.record(pages[i : i + 1], start[i : i + 1], end[i : i + 1], days[i : i + 1],
                          [changed[i]])  # fmt: skip
    assert (at_once.masks == one_by_one.masks).all()
    # sums of the same terms in another order: within 1e-12 of each other (a few ulps of
    # values of at most ~500 in size)
    np.testing.assert_allclose(at_once.loglik, one_by_one.loglik, rtol=0, atol=1e-9)


def test_poisson_pages_are_seldom_taken_for_periodic_ones():
    # 3,000 Poisson pages from one change a month to three a day, visited every 1-8 days for
    # 60 days (the intervals a planner gives them): the rule believes a period for few of
    # them (measured: 0.13% here; the backtest's webs without periodic pages: see the report)
    rng = np.random.default_rng(11)
    n = 3000
    rate = np.exp(rng.uniform(np.log(1 / 30), np.log(3.0), n))
    h = PhaseHistory.empty(n)
    last = np.zeros(n, dtype=np.int64)
    n_changed = np.zeros(n, dtype=np.int64)
    while True:
        gap = rng.integers(1, 9, n)
        nxt = last + gap
        live = np.flatnonzero(nxt < 60)
        if not live.shape[0]:
            break
        hit = rng.random(live.shape[0]) < -np.expm1(-rate[live] * gap[live])
        h.record(live, last[live], nxt[live], gap[live].astype(float), hit)
        n_changed[live] += hit
        last[live] = nxt[live]
    share = detect(h, n_changed).detected.mean()
    assert share < 0.02


def test_outlook_is_due_on_the_first_cycle_after_the_change():
    rng = np.random.default_rng(5)
    visits = np.sort(rng.choice(np.arange(60), 25, replace=False))
    changed = periodic_changes(visits, 7.0, 3.4)
    h = history_of(visits, changed)
    found = detect(h, [changed.sum()])
    if found.width()[0] != 1:
        pytest.skip("the window is not down to one cycle in this history")
    last = float(visits[-1])
    # the next change after the last visit is in cell 4 mod 7 after it
    expected = last + ((4 - last - 1) % 7) + 1
    for now in range(int(last) + 1, int(last) + 15):
        seen = outlook(found, np.array([last]), np.array([float(now)]))
        assert seen.p_changed[0] == (1.0 if now >= expected else 0.0)
        if now == expected:  # fresh until the next change, half a cycle into cell + 7
            assert seen.gain[0] == pytest.approx(6.5)


def test_planning_puts_the_detected_page_in_the_batch_on_its_cycle():
    # 20 pages on one host, all visited yesterday; page 0 is periodic and its change is
    # due today (p_changed 1, 6.5 fresh days), page 1 periodic and not due (0); the others
    # Poisson pages of moderate rate. A budget of 3 with no slices: page 0 is taken, 1 not.
    n = 20
    from models.estimation.rate_data import PageMoments

    moments = PageMoments.checked(
        np.arange(n), np.full(n, 5), np.full(n, 2), np.full(n, 9.0), np.full(n, 6.0),
        np.full(n, 18.0), np.full(n, 54.0),
    )  # fmt: skip
    period = np.zeros(n)
    period[[0, 1]] = 7.0
    p_changed = np.zeros(n)
    p_changed[0] = 1.0
    gain = np.zeros(n)
    gain[0] = 6.5
    pages = PlanningPages(
        hosts=np.zeros(n, dtype=np.int64),
        value=np.ones(n),
        cost=np.ones(n),
        days_since_visit=np.full(n, 4.0),
        periodic=PeriodicOutlook(period, p_changed, gain),
    )
    slices = Slices(0.0, 0.0, 0.0, spend_leftover=False)
    cycle = plan_from_moments(
        moments, np.zeros(n, dtype=np.int64), pages, 3.0, [100.0], slices=slices
    )
    chosen = set(cycle.page_ids.tolist())
    assert 0 in chosen and 1 not in chosen
    # pinned at one visit a period by the allocation
    assert cycle.allocation.frequencies[0] == pytest.approx(1 / 7)
    # without the outlook page 0 is a Poisson page like the others
    plain = plan_from_moments(
        moments,
        np.zeros(n, dtype=np.int64),
        PlanningPages(
            hosts=pages.hosts, value=pages.value, cost=pages.cost,
            days_since_visit=pages.days_since_visit,
        ),
        3.0,
        [100.0],
        slices=slices,
    )  # fmt: skip
    assert plain.allocation.frequencies[0] == pytest.approx(plain.allocation.frequencies[5])


def test_an_uncertain_phase_is_probed_where_a_visit_halves_it():
    # changed over cells 1..4 and 9..11, unchanged over 5..9 except... : the best period's
    # phases are narrowed to a window; nothing is believed under a strict rule, so the page
    # is a candidate, probed when half its window has passed or when it predicts the
    # opposite of the Poisson estimate
    h = PhaseHistory.empty(1)
    for a, b, c in ((0, 4, True), (4, 7, False), (7, 9, False), (9, 12, True)):
        h.record(np.array([0]), [a], [b], [float(b - a)], [c])
    # nothing is believed: no probe on a web that has shown no periodic page ...
    strict = DetectionRule(min_log_odds=50.0)
    assert planning_outlook(h, [2], np.array([12.0]), 14.0, rule=strict).probe_period is None
    # ... unless told to probe anyway
    rule = DetectionRule(min_log_odds=50.0, probe_share=0.0)
    out = planning_outlook(h, [2], np.array([12.0]), 14.0, rule=rule)
    assert out.period[0] == 0
    assert out.probe_period is not None and out.probe_p_changed is not None
    assert out.probe_period[0] > 0
    p = out.probe_p_changed[0]
    assert 0.0 <= p <= 1.0
    from models.planning.select import periodic_probes

    # a Poisson estimate agreeing with the candidate's prediction: probed only on a toss-up
    assert periodic_probes(out, np.array([p]))[0] == (0.25 <= p <= 0.75)
    # one predicting the opposite: probed
    assert periodic_probes(out, np.array([1.0 - p if abs(1 - 2 * p) >= 0.5 else p]))[0]


def test_bad_input_says_what_is_wrong():
    with pytest.raises(PeriodicInputError, match="one changed flag"):
        PhaseHistory.empty(1).record(np.array([0]), [0], [2], [2.0], [True, False])
    with pytest.raises(PeriodicInputError, match="one count of changes"):
        detect(PhaseHistory.empty(2), [1])
