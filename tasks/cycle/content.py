"""What a recrawl cycle learns from the pages it fetched, beyond their history rows.

The crawler-design article's loop: fetched pages are parsed for links, new links pass the
seen-URL filter back into the frontier (here: the page catalog, where the planner's
discovery slice picks them up), ``rel="canonical"`` is honoured after the download, and
content fingerprints flag near-duplicates, which are down-ranked.

Two halves:

* **In each host batch** (``PageCollector``, ``write_batch_content``): the record hasher is
  wrapped so that each answered page is also read for its links and canonical link
  (``models.discovery.links.page_links``, one parse). Links the batch's robots.txt rules deny, and
  the
  sitemaps those rules name, are dropped there (the engine's rules are in that process).
  The rest go to ``_work/cycle=<id>/content/<batch>.parquet``, one row per distinct link
  and one per answered page (its declared canonical, or NULL).
* **After the commit** (``apply_cycle_content``, idempotent, run once per cycle; a re-run of
  a committed cycle finishes it if a crash came first):

  1. canonicals: a page whose canonical names another page of its site gets the catalog
     column ``canonical`` (the planner then leaves it out) and its value is carried over
     (the target's value becomes the larger of the two); a target the catalog lacks is
     added (source ``canonical``). A page fetched without such a link gets NULL again.
  2. links the catalog lacks (a DuckDB anti-join), in scope (by default, hosts the catalog
     already holds), the most linked first, are landed by ``tasks.discovery.run.land``
     (normalized, Bloom filter of seen links, trap defenses, exact catalog check, per-host
     caps by importance), at most ``max_new_pages`` a cycle; the rest come back later.
  3. near-duplicates: the latest simhash of every page (history) is clustered
     (``models.content.simhash.near_duplicate_clusters``, 3 bits); in each cluster one page is kept
     (``models.discovery.admission.cluster_keepers``) and the others get ``near_duplicate_of`` (the
     planner plans them at ``NEAR_DUPLICATE_VALUE`` times their value). The report goes to
     ``reports/cycle=<id>/near_duplicates.json``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterable
from dataclasses import asdict, dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal, Protocol

import duckdb
import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.compute as pc

from models.content.simhash import NEAR_DUPLICATE_BITS, near_duplicate_clusters
from models.discovery.admission import (
    Candidate,
    cluster_keepers,
    honoured_canonicals,
    screen_candidates,
)
from models.discovery.links import PageLinks, page_links
from models.discovery.seen import ExactSeenSet
from models.discovery.urls import InvalidURLError, canonical, url_host, url_id
from models.outcomes import WITH_BODY, sql_list
from tasks.discovery.run import DiscoverySettings, land
from tasks.fetch.robots import RobotsCache, RobotsRules
from tasks.fetch.rows import RecordHasher
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_parquet, durable_write_text
from tasks.store.history import HistoryStore, connect

log = logging.getLogger(__name__)

CONTENT_DIR = "content"
DONE = "content.done.json"
NEAR_DUPLICATE_REPORT = "near_duplicates.json"
_CONTENT_SCHEMA = pa.schema(
    [
        pa.field("kind", pa.string(), nullable=False),  # link | canonical
        pa.field("page", pa.string(), nullable=False),  # the fetched page (final URL)
        pa.field("page_id", pa.int64(), nullable=False),
        pa.field("url", pa.string()),  # the link, or the declared canonical (NULL: none)
        pa.field("url_id", pa.int64()),
        pa.field("host", pa.string()),  # of ``url``
    ]
)


@dataclass(frozen=True)
class ContentSettings:
    """How a cycle's fetched pages feed the catalog."""

    discovery: DiscoverySettings = field(default_factory=DiscoverySettings)
    max_new_pages: int = 10_000  # pages landed from links per cycle
    #: new links screened per cycle, per page it may add: the most linked first (the rest,
    #: not marked as seen, wait for a later cycle)
    candidates_per_new_page: int = 4
    #: ``catalog_hosts``: only links to hosts the catalog holds (a recrawl keeps a set of
    #: sites fresh; ``recrawl discover`` brings a new site in); ``any``: every host.
    link_scope: Literal["catalog_hosts", "any"] = "catalog_hosts"
    follow_canonical: bool = True
    near_duplicate_bits: int = NEAR_DUPLICATE_BITS
    top_clusters: int = 10  # clusters listed in the report

    def __post_init__(self) -> None:
        if self.max_new_pages < 0:
            raise ValueError(f"max_new_pages must be >= 0, got {self.max_new_pages}")
        if self.candidates_per_new_page < 1:
            raise ValueError(
                f"candidates_per_new_page must be >= 1, got {self.candidates_per_new_page}"
            )
        if self.link_scope not in ("catalog_hosts", "any"):
            raise ValueError(f"link_scope must be catalog_hosts or any, got {self.link_scope!r}")


@dataclass(frozen=True)
class ContentResult:
    """What ``apply_cycle_content`` did (counts; the near-duplicate report is a file)."""

    cycle_id: int
    links_found: int  # distinct links the batches kept
    links_out_of_scope: int  # new links to hosts outside the scope
    links_added: int
    links_rejected: dict[str, int]  # by reason (``max_pages``: over the cycle's bound)
    links_deferred: int  # new in-scope links not screened this cycle (beyond the bound)
    canonical_pages: int  # fetched pages now known by another URL
    canonical_cleared: int  # fetched pages whose earlier canonical went away
    canonical_added: int  # canonical targets added to the catalog
    clusters: int
    down_ranked: int  # pages with near_duplicate_of set
    report: str | None


# ---------------------------------------------------------------------- in a host batch


class CollectedPages(Protocol):
    """What a batch kept of its answered pages (``PageCollector``, ``OffloadHasher``)."""

    pages: dict[str, PageLinks]


class PageCollector:
    """A record hasher that also keeps each answered page's links and canonical link."""

    def __init__(self, hasher: RecordHasher) -> None:
        self.hasher = hasher
        self.pages: dict[str, PageLinks] = {}
        self.unparsed = 0

    # Any: whatever the wrapped hasher returns (a digest, or an awaitable one), passed on.
    def __call__(self, body: bytes, content_type: str | None, url: str) -> Any:
        digest = self.hasher(body, content_type, url)
        try:
            self.pages[url] = page_links(url, body, content_type)
        except (InvalidURLError, ValueError) as exc:  # the page's own URL: never expected
            self.unparsed += 1
            log.debug("links of %s not read: %s", url, exc)
        return digest


def write_batch_content(
    folder: Path,
    batch_name: str,
    collector: CollectedPages,
    robots: RobotsCache,
    robots_token: str,
    now: datetime,
) -> Path:
    """Write the batch's links and canonicals (see the module docstring); returns the file.

    A link the batch's known robots.txt rules deny is dropped (unknown rules: kept, the
    fetcher decides later), and so are the sitemaps those rules name: they are not pages.
    """
    pages, canonicals, links, sources = [], [], [], []
    seen: set[str] = set()
    rules_seen: dict[str, RobotsRules] = {}
    for page, found in collector.pages.items():
        pages.append(page)
        target = canonical(page, found.canonical) if found.canonical else page
        canonicals.append(target if target != page else None)
        for link in found.links:
            if link in seen:
                continue
            seen.add(link)
            rules = robots.get(link, now)
            if rules is not None:
                rules_seen.setdefault(RobotsCache.key(link), rules)
                if rules.denial(link, robots_token) is not None:
                    continue
            links.append(link)
            sources.append(page)
    sitemaps = {u for r in rules_seen.values() if r.parser is not None for u in r.parser.sitemaps}
    kept = [(p, u) for p, u in zip(sources, links, strict=True) if u not in sitemaps]
    targets = canonicals + [u for _, u in kept]
    table = pa.table(
        {
            "kind": ["canonical"] * len(pages) + ["link"] * len(kept),
            "page": pages + [p for p, _ in kept],
            "page_id": [url_id(p) for p in pages] + [url_id(p) for p, _ in kept],
            "url": targets,
            "url_id": [url_id(u) if u else None for u in targets],
            "host": [url_host(u) if u else None for u in targets],
        },
        schema=_CONTENT_SCHEMA,
    )
    path = folder / CONTENT_DIR / f"{batch_name}.parquet"
    durable_write_parquet(table, path)
    return path


# ---------------------------------------------------------------------- after the commit


def content_pending(folder: Path) -> bool:
    """True if the cycle's work folder has a split whose content was not applied yet."""
    return (folder / "batches.json").exists() and not (folder / DONE).exists()


def apply_cycle_content(
    root: str | Path,
    cycle_id: int,
    folder: Path,
    *,
    now: datetime | None = None,
    settings: ContentSettings | None = None,
) -> ContentResult:
    """Canonicals, links and near-duplicates of a committed cycle (module docstring).

    ``folder`` is the cycle's work folder (``tasks.cycle.work.work_dir``). Safe to run again: a
    second run finds the links known, sets the same columns and rewrites the same report.
    DuckDB joins the batches' files with the catalog, so only pages with a canonical to
    act on and links the catalog lacks reach Python.
    """
    settings = settings or ContentSettings()
    now = now or datetime.now(UTC)
    catalog = CatalogStore(root)
    files = sorted((folder / CONTENT_DIR).glob("batch-*.parquet"))
    canon = (0, 0, 0)
    links = _LinkCounts()
    if files and catalog.path.exists():
        con = connect()
        con.register("content", con.read_parquet([str(f) for f in files]))
        if settings.follow_canonical:
            con.register("catalog", catalog.relation(con))
            declared: dict[str, str | None] = dict(con.sql(_DECLARED).fetchall())
            canon = _apply_canonicals(catalog, declared, settings, now)
        con.register("catalog", catalog.relation(con))  # as the canonicals left it
        links = _land_links(root, con, settings, now)
    clusters, down_ranked, path = _near_duplicates(root, cycle_id, catalog, settings)
    result = ContentResult(
        cycle_id=int(cycle_id),
        links_found=links.found,
        links_out_of_scope=links.out_of_scope,
        links_added=links.added,
        links_rejected=links.rejected,
        links_deferred=links.deferred,
        canonical_pages=canon[0],
        canonical_cleared=canon[1],
        canonical_added=canon[2],
        clusters=clusters,
        down_ranked=down_ranked,
        report=str(path) if path is not None else None,
    )
    if folder.exists():
        _write_json(folder / DONE, asdict(result))
    log.info(
        "cycle %s content: %d links (%d added), %d pages canonicalized, %d near-duplicate "
        "clusters (%d pages down-ranked)",
        cycle_id,
        result.links_found,
        result.links_added,
        result.canonical_pages,
        clusters,
        down_ranked,
    )
    return result


def read_near_duplicate_report(root: str | Path, cycle_id: int) -> dict[str, Any] | None:
    """The cycle's near-duplicate report, if it was written."""
    path = Path(root) / "reports" / f"cycle={int(cycle_id)}" / NEAR_DUPLICATE_REPORT
    if not path.exists():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    return data


# The fetched pages whose canonical column may change: those that declare another page, and
# those the catalog knows by another URL (their link may have gone).
_DECLARED = """
SELECT c.page, c.url FROM content c LEFT JOIN catalog k ON k.url_id = c.page_id
WHERE c.kind = 'canonical' AND (c.url IS NOT NULL OR k.canonical IS NOT NULL)
"""
# Links the catalog lacks, most linked first (by how many batches found them), with whether
# their host is one the catalog holds.
_NEW_LINKS = """
SELECT c.url, c.host IN (SELECT DISTINCT host FROM catalog) AS known_host, count(*) AS n
FROM content c ANTI JOIN catalog k ON k.url_id = c.url_id
WHERE c.kind = 'link'
GROUP BY c.url, c.host
ORDER BY n DESC, c.url
"""


@dataclass
class _LinkCounts:
    found: int = 0
    out_of_scope: int = 0
    added: int = 0
    deferred: int = 0
    rejected: dict[str, int] = field(default_factory=dict)


def _land_links(
    root: str | Path, con: duckdb.DuckDBPyConnection, settings: ContentSettings, now: datetime
) -> _LinkCounts:
    """Screen and land the cycle's new in-scope links, at most the cycle's bound of them."""
    counts = _LinkCounts()
    counts.found = int(
        con.sql("SELECT count(DISTINCT url) FROM content WHERE kind = 'link'").fetchall()[0][0]
    )
    new = con.sql(_NEW_LINKS).to_arrow_table()
    if settings.link_scope == "catalog_hosts":
        inside = new.filter(pc.fill_null(new["known_host"], False))
        counts.out_of_scope = new.num_rows - inside.num_rows
        new = inside
    limit = settings.max_new_pages * settings.candidates_per_new_page
    counts.deferred = max(0, new.num_rows - limit)
    candidates = new["url"].slice(0, limit).to_pylist()
    if candidates:
        report = land(
            root,
            [Candidate(u, "link") for u in candidates],
            settings=settings.discovery,
            now=now,
            max_pages=settings.max_new_pages,
        )
        counts.added, counts.rejected = report.added, dict(report.rejected)
    return counts


def _catalog_rows(catalog: CatalogStore, urls: Iterable[str]) -> dict[str, dict[str, Any]]:
    """Catalog rows of these normalized URLs, by URL (one DuckDB join on the url id)."""
    con = connect()
    con.register("catalog", catalog.relation(con))
    ids = sorted({url_id(u) for u in urls})
    con.register("wanted", pa.table({"url_id": pa.array(ids, pa.int64())}))
    rows = con.sql(
        """SELECT url_id, url, value, cost, "group", canonical FROM catalog
           WHERE url_id IN (SELECT url_id FROM wanted)"""
    ).to_arrow_table()
    return {r["url"]: r for r in rows.to_pylist()}


def _apply_canonicals(
    catalog: CatalogStore,
    declared: dict[str, str | None],
    settings: ContentSettings,
    now: datetime,
) -> tuple[int, int, int]:
    """Set ``canonical`` of the fetched pages, carry values over, add missing targets.

    Returns (fetched pages now known by another URL, pages whose canonical was cleared,
    targets added to the catalog).
    """
    if not declared or not catalog.path.exists():
        return 0, 0, 0
    targets = {t for t in declared.values() if t}
    known = _catalog_rows(catalog, [*declared, *targets])
    stored = {u for u, r in known.items() if r["canonical"]}
    honoured = honoured_canonicals(declared, lambda t: t in stored and t not in declared)
    # What each target inherits: the most valuable page that names it.
    heir: dict[str, dict[str, Any]] = {}
    for page, target in honoured.items():
        row = known.get(page)
        if target is None or row is None:
            continue
        if target not in heir or row["value"] > heir[target]["value"]:
            heir[target] = row
    added = _add_targets(catalog, {t: r for t, r in heir.items() if t not in known}, settings, now)
    fetched = [u for u in declared if u in known]
    kept = {u: t if t in known or t in added else None for u, t in honoured.items() if t}
    new = [kept.get(u) for u in fetched]
    catalog.update_pages(
        pa.table(
            {
                "url_id": pa.array([known[u]["url_id"] for u in fetched], pa.int64()),
                "canonical": pa.array(new, pa.string()),
            }
        )
    )
    raised = {
        known[t]["url_id"]: r["value"]
        for t, r in heir.items()
        if t in known and r["value"] > known[t]["value"]
    }
    if raised:
        catalog.update_pages(
            pa.table(
                {
                    "url_id": pa.array(list(raised), pa.int64()),
                    "value": pa.array(list(raised.values()), pa.float64()),
                }
            )
        )
    pages = sum(1 for t in new if t)
    cleared = sum(1 for u, t in zip(fetched, new, strict=True) if not t and u in stored)
    return pages, cleared, len(added)


def _add_targets(
    catalog: CatalogStore,
    heirs: dict[str, dict[str, Any]],
    settings: ContentSettings,
    now: datetime,
) -> set[str]:
    """Add canonical targets the catalog lacks, with the value, cost and group of the page
    that named them; trap defenses apply (a target is a URL like any other)."""
    if not heirs:
        return set()
    screened = screen_candidates(
        [Candidate(t, "canonical") for t in heirs],
        known=ExactSeenSet.of(np.empty(0, dtype=np.int64)),  # none is in the catalog
        traps=settings.discovery.traps,
    )
    if not screened.new:
        return set()
    rows = [heirs[p.candidate.url] for p in screened.new]
    catalog.upsert(
        pd.DataFrame(
            {
                "url": [p.url for p in screened.new],
                "host": [p.host for p in screened.new],
                "value": [r["value"] for r in rows],
                "cost": [r["cost"] for r in rows],
                "group": [r["group"] for r in rows],
                "source": "canonical",
                "discovered_at": pd.Timestamp(now),
            }
        )
    )
    return {p.candidate.url for p in screened.new}


# Each catalog page's latest fingerprint (an answer with a body; a 304 repeats it).
_FINGERPRINTS = """
SELECT c.url_id, c.url, c.value, c.canonical IS NOT NULL AS demoted, c.near_duplicate_of,
       h.simhash, h.cycle_id
FROM (SELECT url_id, arg_max(simhash, fetched_at) AS simhash,
             arg_max(cycle_id, fetched_at) AS cycle_id
      FROM history
      WHERE outcome IN (SELECT unnest($with_body)) AND simhash IS NOT NULL AND simhash <> 0
      GROUP BY url_id) h
JOIN catalog c USING (url_id)
"""


def _near_duplicates(
    root: str | Path, cycle_id: int, catalog: CatalogStore, settings: ContentSettings
) -> tuple[int, int, Path | None]:
    """Cluster the latest fingerprints, flag the pages not kept, write the report.

    Returns (clusters, pages flagged, report path).
    """
    store = HistoryStore(root)
    if not store.files() or not catalog.path.exists():
        return 0, 0, None
    con = connect()
    con.register("history", store.relation(con))
    con.register("catalog", catalog.relation(con))
    pages = (
        con.sql(_FINGERPRINTS, params={"with_body": sql_list(WITH_BODY)})
        .to_arrow_table()
        .sort_by("url_id")
    )
    flagged_before = con.sql(
        "SELECT url_id FROM catalog WHERE near_duplicate_of IS NOT NULL"
    ).fetchnumpy()["url_id"]
    ids = pages["url_id"].to_numpy()
    found = near_duplicate_clusters(
        ids, pages["simhash"].to_numpy(), max_distance=settings.near_duplicate_bits
    )
    at = np.searchsorted(ids, found.url_id)  # row of each clustered page
    value = pages["value"].to_numpy()[at]
    demoted = pages["demoted"].to_numpy(zero_copy_only=False)[at]
    keepers = cluster_keepers(found.url_id, found.cluster, value, demoted)
    flag = keepers != found.url_id
    reset = np.setdiff1d(np.asarray(flagged_before, dtype=np.int64), found.url_id[flag])
    catalog.update_pages(
        pa.table(
            {
                "url_id": pa.array(np.concatenate([found.url_id[flag], reset]), pa.int64()),
                "near_duplicate_of": pa.array(
                    np.concatenate([keepers[flag], np.zeros(reset.size, np.int64)]),
                    pa.int64(),
                    mask=np.r_[np.zeros(int(flag.sum()), bool), np.ones(reset.size, bool)],
                ),
            }
        )
    )
    urls = pages["url"].to_numpy(zero_copy_only=False)
    observed = pages["cycle_id"].to_numpy()[at] == int(cycle_id)
    top = []
    for c in range(min(found.count, settings.top_clusters)):
        members = found.cluster == c
        kept = int(keepers[members][0])
        top.append(
            {
                "size": int(found.sizes[c]),
                "kept": str(urls[np.searchsorted(ids, kept)]),
                "examples": [str(u) for u in urls[at[members]][:5]],
            }
        )
    report = {
        "cycle_id": int(cycle_id),
        "max_distance_bits": settings.near_duplicate_bits,
        "pages_with_fingerprint": int(ids.size),
        "clusters": found.count,
        "pages_in_clusters": int(found.url_id.size),
        "down_ranked": int(flag.sum()),
        "fetched_this_cycle_in_clusters": int(observed.sum()),
        "largest_clusters": top,
    }
    path = Path(root) / "reports" / f"cycle={int(cycle_id)}" / NEAR_DUPLICATE_REPORT
    _write_json(path, report)
    return found.count, int(flag.sum()), path


def _write_json(path: Path, data: dict[str, Any]) -> None:
    durable_write_text(path, json.dumps(data, indent=1, default=str))
