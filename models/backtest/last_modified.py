"""Last-Modified on the simulated web: what each host's servers send, from the truth.

Real servers differ (Clausen 2004; Bhole et al. on HTTP validators): some send the time of
the page's last change (honest), some send nothing, and dynamic pages stamp every answer
with the time it was generated ("now"), which says nothing about changes. Each host of a
backtest web gets one behaviour, seeded (``LastModifiedShares``: the shares are an
assumption of the workload, not a measurement; the default is honest on half of the hosts,
"now" on a quarter, absent on the rest).

:class:`LastModifiedClock` keeps the truth a header is made from: the time of every page's
last change. Before day 0 a page changing at rate ``r`` last changed an exponential time
``Exp(r)`` ago (a Poisson process seen at a random time), drawn on its own seeded stream,
so the changes every policy faces are the same whatever the shares. Learners see only the
header values (days on the simulation's clock, NaN where none is sent), never the
behaviour: they judge hosts from what the headers do (``models.fetching.validators``).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.backtest.web import BacktestInputError, DayChanges, FloatArray, IntArray

#: Per-host Last-Modified behaviour codes.
LM_HONEST, LM_ABSENT, LM_NOW = 0, 1, 2
#: Oldest last change a header reports, days before the start (a page that never changes).
_OLDEST = 3_650.0


@dataclass(frozen=True)
class LastModifiedShares:
    """Shares of hosts whose Last-Modified is honest, or a "now" stamp; the rest send none."""

    honest: float = 0.5
    now: float = 0.25

    def __post_init__(self) -> None:
        if not (0 <= self.honest <= 1 and 0 <= self.now <= 1 and self.honest + self.now <= 1):
            raise BacktestInputError(
                f"Last-Modified shares must be in [0, 1] and sum to at most 1, got "
                f"honest {self.honest}, now {self.now}"
            )


def host_behaviour(n_hosts: int, shares: LastModifiedShares, *, seed: int) -> IntArray:
    """One ``LM_*`` code per host, seeded on a stream of its own."""
    u = np.random.default_rng([seed, 21]).random(n_hosts)
    out = np.full(n_hosts, LM_ABSENT, dtype=np.int64)
    out[u < shares.honest + shares.now] = LM_NOW
    out[u < shares.honest] = LM_HONEST
    return out


class LastModifiedClock:
    """Every page's true last change, and the Last-Modified header a fetch of it gets."""

    def __init__(self, rate_at_start: FloatArray, page_behaviour: IntArray, *, seed: int) -> None:
        if rate_at_start.shape != page_behaviour.shape:
            raise BacktestInputError("one Last-Modified behaviour per page is needed")
        rng = np.random.default_rng([seed, 22])
        with np.errstate(divide="ignore"):
            back = rng.exponential(1.0, rate_at_start.shape[0]) / rate_at_start
        self.last_change = -np.minimum(back, _OLDEST)
        self.behaviour = page_behaviour

    def advance(self, day: int, changes: DayChanges) -> None:
        """Take in day ``day``'s changes (after that day's fetches)."""
        hit = np.isfinite(changes.last)
        self.last_change[hit] = day + changes.last[hit]

    def headers(self, pages: IntArray, at: float) -> FloatArray:
        """The Last-Modified each of ``pages`` sends when fetched at ``at`` (days; NaN: none)."""
        kind = self.behaviour[pages]
        out = np.where(kind == LM_HONEST, self.last_change[pages], np.nan)
        out[kind == LM_NOW] = at
        return out
