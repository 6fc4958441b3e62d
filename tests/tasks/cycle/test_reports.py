from tasks.reports.cycle_report import (
    cycle_numbers,
    hosts_under_pressure,
    record_cycle,
    summary_markdown,
)
from tests.cycle_numbers import sample_numbers


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


def test_record_cycle_replaces_a_rerun_cycle_and_markdown_has_the_numbers(tmp_path):
    record_cycle(tmp_path, sample_numbers(0, 2))
    record_cycle(tmp_path, sample_numbers(1, 5))
    rows = record_cycle(tmp_path, sample_numbers(1, 4))
    assert rows["cycle_id"].tolist() == [0, 1] and rows["changes_found"].tolist() == [2, 4]
    text = summary_markdown(sample_numbers(1, 4), hosts_under_pressure([]), {}, "credits")
    assert "| cost per change detected | 2.500 |" in text
    assert "| fetches that found no change | 6 |" in text
    assert "n/a (no ground truth)" in text


def test_a_first_cycle_reports_first_visits_not_missing_changes():
    first = sample_numbers(0, 0, first_seen=10, unchanged=0)
    text = summary_markdown(first, hosts_under_pressure([]), {}, "credits")
    assert "| changes found | 0 on 0 revisits (10 first visits: nothing to compare yet) |" in text
    assert "| cost per change detected | n/a (no revisits yet) |" in text
    assert "inf" not in text


def test_changes_are_counted_against_revisits_only():
    mixed = sample_numbers(2, 3, first_seen=4, unchanged=3)
    text = summary_markdown(mixed, hosts_under_pressure([]), {}, "credits")
    assert (
        "| changes found | 3 on 6 revisits (plan expected 4.0, counting 4 first visits) |" in text
    )
    none_found = sample_numbers(3, 0)
    text = summary_markdown(none_found, hosts_under_pressure([]), {}, "credits")
    assert "| cost per change detected | n/a (no change found) |" in text


def test_refused_addresses_are_not_counted_as_requests_sent(tmp_path):
    from datetime import UTC, datetime

    import pandas as pd

    from tasks.store.history import HistoryStore

    at = datetime(2026, 3, 1, tzinfo=UTC)
    rows = pd.DataFrame(
        {
            "url_id": [1, 2, 3, 4],
            "host": ["a.test", "a.test", "10.0.0.1", "a.test"],
            "fetched_at": at,
            "outcome": ["ok", "shed", "refused_address", "timeout"],
            "record_hash": ["h", None, None, None],
        }
    )
    HistoryStore(tmp_path).write_cycle(0, rows)
    numbers = cycle_numbers(tmp_path, 0, {"pages": 4, "spent": 4})
    assert (numbers.fetched, numbers.requests_sent, numbers.observations) == (4, 2, 1)
