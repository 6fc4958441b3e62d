import math

from tasks.reports import CycleNumbers, hosts_under_pressure, record_cycle, summary_markdown


def _host(throttles=0, lowest=1.0, paused=0.0):
    return {
        "requests": 10,
        "throttles": throttles,
        "max_in_flight": 1,
        "limit": lowest,
        "lowest_limit": lowest,
        "paused_s": paused,
        "validators_trusted": True,
        "validator_doubt": None,
    }


def test_hosts_under_pressure_lists_only_struggling_hosts_worst_first():
    metrics = [
        {"retry_ratio": 0.0, "hosts": {"ok:1": _host(), "slow:1": _host(lowest=0.5)}},
        {"retry_ratio": 0.05, "hosts": {"busy:1": _host(throttles=3, lowest=0.25, paused=4.0)}},
    ]
    table = hosts_under_pressure(metrics)
    assert table["host"].tolist() == ["busy:1", "slow:1"]
    assert table.loc[0, "throttles"] == 3 and table.loc[0, "batch_retry_ratio"] == 0.05


def _numbers(cycle, changes):
    return CycleNumbers(
        cycle_id=cycle,
        at="",
        budget=10,
        planned_pages=10,
        planned_cost=10,
        fetched=10,
        requests_sent=10,
        observations=10,
        changes_found=changes,
        unchanged=10 - changes,
        first_seen=0,
        failed=0,
        cost=10.0,
        bytes=1000,
        expected_changes=4.0,
        expected_freshness=0.8,
        realized_freshness=math.nan,
        spent_by_slice={"due": 10.0},
    )


def test_record_cycle_replaces_a_rerun_cycle_and_markdown_has_the_numbers(tmp_path):
    record_cycle(tmp_path, _numbers(0, 2))
    record_cycle(tmp_path, _numbers(1, 5))
    rows = record_cycle(tmp_path, _numbers(1, 4))
    assert rows["cycle_id"].tolist() == [0, 1] and rows["changes_found"].tolist() == [2, 4]
    text = summary_markdown(_numbers(1, 4), hosts_under_pressure([]), {}, "credits")
    assert "| cost per change detected | 2.500 |" in text
    assert "| fetches that found no change | 6 |" in text
    assert "n/a (no ground truth)" in text
