import json
import os
import signal
import subprocess
import sys
import time
from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from models.estimation.synthetic import generate_history, generate_web
from tasks.store.history import (
    HistoryCorruptError,
    HistoryInputError,
    HistoryStore,
)

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def rows(*items):
    """(url_id, day offset, outcome, record_hash[, changed]) -> DataFrame."""
    out = []
    for item in items:
        uid, day, outcome, rhash, *rest = item
        out.append(
            {
                "url_id": uid,
                "host": "a.test",
                "fetched_at": T0 + timedelta(days=day),
                "outcome": outcome,
                "record_hash": rhash,
                "changed": rest[0] if rest else None,
            }
        )
    return pd.DataFrame(out)


def by_url(table):
    return table.to_pandas().set_index(["url_id", "cycle_id"])


def test_round_trip_and_linking(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "h1"), (2, 0, "ok", "x")))
    store.write_cycle(1, rows((1, 1, "ok", "h1"), (2, 1.5, "error", None)))
    store.write_cycle(2, rows((1, 2, "ok", "h2"), (2, 3, "not_modified", None)))
    store.write_cycle(3, rows((1, 4, "ok", "h2", True)))
    got = by_url(store.read())
    # First observation: no baseline.
    assert pd.isna(got.loc[(1, 0), "changed"]) and pd.isna(got.loc[(1, 0), "interval_days"])
    # Same hash: unchanged; different hash: changed; the fetcher's own flag wins.
    assert not got.loc[(1, 1), "changed"] and got.loc[(1, 1), "interval_days"] == 1.0
    assert got.loc[(1, 2), "changed"] and got.loc[(1, 2), "interval_days"] == 1.0
    assert got.loc[(1, 3), "changed"] and got.loc[(1, 3), "interval_days"] == 2.0
    # A failed fetch is not an observation; the 304 measures from the last success.
    assert pd.isna(got.loc[(2, 1), "changed"]) and pd.isna(got.loc[(2, 1), "interval_days"])
    assert not got.loc[(2, 2), "changed"] and got.loc[(2, 2), "interval_days"] == 3.0
    stats = store.page_stats().to_pandas().set_index("url_id")
    assert stats.loc[1, "n_intervals"] == 3 and stats.loc[1, "n_changed"] == 2
    assert stats.loc[1, "unchanged_days"] == 1.0 and stats.loc[1, "changed_sum"] == 3.0
    assert stats.loc[1, "changed_sum_sq"] == 5.0 and stats.loc[1, "changed_sum_cube"] == 9.0
    assert stats.loc[2, "n_intervals"] == 1 and stats.loc[2, "n_changed"] == 0


def test_rewriting_a_cycle_replaces_it(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "a"), (2, 0, "ok", "a")))
    store.write_cycle(1, rows((1, 1, "ok", "b"), (2, 1, "ok", "a")))
    result = store.write_cycle(1, rows((1, 1.2, "ok", "a")))
    assert result.replaced
    table = store.read()
    assert table.num_rows == 3
    assert store.read([1]).num_rows == 1
    incremental = store.page_stats().to_pandas().sort_values("url_id").reset_index(drop=True)
    rebuilt = store.rebuild_stats().to_pandas().sort_values("url_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(incremental, rebuilt)
    assert list(incremental["url_id"]) == [1]


def test_incremental_stats_equal_a_rebuild(tmp_path):
    web = generate_web(3000, seed=3)
    store = HistoryStore(tmp_path)
    for cycle_id, table in generate_history(web, 6, visit_probability=0.7, seed=3):
        store.write_cycle(cycle_id, table, link=False)
    cycle5 = store.read([5])
    store.write_cycle(5, cycle5.slice(0, cycle5.num_rows // 2), link=False)
    inc = store.page_stats().to_pandas().sort_values("url_id").reset_index(drop=True)
    full = store.rebuild_stats().to_pandas().sort_values("url_id").reset_index(drop=True)
    pd.testing.assert_frame_equal(inc, full, check_exact=False, rtol=1e-9)


def test_linking_matches_what_the_simulator_recorded(tmp_path):
    """The store's linking, fed hashes, reproduces the generator's own changed/interval."""
    web = generate_web(500, seed=4)
    linked, raw = HistoryStore(tmp_path / "a"), HistoryStore(tmp_path / "b")
    versions = np.zeros(web.size, dtype=np.int64)
    index = {u: i for i, u in enumerate(web.url_ids)}
    for cycle_id, table in generate_history(web, 5, visit_probability=0.8, seed=4):
        raw.write_cycle(cycle_id, table, link=False)
        idx = np.array([index[u] for u in table["url_id"].to_pylist()])
        changed = np.asarray(table["changed"].fill_null(False))
        ok = np.asarray(table["outcome"]) == "ok"
        np.add.at(versions, idx[changed & ok], 1)
        hashes = pa.array(
            [f"{i}-{v}" if o else None for i, v, o in zip(idx, versions[idx], ok, strict=True)]
        )
        bare = table.drop_columns(["changed", "interval_days", "record_hash"])
        linked.write_cycle(cycle_id, bare.append_column("record_hash", hashes))
    a = linked.read().to_pandas().sort_values(["url_id", "fetched_at"])
    b = raw.read().to_pandas().sort_values(["url_id", "fetched_at"])
    np.testing.assert_array_equal(a["changed"].isna(), b["changed"].isna())
    np.testing.assert_allclose(
        a["interval_days"].fillna(-1), b["interval_days"].fillna(-1), rtol=1e-9
    )
    np.testing.assert_array_equal(a["changed"].fillna(False), b["changed"].fillna(False))


def test_duplicate_rows_count_once(tmp_path):
    store = HistoryStore(tmp_path)
    frame = rows((1, 0, "ok", "a"), (1, 0, "ok", "a"), (2, 0, "ok", "a"))
    assert store.write_cycle(0, frame).rows == 2


def test_failure_inside_a_cycle_publishes_nothing(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "a")))
    before = store.manifest()
    with pytest.raises(RuntimeError), store.cycle_writer(1) as writer:
        writer.write_part(rows((1, 1, "ok", "b")))
        raise RuntimeError("host batch crashed")
    assert store.manifest() == before
    assert store.cycles() == [0]
    assert not any((tmp_path / "history" / "_staging").iterdir())


@pytest.mark.parametrize(
    ("frame", "message"),
    [
        (pd.DataFrame({"url_id": [1], "host": ["a"], "outcome": ["ok"]}), "fetched_at"),
        (rows((1, 0, "exploded", None)), "unknown outcome 'exploded'"),
        (rows((1, 0, "ok", None)).assign(bogus=1), "unknown column"),
        (rows((1, 0, "ok", None)).assign(bytes=-5), "negative"),
        (rows((1, 0, "ok", None)).assign(fetched_at=pd.Timestamp("2026-01-01")), "timezone"),
        (rows((1, 0, "ok", None)).assign(url_id="x"), "url_id"),
        (rows((1, 0, "ok", None)).assign(host=None), "host"),
    ],
)
def test_bad_rows_are_rejected_and_nothing_is_lost(tmp_path, frame, message):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "a")))
    before = store.read()
    with pytest.raises(HistoryInputError, match=message):
        store.write_cycle(1, frame)
    assert store.read().equals(before)


def test_older_cycle_cannot_be_rewritten(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "a")))
    store.write_cycle(1, rows((1, 1, "ok", "a")))
    with pytest.raises(HistoryInputError, match="older than the latest"):
        store.write_cycle(0, rows((1, 0, "ok", "b")))


def test_observation_before_previous_one_is_rejected(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 5, "ok", "a")))
    with pytest.raises(HistoryInputError, match="not later than"):
        store.write_cycle(1, rows((1, 2, "ok", "b")))


def test_empty_history(tmp_path):
    store = HistoryStore(tmp_path)
    assert store.read().num_rows == 0
    assert store.page_stats().num_rows == 0
    empty = pd.DataFrame(
        {
            "url_id": pd.Series([], dtype="int64"),
            "host": pd.Series([], dtype=str),
            "fetched_at": pd.Series([], dtype="datetime64[us, UTC]"),
            "outcome": pd.Series([], dtype=str),
        }
    )
    assert store.write_cycle(0, empty).rows == 0
    assert store.cycles() == [0]


def test_corrupt_file_is_named_and_the_rest_is_intact(tmp_path):
    store = HistoryStore(tmp_path)
    store.write_cycle(0, rows((1, 0, "ok", "a")))
    store.write_cycle(1, rows((1, 1, "ok", "b")))
    bad = store.files([1])[0]
    with open(bad, "r+b") as handle:
        handle.truncate(100)
    with pytest.raises(HistoryCorruptError, match=str(bad)):
        store.read()
    with pytest.raises(HistoryCorruptError, match=str(bad)):
        store.rebuild_stats()
    assert store.read([0]).num_rows == 1


WRITER = """
import sys, time
from datetime import UTC, datetime, timedelta
import pandas as pd
from tasks.store.history import HistoryStore
store = HistoryStore(sys.argv[1])
start = len(store.cycles())
for c in range(start, start + 1000):
    t = datetime(2026, 1, 1, tzinfo=UTC) + timedelta(days=c)
    frame = pd.DataFrame({"url_id": range(2000), "host": "a.test", "fetched_at": t,
                          "outcome": "ok", "record_hash": [f"{i}-{c // 3}" for i in range(2000)]})
    with store.cycle_writer(c) as w:
        w.write_part(frame.iloc[:1000])
        w.write_part(frame.iloc[1000:])
    print(c, flush=True)
"""


def test_killed_writer_leaves_whole_cycles_only(tmp_path):
    """SIGKILL a writer at random moments; every published cycle is whole, none twice."""
    rng = np.random.default_rng(7)
    for _ in range(4):
        proc = subprocess.Popen(
            [sys.executable, "-c", WRITER, str(tmp_path)], stdout=subprocess.PIPE, text=True
        )
        proc.stdout.readline()  # at least one more cycle committed
        time.sleep(rng.uniform(0.0, 0.4))
        os.kill(proc.pid, signal.SIGKILL)
        proc.wait()
        store = HistoryStore(tmp_path)
        cycles = store.cycles()
        assert cycles == list(range(len(cycles)))
        table = store.read()
        assert table.num_rows == 2000 * len(cycles)
        manifest = json.loads((tmp_path / "history" / "_manifest.json").read_text())
        assert sum(e["rows"] for e in manifest["cycles"].values()) == table.num_rows
        inc = store.page_stats().to_pandas().sort_values("url_id").reset_index(drop=True)
        assert (inc["n_intervals"] == len(cycles) - 1).all()
