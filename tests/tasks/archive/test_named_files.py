"""What a part names at commit (``tasks.archive.cycle._named_files``): the WARC files in its
rows' ``warc_file`` and those its batch run listed in its metadata, as the dataset scan
that read them before did."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from tasks.archive.cycle import WARC_FILES_KEY, _named_files, with_archived_files


def _dataset_scan(part: str) -> set[str]:
    """The names as read before: the schema, then a dataset scan of the column."""
    schema = pq.read_schema(part)
    named: set[str] = set()
    if "warc_file" in schema.names:
        column = pq.read_table(part, columns=["warc_file"])["warc_file"]
        named.update(pc.unique(column.drop_null()).to_pylist())
    listed = (schema.metadata or {}).get(WARC_FILES_KEY)
    if listed:
        named.update(json.loads(listed))
    return named


def test_rows_and_the_run_list_are_named_as_the_dataset_scan_names_them(tmp_path: Path) -> None:
    rows = pa.table(
        {
            "url_id": [1, 2, 3, 4],
            "warc_file": ["warc/a.warc.gz", None, "warc/b.warc.gz", "warc/a.warc.gz"],
        }
    )
    listed = with_archived_files(rows, ["warc/b.warc.gz", "warc/only-listed.warc.gz"])
    cases = {
        "both": listed,
        "rows only": rows,
        "all null": rows.set_column(1, "warc_file", pa.nulls(4, pa.string())),
        "no column": with_archived_files(rows.select(["url_id"]), ["warc/c.warc.gz"]),
    }
    expected = {
        "both": {"warc/a.warc.gz", "warc/b.warc.gz", "warc/only-listed.warc.gz"},
        "rows only": {"warc/a.warc.gz", "warc/b.warc.gz"},
        "all null": set(),
        "no column": {"warc/c.warc.gz"},
    }
    for name, table in cases.items():
        path = str(tmp_path / f"{name}.parquet")
        pq.write_table(table, path, row_group_size=2)  # two row groups
        assert _named_files(path) == expected[name], name
        assert _named_files(path) == _dataset_scan(path), name
