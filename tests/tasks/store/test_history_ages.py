"""Last-Modified age sums kept at commit equal what the old history scan computed.

The history below has every kind of Last-Modified the judge tells apart: honest dates of
the last change, "now" stamps, none, unparseable or out-of-range ones, dates that move
though the record does not, dates that stay though it changes, 304s with and without
one, and a page whose date comes only on some fetches (its previous date is then older
than its previous observation). Pages are fetched 0-3 times a cycle, some only once in
all, exact duplicates are staged, and tiny record batches and buckets make every carried
state cross a batch boundary. ``tests/tasks/store/lm_scan_reference.py`` is the old scan.
"""

from __future__ import annotations

import copy
import dataclasses
import shutil
from datetime import UTC, datetime, timedelta
from email.utils import format_datetime
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

import tasks.store.history as history
from models.schemas import LM_EVIDENCE_COLUMNS, PAGE_STATS_FILE_SCHEMA, PAGE_STATS_SCHEMA
from tasks.cycle.estimation import read_estimation_inputs
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore
from tests.tasks.store.legacy_store import strip_digests
from tests.tasks.store.lm_scan_reference import reference_inputs, scan_ages

T0 = datetime(2026, 1, 5, tzinfo=UTC)
HOSTS = ("honest", "now", "absent", "garbled", "volatile", "hidden", "sparse")
AGE_SUMS = (
    ("age_count", "count"),
    ("age_days", "days"),
    ("age_n_changed", "n_changed"),
    ("age_changed_sum", "changed_sum"),
    ("age_changed_sum_sq", "changed_sum_sq"),
    ("age_changed_sum_cube", "changed_sum_cube"),
)
GARBLED = (
    "yesterday-ish",
    "Mon, 01 Jan 1990 00:00:00 GMT",  # parses, but before the web: no date
    "Sunday, 06-Nov-94 08:49:37 GMT",  # RFC 850, accepted
    "Sun Nov 06 08:49:37 1994",  # asctime, accepted
    "",
)


#: Record batches of 5 rows and sorts of 30: every carried state crosses batches.
TINY_BATCHES = {"COMMIT_BATCH_ROWS": 5, "COMMIT_BUCKET_ROWS": 30}


@pytest.fixture
def tiny_batches(monkeypatch):
    for name, value in TINY_BATCHES.items():
        monkeypatch.setattr(history, name, value)


def http_date(at: datetime) -> str:
    return format_datetime(at.replace(microsecond=0), usegmt=True)


class Web:
    """Pages whose records change at random times, and the headers their hosts send."""

    def __init__(self, pages: int, seed: int, ids: list[int] | None = None) -> None:
        self.rng = np.random.default_rng(seed)
        self.ids = ids or [5000 + page for page in range(pages)]
        self.version = np.zeros(pages, dtype=np.int64)
        # the last change: some long ago (a first observation beyond the horizon)
        self.changed_at = [
            T0 - timedelta(days=float(self.rng.uniform(0.5, 200))) for _ in range(pages)
        ]
        self.seen_at: list[datetime | None] = [None] * pages

    def host(self, page: int) -> str:
        return HOSTS[page % len(HOSTS)]

    def fetch(self, page: int, at: datetime) -> dict[str, object]:
        rng, host = self.rng, self.host(page)
        last = self.seen_at[page] or at - timedelta(days=5)
        change = host != "volatile" and rng.random() < 0.5  # a change since the last fetch
        if change:
            self.version[page] += 1
            self.changed_at[page] = last + (at - last) * float(rng.uniform(0.05, 0.95))
        self.seen_at[page] = at
        header: str | None = {
            "honest": http_date(self.changed_at[page]),
            "now": http_date(at),
            "absent": None,
            "garbled": str(rng.choice(GARBLED)),
            "volatile": http_date(at - timedelta(hours=1)),
            "hidden": http_date(T0 - timedelta(days=300)),
            "sparse": http_date(self.changed_at[page]) if rng.random() < 0.35 else None,
        }[host]
        outcome = str(rng.choice(["ok"] * 7 + ["not_modified", "error", "timeout"]))
        if change and outcome == "not_modified" and host in ("honest", "sparse"):
            outcome = "ok"  # these servers are honest
        record_hash = f"p{page}v{self.version[page]}" if rng.random() < 0.95 else None
        if outcome == "not_modified" and rng.random() < 0.5:
            header = None
        return {
            "url_id": self.ids[page],
            "host": f"{host}.test",
            "fetched_at": at,
            "outcome": outcome,
            "record_hash": record_hash if outcome == "ok" else None,
            "last_modified": header if outcome in ("ok", "not_modified") else None,
            "changed": change if rng.random() < 0.1 else None,  # the fetcher's own flag
        }

    def cycle(self, cycle_id: int, pages: range) -> list[dict[str, object]]:
        """0-3 fetches of each page in a window of 9 days (a page first seen late gets one)."""
        rows = []
        start = T0 + timedelta(days=10 * cycle_id)
        for page in pages:
            times = sorted(
                {int(m) for m in self.rng.integers(0, 9 * 24 * 60, int(self.rng.choice(4)))}
            )
            rows += [self.fetch(page, start + timedelta(minutes=m)) for m in times]
        return rows


def commit(store: HistoryStore, cycle_id: int, rows: list[dict], *, link: bool = True) -> None:
    """Stage the rows in three parts, the first row twice (a duplicate to drop)."""
    if not rows:
        return
    table = pa.Table.from_pylist(rows + rows[:1])
    third = -(-table.num_rows // 3)
    with store.cycle_writer(cycle_id, link=link) as writer:
        for start in range(0, table.num_rows, third):
            writer.write_part(table.slice(start, third))


def build(root: Path, cycles: int = 5, ids: list[int] | None = None) -> Web:
    """Pages 0-69 from cycle 0; 70-89 only in the last cycle (seen once at most)."""
    pages = 90
    web = Web(pages, seed=3, ids=ids)
    store = HistoryStore(root)
    for cycle_id in range(cycles):
        late = range(70, pages) if cycle_id == cycles - 1 else range(0)
        commit(store, cycle_id, web.cycle(cycle_id, range(70)) + web.cycle(cycle_id, late))
    return web


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    """``built(root, cycles)``: ``build``'s store copied to ``root``, and its ``Web`` as it
    was after the build (its random state too). Each history is built once for the module
    (a build is 4-5 commits of tiny batches, ~1 CPU s each); the tests change only their
    copies, which hold the same bytes as a build of their own."""
    made: dict[int, tuple[Path, Web]] = {}

    def copy_of(root: Path, cycles: int = 5) -> Web:
        if cycles not in made:
            source = tmp_path_factory.mktemp(f"built-{cycles}") / "root"
            with pytest.MonkeyPatch.context() as patch:
                for name, value in TINY_BATCHES.items():
                    patch.setattr(history, name, value)
                made[cycles] = (source, build(source, cycles))
        source, web = made[cycles]
        # new files, new times: as fresh as a build (the store sweeps old leftovers by age)
        shutil.copytree(source, root, copy_function=shutil.copy, dirs_exist_ok=True)
        return copy.deepcopy(web)

    return copy_of


def assert_sums_equal_the_scan(root: Path) -> None:
    """Per page the stored ages equal the scan's; per host the stored evidence too."""
    sums = HistoryStore(root).page_sums().sort_by("url_id")
    assert sums.schema == PAGE_STATS_FILE_SCHEMA
    hosts = sorted(set(sums["host"].to_pylist()))
    ages, evidence = scan_ages(root, sums["url_id"].to_numpy(), hosts)
    for column, field in AGE_SUMS:
        np.testing.assert_allclose(
            sums[column].to_numpy(), getattr(ages, field), rtol=1e-12, atol=0, err_msg=column
        )
    host_code = np.searchsorted(hosts, sums["host"].to_numpy(zero_copy_only=False))
    stored = np.zeros_like(evidence)
    for k, column in enumerate(LM_EVIDENCE_COLUMNS):
        np.add.at(stored[:, k], host_code, sums[column].to_numpy())
    np.testing.assert_array_equal(stored, evidence)
    # the history exercises what it should
    assert evidence.sum(axis=0).min() > 0, "every evidence code occurs"
    assert (ages.n_changed > 0).any() and (ages.count > 0).any()


def assert_same_sums(a: pa.Table, b: pa.Table) -> None:
    """Same pages, same counts, same sums (floats up to summation order)."""
    a, b = a.sort_by("url_id"), b.sort_by("url_id")
    assert a.schema.names == b.schema.names
    assert a.num_rows == b.num_rows > 0
    for field in a.schema:
        x, y = a[field.name], b[field.name]
        if pa.types.is_floating(field.type):
            np.testing.assert_allclose(x, y, rtol=1e-12, atol=0, err_msg=field.name)
        else:
            assert x.equals(y), field.name


def assert_rebuild_equals(root: Path) -> None:
    """A rebuild from the history gives the incremental file, every column."""
    store = HistoryStore(root)
    incremental = store.page_sums()
    store.rebuild_stats()
    assert_same_sums(incremental, store.page_sums())


def assert_inputs_equal_the_scan(root: Path, *, use_catalog: bool) -> None:
    """``read_estimation_inputs`` gives what it gave with the scan, field for field (pages
    in url_id order: the order DuckDB returns them in is not part of the result)."""
    got = read_estimation_inputs(root, use_catalog=use_catalog)
    want, ages, _ = reference_inputs(root, use_catalog=use_catalog)
    assert (ages.days > 0).any()
    assert (want.moments.aged_count is not None) and (want.moments.aged_count > 0).any()
    a_order, b_order = np.argsort(got.moments.page_ids), np.argsort(want.moments.page_ids)
    np.testing.assert_array_equal(got.host_codes[a_order], want.host_codes[b_order])
    np.testing.assert_array_equal(got.group_codes[a_order], want.group_codes[b_order])
    assert got.host_names.equals(want.host_names)
    assert got.group_names.equals(want.group_names)
    for field in dataclasses.fields(want.moments):
        a, b = getattr(got.moments, field.name), getattr(want.moments, field.name)
        assert (a is None) == (b is None), field.name
        if a is not None:
            np.testing.assert_allclose(
                a[a_order], b[b_order], rtol=1e-12, atol=1e-300, err_msg=field.name
            )


def test_commit_time_sums_equal_the_scan(tmp_path, tiny_batches, built):
    built(tmp_path)
    assert_sums_equal_the_scan(tmp_path)
    sums = HistoryStore(tmp_path).page_sums()
    once = np.asarray(sums["n_intervals"]) == 0
    assert once.any(), "a page seen once keeps its Last-Modified evidence"
    assert_inputs_equal_the_scan(tmp_path, use_catalog=False)
    assert_rebuild_equals(tmp_path)


def test_estimation_inputs_with_a_catalog_equal_the_scan(tmp_path, tiny_batches):
    """Catalog pages 0-79: pages 70-79 are seen once at most and estimated (with their
    ages), 80-89 are not (but their hosts' evidence counts)."""
    urls = [f"http://{HOSTS[p % len(HOSTS)]}.test/{p}" for p in range(80)]
    hosts = [f"{HOSTS[p % len(HOSTS)]}.test" for p in range(80)]
    CatalogStore(tmp_path).upsert(pa.table({"url": urls, "host": hosts}))
    catalog = pq.read_table(CatalogStore(tmp_path).path).to_pydict()
    by_url = dict(zip(catalog["url"], catalog["url_id"], strict=True))
    build(tmp_path, ids=[by_url[u] for u in urls] + [5000 + p for p in range(80, 90)])
    assert_inputs_equal_the_scan(tmp_path, use_catalog=True)


def test_replacing_the_last_cycle_keeps_the_sums_equal_to_the_scan(tmp_path, tiny_batches, built):
    web = built(tmp_path)
    store = HistoryStore(tmp_path)
    before = store.page_sums()
    # the same cycle again, fetched differently (fewer pages, other times and answers)
    commit(store, 4, web.cycle(4, range(0, 60)))
    assert store.manifest()["cycles"]["4"]
    assert not store.page_sums().equals(before)
    assert_sums_equal_the_scan(tmp_path)
    assert_rebuild_equals(tmp_path)


def test_unlinked_cycles_keep_the_same_sums(tmp_path, tiny_batches, built):
    """Rows written with their own links (imports, simulations) give the same sums."""
    built(tmp_path / "linked")
    linked = HistoryStore(tmp_path / "linked")
    unlinked = HistoryStore(tmp_path / "unlinked")
    for cycle_id in linked.cycles():
        commit(unlinked, cycle_id, linked.read([cycle_id]).to_pylist(), link=False)
    assert_same_sums(linked.page_sums(), unlinked.page_sums())
    assert_sums_equal_the_scan(tmp_path / "unlinked")


def test_an_observation_out_of_order_recomputes_the_sums(tmp_path, tiny_batches, built):
    """An unlinked cycle with an observation before the page's previous one (accepted:
    its rows carry their own links) changes the judgement of later ones: the commit
    recomputes the sums from the history in time order."""
    web = built(tmp_path, cycles=4)
    store = HistoryStore(tmp_path)
    rows = [dict(r, changed=None, interval_days=None) for r in web.cycle(4, range(70))]
    early = {
        "url_id": 5000,
        "host": "honest.test",
        "fetched_at": T0 + timedelta(days=1, hours=3),  # inside cycle 0's window
        "outcome": "ok",
        "record_hash": "early",
        "last_modified": http_date(T0 + timedelta(days=1)),
        "changed": True,
        "interval_days": 0.5,
    }
    commit(store, 4, [*rows, early], link=False)
    assert_sums_equal_the_scan(tmp_path)
    assert_rebuild_equals(tmp_path)


def legacy(root: Path) -> None:
    """Make the published statistics look written before the age sums existed: the
    interval columns only, pages with an interval only (and no digests, as then)."""
    strip_digests(root)
    store = HistoryStore(root)
    path = Path(store.stats_files()[0])
    table = pq.read_table(path).filter(pa.compute.greater(pq.read_table(path)["n_intervals"], 0))
    pq.write_table(table.select(PAGE_STATS_SCHEMA.names).cast(PAGE_STATS_SCHEMA), path)
    assert not store.stats_current()


def test_statistics_without_age_columns_are_rebuilt_on_first_estimate(
    tmp_path, tiny_batches, built
):
    built(tmp_path)
    store = HistoryStore(tmp_path)
    intervals = store.page_stats()
    legacy(tmp_path)
    assert store.page_stats().equals(intervals)  # an old file still reads
    assert_inputs_equal_the_scan(tmp_path, use_catalog=False)
    assert store.stats_current()
    assert_same_sums(store.page_stats(), intervals)  # nothing stored was lost
    assert_sums_equal_the_scan(tmp_path)


def test_statistics_without_age_columns_are_rebuilt_by_the_next_commit(
    tmp_path, tiny_batches, built
):
    web = built(tmp_path, cycles=4)
    legacy(tmp_path)
    commit(HistoryStore(tmp_path), 4, web.cycle(4, range(90)))
    assert HistoryStore(tmp_path).stats_current()
    assert_sums_equal_the_scan(tmp_path)
    assert_rebuild_equals(tmp_path)
