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

from models.discovery.lastmod import (
    LastmodEvidence,
    lastmod_signal,
    learn_trust,
    posterior_change,
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
