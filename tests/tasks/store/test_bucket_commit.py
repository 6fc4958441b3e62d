"""The commit's one pass over buckets of pages (``tasks.store.bucket_commit``, issue 19).

``test_history_commit`` checks its rows against the commit before issue 8 and its
statistics against a rebuild; here: the page hash and the buckets the files' order rests
on, and files in another order (a rebuild's, a store from before) read correctly.
"""

from __future__ import annotations

import tempfile
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import tasks.store.bucket_commit as bucket_commit
import tasks.store.history as history
from models.schemas import HISTORY_SCHEMA
from tasks.store.bucket_commit import (
    PAGE_HASH_ORDER,
    StagedRows,
    _union,
    bucket_of,
    page_hash,
    walk_order,
)
from tasks.store.history import HistoryStore
from tests.tasks.store.test_history_commit import (
    _commit,
    assert_stats_equal_a_rebuild,
    reference_commit,
    tricky_parts,
)


def test_page_hash_is_a_bijection_and_buckets_are_ranges_of_it():
    rng = np.random.default_rng(3)
    edges = np.array([0, 1, -1, 2**63 - 1, -(2**63)], dtype=np.int64)
    ids = np.concatenate([edges, rng.integers(-(2**63), 2**63 - 1, 200_000), np.arange(1000)])
    ids = np.unique(ids)
    hashes = page_hash(ids)
    assert hashes.dtype == np.uint64 and len(np.unique(hashes)) == len(ids)  # no ties
    ordered = np.sort(hashes)
    for buckets in (1, 2, 3, 7, 64):
        which = bucket_of(ordered, buckets)
        assert which.min() >= 0 and which.max() == buckets - 1
        assert (np.diff(which.astype(np.int64)) >= 0).all()  # a file in hash order: in buckets
    sequential = bucket_of(page_hash(np.arange(10_000, dtype=np.int64)), 4)
    assert np.bincount(sequential.astype(np.int64)).min() > 2_200  # small ids spread too


_VALUES = st.sets(st.integers(0, 60), max_size=40).map(lambda v: np.array(sorted(v), np.uint64))


@given(_VALUES, _VALUES)
def test_the_union_of_two_sorted_arrays_places_each_value(a, b):
    """``_union`` counts where each value goes instead of searching the union: the result
    must be the searched one (small values, so that the sets overlap often)."""
    every, into_a, into_b = _union(a, b)
    expected = np.union1d(a, b)
    np.testing.assert_array_equal(every, expected)
    np.testing.assert_array_equal(into_a, np.searchsorted(expected, a))
    np.testing.assert_array_equal(into_b, np.searchsorted(expected, b))


_KEYS_AND_TIMES = st.lists(st.tuples(st.integers(0, 6), st.integers(-3, 3)), max_size=60)


@given(_KEYS_AND_TIMES)
def test_the_walk_order_is_lexsorts(rows):
    """``walk_order`` sorts by key alone and re-sorts only the pages out of time order:
    the result must be lexsort's (few keys and times, so that pages have several rows,
    ties and descents often)."""
    keys = np.array([k for k, _ in rows], dtype=np.uint64)
    times = np.array([t for _, t in rows], dtype=np.int64)
    np.testing.assert_array_equal(walk_order(keys, times), np.lexsort((times, keys)))


_PARTS = st.lists(st.lists(st.integers(0, 40), max_size=12), max_size=12)


@settings(deadline=None)  # a file written and mapped per example: no timing asserted
@given(_PARTS, st.integers(1, 30), st.integers(1, 5), st.sampled_from([0, 3_000, 1 << 30]))
def test_staged_rows_give_each_bucket_its_rows_part_by_part(
    parts, batch_rows, buckets, memory_bytes
):
    """However many parts a written batch holds (``batch_rows``; empty parts too), a
    bucket's staged rows are each part's rows of the bucket's pages in page-hash order
    (stably), part after part: what staging one batch a part gave. The same whether the
    batches are all written to the file (no memory budget), held until the budget is
    passed and then written with the rest (3,000 bytes: a few batches), or all held."""
    tables = []
    for number, ids in enumerate(parts):
        rows = len(ids)
        columns = {
            field.name: pa.nulls(rows, field.type)
            if field.nullable
            else pa.array(np.zeros(rows, np.int64)).cast(field.type)
            if not pa.types.is_string(field.type)
            else pa.array(["h"] * rows)
            for field in HISTORY_SCHEMA
        }
        columns["url_id"] = pa.array(ids, pa.int64())
        columns["bytes"] = pa.array(np.arange(rows) + 100 * number, pa.int64())  # the row
        tables.append(pa.table(columns).cast(HISTORY_SCHEMA))
    with tempfile.TemporaryDirectory() as folder:
        path = Path(folder) / "staged.arrow"
        staged = StagedRows(path, batch_rows=batch_rows, memory_bytes=memory_bytes)
        for table in tables:
            staged.append(table)
        assert staged.rows == sum(len(ids) for ids in parts)
        staged.close()
        if memory_bytes > 1 << 20:  # everything held: the scratch file is never written
            assert not path.exists()
        elif memory_bytes == 0 and staged.rows:
            assert path.exists()
        for bucket in range(buckets):
            expected = []
            for table in tables:
                hashes = page_hash(table["url_id"].to_numpy())
                order = np.argsort(hashes, kind="stable")
                ours = order[bucket_of(hashes[order], buckets) == bucket]
                expected.append(table.take(pa.array(ours, pa.int64())))
            rows, hashes = staged.bucket(bucket, buckets)
            want = pa.concat_tables([HISTORY_SCHEMA.empty_table(), *expected])
            assert rows.select(["url_id", "bytes"]).equals(want.select(["url_id", "bytes"]))
            np.testing.assert_array_equal(hashes, page_hash(want["url_id"].to_numpy()))
        staged.discard()


@pytest.fixture
def small_buckets(monkeypatch):
    monkeypatch.setattr(history, "COMMIT_BATCH_ROWS", 7)
    monkeypatch.setattr(history, "COMMIT_BUCKET_ROWS", 40)


@pytest.mark.parametrize("split_above", [0, 1000], ids=["staged rows split", "read per bucket"])
def test_statistics_in_another_order_are_merged_as_in_hash_order(
    tmp_path, small_buckets, monkeypatch, split_above
):
    """A rebuild writes the statistics in DuckDB's order; the next commit reads them by
    filtering each bucket, adds its sums exactly as to its own, and writes them in hash
    order again; the same whether the staged rows are first split by bucket or not."""
    monkeypatch.setattr(bucket_commit, "PARTITION_ABOVE", split_above)
    rng = np.random.default_rng(8)
    store = HistoryStore(tmp_path)
    for cycle_id in range(2):
        _commit(store, cycle_id, tricky_parts(rng, cycle_id, pages=90))
    assert store.manifest()["stats"]["order"] == PAGE_HASH_ORDER
    store.rebuild_stats()
    assert "order" not in store.manifest()["stats"]
    parts = tricky_parts(rng, 2, pages=90)
    expected = reference_commit(store, 2, parts)
    _commit(store, 2, parts)
    assert store.read([2]).equals(expected)
    assert store.manifest()["stats"]["order"] == PAGE_HASH_ORDER
    assert_stats_equal_a_rebuild(store)


def test_the_written_files_are_in_page_hash_order(tmp_path, small_buckets):
    rng = np.random.default_rng(4)
    store = HistoryStore(tmp_path)
    for cycle_id in range(2):
        _commit(store, cycle_id, tricky_parts(rng, cycle_id, pages=120))
    manifest = store.manifest()
    last = manifest["last"]["after"]
    assert last["order"] == PAGE_HASH_ORDER
    for rel in (manifest["stats"]["file"], last["file"]):
        hashes = page_hash(pq.read_table(store.dir / rel, columns=["url_id"])["url_id"].to_numpy())
        assert len(hashes) > 40 and (hashes[1:] > hashes[:-1]).all(), rel
