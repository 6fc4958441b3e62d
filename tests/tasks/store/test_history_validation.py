"""``validate_history_rows`` conforms rows to HISTORY_SCHEMA exactly as casting every
column did (the table it returns is what a commit stages)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pyarrow as pa
import pytest

from models.schemas import HISTORY_SCHEMA
from tasks.store.history import HistoryInputError, validate_history_rows

T0 = datetime(2026, 3, 1, tzinfo=UTC)


def _cast_every_column(rows: pa.Table, cycle_id: int) -> pa.Table:
    """The conform as it was written before (every present column cast, the cycle's id
    from a list): the reference."""
    columns = []
    for field in HISTORY_SCHEMA:
        if field.name == "cycle_id":
            columns.append(pa.array([cycle_id] * rows.num_rows, pa.int64()))
        elif field.name in rows.column_names:
            columns.append(rows[field.name].cast(field.type))
        else:
            columns.append(pa.nulls(rows.num_rows, field.type))
    return pa.Table.from_arrays(columns, schema=HISTORY_SCHEMA.with_metadata(None))


def _rows(n: int) -> pa.Table:
    return pa.table(
        {
            "url_id": pa.array(range(1, n + 1), pa.int64()),
            "host": [f"h{i % 3}.example" for i in range(n)],
            "fetched_at": pa.array(
                [T0 + timedelta(seconds=i) for i in range(n)],
                HISTORY_SCHEMA.field("fetched_at").type,
            ),
            "outcome": ["ok", "not_modified", "error", "timeout"] * (n // 4),
            "bytes": pa.array([100 * i for i in range(n)], pa.int64()),
            "record_hash": [None if i % 2 else f"{i:032x}" for i in range(n)],
        }
    )


def test_rows_are_conformed_as_casting_every_column_conformed_them() -> None:
    typed = _rows(8)
    full = validate_history_rows(typed, 3, linked=False)  # every column, typed
    narrow = typed.set_column(0, "url_id", typed["url_id"].cast(pa.int32()))
    narrow = narrow.set_column(4, "bytes", narrow["bytes"].cast(pa.int32()))
    given_cycle = typed.append_column("cycle_id", pa.array([3] * 8, pa.int16()))
    chunked = pa.concat_tables([typed.slice(0, 3), typed.slice(3)])
    for rows in (typed, full, narrow, given_cycle, chunked):
        conformed = validate_history_rows(rows, 3, linked=False)
        assert conformed.schema.equals(HISTORY_SCHEMA.with_metadata(None), check_metadata=True)
        assert conformed.equals(_cast_every_column(rows, 3))


def test_an_unknown_outcome_is_named() -> None:
    rows = _rows(8)
    bad = rows.set_column(3, "outcome", pa.array(["ok"] * 7 + ["exploded"]))
    with pytest.raises(HistoryInputError, match="unknown outcome 'exploded'"):
        validate_history_rows(bad, 3, linked=False)
    with pytest.raises(HistoryInputError, match="cycle_id other than 3"):
        validate_history_rows(rows.append_column("cycle_id", pa.array([4] * 8)), 3, linked=False)
