"""Web families for judging learning from scratch: webs the planner was never tuned on.

Each family is a set of parameters; every seed draws a new web from it. The shape follows
the independent simulator of issue 18: hosts of Zipf sizes, each host with its own typical
change rate drawn from a Cho-shaped mixture (Cho & Garcia-Molina, VLDB 2000: about a fifth
of pages change every day, about a third not in four months), URL templates inside a host
(``/product/``, ``/blog/``: a page's template is public, so it is the page's group) with
their own offset from the host's rate, and pages scattered log-normally around their
template's rate. Value tiers 1/2/4, cost 1 a visit, no Last-Modified unless the run asks
for it. On top, per family:

* a share of **periodic** pages that change exactly every 1, 2, 7 or 30 days (a fixed phase
  each), which a Poisson model sees as a rate of ``1 / period`` but which a crawler can
  catch just after each change;
* a share of pages whose **behaviour shifts** at ``shift_day``: half change ten times
  faster from then on, half ten times slower.

``models.backtest.web.ChangeStream`` draws the days' changes: Poisson pages seeded per day
(the same for every policy), periodic pages at their fixed times.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from models.backtest.web import BacktestInputError, IntArray, Periodic, PublicWeb, RateSchedule
from models.backtest.workloads import DEFAULT_HOST_CAPACITY, Workload

#: Cho-shaped mixture of host typical rates (changes/day): medians of the components.
_MIXTURE_MEDIAN = np.array([1 / 300, 1 / 60, 1 / 15, 1 / 3, 2.0])
PERIODS = np.array([1.0, 2.0, 7.0, 30.0])
VALUE_TIERS = np.array([1.0, 2.0, 4.0])
_TIER_SHARES = np.array([0.6, 0.3, 0.1])


@dataclass(frozen=True)
class WebFamily:
    """Parameters of a family of webs (every seed draws one web from them)."""

    name: str
    #: host sizes ~ rank ** -zipf over ``pages_per_host``-page hosts on average
    zipf: float = 1.1
    pages_per_host: int = 50
    #: weights of the mixture components of ``_MIXTURE_MEDIAN`` and their log-sd
    mixture: tuple[float, ...] = (0.3, 0.15, 0.2, 0.15, 0.2)
    host_spread: float = 0.5
    #: URL templates per host (1 + Poisson(mean - 1)) and the log-sd of their offsets
    templates: float = 3.0
    template_spread: float = 0.7
    #: log-sd of a page's rate around its template's
    page_spread: float = 0.6
    periodic_share: float = 0.0
    shift_share: float = 0.0
    shift_factor: float = 10.0

    def __post_init__(self) -> None:
        if len(self.mixture) != _MIXTURE_MEDIAN.shape[0] or min(self.mixture) < 0:
            raise BacktestInputError(f"{self.name}: one non-negative weight per component")
        if not (0 <= self.periodic_share < 1 and 0 <= self.shift_share < 1):
            raise BacktestInputError(f"{self.name}: shares must be in [0, 1)")

    def describe(self) -> str:
        parts = [
            f"Zipf {self.zipf:g} hosts (~{self.pages_per_host} pages)",
            f"within-template spread {self.page_spread:g}",
            f"template spread {self.template_spread:g}",
        ]
        if self.periodic_share:
            parts.append(f"{self.periodic_share:.0%} periodic (1/2/7/30 d)")
        if self.shift_share:
            parts.append(f"{self.shift_share:.0%} shift x{self.shift_factor:g} or /")
        return "family " + self.name + ": " + ", ".join(parts)


#: The families the learning benchmark judges on (``MAIN_FAMILIES`` for the gap targets).
FAMILIES: dict[str, WebFamily] = {
    f.name: f
    for f in (
        WebFamily("tight", zipf=1.0, page_spread=0.3, template_spread=0.4),
        WebFamily(
            "wide",
            zipf=1.4,
            page_spread=1.2,
            template_spread=0.3,
            mixture=(0.4, 0.1, 0.15, 0.15, 0.2),
        ),
        WebFamily(
            "templates",
            zipf=1.2,
            page_spread=0.7,
            template_spread=1.2,
            templates=5.0,
            mixture=(0.2, 0.2, 0.2, 0.2, 0.2),
        ),
        WebFamily("periodic", zipf=1.1, page_spread=0.6, periodic_share=0.4),
        WebFamily("shift", zipf=1.1, page_spread=0.6, shift_share=0.2),
    )
}
MAIN_FAMILIES = ("tight", "wide", "templates")


def family_web(
    family: WebFamily | str,
    n_pages: int,
    *,
    seed: int = 0,
    shift_day: int = 30,
    host_capacity: float = DEFAULT_HOST_CAPACITY,
) -> Workload:
    """One web of ``family`` with ``n_pages`` pages, drawn from ``seed``."""
    fam = FAMILIES[family] if isinstance(family, str) else family
    if n_pages < 10:
        raise BacktestInputError(f"a family web needs at least 10 pages, got {n_pages}")
    rng = np.random.default_rng([seed, 31])
    n_hosts = max(1, n_pages // fam.pages_per_host)
    size = np.arange(1, n_hosts + 1, dtype=np.float64) ** -fam.zipf
    raw = rng.choice(n_hosts, size=n_pages, p=size / size.sum())
    _, hosts = np.unique(raw, return_inverse=True)
    hosts = hosts.astype(np.int64)
    n_hosts = int(hosts.max()) + 1
    weights = np.asarray(fam.mixture) / sum(fam.mixture)
    component = rng.choice(weights.shape[0], size=n_hosts, p=weights)
    host_rate = _MIXTURE_MEDIAN[component] * np.exp(rng.normal(0, fam.host_spread, n_hosts))
    n_templates = 1 + rng.poisson(max(fam.templates - 1.0, 0.0), n_hosts)
    template = np.floor(n_templates[hosts] * rng.random(n_pages) ** 1.5).astype(np.int64)
    key = hosts * (int(n_templates.max()) + 1) + template
    _, groups = np.unique(key, return_inverse=True)
    groups = groups.astype(np.int64)
    offset = np.exp(rng.normal(0, fam.template_spread, int(groups.max()) + 1))
    rate = host_rate[hosts] * offset[groups] * np.exp(rng.normal(0, fam.page_spread, n_pages))
    rate = np.clip(rate, 1e-4, 24.0)
    periodic = None
    chosen = rng.random(n_pages) < fam.periodic_share
    if chosen.any():
        pages = np.flatnonzero(chosen)
        period = PERIODS[rng.choice(PERIODS.shape[0], size=pages.shape[0])]
        phase = rng.random(pages.shape[0]) * period
        periodic = Periodic(pages, period, phase)
        rate[pages] = 1.0 / period
    truth = RateSchedule(rate)
    if fam.shift_share:
        free = np.flatnonzero(~chosen)
        moved = np.sort(rng.choice(free, size=int(fam.shift_share * n_pages), replace=False))
        faster = rng.random(moved.shape[0]) < 0.5
        factor = np.where(faster, fam.shift_factor, 1.0 / fam.shift_factor)
        truth = RateSchedule(rate, shift_day, moved, np.clip(rate[moved] * factor, 1e-5, 48.0))
    value = VALUE_TIERS[rng.choice(VALUE_TIERS.shape[0], size=n_pages, p=_TIER_SHARES)]
    capacity = np.full(n_hosts, float(np.floor(host_capacity)))
    web = PublicWeb(hosts, groups, value, np.ones(n_pages), capacity)
    group_host = hosts[np.unique(groups, return_index=True)[1]]
    group_class = np.digitize(component[group_host], [2, 4]).astype(np.int64)
    return Workload(fam.name, web, truth, group_class, fam.describe(), periodic=periodic)


def periodic_pages(workload: Workload) -> IntArray:
    """The periodic pages of a family web (empty without any)."""
    p = workload.periodic
    return p.pages if p is not None else np.zeros(0, dtype=np.int64)
