"""The kept listing summaries (``tasks.listings.store``): the ``pending`` flag's round trip."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.parquet as pq

from tasks.listings.store import SUMMARIES_SCHEMA, folder, read_summaries, write_summaries


def test_summaries_written_before_pending_existed_read_as_not_pending(tmp_path):
    root = str(tmp_path)
    folder(root).mkdir(parents=True)
    old = pa.table(
        {
            "item_url_id": pa.array([1, 2], pa.int64()),
            "listing_url_id": pa.array([9, 9], pa.int64()),
            "summary_hash": pa.array([5, 6], pa.int64()),
            "cycle_id": pa.array([3, 3], pa.int64()),
        }
    )
    pq.write_table(old, folder(root) / "summaries.parquet")
    kept = read_summaries(root)
    assert kept.schema == SUMMARIES_SCHEMA
    assert kept["pending"].to_pylist() == [False, False]
    assert kept["summary_hash"].to_pylist() == [5, 6]


def test_pending_items_are_kept_pending(tmp_path):
    root = str(tmp_path)
    table = pa.table(
        {
            "item_url_id": [1, 2],
            "listing_url_id": [9, 9],
            "summary_hash": [5, 6],
            "cycle_id": [3, 3],
            "pending": [True, False],
        }
    )
    write_summaries(root, table)
    assert read_summaries(root)["pending"].to_pylist() == [True, False]
