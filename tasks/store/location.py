"""Where a store lives: one layer for its paths, so ``root`` can be a folder or a URL (issue 21).

``resolve(root)`` turns a ``--root`` (a path, ``file://``, or a URL of a filesystem fsspec
knows: ``memory://``, ``s3://`` with s3fs installed, ``gs://`` with gcsfs, ...) into a
``Location``: the fsspec filesystem, the root's path in it, and the few operations the store
needs, each relative to the root:

    loc.url(rel)              what DuckDB and pyarrow are given for a file (its path, or its URL)
    loc.exists(rel)           loc.info(rel)          loc.glob(pattern)
    loc.read_bytes(rel)       loc.open(rel)          (reading)
    loc.write_bytes(rel, b)   loc.write_parquet(table, rel)          (publishing one file)
    loc.remove(rel)
    loc.duckdb(con)           registers the filesystem with a DuckDB connection (none needed
                              for a local root), so ``read_parquet(loc.url(rel))`` reads it

A bad root (a scheme no filesystem serves, a filesystem whose package is missing, a root
that cannot be reached) raises ``StoreLocationError``, one line naming the root; the CLI
prints it and exits 2.

**Publishing.** On a local root a file is written by ``tasks.store.durable`` (temporary
name, fsync, rename, fsync of the folder). An object store has no rename: an object put
whole is visible whole or not at all, so a file is put under its final name, and a store
publishes by putting its manifest last; readers reach files only through the manifest, so
they see the state before the manifest or after it, never a part (the same contract as
the local rename). Old objects are deleted only after the manifest that no longer names
them is in place. What a local root gives and an object store does not: ``flock`` (one
committer at a time is the caller's, e.g. one Prefect flow per store) and a manifest
replaced atomically *in place* (S3 and GCS overwrite an object atomically; fsspec's
``memory://`` too).
"""

from __future__ import annotations

import io
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, BinaryIO

import duckdb
import fsspec  # untyped: pyproject tells mypy to ignore its missing stubs
import pyarrow as pa
import pyarrow.parquet as pq

from tasks.store.durable import durable_write_bytes, durable_write_parquet

__all__ = ["Location", "StoreLocationError", "open_url", "resolve"]

#: Schemes that name the local filesystem.
LOCAL = ("file", "local")
#: A URL that went through ``pathlib.Path`` (an argparse ``type=Path`` option), which folds
#: ``s3://bucket`` into ``s3:/bucket``: read as the URL it was.
_FOLDED_URL = re.compile(r"^([A-Za-z][A-Za-z0-9+.-]+):/(?!/)")


class StoreLocationError(ValueError):
    """``--root`` names no store location this machine can reach (one line; exit 2)."""


@dataclass(frozen=True)
class Location:
    """A store's root: a filesystem and the root's path in it (see the module docstring)."""

    root: str
    protocol: str
    fs: Any  # fsspec.AbstractFileSystem (fsspec has no type hints)
    base: str

    @property
    def local(self) -> bool:
        return self.protocol in LOCAL

    def path(self, rel: str = "") -> str:
        """The filesystem's own path of ``rel`` (no scheme)."""
        rel = rel.strip("/")
        return f"{self.base.rstrip('/')}/{rel}" if rel else self.base

    def url(self, rel: str = "") -> str:
        """What to hand DuckDB or pyarrow for ``rel``: a local path, or ``scheme://path``."""
        path = self.path(rel)
        return path if self.local else f"{self.protocol}://{path.lstrip('/')}"

    def local_path(self, rel: str = "") -> Path:
        """``rel`` as a ``Path`` (a local root only: locks, spill folders, renames)."""
        if not self.local:
            raise StoreLocationError(
                f"{self.root}: this needs a local folder (it renames files and locks them); "
                "an object store is read through the manifest, not written in place"
            )
        return Path(self.path(rel))

    # ---------------------------------------------------------------- reading

    def exists(self, rel: str = "") -> bool:
        return bool(self.fs.exists(self.path(rel)))

    def info(self, rel: str) -> dict[str, Any]:
        """Size and the like (``fsspec``'s ``info``); FileNotFoundError if absent."""
        found: dict[str, Any] = self.fs.info(self.path(rel))
        return found

    def glob(self, pattern: str) -> list[str]:
        """Paths relative to the root matching ``pattern`` (itself relative), sorted."""
        base = self.path().rstrip("/")
        found = self.fs.glob(self.path(pattern))
        return sorted(str(p)[len(base.lstrip("/")) :].lstrip("/") for p in _stripped(found))

    def open(self, rel: str) -> BinaryIO:
        handle: BinaryIO = self.fs.open(self.path(rel), "rb")
        return handle

    def read_bytes(self, rel: str) -> bytes:
        data: bytes = self.fs.cat_file(self.path(rel))
        return data

    def read_text(self, rel: str) -> str:
        return self.read_bytes(rel).decode("utf-8")

    def duckdb(self, con: duckdb.DuckDBPyConnection) -> duckdb.DuckDBPyConnection:
        """Let ``con`` read this root's URLs (a local root needs nothing)."""
        if not self.local and not con.filesystem_is_registered(self.protocol):
            con.register_filesystem(self.fs)
        return con

    # ---------------------------------------------------------------- writing

    def write_bytes(self, rel: str, data: bytes) -> None:
        """Publish one file: durably renamed into place locally, put whole elsewhere."""
        if self.local:
            durable_write_bytes(self.path(rel), data)
            return
        self.fs.makedirs(self.fs._parent(self.path(rel)), exist_ok=True)
        self.fs.pipe_file(self.path(rel), data)

    def write_text(self, rel: str, text: str) -> None:
        self.write_bytes(rel, text.encode("utf-8"))

    def write_parquet(self, table: pa.Table, rel: str, **options: Any) -> None:
        """Publish one Parquet file (``options`` go to ``pq.write_table``)."""
        if self.local:
            durable_write_parquet(table, self.path(rel), **options)
            return
        buffer = io.BytesIO()
        pq.write_table(table, buffer, **options)
        self.write_bytes(rel, buffer.getvalue())

    def remove(self, rel: str) -> None:
        """Delete a file or a folder with what it holds; absent is fine."""
        path = self.path(rel)
        if self.fs.exists(path):
            self.fs.rm(path, recursive=True)


def open_url(url: str) -> BinaryIO:
    """Open a file a ``Location.url`` named (a URL; a local path is opened by the caller)."""
    try:
        handle: BinaryIO = fsspec.open(url, "rb").open()
    except ValueError as exc:
        raise StoreLocationError(f"{url}: {exc}") from None
    return handle


def _stripped(paths: list[Any]) -> Iterator[str]:
    for p in paths:
        yield str(p).lstrip("/")


def resolve(root: str | Path, *, must_exist: bool = False) -> Location:
    """The ``Location`` of a ``--root``; ``StoreLocationError`` (one line) if it has a scheme
    no filesystem here serves or cannot be reached (``must_exist``: absent is an error too).
    """
    text = _FOLDED_URL.sub(r"\1://", str(root))
    protocol = text.split("://", 1)[0].lower() if "://" in text else "file"
    try:
        cls = fsspec.get_filesystem_class(protocol)
    except ValueError:
        known = ", ".join(sorted(p for p in fsspec.available_protocols() if p.isalpha())[:12])
        raise StoreLocationError(
            f"--root {text}: unknown storage scheme {protocol!r} (a folder, file://, or one "
            f"of fsspec's: {known}, ...)"
        ) from None
    except ImportError as exc:
        raise StoreLocationError(
            f"--root {text}: the {protocol}:// filesystem is not installed here ({exc})"
        ) from None
    try:
        fs, base = fsspec.core.url_to_fs(text)
        if protocol in LOCAL:
            base = str(Path(base))
        found = fs.exists(base)
    except Exception as exc:
        raise StoreLocationError(f"--root {text} cannot be reached: {exc}") from None
    if must_exist and not found:
        raise StoreLocationError(f"--root {text}: no such store location")
    del cls
    return Location(text, "file" if protocol in LOCAL else protocol, fs, base)
