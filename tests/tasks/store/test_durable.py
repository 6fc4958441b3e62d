"""tasks.store.durable: the one durable write (temporary name, fsync, replace, fsync of the folder),
and a check that no production module renames or fsyncs files outside it."""

from __future__ import annotations

import ast
import os
import stat
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from tasks.store import durable
from tasks.store.durable import (
    durable_file,
    durable_path,
    durable_rename,
    durable_write,
    durable_write_bytes,
    durable_write_parquet,
    durable_write_text,
    fsync_dir,
    staged,
    temp_path,
)

#: The repository: the nearest folder above that holds pyproject.toml (wherever this file is).
REPO = next(p for p in Path(__file__).resolve().parents if (p / "pyproject.toml").is_file())
PRODUCTION = ("models", "tasks", "flows")


class BoomError(Exception):
    pass


def _entries(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir())


def test_a_failing_writer_leaves_the_old_file_whole_and_no_temporary_file(tmp_path):
    path = tmp_path / "data.bin"
    path.write_bytes(b"old contents")

    def half_then_fail(handle):
        handle.write(b"new cont")
        handle.flush()
        assert path.read_bytes() == b"old contents"  # readers meanwhile see the old file
        raise BoomError

    with pytest.raises(BoomError):
        durable_write(path, half_then_fail)
    assert path.read_bytes() == b"old contents"
    assert _entries(tmp_path) == ["data.bin"]


def test_a_failing_first_write_leaves_nothing_under_the_final_name(tmp_path):
    path = tmp_path / "sub" / "new.parquet"
    with pytest.raises(BoomError), durable_file(path) as handle:
        handle.write(b"PAR1 half a file")
        raise BoomError
    assert not path.exists()
    assert _entries(path.parent) == []


def test_an_interrupt_is_cleaned_up_too(tmp_path):
    path = tmp_path / "x.json"
    with pytest.raises(KeyboardInterrupt), durable_path(path) as tmp:
        tmp.write_text("{")
        raise KeyboardInterrupt
    assert _entries(tmp_path) == []


def test_a_failed_rename_keeps_the_old_file_and_removes_the_temporary(tmp_path, monkeypatch):
    path = tmp_path / "x.txt"
    path.write_text("old")

    def no_space(src, dst):
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(os, "replace", no_space)
    with pytest.raises(OSError):
        durable_write_text(path, "new")
    assert path.read_text() == "old"
    assert _entries(tmp_path) == ["x.txt"]


def test_writes_replace_the_file_whole(tmp_path):
    path = tmp_path / "f.bin"
    durable_write_bytes(path, b"one")
    durable_write_bytes(path, b"two, longer")
    assert path.read_bytes() == b"two, longer"
    durable_write_text(path, "täxt")
    assert path.read_text(encoding="utf-8") == "täxt"
    table = pa.table({"a": [1, 2, 3]})
    parquet = tmp_path / "t.parquet"
    durable_write_parquet(table, parquet, compression="zstd")
    assert pq.read_table(parquet).equals(table)
    assert pq.ParquetFile(parquet).metadata.row_group(0).column(0).compression == "ZSTD"
    assert _entries(tmp_path) == ["f.bin", "t.parquet"]


def test_file_then_folder_are_fsynced_around_the_replace(tmp_path, monkeypatch):
    events: list[tuple[str, object]] = []
    real_fsync, real_replace = os.fsync, os.replace

    def fsync(fd):
        st = os.fstat(fd)
        events.append(("fsync-dir" if stat.S_ISDIR(st.st_mode) else "fsync-file", st.st_ino))
        real_fsync(fd)

    def replace(src, dst):
        events.append(("replace", os.stat(src).st_ino))
        real_replace(src, dst)

    monkeypatch.setattr(os, "fsync", fsync)
    monkeypatch.setattr(os, "replace", replace)
    path = tmp_path / "f.bin"
    durable_write_bytes(path, b"data")
    file_ino, dir_ino = path.stat().st_ino, tmp_path.stat().st_ino
    assert events == [("fsync-file", file_ino), ("replace", file_ino), ("fsync-dir", dir_ino)]


def test_an_incrementally_written_file_is_published_with_durable_rename(tmp_path, monkeypatch):
    synced: list[int] = []
    real_fsync = os.fsync
    monkeypatch.setattr(
        os, "fsync", lambda fd: (synced.append(os.fstat(fd).st_ino), real_fsync(fd))
    )
    final = tmp_path / "a.warc.gz"
    with staged(final) as tmp:
        with open(tmp, "wb") as handle:
            handle.write(b"record 1")
            handle.write(b"record 2")
        durable_rename(tmp, final)
    assert final.read_bytes() == b"record 1record 2"
    assert synced == [final.stat().st_ino, tmp_path.stat().st_ino]
    assert _entries(tmp_path) == ["a.warc.gz"]
    fsync_dir(tmp_path)  # a folder after deletions: no error


def test_temporary_names_are_hidden_unique_and_ignored_by_the_stores_globs(tmp_path):
    final = tmp_path / "part-00000.parquet"
    names = {temp_path(final).name for _ in range(100)}
    assert len(names) == 100
    for name in names:
        assert name.startswith(".part-00000.parquet.") and name.endswith(".tmp")
        (tmp_path / name).touch()
    assert list(tmp_path.glob("*.parquet")) == []
    assert list(tmp_path.glob("part-*")) == []
    assert temp_path(final).parent == tmp_path  # same folder: the rename stays atomic


# ---------------------------------------------------------------------- no writer bypasses it

#: Calls that put a file in place or make it durable; only tasks/store/durable.py may make them.
_OS_CALLS = {"replace", "rename", "renames", "fsync", "fdatasync"}


def bypasses(source: str) -> list[str]:
    """Calls in ``source`` that rename or fsync outside tasks.store.durable: ``os.<call>``, a
    ``from os import <call>``, ``shutil.move``, and ``<path>.replace(x)`` / ``.rename(x)``
    (one positional argument, no keywords: ``pathlib.Path``'s; ``str.replace`` takes two,
    ``datetime.replace`` and ``dataclasses.replace`` keywords)."""
    found = []
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ImportFrom) and node.module == "os":
            found += [f"from os import {a.name}" for a in node.names if a.name in _OS_CALLS]
        if not isinstance(node, ast.Call) or not isinstance(node.func, ast.Attribute):
            continue
        attr, owner = node.func.attr, node.func.value
        name = owner.id if isinstance(owner, ast.Name) else None
        if name == "os" and attr in _OS_CALLS:
            found.append(f"line {node.lineno}: os.{attr}")
        elif name == "shutil" and attr == "move":
            found.append(f"line {node.lineno}: shutil.move")
        elif attr in ("replace", "rename") and len(node.args) == 1 and not node.keywords:
            found.append(f"line {node.lineno}: .{attr}(...) of a path")
    return found


def test_the_bypass_check_finds_renames_and_fsyncs():
    flagged = """
import os, shutil
from os import replace
os.replace(tmp, path)
os.rename(tmp, path)
os.fsync(fd)
tmp.replace(path)
Path(tmp).rename(path)
shutil.move(tmp, path)
"""
    assert len(bypasses(flagged)) == 7  # the import and each of the six calls
    allowed = """
import dataclasses
s.replace("a", "b")
when.replace(tzinfo=UTC)
dataclasses.replace(spec, name="x")
frame.rename(columns={"a": "b"})
"""
    assert bypasses(allowed) == []


def test_no_production_module_renames_or_fsyncs_outside_tasks_durable():
    offenders, scanned = {}, 0
    home = Path(durable.__file__).resolve()
    for folder in PRODUCTION:
        for path in sorted((REPO / folder).rglob("*.py")):
            scanned += 1
            if path.resolve() == home:
                continue
            found = bypasses(path.read_text())
            if found:
                offenders[str(path.relative_to(REPO))] = found
    assert scanned > 50  # the scan found the production modules (not an empty folder)
    assert offenders == {}, "write files with tasks.store.durable instead"


def test_the_durable_module_is_where_the_renames_are():
    assert bypasses(Path(durable.__file__).read_text())  # the check sees its own subject
