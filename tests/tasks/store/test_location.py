"""tasks.store.location: one layer for the store's paths, on the local filesystem and on
fsspec's ``memory://`` (the second backend tested here; object stores are not reachable
from this machine), and one clear error for a bad root."""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from pathlib import Path

import duckdb
import fsspec
import pyarrow as pa
import pytest

import flows.cli
from tasks.store.catalog import require_store
from tasks.store.history import HistoryCorruptError, HistoryStore, connect
from tasks.store.location import Location, StoreLocationError, resolve
from tests.reliability.faults.disk_worker import synthetic_rows


@pytest.fixture(params=["local", "memory"])
def loc(request, tmp_path) -> Iterator[Location]:
    if request.param == "local":
        yield resolve(tmp_path / "store")
        return
    root = f"memory://test-{uuid.uuid4().hex}/store"
    yield resolve(root)
    fsspec.filesystem("memory").rm(root.removeprefix("memory://"), recursive=True)


def test_write_list_read_and_remove_through_one_layer(loc):
    table = pa.table({"url_id": [1, 2, 3], "host": ["a", "b", "a"]})
    loc.write_parquet(table, "history/cycle=1/v-a/part-0.parquet")
    loc.write_parquet(table.slice(0, 1), "history/cycle=2/v-b/part-0.parquet")
    loc.write_text("history/_manifest.json", '{"cycles": {}}')
    assert loc.glob("history/cycle=*") == ["history/cycle=1", "history/cycle=2"]
    assert loc.glob("history/*.json") == ["history/_manifest.json"]
    assert loc.read_text("history/_manifest.json") == '{"cycles": {}}'
    assert loc.exists("history/cycle=1/v-a/part-0.parquet")
    assert not loc.exists("history/cycle=3")
    # DuckDB reads through the same layer (a URL and a registered filesystem off local disk)
    con = loc.duckdb(duckdb.connect())
    files = [loc.url(f"history/cycle={c}/v-{v}/part-0.parquet") for c, v in ((1, "a"), (2, "b"))]
    assert con.read_parquet(files).aggregate("count(*)").fetchall() == [(4,)]
    with loc.open("history/cycle=1/v-a/part-0.parquet") as handle:
        assert handle.read(4) == b"PAR1"
    assert loc.info("history/_manifest.json")["size"] == len('{"cycles": {}}')
    loc.remove("history/cycle=1")
    assert loc.glob("history/cycle=*") == ["history/cycle=2"]
    loc.remove("history/cycle=9")  # absent: fine


def test_a_published_file_replaces_the_old_one_whole(loc):
    loc.write_text("history/_manifest.json", "old")
    loc.write_text("history/_manifest.json", "new")
    assert loc.read_text("history/_manifest.json") == "new"
    # nothing else left beside it (locally: no temporary file after the rename)
    assert loc.glob("history/*") == ["history/_manifest.json"]


def test_local_roots_are_paths_and_file_urls(tmp_path):
    assert resolve(tmp_path).local and resolve(f"file://{tmp_path}").local
    assert resolve(f"file://{tmp_path}").url("x/y") == str(tmp_path / "x" / "y")
    assert resolve(tmp_path).local_path("x") == tmp_path / "x"
    remote = resolve("memory://bucket/root")
    assert not remote.local and remote.url("a/b") == "memory://bucket/root/a/b"
    with pytest.raises(StoreLocationError, match="needs a local folder"):
        remote.local_path("history/.lock")


@pytest.mark.parametrize(
    ("root", "message"),
    [
        ("s3x://bucket/store", "unknown storage scheme 's3x'"),
        ("nosuch://x", "unknown storage scheme 'nosuch'"),
    ],
)
def test_a_bad_root_is_one_clear_error(root, message):
    with pytest.raises(StoreLocationError, match=message) as info:
        resolve(root)
    assert "\n" not in str(info.value) and root in str(info.value)


def test_a_missing_filesystem_package_is_one_clear_error(monkeypatch):
    def missing(protocol):
        raise ImportError(f"Install {protocol}fs to access it")

    monkeypatch.setattr(fsspec, "get_filesystem_class", missing)
    with pytest.raises(StoreLocationError, match="filesystem is not installed here"):
        resolve("s3://bucket/store")


def test_an_unreachable_root_is_one_clear_error(monkeypatch):
    def unreachable(self, path, **kwargs):
        raise ConnectionError("connection refused")

    monkeypatch.setattr(type(fsspec.filesystem("memory")), "exists", unreachable)
    with pytest.raises(StoreLocationError, match="cannot be reached: connection refused"):
        resolve("memory://bucket/store")


def test_must_exist_refuses_an_absent_root(tmp_path):
    with pytest.raises(StoreLocationError, match="no such store location"):
        resolve(tmp_path / "absent", must_exist=True)
    assert resolve(tmp_path, must_exist=True).exists()


# ---------------------------------------------------------------------- the history read


def _copy_to(local: Path, url: str) -> None:
    """Copy a store's files to ``url`` the way a sync to an object store should: every file
    the manifest names first, the manifest last (readers go through it)."""
    target = resolve(url)
    manifest = local / "history" / "_manifest.json"
    for path in sorted(local.rglob("*")):
        if path.is_file() and path != manifest and not path.name.startswith("."):
            target.write_bytes(str(path.relative_to(local)), path.read_bytes())
    target.write_bytes("history/_manifest.json", manifest.read_bytes())


@pytest.fixture
def remote_copy(tmp_path) -> Iterator[tuple[HistoryStore, HistoryStore]]:
    """A local store of three committed cycles and its copy on ``memory://``."""
    local = HistoryStore(tmp_path / "store")
    for cycle in range(3):
        local.write_cycle(cycle, synthetic_rows(cycle, pages=200))
    url = f"memory://bucket-{uuid.uuid4().hex}/store"
    _copy_to(tmp_path / "store", url)
    yield local, HistoryStore(url)
    fsspec.filesystem("memory").rm(url.removeprefix("memory://"), recursive=True)


def test_a_store_copied_to_an_object_store_reads_the_same(remote_copy):
    local, remote = remote_copy
    assert remote.cycles() == local.cycles() == [0, 1, 2]
    assert all(f.startswith("memory://") for f in remote.files())
    assert remote.read().equals(local.read())
    order = [("url_id", "ascending")]
    assert remote.page_sums().sort_by(order).equals(local.page_sums().sort_by(order))
    con = connect()
    assert remote.relation(con).aggregate("count(*)").fetchall() == [(600,)]
    require_store(remote.location.root)  # a store is there


def test_an_object_store_root_is_read_only_with_one_clear_error(remote_copy):
    _, remote = remote_copy
    with pytest.raises(StoreLocationError, match="committed only in a local folder"):
        remote.write_cycle(3, synthetic_rows(3, pages=200))
    with pytest.raises(StoreLocationError, match="committed only in a local folder"):
        remote.rebuild_stats()
    assert remote.cycles() == [0, 1, 2]


def test_a_flipped_byte_on_the_object_store_is_named(remote_copy):
    _, remote = remote_copy
    part = remote.files([1], verify=False)[0]
    fs = fsspec.filesystem("memory")
    data = bytearray(fs.cat_file(part.removeprefix("memory://")))
    data[len(data) // 2] ^= 0xFF
    fs.pipe_file(part.removeprefix("memory://"), bytes(data))
    with pytest.raises(HistoryCorruptError, match="cycle=1"):
        remote.read()


def test_the_cli_refuses_a_bad_root_with_one_line_and_exit_2(capsys):
    assert flows.cli.main(["estimate", "--root", "s3x://bucket/store"]) == 2
    err = capsys.readouterr().err.strip()
    assert err.count("\n") == 0 and "unknown storage scheme 's3x'" in err
