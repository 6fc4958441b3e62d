"""What the store keeps for listings and JSON endpoints, under ``<root>/listings/``.

- ``declared.parquet``: the listing pages (normalized URL, url id, host as the catalog names
  it), declared by ``declare_listings``; they are fetched by the listing pass, not planned as
  catalog pages.
- ``endpoints.json``: per host, how a page's JSON endpoint is named (``EndpointRoute``: a
  regular expression over the page's path and the endpoint's path template), declared by
  ``declare_endpoints``; such hosts' pages are fetched through their endpoint.
- ``summaries.parquet``: per item, the summary hash its listing showed when it was last read
  (``item_url_id``, ``listing_url_id``, ``summary_hash``, ``cycle_id``: the cycle of that
  read) and ``pending``: a listing showed the item changed since its last observation and no
  fetch has observed it since (known stale); replaced after each commit
  (``tasks.listings.cycle.apply_listing_summaries``). A file written before ``pending``
  existed reads with every item not pending (its summaries were kept only where the item's
  state was known).

Every file is written durably and replaced whole (``tasks.store.durable``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq

from models.discovery.urls import InvalidURLError, normalize, url_host, url_id
from tasks.store.durable import durable_write_parquet, durable_write_text

FOLDER = "listings"
DECLARED_SCHEMA = pa.schema(
    [
        pa.field("url", pa.string(), nullable=False),
        pa.field("url_id", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
    ]
)
SUMMARIES_SCHEMA = pa.schema(
    [
        pa.field("item_url_id", pa.int64(), nullable=False),
        pa.field("listing_url_id", pa.int64(), nullable=False),
        pa.field("summary_hash", pa.int64(), nullable=False),
        pa.field("cycle_id", pa.int64(), nullable=False),
        pa.field("pending", pa.bool_(), nullable=False),
    ]
)


class ListingInputError(ValueError):
    """A declaration that cannot be used; the message names what is wrong."""


def folder(root: str | Path) -> Path:
    return Path(root) / FOLDER


def declare_listings(root: str | Path, urls: Iterable[str]) -> int:
    """Add listing pages (any URLs; normalized here); returns how many are declared."""
    rows: dict[int, tuple[str, str]] = {}
    for raw in urls:
        try:
            url = normalize(raw)
        except InvalidURLError as exc:
            raise ListingInputError(f"not a listing URL: {raw!r} ({exc})") from None
        rows[url_id(url)] = (url, url_host(url))
    known = read_declared(root)
    for uid, url, host in zip(
        known["url_id"].to_pylist(),
        known["url"].to_pylist(),
        known["host"].to_pylist(),
        strict=True,
    ):
        rows.setdefault(uid, (url, host))
    table = pa.table(
        {
            "url": [u for u, _ in rows.values()],
            "url_id": list(rows),
            "host": [h for _, h in rows.values()],
        },
        schema=DECLARED_SCHEMA,
    )
    durable_write_parquet(table, folder(root) / "declared.parquet")
    return int(table.num_rows)


def read_declared(root: str | Path) -> pa.Table:
    path = folder(root) / "declared.parquet"
    return pq.read_table(path, schema=DECLARED_SCHEMA) if path.exists() else _empty(DECLARED_SCHEMA)


@dataclass(frozen=True)
class EndpointRoute:
    """How a host's page path names its JSON endpoint: ``/p/(\\d+)`` -> ``/api/item/{0}.json``."""

    page_regex: str
    endpoint: str

    def __post_init__(self) -> None:
        try:
            pattern = re.compile(self.page_regex)
        except re.error as exc:
            raise ListingInputError(f"invalid page_regex {self.page_regex!r}: {exc}") from None
        try:
            self.endpoint.format(*[""] * pattern.groups)
        except (IndexError, KeyError, ValueError) as exc:
            raise ListingInputError(
                f"endpoint template {self.endpoint!r} does not fit {self.page_regex!r}: {exc}"
            ) from None

    def endpoint_path(self, path: str) -> str | None:
        """The endpoint path of a page path (None: the page has no endpoint)."""
        found = re.fullmatch(self.page_regex, path)
        return None if found is None else self.endpoint.format(*found.groups())


def declare_endpoints(root: str | Path, routes: Mapping[str, EndpointRoute]) -> None:
    """Declare, per host (as the catalog names it), how its pages' endpoints are named."""
    known = read_endpoints(root)
    known.update(routes)
    text = json.dumps({h: asdict(r) for h, r in sorted(known.items())}, indent=1)
    durable_write_text(folder(root) / "endpoints.json", text + "\n")


def read_endpoints(root: str | Path) -> dict[str, EndpointRoute]:
    path = folder(root) / "endpoints.json"
    if not path.exists():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        return {str(h): EndpointRoute(**r) for h, r in data.items()}
    except (ValueError, TypeError) as exc:
        raise ListingInputError(f"{path} is not a valid endpoint declaration: {exc}") from None


def read_summaries(root: str | Path) -> pa.Table:
    path = folder(root) / "summaries.parquet"
    if not path.exists():
        return _empty(SUMMARIES_SCHEMA)
    table = pq.read_table(path)
    if "pending" not in table.column_names:  # written before items were kept pending
        table = table.append_column("pending", pa.array([False] * table.num_rows, pa.bool_()))
    return table.select(SUMMARIES_SCHEMA.names).cast(SUMMARIES_SCHEMA)


def write_summaries(root: str | Path, table: pa.Table) -> None:
    durable_write_parquet(table.cast(SUMMARIES_SCHEMA), folder(root) / "summaries.parquet")


def _empty(schema: pa.Schema) -> pa.Table:
    return schema.empty_table()
