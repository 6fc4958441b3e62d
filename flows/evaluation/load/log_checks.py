"""Politeness and throughput read from the sandbox's request log (what the hosts saw).

The crawler's own metrics could be wrong in the same way its pacing is, so the checks use
the server's side: for every host, requests sorted by arrival, with the number the host was
serving at each arrival. Both processes read the same monotonic clock; the server stamps a
request's arrival after the client sent it and its end before the client read it, so a gap
seen by the server is never shorter than the one the client waited.

Rules checked for each pair of consecutive requests to one host (``PacingRules``):

- concurrency: never more requests in flight than the host limit (the AIMD ceiling);
- pacing: the next request no sooner than ``delay_factor`` x the previous one's duration,
  within ``[min_delay_s, max_delay_s]`` (after a reset or a request the client gave up on,
  the server's duration says nothing about the client's, so only ``min_delay_s``);
- Retry-After: after a 429/503 carrying it, nothing before it has passed.

A short gap after a reset that repeats the very request that was reset is counted apart
(``repeats_after_reset``): that is the HTTP client library resending an idempotent request
on a fresh connection by itself (aiohttp does, once), not the engine's pacing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

import numpy as np

from flows.evaluation.load.faulty_sandbox import RESET_STATUS, CompactLog

CLIENT_GONE_STATUS = 499


@dataclass(frozen=True)
class PacingRules:
    min_delay_s: float
    max_delay_s: float
    delay_factor: float
    host_limit: int
    retry_after_s: Mapping[int, float] = field(default_factory=dict)  # host -> header value
    tolerance_s: float = 0.002  # clock reads and float rounding, not scheduling slack


@dataclass(frozen=True)
class PolitenessReport:
    hosts: int
    requests: int
    concurrency_violations: int
    gap_violations: int
    retry_after_violations: int
    repeats_after_reset: int  # too-short gaps that resend the request just reset
    max_in_flight: int
    examples: tuple[str, ...]  # a few violations, spelled out

    @property
    def violations(self) -> int:
        return (
            self.concurrency_violations
            + self.gap_violations
            + self.retry_after_violations
            + self.repeats_after_reset
        )

    def summary(self) -> str:
        return (
            f"{self.requests:,} requests to {self.hosts:,} hosts: "
            f"{self.concurrency_violations} over the host limit (max in flight "
            f"{self.max_in_flight}), {self.gap_violations} pacing gaps too short, "
            f"{self.retry_after_violations} Retry-After not waited, "
            f"{self.repeats_after_reset} resent at once after a reset"
        )


def check_politeness(log: CompactLog, rules: PacingRules) -> PolitenessReport:
    """Count every violation of ``rules`` in ``log`` (sorted by host, then arrival)."""
    examples: list[str] = []
    over = log.in_flight > rules.host_limit
    for k in np.flatnonzero(over)[:3]:
        examples.append(f"host {log.host[k]}: {log.in_flight[k]} in flight at {log.at[k]:.3f}")

    same = log.host[1:] == log.host[:-1]
    prev_status = log.status[:-1]
    duration = log.done[:-1] - log.at[:-1]
    gap = log.at[1:] - log.done[:-1]
    paced = np.clip(rules.delay_factor * duration, rules.min_delay_s, rules.max_delay_s)
    blind = (prev_status == RESET_STATUS) | (prev_status == CLIENT_GONE_STATUS)
    required = np.where(blind, rules.min_delay_s, paced)
    retry_after = np.zeros_like(required)
    if rules.retry_after_s:
        lookup = np.zeros(int(log.host.max()) + 1 if len(log) else 1)
        for host, seconds in rules.retry_after_s.items():
            if host < lookup.size:
                lookup[host] = seconds
        throttled = (prev_status == 429) | (prev_status == 503)
        retry_after = np.where(throttled, lookup[log.host[:-1]], 0.0)
    short = same & (gap < required - rules.tolerance_s)
    early = same & (retry_after > 0) & (gap < retry_after - rules.tolerance_s)
    short &= ~early  # counted once, as the stronger rule
    repeat = short & (prev_status == RESET_STATUS) & (log.target[1:] == log.target[:-1])
    short &= ~repeat
    checks = (
        ("gap", short, required),
        ("Retry-After", early, retry_after),
        ("resent after reset", repeat, required),
    )
    for name, mask, needed in checks:
        for k in np.flatnonzero(mask)[:3]:
            examples.append(
                f"host {log.host[k]}: {name} {gap[k]:.4f} s < {needed[k]:.4f} s "
                f"after status {prev_status[k]}"
            )
    return PolitenessReport(
        hosts=int(np.unique(log.host).size),
        requests=len(log),
        concurrency_violations=int(over.sum()),
        gap_violations=int(short.sum()),
        retry_after_violations=int(early.sum()),
        repeats_after_reset=int(repeat.sum()),
        max_in_flight=int(log.in_flight.max()) if len(log) else 0,
        examples=tuple(examples),
    )


@dataclass(frozen=True)
class HostsThroughput:
    pages: int  # pages answered 200 to the chosen hosts
    span_s: float  # from ``start`` to the end of the last of them
    hosts_done: int  # hosts with at least one such page

    @property
    def pages_per_s(self) -> float:
        return self.pages / self.span_s if self.span_s > 0 else 0.0


def throughput(log: CompactLog, hosts: Iterable[int], start: float) -> HostsThroughput:
    """Pages the given hosts served (200, robots.txt excluded) per second since ``start``."""
    chosen = np.isin(log.host, np.fromiter(hosts, dtype=np.int64))
    pages = chosen & ~log.robots & (log.status == 200)
    if not pages.any():
        return HostsThroughput(0, 0.0, 0)
    return HostsThroughput(
        int(pages.sum()),
        float(log.done[pages].max() - start),
        int(np.unique(log.host[pages]).size),
    )
