"""``recrawl backtest --cold-start``: from an empty history, day 0 an ordinary fetch day."""

from __future__ import annotations

import json

from flows.cli import main


def test_backtest_cold_start_averages_from_day_0_and_says_so(tmp_path, capsys):
    out = tmp_path / "cold"
    argv = ["backtest", "--cold-start", "--pages", "1500", "--days", "8"]
    code = main([*argv, "--policies", "planner,uniform", "--out", str(out)])
    assert code == 0, capsys.readouterr().err
    printed = capsys.readouterr().out
    assert "days 0-7 of 8" in printed and "cold start (no seed crawl" in printed
    assert "a cold start: day 0 is a fetch day" in (out / "report.md").read_text()
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["cold_start"] is True and summary["window"] == [0, 8]
    # the planner spends its budget from day 0 on (the old rule spent about a fifth of it)
    planner = next(row for row in summary["summary"] if row["name"] == "planner")
    assert planner["budget_used"] > 0.98
