"""WARC bookkeeping of a recrawl cycle: previous captures in, orphaned files out.

* ``previous_captures``: the batch's Parquet carries each page's last capture from an
  earlier cycle (``warc_file``/``warc_offset``, joined from the history by the split), and
  the batch's ``WarcWriter`` gets a ``tasks.archive.read.PreviousCaptures`` lookup over them, so
  an unchanged payload is written as a revisit record referring to that capture.
* ``with_archived_files``: a part lists, in its Parquet key-value metadata, the WARC files
  its batch run published, so the list and the rows are published by one rename.
* ``CycleArchive``: at commit, every batch WARC file of the cycle that no part lists and no
  row names was written by a run that crashed or failed (its batch was run again, or
  recorded as errors); it is deleted before the history is published, so nothing unnamed
  outlives the cycle. Files that only the published version of a cycle being replaced
  names are kept until the new version is published, then deleted.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

import duckdb
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.archive.read import PreviousCaptures
from tasks.archive.warc import remove_orphaned_files
from tasks.store.history import HistoryStore, connect

log = logging.getLogger(__name__)

#: Key of a part's Parquet metadata listing the WARC files its batch run published.
WARC_FILES_KEY = b"recrawler.warc_files"


def previous_captures(root: str | Path, batch: pa.Table) -> PreviousCaptures | None:
    """Each page's last capture from the batch's ``warc_file``/``warc_offset`` columns
    (None when there is none, or the split predates the columns)."""
    if "warc_file" not in batch.column_names or "warc_offset" not in batch.column_names:
        return None
    rows = batch.select(["url", "warc_file", "warc_offset"])
    rows = rows.filter(pc.and_(pc.is_valid(rows["warc_file"]), pc.is_valid(rows["warc_offset"])))
    locations = {r["url"]: (r["warc_file"], int(r["warc_offset"])) for r in rows.to_pylist()}
    return PreviousCaptures(root, locations) if locations else None


def with_archived_files(rows: pa.Table, published: list[str]) -> pa.Table:
    """The part's rows with the WARC files of its run in the schema metadata."""
    return rows.replace_schema_metadata(
        {**(rows.schema.metadata or {}), WARC_FILES_KEY: json.dumps(published)}
    )


class CycleArchive:
    """Which WARC files of a cycle stay at commit (see the module docstring)."""

    def __init__(
        self, root: str | Path, cycle_id: int, parts: list[str], *, named: set[str] | None = None
    ) -> None:
        """Read what the parts name, one part at a time (only their ``warc_file`` column);
        ``named``: what the caller already found in them (:func:`files_named` of each part
        it read), so the parts are not opened again."""
        self.root = root
        self.cycle_id = int(cycle_id)
        self.keep: set[str] = set(named or ())
        if named is None:
            for part in parts:
                self.keep.update(_named_files(part))
        self.replaced = _published_files(HistoryStore(root), self.cycle_id) - self.keep

    def remove_orphans(self) -> list[str]:
        """Before the commit: delete files neither the parts nor the published cycle name."""
        return self._remove(self.keep | self.replaced)

    def remove_replaced(self) -> list[str]:
        """After the commit: delete files only the replaced version of the cycle named."""
        return self._remove(self.keep) if self.replaced else []

    def _remove(self, keep: set[str]) -> list[str]:
        removed = remove_orphaned_files(self.root, self.cycle_id, keep)
        if removed:
            log.warning(
                "cycle %s: deleted %d WARC files no committed row or batch run names",
                self.cycle_id,
                len(removed),
            )
        return removed


def files_named(rows: pa.Table, metadata: dict[bytes, bytes] | None) -> set[str]:
    """The WARC files a part names: in its rows (``warc_file``) and in the list of its
    batch run (``metadata``, the part's schema metadata, :data:`WARC_FILES_KEY`)."""
    named: set[str] = set()
    if "warc_file" in rows.column_names:
        named.update(pc.unique(rows["warc_file"].drop_null()).to_pylist())
    listed = (metadata or {}).get(WARC_FILES_KEY)
    if listed:
        named.update(json.loads(listed))
    return named


def _named_files(part: str) -> set[str]:
    """:func:`files_named` of a part's file, opened once (``ParquetFile``: its footer gives
    the schema and the list) with only its ``warc_file`` column read."""
    with pq.ParquetFile(part) as file:
        schema = file.schema_arrow
        columns = ["warc_file"] if "warc_file" in schema.names else []
        rows = file.read(columns=columns, use_threads=False)
    return files_named(rows, schema.metadata)


def _published_files(store: HistoryStore, cycle_id: int) -> set[str]:
    if cycle_id not in store.cycles():
        return set()
    con = connect()
    try:
        rel = con.read_parquet(store.files([cycle_id]), union_by_name=True)
        if "warc_file" not in rel.columns:
            return set()
        found = rel.filter("warc_file IS NOT NULL").aggregate("warc_file", "warc_file")
        return {f for (f,) in found.fetchall()}
    except duckdb.Error as exc:
        log.warning("cycle %s: WARC files of its published version unknown: %s", cycle_id, exc)
        return set()
