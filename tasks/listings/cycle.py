"""The listing pass of a recrawl cycle: listings read first, then only the items they show changed.

Runs after the plan is split and before the host batches are fetched
(``flows.recrawl``), in the cycle's work folder (``tasks.cycle.work``):

1. The declared listing pages (``tasks.listings.store``) are fetched as one batch of their
   own (``listings-00000``: robots.txt, pacing, conditional requests as any batch); each
   answered listing is parsed into its items' summaries (``models.discovery.listings``), and
   its record is the hash of those summaries, so a listing "changed" when any listed item's
   summary did. A 304 says every listed item's summary is the one kept.
2. The summaries seen are compared with the ones kept (``compare_summaries``: numpy over the
   url ids, no loop over items), for the items of the catalog:

   - unchanged: recorded as an observation of the item without fetching it
     (``listings-unchanged``: outcome ``listing_unchanged``, reason ``listing: summary unchanged``,
     cost 0, the validators and record hash of its last observation carried), and taken out
     of the planner's batches if it was planned: it is not fetched just to confirm;
   - changed, or never summarized before: fetched in this cycle (``listings-items``), and
     taken out of the planner's batches (fetched once), while it fits the budget (in the
     fetch order, ``models.planning.listing_reads.stale_fetch_order``).

   An item a listing showed changed (or new) and that no fetch observed in the cycle stays
   known stale (``pending`` in the kept summaries) until one does: in the next cycles it is
   wanted as a changed item whether or not its listing is read, and a read that shows it
   unchanged since (a 304 included: the listing is as it was at its last read) does not
   record it unchanged. The backtest's ``ListingPlannerPolicy.pending`` is the same memory.

3. Pages of hosts with a declared JSON endpoint (``EndpointRoute``) that the planner planned,
   and such items a listing marked, are fetched through their endpoint instead of the page
   (in ``listings-items``); their record is ``models.discovery.endpoints.record_of`` (the
   page's fields from the JSON), and their rows are the page's (url id of the page).

The pass's batches join the cycle's index only once all their parts are written, so the
commit publishes them with the rest; a crash before leaves the index as the split wrote it,
and the pass runs again. After the commit, ``apply_listing_summaries`` keeps every summary
the cycle's listings showed (so the kept summaries are what each listing showed at its last
read, which a 304 repeats) and each item's ``pending``: shown changed or new and not
observed in the cycle (a failed fetch, one the budget left out), or pending before and
still not observed.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
from collections.abc import Callable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from urllib.parse import urlsplit, urlunsplit

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.content.extract_rules import ExtractionRules
from models.discovery.endpoints import PRODUCT_FIELDS, EndpointFields, record_of
from models.discovery.listings import ListingItems, ListingRule, compare_summaries, parse_listing
from models.discovery.urls import InvalidURLError, normalize, url_id
from models.outcomes import OBSERVED, sql_list
from models.planning.cost import CostModel
from models.planning.listing_reads import (
    ListedItems,
    listed_items,
    listings_to_read,
    stale_fetch_order,
)
from models.schemas import HISTORY_SCHEMA
from tasks.cycle.planning import plan_path
from tasks.cycle.work import (
    INDEX,
    BatchFailedError,
    BatchSpec,
    default_record_hasher,
    read_batches,
    read_part,
    run_host_batch,
    work_dir,
)
from tasks.fetch.rows import RecordDigest
from tasks.fetch.settings import FetchSettings
from tasks.listings.store import (
    EndpointRoute,
    read_declared,
    read_endpoints,
    read_summaries,
    write_summaries,
)
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet, durable_write_text
from tasks.store.history import HistoryStore, connect

log = logging.getLogger(__name__)

LISTINGS_BATCH = "listings-00000"
ITEMS_BATCH = "listings-items"
UNCHANGED_BATCH = "listings-unchanged"
UNCHANGED_REASON = "listing: summary unchanged"
#: The default listing threshold (expected changed items per read): at most 25% overhead.
LISTING_THRESHOLD = 4.0
_NO_RATES = pa.table({"url_id": pa.array([], pa.int64()), "rate": pa.array([], pa.float64())})
_SEEN = "seen.parquet"
_DONE = "done.json"


@dataclass(frozen=True)
class ListingPass:
    """What one cycle's listing pass did (counts; nothing else crosses tasks)."""

    listings: int = 0  # listing pages due and requested (of the declared ones)
    listings_read: int = 0  # of them answered with a body or a 304
    items_seen: int = 0  # catalog items the listings showed
    unchanged: int = 0  # recorded unchanged, not fetched
    changed: int = 0  # summary changed since it was kept, or known stale before: wanted
    pending: int = 0  # of them, known stale from an earlier cycle's read (kept pending)
    new: int = 0  # no summary kept before: fetched
    through_endpoint: int = 0  # items fetched through their JSON endpoint
    taken_from_plan: int = 0  # planned pages the pass fetched or recorded instead
    cost: float = 0.0  # what the pass's fetches cost (listings and items)
    hosts: tuple[str, ...] = ()


def pass_hosts(root: str | Path) -> list[str]:
    """The hosts the pass may contact (listings' and endpoint hosts'): their slots."""
    hosts = set(read_declared(root)["host"].to_pylist()) | set(read_endpoints(root))
    return sorted(hosts)


class ListingCollector:
    """A record hasher for listing pages: keeps each listing's items, hashes their summaries."""

    def __init__(self, rule: ListingRule | None = None) -> None:
        self.rule = rule or ListingRule()
        self.found: dict[str, ListingItems] = {}

    def __call__(self, body: bytes, content_type: str | None, url: str) -> RecordDigest:
        items = parse_listing(body, content_type, url, self.rule)
        self.found[url] = items
        pairs = np.stack([items.url_ids, items.summary_hashes], axis=1)
        pairs = pairs[np.lexsort((pairs[:, 1], pairs[:, 0]))] if len(items) else pairs
        return RecordDigest(hashlib.blake2b(pairs.tobytes(), digest_size=16).hexdigest())


def endpoint_hasher(
    endpoints: set[str], fields: EndpointFields, rules: ExtractionRules | None = None
) -> Callable[[bytes, str | None, str], RecordDigest]:
    """Endpoint URLs hashed as their page's record (``record_of``); any other page as usual."""
    default = default_record_hasher(rules) if rules is not None else default_record_hasher()

    def hasher(body: bytes, content_type: str | None, url: str) -> RecordDigest:
        if url in endpoints:
            record = record_of(body, content_type or "", url, fields)
            return RecordDigest(record.record_hash, record.simhash)
        digest = default(body, content_type, url)
        return digest if isinstance(digest, RecordDigest) else RecordDigest(str(digest))

    return hasher


def run_listing_pass(
    root: str | Path,
    cycle_id: int,
    *,
    settings: FetchSettings | None = None,
    clock: Callable[[], datetime] | None = None,
    cost_model: CostModel | str = "credits",
    fields: EndpointFields = PRODUCT_FIELDS,
    budget: float | None = None,
    threshold: float = LISTING_THRESHOLD,
) -> ListingPass:
    """The cycle's listing pass (module docstring); a no-op without declarations.

    ``budget`` (the cycle's, in cost units): the pass's listings and items come out of it
    (items in the fetch order, at the plan's cost of a visit), and the planner's
    batches keep their highest-priority pages within what is left; None: no cap.
    ``threshold``: a listing is read when its items' expected changes since their last
    observation (the planner's rate estimates; known-stale items left out) reach this many
    per credit of the read (what a read adds to each change it finds is then at most
    1 / threshold of a read) and, with a budget, when the read fits with the fetches the
    fetch order would make of what it shows, the known-stale items ranked above them
    included (``models.planning.listing_reads``, the backtest's rule); a listing whose items
    have no summary kept yet is always read first if it fits. 0
    without a budget: every declared listing, every cycle.
    """
    folder = work_dir(root, cycle_id)
    mine = folder / "listings"
    if (mine / _DONE).exists():
        return _read_done(mine / _DONE)
    declared = read_declared(root)
    routes = read_endpoints(root)
    if declared.num_rows == 0 and not routes:
        return ListingPass()
    stock = [s for s in read_batches(root, cycle_id) if not s.name.startswith("listings-")]
    _clean(folder)
    mine.mkdir(parents=True, exist_ok=True)
    con = connect()
    try:
        con.register("catalog", CatalogStore(root).relation(con))
        con.register("history", HistoryStore(root).relation(con))
        con.register("plan", con.read_parquet(str(plan_path(root, cycle_id))))
        con.register("declared_all", declared)
        observed: dict[str, object] = {"observed": sql_list(OBSERVED)}
        cost = 0.0
        specs: list[BatchSpec] = []

        # 1. the listings
        collector = ListingCollector()
        listing_rows = HISTORY_SCHEMA.empty_table()
        kept = read_summaries(root)
        con.register("kept", kept)
        con.register("rates", _rates(root) if kept.num_rows else _NO_RATES)
        now = (clock or _utc_now)()
        due = con.sql(_DUE_LISTINGS).to_arrow_table()
        listed = con.sql(_LISTED, params=observed | {"now": now}).to_arrow_table()
        read = listings_to_read(
            # a listing costs what one of its host's pages costs
            np.nan_to_num(due["item_cost"].to_numpy(zero_copy_only=False), nan=1.0),
            _listed_items(listed, due["url_id"].to_numpy()),
            budget=float("inf") if budget is None else budget,
            threshold=float(threshold),
        )
        due = due.filter(pa.array(read)).select(["url", "url_id", "host"])
        listings_due = int(due.num_rows)
        if due.num_rows:
            con.register("declared", due)
            _last_observations(con, con.sql("SELECT url_id FROM declared"), observed)
            requests = con.sql(_LISTING_REQUESTS).to_arrow_table()
            listing_rows = _fetch(
                root, cycle_id, LISTINGS_BATCH, requests, settings, clock, cost_model, collector
            )
            cost += float(pc.sum(listing_rows["cost"]).as_py() or 0.0)
            specs.append(_spec(folder, LISTINGS_BATCH, requests))

        # 2. the summaries seen, against the ones kept
        seen = _seen_summaries(collector, listing_rows, kept)
        con.register("seen", seen)
        seen = con.sql(_IN_CATALOG).to_arrow_table()  # items the catalog knows
        compared = compare_summaries(
            kept["item_url_id"].to_numpy(),
            kept["summary_hash"].to_numpy(),
            seen["item_url_id"].to_numpy(),
            seen["summary_hash"].to_numpy(),
        )
        # known stale since an earlier read: changed, whatever this read shows
        pending_ids = kept["item_url_id"].to_numpy()[kept["pending"].to_numpy(zero_copy_only=False)]
        was_pending = np.isin(compared.url_ids, pending_ids)
        changed = compared.changed | (compared.known & was_pending)
        unchanged = compared.known & ~changed
        state = np.where(unchanged, "unchanged", np.where(changed, "changed", "new"))
        first = pc.index_in(pa.array(compared.url_ids), seen["item_url_id"])
        seen = seen.take(first).append_column("state", pa.array(state))
        durable_write_parquet(seen, mine / _SEEN)

        # 3. what the pass fetches: marked items, and planned pages of endpoint hosts
        con.register("seen_state", seen)
        marked = con.sql(_MARKED).to_arrow_table()  # the seen items and the pending unseen
        con.register("marked", marked)
        con.register("routes", pa.table({"host": pa.array(sorted(routes), pa.string())}))
        _last_observations(con, con.sql(_ITEM_WANTED), observed)
        fetch = _within(_item_requests(con.sql(_ITEM_REQUESTS).to_arrow_table()), budget, cost)
        fetch, through = _through_endpoints(fetch, routes)
        endpoint_urls = set(pc.filter(fetch["url"], through).to_pylist())
        if fetch.num_rows:
            hasher = endpoint_hasher(endpoint_urls, fields)
            rows = _fetch(root, cycle_id, ITEMS_BATCH, fetch, settings, clock, cost_model, hasher)
            cost += float(pc.sum(rows["cost"]).as_py() or 0.0)
            _as_pages(folder / "parts" / f"{ITEMS_BATCH}.parquet", fetch)
            specs.append(_spec(folder, ITEMS_BATCH, fetch))

        # 4. unchanged items: observations without a fetch
        con.register("listing_rows", listing_rows.select(["url_id", "fetched_at"]))
        _last_observations(con, con.sql(_UNCHANGED_WANTED), observed)
        quiet = con.sql(_UNCHANGED_ROWS, params={"cycle": int(cycle_id)})
        quiet_rows = _history_rows(quiet.to_arrow_table())
        if quiet_rows.num_rows:
            durable_write_parquet(quiet_rows, folder / "parts" / f"{UNCHANGED_BATCH}.parquet")
            specs.append(BatchSpec(UNCHANGED_BATCH, "", tuple(), quiet_rows.num_rows))

        # 5. out of the planner's batches: everything the pass fetched or recorded
        taken = pa.concat_arrays(
            [
                fetch["url_id"].combine_chunks(),
                quiet_rows["url_id"].combine_chunks(),
            ]
        )
        taken_from_plan = _take_from_batches(stock, taken)
        if budget is not None:  # the planner's pages get what the pass left of the budget
            plan_cost = con.sql("SELECT url_id, cost FROM plan").to_arrow_table()
            taken_from_plan += _trim_batches(stock, plan_cost, budget - cost)
        _append_to_index(folder, specs)
    finally:
        con.close()
    result = ListingPass(
        listings=listings_due,
        listings_read=int(
            pc.sum(pc.is_in(listing_rows["outcome"], pa.array(sorted(OBSERVED)))).as_py() or 0
        ),
        items_seen=int(seen.num_rows),
        unchanged=int(quiet_rows.num_rows),
        changed=int(pc.sum(pc.equal(marked["state"], "changed")).as_py() or 0),
        pending=int(pc.sum(marked["pending"]).as_py() or 0),
        new=int((~compared.known).sum()),
        through_endpoint=len(endpoint_urls),
        taken_from_plan=taken_from_plan,
        cost=cost,
        hosts=tuple(pass_hosts(root)),
    )
    durable_write_text(mine / _DONE, json.dumps(asdict(result)))
    log.info("cycle %s listing pass: %s", cycle_id, result)
    return result


def listings_pending(root: str | Path, cycle_id: int) -> bool:
    """Whether a committed cycle's seen summaries still wait to be kept."""
    return (work_dir(root, cycle_id) / "listings" / _SEEN).exists()


def apply_listing_summaries(root: str | Path, cycle_id: int) -> int:
    """After the commit: keep the summaries the cycle's listings showed and which items are
    still known stale (module docstring); returns how many items' summaries were replaced
    (idempotent: a re-run changes nothing more)."""
    seen_path = work_dir(root, cycle_id) / "listings" / _SEEN
    if not seen_path.exists():
        return 0
    con = connect()
    try:
        seen = pq.read_table(seen_path)
        con.register("seen", seen)
        con.register("kept", read_summaries(root))
        con.register("history", HistoryStore(root).relation(con))
        params = {"cycle": int(cycle_id), "observed": sql_list(OBSERVED)}
        merged = con.sql(_MERGED, params=params).to_arrow_table()
    finally:
        con.close()
    write_summaries(root, merged)
    seen_path.unlink()
    return int(seen.num_rows)


# ---------------------------------------------------------------------- SQL

_LAST_OBS = """
SELECT url_id,
       arg_max(etag, fetched_at) AS etag,
       arg_max(last_modified, fetched_at) AS last_modified,
       arg_max(record_hash, fetched_at) AS record_hash,
       arg_max(simhash, fetched_at) AS simhash,
       arg_max(warc_file, fetched_at) AS warc_file,
       arg_max(warc_offset, fetched_at) AS warc_offset
FROM history
WHERE outcome IN (SELECT unnest($observed)) AND url_id IN (SELECT url_id FROM wanted)
GROUP BY url_id
"""

_LISTING_REQUESTS = """
SELECT d.url_id, d.url, d.host, 1.0e9 AS priority, o.etag, o.last_modified, o.record_hash,
       o.warc_file, o.warc_offset
FROM declared d LEFT JOIN last_obs o USING (url_id)
ORDER BY d.host, d.url_id
"""

# per declared listing: what a read costs (its kept items' mean cost: NULL when none is kept)
_DUE_LISTINGS = """
SELECT d.url, d.url_id, d.host, e.item_cost
FROM declared_all d
     LEFT JOIN (SELECT k.listing_url_id AS url_id, avg(c.cost) AS item_cost
                FROM kept k LEFT JOIN catalog c ON c.url_id = k.item_url_id
                GROUP BY k.listing_url_id) e USING (url_id)
ORDER BY d.host, d.url_id
"""

# per kept item of a declared listing: whether a read would show it changed since its last
# observation under the planner's rates (1: never observed or no rate), known stale already
# (pending: a read would tell nothing of it), and what the fetch order ranks it by, at the
# fetch's estimated cost as ``_ITEM_REQUESTS`` prices it
_LISTED = """
WITH seen_at AS (
    SELECT url_id, max(fetched_at) AS last FROM history
    WHERE outcome IN (SELECT unnest($observed))
      AND url_id IN (SELECT item_url_id FROM kept)
    GROUP BY url_id
)
SELECT k.listing_url_id, k.pending,
       CASE WHEN s.last IS NULL OR r.rate IS NULL THEN 1.0
            ELSE 1.0 - exp(-r.rate * greatest(epoch($now::TIMESTAMPTZ) - epoch(s.last), 0.0)
                           / 86400.0) END AS changed,
       coalesce(p.cost, (SELECT median(cost) FROM plan), c.cost, 1.0) AS cost,
       coalesce(c.value, 1.0) AS value, coalesce(r.rate, 0.0) AS rate
FROM kept k JOIN declared_all d ON d.url_id = k.listing_url_id
     LEFT JOIN catalog c ON c.url_id = k.item_url_id
     LEFT JOIN plan p ON p.url_id = k.item_url_id
     LEFT JOIN rates r ON r.url_id = k.item_url_id
     LEFT JOIN seen_at s ON s.url_id = k.item_url_id
"""

_IN_CATALOG = """
SELECT s.item_url_id, s.listing_url_id, s.summary_hash, c.url, c.host
FROM seen s JOIN catalog c ON c.url_id = s.item_url_id
"""

# the items seen this cycle and those known stale from earlier reads (pending) not seen
_MARKED = """
SELECT item_url_id, state, item_url_id IN (SELECT item_url_id FROM kept WHERE pending) AS pending
FROM seen_state
UNION ALL
SELECT k.item_url_id, 'changed' AS state, true AS pending
FROM kept k JOIN catalog c ON c.url_id = k.item_url_id
WHERE k.pending AND k.item_url_id NOT IN (SELECT item_url_id FROM seen_state)
"""

_ITEM_WANTED = """
SELECT item_url_id AS url_id FROM marked WHERE state <> 'unchanged'
UNION
SELECT p.url_id FROM plan p JOIN catalog c USING (url_id)
WHERE c.host IN (SELECT host FROM routes)
  AND p.url_id NOT IN (SELECT item_url_id FROM marked WHERE state = 'unchanged')
"""

# the wanted pages with what ``_item_requests`` orders them by
_ITEM_REQUESTS = """
WITH priced AS (
    SELECT w.url_id, c.url, c.host, coalesce(p.score, 1.0e6) AS priority,
           coalesce(p.cost, (SELECT median(cost) FROM plan), c.cost) AS est_cost, c.value,
           coalesce(e.rate, 0.0) AS rate
    FROM wanted w JOIN catalog c USING (url_id) LEFT JOIN plan p USING (url_id)
         LEFT JOIN rates e USING (url_id)
)
SELECT r.url_id, r.url, r.host, r.priority, o.etag, o.last_modified, o.record_hash,
       o.warc_file, o.warc_offset, r.est_cost, r.value, r.rate
FROM priced r LEFT JOIN last_obs o USING (url_id)
"""

_UNCHANGED_WANTED = """
SELECT item_url_id AS url_id FROM seen_state WHERE state = 'unchanged'
"""

_UNCHANGED_ROWS = """
WITH read_at AS (
    SELECT s.item_url_id AS url_id, min(h.fetched_at) AS fetched_at
    FROM seen_state s JOIN listing_rows h ON h.url_id = s.listing_url_id
    WHERE s.state = 'unchanged'
    GROUP BY s.item_url_id
)
SELECT w.url_id, c.host, $cycle::BIGINT AS cycle_id, r.fetched_at, o.etag, o.last_modified,
       o.record_hash, o.simhash
FROM wanted w JOIN catalog c USING (url_id) JOIN read_at r USING (url_id)
     LEFT JOIN last_obs o USING (url_id)
ORDER BY w.url_id
"""

# every summary the cycle's listings showed, and the items known stale (pending) after it:
# shown changed or new, or pending before, and observed by no fetch of the cycle
_MERGED = """
WITH observed_now AS (
    SELECT DISTINCT url_id FROM history
    WHERE cycle_id = $cycle AND outcome IN (SELECT unnest($observed))
)
SELECT s.item_url_id, s.listing_url_id, s.summary_hash, $cycle::BIGINT AS cycle_id,
       (s.state <> 'unchanged' AND s.item_url_id NOT IN (SELECT url_id FROM observed_now))
           AS pending
FROM seen s
UNION ALL
SELECT k.item_url_id, k.listing_url_id, k.summary_hash, k.cycle_id,
       (k.pending AND k.item_url_id NOT IN (SELECT url_id FROM observed_now)) AS pending
FROM kept k
WHERE k.item_url_id NOT IN (SELECT item_url_id FROM seen)
ORDER BY item_url_id
"""


# ---------------------------------------------------------------------- helpers


def _last_observations(
    con: duckdb.DuckDBPyConnection, wanted: duckdb.DuckDBPyRelation, observed: dict[str, object]
) -> None:
    """Register ``last_obs``: the last observation's validators, hash and capture of each
    page of ``wanted`` (one ``url_id`` column)."""
    con.register("wanted", wanted.to_arrow_table())
    con.register("last_obs", con.sql(_LAST_OBS, params=observed).to_arrow_table())


def _fetch(
    root: str | Path,
    cycle_id: int,
    name: str,
    requests: pa.Table,
    settings: FetchSettings | None,
    clock: Callable[[], datetime] | None,
    cost_model: CostModel | str,
    hasher: Callable[[bytes, str | None, str], RecordDigest],
) -> pa.Table:
    path = work_dir(root, cycle_id) / "batches" / f"{name}.parquet"
    durable_write_parquet(requests, path)
    try:
        outcome = run_host_batch(
            root,
            cycle_id,
            name,
            settings=settings,
            clock=clock,
            record_hasher=hasher,
            cost_model=cost_model,
        )
        part = outcome.part
    except BatchFailedError as exc:  # its rows are errors: nothing seen, pages come back
        log.warning("cycle %s: the listing pass's %s failed: %s", cycle_id, name, exc)
        part = str(work_dir(root, cycle_id) / "parts" / f"{name}.parquet")
    return read_part(part)


def _seen_summaries(collector: ListingCollector, rows: pa.Table, kept: pa.Table) -> pa.Table:
    """Per listed item: (item, listing, summary) read now; a 304 listing's are the kept ones."""
    item_ids: list[np.ndarray] = []
    listing_ids: list[np.ndarray] = []
    hashes: list[np.ndarray] = []
    for url, items in collector.found.items():
        item_ids.append(items.url_ids)
        listing_ids.append(np.full(len(items), url_id(url), dtype=np.int64))
        hashes.append(items.summary_hashes)
    if rows.num_rows:
        same = pc.filter(rows["url_id"], pc.equal(rows["outcome"], "not_modified"))
        mask = pc.is_in(kept["listing_url_id"], same.combine_chunks()).to_numpy(
            zero_copy_only=False
        )
        item_ids.append(kept["item_url_id"].to_numpy()[mask])
        listing_ids.append(kept["listing_url_id"].to_numpy()[mask])
        hashes.append(kept["summary_hash"].to_numpy()[mask])
    if not item_ids:
        empty = np.zeros(0, dtype=np.int64)
        item_ids, listing_ids, hashes = [empty], [empty], [empty]
    return pa.table(
        {
            "item_url_id": pa.array(np.concatenate(item_ids), pa.int64()),
            "listing_url_id": pa.array(np.concatenate(listing_ids), pa.int64()),
            "summary_hash": pa.array(np.concatenate(hashes), pa.int64()),
        }
    )


def _through_endpoints(
    requests: pa.Table, routes: dict[str, EndpointRoute]
) -> tuple[pa.Table, pa.Array]:
    """Requests of endpoint hosts' pages point at the endpoint; which ones do."""
    urls = requests["url"].to_pylist()
    hosts = requests["host"].to_pylist()
    out: list[str] = []
    through: list[bool] = []
    for url, host in zip(urls, hosts, strict=True):  # one per page the pass fetches
        route = routes.get(host)
        parts = urlsplit(url)
        path = route.endpoint_path(parts.path) if route is not None else None
        if path is None:
            out.append(url)
            through.append(False)
            continue
        try:
            out.append(normalize(urlunsplit((parts.scheme, parts.netloc, path, "", ""))))
            through.append(True)
        except InvalidURLError:
            out.append(url)
            through.append(False)
    moved = pa.array(through, pa.bool_())
    table = requests.set_column(requests.column_names.index("url"), "url", pa.array(out))
    # an endpoint's validators are its own: the page's would never match
    for name in ("etag", "last_modified", "warc_file", "warc_offset"):
        column = table[name]
        nulls = pa.nulls(table.num_rows, column.type)
        table = table.set_column(
            table.column_names.index(name), name, pc.if_else(moved, nulls, column)
        )
    return table, moved


def _as_pages(part: Path, requests: pa.Table) -> None:
    """Rows fetched through an endpoint named by their page's url id (the catalog's)."""
    rows = read_part(part)
    endpoint_ids = pa.array([url_id(u) for u in requests["url"].to_pylist()], pa.int64())
    at = pc.index_in(rows["url_id"], endpoint_ids)
    page_ids = pc.take(requests["url_id"], at)
    fixed = pc.if_else(pc.is_null(at), rows["url_id"], page_ids)
    rows = rows.set_column(rows.column_names.index("url_id"), "url_id", fixed.cast(pa.int64()))
    table = pq.read_table(part)
    durable_write_parquet(
        rows.replace_schema_metadata(table.schema.metadata), part
    )  # the metadata lists the WARC files the part published


def _history_rows(found: pa.Table) -> pa.Table:
    n = found.num_rows
    columns = {
        "url_id": found["url_id"],
        "host": found["host"],
        "cycle_id": found["cycle_id"],
        "fetched_at": found["fetched_at"].cast(HISTORY_SCHEMA.field("fetched_at").type),
        "outcome": pa.array(["listing_unchanged"] * n, pa.string()),
        "record_hash": found["record_hash"],
        "simhash": found["simhash"],
        "etag": found["etag"],
        "last_modified": found["last_modified"],
        "bytes": pa.array(np.zeros(n, dtype=np.int64)),
        "cost": pa.array(np.zeros(n)),
        "retries": pa.array(np.zeros(n, dtype=np.int16)),
        "reason": pa.array([UNCHANGED_REASON] * n, pa.string()),
    }
    return pa.Table.from_arrays(
        [
            columns[f.name].cast(f.type) if f.name in columns else pa.nulls(n, f.type)
            for f in HISTORY_SCHEMA
        ],
        schema=HISTORY_SCHEMA,
    )


def _rates(root: str | Path) -> pa.Table:
    """Every page's rate estimate (the planner's prior), or none when it cannot be had."""
    from tasks.cycle.estimation import load_rate_estimates

    try:
        frame = load_rate_estimates(root)
    except (ValueError, RuntimeError) as exc:  # no history to estimate from, say
        log.info("listing pass without rate estimates: %s", exc)
        return _NO_RATES
    return pa.table(
        {
            "url_id": pa.array(frame["url_id"].to_numpy(), pa.int64()),
            "rate": pa.array(frame["rate"].to_numpy(), pa.float64()),
        }
    )


def _utc_now() -> datetime:
    return datetime.now(UTC)


def _listed_items(listed: pa.Table, listing_ids: np.ndarray) -> ListedItems:
    """``_LISTED``'s rows as ``ListedItems`` of the listings ``listing_ids`` (all declared)."""

    def column(name: str) -> np.ndarray:
        values: np.ndarray = listed[name].to_numpy(zero_copy_only=False)
        return values

    by_id = np.argsort(listing_ids, kind="stable")
    at = by_id[np.searchsorted(listing_ids[by_id], column("listing_url_id"))]
    return listed_items(
        at,
        column("changed").astype(np.float64),
        column("pending").astype(np.bool_),
        column("value").astype(np.float64),
        column("cost").astype(np.float64),
        column("rate").astype(np.float64),
    )


def _item_requests(priced: pa.Table) -> pa.Table:
    """The pass's item requests in fetch order (``stale_fetch_order``), then the plan's
    priority and url id."""

    def column(name: str) -> np.ndarray:
        values: np.ndarray = priced[name].to_numpy(zero_copy_only=False)
        return values

    order = stale_fetch_order(
        column("value"),
        column("est_cost"),
        column("rate"),
        ties=(-column("priority"), column("url_id")),
    )
    return priced.take(pa.array(order, pa.int64())).drop_columns(["value", "rate"])


def _within(requests: pa.Table, budget: float | None, spent: float) -> pa.Table:
    """The first requests (in their order) whose estimated costs fit what is left."""
    if budget is None:
        return requests.drop_columns(["est_cost"])
    cost = requests["est_cost"].to_numpy(zero_copy_only=False).astype(np.float64)
    fits = np.cumsum(cost) <= (budget - spent) * (1 + 1e-12)
    return requests.filter(pa.array(fits)).drop_columns(["est_cost"])


def _trim_batches(stock: list[BatchSpec], plan_cost: pa.Table, left: float) -> int:
    """Keep the planner's highest-priority pages within ``left``; how many were dropped."""
    batches = [(Path(s.path), pq.read_table(Path(s.path))) for s in stock]
    if not batches:
        return 0
    ids = np.concatenate([b["url_id"].to_numpy() for _, b in batches])
    priority = np.concatenate(
        [b["priority"].to_numpy(zero_copy_only=False).astype(np.float64) for _, b in batches]
    )
    at = pc.index_in(pa.array(ids), plan_cost["url_id"])
    cost = pc.take(plan_cost["cost"], at).to_numpy(zero_copy_only=False).astype(np.float64)
    cost = np.nan_to_num(cost, nan=1.0)
    order = np.lexsort((ids, -np.nan_to_num(priority, nan=0.0)))
    keep_sorted = np.cumsum(cost[order]) <= max(left, 0.0) * (1 + 1e-12)
    keep = np.zeros(ids.shape[0], dtype=bool)
    keep[order[keep_sorted]] = True
    dropped, start = 0, 0
    for path, batch in batches:
        mine = keep[start : start + batch.num_rows]
        start += batch.num_rows
        if not mine.all():
            durable_write_parquet(batch.filter(pa.array(mine)), path)
            dropped += int((~mine).sum())
    return dropped


def _take_from_batches(stock: list[BatchSpec], taken: pa.Array) -> int:
    """Remove ``taken`` pages from the planner's batch files; how many were there."""
    removed = 0
    for spec in stock:
        path = Path(spec.path)
        batch = pq.read_table(path)
        there = pc.is_in(batch["url_id"], taken)
        count = int(pc.sum(there).as_py() or 0)
        if count:
            durable_write_parquet(batch.filter(pc.invert(there)), path)
            removed += count
    return removed


def _spec(folder: Path, name: str, requests: pa.Table) -> BatchSpec:
    hosts = tuple(dict.fromkeys(requests["host"].to_pylist()))
    return BatchSpec(name, str(folder / "batches" / f"{name}.parquet"), hosts, requests.num_rows)


def _append_to_index(folder: Path, specs: list[BatchSpec]) -> None:
    index = folder / INDEX
    data = json.loads(index.read_text())
    names = {s.name for s in specs}
    batches = [b for b in data["batches"] if b["name"] not in names]
    data["batches"] = batches + [asdict(s) for s in specs]
    durable_write_text(index, json.dumps(data))


def _clean(folder: Path) -> None:
    """What a crashed pass left (its parts were never named by the index)."""
    for name in (LISTINGS_BATCH, ITEMS_BATCH, UNCHANGED_BATCH):
        for sub in ("batches", "parts"):
            (folder / sub / f"{name}.parquet").unlink(missing_ok=True)
    shutil.rmtree(folder / "listings", ignore_errors=True)


def _read_done(path: Path) -> ListingPass:
    data = json.loads(path.read_text())
    data["hosts"] = tuple(data.get("hosts", ()))
    return ListingPass(**data)
