"""The recrawl cycle's I/O, without Prefect: split a plan into host batches, fetch, commit.

A cycle's working state lives under ``<root>/_work/cycle=<id>/``::

    batches/batch-00000.parquet   the requests of one host batch (url, validators, priority)
    batches.json                  the split, written last: its presence means it is complete
    parts/batch-00000.parquet     the history rows one batch produced (written atomically)
    metrics/batch-00000.json      the batch's pressure metrics (for the reports)

Nothing under ``_work`` is visible to readers of the history. ``commit_cycle`` publishes
every part at once through ``HistoryStore.cycle_writer`` (one atomic manifest rename), so a
process killed at any point leaves the history as it was or with the whole cycle. A re-run
resumes: the split is reused, batches whose part exists are not fetched again, and a part
has one fixed name per batch, so nothing is counted twice. A batch that fails records its
URLs as ``error`` rows naming the failure (failed attempts are not observations, so the
planner reschedules those pages); a batch that never ran gets such rows at commit.

Raw exchanges (on by default, ``run_host_batch(warc=...)``) go to WARC files under
``<root>/warc/cycle=<id>/``, one writer per batch run, closed before the batch's part is
written: a part (hence the committed history) only ever names complete, published WARC
files. Each request carries its page's previous capture (the history's last
``warc_file``/``warc_offset`` from an earlier cycle), so an unchanged payload is stored as a
``revisit`` record referring to it (``tasks.archive.read.PreviousCaptures``). The part records
the files its run published (Parquet key-value metadata, written with the rows in one
rename); at commit every other batch WARC file of the cycle (a crashed or failed run's) is
deleted, so no file outlives the cycle unnamed, and the history never names a deleted one.

Each answered page is also read for its links and ``rel="canonical"`` (``links=True``,
``tasks.cycle.content``): the batch writes them under ``content/``, and
``apply_cycle_content`` turns them into catalog candidates and canonical URLs after the
commit, together with the near-duplicate report.

A *host batch* holds the URLs of one or more whole hosts (small hosts are packed together,
at most ``max_hosts`` of them) or one slice of a large host (at most ``max_urls`` URLs);
the flow tags it ``host:<name>`` for each of its hosts. Packing matters: every tagged task
run costs the Prefect server a slot acquisition and release (tens to hundreds of
milliseconds measured here), while one fetch batch fetches its hosts concurrently anyway.
"""

from __future__ import annotations

import hashlib
import json
import logging
import shutil
import threading
import time
import uuid
from collections.abc import Callable, Iterable
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, TypeVar

import duckdb
import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from models.content.extract import DEFAULT_RULES, extract
from models.content.extract_rules import ExtractionRules
from models.discovery.urls import InvalidURLError, normalize, url_id
from models.outcomes import OBSERVED, sql_list
from models.planning.cost import COST_MODELS, CostModel
from models.schemas import HISTORY_SCHEMA
from tasks.archive.cycle import (
    CycleArchive,
    files_named,
    previous_captures,
    with_archived_files,
)
from tasks.archive.warc import WarcSettings, WarcWriter
from tasks.cycle.content import CollectedPages, PageCollector, write_batch_content
from tasks.cycle.host_record import troubled_hosts
from tasks.cycle.offload import Offloader, OffloadHasher, OffloadWarcWriter
from tasks.fetch.batch_slots import ActiveBatches, process_batches
from tasks.fetch.engine import EngineState, FetchRequest, fetch_batch
from tasks.fetch.metrics import BatchMetrics
from tasks.fetch.rows import AttemptCost, CostHook, RecordDigest, RecordHasher
from tasks.fetch.run_sync import run_coroutine
from tasks.fetch.settings import FetchSettings
from tasks.render.rows import render_batch_rows
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet, durable_write_text
from tasks.store.history import (
    CommitResult,
    HistoryCorruptError,
    HistoryStore,
    connect,
    write_error,
)

log = logging.getLogger(__name__)

WORK_DIR = "_work"
INDEX = "batches.json"
#: Hosts one batch may carry: each becomes a tag of the task run, and Prefect drops task
#: run events with more than 100 related resources (tags count), so stay well below.
MAX_HOSTS_PER_BATCH = 80
SHARD_TAG_PREFIX = "hostshard:"

T = TypeVar("T")


class CycleInputError(ValueError):
    """A cycle cannot be prepared from what is stored; the message says what is missing."""


class BatchFailedError(RuntimeError):
    """A host batch failed; its URLs were recorded as ``error`` rows naming the cause."""


@dataclass(frozen=True)
class BatchSpec:
    """One host batch: where its requests are, which hosts it holds, what must run first."""

    name: str
    path: str
    hosts: tuple[str, ...]
    urls: int
    after: str | None = None  # the previous slice of the same large host, if any
    shard: int | None = None  # the host shard all its hosts belong to (shard mode)

    @property
    def tags(self) -> list[str]:
        """``host:<h>`` per host, or one ``hostshard:<k>`` in shard mode."""
        if self.shard is not None:
            return [f"{SHARD_TAG_PREFIX}{self.shard}"]
        return [f"host:{h}" for h in self.hosts]


@dataclass(frozen=True)
class BatchOutcome:
    """What a host batch produced: its part file and counts (nothing else crosses tasks)."""

    name: str
    part: str
    urls: int
    observations: int
    failed: int
    bytes: int
    cost: float
    fetch_s: float
    write_s: float
    resumed: bool = False
    error: str | None = None
    started: float = 0.0  # wall clock (time.time()) of the body's start and end
    ended: float = 0.0


@dataclass(frozen=True)
class CycleCommit:
    cycle_id: int
    rows: int
    observations: int
    batches: int
    missing_batches: int  # batches that never produced a part: recorded as errors
    commit_s: float
    files: tuple[str, ...]
    started: float = 0.0
    ended: float = 0.0
    orphaned_warc_files: int = 0  # WARC files of runs no part names, deleted at commit


CycleState = Literal["new", "resume", "committed"]


# ---------------------------------------------------------------------- paths


def work_dir(root: str | Path, cycle_id: int) -> Path:
    return Path(root) / WORK_DIR / f"cycle={int(cycle_id)}"


def cycle_state(root: str | Path, cycle_id: int) -> CycleState:
    """``committed`` if the history has the cycle, ``resume`` if a split is on disk, else new."""
    if int(cycle_id) in HistoryStore(root).cycles():
        return "committed"
    if (work_dir(root, cycle_id) / INDEX).exists():
        return "resume"
    return "new"


def discard_work(root: str | Path, cycle_id: int) -> None:
    """Remove the cycle's working files (after its commit and report, or to start over)."""
    shutil.rmtree(work_dir(root, cycle_id), ignore_errors=True)


def batch_spec(root: str | Path, cycle_id: int, batch_name: str) -> BatchSpec | None:
    """The split's spec of one batch (its hosts as the engine names them), None without
    a split or such a batch."""
    try:
        return next((b for b in read_batches(root, cycle_id) if b.name == batch_name), None)
    except CycleInputError:  # no split: the batch never ran
        return None


def read_batches(root: str | Path, cycle_id: int) -> list[BatchSpec]:
    """The split written by ``split_plan`` (raises if there is none)."""
    path = work_dir(root, cycle_id) / INDEX
    if not path.exists():
        raise CycleInputError(f"cycle {cycle_id} has no batch split at {path}")
    data = json.loads(path.read_text())
    return [
        BatchSpec(
            b["name"], b["path"], tuple(b["hosts"]), b["urls"], b.get("after"), b.get("shard")
        )
        for b in data["batches"]
    ]


# ---------------------------------------------------------------------- split

# The plan joined with the catalog's URL, the page's last observation's validators and its
# last archived capture from an earlier cycle (a re-run of this cycle deletes this cycle's
# files), in batch order (host, then priority).
_REQUESTS_SQL = """
WITH last_obs AS (
    SELECT url_id,
           arg_max(etag, fetched_at) AS etag,
           arg_max(last_modified, fetched_at) AS last_modified,
           arg_max(record_hash, fetched_at) AS record_hash
    FROM history
    WHERE outcome IN (SELECT unnest($observed)) AND url_id IN (SELECT url_id FROM plan)
    GROUP BY url_id
),
last_capture AS (
    SELECT url_id,
           arg_max(warc_file, fetched_at) AS warc_file,
           arg_max(warc_offset, fetched_at) AS warc_offset
    FROM history
    WHERE outcome IN (SELECT unnest($observed)) AND warc_file IS NOT NULL
          AND cycle_id <> $cycle AND url_id IN (SELECT url_id FROM plan)
    GROUP BY url_id
)
SELECT p.url_id, c.url, coalesce(c.host, p.host) AS host, p.score AS priority,
       o.etag, o.last_modified, o.record_hash, w.warc_file, w.warc_offset
FROM plan p JOIN catalog c USING (url_id) LEFT JOIN last_obs o USING (url_id)
     LEFT JOIN last_capture w USING (url_id)
ORDER BY host, priority DESC, url_id
"""


def split_plan(
    root: str | Path,
    cycle_id: int,
    plan_path: str | Path,
    *,
    max_urls: int = 2_000,
    max_hosts: int = 40,
    host_shards: int = 0,
    pack_troubled: bool = True,
) -> list[BatchSpec]:
    """Split a plan Parquet into host batches under the cycle's work folder.

    Hosts with more than ``max_urls`` planned pages are cut into slices of at most
    ``max_urls`` URLs, each slice ``after`` the previous one; smaller hosts are packed
    whole, up to ``max_urls`` URLs and ``max_hosts`` hosts per batch. Each request carries
    the last observation's ETag, Last-Modified and record hash (joined by DuckDB), so the
    fetcher can send a conditional request, and the ``warc_file``/``warc_offset`` of the
    page's last capture, so an unchanged payload becomes a revisit record. Any earlier split
    of the cycle is replaced.

    ``pack_troubled``: hosts with a poor record in recent cycles (``tasks.cycle.host_record``:
    throttled, timed out, failed, retried or shed) are packed into batches of their own,
    after every other batch, so they do not hold up the healthy hosts' batches.

    ``host_shards > 0`` (shard mode): every host belongs to shard ``hash(host) % host_shards``
    and a batch holds hosts of one shard only, so one tag ``hostshard:<k>`` per batch keeps
    a host's batches apart (every run must use the same number of shards); ``max_hosts``
    does not apply then.
    """
    if max_urls < 1:
        raise CycleInputError(f"max_urls must be >= 1, got {max_urls}")
    if host_shards < 0:
        raise CycleInputError(f"host_shards must be >= 0, got {host_shards}")
    if not 1 <= max_hosts <= MAX_HOSTS_PER_BATCH:
        raise CycleInputError(
            f"max_hosts must be within [1, {MAX_HOSTS_PER_BATCH}], got {max_hosts}"
        )
    plan_path = Path(plan_path)
    if not plan_path.exists():
        raise CycleInputError(f"no plan file at {plan_path}")
    catalog = CatalogStore(root)
    if not catalog.path.exists():
        raise CycleInputError(f"no page catalog under {root}: the plan's pages have no URLs")
    con = connect()
    try:
        con.register("plan", con.read_parquet(str(plan_path)))
        planned = con.sql("SELECT count(*) FROM plan").fetchall()[0][0]
    except duckdb.Error as exc:
        raise CycleInputError(
            f"the plan {plan_path} is not a readable Parquet file ({exc}); plan the cycle again"
        ) from exc
    con.register("catalog", catalog.relation(con))
    con.register("history", HistoryStore(root).relation(con))
    requests = con.sql(
        _REQUESTS_SQL, params={"cycle": int(cycle_id), "observed": sql_list(OBSERVED)}
    ).to_arrow_table()
    if requests.num_rows < planned:
        log.warning(
            "cycle %s: %d planned pages are not in the catalog and are skipped",
            cycle_id,
            planned - requests.num_rows,
        )

    troubled = (
        troubled_hosts(con, requests, cycle_id)
        if pack_troubled
        else pa.array(np.zeros(requests.num_rows, dtype=bool))
    )
    requests = _ordered(requests.append_column("troubled", troubled), host_shards)
    groups = requests["troubled"].to_numpy(zero_copy_only=False).astype(np.int64)
    shards = None
    if host_shards:
        shards = requests["shard"].to_numpy()
        groups = groups + 2 * shards  # a batch holds hosts of one shard and one kind
        max_hosts = requests.num_rows + 1  # one tag per batch: no host cap
    troubled_count = len(pc.unique(pc.filter(requests["host"], requests["troubled"])))
    requests = requests.drop_columns(["troubled", *(["shard"] if host_shards else [])])

    folder = work_dir(root, cycle_id)
    discard_work(root, cycle_id)
    (folder / "batches").mkdir(parents=True)
    hosts = requests["host"].to_numpy(zero_copy_only=False)
    assignments = _assign_batches(hosts, max_urls, max_hosts, groups)
    specs = []
    for number, (start, stop, after) in enumerate(assignments):
        name = f"batch-{number:05d}"
        path = folder / "batches" / f"{name}.parquet"
        chunk = requests.slice(start, stop - start)
        durable_write_parquet(chunk, path)
        batch_hosts = tuple(dict.fromkeys(hosts[start:stop].tolist()))
        previous = None if after is None else f"batch-{after:05d}"
        shard = None if shards is None else int(shards[start])
        specs.append(BatchSpec(name, str(path), batch_hosts, stop - start, previous, shard))
    _write_json(
        folder / INDEX,
        {"cycle_id": int(cycle_id), "plan": str(plan_path), "batches": [asdict(s) for s in specs]},
    )
    log.info(
        "cycle %s: %d pages in %d host batches (%d hosts with a poor record packed last)",
        cycle_id,
        requests.num_rows,
        len(specs),
        troubled_count,
    )
    return specs


def host_shard(host: str, shards: int) -> int:
    """Stable shard of a host (the same on every machine and run)."""
    digest = hashlib.blake2b(host.encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") % shards


def _ordered(requests: pa.Table, shards: int) -> pa.Table:
    """Rows in packing order: by shard (with ``shards``: a ``shard`` column is added, a loop
    over hosts only), troubled hosts after the others, then host, priority, url_id."""
    keys = [
        ("troubled", "ascending"),
        ("host", "ascending"),
        ("priority", "descending"),
        ("url_id", "ascending"),
    ]
    if shards:
        names = pc.unique(requests["host"]).to_pylist()
        lookup = pa.array([host_shard(h, shards) for h in names], pa.int64())
        shard = pc.take(lookup, pc.index_in(requests["host"], pa.array(names, pa.string())))
        requests = requests.append_column("shard", shard)
        keys.insert(0, ("shard", "ascending"))
    return requests.sort_by(keys)


def _assign_batches(
    hosts: np.ndarray, max_urls: int, max_hosts: int, groups: np.ndarray | None = None
) -> list[tuple[int, int, int | None]]:
    """Row ranges ``(start, stop, after)`` of each batch over rows sorted by host.

    A loop over hosts (not rows): large hosts are sliced, small ones packed in order; a
    batch never spans two ``groups`` (host shards), when given (rows sorted by group first).
    """
    if hosts.shape[0] == 0:
        return []
    boundary = hosts[1:] != hosts[:-1]
    if groups is not None:
        boundary |= groups[1:] != groups[:-1]
    starts = np.r_[0, np.flatnonzero(boundary) + 1]
    stops = np.r_[starts[1:], hosts.shape[0]]
    batches: list[tuple[int, int, int | None]] = []
    open_start: int | None = None
    open_hosts = 0
    for start, stop in zip(starts.tolist(), stops.tolist(), strict=True):
        size = stop - start
        if size > max_urls:
            if open_start is not None:
                batches.append((open_start, start, None))
                open_start = None
            previous = None
            for cut in range(start, stop, max_urls):
                batches.append((cut, min(cut + max_urls, stop), previous))
                previous = len(batches) - 1
            continue
        new_group = (
            groups is not None and open_start is not None and (groups[start] != groups[open_start])
        )
        if open_start is not None and (
            start + size - open_start > max_urls or open_hosts >= max_hosts or new_group
        ):
            batches.append((open_start, start, None))
            open_start = None
        if open_start is None:
            open_start, open_hosts = start, 0
        open_hosts += 1
    if open_start is not None:
        batches.append((open_start, int(stops[-1]), None))
    return batches


# ---------------------------------------------------------------------- fetch one batch

_STATES: dict[str, EngineState] = {}
_STATES_LOCK = threading.Lock()


def engine_state(settings: FetchSettings) -> EngineState:
    """The process's engine state for these settings (pacing, robots.txt, validator trust).

    Shared by the batches a worker process runs, one after another or side by side (their
    hosts differ: slices of one host are chained), so what was learned about a host carries
    over to its next batch.
    """
    key = settings.model_dump_json()
    with _STATES_LOCK:
        state = _STATES.get(key)
        if state is None:
            state = _STATES[key] = EngineState(settings)
        return state


def pacing_left_s(state: EngineState, hosts: Iterable[str], now: float) -> float:
    """Seconds until the pacing gap after the last request to each of ``hosts`` has passed."""
    ends = [max(s.cooling) for h in hosts if (s := state.hosts.get(h)) is not None and s.cooling]
    return max(0.0, max(ends, default=now) - now)


def cost_hook_for(model: CostModel | str) -> CostHook:
    """Price each attempt in the budget's units (the planner's cost model)."""
    chosen = COST_MODELS[model] if isinstance(model, str) else model

    def hook(attempt: AttemptCost) -> float:
        return float(chosen.attempt_cost([attempt.outcome], [attempt.wire_bytes])[0])

    return hook


def default_record_hasher(rules: ExtractionRules = DEFAULT_RULES) -> RecordHasher:
    """The extracted record's hash and simhash (``models.content.extract``): noise is not a change.

    ``rules`` choose the fields per URL (the page's final URL, as the engine passes it).
    """

    def hasher(body: bytes, content_type: str | None, url: str) -> RecordDigest:
        record = extract(body, content_type or "", url, rules)
        return RecordDigest(record.record_hash, record.simhash)

    return hasher


def run_host_batch(
    root: str | Path,
    cycle_id: int,
    batch_name: str,
    *,
    settings: FetchSettings | None = None,
    clock: Callable[[], datetime] | None = None,
    record_hasher: RecordHasher | None = None,
    cost_model: CostModel | str = "credits",
    window_s: float | None = None,
    warc: bool | WarcSettings = True,
    links: bool = True,
    places: ActiveBatches | None = None,
    offload: Offloader | None = None,
) -> BatchOutcome:
    """Fetch one host batch and stage its rows as the batch's part of the cycle.

    Returns the part's path and counts. If the part already exists (a re-run after a
    crash) it is not fetched again. If fetching fails, every URL of the batch is written
    as an ``error`` row naming the failure and ``BatchFailedError`` is raised.

    ``warc`` (True, or ``WarcSettings``; False turns it off) archives the batch's exchanges
    through one ``WarcWriter`` (part name: the batch's and a token of this run), given each
    page's previous capture and closed before the part is written; the part's metadata
    lists the files it published. A failed run's open file is dropped; files it already
    published are named by no part and deleted at commit.

    ``links`` reads every answered page for its links and canonical link too and writes them
    under the cycle's ``content/`` (``tasks.cycle.content``) before the part.

    Fetching waits for an active place (``places``, default the process's
    ``tasks.fetch.batch_slots.process_batches()``) and gives it back when the batch reaches its
    tail, so a few throttled or failing hosts do not hold up the batches behind it.

    ``offload`` (a ``tasks.cycle.offload.ContentPool`` or ``DaskContentPool``) runs the
    extraction, hashing, links and WARC writing in its workers instead of this thread (the
    default hasher only; a given ``record_hasher`` runs inline).
    """
    wall_start = time.time()
    folder = work_dir(root, cycle_id)
    batch_path = folder / "batches" / f"{batch_name}.parquet"
    part_path = folder / "parts" / f"{batch_name}.parquet"
    if part_path.exists():
        return _outcome(batch_name, part_path, 0.0, 0.0, wall_start, resumed=True)
    if not batch_path.exists():
        raise CycleInputError(f"no batch {batch_name} for cycle {cycle_id} at {batch_path}")
    settings = settings or FetchSettings()
    clock = clock or _utc_now
    batch = pq.read_table(batch_path)
    requests = [
        FetchRequest(
            r["url"], r["priority"] or 0.0, r["etag"], r["last_modified"], r["record_hash"]
        )
        for r in batch.select(
            ["url", "priority", "etag", "last_modified", "record_hash"]
        ).to_pylist()
    ]
    started = time.perf_counter()
    state = engine_state(settings)
    part = f"{batch_name}-{uuid.uuid4().hex[:8]}"  # a crashed run's files differ
    hasher: RecordHasher
    collector: CollectedPages | None
    if offload is not None and record_hasher is None:
        collector = OffloadHasher(offload, part, links=links)
        hasher = collector
        if not links:
            collector = None
    else:
        hasher = record_hasher or default_record_hasher()
        collector = PageCollector(hasher) if links else None
        if collector is not None:
            hasher = collector
    writer: WarcWriter | None = None
    published: list[str] = []
    if warc is not False:
        warc_settings = warc if isinstance(warc, WarcSettings) else None
        captures = previous_captures(root, batch)
        if offload is not None:
            writer = OffloadWarcWriter(
                offload,
                root,
                int(cycle_id),
                settings=warc_settings,
                part=part,
                locations=captures.locations if captures is not None else None,
            )
        else:
            writer = WarcWriter(
                root, int(cycle_id), settings=warc_settings, part=part, previous_captures=captures
            )
    try:
        with (places or process_batches()).hold() as give_back:
            started = time.perf_counter()  # fetching, not waiting for a place
            result = run_coroutine(
                fetch_batch(
                    requests,
                    cycle_id=int(cycle_id),
                    settings=settings,
                    state=state,
                    window_s=window_s,
                    clock=clock,
                    record_hasher=hasher,
                    cost_hook=cost_hook_for(cost_model),
                    warc=writer,
                    on_tail=give_back,
                )
            )
        if writer is not None:
            published = writer.close()  # before the part: rows must only name published files
    except Exception as exc:
        if writer is not None:
            writer.abort()
        write_failed_part(root, cycle_id, batch_name, f"batch failed: {exc!r}", clock=clock)
        raise BatchFailedError(f"{batch_name} of cycle {cycle_id} failed: {exc!r}") from exc
    fetch_s = time.perf_counter() - started
    written = time.perf_counter()
    if collector is not None:
        write_batch_content(
            folder, batch_name, collector, state.robots, settings.robots_token, clock()
        )
    _write_json(folder / "metrics" / f"{batch_name}.json", metrics_dict(result.metrics))
    rows = writer.resolve(result.rows) if isinstance(writer, OffloadWarcWriter) else result.rows
    rows = render_batch_rows(
        root, rows, [r.url for r in requests], cost_model=cost_model, fetch_settings=settings
    )
    _write_part(with_archived_files(rows, published), part_path)
    return _outcome(batch_name, part_path, fetch_s, time.perf_counter() - written, wall_start)


def write_failed_part(
    root: str | Path,
    cycle_id: int,
    batch_name: str,
    reason: str,
    *,
    clock: Callable[[], datetime] | None = None,
) -> Path:
    """Record every URL of a batch as an ``error`` attempt with ``reason`` (no request sent)."""
    folder = work_dir(root, cycle_id)
    batch = pq.read_table(folder / "batches" / f"{batch_name}.parquet", columns=["url", "host"])
    at = (clock or _utc_now)()
    ids = []
    for url in batch["url"].to_pylist():
        try:
            ids.append(url_id(normalize(url)))
        except InvalidURLError:
            ids.append(url_id(url.strip()))
    n = batch.num_rows
    columns = {
        "url_id": pa.array(ids, pa.int64()),
        "host": batch["host"].cast(pa.string()),
        "cycle_id": pa.array([int(cycle_id)] * n, pa.int64()),
        "fetched_at": pa.array([at] * n, HISTORY_SCHEMA.field("fetched_at").type),
        "outcome": pa.array(["error"] * n, pa.string()),
        "bytes": pa.array([0] * n, pa.int64()),
        "cost": pa.array([0.0] * n, pa.float64()),
        "retries": pa.array([0] * n, pa.int16()),
        "reason": pa.array([reason[:500]] * n, pa.string()),
    }
    table = pa.Table.from_arrays(
        [columns[f.name] if f.name in columns else pa.nulls(n, f.type) for f in HISTORY_SCHEMA],
        schema=HISTORY_SCHEMA,
    )
    path = folder / "parts" / f"{batch_name}.parquet"
    _write_part(table, path)
    return path


def _outcome(
    name: str, part: Path, fetch_s: float, write_s: float, started: float, *, resumed: bool = False
) -> BatchOutcome:
    table = pq.read_table(part, columns=["outcome", "bytes", "cost", "reason"])
    outcome = table["outcome"]
    observed = pc.is_in(outcome, pa.array(sql_list(OBSERVED)))
    failed = int(pc.sum(pc.invert(observed)).as_py() or 0)
    error = None
    errors = pc.filter(table["reason"], pc.starts_with(table["reason"], "batch failed"))
    if len(errors):
        error = errors[0].as_py()
    return BatchOutcome(
        name=name,
        part=str(part),
        urls=table.num_rows,
        observations=table.num_rows - failed,
        failed=failed,
        bytes=int(pc.sum(table["bytes"]).as_py() or 0),
        cost=float(pc.sum(table["cost"]).as_py() or 0.0),
        fetch_s=fetch_s,
        write_s=write_s,
        resumed=resumed,
        error=error,
        started=started,
        ended=time.time(),
    )


def metrics_dict(metrics: BatchMetrics) -> dict[str, Any]:
    data = asdict(metrics)
    data["pages_per_s"] = metrics.pages_per_s
    return data


def read_batch_metrics(root: str | Path, cycle_id: int) -> list[dict[str, Any]]:
    """The pressure metrics of every batch that finished (for the reports)."""
    folder = work_dir(root, cycle_id) / "metrics"
    return [json.loads(p.read_text()) for p in sorted(folder.glob("batch-*.json"))]


# ---------------------------------------------------------------------- commit


def commit_cycle(
    root: str | Path, cycle_id: int, *, clock: Callable[[], datetime] | None = None
) -> CycleCommit:
    """Publish every batch's part as the cycle, atomically (see the module docstring).

    A batch without a part (it never ran, or its run was lost) is recorded as ``error``
    rows first, so its pages are rescheduled rather than forgotten. WARC files of the cycle
    that no part lists (runs that crashed or failed) are deleted before the publication,
    and those only a replaced version of the cycle named, after it.
    """
    wall_start = time.time()
    started = time.perf_counter()
    specs = read_batches(root, cycle_id)
    folder = work_dir(root, cycle_id)
    missing = 0
    for spec in specs:
        if not (folder / "parts" / f"{spec.name}.parquet").exists():
            missing += 1
            write_failed_part(
                root, cycle_id, spec.name, "batch produced no result (not run)", clock=clock
            )
    parts = [str(folder / "parts" / f"{spec.name}.parquet") for spec in specs]
    # One part in memory at a time: each is validated and staged on its own, and the
    # commit streams the staged files (memory does not grow with the cycle's rows).
    # The WARC files the parts name are collected as they are read (the archive would
    # otherwise open all of them again: 0.4-0.6 s of a million-row commit).
    named: set[str] = set()
    with HistoryStore(root).cycle_writer(int(cycle_id)) as writer:
        for part in parts:
            rows, metadata = _read_part(part)
            named |= files_named(rows, metadata)
            writer.write_part(rows)
        archive = CycleArchive(root, int(cycle_id), parts, named=named)
        orphans = archive.remove_orphans()
    assert writer.result is not None
    result: CommitResult = writer.result
    orphans += archive.remove_replaced()
    log.info(
        "cycle %s committed: %d rows, %d observations, %d batches (%d never ran)",
        cycle_id,
        result.rows,
        result.observations,
        len(specs),
        missing,
    )
    return CycleCommit(
        int(cycle_id),
        result.rows,
        result.observations,
        len(specs),
        missing,
        time.perf_counter() - started,
        result.files,
        wall_start,
        time.time(),
        len(orphans),
    )


# ---------------------------------------------------------------------- helpers


def _utc_now() -> datetime:
    return datetime.now(UTC)


def fixed_clock(at: datetime) -> Callable[[], datetime]:
    """A clock that always says ``at`` (a simulated cycle instant)."""
    if at.tzinfo is None:
        raise CycleInputError(f"a cycle time must be timezone-aware, got {at!r}")
    return lambda: at


def read_part(path: str | Path) -> pa.Table:
    """A batch's staged rows; a damaged part raises HistoryCorruptError naming it."""
    return _read_part(path)[0]


def _read_part(path: str | Path) -> tuple[pa.Table, dict[bytes, bytes] | None]:
    """:func:`read_part`, and the part's schema metadata (the batch run's WARC list)."""
    try:
        # a part in HISTORY_SCHEMA (every part this module writes) is read as the file
        # alone (``ParquetFile``), not through a dataset scan (``pq.read_table``): 40 % less
        # CPU for a part of a few thousand rows, the same table (the dataset's schema
        # carries no metadata); another part is conformed by the dataset scan, as it was.
        # On this thread, without pre-buffering: a part is one small row group, and the
        # reader's threads and read-ahead cost more than they save (bench_commit's 500
        # parts of 2,000 rows, best of 3 in 2 alternating rounds at load 17: user CPU the
        # same, 0.26-0.33 s either way; system 0.06-0.08 -> 0.01-0.02 s)
        with pq.ParquetFile(path, pre_buffer=False) as part:
            schema = part.schema_arrow
            if schema.remove_metadata().equals(HISTORY_SCHEMA):
                rows = part.read(use_threads=False)
                return rows.replace_schema_metadata(None), schema.metadata
        return pq.read_table(path, schema=HISTORY_SCHEMA), schema.metadata
    except (pa.ArrowException, OSError) as exc:
        raise HistoryCorruptError(
            f"staged part {path} is unreadable ({exc}); nothing was committed. Delete it and "
            "re-run the cycle: that batch is fetched again."
        ) from exc


def _write_part(table: pa.Table, path: Path) -> None:
    """Write a part durably and atomically (``tasks.store.durable``).

    A failed write (a full disk) leaves no temporary file and raises HistoryWriteError
    naming the part and the cause.
    """
    try:
        durable_write_parquet(table, path)
    except OSError as exc:
        raise write_error(f"part of {path.stem} (not committed yet)", path, exc) from exc


def _write_json(path: Path, data: dict[str, Any]) -> None:
    durable_write_text(path, json.dumps(data, default=str))
