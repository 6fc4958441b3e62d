"""Durable, atomic file writes: the one way the store and its reports put a file in place.

Durable here means one level, for every file: the bytes go to a unique temporary name in
the destination's folder, that file is fsynced, ``os.replace`` puts it under its final
name, and the folder is fsynced so the rename itself survives a power cut. On any error
(a full disk, an exception from the caller's writer, an interrupt) the temporary file is
removed and the error re-raised; the final name was never touched.

What a crash leaves: under the final name, either the old file or the new one whole, never
a part of one; beside it at most a stray temporary file. Temporary names are
``.<name>.<32 hex>.tmp``: hidden, unique per write (two writers never share one), and
ending in ``.tmp``, so the store's globs (``*.parquet``, ``*.warc.gz``, ``*.json``) never
pick one up.

    durable_write_bytes(path, data)           bytes
    durable_write_text(path, text)            UTF-8 text
    durable_write_parquet(table, path, **o)   a pyarrow table (``pq.write_table`` options)
    durable_write(path, write)                ``write(handle)`` into a binary handle
    with durable_file(path) as handle: ...    the same as a context manager
    with durable_path(path) as tmp: ...       for writers that need a file name (DuckDB,
                                              ``pq.ParquetWriter``)
    with staged(path) as tmp: ...             the temporary name alone, removed on error;
    durable_rename(tmp, path)                 ... published by this when complete (WARC
                                              files written incrementally, digests taken
                                              before the rename)
    fsync_dir(folder)                         after deleting files from a folder
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any, BinaryIO

import pyarrow as pa
import pyarrow.parquet as pq

__all__ = [
    "durable_file",
    "durable_path",
    "durable_rename",
    "durable_write",
    "durable_write_bytes",
    "durable_write_parquet",
    "durable_write_text",
    "fsync_dir",
    "staged",
    "temp_path",
]


def temp_path(path: str | Path) -> Path:
    """A new temporary name beside ``path``: ``.<name>.<uuid4 hex>.tmp``."""
    path = Path(path)
    return path.with_name(f".{path.name}.{uuid.uuid4().hex}.tmp")


def fsync_dir(path: str | Path) -> None:
    """fsync a folder: makes the renames, creations and deletions in it durable."""
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _fsync_file(path: Path) -> None:
    fd = os.open(path, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def durable_rename(tmp: str | Path, path: str | Path) -> None:
    """Publish a complete (closed or flushed) ``tmp`` as ``path``: fsync the file, replace,
    fsync the folder. ``tmp`` must be in ``path``'s folder (a rename is atomic only there)."""
    tmp, path = Path(tmp), Path(path)
    _fsync_file(tmp)
    os.replace(tmp, path)
    fsync_dir(path.parent)


@contextlib.contextmanager
def staged(path: str | Path) -> Iterator[Path]:
    """Yield a temporary name beside ``path`` (its folder created); if the block raises, the
    temporary file is removed and the error re-raised. Publishing is the caller's
    (``durable_rename``); a temporary file the block leaves unpublished is removed too."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_path(path)
    try:
        yield tmp
    finally:
        tmp.unlink(missing_ok=True)  # published: the name is gone already


@contextlib.contextmanager
def durable_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary name to write ``path`` under; published durably when the block
    ends, removed (and the error re-raised) if it raises."""
    with staged(path) as tmp:
        yield tmp
        durable_rename(tmp, path)


@contextlib.contextmanager
def durable_file(path: str | Path) -> Iterator[BinaryIO]:
    """Yield a binary handle whose bytes become ``path`` durably when the block ends."""
    with durable_path(path) as tmp, open(tmp, "wb") as handle:
        yield handle


def durable_write(path: str | Path, write: Callable[[BinaryIO], Any]) -> None:
    """``write(handle)`` the file's bytes, then publish them durably as ``path``."""
    with durable_file(path) as handle:
        write(handle)


def durable_write_bytes(path: str | Path, data: bytes) -> None:
    """Replace ``path`` durably with ``data``."""
    with durable_file(path) as handle:
        handle.write(data)


def durable_write_text(path: str | Path, text: str) -> None:
    """Replace ``path`` durably with ``text`` in UTF-8."""
    durable_write_bytes(path, text.encode("utf-8"))


def durable_write_parquet(table: pa.Table, path: str | Path, **options: Any) -> None:
    """Replace ``path`` durably with ``table`` (``options`` go to ``pq.write_table``)."""
    with durable_path(path) as tmp:
        pq.write_table(table, tmp, **options)
