"""``recrawl backtest``: prints the comparison table, writes the report folder."""

from __future__ import annotations

import json

from flows.cli import main
from models.backtest.runner import POLICIES


def test_backtest_prints_the_table_and_writes_the_report(tmp_path, capsys):
    out = tmp_path / "report"
    code = main(
        ["backtest", "--pages", "1500", "--days", "10", "--budget-share", "0.1", "--out", str(out)]
    )
    assert code == 0
    printed = capsys.readouterr().out
    assert {"planner", "oracle", "uniform", "host-pooling", "lambda-learn-crawl"} <= set(POLICIES)
    for name in POLICIES:  # the default comparison, baselines included
        assert f"\n{name} " in printed
    assert "of the oracle-minus-uniform freshness gap" in printed
    for name in ("report.md", "freshness.png", "cost_per_change.png", "daily.csv", "summary.json"):
        assert (out / name).stat().st_size > 0
    assert (out / "freshness.png").read_bytes()[:4] == b"\x89PNG"
    summary = json.loads((out / "summary.json").read_text())
    assert summary["config"]["pages"] == 1500 and len(summary["summary"]) == len(POLICIES)
    assert "![freshness over time](freshness.png)" in (out / "report.md").read_text()


def test_backtest_shift_report_has_the_recovery(tmp_path, capsys):
    out = tmp_path / "shift"
    code = main(
        [
            "backtest",
            "--workload",
            "shift",
            "--pages",
            "1500",
            "--days",
            "10",
            "--policies",
            "planner,oracle,uniform",
            "--out",
            str(out),
        ]
    )
    assert code == 0, capsys.readouterr().err
    assert "Recovery after the shift (day 5)" in (out / "report.md").read_text()


def test_backtest_bad_input_exits_2_naming_it(tmp_path, capsys):
    assert main(["backtest", "--pages", "100", "--policies", "planner,nope"]) == 2
    assert "unknown policies ['nope']" in capsys.readouterr().err
    assert main(["backtest", "--pages", "100", "--window", "x"]) == 2
    assert "--window" in capsys.readouterr().err
