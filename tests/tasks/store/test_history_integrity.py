"""The digests the store keeps of its files: what they are, old stores, the check's cache.

(The flipped bytes themselves: tests/reliability/faults/test_bit_flips.py.)
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pandas as pd
import pytest

import tasks.store.history as history
from tasks.store.catalog import CatalogStore
from tasks.store.history import (
    DIGEST,
    MANIFEST,
    HistoryCorruptError,
    HistoryStore,
    sidecar_path,
)
from tests.tasks.store.legacy_store import strip_digests

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def cycle(day: int) -> pd.DataFrame:
    return pd.DataFrame(
        {
            "url_id": [1, 2, 3],
            "host": "a.test",
            "fetched_at": T0 + timedelta(days=day),
            "outcome": "ok",
            "record_hash": [f"h{day % 2}", "same", f"x{day}"],
        }
    )


def build(root: Path, cycles: int = 2) -> HistoryStore:
    store = HistoryStore(root)
    for c in range(cycles):
        store.write_cycle(c, cycle(c))
    CatalogStore(root).upsert(pd.DataFrame({"url": ["http://a.test/1", "http://a.test/2"]}))
    return store


def flip_middle(path: Path) -> bytes:
    original = path.read_bytes()
    data = bytearray(original)
    data[len(data) // 2] ^= 0xFF
    path.write_bytes(bytes(data))
    return original


def flip_schema_byte(path: Path) -> bytes:
    """Flip a byte of the Arrow schema kept in the file's metadata: a damage DuckDB reads
    through (it does not interpret that metadata), wherever the writer put its pages."""
    original = path.read_bytes()
    data = bytearray(original)
    at = data.find(b"ARROW:schema")
    assert at > 0, path
    data[at + 64] ^= 0x01
    path.write_bytes(bytes(data))
    return original


def sha(path: Path | str) -> str:
    return hashlib.new(DIGEST, Path(path).read_bytes()).hexdigest()


def test_the_manifest_keeps_each_published_files_digest(tmp_path):
    store = build(tmp_path)
    manifest = store.manifest()
    for c in ("0", "1"):
        entry = manifest["cycles"][c]
        assert entry[DIGEST] == {
            "part-0.parquet": sha(tmp_path / "history" / entry["dir"] / "part-0.parquet")
        }
    assert manifest["stats"][DIGEST] == sha(store.stats_files()[0])
    catalog = CatalogStore(tmp_path).path
    assert json.loads(sidecar_path(catalog).read_text())[DIGEST] == [sha(catalog)]


def test_an_edited_manifest_is_refused_by_its_own_digest(tmp_path):
    store = build(tmp_path)
    path = tmp_path / "history" / MANIFEST
    manifest = json.loads(path.read_text())
    manifest["cycles"]["1"]["rows"] += 1  # still valid JSON, still a plausible store
    path.write_text(json.dumps(manifest, indent=1, sort_keys=True))
    with pytest.raises(HistoryCorruptError, match=str(path)):
        store.cycles()


def test_an_old_store_reads_unchecked_until_its_next_commit_records_the_digests(tmp_path):
    store = build(tmp_path)
    strip_digests(tmp_path)
    part = Path(store.files([0])[0])
    saved = flip_schema_byte(part)
    store.read()  # no digest to check against: reads as the store always did
    part.write_bytes(saved)
    store.write_cycle(2, cycle(2))
    manifest = store.manifest()
    assert all(DIGEST in e for e in manifest["cycles"].values()) and DIGEST in manifest["stats"]
    flip_middle(part)
    with pytest.raises(HistoryCorruptError, match=str(part)):
        store.read()


def test_rebuild_stats_records_the_digests_of_an_old_store(tmp_path):
    store = build(tmp_path)
    strip_digests(tmp_path)
    store.rebuild_stats()
    manifest = store.manifest()
    assert manifest["cycles"]["0"][DIGEST] == {"part-0.parquet": sha(store.files([0])[0])}
    assert manifest["stats"][DIGEST] == sha(store.stats_files()[0])


def test_an_old_catalog_reads_and_gets_its_digest_at_its_next_write(tmp_path):
    build(tmp_path)
    strip_digests(tmp_path)
    catalog = CatalogStore(tmp_path)
    assert catalog.read().num_rows == 2 and not sidecar_path(catalog.path).exists()
    catalog.upsert(pd.DataFrame({"url": ["http://a.test/3"]}))
    assert json.loads(sidecar_path(catalog.path).read_text())[DIGEST] == [sha(catalog.path)]
    flip_middle(catalog.path)
    with pytest.raises(HistoryCorruptError, match=str(catalog.path)):
        catalog.read()


class CrashError(Exception):
    pass


@pytest.mark.parametrize("step", ["before the rename", "after the rename"])
def test_a_catalog_write_cut_short_leaves_a_catalog_that_reads(tmp_path, monkeypatch, step):
    """The sidecar lists the old and the new digest while the file is replaced
    (``write_sidecar``), so a write that dies between its steps leaves the old catalog or
    the new one, and either reads."""
    build(tmp_path)
    catalog = CatalogStore(tmp_path)
    real_replace, real_put = history.os.replace, history._put_sidecar
    puts: list[list[str]] = []

    def replace(src, dst):
        if step == "before the rename" and Path(dst) == catalog.path:
            raise CrashError
        real_replace(src, dst)

    def put(path, digests):
        if step == "after the rename" and puts:
            raise CrashError  # the second sidecar write: the file is already the new one
        puts.append(digests)
        real_put(path, digests)

    monkeypatch.setattr(history.os, "replace", replace)
    monkeypatch.setattr(history, "_put_sidecar", put)
    with pytest.raises(CrashError):
        catalog.upsert(pd.DataFrame({"url": ["http://a.test/3"]}))
    monkeypatch.undo()
    assert catalog.read().num_rows == (2 if step == "before the rename" else 3)
    catalog.upsert(pd.DataFrame({"url": ["http://a.test/4"]}))  # and the next write is clean
    assert json.loads(sidecar_path(catalog.path).read_text())[DIGEST] == [sha(catalog.path)]


def test_a_file_is_hashed_once_per_process_while_unchanged(tmp_path, monkeypatch):
    store = build(tmp_path)
    history._checked_digests.clear()  # as a fresh process
    hashed: list[str] = []
    real = history._handle_digest

    def counting(handle):
        hashed.append(handle.name)
        return real(handle)

    monkeypatch.setattr(history, "_handle_digest", counting)
    store.read()
    assert sorted(hashed) == sorted(store.files())
    store.read()
    store.relation(history.connect()).to_arrow_table()
    assert sorted(hashed) == sorted(store.files())  # not hashed again
    part = Path(store.files([1])[0])
    part.write_bytes(part.read_bytes())  # rewritten in place, same bytes: checked again
    store.read()
    assert hashed.count(str(part)) == 2
