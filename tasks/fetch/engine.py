"""The fetch engine: one call fetches a batch of URLs politely and returns one row per URL.

``fetch_batch`` opens one client (``tasks.fetch.client``: aiohttp, or httpx), puts the URLs
into per-host lanes of a
``models.fetching.frontier.BatchFrontier`` (bounded: admission control, pacing, adaptive
limits, shedding), and runs ``concurrency`` workers that pull the next ready item straight
from it (no hand-off queue: a worker that is free takes work at once, and an idle one parks
in ``tasks.fetch.idle_workers``). Each worker fetches robots.txt or a page (``tasks.fetch.robots``,
``tasks.fetch.attempt``) and reports back; the frontier routes
the signal to the host that sent it (429, challenge, timeout, latency) or to the plan gate
(a scraping API's own 429), retries go back through admission with backoff and a per-batch
budget, and a 509 from the API stops the batch with every unsent URL recorded.

What lives across batches (per-host pacing and limits, validator trust, robots.txt cache,
the API's learned limit) is in ``EngineState``: pass the same one to consecutive batches.

With a ``tasks.archive.warc.WarcWriter`` every answered page exchange (redirect hops and retries
too;
not robots.txt, not a scraping API's own refusals) is archived as it completes, and each row
names its final exchange's record in ``warc_file``/``warc_offset``.
"""

from __future__ import annotations

import asyncio
import logging
import math
import random
from collections import Counter
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from models.discovery.urls import InvalidURLError, normalize, shown_url, url_id
from models.fetching.frontier import BatchFrontier, Shed, WorkItem
from models.fetching.host_state import HostState, Signal
from models.fetching.robots_policy import RobotsVerdict
from models.fetching.validators import conditional_headers, judge_validators
from models.outcomes import CONNECTION_FAILED
from tasks.fetch.attempt import (
    Attempt,
    BodyLimits,
    Deadlines,
    PageLimits,
    Route,
    fetch_page,
)
from tasks.fetch.client import Answer, PageClient, as_page_client, make_client
from tasks.fetch.idle_workers import IdleWorkers
from tasks.fetch.metrics import BatchMetrics, HostPressure
from tasks.fetch.robots import (
    HOST_FAILURES,
    RobotsCache,
    RobotsRules,
    fetch_robots,
    interpret_robots,
)
from tasks.fetch.rows import (
    AttemptCost,
    CostHook,
    RecordDigest,
    RecordHasher,
    Row,
    default_cost,
    record_hash,
    rows_table,
)
from tasks.fetch.settings import FetchSettings
from tasks.fetch.types import BatchResult, EngineState, FetchRequest

if TYPE_CHECKING:
    from tasks.archive.warc import WarcLocation, WarcWriter

log = logging.getLogger(__name__)

__all__ = ["BatchResult", "EngineState", "FetchRequest", "fetch_batch", "fetch_batch_sync"]

#: A Retry-After wait at least this long is logged (the batch would look idle otherwise).
_LOUD_WAIT_S = 60.0
#: Seconds between scans of all lanes for shedding (with a window) and for the oldest-item
#: metric (a scan touches every waiting URL).
_SHED_INTERVAL_S = 0.2
_AGE_INTERVAL_S = 1.0


async def fetch_batch(
    requests: Iterable[FetchRequest | str],
    *,
    cycle_id: int = 0,
    settings: FetchSettings | None = None,
    state: EngineState | None = None,
    window_s: float | None = None,
    clock: Callable[[], datetime] | None = None,
    record_hasher: RecordHasher = record_hash,
    cost_hook: CostHook = default_cost,
    warc: WarcWriter | None = None,
    on_tail: Callable[[], None] | None = None,
) -> BatchResult:
    """Fetch a batch of URLs and return one history row per distinct URL plus metrics.

    ``window_s`` is the batch's time window: what cannot be fetched within it is shed
    (lowest priority first) and recorded as ``shed``. ``clock`` gives ``fetched_at`` and
    robots.txt expiry (default: UTC wall clock; the sandbox passes its simulated clock).
    ``record_hasher(body, content_type, final_url)`` gives an ``ok`` body's record hash (or a
    ``RecordDigest`` with its simhash too). ``warc``: archive every answered exchange there
    (None: nothing is archived; the caller closes the writer before committing the rows).
    ``on_tail()`` is called once when the batch reaches its tail: at most
    ``settings.tail_host_share`` of its hosts (at least one) still have work, so what is left
    waits on a few throttled, failing or slow hosts (the caller can start another batch).
    """
    settings = settings or FetchSettings()
    if state is None:
        state = EngineState(settings)
    elif state.settings is not settings:
        state.settings = settings
    if window_s is not None and window_s <= 0:
        raise ValueError(f"window_s must be > 0 seconds, got {window_s}")
    batch = _Batch(settings, state, clock or _utc_now, record_hasher, cost_hook, warc, on_tail)
    client = as_page_client(make_client(settings))
    client.use_dns(state.dns)  # one lookup per host per TTL, for every batch of the state
    async with client:
        return await batch.run(client, requests, cycle_id, window_s)


def fetch_batch_sync(requests: Iterable[FetchRequest | str], **kwargs: object) -> BatchResult:
    """``fetch_batch`` for synchronous callers (the CLI, notebooks without a loop)."""
    return asyncio.run(fetch_batch(requests, **kwargs))  # type: ignore[arg-type]


def _utc_now() -> datetime:
    return datetime.now(UTC)


class _Batch:
    """The state of one ``fetch_batch`` call (one event loop, no locks needed)."""

    def __init__(
        self,
        settings: FetchSettings,
        state: EngineState,
        clock: Callable[[], datetime],
        hasher: RecordHasher,
        cost_hook: CostHook,
        warc: WarcWriter | None = None,
        on_tail: Callable[[], None] | None = None,
    ) -> None:
        self.settings = settings
        self.state = state
        self.clock = clock
        self.hasher = hasher
        self.cost_hook = cost_hook
        self.warc = warc
        self.warc_failures = 0
        self.rng = random.Random(settings.seed)
        api_key = settings.api_key.get_secret_value() if settings.api_key else None
        self.route = Route(settings.mode, settings.api_url, settings.api_key_header, api_key)
        self.policy = settings.address_policy
        self.page_limits = PageLimits(
            BodyLimits(
                settings.max_body_bytes,
                settings.max_decompression_ratio,
                tuple(t.lower() for t in settings.accepted_content_types),
                settings.accept_missing_content_type,
            ),
            settings.request_timeout_s,
            settings.max_redirects,
        )
        self.retry_policy = settings.retry_policy
        self.validator_policy = settings.validator_policy
        self.requests: list[FetchRequest] = []
        self.rows: list[Row | None] = []
        self.started_at: dict[int, datetime] = {}
        self.spent_bytes: dict[int, int] = {}
        self.spent_cost: dict[int, float] = {}
        self.last_attempt: dict[int, Attempt] = {}
        self.attempts = 0
        self.robots_fetches = 0
        self.retries_left = 0
        self.retry_budget = 0
        self.retries_refused = 0
        self.plan_throttles = 0
        self.max_oldest_age = 0.0
        self.next_shed = self.next_age = 0.0
        self.stopped = False
        self.on_tail = on_tail
        self.tail_at: float | None = None  # seconds into the batch when its tail began
        self.next_tail = 0.0
        self.host_base: dict[str, tuple[int, int]] = {}  # requests, throttles before the batch
        self.waits_logged: set[str] = set()  # hosts whose long Retry-After wait was logged
        # origin -> (its robots.txt rules, loop time they expire): see _rules_at
        self.rules_until: dict[str, tuple[RobotsRules, float]] = {}
        self.clock_is_utc = clock is _utc_now

    # ------------------------------------------------------------------ setup

    async def run(
        self,
        client: PageClient,
        requests: Iterable[FetchRequest | str],
        cycle_id: int,
        window_s: float | None,
    ) -> BatchResult:
        loop = asyncio.get_running_loop()
        self.loop = loop
        self.client = client
        begin = self.begin = loop.time()
        settings = self.settings
        self.frontier = BatchFrontier(
            pacing=settings.pacing_policy,
            backoff=settings.throttle_policy,
            slow_factor=settings.slow_latency_factor,
            new_host_state=self.state.host,
            max_host_queue=settings.max_host_queue,
            max_urls=settings.max_batch_urls,
            plan_gate=self.state.plan_gate,
            deadline=None if window_s is None else begin + window_s,
            rng=self.rng,
        )
        items = self._admit_requests(requests, begin)
        self.retry_budget = self.retries_left = settings.retry_budget(len(self.requests))
        for item in self.frontier.admit_many(items, begin):
            self._record_unsent(item, "admission rejected: host lane or batch full")
        self.idle = IdleWorkers(loop)
        self.deadlines = Deadlines(self.page_limits.timeout_s)  # one timer for every attempt
        workers = [asyncio.create_task(self._work()) for _ in range(settings.concurrency)]
        try:
            await asyncio.gather(*workers)
        finally:
            for worker in workers:
                worker.cancel()
            await asyncio.gather(*workers, return_exceptions=True)
            self.deadlines.close()
        elapsed = loop.time() - begin
        rows = [row if row is not None else self._lost(i) for i, row in enumerate(self.rows)]
        metrics = self._metrics(rows, elapsed)
        log.info("fetch batch: %s", metrics.summary())
        return BatchResult(rows_table(rows, cycle_id), metrics)

    def _admit_requests(self, requests: Iterable[FetchRequest | str], now: float) -> list[WorkItem]:
        """Normalize, de-duplicate and check the URLs; queue robots.txt fetches as needed."""
        items: list[WorkItem] = []
        by_url: dict[str, WorkItem] = {}
        origins: dict[str, tuple[str, str | None]] = {}  # origin -> (host, refusal)
        wall = self.clock()
        for raw in requests:
            request = FetchRequest(raw) if isinstance(raw, str) else raw
            try:
                url = normalize(request.url)
            except InvalidURLError as exc:
                scheme = _raw_scheme(request.url)
                refused = self.policy.scheme_refusal(scheme) if scheme else None
                if refused is not None:
                    self._bad_url(request, f"address refused: {refused}", wall, "refused_address")
                else:
                    self._bad_url(request, f"bad URL: {exc}", wall)
                continue
            origin = RobotsCache.key(url)  # scheme://netloc, sliced (normalized URL)
            known = origins.get(origin)
            if known is None:  # once per origin: splitting and judging an address cost
                parts = urlsplit(url)
                known = origins[origin] = (
                    parts.netloc,
                    self.policy.scheme_refusal(parts.scheme)
                    or self.policy.host_refusal(parts.hostname or ""),
                )
                first_of_origin = True
            else:
                first_of_origin = False
            host, refused = known
            if refused is not None:  # an IP literal: judged here, before any request
                self.requests.append(request)
                self.rows.append(
                    Row(
                        url_id(url),
                        host,
                        wall,
                        "refused_address",
                        reason=f"address refused: {refused}",
                    )
                )
                continue
            seen = by_url.get(url)
            if seen is not None:  # same page twice: fetch once, at the higher priority
                seen.priority = max(seen.priority, request.priority)
                continue
            index = len(self.requests)
            self.requests.append(request)
            self.rows.append(None)
            item = WorkItem(index, url, host, request.priority, origin=origin)
            by_url[url] = item
            items.append(item)
            if host not in self.host_base:
                host_state = self.state.host(host)
                self.host_base[host] = (host_state.requests, host_state.throttles)
            # Rules are per origin and the wall clock is read once: one look-up per origin.
            if first_of_origin and self.state.robots.get(url, wall) is None:
                self.frontier.require_robots(host, url, now)
        return items

    # ------------------------------------------------------------------ workers

    async def _work(self) -> None:
        """Pull the next ready item from the frontier, fetch it, repeat; park when idle."""
        frontier = self.frontier
        idle = self.idle
        while not idle.closed:
            now = self.loop.time()
            self._scan(now)
            item = frontier.next_dispatch(now)
            self._record_shed(frontier.take_shed())
            if item is None:
                if frontier.idle:
                    idle.close()  # nothing waits and nothing is in flight: the batch is done
                    return
                await idle.wait(frontier.next_wakeup(now))
                continue
            if idle.parked and frontier.has_ready():
                idle.wake_one()  # more is ready than this worker can take
            if item.kind == "page" and not self._allowed_now(item, now):
                continue
            try:
                if item.kind == "robots":
                    await self._fetch_robots(item)
                else:
                    await self._fetch_page(item)
            except Exception as exc:  # a bug must not hang the batch or lose the row
                log.exception("fetch engine failed on %s", item.url)
                if item.in_flight:
                    frontier.complete(item, self.loop.time(), 0.0, Signal.NOT_SENT)
                if item.kind == "page":
                    self._finish_unsent(item, "error", f"engine error: {exc!r}")
                else:  # no rules came: the host's pages would ask for robots.txt forever
                    for page in frontier.drain_host(item.host):
                        self._finish_unsent(page, "error", f"engine error on robots.txt: {exc!r}")
            if self.stopped and frontier.waiting:
                self._drain_stopped()
            idle.wake_one()  # a slot (or a retry) may have become ready for someone else

    def _scan(self, now: float) -> None:
        """Now and then: shed what cannot finish in the window, sample the oldest item."""
        frontier = self.frontier
        deadline = frontier.deadline
        if deadline is not None and (now >= self.next_shed or now >= deadline):
            self.next_shed = now + _SHED_INTERVAL_S
            frontier.shed_for_window(now)
        if now >= self.next_age and frontier.waiting:
            self.next_age = now + _AGE_INTERVAL_S
            self.max_oldest_age = max(self.max_oldest_age, frontier.oldest_waiting_age(now))
        if self.tail_at is None and now >= self.next_tail:
            self.next_tail = now + _SHED_INTERVAL_S
            self._check_tail(now)

    def _check_tail(self, now: float) -> None:
        """Call ``on_tail`` once few of the batch's hosts still have work (see fetch_batch)."""
        share = self.settings.tail_host_share
        hosts = len(self.frontier.lanes)
        if share <= 0 or hosts < 2:
            return
        if self.frontier.hosts_with_work() <= max(1, math.floor(share * hosts)):
            self.tail_at = now - self.begin
            if self.on_tail is not None:
                self.on_tail()

    def _allowed_now(self, item: WorkItem, now: float) -> bool:
        """Check robots.txt at dispatch; a denied or not-yet-known page gives its slot back."""
        rules = self._rules_at(item.url, item.origin, now)
        if rules is not None:
            denial = rules.denial(item.url, self.settings.robots_token)
            if denial is None:
                return True
            self.frontier.complete(item, now, 0.0, Signal.NOT_SENT)
            self._finish_unsent(item, "robots_denied", denial)
            return False
        # The rules expired during the batch: fetch them again before this page.
        self.frontier.complete(item, now, 0.0, Signal.NOT_SENT)
        self.frontier.require_robots(item.host, item.url, now)
        if not self.frontier.admit(item, now):
            self._record_unsent(item, "admission rejected: host lane or batch full")
        return False

    def _rules_at(self, url: str, origin: str, now: float) -> RobotsRules | None:
        """The robots.txt rules of ``url`` (of ``origin``) that hold at loop time ``now``.

        On the default (UTC) clock, rules found valid are kept with the loop time at which
        they expire, so a dispatch costs a dictionary look-up and no ``datetime.now``: an
        expiry ``expires_at - wall`` seconds after the look-up on the monotonic clock, the
        same instant unless the wall clock is stepped. Kept only while they are the cache's
        own entry (a newer robots.txt replaces them at once). Another clock (the sandbox's
        simulated one) is read on every call, as it need not move with the loop.
        """
        cache = self.state.robots
        held = self.rules_until.get(origin)
        if held is not None and now < held[1] and cache.held(origin) is held[0]:
            return held[0]
        wall = self.clock()
        rules = cache.get(url, wall)
        if rules is not None and self.clock_is_utc:
            self.rules_until[origin] = (rules, now + (rules.expires_at - wall).total_seconds())
        return rules

    async def _fetch_robots(self, item: WorkItem) -> None:
        settings = self.settings
        fetched = await fetch_robots(
            self.client,
            self.route,
            item.url,
            max_bytes=settings.robots_max_bytes,
            max_redirects=settings.robots_max_redirects,
            timeout_s=settings.robots_timeout_s,
        )
        now = self.loop.time()
        self.robots_fetches += 1
        frontier = self.frontier
        if fetched.plan_limit == "credits":
            frontier.complete(item, now, fetched.duration_s, Signal.NOT_SENT)
            self._stop_plan()
            return
        if fetched.plan_limit:
            self.plan_throttles += 1
            frontier.complete(item, now, fetched.duration_s, Signal.NOT_SENT, plan_throttled=True)
            return
        if fetched.failure in HOST_FAILURES:
            # The host itself is out of reach (a refused address, a broken TLS handshake):
            # its pages take that outcome; nothing is cached, the next batch judges again.
            signal = Signal.NOT_SENT if fetched.failure == "refused_address" else Signal.ERROR
            frontier.complete(item, now, fetched.duration_s, signal)
            for page in frontier.drain_host(item.host):
                self._finish_unsent(page, fetched.failure, f"{fetched.detail} (robots.txt)")
            return
        rules = interpret_robots(
            fetched,
            now=self.clock(),
            policy=settings.robots_cache_policy,
            token=settings.robots_token,
            max_bytes=settings.robots_max_bytes,
            crawl_delay_cap_s=settings.crawl_delay_cap_s if settings.honour_crawl_delay else None,
        )
        self.state.robots.put(item.url, rules)
        lane = frontier.lanes[item.host]
        lane.state.crawl_delay_s = rules.crawl_delay_s
        if fetched.status in (429, 503):
            signal = Signal.THROTTLED
        elif fetched.status is None and fetched.failure == "timeout":
            signal = Signal.TIMEOUT
        elif fetched.status is None or fetched.status >= 500:
            signal = Signal.ERROR
        else:
            signal = Signal.SUCCESS
        frontier.complete(item, now, fetched.duration_s, signal)
        if rules.verdict is RobotsVerdict.DISALLOW_ALL:
            denial = rules.denial(item.url, settings.robots_token)
            for page in frontier.drain_host(item.host):
                self._finish_unsent(page, "robots_denied", denial)

    async def _fetch_page(self, item: WorkItem) -> None:
        request = self.requests[item.index]
        lane_state = self.frontier.lanes[item.host].state
        conditional: dict[str, str]
        if request.etag is None and request.last_modified is None:
            conditional, probe = {}, False  # no validators: what conditional_headers says
        else:
            conditional, probe = conditional_headers(
                request.etag,
                request.last_modified,
                request.record_hash,
                lane_state.trust,
                self.validator_policy,
                self.rng,
                enabled=self.settings.conditional_requests,
            )
        self.started_at[item.index] = self.clock()
        attempt = await fetch_page(
            self.client,
            self.route,
            item.url,
            conditional,
            self.page_limits,
            self._robots_denial,
            # The host's last request in this batch: let the server close the connection
            # rather than leave it idle in the pool, where it only costs (httpx's own pool
            # rescans idle connections on every request).
            close=item.last_for_host and lane_state.in_flight == 1,
            archive=self._archive if self.warc is not None else None,
            deadlines=self.deadlines,
        )
        now = self.loop.time()
        self.attempts += 1
        self._spend(item.index, attempt)
        frontier = self.frontier
        if attempt.outcome == "api_exhausted":
            frontier.complete(item, now, attempt.duration_s, Signal.NOT_SENT)
            self._stop_plan()
            self._finish(item, attempt)
            return
        if attempt.plan_limit:
            self.plan_throttles += 1
            frontier.complete(item, now, attempt.duration_s, Signal.NOT_SENT, plan_throttled=True)
            if self.stopped or not self._retry(item, attempt, now, count_attempt=False):
                self._finish(item, attempt, self._deferral(attempt))
            return
        frontier.complete(
            item, now, attempt.duration_s, _signal(attempt), retry_after_s=attempt.retry_after_s
        )
        if attempt.retry_after_s is not None and self._long_wait(item, attempt):
            return
        record = None
        digest: RecordDigest | None = None
        if attempt.outcome == "ok" and attempt.body is not None:
            hashed = self.hasher(attempt.body, attempt.content_type, attempt.final_url or item.url)
            if not isinstance(hashed, (str, RecordDigest)):  # offloaded (tasks.cycle.offload)
                hashed = await hashed
            digest = hashed if isinstance(hashed, RecordDigest) else RecordDigest(hashed)
            record = digest.record_hash
            if request.etag is not None or request.last_modified is not None:
                self._judge_validators(request, lane_state, attempt, record, conditional, probe)
        elif attempt.outcome == "not_modified":
            lane_state.trust = lane_state.trust.record_not_modified()
        if attempt.retryable and self._retry(item, attempt, now, count_attempt=True):
            return
        self._finish(item, attempt, record=digest)

    def _long_wait(self, item: WorkItem, attempt: Attempt) -> bool:
        """Act on a long Retry-After from the host; True when the URL's row is written.

        Up to ``retry_after_cap_s`` the host's pause is honoured within the batch, and a
        wait of a minute or more is logged (once per host and batch) so a batch is never
        silently idle. A longer one is not waited for (nor cut short, which would send what
        the host refused): this URL and the host's waiting pages are recorded ``throttled``
        now, the reason naming when the host will take requests again.
        """
        wait = attempt.retry_after_s
        assert wait is not None
        cap = self.settings.retry_after_cap_s
        when = _time_after(self.clock(), wait)
        note = self._deferral(attempt)
        if note is None:
            if wait >= _LOUD_WAIT_S and item.host not in self.waits_logged:
                self.waits_logged.add(item.host)
                log.warning(
                    "%s asks for no request before %s (Retry-After %g s): its pages wait",
                    item.host,
                    when,
                    wait,
                )
            return False
        self._finish(item, attempt, note)
        deferred = self.frontier.drain_host(item.host)
        for page in deferred:
            self._finish_unsent(page, "throttled", note)
        log.warning(
            "%s asks for no request before %s (Retry-After %g s, over the %g s cap): "
            "%d page(s) deferred, not waited for",
            item.host,
            when,
            wait,
            cap,
            1 + len(deferred),
        )
        return True

    def _deferral(self, attempt: Attempt) -> str | None:
        """The row's note when the attempt's Retry-After is longer than a batch waits."""
        wait = attempt.retry_after_s
        cap = self.settings.retry_after_cap_s
        if wait is None or wait <= cap:
            return None
        who = "the scraping API" if attempt.plan_limit else "the host"
        return (
            f"deferred: {who} asks for no request before {_time_after(self.clock(), wait)}, "
            f"over the {cap:g} s a batch waits (retry_after_cap_s)"
        )

    def _archive(self, answer: Answer, body: bytes, target: str) -> WarcLocation | None:
        """Store one answered exchange (the ``Archiver`` of ``fetch_page``).

        A failing archive (disk full) must not lose the observation: the row then names no
        record, and the first failure is logged.
        """
        from tasks.archive.warc import WarcError

        assert self.warc is not None
        method, request_url, request_headers = answer.request_record()
        try:
            return self.warc.write_exchange(
                target or request_url,
                status=answer.status,
                reason=answer.reason,
                http_version=answer.http_version,
                response_headers=[
                    (k.decode("latin-1"), v.decode("latin-1")) for k, v in answer.raw_headers
                ],
                body=body,
                request_headers=request_headers,
                method=method,
                request_url=request_url,
                fetched_at=self.clock(),
            )
        except (WarcError, OSError) as exc:
            self.warc_failures += 1
            if self.warc_failures == 1:
                log.error("WARC archiving failed (rows will name no record): %s", exc)
            return None

    def _judge_validators(
        self,
        request: FetchRequest,
        host: HostState,
        attempt: Attempt,
        record: str,
        conditional: dict[str, str],
        probe: bool,
    ) -> None:
        evidence = judge_validators(
            sent_conditional=bool(conditional),
            old_etag=request.etag,
            old_last_modified=request.last_modified,
            old_record_hash=request.record_hash,
            new_etag=attempt.etag,
            new_last_modified=attempt.last_modified,
            new_record_hash=record,
        )
        was_trusted = host.trust.trusted
        host.trust = host.trust.record(evidence, self.validator_policy, probe=probe)
        if was_trusted and not host.trust.trusted:
            log.warning(
                "no longer trusting validators of %s: %s",
                urlsplit(attempt.final_url or request.url).netloc,
                host.trust.distrusted,
            )

    def _retry(self, item: WorkItem, attempt: Attempt, now: float, *, count_attempt: bool) -> bool:
        """Queue another attempt through admission control, if allowed; True if queued."""
        attempts = item.attempts + 1
        if count_attempt and attempts >= self.retry_policy.max_attempts:
            self.retries_refused += 1
            return False
        if self.retries_left <= 0 or self.stopped:
            self.retries_refused += 1
            return False
        delay = self.retry_policy.delay(attempts, self.rng)
        if attempt.retry_after_s is not None:
            if attempt.retry_after_s > self.settings.retry_after_cap_s:
                self.retries_refused += 1  # not waited for, nor cut short (see _long_wait)
                return False
            delay = max(delay, attempt.retry_after_s)
        deadline = self.frontier.deadline
        if deadline is not None and now + delay >= deadline:
            self.retries_refused += 1
            return False
        self.last_attempt[item.index] = attempt
        if count_attempt:
            item.attempts = attempts
        item.not_before = now + delay
        if not self.frontier.admit(item, now):
            self.retries_refused += 1
            return False
        self.retries_left -= 1
        return True

    def _stop_plan(self) -> None:
        """509 from the scraping API: send nothing more, record every unsent URL."""
        if self.stopped:
            return
        self.stopped = True
        self.frontier.stop_plan()
        log.warning("scraping API credits exhausted (509): stopping the batch")
        self._drain_stopped()

    def _drain_stopped(self) -> None:
        reason = "not sent: scraping API credits exhausted (509)"
        self._record_shed([Shed(item, reason) for item in self.frontier.drain_all()])

    # ------------------------------------------------------------------ rows

    def _robots_denial(self, url: str) -> str | None:
        rules = self.state.robots.get(url, self.clock())
        if rules is None:
            return None
        return rules.denial(url, self.settings.robots_token)

    def _spend(self, index: int, attempt: Attempt) -> None:
        self.spent_bytes[index] = self.spent_bytes.get(index, 0) + attempt.wire_bytes
        cost = self.cost_hook(
            AttemptCost(self.settings.mode, attempt.outcome, attempt.status, attempt.wire_bytes)
        )
        self.spent_cost[index] = self.spent_cost.get(index, 0.0) + cost

    def _finish(
        self,
        item: WorkItem,
        attempt: Attempt,
        note: str | None = None,
        *,
        record: RecordDigest | None = None,
    ) -> None:
        """Write the URL's row from its final attempt (``record`` of an ``ok`` body)."""
        request = self.requests[item.index]
        row = Row(
            url_id(item.url),
            item.host,
            self.started_at.get(item.index) or self.clock(),
            attempt.outcome,
            status=attempt.status,
            etag=attempt.etag,
            last_modified=attempt.last_modified,
            bytes=self.spent_bytes.get(item.index, 0),
            latency_s=attempt.duration_s,
            cost=self.spent_cost.get(item.index, 0.0),
            retries=item.attempts,
            reason=attempt.reason if note is None else f"{attempt.reason}; {note}",
        )
        if attempt.warc is not None:
            row.warc_file = attempt.warc.file
            row.warc_offset = attempt.warc.offset
        if attempt.outcome == "ok" and record is not None:
            row.record_hash = record.record_hash
            row.simhash = record.simhash
        elif attempt.outcome == "not_modified":
            row.changed = False
            row.record_hash = request.record_hash
            row.etag = attempt.etag or request.etag
            row.last_modified = attempt.last_modified or request.last_modified
        self.rows[item.index] = row

    def _finish_unsent(self, item: WorkItem, outcome: str, reason: str | None) -> None:
        previous = self.last_attempt.get(item.index)
        if previous is not None:  # a retry that never went out: the last attempt stands
            self._finish(item, previous, f"retry not sent: {reason}")
            return
        self.rows[item.index] = Row(
            url_id(item.url), item.host, self.clock(), outcome, reason=reason
        )

    def _record_unsent(self, item: WorkItem, reason: str) -> None:
        self._finish_unsent(item, "shed", reason)

    def _record_shed(self, shed: list[Shed]) -> None:
        for entry in shed:
            if entry.item.kind == "page":
                self._record_unsent(entry.item, entry.reason)

    def _bad_url(
        self, request: FetchRequest, reason: str, wall: datetime, outcome: str = "error"
    ) -> None:
        text = request.url.strip()
        self.requests.append(request)
        self.rows.append(Row(url_id(text), _raw_host(text), wall, outcome, reason=reason))

    def _lost(self, index: int) -> Row:
        log.error("fetch engine recorded no outcome for %s", shown_url(self.requests[index].url))
        url = self.requests[index].url
        return Row(url_id(url), _raw_host(url), self.clock(), "error", reason="no outcome (bug)")

    def _metrics(self, rows: list[Row], elapsed: float) -> BatchMetrics:
        frontier = self.frontier
        now = self.loop.time()
        hosts = {}
        for host, lane in frontier.lanes.items():
            st = lane.state
            requests_before, throttles_before = self.host_base.get(host, (0, 0))
            hosts[host] = HostPressure(
                requests=st.requests - requests_before,
                throttles=st.throttles - throttles_before,
                max_in_flight=st.max_in_flight,
                limit=st.limit.limit,
                lowest_limit=st.lowest_limit,
                paused_s=max(0.0, st.paused_until - now),
                validators_trusted=st.trust.trusted,
                validator_doubt=st.trust.distrusted,
            )
        gate = self.state.plan_gate
        retries = frontier.retries
        outcomes = Counter(r.outcome for r in rows)
        return BatchMetrics(
            urls=len(rows),
            elapsed_s=elapsed,
            requests=self.attempts,
            robots_fetches=self.robots_fetches,
            retries=retries,
            retry_ratio=retries / self.attempts if self.attempts else 0.0,
            retry_budget=self.retry_budget,
            retries_refused=self.retries_refused,
            outcomes=dict(outcomes),
            max_queue_depth=frontier.max_waiting,
            max_oldest_age_s=self.max_oldest_age,
            max_dispatch_lag_s=frontier.max_dispatch_lag,
            admission_rejections=frontier.rejections,
            shed=outcomes["shed"],
            refused=outcomes["refused_address"],
            plan_throttles=self.plan_throttles,
            plan_limit=None if gate is None else gate.limit.limit,
            plan_stopped=self.stopped,
            hosts=hosts,
            tail_at_s=self.tail_at,
        )


def _signal(attempt: Attempt) -> Signal:
    """Which slow-down signal an attempt sends to its host."""
    if attempt.outcome == "throttled":
        return Signal.THROTTLED
    if attempt.outcome == "timeout":
        return Signal.TIMEOUT
    if attempt.outcome == "refused_address":
        return Signal.NOT_SENT
    if attempt.outcome in CONNECTION_FAILED:
        return Signal.ERROR
    if attempt.outcome == "error" and (attempt.status is None or attempt.status >= 500):
        return Signal.ERROR
    return Signal.SUCCESS


def _raw_scheme(url: str) -> str:
    """The scheme of a URL that did not normalize (``ftp``, ``file``...), or ""."""
    head, sep, rest = url.strip().partition(":")
    named = sep and head.isascii() and head.isalpha() and rest.startswith("/")
    return head.lower() if named else ""  # "localhost:8080/x" names no scheme


def _raw_host(url: str) -> str:
    """The host of a URL that did not normalize, without its userinfo (a password)."""
    try:
        return urlsplit(url).netloc.rpartition("@")[2]
    except ValueError:
        return ""


def _time_after(now: datetime, seconds: float) -> str:
    """``now + seconds`` in ISO 8601 (a Retry-After of year 9999 or beyond stays printable)."""
    try:
        return (now + timedelta(seconds=seconds)).isoformat(timespec="seconds")
    except (OverflowError, ValueError):
        return f"{seconds:g} s from {now.isoformat(timespec='seconds')}"
