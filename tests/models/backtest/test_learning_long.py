"""Issue 18's judgement at scale (``make backtest``; ``-m long_backtest``, not in make test).

The full learning sweep from scratch (4 seeds x 3 families x 5 budgets, the periodic and
shifting webs, change capture) at 20,000 pages; every target is checked and the figures
printed. The test fails on any missed target, naming each with its reason: it is the
issue's acceptance run, and stays red until the planner earns every target.
"""

from __future__ import annotations

import pytest

from models.backtest.sweep import SweepConfig, format_sweep, run_sweep
from models.backtest.targets import check_learning_targets, format_checks

pytestmark = pytest.mark.long_backtest


def test_the_deployed_planner_earns_issue_18s_targets_from_scratch():
    sweep = run_sweep(SweepConfig(pages=20_000))
    checks = check_learning_targets(sweep)
    print(format_sweep(sweep) + "\n\n" + format_checks(checks))
    missed = [c for c in checks if not c.met]
    assert not missed, format_checks(missed)
