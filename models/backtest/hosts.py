"""Where a backtest's freshness gap lies: the pages of which kinds of host.

A policy's share of the oracle-minus-uniform gap is one number for the whole web; when it
misses a target, the report has to say why. The gap is not spread evenly: on a host whose
politeness capacity binds, visits compete inside the host, and what counts is telling
which of its pages change slower than the others. The oracle knows; a learner sees it only
through its own observations, and without trusted Last-Modified ages (a host stamping
"now", or sending none) it cannot tell a page changing twice a day from one changing forty
times once every visit finds a change.

:func:`freshness_by_hosts` splits the window's value-weighted freshness by slices of hosts:
the hosts whose capacity binds (they cannot take the uniform policy's visit rate for all
their pages; the web is public, so any crawler can tell) against the rest, and the hosts by
what their Last-Modified says (honest, "now", none: the simulator's truth, for the report
only). Each slice reports every policy's freshness and, for each learning policy, the share
of the slice's own gap it closes and the slice's part of the whole web's shortfall to the
oracle.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from numpy.typing import NDArray

from models.backtest.last_modified import LM_ABSENT, LM_HONEST, LM_NOW
from models.backtest.policies import uniform_frequencies
from models.backtest.sim import PageTotals
from models.backtest.workloads import Workload

BoolArray = NDArray[np.bool_]

#: Labels of the split by host capacity (read by ``models/backtest/targets.py``).
BOUND_HOSTS, OTHER_HOSTS = "capacity-bound hosts", "other hosts"


def gap_share(mine: float, oracle: float, uniform: float) -> float:
    """Share of the oracle-minus-uniform freshness gap a policy at ``mine`` closes (NaN
    when there is no gap)."""
    gap = oracle - uniform
    return (mine - uniform) / gap if gap != 0 else float("nan")


@dataclass(frozen=True)
class HostSlice:
    """The pages of one slice of hosts, and each policy's window freshness on them.

    ``freshness`` is value-weighted within the slice; ``contribution`` is the slice's
    value-weighted freshness over the whole web's value (the slices of one split add up to
    the web's freshness).
    """

    label: str
    hosts: int
    pages: float  # share of the web's pages
    value: float  # share of the web's value
    freshness: dict[str, float]
    contribution: dict[str, float]

    def gap_closed(self, name: str) -> float:
        """Share of this slice's oracle-minus-uniform gap ``name`` closes (NaN if none)."""
        try:
            oracle, uniform, mine = (self.freshness[k] for k in ("oracle", "uniform", name))
        except KeyError:
            return float("nan")
        return gap_share(mine, oracle, uniform)

    def shortfall(self, name: str) -> float:
        """How much of the web's freshness ``name`` loses to the oracle on this slice."""
        if "oracle" not in self.contribution or name not in self.contribution:
            return float("nan")
        return self.contribution["oracle"] - self.contribution[name]


def capacity_bound_hosts(workload: Workload, budget: float) -> BoolArray:
    """Hosts that cannot take the uniform visit rate for all their pages (capacity binds)."""
    web = workload.web
    load = np.bincount(web.hosts, weights=uniform_frequencies(web, budget), minlength=web.n_hosts)
    return np.asarray(load >= web.host_capacity * (1.0 - 1e-9), dtype=np.bool_)


def freshness_by_hosts(workload: Workload, totals: PageTotals, budget: float) -> list[HostSlice]:
    """The window's freshness on capacity-bound and other hosts, and by Last-Modified kind."""
    web = workload.web
    bound = capacity_bound_hosts(workload, budget)
    kind = workload.last_modified
    if kind is None:
        kind = np.full(web.n_hosts, LM_ABSENT, dtype=np.int64)
    splits = [
        (BOUND_HOSTS, bound),
        (OTHER_HOSTS, ~bound),
        ("Last-Modified honest", kind == LM_HONEST),
        ('Last-Modified "now"', kind == LM_NOW),
        ("no Last-Modified", kind == LM_ABSENT),
    ]
    total_value = float(web.value.sum()) or 1.0
    out = []
    for label, chosen in splits:
        pages = chosen[web.hosts]
        value = web.value[pages]
        weight = float(value.sum())
        contribution = {
            name: float(np.dot(value, fresh[pages])) / total_value
            for name, fresh in totals.freshness.items()
        }
        out.append(
            HostSlice(
                label=label,
                hosts=int(chosen.sum()),
                pages=float(pages.mean()) if pages.shape[0] else 0.0,
                value=weight / total_value,
                freshness={
                    name: c * total_value / weight if weight > 0 else float("nan")
                    for name, c in contribution.items()
                },
                contribution=contribution,
            )
        )
    return out


def format_host_slices(slices: list[HostSlice], learners: list[str]) -> str:
    """One row per slice: pages, value, each policy's freshness, each learner's gap share
    and its shortfall to the oracle (in freshness points of the whole web)."""
    if not slices:
        return ""
    names = list(slices[0].freshness)
    head = (
        f"{'slice of hosts':<22}{'hosts':>7}{'pages':>7}{'value':>7}"
        + "".join(f"{name[:12]:>13}" for name in names)
        + "".join(f"{name[:8] + ' closes':>16}{'lost':>8}" for name in learners)
    )
    lines = [head, "-" * len(head)]
    for part in slices:
        if part.hosts == 0:
            continue
        cells = "".join(f"{part.freshness[name]:>13.3f}" for name in names)
        cells += "".join(
            f"{_share(part.gap_closed(name)):>16}{part.shortfall(name):>8.4f}" for name in learners
        )
        lines.append(f"{part.label:<22}{part.hosts:>7,}{part.pages:>7.1%}{part.value:>7.1%}{cells}")
    return "\n".join(lines)


def _share(value: float) -> str:
    return f"{value:.1%}" if np.isfinite(value) else "-"
