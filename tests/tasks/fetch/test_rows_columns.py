"""The engine's rows table is built from buffers: same table as pa.array's, without pandas."""

import subprocess
import sys
from datetime import UTC, datetime, timedelta, timezone

import pyarrow as pa
import pytest

from models.schemas import HISTORY_SCHEMA
from tasks.fetch.columns import int_column, string_column, timestamp_column
from tasks.fetch.rows import Row, rows_table

AT = datetime(2026, 12, 2, 22, 30, 1, 123456, tzinfo=UTC)


def _reference(rows: list[Row], cycle_id: int) -> pa.Table:
    """The table as pa.array builds it (the construction rows_table replaced)."""
    n = len(rows)
    names = [f.name for f in HISTORY_SCHEMA]
    known = set(Row.__slots__) | {"cycle_id"}
    arrays = []
    for field in HISTORY_SCHEMA:
        if field.name == "cycle_id":
            arrays.append(pa.array([cycle_id] * n, field.type))
        elif field.name in known:
            arrays.append(pa.array([getattr(r, field.name) for r in rows], field.type))
        else:
            arrays.append(pa.nulls(n, field.type))
    assert names == [f.name for f in HISTORY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=HISTORY_SCHEMA)


def _rows() -> list[Row]:
    plus_two = timezone(timedelta(hours=2))
    return [
        Row(
            -(2**63),
            "a.test",
            AT,
            "ok",
            status=200,
            record_hash="ab" * 16,
            bytes=20_000,
            latency_s=0.0123,
            cost=0.02,
            simhash=2**63 - 1,
            warc_file="x.warc.gz",
            warc_offset=0,
            etag='"e-1"',
            last_modified="Wed, 02 Dec 2026 22:00:00 GMT",
        ),
        Row(
            2**63 - 1,
            "b.test:8080",
            AT.astimezone(plus_two),
            "not_modified",
            status=304,
            changed=False,
            retries=2,
            reason="héllo; ünïcode ✓",
        ),
        Row(
            0,
            "",
            datetime(1969, 12, 31, 23, 59, 59, 999999, tzinfo=UTC),
            "shed",
            reason="admission rejected",
            changed=True,
            simhash=-1,
        ),
        Row(7, "c.test", AT + timedelta(microseconds=1), "error", status=None, reason=""),
    ]


@pytest.mark.parametrize("count", [0, 1, 4])
def test_rows_table_equals_the_pa_array_construction(count):
    rows = _rows()[:count]
    built = rows_table(rows, cycle_id=12)
    built.validate(full=True)
    assert built.schema == HISTORY_SCHEMA
    assert built.equals(_reference(rows, 12))
    assert built.to_pylist() == _reference(rows, 12).to_pylist()


def test_all_null_and_no_null_columns():
    assert string_column([None, None]).to_pylist() == [None, None]
    assert string_column(["x", "yz"]).null_count == 0
    assert int_column([None, 3], pa.int16()).to_pylist() == [None, 3]


def test_out_of_range_integers_raise_like_pa_array():
    with pytest.raises(OverflowError):
        int_column([2**15], pa.int16())
    with pytest.raises(OverflowError):
        int_column([2**63], pa.int64())
    with pytest.raises(OverflowError):
        pa.array([2**63], pa.int64())


def test_naive_timestamps_are_read_as_utc_as_pa_array_does():
    naive = [datetime(2026, 1, 2, 3, 4, 5, 6)]
    kind = pa.timestamp("us", tz="UTC")
    assert timestamp_column(naive, kind).equals(pa.array(naive, kind))


def test_building_rows_imports_no_pandas():
    code = (
        "import sys\n"
        "from datetime import UTC, datetime\n"
        "from tasks.fetch.rows import Row, rows_table\n"
        "rows_table([Row(1, 'h', datetime.now(UTC), 'ok', status=200, reason='r')], 0)\n"
        "print('pandas' in sys.modules)\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "False"
