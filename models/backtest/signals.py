"""Backtest of the sitemap-lastmod signal: the same planner with the signal on and off.

A web of hosts whose sitemaps tell the truth (``honest``: lastmod = the page's last real
change), tell part of it (``noisy``: a real change moves lastmod only with probability
``NOISY_RECALL``, and lastmod is also bumped without a change, as a template edit does), lie
one way (``stale``: the creation date, never newer than a visit; ``now``: every
entry claims to have changed at the reading) or say nothing (``missing``). Pages change as
Poisson processes; the planner knows each rate only up to a lognormal error (an estimate),
reads the sitemaps at each cycle's start, and fetches the ``budget`` pages with the highest
probability of having changed (value and cost 1: the changes it can find per fetch). With
the signal on, that probability is the posterior of ``models.discovery.lastmod`` under the
per-host trust learned online from the fetches so far. Every fetch happens at the cycle's
start; freshness is measured at each cycle's midpoint (share of pages whose copy has not
changed since it was fetched).

Vectorized over pages; one Python step per cycle (and per change event within it).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from models.backtest.deployed import DeployedPlannerPolicy
from models.backtest.learning import BoolArray
from models.backtest.sim import ChangeSource
from models.backtest.web import DayChanges, FloatArray, IntArray
from models.discovery.lastmod import (
    LastmodEvidence,
    lastmod_signal,
    learn_trust,
    posterior_change,
    signal_z,
)

KINDS = ("honest", "noisy", "stale", "now", "missing")
#: A ``noisy`` host's lastmod reports a real change with this probability ...
NOISY_RECALL = 0.6
#: ... and is bumped without a change at this rate (per day and page).
NOISY_FALSE_BUMPS = 0.1


@dataclass(frozen=True)
class SignalRun:
    """What one policy achieved, overall and per host kind (after the warm-up)."""

    freshness: float
    changes_per_fetch: float
    freshness_by_kind: dict[str, float]
    changes_per_fetch_by_kind: dict[str, float]
    fetches_by_kind: dict[str, float]


def run_lastmod_backtest(
    kinds: Sequence[str],
    *,
    pages_per_host: int = 200,
    budget_share: float = 0.2,
    days: int = 60,
    warmup: int = 10,
    rate_error: float = 0.5,
    seed: int = 0,
    use_signal: bool = True,
    prior_strength: float = 10.0,
    per_host_budget: bool = False,
) -> SignalRun:
    """One policy over a web with one host per entry of ``kinds`` (``KINDS``).

    ``per_host_budget``: each host gets its share of the budget (a politeness capacity of
    ``budget_share`` of its pages per cycle) instead of one budget shared by all.
    """
    unknown = sorted(set(kinds) - set(KINDS))
    if unknown:
        raise ValueError(f"unknown sitemap kinds {unknown}; known: {', '.join(KINDS)}")
    rng = np.random.default_rng(seed)
    hosts = len(kinds)
    n = hosts * pages_per_host
    host = np.repeat(np.arange(hosts), pages_per_host)
    kind = np.asarray(kinds, dtype=object)[host]
    # the measured web's mix: 45% practically static, 35% weeks to days, 20% daily or faster
    mix = rng.random(n)
    rate = np.where(
        mix < 0.45,
        rng.uniform(0.0005, 0.005, n),
        np.where(
            mix < 0.8,
            np.exp(rng.uniform(np.log(0.03), np.log(0.5), n)),
            np.exp(rng.uniform(np.log(1.0), np.log(6.0), n)),
        ),
    )
    estimate = rate * np.exp(rng.normal(0.0, rate_error, n))
    created = -rng.uniform(1.0, 1000.0, n)
    last_change = created.copy()
    next_change = rng.exponential(1.0 / rate)
    reported = created.copy()  # a noisy host's lastmod
    next_bump = rng.exponential(1.0 / NOISY_FALSE_BUMPS, n)
    last_visit = np.zeros(n)  # a seed crawl at day 0
    budget = max(1, round(budget_share * n))
    evidence = LastmodEvidence.empty(hosts)

    def advance(to: float) -> None:
        nonlocal last_change, next_change, reported, next_bump
        due = next_change <= to
        while due.any():
            last_change = np.where(due, next_change, last_change)
            told = due & (rng.random(n) < NOISY_RECALL)
            reported = np.where(told, next_change, reported)
            next_change = np.where(due, next_change + rng.exponential(1.0 / rate), next_change)
            due = next_change <= to
        bump = next_bump <= to
        while bump.any():
            reported = np.where(bump, np.maximum(reported, next_bump), reported)
            next_bump = np.where(
                bump, next_bump + rng.exponential(1.0 / NOISY_FALSE_BUMPS, n), next_bump
            )
            bump = next_bump <= to

    fresh_sum = np.zeros(n)
    found = np.zeros(n)
    fetched = np.zeros(n)
    measured = 0
    for day in range(1, days + 1):
        t = float(day)
        advance(t)
        lastmod = np.select(
            [kind == "honest", kind == "noisy", kind == "stale", kind == "now"],
            [last_change, reported, created, np.full(n, t)],
            default=np.nan,
        )
        signal = lastmod_signal(lastmod, last_visit)
        p = -np.expm1(-estimate * (t - last_visit))
        if use_signal:
            trust = learn_trust(evidence, prior_strength=prior_strength)
            p = posterior_change(p, trust.likelihood_ratio(host, signal))
        tie = rng.random(n)
        if per_host_budget:
            order = np.lexsort((tie, -p, host))  # by host, then most likely changed first
            rank = np.arange(n) - np.repeat(np.arange(hosts) * pages_per_host, pages_per_host)
            pick = order[rank < budget // hosts]
        else:
            pick = np.lexsort((tie, -p))[:budget]
        changed = last_change[pick] > last_visit[pick]
        evidence = evidence + LastmodEvidence.count(host[pick], signal[pick], changed, hosts)
        last_visit[pick] = t
        advance(t + 0.5)
        if day > warmup:
            fresh_sum += last_change <= last_visit
            found[pick] += changed
            fetched[pick] += 1
            measured += 1

    def by_kind(values: np.ndarray, per: np.ndarray | None = None) -> dict[str, float]:
        out = {}
        for k in sorted(set(kinds)):
            mine = kind == k
            total = float(values[mine].sum())
            out[k] = total / float(per[mine].sum()) if per is not None else total / mine.sum()
        return out

    freshness = fresh_sum / max(measured, 1)
    with np.errstate(invalid="ignore", divide="ignore"):
        cpf = by_kind(found, fetched)
    return SignalRun(
        freshness=float(freshness.mean()),
        changes_per_fetch=float(found.sum() / max(fetched.sum(), 1.0)),
        freshness_by_kind=by_kind(freshness),
        changes_per_fetch_by_kind=cpf,
        fetches_by_kind={
            k: v * pages_per_host / max(measured, 1) for k, v in by_kind(fetched).items()
        },
    )


def compare_lastmod_signal(kinds: Sequence[str], **options: object) -> dict[str, SignalRun]:
    """The same web and seed with the signal off and on."""
    return {
        "off": run_lastmod_backtest(kinds, use_signal=False, **options),  # type: ignore[arg-type]
        "on": run_lastmod_backtest(kinds, use_signal=True, **options),  # type: ignore[arg-type]
    }


# --------------------------------------------------------------------------- the deployed planner

#: Sitemap lastmod kinds by code (``KINDS`` order).
HONEST, NOISY, STALE, NOW, MISSING = range(len(KINDS))
#: Oldest last change before day 0 a sitemap reports (a page that never changes), days.
_OLDEST = 3_650.0


@dataclass(frozen=True)
class SignalMix:
    """A web-family option: per host, what its sitemap lastmod is and whether it has a feed.

    Shares of hosts whose lastmod is ``honest`` (the page's last real change), ``noisy`` (a
    change moves it with probability ``NOISY_RECALL``; bumps without a change at
    ``NOISY_FALSE_BUMPS`` a day), ``stale`` (the creation date) or ``now`` (every entry
    claims a change at each reading); the rest send none (``missing``). ``feed``: share of
    hosts with a feed listing their ``feed_entries`` most recently changed pages with the
    time of the change (honest, as the sandbox's). Drawn per host on a stream of its own.
    """

    honest: float = 0.2
    noisy: float = 0.2
    stale: float = 0.2
    now: float = 0.2
    feed: float = 0.0
    feed_entries: int = 20

    def __post_init__(self) -> None:
        shares = (self.honest, self.noisy, self.stale, self.now)
        if min(shares) < 0 or sum(shares) > 1 + 1e-12 or not 0 <= self.feed <= 1:
            raise ValueError(
                f"signal shares must be in [0, 1] and the lastmod ones sum to <= 1: {self}"
            )
        if self.feed_entries < 1:
            raise ValueError(f"feed_entries must be at least 1, got {self.feed_entries}")

    def host_kinds(self, n_hosts: int, *, seed: int) -> tuple[IntArray, BoolArray]:
        """Per host: its lastmod kind code and whether it has a feed."""
        rng = np.random.default_rng([seed, 40])
        u = rng.random(n_hosts)
        edges = np.cumsum([self.honest, self.noisy, self.stale, self.now])
        kinds = np.searchsorted(edges, u, side="right").astype(np.int64)
        return kinds, rng.random(n_hosts) < self.feed

    def describe(self) -> str:
        missing = max(0.0, 1 - self.honest - self.noisy - self.stale - self.now)
        parts = [
            f"lastmod honest {self.honest:.0%}, noisy {self.noisy:.0%}, stale {self.stale:.0%}, "
            f'"now" {self.now:.0%}, none {missing:.0%} of the hosts'
        ]
        if self.feed:
            parts.append(f"feeds ({self.feed_entries} newest changes) on {self.feed:.0%}")
        return "; ".join(parts)


class SignalClock:
    """The public sitemaps and feeds of a backtest web, made from its true changes.

    Keeps every page's last real change (before day 0: an exponential time at its rate
    ago, as ``models.backtest.last_modified``), its creation date and a noisy host's
    reported lastmod, on a seeded stream of its own; ``advance`` takes a day's changes after
    that day's fetches (``SignalledChanges`` does it for the simulator).
    """

    def __init__(
        self,
        hosts: IntArray,
        rate_at_start: FloatArray,
        kinds: IntArray,
        feeds: BoolArray,
        *,
        feed_entries: int = 20,
        seed: int = 0,
    ) -> None:
        self._rng = np.random.default_rng([seed, 41])
        n = hosts.shape[0]
        with np.errstate(divide="ignore"):
            back = self._rng.exponential(1.0, n) / rate_at_start
        self.last_change: FloatArray = -np.minimum(back, _OLDEST)
        self.created: FloatArray = self.last_change - self._rng.uniform(0.0, 365.0, n)
        self.reported: FloatArray = self.last_change.copy()
        self.hosts = hosts
        self.page_kind = kinds[hosts]
        self.host_kinds = kinds
        self.host_feeds = feeds
        self.feed_entries = int(feed_entries)

    def advance(self, day: int, changes: DayChanges) -> None:
        """Take in day ``day``'s changes (they happened in ``[day, day + 1)``)."""
        hit = np.isfinite(changes.last)
        self.last_change[hit] = day + changes.last[hit]
        n = hit.shape[0]
        told = hit & (self._rng.random(n) < 1.0 - (1.0 - NOISY_RECALL) ** changes.count)
        self.reported[told] = day + changes.last[told]
        bump = self._rng.random(n) < -np.expm1(-NOISY_FALSE_BUMPS)
        bumped: FloatArray = day + self._rng.random(hit.shape)
        self.reported[bump] = np.maximum(self.reported[bump], bumped[bump])

    def sitemap(self, at: float) -> FloatArray:
        """Each page's sitemap lastmod read at ``at`` (days; NaN: none)."""
        k = self.page_kind
        return np.select(
            [k == HONEST, k == NOISY, k == STALE, k == NOW],
            [self.last_change, self.reported, self.created, np.full(k.shape[0], float(at))],
            default=np.nan,
        )

    def feed(self) -> FloatArray:
        """Each page's entry in its host's feed: its last change if listed, NaN if not."""
        order = np.lexsort((-self.last_change, self.hosts))
        hosts = self.hosts[order]
        starts = np.r_[0, np.flatnonzero(np.diff(hosts)) + 1]
        rank = np.empty(order.shape[0], dtype=np.int64)
        rank[order] = np.arange(order.shape[0]) - np.repeat(
            starts, np.diff(np.r_[starts, order.shape[0]])
        )
        listed = self.host_feeds[self.hosts] & (rank < self.feed_entries)
        return np.where(listed, self.last_change, np.nan)


class SignalledChanges:
    """The simulator's change source, telling a ``SignalClock`` each day's changes once the
    next day starts (after that day's fetches, as sitemaps are read before a cycle)."""

    def __init__(self, stream: ChangeSource, clock: SignalClock) -> None:
        self.stream = stream
        self.clock = clock
        self._pending: tuple[int, DayChanges] | None = None

    def on_day(self, day: int) -> DayChanges:
        if self._pending is not None:
            self.clock.advance(*self._pending)
        today = self.stream.on_day(day)
        self._pending = (day, today)
        return today


class LearnedSignals:
    """A planner's cheap signals: sitemap lastmod and/or feeds, each host's trust in each
    learned from the planner's own revisits (``learn_trust``; ``models.discovery.lastmod``).

    Each host's sitemap (where it sends lastmod) and feed is read before a cycle on the
    deployment's schedule (``tasks.discovery.signals.due_hosts``: every cycle, but only every
    ``recheck_days`` once the signal is known to tell nothing), one
    request each, counted in ``reads`` (cost units at one a request): the reads are not
    taken from the fetch budget (in the deployment the sitemap reader runs before the
    cycle, as discovery), so a run reports its cost per change with and without them.
    """

    def __init__(
        self,
        clock: SignalClock,
        *,
        lastmod: bool = True,
        feeds: bool = False,
        prior_strength: float = 10.0,
        max_ratio: float = 20.0,
        min_z: float = 3.0,
        settled_examples: int = 100,
        recheck_days: float = 7.0,
    ) -> None:
        self.clock = clock
        self.sources = tuple(s for s, on in (("lastmod", lastmod), ("feed", feeds)) if on)
        n_hosts = clock.host_kinds.shape[0]
        self.n_hosts = n_hosts
        self.evidence = {s: LastmodEvidence.empty(n_hosts) for s in self.sources}
        self.options: dict[str, float] = {
            "prior_strength": prior_strength,
            "max_ratio": max_ratio,
            "min_z": min_z,
        }
        self.max_ratio = max_ratio
        self.settled_examples = settled_examples
        self.recheck_days = recheck_days
        self.last_read = {s: np.full(n_hosts, -np.inf) for s in self.sources}
        self.reads = 0.0
        self._seen: dict[str, FloatArray] = {}

    def ratios(self, day: int, last_fetch: FloatArray) -> FloatArray:
        clock, hosts = self.clock, self.clock.hosts
        ratio = np.ones(hosts.shape[0])
        self._seen = {}
        for source in self.sources:
            if source == "lastmod":
                claimed, has = clock.sitemap(day), clock.host_kinds != MISSING
            else:
                claimed, has = clock.feed(), clock.host_feeds
            read = has & self._due(source, day)
            self.last_read[source][read] = day
            self.reads += float(np.count_nonzero(read))
            signal = np.where(read[hosts], lastmod_signal(claimed, last_fetch), np.nan)
            trust = learn_trust(self.evidence[source], **self.options)
            ratio *= trust.likelihood_ratio(hosts, signal)
            self._seen[source] = signal
        return np.asarray(np.clip(ratio, 1.0 / self.max_ratio, self.max_ratio))

    def _due(self, source: str, day: int) -> BoolArray:
        """Hosts whose ``source`` is read today: every day, but only every ``recheck_days``
        once it is known to tell nothing: constant over revisits that found changed and
        unchanged pages, or left unproven by ``settled_examples`` revisits
        (``tasks.discovery.signals.due_hosts``)."""
        e = self.evidence[source]
        changed = e.signaled_changed + e.quiet_changed
        unchanged = e.signaled_unchanged + e.quiet_unchanged
        signaled = e.signaled_changed + e.signaled_unchanged
        constant = (
            (changed > 0) & (unchanged > 0) & ((signaled == 0) | (signaled == changed + unchanged))
        )
        total = changed + unchanged
        unproven = (total >= self.settled_examples) & (signal_z(e) < self.options["min_z"])
        settled = (constant & (total >= 10)) | unproven
        wait = np.where(settled, self.recheck_days, 1.0)
        return np.asarray(day - self.last_read[source] >= wait)

    def learn(self, day: int, pages: IntArray, changed: BoolArray) -> None:
        hosts = self.clock.hosts[pages]
        for source, signal in self._seen.items():
            seen = LastmodEvidence.count(hosts, signal[pages], changed, self.n_hosts)
            self.evidence[source] = self.evidence[source] + seen


#: The planner variants a signal comparison runs: name -> (lastmod, feeds).
SIGNAL_VARIANTS = {
    "planner": (False, False),
    "planner+lastmod": (True, False),
    "planner+feeds": (False, True),
    "planner+both": (True, True),
}


@dataclass(frozen=True)
class SignalResult:
    """One planner variant over the window: the web's figures and per lastmod kind."""

    name: str
    freshness: float
    cost_per_change: float  # fetch cost per change detected
    cost_per_change_with_reads: float  # the sitemap and feed reads counted too
    reads_per_day: float
    freshness_by_kind: dict[str, float]
    fetches_by_kind: dict[str, float]


def compare_signals(
    family: str = "tight",
    pages: int = 2_000,
    *,
    mix: SignalMix | None = None,
    budget_share: float = 0.2,
    days: int = 60,
    seed: int = 0,
    variants: Sequence[str] = tuple(SIGNAL_VARIANTS),
    planner_seed: int | None = None,
) -> dict[str, SignalResult]:
    """The deployed planner with each signal on and off on one family web (``WebFamily``).

    Every variant faces the same web, changes, sitemaps and feeds; the window is the
    run's second half. ``planner_seed`` seeds the planners' verification samples (default:
    ``seed``): two runs that differ only in it measure the planner's own noise.
    """
    from models.backtest.families import family_web
    from models.backtest.runner import summarize
    from models.backtest.sim import simulate
    from models.backtest.web import ChangeStream

    unknown = sorted(set(variants) - set(SIGNAL_VARIANTS))
    if unknown:
        raise ValueError(f"unknown signal variants {unknown}; known: {', '.join(SIGNAL_VARIANTS)}")
    mix = mix or SignalMix()
    work = family_web(family, pages, seed=seed)
    web = work.web
    kinds, feeds = mix.host_kinds(web.n_hosts, seed=seed)
    clock = SignalClock(
        web.hosts, work.truth.on_day(0), kinds, feeds, feed_entries=mix.feed_entries, seed=seed
    )
    budget = web.budget_for_share(budget_share)
    psalt = seed if planner_seed is None else planner_seed
    signals: dict[str, LearnedSignals] = {}
    policies = []
    for name in variants:
        lastmod, feed = SIGNAL_VARIANTS[name]
        learned = LearnedSignals(clock, lastmod=lastmod, feeds=feed) if lastmod or feed else None
        if learned is not None:
            signals[name] = learned
        policies.append(DeployedPlannerPolicy(web, budget, seed=psalt, name=name, signals=learned))
    window = (days // 2, days)
    daily, totals = simulate(
        web,
        SignalledChanges(ChangeStream(work.truth, seed, work.periodic), clock),
        policies,
        days,
        budget,
        window=window,
    )
    page_kind = kinds[web.hosts]
    out = {}
    for name in variants:
        row = summarize(name, daily[name], window, budget)
        reads = signals[name].reads / days if name in signals else 0.0
        detected = row.detected
        fresh, fetched = totals.freshness[name], totals.fetches[name]
        by_kind, fetches_by_kind = {}, {}
        for code, kind in enumerate(KINDS):
            mine = page_kind == code
            if mine.any():
                by_kind[kind] = float(np.average(fresh[mine], weights=web.value[mine]))
                fetches_by_kind[kind] = float(fetched[mine].sum() / (window[1] - window[0]))
        out[name] = SignalResult(
            name,
            row.freshness,
            row.cost_per_change,
            (row.cost + reads * (window[1] - window[0])) / detected if detected else float("inf"),
            reads,
            by_kind,
            fetches_by_kind,
        )
    return out
