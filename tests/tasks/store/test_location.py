"""tasks.store.location: one layer for the store's paths, on the local filesystem and on
fsspec's ``memory://`` (the second backend tested here; object stores are not reachable
from this machine), and one clear error for a bad root."""

from __future__ import annotations

import uuid
from collections.abc import Iterator

import duckdb
import fsspec
import pyarrow as pa
import pytest

from tasks.store.location import Location, StoreLocationError, resolve


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
