"""The sandbox web as a pure model: hosts, pages, their change processes and ground truth.

No sockets here. A host is an index ``i`` served at loopback address
``127.0.{1 + i // 250}.{1 + i % 250}`` (127.0.0.1 is the fake scraping API and proxy); its
pages are ``/p/<j>`` (HTML) and ``/api/item/<j>.json`` (the same real fields as JSON). Each
page has a seeded trait set (true change rate, creation time, redirect, slow, huge, links)
drawn from its key only, so a page's truth does not depend on which other pages exist or on
the order anything is asked. Ground truth takes any port: ``web.version(url)`` reads the
address and path, so URLs from a running server work as they are.

Time: change times are counted in days from ``origin`` (by default a month before the default
clock start, so pages already have a recent past); a page's version at ``t`` is the number of
real changes in ``(origin, t]``; version 0 dates from the page's creation, before the origin.
Reaching time ``t`` costs one random draw per change up to ``t`` the first time it is asked.
"""

from __future__ import annotations

import random
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime
from urllib.parse import urlsplit

from sandbox.behaviour import HostBehaviour
from sandbox.changes import ChangeProcess, draw_rate, host_rate_effect, page_key
from sandbox.clock import SimClock
from sandbox.content import PageRecord, page_record

DEFAULT_ORIGIN = datetime(2025, 12, 1, tzinfo=UTC)  # a month before the default clock start
#: The networks a crawler must be allowed to reach to fetch the sandbox (its address policy
#: refuses loopback by default): pass them as ``FetchSettings(allowed_networks=...)``.
SANDBOX_NETWORKS: tuple[str, ...] = ("127.0.0.0/8", "::1/128")
_DAY = 86_400.0
_HOSTS_PER_OCTET = 250
MAX_HOSTS = _HOSTS_PER_OCTET * 254


def host_address(i: int) -> str:
    """The loopback address of host ``i``."""
    if not 0 <= i < MAX_HOSTS:
        raise ValueError(f"host index must be within [0, {MAX_HOSTS}), got {i}")
    return f"127.0.{1 + i // _HOSTS_PER_OCTET}.{1 + i % _HOSTS_PER_OCTET}"


def host_index(address: str) -> int | None:
    """The host index served at ``address`` (None when it is no sandbox host's address)."""
    parts = address.split(".")
    if len(parts) != 4 or parts[0] != "127" or parts[1] != "0":
        return None
    try:
        third, fourth = int(parts[2]), int(parts[3])
    except ValueError:
        return None
    if not (1 <= third <= 254 and 1 <= fourth <= _HOSTS_PER_OCTET):
        return None
    return (third - 1) * _HOSTS_PER_OCTET + fourth - 1


@dataclass(frozen=True, slots=True)
class LinkTarget:
    """A link from a page: ``kind`` is root (``/p/j``), relative (``./j``), absolute
    (``http://host/p/j``, possibly another host), or private (``/private/j``)."""

    kind: str
    host: int
    page: int


@dataclass(frozen=True, slots=True)
class PageTraits:
    """Everything fixed about one page (drawn from its key)."""

    host: int
    page: int
    key: int
    rate: float  # true changes/day
    created: float  # POSIX seconds of version 0
    redirect_to: int | None  # page this one redirects to, if it does
    redirect_status: int
    slow: bool
    huge: bool
    links: tuple[LinkTarget, ...]


class SandboxWeb:
    """Hosts with behaviours and pages with known change processes, read at simulated time."""

    def __init__(
        self,
        page_counts: Sequence[int],
        behaviours: Sequence[HostBehaviour],
        *,
        seed: int,
        clock: SimClock,
        origin: datetime = DEFAULT_ORIGIN,
    ) -> None:
        if not page_counts:
            raise ValueError("a sandbox web needs at least one host")
        if len(page_counts) > MAX_HOSTS:
            raise ValueError(
                f"at most {MAX_HOSTS} hosts fit in 127.0.0.0/8, got {len(page_counts)}"
            )
        if len(behaviours) != len(page_counts):
            raise ValueError("one behaviour per host is required")
        if any(n < 1 for n in page_counts):
            raise ValueError("every host needs at least one page")
        if origin.tzinfo is None:
            raise ValueError("origin must be a timezone-aware datetime")
        self.page_counts = tuple(int(n) for n in page_counts)
        self.behaviours = tuple(behaviours)
        self.seed = int(seed)
        self.clock = clock
        self.origin = origin
        self._origin_ts = origin.timestamp()
        self._host_effects = [host_rate_effect(self.seed, i) for i in range(len(page_counts))]
        self._lock = threading.RLock()
        self._traits: dict[tuple[int, int], PageTraits] = {}
        self._processes: dict[tuple[int, int], ChangeProcess] = {}

    @classmethod
    def generate(
        cls,
        hosts: int,
        pages_per_host: int | Sequence[int],
        *,
        seed: int = 0,
        default: HostBehaviour | None = None,
        behaviours: Mapping[int, HostBehaviour] | None = None,
        clock: SimClock | None = None,
        origin: datetime = DEFAULT_ORIGIN,
    ) -> SandboxWeb:
        """A web of ``hosts`` hosts; ``pages_per_host`` is one count or one per host."""
        if hosts < 1:
            raise ValueError(f"hosts must be >= 1, got {hosts}")
        if isinstance(pages_per_host, int):
            counts = [pages_per_host] * hosts
        else:
            counts = list(pages_per_host)
            if len(counts) != hosts:
                raise ValueError(f"pages_per_host has {len(counts)} counts for {hosts} hosts")
        default = default or HostBehaviour()
        behaviours = dict(behaviours or {})
        unknown = sorted(i for i in behaviours if not 0 <= i < hosts)
        if unknown:
            raise ValueError(f"behaviours given for hosts that do not exist: {unknown}")
        per_host = [behaviours.get(i, default) for i in range(hosts)]
        return cls(counts, per_host, seed=seed, clock=clock or SimClock(), origin=origin)

    # -- hosts and URLs ---------------------------------------------------------------

    @property
    def n_hosts(self) -> int:
        return len(self.page_counts)

    def behaviour(self, i: int) -> HostBehaviour:
        return self.behaviours[i]

    def page_paths(self, i: int) -> list[str]:
        return [f"/p/{j}" for j in range(self.page_counts[i])]

    def listing_count(self, i: int) -> int:
        """How many category pages ``/c/<k>`` host ``i`` serves (0 without listings)."""
        size = self.behaviours[i].listing_size
        return 0 if size == 0 else -(-self.page_counts[i] // size)

    def listing_items(self, i: int, k: int) -> range:
        """The item pages category page ``k`` of host ``i`` lists, in order."""
        size = self.behaviours[i].listing_size
        if not 0 <= k < self.listing_count(i):
            raise ValueError(f"host {i} has no category page {k}")
        return range(k * size, min(self.page_counts[i], (k + 1) * size))

    def listing_paths(self, i: int) -> list[str]:
        return [f"/c/{k}" for k in range(self.listing_count(i))]

    def locate(self, url: str) -> tuple[int, int]:
        """``(host, page)`` of a page URL (``/p/<j>`` or ``/api/item/<j>.json``)."""
        parts = urlsplit(url)
        i = host_index(parts.hostname or "")
        if i is None or i >= self.n_hosts:
            raise ValueError(f"not a URL of this sandbox web (unknown host): {url!r}")
        j = page_number(parts.path)
        if j is None or not 0 <= j < self.page_counts[i]:
            raise ValueError(f"not a page URL of this sandbox web: {url!r}")
        return i, j

    # -- ground truth -----------------------------------------------------------------

    def traits(self, i: int, j: int) -> PageTraits:
        """The fixed traits of page ``j`` of host ``i``."""
        with self._lock:
            found = self._traits.get((i, j))
            if found is None:
                found = self._traits[(i, j)] = self._draw_traits(i, j)
            return found

    def final_page(self, i: int, j: int) -> int:
        """The page a redirect chain starting at ``j`` ends on (``j`` if it does not redirect)."""
        seen = 0
        while (target := self.traits(i, j).redirect_to) is not None:
            j = target
            seen += 1
            if seen > self.page_counts[i]:
                raise RuntimeError(f"redirect cycle on host {i}")  # impossible by construction
        return j

    def true_rate(self, url: str) -> float:
        """The true change rate (changes/day) of the page a URL ends on."""
        i, j = self.locate(url)
        return self.traits(i, self.final_page(i, j)).rate

    def version(self, url: str, at: datetime | None = None) -> int:
        """Number of real changes of the page (after redirects) up to ``at`` (default now)."""
        i, j = self.locate(url)
        return self.page_version(i, self.final_page(i, j), self._ts(at))

    def last_change(self, url: str, at: datetime | None = None) -> datetime:
        """Time of the page's last real change (or creation) at or before ``at``."""
        i, j = self.locate(url)
        ts = self.page_last_change(i, self.final_page(i, j), self._ts(at))
        return datetime.fromtimestamp(ts, tz=UTC)

    def record(self, url: str, at: datetime | None = None) -> dict[str, object]:
        """The real fields (title, price, availability, body) of the page at ``at``."""
        i, j = self.locate(url)
        j = self.final_page(i, j)
        return self.page_record(i, j, self.page_version(i, j, self._ts(at))).as_dict()

    def changes_between(self, url: str, start: datetime, end: datetime) -> list[datetime]:
        """Every real change of the page in ``(start, end]``."""
        i, j = self.locate(url)
        process = self._process(i, self.final_page(i, j))
        with self._lock:
            days = process.changes_between(
                self._days(start.timestamp()), self._days(end.timestamp())
            )
        return [datetime.fromtimestamp(self._origin_ts + d * _DAY, tz=UTC) for d in days]

    # -- fast paths for the server (host/page indices, POSIX seconds) ------------------

    def page_version(self, i: int, j: int, ts: float) -> int:
        process = self._process(i, j)
        with self._lock:
            return process.count(self._days(ts))

    def page_last_change(self, i: int, j: int, ts: float) -> float:
        """POSIX seconds of the last real change at or before ``ts`` (creation if none)."""
        process = self._process(i, j)
        with self._lock:
            last = process.last_change(self._days(ts))
        if last is None:
            return min(self.traits(i, j).created, ts)
        return self._origin_ts + last * _DAY

    def page_record(self, i: int, j: int, version: int) -> PageRecord:
        return page_record(self.traits(i, j).key, version)

    # -- internals --------------------------------------------------------------------

    def _ts(self, at: datetime | None) -> float:
        if at is None:
            return self.clock.timestamp()
        if at.tzinfo is None:
            raise ValueError(f"at must be a timezone-aware datetime, got {at!r}")
        return at.timestamp()

    def _days(self, ts: float) -> float:
        return (ts - self._origin_ts) / _DAY

    def _process(self, i: int, j: int) -> ChangeProcess:
        with self._lock:
            found = self._processes.get((i, j))
            if found is None:
                t = self.traits(i, j)
                found = self._processes[(i, j)] = ChangeProcess(t.key, t.rate)
            return found

    def _draw_traits(self, i: int, j: int) -> PageTraits:
        if not (0 <= i < self.n_hosts and 0 <= j < self.page_counts[i]):
            raise ValueError(f"no page {j} on host {i}")
        behaviour = self.behaviours[i]
        key = page_key(self.seed, i, j)
        rate = draw_rate(key, self._host_effects[i]) * behaviour.rate_scale
        rng = random.Random(key ^ 0x7EA175)
        n = self.page_counts[i]
        created = self._origin_ts - rng.uniform(1.0, 1000.0) * _DAY
        redirects = rng.random() < behaviour.redirect_share and j < n - 1
        redirect_status = 301 if rng.random() < 0.5 else 302
        slow = rng.random() < behaviour.slow_share
        huge = rng.random() < behaviour.huge_share
        links = [LinkTarget("root", i, (j + 1) % n)]
        links.append(LinkTarget("relative", i, rng.randrange(n)))
        links.append(LinkTarget("absolute", i, rng.randrange(n)))
        if behaviour.cross_host_links and self.n_hosts > 1 and rng.random() < 0.3:
            other = rng.randrange(self.n_hosts - 1)
            other += other >= i
            links.append(LinkTarget("absolute", other, rng.randrange(self.page_counts[other])))
        if rng.random() < 0.1:
            links.append(LinkTarget("private", i, j))
        return PageTraits(
            host=i,
            page=j,
            key=key,
            rate=min(rate, 1_000.0),
            created=created,
            redirect_to=j + 1 if redirects else None,
            redirect_status=redirect_status,
            slow=slow,
            huge=huge,
            links=tuple(links),
        )


def page_number(path: str) -> int | None:
    """The page number in ``/p/<j>`` or ``/api/item/<j>.json`` (None for other paths)."""
    if path.startswith("/p/"):
        tail = path[3:]
    elif path.startswith("/api/item/") and path.endswith(".json"):
        tail = path[10:-5]
    else:
        return None
    if not tail.isdigit() or (len(tail) > 1 and tail[0] == "0"):
        return None
    return int(tail)
