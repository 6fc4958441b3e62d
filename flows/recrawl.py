"""Prefect flow ``recrawl``: the daily cycle (plan, fetch host batches, commit, report).

Shape of a run:

1. ``refresh-signals`` reads the due hosts' sitemaps and feeds (cheap change signals,
   ``tasks.discovery.signals``), then ``plan-cycle`` writes the plan Parquet; ``split-plan``
   cuts it into host batches under ``<root>/_work/cycle=<id>/`` (``tasks.cycle.work``). A
   re-run of a cycle that crashed resumes its split; a cycle already committed is left alone
   unless ``replace``.
2. ``host-limits`` creates or checks the ``tag:host:<h>`` concurrency limits and repairs
   slots a crashed run left taken (``tasks.cycle.host_limits``). Before anything, earlier runs on
   the same root whose process died (SIGKILL) are set ``Crashed`` (``tasks.cycle.run_claims``).
   Where listings or JSON endpoints are declared, ``listing-pass`` then reads the due listings,
   fetches the items they show changed (through their endpoint where one is declared), records
   the others unchanged and takes both out of the planner's batches, within the cycle's budget
   (``tasks.listings``); ``listing-summaries`` keeps the summaries after the commit.
3. One ``fetch-host-batch`` task per batch, tagged ``host:<h>`` for each of its hosts, so
   the server never runs two batches of a host at once, across runs and machines. Slices of
   one large host are chained in this run (``wait_for``) instead of polling for the slot.
   Pacing between requests happens inside the task (the fetch engine), which keeps its slots
   until the pacing gap after its hosts' last requests has passed (``hold_until_paced``):
   the next holder may be another process. Tasks get and return only names, paths and
   counts; ``cache_policy=NO_CACHE`` throughout.
4. ``commit-cycle`` publishes every part at once; batches that failed are in it as
   ``error`` rows, so a failed host batch never fails the cycle and its pages come back.
   ``cycle-content`` then lands the fetched pages' new links in the catalog, honours their
   ``rel="canonical"`` and flags near-duplicates (``tasks.cycle.content``); a re-run of a
   cycle committed just before a crash does it then. ``signal-evidence`` labels the signals
   the plan saw with what the fetches found (each host's trust in them), ``probe-render``
   judges which of the cycle's hosts need a browser (``tasks.render.hosts``).
5. ``report-cycle`` writes the numbers, plots and the keyed artifacts.

Sync flow, sync tasks, a thread pool: an async task called from a sync flow would return a
coroutine that never runs. Each fetch task runs its own event loop (``asyncio.run``).
"""

from __future__ import annotations

import time
from dataclasses import asdict
from datetime import UTC, datetime
from typing import Any, cast
from urllib.parse import urlsplit
from uuid import UUID

from prefect import flow, task
from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)
from prefect.cache_policies import NO_CACHE
from prefect.futures import PrefectFuture, as_completed
from prefect.task_runners import TaskRunner, ThreadPoolTaskRunner
from pydantic import ValidationError

from flows.plan import next_cycle_id, plan_cycle_task
from flows.run_context import in_run, run_logger
from models.estimation.prior_names import PriorName
from models.planning.cost import CostModelName
from tasks.cycle.batch_workers import BatchWorkers, check_batch_workers
from tasks.cycle.content import (
    apply_cycle_content,
    content_pending,
    read_near_duplicate_report,
)
from tasks.cycle.host_limits import ensure_tag_limits
from tasks.cycle.memory import keep_freed_memory
from tasks.cycle.offload import Offloader, OffloadSettings, content_pool
from tasks.cycle.planning import plan_path as plan_path_of
from tasks.cycle.run_claims import claim_and_crash_dead_runs
from tasks.cycle.work import (
    BatchOutcome,
    BatchSpec,
    CycleCommit,
    batch_spec,
    commit_cycle,
    cycle_state,
    discard_work,
    engine_state,
    fixed_clock,
    host_shard,
    pacing_left_s,
    read_batch_metrics,
    read_batches,
    run_host_batch,
    split_plan,
    work_dir,
)
from tasks.discovery.lastmod_trust import record_signal_evidence
from tasks.discovery.signals import refresh_signals_sync
from tasks.fetch.batch_slots import BATCH_THREADS, batch_slots
from tasks.fetch.settings import FetchSettings
from tasks.listings.cycle import (
    apply_listing_summaries,
    listings_pending,
    pass_hosts,
    run_listing_pass,
)
from tasks.render.hosts import probe_cycle_hosts
from tasks.reports.cycle_report import (
    cycle_numbers,
    embed_plots,
    hosts_under_pressure,
    plan_summary,
    record_cycle,
    summary_markdown,
    write_plots,
)
from tasks.store.durable import durable_write_text

#: Host batches run at once by one flow run (threads; each batch fetches its hosts
#: concurrently itself): ACTIVE_BATCHES of them at full speed, the others in their tail,
#: waiting on a few slow or failing hosts (``tasks.fetch.batch_slots``).
PARALLEL_BATCHES = BATCH_THREADS
#: The key of the cycle summary artifact (the newest cycle's is the key's latest version).
SUMMARY_ARTIFACT_KEY = "recrawl-summary"


def summary_artifact_description(cycle: int) -> str:
    return f"recrawl cycle {cycle} summary"


@task(name="split-plan", cache_policy=NO_CACHE)
def split_plan_task(
    root: str, cycle: int, plan_path: str, max_urls: int, max_hosts: int, host_shards: int = 0
) -> dict[str, Any]:
    """The host batches (names, paths, hosts, counts) and when the body ran."""
    started = time.time()
    specs = split_plan(
        root, cycle, plan_path, max_urls=max_urls, max_hosts=max_hosts, host_shards=host_shards
    )
    return {"batches": specs, "started": started, "ended": time.time()}


@task(name="resume-split", cache_policy=NO_CACHE)
def resume_split_task(root: str, cycle: int) -> list[BatchSpec]:
    return read_batches(root, cycle)


@task(name="host-limits", cache_policy=NO_CACHE)
def host_limits_task(tags: list[str], slots: int = 1) -> dict[str, Any]:
    """Create or check one limit per tag (``tag:host:<h>`` or ``tag:hostshard:<k>``)."""
    started = time.time()
    report = ensure_tag_limits(tags, slots=slots)
    return {
        "created": report.created,
        "existing": report.existing,
        "repaired": report.repaired,
        "started": started,
        "ended": time.time(),
    }


@task(name="fetch-host-batch", cache_policy=NO_CACHE)
def fetch_host_batch_task(
    root: str,
    cycle: int,
    batch: str,
    fetch: dict[str, Any] | None = None,
    at: datetime | None = None,
    cost_model: str = "credits",
    window_s: float | None = None,
    host_tags: list[str] | None = None,
    content_workers: int = 0,
    dask_address: str | None = None,
    batch_workers: int = 0,
) -> BatchOutcome:
    """Fetch one host batch; its rows become the batch's staged part of the cycle.

    ``batch_workers > 0``: the batch runs in one of that many worker processes of this
    process (``tasks.cycle.batch_workers``), chosen by its first host; this task holds the
    slots meanwhile and sleeps the pacing left its worker reports.

    ``host_tags``: the batch's ``host:<h>`` (or ``hostshard:<k>``) tags; the task holds a slot
    of each one's limit while it runs, through the process's one API client
    (``tasks.fetch.batch_slots``), instead of tagging the task run.

    The task ends (and gives its hosts' slots back) only once the pacing gap after each
    host's last request has passed: the next holder of a slot may be another process, on
    another machine, which knows nothing of this one's pacing and starts at once.
    """
    started = time.time()
    settings = FetchSettings(**(fetch or {})).with_secrets()  # api_key_block, if named
    with batch_slots(host_tags or [], holder=_task_run_id()):
        if batch_workers:
            spec = batch_spec(root, cycle, batch)
            run = BatchWorkers(batch_workers).run(
                root,
                cycle,
                batch,
                spec.hosts if spec is not None else (),
                settings=settings,
                at=at,
                cost_model=cost_model,
                window_s=window_s,
            )
            held = run.pacing_left_s
            time.sleep(held)
            outcome = run.result()
        else:
            outcome, held = _run_inline(
                root,
                cycle,
                batch,
                settings,
                at,
                cost_model,
                window_s,
                content_workers,
                dask_address,
            )
    run_logger().info(
        "%s: %d URLs, %d observations, %d failed, %.1f s (%.1f s of it the last pacing gap)%s",
        batch,
        outcome.urls,
        outcome.observations,
        outcome.failed,
        time.time() - started,
        held,
        " (resumed: already fetched)" if outcome.resumed else "",
    )
    return outcome


def _run_inline(
    root: str,
    cycle: int,
    batch: str,
    settings: FetchSettings,
    at: datetime | None,
    cost_model: str,
    window_s: float | None,
    content_workers: int,
    dask_address: str | None,
) -> tuple[BatchOutcome, float]:
    """The batch in this thread; then the pacing gap after its hosts' last requests."""
    try:
        outcome = run_host_batch(
            root,
            cycle,
            batch,
            settings=settings,
            clock=fixed_clock(at) if at is not None else None,
            cost_model=cost_model,
            window_s=window_s,
            offload=content_offloader(content_workers, dask_address),
        )
    finally:
        held = hold_until_paced(root, cycle, batch, settings)
    return outcome, held


def _task_run_id() -> UUID | None:
    from prefect.context import TaskRunContext

    context = TaskRunContext.get()
    return context.task_run.id if context is not None else None


def content_offloader(workers: int, dask_address: str | None) -> Offloader | None:
    """Where a batch's extraction, hashing, links and WARC writing run: this process's
    worker processes (``workers > 0``), a Dask cluster (``dask_address``), or inline."""
    if dask_address:
        from tasks.cycle.offload_dask import dask_content_pool

        return dask_content_pool(dask_address)
    if workers > 0:
        return content_pool(OffloadSettings(workers=workers))
    return None


def hold_until_paced(root: str, cycle: int, batch: str, settings: FetchSettings) -> float:
    """Sleep until every host of the batch may be contacted again; the seconds slept.

    The process's engine state knows when each host's last pacing gap ends; the split's
    index already names the batch's hosts as the engine does (the catalog's normalized
    ``host[:port]``).
    """
    spec = batch_spec(root, cycle, batch)
    if spec is None:
        return 0.0
    wait = pacing_left_s(engine_state(settings), spec.hosts, time.monotonic())
    time.sleep(wait)
    return wait


@task(name="listing-pass", cache_policy=NO_CACHE)
def listing_pass_task(
    root: str,
    cycle: int,
    fetch: dict[str, Any] | None = None,
    at: datetime | None = None,
    cost_model: str = "credits",
    host_shards: int = 0,
    budget: float | None = None,
) -> dict[str, Any]:
    """Declared listings read first: the items they show changed are fetched, the others
    recorded unchanged and left out of the planner's batches; endpoint hosts' pages fetched
    through their JSON (``tasks.listings.cycle``). Holds its hosts' slots like a batch.
    ``budget``: the cycle's; the pass spends first, the planner's batches keep what fits."""
    started = time.time()
    settings = FetchSettings(**(fetch or {})).with_secrets()
    hosts = pass_hosts(root)
    tags = {
        f"hostshard:{host_shard(h, host_shards)}" if host_shards else f"host:{h}" for h in hosts
    }
    with batch_slots(sorted(tags), holder=_task_run_id()):
        try:
            done = run_listing_pass(
                root,
                cycle,
                settings=settings,
                clock=fixed_clock(at) if at is not None else None,
                cost_model=cost_model,
                budget=budget,
            )
        finally:
            time.sleep(pacing_left_s(engine_state(settings), hosts, time.monotonic()))
    run_logger().info(
        "listings: %d of %d read; items %d unchanged (not fetched), %d changed, %d new; "
        "%d pages through their endpoint",
        done.listings_read,
        done.listings,
        done.unchanged,
        done.changed,
        done.new,
        done.through_endpoint,
    )
    return {**asdict(done), "started": started, "ended": time.time()}


@task(name="listing-summaries", cache_policy=NO_CACHE)
def listing_summaries_task(root: str, cycle: int) -> int:
    """After the commit: keep the summaries the cycle's listings showed, items a listing
    showed changed and no fetch observed marked pending (``apply_listing_summaries``)."""
    return apply_listing_summaries(root, cycle)


@task(name="commit-cycle", cache_policy=NO_CACHE)
def commit_cycle_task(root: str, cycle: int, at: datetime | None = None) -> CycleCommit:
    return commit_cycle(root, cycle, clock=fixed_clock(at) if at is not None else None)


@task(name="cycle-content", cache_policy=NO_CACHE)
def cycle_content_task(root: str, cycle: int, at: datetime | None = None) -> dict[str, Any]:
    """New links into the catalog, canonicals, near-duplicates (after the commit)."""
    started = time.time()
    result = apply_cycle_content(root, cycle, work_dir(root, cycle), now=at)
    return {**asdict(result), "started": started, "ended": time.time()}


@task(name="refresh-signals", cache_policy=NO_CACHE)
def refresh_signals_task(
    root: str, at: datetime | None = None, fetch: dict[str, Any] | None = None
) -> dict[str, Any]:
    """The due hosts' sitemaps (lastmod into the catalog) and feeds, read before the plan."""
    started = time.time()
    done = refresh_signals_sync(root, at or datetime.now(UTC), fetch=FetchSettings(**(fetch or {})))
    run_logger().info(
        "signals: %d of %d hosts read, %d lastmods updated, %d feeds read (%d entries)",
        done.due,
        done.hosts,
        done.sitemap_pages_updated,
        done.feeds.read,
        done.feeds.entries,
    )
    return {**asdict(done), "started": started, "ended": time.time()}


@task(name="signal-evidence", cache_policy=NO_CACHE)
def signal_evidence_task(root: str, cycle: int) -> dict[str, int]:
    """What the cycle's fetches found against the signals its plan saw (after the commit)."""
    return record_signal_evidence(root, cycle)


@task(name="probe-render", cache_policy=NO_CACHE)
def probe_render_task(
    root: str, cycle: int, at: datetime | None = None, fetch: dict[str, Any] | None = None
) -> dict[str, Any]:
    """Which of the cycle's hosts need a browser, for the hosts due (after the commit)."""
    probe = probe_cycle_hosts(
        root, cycle, at or datetime.now(UTC), settings=FetchSettings(**(fetch or {}))
    )
    if probe.skipped and probe.due:
        run_logger().info("render probe of %d hosts skipped: %s", probe.due, probe.skipped)
    return asdict(probe)


@task(name="report-cycle", cache_policy=NO_CACHE)
def report_cycle_task(
    root: str,
    cycle: int,
    plan_path: str,
    cost_model: str,
    failed_batches: int = 0,
    at: datetime | None = None,
    prior: PriorName = "mixture",
) -> dict[str, Any]:
    """Numbers, plots and keyed artifacts of the committed cycle; then drop its work files.

    Production has no ground truth: the realized freshness is NaN ("n/a" in the report). The
    evaluation harness records it afterwards (``flows.evaluation.truth.record_realized``).
    """
    from tasks.cycle.estimation import load_rate_estimates

    started = time.time()
    numbers = cycle_numbers(
        root,
        cycle,
        plan_summary(plan_path),
        at=at.isoformat() if at is not None else "",
        failed_batches=failed_batches,
    )
    pressure = hosts_under_pressure(read_batch_metrics(root, cycle))
    cycles = record_cycle(root, numbers)
    estimates = load_rate_estimates(root, prior=prior)
    rates = estimates["rate"].to_numpy()
    plots = write_plots(root, cycle, cycles, numbers, rates)
    markdown = summary_markdown(
        numbers,
        pressure,
        plots,
        cost_model,
        read_near_duplicate_report(root, cycle),
        prior=str(estimates.attrs["prior_description"]),
    )
    durable_write_text(plots["freshness"].parent / "summary.md", markdown)
    if in_run():
        create_markdown_artifact(
            embed_plots(markdown, plots),
            key=SUMMARY_ARTIFACT_KEY,
            description=summary_artifact_description(cycle),
        )
        create_table_artifact(
            [{str(k): v for k, v in row.items()} for row in pressure.to_dict(orient="records")]
            or [{"host": "(none)", "requests": 0, "throttles": 0}],
            key="recrawl-hosts-under-pressure",
            description=f"cycle {cycle}: hosts whose adaptive limit fell, throttled or paused",
        )
    discard_work(root, cycle)
    return {
        "report": str(plots["freshness"].parent / "summary.md"),
        "changes_found": numbers.changes_found,
        "unchanged": numbers.unchanged,
        "observations": numbers.observations,
        "cost": numbers.cost,
        "cost_per_change": numbers.cost_per_change,
        "expected_freshness": numbers.expected_freshness,
        "realized_freshness": numbers.realized_freshness,
        "pressured_hosts": len(pressure),
        "started": started,
        "ended": time.time(),
    }


#: Prefect's ``task_runner`` parameter wants a ``TaskRunner[PrefectFuture[Any]]``; the thread
#: pool's runner is one of ``PrefectConcurrentFuture`` (a subclass), and ``TaskRunner`` is
#: invariant in its future type.
_RUNNER = cast("TaskRunner[PrefectFuture[Any]]", ThreadPoolTaskRunner(max_workers=PARALLEL_BATCHES))


@flow(name="recrawl", task_runner=_RUNNER)
def recrawl_flow(
    root: str = "data",
    budget: float = 1000.0,
    cycle: int | None = None,
    host_capacity: float = 500.0,
    cost_model: CostModelName = "credits",
    at: datetime | None = None,
    max_batch_urls: int = 2_000,
    max_hosts_per_batch: int = 40,
    host_shards: int = 0,
    fetch: dict[str, Any] | None = None,
    slices: dict[str, Any] | None = None,
    window_s: float | None = None,
    content_workers: int = 0,
    dask_address: str | None = None,
    batch_workers: int = 0,
    replace: bool = False,
    seed: int | None = None,
    prior: PriorName = "mixture",
    signals: bool = True,
    render_probe: bool = True,
    periodic: bool = False,
) -> dict[str, Any]:
    """One recrawl cycle (see the module docstring).

    ``at`` is the cycle's time (a simulated one on the sandbox; default: now, wall clock);
    ``fetch`` overrides fetch settings (``tasks.fetch.settings.FetchSettings`` fields);
    ``slices`` overrides the budget's reserved slices (``models.planning.select.Slices``).
    The report's realized freshness is "n/a": ground truth exists only on the sandbox, where
    the evaluation harness adds it after the run (``flows.evaluation.sandbox_runs.
    recrawl_with_truth``). ``host_shards > 0`` tags each batch with one ``hostshard:<k>`` instead of
    one ``host:<h>`` per host (far fewer slot acquisitions with thousands of hosts; every
    run and machine must use the same value).
    ``seed`` seeds the plan's random verification sample; by default the cycle id, so each
    cycle verifies other pages. ``prior`` is the rate estimator's (plan and report; a
    weaker one stands in where it cannot be fitted, and the report names it).
    ``content_workers > 0`` runs each batch's extraction, hashing, links and WARC writing in
    that many worker processes of the flow's process, fed through bounded queues
    (``tasks.cycle.offload``); ``dask_address`` on a Dask cluster instead
    (``tasks.cycle.offload_dask``). Default: inline, in the batch's thread.
    ``batch_workers > 0`` runs each whole batch (fetching too) in one of that many persistent
    worker processes, chosen by a stable hash of its first host, so the fetching uses more
    than one core (``tasks.cycle.batch_workers``); not with ``content_workers`` or
    ``dask_address`` (the batch workers do their content work themselves). Default 0.
    ``signals``: before the plan, the due hosts' sitemaps and feeds are read
    (``refresh-signals``, ``tasks.discovery.signals``); after the commit, what the fetches
    found is recorded against them (``signal-evidence``), so each host's trust is learned
    and the next plans reorder its revisits by them. ``render_probe``: after the commit, the
    cycle's hosts due for a rendering verdict are probed (``probe-render``; nothing without
    a Chromium), so the next cycles render the hosts that need it. ``periodic``: the plan
    detects pages that change once every 2-30 cycles and visits them on the first cycle after
    their expected change (``tasks.cycle.planning.plan_cycle``; off by default: it reads the
    last 60 cycles of history at each plan).
    """
    if content_workers < 0:
        raise ValueError(f"content_workers must be >= 0, got {content_workers}")
    if check_batch_workers(batch_workers) and (content_workers or dask_address):
        raise ValueError(
            "batch_workers runs each batch's content work in its own worker: leave "
            f"content_workers ({content_workers}) at 0 and dask_address unset with it"
        )
    keep_freed_memory()
    logger = run_logger()
    flow_started = time.time()
    try:
        FetchSettings(**(fetch or {}))
    except ValidationError as exc:
        raise ValueError(f"bad fetch settings: {exc.errors()[0]['msg']}") from None
    proxy = str((fetch or {}).get("proxy_url") or "")
    if "api_key" in (fetch or {}) or "@" in urlsplit(proxy).netloc:  # Prefect stores these
        raise ValueError(
            "secrets are not flow parameters: set RECRAWL_API_KEY / RECRAWL_PROXY_URL in the "
            "worker's environment, or name a Prefect Secret block in fetch['api_key_block']"
        )
    crashed_runs = claim_and_crash_dead_runs(root)  # earlier runs here whose process died
    cycle_id = next_cycle_id(root) if cycle is None else cycle
    state = cycle_state(root, cycle_id)
    if state == "committed" and not replace:
        if content_pending(work_dir(root, cycle_id)):  # a crash came right after the commit
            cycle_content_task(root, cycle_id, at)
        if listings_pending(root, cycle_id):  # nor were its listing summaries kept
            listing_summaries_task(root, cycle_id)
        discard_work(root, cycle_id)
        logger.info(
            "cycle %s is already committed; nothing to do (replace=True redoes it)", cycle_id
        )
        return {"cycle": cycle_id, "status": "already committed"}
    timings: dict[str, tuple[float, float]] = {}
    if state == "resume" and not replace:
        specs = resume_split_task(root, cycle_id)
        plan_path = str(plan_path_of(root, cycle_id))
        logger.info("resuming cycle %s: %d batches already split", cycle_id, len(specs))
    else:
        discard_work(root, cycle_id)
        if signals:
            refreshed = refresh_signals_task(root, at, fetch)
            timings["signals"] = (refreshed["started"], refreshed["ended"])
        planned = plan_cycle_task(
            root,
            cycle_id,
            budget,
            host_capacity,
            cost_model,
            cycle_id if seed is None else seed,
            at,
            slices,
            prior=prior,
            periodic=periodic,
        )
        plan_path = planned["path"]
        timings["plan"] = (planned["started"], planned["ended"])
        split = split_plan_task(
            root, cycle_id, plan_path, max_batch_urls, max_hosts_per_batch, host_shards
        )
        specs = split["batches"]
        timings["split"] = (split["started"], split["ended"])
    limits = host_limits_task(sorted({tag for spec in specs for tag in spec.tags}))
    timings["limits"] = (limits["started"], limits["ended"])
    listing = None
    if pass_hosts(root):  # listings or endpoints declared: read before the batches
        listing = listing_pass_task(root, cycle_id, fetch, at, cost_model, host_shards, budget)
        timings["listings"] = (listing.pop("started"), listing.pop("ended"))

    outcomes, failed = _fetch_batches(
        root,
        cycle_id,
        specs,
        fetch,
        at,
        cost_model,
        window_s,
        content_workers,
        dask_address,
        batch_workers,
    )
    commit = commit_cycle_task(root, cycle_id, at)
    if listing is not None:
        listing["kept_summaries"] = listing_summaries_task(root, cycle_id)
    content = cycle_content_task(root, cycle_id, at)
    evidence: dict[str, int] = {}
    rendering: dict[str, Any] = {}
    if signals:
        started = time.time()
        evidence = signal_evidence_task(root, cycle_id)
        timings["signal-evidence"] = (started, time.time())
    if render_probe:
        started = time.time()
        rendering = probe_render_task(root, cycle_id, at, fetch)
        timings["probe-render"] = (started, time.time())
    report = report_cycle_task(root, cycle_id, plan_path, cost_model, len(failed), at, prior)
    summary = {
        "cycle": cycle_id,
        "status": "committed",
        "batches": len(specs),
        "failed_batches": failed,
        "rows": commit.rows,
        "observations": commit.observations,
        "fetch_s": sum(o.fetch_s for o in outcomes),
        "write_s": sum(o.write_s for o in outcomes) + commit.commit_s,
        "repaired_limits": list(limits["repaired"]),
        "crashed_runs": list(crashed_runs),
        "links_added": content["links_added"],
        "near_duplicate_clusters": content["clusters"],
        "listing_pass": listing,
        "signal_evidence": evidence,
        "render_probe": rendering,
        "task_windows": [
            *[(name, *window) for name, window in timings.items()],
            *[(o.name, o.started, o.ended) for o in outcomes],
            ("commit", commit.started, commit.ended),
            ("content", content["started"], content["ended"]),
            ("report", report.pop("started"), report.pop("ended")),
        ],
        "flow_s": time.time() - flow_started,
        **report,
    }
    logger.info(
        "cycle %s: %d rows, %d observations, %d changes found, %d batches (%d failed)",
        cycle_id,
        commit.rows,
        commit.observations,
        report["changes_found"],
        len(specs),
        len(failed),
    )
    return summary


def _fetch_batches(
    root: str,
    cycle_id: int,
    specs: list[BatchSpec],
    fetch: dict[str, Any] | None,
    at: datetime | None,
    cost_model: str,
    window_s: float | None,
    content_workers: int = 0,
    dask_address: str | None = None,
    batch_workers: int = 0,
) -> tuple[list[BatchOutcome], list[str]]:
    """Submit one tagged task per batch, report progress, collect outcomes and failures."""
    logger = run_logger()
    futures: dict[str, PrefectFuture[BatchOutcome]] = {}
    for spec in specs:
        upstream = [futures[spec.after]] if spec.after in futures else None
        # the slots are taken inside the task (one API client per process), not by tags
        futures[spec.name] = fetch_host_batch_task.with_options(
            task_run_name=f"fetch-{spec.name}"
        ).submit(
            root,
            cycle_id,
            spec.name,
            fetch,
            at,
            cost_model,
            window_s,
            list(spec.tags),
            content_workers,
            dask_address,
            batch_workers,
            wait_for=upstream,
            return_state=False,  # the overload that takes wait_for
        )
    # a sync caller gets the UUID itself (the coroutine is for async callers)
    progress = cast(
        UUID,
        create_progress_artifact(
            0.0, key="recrawl-progress", description=f"cycle {cycle_id}: host batches done"
        ),
    )
    outcomes: list[BatchOutcome] = []
    failed: list[str] = []
    names = {id(f): name for name, f in futures.items()}
    for done, future in enumerate(as_completed(list(futures.values())), start=1):
        name = names[id(future)]
        # the local final state: without wait(), .state asks the server, which may not
        # have recorded it yet (task states travel as events), so a finished batch read
        # as "did not complete" and its rows were replaced by errors
        future.wait()
        if future.state.is_completed():
            outcomes.append(future.result())
        else:
            failed.append(name)
            logger.warning("host batch %s did not complete: %s", name, future.state.message)
        update_progress_artifact(progress, 100.0 * done / max(len(futures), 1))
    return outcomes, failed
