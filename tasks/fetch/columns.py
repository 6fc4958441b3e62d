"""Arrow columns from Python values, built from buffers (for the fetch engine's rows).

``pa.array`` over a Python list (or a numpy array) asks pyarrow's pandas shim whether the
values are pandas objects, and the first such call imports pandas: 1.5-1.9 s of CPU in a
process that has not imported it yet (the fetch engine's alone: ~0.08 ms a page of a
20,000-URL batch). These helpers build the same arrays from numpy buffers
(``pa.Array.from_buffers``), which never touches pandas. ``None`` is null, as in
``pa.array``; an integer out of the column's range raises ``OverflowError``.
"""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime, timedelta

import numpy as np
import pyarrow as pa

_EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
_EPOCH_NAIVE = datetime(1970, 1, 1)
_MICROSECOND = timedelta(microseconds=1)
#: numpy type and range of each integer column type.
_INT_TYPES: dict[pa.DataType, tuple[type[np.signedinteger], int, int]] = {
    pa.int16(): (np.int16, -(2**15), 2**15 - 1),
    pa.int32(): (np.int32, -(2**31), 2**31 - 1),
    pa.int64(): (np.int64, -(2**63), 2**63 - 1),
}
_INT32_MAX = 2**31 - 1


def _validity(values: Sequence[object]) -> tuple[pa.Buffer | None, np.ndarray | None]:
    """The null bitmap of ``values`` (None when nothing is null) and the validity mask."""
    if None not in values:  # a scan in C; most columns of a batch have no null
        return None, None
    valid = np.fromiter((v is not None for v in values), dtype=np.bool_, count=len(values))
    return pa.py_buffer(np.packbits(valid, bitorder="little")), valid


def int_column(values: Sequence[int | None], arrow_type: pa.DataType) -> pa.Array:
    """An integer column (int16, int32 or int64)."""
    bitmap, _ = _validity(values)
    if bitmap is None and isinstance(values, list):  # no null: numpy converts the list in C
        wide = np.array(values, dtype=np.int64)
    else:
        filled = (0 if v is None else v for v in values)
        wide = np.fromiter(filled, dtype=np.int64, count=len(values))
    dtype, low, high = _INT_TYPES[arrow_type]
    if dtype is not np.int64 and wide.size and (wide.min() < low or wide.max() > high):
        raise OverflowError(f"value out of range for {arrow_type}")
    data = wide.astype(dtype, copy=False)
    return pa.Array.from_buffers(arrow_type, len(values), [bitmap, pa.py_buffer(data)])


def float_column(values: Sequence[float | None]) -> pa.Array:
    """A float64 column."""
    bitmap, _ = _validity(values)
    if bitmap is None and isinstance(values, list):
        data = np.array(values, dtype=np.float64)
    else:
        filled = (0.0 if v is None else v for v in values)
        data = np.fromiter(filled, dtype=np.float64, count=len(values))
    return pa.Array.from_buffers(pa.float64(), len(values), [bitmap, pa.py_buffer(data)])


def bool_column(values: Sequence[bool | None]) -> pa.Array:
    """A boolean column."""
    bitmap, _ = _validity(values)
    bits = np.fromiter((v is True for v in values), dtype=np.bool_, count=len(values))
    data = pa.py_buffer(np.packbits(bits, bitorder="little"))
    return pa.Array.from_buffers(pa.bool_(), len(values), [bitmap, data])


def string_column(values: Sequence[str | None]) -> pa.Array:
    """A UTF-8 string column."""
    encoded = [b"" if v is None else v.encode("utf-8") for v in values]
    lengths = np.fromiter(map(len, encoded), dtype=np.int64, count=len(encoded))
    offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    if offsets[-1] > _INT32_MAX:  # more than a string column holds in one chunk
        return pa.array(list(values), pa.string())
    bitmap, _ = _validity(values)
    buffers = [bitmap, pa.py_buffer(offsets.astype(np.int32)), pa.py_buffer(b"".join(encoded))]
    return pa.Array.from_buffers(pa.string(), len(values), buffers)


def timestamp_column(values: Sequence[datetime | None], arrow_type: pa.DataType) -> pa.Array:
    """A timestamp[us] column: aware datetimes as UTC instants, naive ones as UTC wall time."""
    assert pa.types.is_timestamp(arrow_type) and arrow_type.unit == "us"
    bitmap, _ = _validity(values)
    micros = np.fromiter((_micros(v) for v in values), dtype=np.int64, count=len(values))
    return pa.Array.from_buffers(arrow_type, len(values), [bitmap, pa.py_buffer(micros)])


def _micros(value: datetime | None) -> int:
    if value is None:
        return 0
    epoch = _EPOCH_NAIVE if value.tzinfo is None else _EPOCH
    return (value - epoch) // _MICROSECOND
