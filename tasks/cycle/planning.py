"""Plan a cycle from a stored history: estimate -> allocate -> select -> plan Parquet."""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa

from models.discovery.admission import NEAR_DUPLICATE_VALUE
from models.estimation.change_rate import PriorChoice
from models.estimation.periodic import (
    PERIODS,
    DetectionRule,
    PeriodicOutlook,
    PhaseHistory,
    planning_outlook,
)
from models.outcomes import BILLED, NOT_SENT, OBSERVED, UNHEALTHY, sql_list
from models.planning.core import PlanningPages, plan_from_moments
from models.planning.cost import COST_MODELS, CostModel, PageHistory, health_multiplier
from models.planning.select import REASONS, PlanningInputError, Slices
from tasks.cycle.estimation import read_estimation_inputs
from tasks.discovery.lastmod_trust import (
    change_ratios,
    days_since_epoch,
    feed_claims,
    timestamp_days,
)
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write
from tasks.store.history import HistoryStore, connect

_NEWEST = "SELECT max(fetched_at) FROM history"
# One pass over the history per page: its last observation, and what its recent attempts
# cost and said about its host. Attempts that sent no request (``models.outcomes.NOT_SENT``: shed,
# robots denials, refused addresses) are not attempts for pricing.
_ATTEMPTS = """
SELECT url_id, any_value(host) AS host,
       max(fetched_at) FILTER (WHERE outcome IN (SELECT unnest($observed))) AS last_visit,
       count(*) FILTER (WHERE priced AND fetched_at >= $cost_since) AS attempts,
       count(*) FILTER (WHERE priced AND fetched_at >= $cost_since
                        AND outcome IN (SELECT unnest($billed))) AS billed,
       sum(coalesce(bytes, 0)) FILTER (WHERE priced AND fetched_at >= $cost_since) AS bytes,
       count(*) FILTER (WHERE priced AND fetched_at >= $health_since) AS recent,
       count(*) FILTER (WHERE fetched_at >= $health_since
                        AND outcome IN (SELECT unnest($unhealthy))) AS unhealthy
FROM (SELECT *, outcome NOT IN (SELECT unnest($not_sent)) AS priced FROM history)
GROUP BY url_id
"""
_PAGES = """
WITH hosts AS (
    SELECT host, sum(attempts) AS host_attempts, sum(billed) AS host_billed,
           sum(bytes) / nullif(sum(attempts), 0) AS host_mean_bytes,
           sum(recent) AS host_recent, sum(unhealthy) AS host_unhealthy
    FROM attempts GROUP BY host
)
SELECT e.pos, e.url_id, e.host,
       coalesce(c.value, 1.0)
           * CASE WHEN c.near_duplicate_of IS NULL THEN 1.0 ELSE $near_duplicate_value END
           AS value,
       c.cost AS cost_hint, a.last_visit, c.lastmod, f.claimed AS feed_updated,
       coalesce(a.attempts, 0) AS attempts, coalesce(a.billed, 0) AS billed,
       a.bytes / nullif(a.attempts, 0) AS mean_bytes,
       coalesce(h.host_attempts, 0) AS host_attempts, coalesce(h.host_billed, 0) AS host_billed,
       h.host_mean_bytes, coalesce(h.host_recent, 0) AS host_recent,
       coalesce(h.host_unhealthy, 0) AS host_unhealthy
FROM estimates e LEFT JOIN catalog c USING (url_id) LEFT JOIN attempts a USING (url_id)
     LEFT JOIN hosts h ON h.host = e.host LEFT JOIN feed_claims f USING (url_id)
WHERE c.canonical IS NULL  -- a page known by another URL is not planned on its own
ORDER BY e.pos  -- the estimates' order: the seeded verification sample is reproducible
"""

# Each observed visit of the last cycles with the cycle of the page's visit before it: the
# observations the periodicity detector reads (``models.estimation.periodic``: the cycle ids
# are its cells). The window is twice the longest candidate period.
_PERIODIC_ROWS = """
SELECT url_id, coalesce(start_cycle, -1) AS start_cycle, cycle_id AS end_cycle,
       coalesce(interval_days, 0.0) AS interval_days, coalesce(changed, false) AS changed,
       coalesce(changed IS NOT NULL AND interval_days > 0 AND start_cycle < cycle_id, false)
           AS usable
FROM (
    SELECT url_id, cycle_id, interval_days, changed,
           lag(cycle_id) OVER (PARTITION BY url_id ORDER BY fetched_at) AS start_cycle
    FROM history
    WHERE outcome IN (SELECT unnest($observed)) AND cycle_id >= $since AND cycle_id <= $cycle
)
"""


#: Ad hoc plans (a notebook's, ``recrawl plan``, the ``plan-adhoc`` deployment) live apart
#: from the cycles' own plans, each under its own name, so planning ahead never replaces the
#: plan a running cycle is fetching.
ADHOC_DIR = "adhoc"
_ADHOC_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._=+-]{0,127}")


def plan_path(root: str | Path, cycle_id: int, adhoc_name: str | None = None) -> Path:
    """Where a plan lives: ``plans/cycle=<id>.parquet`` for the cycle's own plan (the one
    the recrawl cycle fetches), ``plans/adhoc/<name>.parquet`` for an ad hoc one."""
    plans = Path(root) / "plans"
    if adhoc_name is None:
        return plans / f"cycle={int(cycle_id)}.parquet"
    if not _ADHOC_NAME.fullmatch(adhoc_name) or ".." in adhoc_name:
        raise PlanningInputError(
            f"ad hoc plan name {adhoc_name!r}: use letters, digits and . _ = + - (128 at most)"
        )
    return plans / ADHOC_DIR / f"{adhoc_name}.parquet"


def adhoc_plan_name(cycle_id: int, now: datetime | None = None) -> str:
    """A fresh ad hoc plan name: the cycle planned and when (UTC, microseconds)."""
    stamp = (now or datetime.now(UTC)).strftime("%Y%m%dT%H%M%S.%fZ")
    return f"cycle={int(cycle_id)}.{stamp}"


@dataclass(frozen=True)
class PlanResult:
    path: Path
    summary: dict[str, float]
    cost_model: str
    #: the prior the rates came from, one line (``RateEstimates.prior_description``)
    prior: str = ""


def plan_cycle(
    root: str | Path,
    cycle_id: int,
    budget: float,
    *,
    host_capacity: float = 500.0,
    cycle_days: float = 1.0,
    now: datetime | None = None,
    slices: Slices | None = None,
    seed: int = 0,
    cost_model: CostModel | str = "credits",
    cost_window_days: float = 30.0,
    health_window_days: float = 7.0,
    near_duplicate_value: float = NEAR_DUPLICATE_VALUE,
    adhoc_name: str | None = None,
    prior: PriorChoice = "mixture",
    signals: bool = True,
    periodic: DetectionRule | None = None,
) -> PlanResult:
    """Write ``<root>/plans/cycle=<id>.parquet`` and return its path and summary.

    With ``adhoc_name`` the plan goes to ``plans/adhoc/<name>.parquet`` instead
    (:func:`plan_path`): an ad hoc plan never replaces a cycle's own.

    ``budget`` is the cycle's budget in cost units; ``host_capacity`` visits per host per
    cycle. The allocation spends what is left after the reserved slices, at most one visit
    per page per cycle; ``now`` defaults to the newest attempt in the history.

    A visit's cost comes from ``cost_model`` (``models.planning.cost``: "credits", "bandwidth" or
    "catalog") applied to the page's attempts of the last ``cost_window_days`` (else its
    host's, else the catalog's hint), times its host's health multiplier over the last
    ``health_window_days``: a host that throttles or fails costs more.

    What the recrawl cycle learned of the catalog's pages applies: a page whose
    ``canonical`` names another page is left out (the other page is planned), and a known
    near-duplicate (``near_duplicate_of``) counts ``near_duplicate_value`` times its value.

    The statistics come from ``tasks.cycle.estimation.read_estimation_inputs(root)`` and the
    catalog and history through DuckDB; estimation, allocation and selection are the pure
    ``models.planning.core.plan_from_moments`` (what the backtest and a notebook run too),
    under ``prior`` (a weaker prior where it cannot be fitted; ``PlanResult.prior`` names
    the one used).

    With ``signals``, each page's sitemap lastmod (catalog) and feed entry (the last feed
    reading, ``tasks.discovery.feeds``) against its last visit give its likelihood ratio of
    having changed under its host's learned trust (``tasks.discovery.lastmod_trust.
    change_ratios``), and the batch reorders each host's revisits by it, within the host's
    own share (``models.planning.select.select_batch``): a host whose signals proved nothing
    is planned exactly as without them. The summary counts the pages whose ratio is not 1.

    With ``periodic`` (a ``models.estimation.periodic.DetectionRule``, e.g. its
    ``DEFAULT_RULE``; off by default: the detector reads every observed visit of the last 60
    cycles from the history at each plan, ~2 us of CPU a stored observation, which at 1 M
    pages visited daily would take planning past its 10 s), the visits of the last 60 cycles
    tell which pages change once every P cycles and at which phase
    (:func:`periodic_outlook`); such a page is visited on the first cycle after its
    expected change, at one visit a period, and a page whose phase is uncertain is visited
    where the visit halves it (``models.planning.core``). The summary counts them.
    """
    slices = slices or Slices()
    model = _cost_model(cost_model)
    inputs = read_estimation_inputs(root)
    con = connect()
    con.register(
        "estimates",
        pa.table(
            {
                "pos": np.arange(inputs.moments.size, dtype=np.int64),
                "url_id": inputs.moments.page_ids,
                "host": inputs.host_names.take(pa.array(inputs.host_codes)),
            }
        ),
    )
    con.register("catalog", CatalogStore(root).relation(con))
    con.register("history", HistoryStore(root).relation(con))
    con.register("feed_claims", feed_claims(root))
    if now is None:
        newest = con.execute(_NEWEST).fetchall()[0][0]
        now = newest if newest is not None else datetime.now(UTC)
    stamp = pd.Timestamp(now)
    params = {
        "observed": sql_list(OBSERVED),
        "not_sent": sql_list(NOT_SENT),
        "billed": sql_list(BILLED),
        "unhealthy": sql_list(UNHEALTHY),
        "cost_since": (stamp - pd.Timedelta(days=cost_window_days)).to_pydatetime(),
        "health_since": (stamp - pd.Timedelta(days=health_window_days)).to_pydatetime(),
    }
    con.register("attempts", con.sql(_ATTEMPTS, params=params).to_arrow_table())
    pages = con.sql(_PAGES, params={"near_duplicate_value": near_duplicate_value}).to_df()
    since = (stamp - pages["last_visit"]).dt.total_seconds().to_numpy() / 86400.0
    host_codes, host_names = pd.factorize(pages["host"])
    ratio = None
    if signals:
        ratio = change_ratios(
            root,
            pages["host"].to_numpy(dtype=object),
            days_since_epoch(pages["lastmod"]),
            days_since_epoch(pages["feed_updated"]),
            days_since_epoch(pages["last_visit"]),
            timestamp_days(stamp),
        )
    outlook = (
        None
        if periodic is None
        else periodic_outlook(con, pages["url_id"].to_numpy(), cycle_id, periodic, cycle_days)
    )
    cycle = plan_from_moments(
        inputs.moments,
        inputs.group_codes,
        PlanningPages(
            hosts=host_codes.astype(np.int64),
            value=pages["value"].to_numpy(dtype=np.float64),
            cost=page_costs(model, pages),
            days_since_visit=since,
            planned=pages["pos"].to_numpy(dtype=np.int64),
            change_ratio=ratio,
            periodic=outlook,
        ),
        budget,
        np.full(len(host_names), host_capacity),
        cycle_days=cycle_days,
        slices=slices,
        seed=seed,
        prior=prior,
    )
    plan, allocation, candidates = cycle.plan, cycle.allocation, cycle.candidates
    frame = pd.DataFrame(
        {
            "url_id": candidates.page_ids[plan.index],
            "host": pages["host"].to_numpy()[plan.index],
            "reason": np.asarray(REASONS, dtype=object)[plan.reason],
            "score": plan.score,
            "expected_gain": plan.expected_gain,
            "p_changed": plan.expected_change,
            "cost": plan.cost,
            "frequency": allocation.frequencies[plan.index],
        }
    )
    path = plan_path(root, cycle_id, adhoc_name)
    # durable before it is named: a crash leaves old or new
    durable_write(path, lambda handle: frame.to_parquet(handle, index=False))
    summary = plan.summary()
    summary["allocated_expected_freshness"] = allocation.expected_freshness
    summary["signalled_pages"] = float(np.count_nonzero(ratio != 1.0)) if ratio is not None else 0.0
    summary["periodic_pages"] = (
        float(np.count_nonzero(outlook.period > 0)) if outlook is not None else 0.0
    )
    return PlanResult(path, summary, model.name, cycle.estimates.prior_description())


def periodic_outlook(
    con: duckdb.DuckDBPyConnection,
    url_ids: np.ndarray,
    cycle_id: int,
    rule: DetectionRule,
    cycle_days: float = 1.0,
) -> PeriodicOutlook:
    """The periodic outlook of the pages ``url_ids`` (in order) at cycle ``cycle_id`` from
    the ``history`` relation registered on ``con``: each page's observed visits of the last
    ``2 x 30`` cycles, cycle ids as the detector's cells."""
    since = int(cycle_id) - 2 * int(PERIODS.max())
    rows = con.sql(
        _PERIODIC_ROWS,
        params={"observed": sql_list(OBSERVED), "since": since, "cycle": int(cycle_id)},
    ).fetchnumpy()
    position = pd.Index(url_ids).get_indexer(rows["url_id"])
    n = int(url_ids.shape[0])
    mine = position >= 0
    last_visit = np.full(n, np.nan)  # the page's last observed visit (a cycle id)
    np.fmax.at(last_visit, position[mine], np.asarray(rows["end_cycle"], dtype=np.float64)[mine])
    use = mine & np.asarray(rows["usable"], dtype=bool)
    changed_at = np.bincount(
        position[use], weights=np.asarray(rows["changed"], dtype=bool)[use], minlength=n
    )
    # a page with fewer changes than the rule asks for is neither believed nor probed:
    # its rows are left out of the detector (the same outlook, for less work)
    use &= changed_at[np.where(mine, position, 0)] >= rule.min_changes
    page = position[use].astype(np.int64)
    changed = np.asarray(rows["changed"], dtype=bool)[use]
    history = PhaseHistory.from_rows(
        page,
        np.asarray(rows["start_cycle"], dtype=np.int64)[use],
        np.asarray(rows["end_cycle"], dtype=np.int64)[use],
        np.asarray(rows["interval_days"], dtype=np.float64)[use],
        changed,
        n,
    )
    return planning_outlook(
        history, changed_at, last_visit, float(cycle_id), rule=rule, cycle_days=cycle_days
    )


def page_costs(model: CostModel, pages: pd.DataFrame) -> np.ndarray:
    """Expected cost of each page's next visit: billing model x its host's health."""

    def column(name: str) -> np.ndarray:
        return pages[name].to_numpy(dtype=np.float64, na_value=np.nan)

    history = PageHistory(
        attempts=column("attempts"),
        billed=column("billed"),
        mean_bytes=column("mean_bytes"),
        host_attempts=column("host_attempts"),
        host_billed=column("host_billed"),
        host_mean_bytes=column("host_mean_bytes"),
    )
    base = model.visit_cost(history, column("cost_hint"))
    return base * health_multiplier(column("host_recent"), column("host_unhealthy"))


def _cost_model(model: CostModel | str) -> CostModel:
    if not isinstance(model, str):
        return model
    try:
        return COST_MODELS[model]
    except KeyError:
        known = ", ".join(sorted(COST_MODELS))
        raise PlanningInputError(f"unknown cost model {model!r}; use one of {known}") from None
