"""History rows of a fetch batch: one per URL, in ``models.schemas.HISTORY_SCHEMA``.

Also the engine's two hooks: a ``RecordHasher`` (``record_hash`` here hashes the raw body;
the recrawl cycle passes the extracted record's hash, ``tasks.cycle.work.default_record_hasher``,
so noise such as a served-at timestamp stops looking like a change) and ``default_cost``
(bandwidth or API credits).
"""

from __future__ import annotations

import contextlib
import hashlib
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from datetime import datetime
from pathlib import Path

import pyarrow as pa
import pyarrow.compute as pc

from models.discovery.urls import InvalidURLError, normalize, url_id
from models.fetching.redaction import redact_url
from models.outcomes import BILLED
from models.schemas import HISTORY_SCHEMA
from tasks.fetch.columns import (
    bool_column,
    float_column,
    int_column,
    string_column,
    timestamp_column,
)
from tasks.store.durable import durable_write_parquet


@dataclass(frozen=True, slots=True)
class RecordDigest:
    """What a record hasher may return instead of a bare hash: the hash and the simhash."""

    record_hash: str
    simhash: int | None = None


#: ``hasher(body, content_type, url)``: ``url`` is the final (normalized) URL of the answer,
#: so per-URL extraction rules apply; returns the record hash or a ``RecordDigest``.
RecordHasher = Callable[
    [bytes, str | None, str], str | RecordDigest | Awaitable[str | RecordDigest]
]


def record_hash(body: bytes, content_type: str | None, url: str | None = None) -> str:
    """The raw-body hasher: BLAKE2b-128 of the body (no extraction; see the module docstring)."""
    del content_type, url  # every byte counts, whatever the type or page
    return hashlib.blake2b(body, digest_size=16).hexdigest()


@dataclass(frozen=True, slots=True)
class AttemptCost:
    """What a cost hook sees of one attempt."""

    mode: str  # direct | proxy | api
    outcome: str
    status: int | None
    wire_bytes: int


CostHook = Callable[[AttemptCost], float]


def default_cost(attempt: AttemptCost) -> float:
    """Budget units of one attempt: an API credit per answered page, else megabytes moved.

    The fake scraping API (like commercial ones) charges a credit for a target's 2xx or 304
    and nothing for failures; direct and proxy fetches cost their bandwidth.
    """
    if attempt.mode == "api":
        return 1.0 if attempt.outcome in BILLED else 0.0
    return attempt.wire_bytes / 1_000_000


@dataclass(slots=True)
class Row:
    url_id: int
    host: str
    fetched_at: datetime
    outcome: str
    status: int | None = None
    changed: bool | None = None
    record_hash: str | None = None
    etag: str | None = None
    last_modified: str | None = None
    bytes: int = 0
    latency_s: float | None = None
    cost: float = 0.0
    retries: int = 0
    reason: str | None = None
    simhash: int | None = None
    warc_file: str | None = None
    warc_offset: int | None = None


def rows_table(rows: list[Row], cycle_id: int) -> pa.Table:
    """The rows as an Arrow table in HISTORY_SCHEMA (columns the fetcher does not know: NULL).

    Built from buffers (``tasks.fetch.columns``): ``pa.array`` would import pandas on its
    first use in the process, which cost more CPU than a 20,000-URL batch's bookkeeping.
    """
    n = len(rows)
    columns = {
        "url_id": int_column([r.url_id for r in rows], pa.int64()),
        "host": string_column([r.host for r in rows]),
        "cycle_id": int_column([cycle_id] * n, pa.int64()),
        "fetched_at": timestamp_column(
            [r.fetched_at for r in rows], HISTORY_SCHEMA.field("fetched_at").type
        ),
        "status": int_column([r.status for r in rows], pa.int16()),
        "outcome": string_column([r.outcome for r in rows]),
        "changed": bool_column([r.changed for r in rows]),
        "record_hash": string_column([r.record_hash for r in rows]),
        "etag": string_column([r.etag for r in rows]),
        "last_modified": string_column([r.last_modified for r in rows]),
        "bytes": int_column([r.bytes for r in rows], pa.int64()),
        "latency_s": float_column([r.latency_s for r in rows]),
        "cost": float_column([r.cost for r in rows]),
        "retries": int_column([r.retries for r in rows], pa.int16()),
        "reason": string_column([r.reason for r in rows]),
        "simhash": int_column([r.simhash for r in rows], pa.int64()),
        "warc_file": string_column([r.warc_file for r in rows]),
        "warc_offset": int_column([r.warc_offset for r in rows], pa.int64()),
    }
    arrays = [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in HISTORY_SCHEMA]
    return pa.Table.from_arrays(arrays, schema=HISTORY_SCHEMA)


def with_urls(rows: pa.Table, urls: list[str]) -> pa.Table:
    """``rows`` with a ``url`` column first: each row's URL as the caller asked for it,
    normalized where it normalizes, secrets redacted (``models.fetching.redaction.redact_url``).

    The engine's rows name pages by ``url_id`` (of the normalized URL, else of the URL as
    given), as the history does; a person reading a fetch's output wants the URL.
    """
    ids: list[int] = []
    names: list[str] = []
    for raw in urls:
        text = raw.strip()
        with contextlib.suppress(InvalidURLError):  # the engine keyed it as given
            text = normalize(text)
        ids.append(url_id(text))
        try:
            names.append(redact_url(text))
        except ValueError:  # not even splittable: no authority, so no password to hide
            names.append(text)
    position = pc.index_in(rows["url_id"], value_set=pa.array(ids, pa.int64()))
    column = pc.take(pa.array(names, pa.string()), position)
    return rows.add_column(0, "url", column)


def write_rows_file(rows: pa.Table, path: Path) -> None:
    """Write a fetch's rows to ``path`` durably (``tasks.store.durable``: a failed write leaves no
    half file); ``OSError`` becomes a one-line ``ValueError`` naming the file."""
    try:
        durable_write_parquet(rows, path)
    except OSError as exc:
        raise ValueError(f"could not write the rows to {path}: {exc.strerror or exc}") from None
