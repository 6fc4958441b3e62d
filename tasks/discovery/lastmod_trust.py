"""How far each host's sitemap lastmod can be trusted, learned from what the fetches found.

``record_lastmod_evidence(root, cycle_id)`` runs after a cycle's commit (before the sitemaps
are read again): each observation of the cycle (``ok`` or ``not_modified``) whose page has a
lastmod in the catalog and a previous observation is one labelled example: the signal the
planner saw (lastmod after the previous visit; a lastmod later than the fetch itself cannot
have been seen then and is left out) against ``changed`` as the commit linked it. The
per-host counts go to ``<root>/signals/lastmod_evidence.parquet``, one set per cycle
(re-recording a cycle replaces its counts). One DuckDB query over the cycle's history rows
and the catalog.

``lastmod_likelihood_ratios(root, url_ids, now)`` gives the planner each page's likelihood
ratio under its host's learned trust (``models.discovery.lastmod``): 1 where the page has no
signal or its host's lastmod never told changed from unchanged pages. A planner multiplies a
page's odds of having changed by it (``posterior_change``), or shifts its days since the
visit (``effective_days``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from models.discovery.lastmod import LastmodEvidence, learn_trust
from models.outcomes import OBSERVED, sql_list
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet
from tasks.store.history import HistoryStore, connect

EVIDENCE_FILE = Path("signals") / "lastmod_evidence.parquet"
_COUNTS = ("signaled_changed", "signaled_unchanged", "quiet_changed", "quiet_unchanged")
EVIDENCE_SCHEMA = pa.schema(
    [("cycle_id", pa.int64()), ("host", pa.string())] + [(c, pa.int64()) for c in _COUNTS]
)

_CYCLE_EVIDENCE = """
WITH labelled AS (
    SELECT h.host,
           c.lastmod > h.fetched_at - to_microseconds(
               CAST(round(h.interval_days * 86400e6) AS BIGINT)) AS signaled,
           h.changed
      FROM history h JOIN catalog c USING (url_id)
     WHERE h.cycle_id = $cycle
       AND h.outcome IN (SELECT unnest($observed))
       AND h.changed IS NOT NULL AND h.interval_days IS NOT NULL
       AND c.lastmod IS NOT NULL AND c.lastmod <= h.fetched_at
)
SELECT $cycle::BIGINT AS cycle_id, host,
       count(*) FILTER (WHERE signaled AND changed) AS signaled_changed,
       count(*) FILTER (WHERE signaled AND NOT changed) AS signaled_unchanged,
       count(*) FILTER (WHERE NOT signaled AND changed) AS quiet_changed,
       count(*) FILTER (WHERE NOT signaled AND NOT changed) AS quiet_unchanged
  FROM labelled GROUP BY host ORDER BY host
"""

_PAGE_SIGNALS = """
WITH last_visit AS (
    SELECT url_id, max(fetched_at) AS visited
      FROM history WHERE outcome IN (SELECT unnest($observed)) GROUP BY url_id
)
SELECT w.pos, c.host,
       CASE WHEN c.lastmod IS NULL OR v.visited IS NULL OR c.lastmod > $now THEN NULL
            WHEN c.lastmod > v.visited THEN 1.0 ELSE 0.0 END AS signal
  FROM wanted w
  LEFT JOIN catalog c USING (url_id)
  LEFT JOIN last_visit v USING (url_id)
 ORDER BY w.pos
"""


def record_lastmod_evidence(root: str | Path, cycle_id: int) -> pa.Table:
    """Count the cycle's labelled examples per host; replace the cycle's counts on disk."""
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("catalog", CatalogStore(root).relation(con))
    params = {"cycle": int(cycle_id), "observed": sql_list(OBSERVED)}
    counts = con.sql(_CYCLE_EVIDENCE, params=params).to_arrow_table().cast(EVIDENCE_SCHEMA)
    kept = read_lastmod_evidence(root)
    mask = np.asarray(kept["cycle_id"].to_numpy(zero_copy_only=False) != int(cycle_id))
    table = pa.concat_tables([kept.filter(pa.array(mask, pa.bool_())), counts])
    durable_write_parquet(table, Path(root) / EVIDENCE_FILE)
    return counts


def read_lastmod_evidence(root: str | Path) -> pa.Table:
    """Every recorded cycle's counts (an empty table when none was recorded)."""
    path = Path(root) / EVIDENCE_FILE
    if not path.exists():
        return EVIDENCE_SCHEMA.empty_table()
    try:
        return pq.read_table(path).cast(EVIDENCE_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable lastmod evidence at {path}: {exc}") from None


def host_evidence(root: str | Path) -> tuple[list[str], LastmodEvidence]:
    """Host names and their summed evidence over every recorded cycle."""
    table = read_lastmod_evidence(root).to_pandas()
    sums = table.groupby("host")[list(_COUNTS)].sum().sort_index()
    arrays = [sums[c].to_numpy(dtype=np.float64) for c in _COUNTS]
    return list(sums.index), LastmodEvidence(*arrays)


def lastmod_likelihood_ratios(
    root: str | Path,
    url_ids: Sequence[int],
    now: object,
    *,
    prior_strength: float = 10.0,
    max_ratio: float = 20.0,
) -> np.ndarray:
    """Each page's likelihood ratio of having changed, from its signal and host's trust."""
    hosts, evidence = host_evidence(root)
    trust = learn_trust(evidence, prior_strength=prior_strength, max_ratio=max_ratio)
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("catalog", CatalogStore(root).relation(con))
    con.register(
        "wanted",
        pa.table(
            {
                "pos": np.arange(len(url_ids), dtype=np.int64),
                "url_id": np.asarray(url_ids, dtype=np.int64),
            }
        ),
    )
    rows = con.sql(_PAGE_SIGNALS, params={"observed": sql_list(OBSERVED), "now": now}).to_df()
    code = {h: k for k, h in enumerate(hosts)}
    known = rows["host"].map(code)
    signal = rows["signal"].to_numpy(dtype=np.float64)
    ratio = np.ones(len(rows))
    have = known.notna().to_numpy()
    if have.any():
        ratio[have] = trust.likelihood_ratio(known[have].to_numpy(dtype=np.int64), signal[have])
    return ratio
