"""Where the backtest's gap lies: freshness by slice of hosts, and the report that says so."""

from __future__ import annotations

import json
from dataclasses import replace

import numpy as np
import pytest

from models.backtest.hosts import capacity_bound_hosts, format_host_slices, freshness_by_hosts
from models.backtest.last_modified import LM_ABSENT, LM_HONEST, LM_NOW
from models.backtest.learning import PageObservations
from models.backtest.runner import BacktestConfig, BacktestResult, format_table, run_backtest
from models.backtest.sim import PageTotals
from models.backtest.targets import check_targets
from models.backtest.variants import GroupOracleLearner
from models.backtest.web import PublicWeb, RateSchedule
from models.backtest.workloads import Workload
from tasks.reports.backtest_report import write_backtest_report


def _workload() -> Workload:
    # host 0: 6 pages and room for 2 visits a day; hosts 1 and 2: 2 pages each, no limit
    hosts = np.array([0, 0, 0, 0, 0, 0, 1, 1, 2, 2], dtype=np.int64)
    web = PublicWeb(
        hosts=hosts,
        groups=hosts.copy(),
        value=np.array([1.0, 1, 1, 1, 2, 2, 1, 3, 1, 1]),
        cost=np.ones(10),
        host_capacity=np.array([2.0, 100.0, 100.0]),
    )
    truth = RateSchedule(np.full(10, 0.5))
    lm = np.array([LM_NOW, LM_HONEST, LM_ABSENT], dtype=np.int64)
    return Workload("toy", web, truth, np.zeros(3, dtype=np.int64), "toy", lm)


def _totals() -> PageTotals:
    fresh = {
        "planner": np.array([0.5, 0.5, 0.5, 0.5, 0.2, 0.2, 0.9, 0.9, 0.6, 0.6]),
        "oracle": np.array([0.6, 0.6, 0.6, 0.6, 0.8, 0.8, 1.0, 1.0, 0.7, 0.7]),
        "uniform": np.array([0.4, 0.4, 0.4, 0.4, 0.4, 0.4, 0.8, 0.8, 0.5, 0.5]),
    }
    return PageTotals(fresh, {name: np.zeros(10) for name in fresh})


def test_a_host_that_cannot_take_the_uniform_rate_is_capacity_bound():
    work = _workload()
    # budget 5 a day: uniform would visit every page every other day; host 0 takes 2 of 3
    assert capacity_bound_hosts(work, 5.0).tolist() == [True, False, False]
    # budget 1: a tenth of a visit a page, host 0 takes its 0.6 with room to spare
    assert capacity_bound_hosts(work, 1.0).tolist() == [False, False, False]


def test_slices_weigh_freshness_by_value_and_add_up_to_the_web():
    work, totals = _workload(), _totals()
    slices = {part.label: part for part in freshness_by_hosts(work, totals, 5.0)}
    bound = slices["capacity-bound hosts"]
    assert (bound.hosts, bound.pages) == (1, 0.6)
    assert bound.value == pytest.approx(8 / 14)
    # value-weighted: four pages of value 1 at 0.5 and two of value 2 at 0.2
    assert bound.freshness["planner"] == pytest.approx((4 * 0.5 + 4 * 0.2) / 8)
    assert bound.gap_closed("planner") == pytest.approx((0.35 - 0.4) / (0.7 - 0.4))
    other = slices["other hosts"]
    assert other.gap_closed("planner") == pytest.approx((0.8 - 0.7) / (0.9 - 0.7))
    for name, fresh in totals.freshness.items():
        web = float(np.dot(work.web.value, fresh)) / 14
        assert bound.contribution[name] + other.contribution[name] == pytest.approx(web)
        by_header = ("Last-Modified honest", 'Last-Modified "now"', "no Last-Modified")
        assert sum(slices[k].contribution[name] for k in by_header) == pytest.approx(web)
    assert slices['Last-Modified "now"'].hosts == 1
    assert slices["Last-Modified honest"].freshness["oracle"] == pytest.approx(1.0)
    shortfall = bound.shortfall("planner") + other.shortfall("planner")
    web_gap = float(
        np.dot(work.web.value, totals.freshness["oracle"] - totals.freshness["planner"])
    )
    assert shortfall == pytest.approx(web_gap / 14)


def test_the_table_names_each_slice_and_skips_empty_ones():
    work = replace(_workload(), last_modified=np.full(3, LM_HONEST, dtype=np.int64))
    text = format_host_slices(freshness_by_hosts(work, _totals(), 5.0), ["planner"])
    assert "capacity-bound hosts" in text and "other hosts" in text
    assert "Last-Modified honest" in text and "no Last-Modified" not in text
    assert "-16.7%" in text  # the planner's share of the bound host's gap


@pytest.fixture(scope="module")
def bound_run() -> BacktestResult:
    config = BacktestConfig(
        pages=3_000,
        days=12,
        budget_share=0.2,
        seed=1,
        host_capacity=60.0,
        policies=("planner", "oracle", "uniform"),
    )
    return run_backtest(config)


def test_a_backtest_reports_where_the_gap_is(tmp_path, bound_run):
    result = bound_run
    labels = [part.label for part in result.host_slices]
    assert labels[:2] == ["capacity-bound hosts", "other hosts"]
    bound = result.host_slices[0]
    assert bound.hosts > 0  # 60 visits a day cannot cover the big hosts
    total = result.by_name("planner").freshness
    web = bound.contribution["planner"] + result.host_slices[1].contribution["planner"]
    assert web == pytest.approx(total, rel=1e-9)
    assert "slice of hosts" in format_table(result)
    write_backtest_report(result, tmp_path)
    assert "## Where the gap is" in (tmp_path / "report.md").read_text()
    saved = json.loads((tmp_path / "summary.json").read_text())["freshness_by_hosts"]
    assert saved[0]["label"] == "capacity-bound hosts"
    assert saved[0]["gap_closed"]["planner"] == pytest.approx(bound.gap_closed("planner"))


def test_a_missed_gap_target_says_how_much_is_lost_on_capacity_bound_hosts(bound_run):
    oracle, uniform = (bound_run.by_name(n).freshness for n in ("oracle", "uniform"))
    half = replace(bound_run.by_name("planner"), freshness=uniform + 0.5 * (oracle - uniform))
    rows = [half if row.name == "planner" else row for row in bound_run.summary]
    (check,) = [
        c for c in check_targets({0.2: replace(bound_run, summary=rows)}) if "0.2 N" in c.target
    ]
    assert not check.met and "short by 40.0 points" in check.detail
    bound = bound_run.host_slices[0]
    lost = bound.shortfall("planner") + bound_run.host_slices[1].shortfall("planner")
    share = bound.shortfall("planner") / lost
    assert f"{share:.0%} of the shortfall is on {bound.hosts} capacity-bound host" in check.detail
    # without a capacity-bound host the detail names the rate band only
    free = replace(bound_run, summary=rows, host_slices=[])
    (plain,) = [c for c in check_targets({0.2: free}) if "0.2 N" in c.target]
    assert "capacity-bound" not in plain.detail and "most of it is lost" in plain.detail


def test_the_group_oracle_knows_each_groups_mean_rate_and_nothing_per_page():
    truth = RateSchedule(np.array([1.0, 3.0, 0.5, 0.5, 0.0]))
    groups = np.array([0, 0, 1, 1, 2], dtype=np.int64)
    learner = GroupOracleLearner(truth, groups)
    estimate = learner.estimate(PageObservations(5), day=3)
    assert estimate.rate == pytest.approx([2.0, 2.0, 0.5, 0.5, 1e-9])
