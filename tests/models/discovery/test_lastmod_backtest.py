"""The lastmod signal in the backtest: it helps where sitemaps tell the truth and never moves
the planner on hosts that lie (``models.backtest.signals``)."""

import pytest

from models.backtest.signals import compare_lastmod_signal

SMALL = {"pages_per_host": 100, "days": 30, "warmup": 5}


@pytest.mark.parametrize("per_host_budget", [False, True])
def test_a_web_of_liars_is_planned_exactly_as_without_the_signal(per_host_budget):
    runs = compare_lastmod_signal(
        ("stale", "now", "missing"), seed=3, per_host_budget=per_host_budget, **SMALL
    )
    assert runs["on"].freshness_by_kind == runs["off"].freshness_by_kind
    assert runs["on"].changes_per_fetch == runs["off"].changes_per_fetch


def test_liars_beside_honest_hosts_keep_their_freshness_under_host_capacities():
    runs = compare_lastmod_signal(
        ("honest", "noisy", "stale", "now"), seed=4, per_host_budget=True, **SMALL
    )
    on, off = runs["on"], runs["off"]
    for kind in ("stale", "now"):
        assert on.freshness_by_kind[kind] == off.freshness_by_kind[kind]
    # the honest host's pages that did not change are left alone: its freshness rises
    # (+0.01 to +0.11 over seeds 0-4 at full size; this seed and size: see the assert)
    assert on.freshness_by_kind["honest"] > off.freshness_by_kind["honest"] + 0.01
    assert on.freshness_by_kind["noisy"] >= off.freshness_by_kind["noisy"]


def test_an_unknown_kind_is_refused():
    with pytest.raises(ValueError, match="unknown sitemap kinds"):
        compare_lastmod_signal(("honest", "sometimes"), **SMALL)
