"""Arrow schemas of the stored tables, defined once.

The history is append-only and evolves by adding nullable columns: readers use
``union_by_name`` so files written before a column existed read it as NULL. Never
rename or retype a column; add a new one.
"""

from __future__ import annotations

import pyarrow as pa

# The vocabulary lives in models.outcomes; kept importable here for the store's validator.
from models.outcomes import OUTCOMES as OUTCOMES

UTC_TIMESTAMP = pa.timestamp("us", tz="UTC")

#: One row per known URL.
CATALOG_SCHEMA = pa.schema(
    [
        pa.field(
            "url_id", pa.int64(), nullable=False
        ),  # models.discovery.urls.url_id(normalized url)
        pa.field("url", pa.string(), nullable=False),  # normalized URL
        pa.field("host", pa.string(), nullable=False),
        pa.field("value", pa.float64(), nullable=False),  # business value weight (tier -> weight)
        pa.field("cost", pa.float64(), nullable=False),  # cost hint of one visit, budget units
        pa.field("group", pa.string(), nullable=False),  # smoothing group (host or page type)
        pa.field("source", pa.string(), nullable=False),  # seed, sitemap, link, ...
        pa.field("discovered_at", UTC_TIMESTAMP, nullable=False),
        pa.field("lastmod", UTC_TIMESTAMP),  # sitemap <lastmod> (a change signal), if any
        pa.field("changefreq", pa.string()),  # sitemap <changefreq> (a prior), if any
        # rel="canonical" of the page's last fetch when it names another page of the site:
        # the page is known by that URL and not planned on its own (NULL: it is canonical)
        pa.field("canonical", pa.string()),
        # url_id of the page its near-duplicate cluster keeps at full value (NULL: none);
        # the planner down-ranks the page
        pa.field("near_duplicate_of", pa.int64()),
    ]
)

#: One row per fetch attempt. ``changed`` and ``interval_days`` are filled by the store
#: when a cycle is committed: ``interval_days`` is the time since the page's previous
#: observation (the one ``changed`` compares against), NULL for a first observation and
#: for attempts that observed nothing.
HISTORY_SCHEMA = pa.schema(
    [
        pa.field("url_id", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("cycle_id", pa.int64(), nullable=False),
        pa.field("fetched_at", UTC_TIMESTAMP, nullable=False),
        pa.field("status", pa.int16()),  # HTTP status, NULL when no response
        pa.field("outcome", pa.string(), nullable=False),  # one of models.outcomes.OUTCOMES
        pa.field("changed", pa.bool_()),  # vs the previous observation; NULL if unknown
        pa.field("interval_days", pa.float64()),
        pa.field("record_hash", pa.string()),  # hash of the extracted record
        pa.field("simhash", pa.int64()),  # 64-bit simhash of the normalized text
        pa.field("etag", pa.string()),
        pa.field("last_modified", pa.string()),  # raw Last-Modified header
        pa.field("bytes", pa.int64()),  # bytes transferred, headers included
        pa.field("latency_s", pa.float64()),
        pa.field("cost", pa.float64()),  # what the attempt cost, budget units
        pa.field("retries", pa.int16()),
        pa.field("reason", pa.string()),  # detail of the outcome (which limit, which rule)
        pa.field("warc_file", pa.string()),  # raw exchange: WARC file relative to the root
        pa.field("warc_offset", pa.int64()),  # byte offset of its response/revisit record
    ]
)

#: Columns a caller must provide when writing history; the rest may be absent (NULL).
HISTORY_REQUIRED: tuple[str, ...] = ("url_id", "host", "fetched_at", "outcome")
CATALOG_REQUIRED: tuple[str, ...] = ("url", "host")

#: Per-page sufficient statistics of the observed intervals, maintained by the history
#: store at every commit (sums are additive over cycles) and rebuildable from the history.
#: ``changed_sum*`` are sums of the first three powers of the changed intervals (days).
PAGE_STATS_SCHEMA = pa.schema(
    [
        pa.field("url_id", pa.int64(), nullable=False),
        pa.field("host", pa.string(), nullable=False),
        pa.field("n_intervals", pa.int64(), nullable=False),
        pa.field("n_changed", pa.int64(), nullable=False),
        pa.field("unchanged_days", pa.float64(), nullable=False),
        pa.field("changed_sum", pa.float64(), nullable=False),
        pa.field("changed_sum_sq", pa.float64(), nullable=False),
        pa.field("changed_sum_cube", pa.float64(), nullable=False),
    ]
)

#: What the pages' Last-Modified headers told (``models.fetching.validators.judge_last_modified`` of
#: every observation with a Last-Modified or an earlier one), summed per page at each commit
#: like the interval sums, so estimation never rescans the history for them. ``age_*`` are
#: ``models.estimation.rate_data.PageAges``: ``age_count`` observations dated a change, ``age_days``
#: sums their ages (and the horizon of old first observations), ``age_n_changed`` of them
#: were changed intervals, whose powers sum to ``age_changed_sum*``; ``age_terms`` counts
#: the observations with any age (``age_days`` is exactly 0 without one). ``lm_*`` count the
#: observations by evidence code (``LM_ABSENT`` to ``LM_NOW``, in that order), summed by host
#: at estimate time.
PAGE_AGE_FIELDS: tuple[pa.Field, ...] = (
    pa.field("age_terms", pa.int64(), nullable=False),
    pa.field("age_count", pa.int64(), nullable=False),
    pa.field("age_days", pa.float64(), nullable=False),
    pa.field("age_n_changed", pa.int64(), nullable=False),
    pa.field("age_changed_sum", pa.float64(), nullable=False),
    pa.field("age_changed_sum_sq", pa.float64(), nullable=False),
    pa.field("age_changed_sum_cube", pa.float64(), nullable=False),
    pa.field("lm_absent", pa.int64(), nullable=False),
    pa.field("lm_dated", pa.int64(), nullable=False),
    pa.field("lm_consistent", pa.int64(), nullable=False),
    pa.field("lm_hidden_change", pa.int64(), nullable=False),
    pa.field("lm_volatile", pa.int64(), nullable=False),
    pa.field("lm_now", pa.int64(), nullable=False),
)
#: Evidence columns of PAGE_AGE_FIELDS in the order of the ``LM_*`` codes.
LM_EVIDENCE_COLUMNS: tuple[str, ...] = tuple(
    f.name for f in PAGE_AGE_FIELDS if f.name.startswith("lm_")
)

#: The statistics file as stored: PAGE_STATS_SCHEMA plus PAGE_AGE_FIELDS, one row per page
#: with an interval or a judged Last-Modified (a page seen once may have no interval).
#: ``HistoryStore.page_stats`` still gives PAGE_STATS_SCHEMA for the pages with intervals.
PAGE_STATS_FILE_SCHEMA = pa.schema([*PAGE_STATS_SCHEMA, *PAGE_AGE_FIELDS])
