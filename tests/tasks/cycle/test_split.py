"""Splitting a plan into host batches (no network, no Prefect)."""

from __future__ import annotations

from datetime import UTC, datetime

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from models.discovery.urls import normalize, url_id
from tasks.cycle.work import CycleInputError, _assign_batches, read_batches, split_plan
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore


def test_small_hosts_are_packed_and_large_ones_sliced_in_a_chain():
    hosts = np.array(["a"] * 5 + ["b"] * 2 + ["c"] + ["d"] * 12)
    assert _assign_batches(hosts, max_urls=5, max_hosts=2) == [
        (0, 5, None),
        (5, 8, None),
        (8, 13, None),
        (13, 18, 2),
        (18, 20, 3),
    ]
    # the host cap closes a batch even when URLs are left
    assert _assign_batches(np.array(["a", "b", "c"]), max_urls=10, max_hosts=2) == [
        (0, 2, None),
        (2, 3, None),
    ]


def _root_with_history(tmp_path):
    urls = [f"http://h{i % 3}.example:8080/p/{i}" for i in range(12)]
    hosts = [u.split("/")[2] for u in urls]
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    ids = [url_id(normalize(u)) for u in urls]
    at = datetime(2026, 1, 1, tzinfo=UTC)
    HistoryStore(tmp_path).write_cycle(
        0,
        pd.DataFrame(
            {
                "url_id": ids[:6],
                "host": hosts[:6],
                "fetched_at": pd.Timestamp(at),
                "outcome": ["ok"] * 5 + ["error"],
                "etag": [f'"v{i}"' for i in range(6)],
                "record_hash": [f"r{i}" for i in range(6)],
            }
        ),
    )
    plan = pd.DataFrame(
        {"url_id": ids, "host": hosts, "score": np.linspace(1, 2, 12), "reason": "due"}
    )
    plan_path = tmp_path / "plan.parquet"
    plan.to_parquet(plan_path)
    return ids, plan_path


def test_split_writes_requests_with_the_last_observation_validators(tmp_path):
    ids, plan_path = _root_with_history(tmp_path)
    specs = split_plan(tmp_path, 1, plan_path, max_urls=3, max_hosts=1)
    assert [s.urls for s in specs] == [3, 1, 3, 1, 3, 1]  # 4 pages per host, slices of 3
    assert [s.after for s in specs] == [
        None,
        "batch-00000",
        None,
        "batch-00002",
        None,
        "batch-00004",
    ]
    assert read_batches(tmp_path, 1) == specs
    table = pd.concat([pq.read_table(s.path).to_pandas() for s in specs])
    assert sorted(table["url_id"]) == sorted(ids)
    by_id = table.set_index("url_id")
    assert by_id.loc[ids[0], "etag"] == '"v0"' and by_id.loc[ids[0], "record_hash"] == "r0"
    assert pd.isna(by_id.loc[ids[5], "etag"])  # the error was not an observation
    assert pd.isna(by_id.loc[ids[11], "etag"])  # never fetched
    first = pq.read_table(specs[0].path).to_pandas()
    assert first["priority"].is_monotonic_decreasing  # best first within a host


def test_split_refuses_bad_settings_and_missing_inputs(tmp_path):
    with pytest.raises(CycleInputError, match="no plan file"):
        split_plan(tmp_path, 1, tmp_path / "nope.parquet")
    with pytest.raises(CycleInputError, match="max_hosts"):
        split_plan(tmp_path, 1, tmp_path / "nope.parquet", max_hosts=500)


def test_shard_mode_keeps_each_host_in_one_shard_with_one_tag_per_batch(tmp_path):
    ids, plan_path = _root_with_history(tmp_path)
    specs = split_plan(tmp_path, 1, plan_path, max_urls=100, host_shards=2)
    seen = {}
    for spec in specs:
        assert spec.tags == [f"hostshard:{spec.shard}"]
        for host in spec.hosts:
            assert seen.setdefault(host, spec.shard) == spec.shard
    assert sum(s.urls for s in specs) == len(ids)
    assert len(specs) == len({s.shard for s in specs})  # small shards: one batch each


def _root_with_a_struggling_host(tmp_path, outcomes_by_cycle):
    """Hosts h0, h1, h2 with 4 planned pages each; ``outcomes_by_cycle[c]`` = h1's outcomes
    in cycle c (h0 and h2 answered ``ok`` every time)."""
    urls = [f"http://h{i % 3}.example:8080/p/{i}" for i in range(12)]
    hosts = [u.split("/")[2] for u in urls]
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    ids = [url_id(normalize(u)) for u in urls]
    store = HistoryStore(tmp_path)
    for cycle, h1_outcomes in enumerate(outcomes_by_cycle):
        at = pd.Timestamp(datetime(2026, 1, 1 + cycle, tzinfo=UTC))
        rows = []
        for i, (uid, host) in enumerate(zip(ids, hosts, strict=True)):
            for repeat in range(3):  # 12 rows per host and cycle
                outcome = h1_outcomes[(i // 3 + repeat) % len(h1_outcomes)]
                rows.append(
                    {
                        "url_id": uid,
                        "host": host,
                        "fetched_at": at + pd.Timedelta(minutes=repeat),
                        "outcome": outcome if host.startswith("h1.") else "ok",
                    }
                )
        store.write_cycle(cycle, pd.DataFrame(rows))
    plan = pd.DataFrame({"url_id": ids, "host": hosts, "score": 1.0, "reason": "due"})
    plan_path = tmp_path / "plan.parquet"
    plan.to_parquet(plan_path)
    return plan_path


def _batch_hosts(specs):
    return [sorted(h.split(".")[0] for h in s.hosts) for s in specs]


def test_hosts_with_a_poor_record_get_batches_of_their_own_after_the_others(tmp_path):
    plan_path = _root_with_a_struggling_host(tmp_path, [["timeout", "throttled", "ok"]])
    specs = split_plan(tmp_path, 1, plan_path, max_urls=100, max_hosts=2)
    assert _batch_hosts(specs) == [["h0", "h2"], ["h1"]]
    unpacked = split_plan(tmp_path, 1, plan_path, max_urls=100, max_hosts=2, pack_troubled=False)
    assert _batch_hosts(unpacked) == [["h0", "h1"], ["h2"]]


def test_a_host_that_recovered_or_shed_once_is_not_troubled(tmp_path):
    # Struggled four cycles ago (older than the record), fine in the last three.
    plan_path = _root_with_a_struggling_host(
        tmp_path, [["timeout"], ["ok"], ["ok"], ["ok", "ok", "ok", "shed"]]
    )
    specs = split_plan(tmp_path, 4, plan_path, max_urls=100, max_hosts=2)
    assert _batch_hosts(specs) == [["h0", "h1"], ["h2"]]


def test_a_truncated_plan_is_named_and_no_earlier_split_is_lost(tmp_path):
    _, plan_path = _root_with_history(tmp_path)
    specs = split_plan(tmp_path, 1, plan_path, max_urls=3, max_hosts=1)
    data = plan_path.read_bytes()
    plan_path.write_bytes(data[: len(data) // 2])  # a plan cut short (disk full, crash)
    with pytest.raises(CycleInputError, match="not a readable Parquet file"):
        split_plan(tmp_path, 1, plan_path)
    assert read_batches(tmp_path, 1) == specs  # the earlier split is still there
