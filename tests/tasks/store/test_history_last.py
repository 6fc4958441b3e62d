"""Each page's last observation kept at commit (``_last/``, issue 19): a commit links against
it instead of scanning the history, and publishes what the scan gave.

The history is ``test_history_ages``'s (every kind of Last-Modified, 304s, NULL hashes,
pages fetched 0-3 times a cycle, duplicates staged, tiny batches and buckets). The same
cycles are committed twice: as the store does, and with the kept state taken out of the
manifest before each commit (the store then links against the history files, as before).
"""

from __future__ import annotations

import json
from pathlib import Path

import duckdb
import pyarrow.parquet as pq
import pytest

import tasks.store.history as history
import tasks.store.link as link
from tasks.store.history import HistoryStore, connect
from tasks.store.link import LAST_COLUMNS, write_last_state
from tests.tasks.store.test_history_ages import TINY_BATCHES, Web, commit

CYCLES = 5


@pytest.fixture
def tiny(monkeypatch):
    """Record batches of 5 rows, sorts of 30: every carried state crosses batches."""
    for name, value in TINY_BATCHES.items():
        monkeypatch.setattr(history, name, value)


def forget_last(store: HistoryStore) -> None:
    """The manifest as a store written before the kept state (digest left out too)."""
    path = store.dir / "_manifest.json"
    if not path.exists():
        return
    manifest = json.loads(path.read_text())
    manifest.pop("last", None)
    manifest.pop("manifest_sha256", None)
    path.write_text(json.dumps(manifest))


def history_of(root, *, scan: bool) -> HistoryStore:
    """Five cycles, the latest one rewritten, then one more committed unlinked."""
    web = Web(90, seed=3)
    store = HistoryStore(root)
    for cycle_id in range(CYCLES):
        late = range(70, 90) if cycle_id == CYCLES - 1 else range(0)
        if scan:
            forget_last(store)
        commit(store, cycle_id, web.cycle(cycle_id, range(70)) + web.cycle(cycle_id, late))
    if scan:
        forget_last(store)
    commit(store, CYCLES - 1, web.cycle(CYCLES - 1, range(90)))  # the latest, rewritten
    if scan:
        forget_last(store)
    unlinked = [{**row, "changed": None} for row in web.cycle(CYCLES, range(90))]
    commit(store, CYCLES, unlinked, link=False)  # no links given: only Last-Modified judged
    return store


def assert_same_history(a: HistoryStore, b: HistoryStore) -> None:
    assert a.cycles() == b.cycles()
    assert a.read().equals(b.read())
    order = [("url_id", "ascending")]
    assert a.page_sums().sort_by(order).equals(b.page_sums().sort_by(order))


def scanned_state(store: HistoryStore, tmp_path) -> duckdb.DuckDBPyRelation:
    """Each page's last observation computed from every published file."""
    path = tmp_path / "scanned-last.parquet"
    write_last_state(connect(), None, store.files(), path)
    return connect().read_parquet(str(path))


def kept_state(store: HistoryStore) -> str:
    entry = json.loads((store.dir / "_manifest.json").read_text())["last"]["after"]
    assert entry["through"] == max(store.cycles())
    return str(store.dir / entry["file"])


def test_commits_linked_against_the_kept_state_publish_what_the_scan_gave(tmp_path, tiny):
    kept = history_of(tmp_path / "kept", scan=False)
    scanned = history_of(tmp_path / "scanned", scan=True)
    assert_same_history(kept, scanned)
    # the kept state is the one the whole history gives
    want = scanned_state(kept, tmp_path).order("url_id").fetchall()
    got = connect().read_parquet(kept_state(kept)).order("url_id").fetchall()
    assert got == want
    assert pq.read_schema(kept_state(kept)).names == list(LAST_COLUMNS)
    # only the state after the latest cycle and the one before it are kept
    assert len(list((kept.dir / "_last").glob("*.parquet"))) <= 3  # + one retired


def test_a_commit_with_a_kept_state_reads_no_history_for_its_links(tmp_path, tiny, monkeypatch):
    web = Web(90, seed=3)
    store = HistoryStore(tmp_path)
    commit(store, 0, web.cycle(0, range(70)))

    def no_scan(*args, **kwargs):
        raise AssertionError("the commit scanned the history for the pages' last observations")

    monkeypatch.setattr(link, "_prior_rows", no_scan)
    commit(store, 1, web.cycle(1, range(70)))
    commit(store, 1, web.cycle(1, range(70)))  # a rewrite links against the state before it
    commit(store, 2, web.cycle(2, range(70)))
    assert store.cycles() == [0, 1, 2]


def test_a_corrupt_or_missing_kept_state_falls_back_to_the_history(tmp_path, tiny):
    web = Web(90, seed=3)
    reference_web = Web(90, seed=3)
    store, reference = HistoryStore(tmp_path / "a"), HistoryStore(tmp_path / "b")
    for cycle_id in range(3):
        rows = web.cycle(cycle_id, range(70))
        assert rows == reference_web.cycle(cycle_id, range(70))
        if cycle_id == 1:
            path = kept_state(store)
            data = bytearray(Path(path).read_bytes())
            data[len(data) // 2] ^= 0xFF
            Path(path).write_bytes(bytes(data))
        if cycle_id == 2:
            Path(kept_state(store)).unlink()
        commit(store, cycle_id, rows)
        commit(reference, cycle_id, rows)
    assert_same_history(store, reference)
    with pytest.raises(AssertionError):  # the check above can fail
        assert_same_history(store, HistoryStore(tmp_path / "empty"))
