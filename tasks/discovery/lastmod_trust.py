"""How far each host's sitemap lastmod (and feed) can be trusted, learned from what the fetches
found.

Two sources of a page's claimed last change, each with its own evidence and trust per host:
``lastmod`` (the catalog's sitemap lastmod) and ``feed`` (the page's entry in its host's feed
at the last reading, ``tasks.discovery.feeds``). ``record_signal_evidence(root, cycle_id)``
records both; ``change_ratios`` gives the planner each page's combined likelihood ratio (the
product of the two, as independent signals, clamped).

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
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from models.discovery.lastmod import LastmodEvidence, lastmod_signal, learn_trust
from models.outcomes import OBSERVED, sql_list
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet
from tasks.store.history import HistoryStore, connect

EVIDENCE_FILE = Path("signals") / "lastmod_evidence.parquet"
#: Each source of a claimed last change and where its evidence is kept.
EVIDENCE_FILES = {"lastmod": EVIDENCE_FILE, "feed": Path("signals") / "feed_evidence.parquet"}
FEED_ENTRIES_FILE = Path("signals") / "feed_entries.parquet"
READS_FILE = Path("signals") / "signal_reads.parquet"
READS_SCHEMA = pa.schema([("host", pa.string()), ("read_at", pa.timestamp("us", tz="UTC"))])
FEED_ENTRIES_SCHEMA = pa.schema(
    [
        ("url_id", pa.int64()),
        ("feed", pa.string()),
        ("updated", pa.timestamp("us", tz="UTC")),
        ("read_at", pa.timestamp("us", tz="UTC")),
    ]
)
_COUNTS = ("signaled_changed", "signaled_unchanged", "quiet_changed", "quiet_unchanged")
EVIDENCE_SCHEMA = pa.schema(
    [("cycle_id", pa.int64()), ("host", pa.string())] + [(c, pa.int64()) for c in _COUNTS]
)

_CYCLE_EVIDENCE = """
WITH visits AS (
    SELECT h.*, h.fetched_at - to_microseconds(
               CAST(round(h.interval_days * 86400e6) AS BIGINT)) AS previous
      FROM history h
     WHERE h.cycle_id = $cycle
       AND h.outcome IN (SELECT unnest($observed))
       AND h.changed IS NOT NULL AND h.interval_days IS NOT NULL
), labelled AS (
    SELECT v.host, c.claimed > v.previous AS signaled, v.changed
      FROM visits v JOIN claims c USING (url_id) LEFT JOIN reads r ON r.host = v.host
     WHERE c.claimed IS NOT NULL AND c.claimed <= v.fetched_at
       -- what the planner saw: the host's signals read since the page's previous visit (a
       -- host read weekly has stale claims in between; hosts never noted: read by discovery)
       AND (r.read_at IS NULL OR (r.read_at > v.previous AND r.read_at <= v.fetched_at))
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
SELECT w.pos, c.host, c.lastmod, v.visited
  FROM wanted w
  LEFT JOIN catalog c USING (url_id)
  LEFT JOIN last_visit v USING (url_id)
 ORDER BY w.pos
"""


def record_lastmod_evidence(root: str | Path, cycle_id: int, source: str = "lastmod") -> pa.Table:
    """Count the cycle's labelled examples per host; replace the cycle's counts on disk.

    ``source``: ``lastmod`` (the catalog's sitemap lastmod) or ``feed`` (the feed entries the
    planner saw: the last reading before the cycle).
    """
    path = _evidence_path(root, source)
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("claims", _claims(root, con, source))
    con.register("reads", read_signal_reads(root))
    params = {"cycle": int(cycle_id), "observed": sql_list(OBSERVED)}
    counts = con.sql(_CYCLE_EVIDENCE, params=params).to_arrow_table().cast(EVIDENCE_SCHEMA)
    kept = read_lastmod_evidence(root, source)
    mask = np.asarray(kept["cycle_id"].to_numpy(zero_copy_only=False) != int(cycle_id))
    table = pa.concat_tables([kept.filter(pa.array(mask, pa.bool_())), counts])
    durable_write_parquet(table, path)
    return counts


def record_signal_evidence(root: str | Path, cycle_id: int) -> dict[str, int]:
    """Both sources' evidence of the cycle (after its commit); labelled examples per source."""
    out = {}
    for source in EVIDENCE_FILES:
        counts = record_lastmod_evidence(root, cycle_id, source)
        out[source] = int(sum(sum(counts[c].to_pylist()) for c in _COUNTS))
    return out


def read_lastmod_evidence(root: str | Path, source: str = "lastmod") -> pa.Table:
    """Every recorded cycle's counts (an empty table when none was recorded)."""
    path = _evidence_path(root, source)
    if not path.exists():
        return EVIDENCE_SCHEMA.empty_table()
    try:
        return pq.read_table(path).cast(EVIDENCE_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable {source} evidence at {path}: {exc}") from None


def read_signal_reads(root: str | Path) -> pa.Table:
    """When each host's sitemap and feeds were last read before a cycle (``host``,
    ``read_at``; ``tasks.discovery.signals``); an empty table when never."""
    path = Path(root) / READS_FILE
    if not path.exists():
        return READS_SCHEMA.empty_table()
    try:
        return pq.read_table(path).cast(READS_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable signal reads at {path}: {exc}") from None


def read_feed_entries(root: str | Path) -> pa.Table:
    """The feed entries of the last reading (an empty table when no feed was read)."""
    path = Path(root) / FEED_ENTRIES_FILE
    if not path.exists():
        return FEED_ENTRIES_SCHEMA.empty_table()
    try:
        return pq.read_table(path).cast(FEED_ENTRIES_SCHEMA)
    except (OSError, pa.ArrowException) as exc:
        raise ValueError(f"unreadable feed entries at {path}: {exc}") from None


def feed_claims(root: str | Path) -> pa.Table:
    """Per page listed in a feed, its newest entry's time (``url_id``, ``claimed``)."""
    con = connect()
    con.register("entries", read_feed_entries(root))
    return con.sql(
        "SELECT url_id, max(updated) AS claimed FROM entries GROUP BY url_id"
    ).to_arrow_table()


def _claims(root: str | Path, con: object, source: str) -> object:
    if source == "lastmod":
        rel = CatalogStore(root).relation(con)  # type: ignore[arg-type]
        return rel.project("url_id, lastmod AS claimed")
    return feed_claims(root)


def _evidence_path(root: str | Path, source: str) -> Path:
    try:
        return Path(root) / EVIDENCE_FILES[source]
    except KeyError:
        known = ", ".join(EVIDENCE_FILES)
        raise ValueError(f"unknown signal source {source!r}; use one of {known}") from None


def host_evidence(root: str | Path, source: str = "lastmod") -> tuple[list[str], LastmodEvidence]:
    """Host names and their summed evidence over every recorded cycle."""
    table = read_lastmod_evidence(root, source).to_pandas()
    sums = table.groupby("host")[list(_COUNTS)].sum().sort_index()
    arrays = [sums[c].to_numpy(dtype=np.float64) for c in _COUNTS]
    return list(sums.index), LastmodEvidence(*arrays)


def source_ratios(
    root: str | Path,
    source: str,
    hosts: Sequence[str] | np.ndarray,
    claimed_days: np.ndarray,
    visit_days: np.ndarray,
    now_days: float,
    *,
    prior_strength: float = 10.0,
    max_ratio: float = 20.0,
    min_z: float = 3.0,
) -> np.ndarray:
    """Each page's likelihood ratio from one source: its claim against its last visit (days
    on one clock; NaN: none), under its host's trust learned from ``source``'s evidence. A
    claim later than ``now_days`` is no signal (a clock ahead of ours)."""
    names, evidence = host_evidence(root, source)
    trust = learn_trust(evidence, prior_strength=prior_strength, max_ratio=max_ratio, min_z=min_z)
    claimed = np.where(claimed_days > now_days, np.nan, claimed_days)
    signal = lastmod_signal(claimed, visit_days)
    code = pd.Series(np.arange(len(names)), index=pd.Index(names, dtype=object))
    codes = code.reindex(np.asarray(hosts, dtype=object)).to_numpy(dtype=np.float64)
    have = ~np.isnan(codes)
    ratio = np.ones(signal.shape[0])
    if have.any():
        ratio[have] = trust.likelihood_ratio(codes[have].astype(np.int64), signal[have])
    return ratio


def change_ratios(
    root: str | Path,
    hosts: Sequence[str] | np.ndarray,
    lastmod_days: np.ndarray,
    feed_days: np.ndarray,
    visit_days: np.ndarray,
    now_days: float,
    *,
    max_ratio: float = 20.0,
) -> np.ndarray:
    """The planner's ``change_ratio``: the product of the lastmod and feed ratios, clamped to
    ``[1/max_ratio, max_ratio]`` (1 exactly where neither source proved anything)."""
    ratio = source_ratios(
        root, "lastmod", hosts, lastmod_days, visit_days, now_days, max_ratio=max_ratio
    ) * source_ratios(root, "feed", hosts, feed_days, visit_days, now_days, max_ratio=max_ratio)
    return np.asarray(np.clip(ratio, 1.0 / max_ratio, max_ratio))


def days_since_epoch(values: pd.Series | pd.DatetimeIndex) -> np.ndarray:
    """UTC timestamps as float days since 1970 (NaN for a missing one)."""
    stamps = pd.to_datetime(pd.Series(values), utc=True)
    out = (stamps - pd.Timestamp(0, tz="UTC")).dt.total_seconds().to_numpy(dtype=np.float64)
    return np.asarray(out / 86400.0)


def timestamp_days(when: object) -> float:
    """One UTC time as float days since 1970."""
    stamp = pd.Timestamp(when)  # type: ignore[arg-type]
    stamp = stamp.tz_localize("UTC") if stamp.tzinfo is None else stamp.tz_convert("UTC")
    return float((stamp - pd.Timestamp(0, tz="UTC")).total_seconds() / 86400.0)


def lastmod_likelihood_ratios(
    root: str | Path,
    url_ids: Sequence[int],
    now: object,
    *,
    prior_strength: float = 10.0,
    max_ratio: float = 20.0,
) -> np.ndarray:
    """Each page's likelihood ratio of having changed, from its lastmod and host's trust."""
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
    rows = con.sql(_PAGE_SIGNALS, params={"observed": sql_list(OBSERVED)}).to_df()
    return source_ratios(
        root,
        "lastmod",
        rows["host"].to_numpy(dtype=object),
        days_since_epoch(rows["lastmod"]),
        days_since_epoch(rows["visited"]),
        timestamp_days(now),
        prior_strength=prior_strength,
        max_ratio=max_ratio,
    )
