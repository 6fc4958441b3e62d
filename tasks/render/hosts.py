"""Which hosts need rendering: probed on a sample, remembered under ``<root>/signals/``.

``probe_render_need`` takes a few pages per host (pages the planner already fetched, so
robots.txt allowed them), fetches each raw with the fetcher's guarded client and renders it
in the browser pool, extracts both with the same rules and lets
``models.discovery.render_need.judge_render_need`` decide. ``RenderHosts`` is the verdicts
on disk (one durable JSON file: host -> verdict, probed-at time); the cycle reads it to know
which rows to render, and a host whose verdict is older than ``max_age`` is probed again
(sites move to and from client-side rendering). ``probe_cycle_hosts(root, cycle_id, now)`` is
the recrawl cycle's step after its commit: the due hosts among those it fetched, on pages it
fetched, at most ``max_hosts`` a cycle, and nothing at all without a Chromium.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass
from datetime import datetime, timedelta
from pathlib import Path

from models.content.extract import DEFAULT_RULES, extract
from models.content.extract_rules import ExtractionRules
from models.discovery.render_need import RenderVerdict, judge_render_need, record_richness
from models.discovery.urls import InvalidURLError, normalize
from models.outcomes import WITH_BODY, sql_list
from tasks.fetch.engine import FetchRequest, fetch_batch
from tasks.fetch.render import BrowserPool, RenderSettings, browser_executable
from tasks.fetch.rows import record_hash
from tasks.fetch.run_sync import run_coroutine
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogStore
from tasks.store.durable import durable_write_text
from tasks.store.history import HistoryStore, connect

RENDER_HOSTS_FILE = Path("signals") / "render_hosts.json"


@dataclass(frozen=True)
class RenderHosts:
    """The verdicts known for a store: ``hosts`` -> verdict, and when each was probed."""

    verdicts: Mapping[str, RenderVerdict]
    probed_at: Mapping[str, datetime]

    @property
    def rendered(self) -> frozenset[str]:
        """The hosts to render (a verdict of True)."""
        return frozenset(h for h, v in self.verdicts.items() if v.needs_rendering)

    def due(self, hosts: Sequence[str], now: datetime, max_age: timedelta) -> list[str]:
        """Hosts never probed, undecided, or probed longer than ``max_age`` ago."""
        return [
            h
            for h in hosts
            if h not in self.probed_at
            or self.verdicts[h].needs_rendering is None
            or now - self.probed_at[h] > max_age
        ]

    @classmethod
    def read(cls, root: str | Path) -> RenderHosts:
        path = Path(root) / RENDER_HOSTS_FILE
        if not path.exists():
            return cls({}, {})
        try:
            doc = json.loads(path.read_text())
            verdicts = {h: RenderVerdict(**v["verdict"]) for h, v in doc["hosts"].items()}
            probed = {h: datetime.fromisoformat(v["probed_at"]) for h, v in doc["hosts"].items()}
        except (OSError, ValueError, KeyError, TypeError) as exc:
            raise ValueError(f"unreadable render verdicts at {path}: {exc}") from None
        return cls(verdicts, probed)

    def merged(self, verdicts: Mapping[str, RenderVerdict], at: datetime) -> RenderHosts:
        return RenderHosts(
            {**self.verdicts, **verdicts}, {**self.probed_at, **dict.fromkeys(verdicts, at)}
        )

    def write(self, root: str | Path) -> None:
        hosts = {
            h: {"verdict": asdict(v), "probed_at": self.probed_at[h].isoformat()}
            for h, v in sorted(self.verdicts.items())
        }
        text = json.dumps({"hosts": hosts}, indent=1, allow_nan=True) + "\n"
        durable_write_text(Path(root) / RENDER_HOSTS_FILE, text)


async def probe_render_need(
    urls_by_host: Mapping[str, Sequence[str]],
    pool: BrowserPool,
    *,
    settings: FetchSettings | None = None,
    rules: ExtractionRules = DEFAULT_RULES,
    sample: int = 3,
) -> dict[str, RenderVerdict]:
    """Fetch raw and render up to ``sample`` pages per host; a verdict per host.

    Raw fetches go through the fetch engine (one batch: robots.txt, pacing, the address
    policy; the bodies kept by its record-hasher hook); renders through the pool's slots. A
    page whose raw fetch or render failed is left out of its host's sample.
    """
    settings = settings or FetchSettings()
    chosen = {h: [_normalized(u) for u in list(urls)[:sample]] for h, urls in urls_by_host.items()}
    raw: dict[str, tuple[bytes, str]] = {}

    def keep(body: bytes, content_type: str | None, url: str) -> str:
        raw[url] = (bytes(body), content_type or "")
        return record_hash(body, content_type, url)

    # the engine's politeness, robots.txt and address policy; bodies kept by the hasher hook
    await fetch_batch(
        [FetchRequest(u) for urls in chosen.values() for u in urls],
        cycle_id=0,
        settings=settings,
        record_hasher=keep,
    )
    wanted = [u for urls in chosen.values() for u in urls if u in raw]
    renders = dict(
        zip(wanted, await asyncio.gather(*(pool.render(u) for u in wanted)), strict=True)
    )
    hosts, raw_rich, rendered_rich = [], [], []
    for host, urls in chosen.items():
        for url in urls:
            done = renders.get(url)
            if done is None or done.outcome != "ok":
                continue
            body, content_type = raw[url]
            hosts.append(host)
            raw_rich.append(record_richness(extract(body, content_type, url, rules).fields))
            rendered_rich.append(
                record_richness(extract(done.html, "text/html", url, rules).fields)
            )
    verdicts = judge_render_need(hosts, raw_rich, rendered_rich)
    for host in chosen:  # a host with no usable page stays undecided
        verdicts.setdefault(host, RenderVerdict(host, None, 0, float("nan"), 0.0))
    return verdicts


def _normalized(url: str) -> str:
    try:
        return normalize(url)
    except InvalidURLError:
        return url


def probe_due_hosts(
    root: str | Path,
    urls_by_host: Mapping[str, Sequence[str]],
    now: datetime,
    *,
    max_age: timedelta = timedelta(days=30),
    settings: FetchSettings | None = None,
    render: RenderSettings | None = None,
    rules: ExtractionRules = DEFAULT_RULES,
    sample: int = 3,
) -> RenderHosts:
    """Probe the hosts whose verdict is missing, undecided or older than ``max_age``; store.

    Synchronous (its own event loop), for a flow step after a cycle's commit: ``urls_by_host``
    are pages the cycle fetched (``ok``). No host due: nothing is fetched, no browser starts.
    The browser takes the fetcher's address allow-list and User-Agent unless ``render`` says.
    """
    known = RenderHosts.read(root)
    due = known.due(list(urls_by_host), now, max_age)
    if not due:
        return known
    settings = settings or FetchSettings()
    render = render or RenderSettings(
        allowed_networks=tuple(settings.allowed_networks), user_agent=settings.user_agent
    )

    async def probe() -> dict[str, RenderVerdict]:
        async with BrowserPool(render) as pool:
            return await probe_render_need(
                {h: urls_by_host[h] for h in due},
                pool,
                settings=settings,
                rules=rules,
                sample=sample,
            )

    updated = known.merged(run_coroutine(probe()), now)
    updated.write(root)
    return updated


def cycle_pages_by_host(
    root: str | Path, cycle_id: int, *, per_host: int = 3
) -> dict[str, list[str]]:
    """Up to ``per_host`` pages per host the cycle fetched with a body (``models.outcomes.
    WITH_BODY``; their catalog URLs), by
    DuckDB over the cycle's history rows and the catalog."""
    con = connect()
    con.register("history", HistoryStore(root).relation(con))
    con.register("catalog", CatalogStore(root).relation(con))
    rows = con.sql(
        """SELECT host, list(url ORDER BY url_id)[1:$k] AS urls FROM (
               SELECT h.host, h.url_id, c.url FROM history h JOIN catalog c USING (url_id)
                WHERE h.cycle_id = $cycle AND h.outcome IN (SELECT unnest($with_body)))
           GROUP BY host ORDER BY host""",
        params={"cycle": int(cycle_id), "k": int(per_host), "with_body": sql_list(WITH_BODY)},
    ).fetchall()
    return {host: list(urls) for host, urls in rows}


@dataclass(frozen=True)
class CycleProbe:
    hosts: int  # hosts the cycle fetched
    due: int  # of them, due for a probe
    probed: int
    rendered: int  # hosts known to need rendering afterwards
    skipped: str = ""  # why nothing was probed (no browser), if so


def probe_cycle_hosts(
    root: str | Path,
    cycle_id: int,
    now: datetime,
    *,
    settings: FetchSettings | None = None,
    max_age: timedelta = timedelta(days=30),
    max_hosts: int = 20,
    sample: int = 3,
) -> CycleProbe:
    """The cycle's step after its commit: probe up to ``max_hosts`` of the hosts it fetched
    whose verdict is missing, undecided or older than ``max_age``, on pages it fetched.

    Without a Chromium nothing is probed (``skipped`` says so) and plain HTTP stays.
    """
    pages = cycle_pages_by_host(root, cycle_id, per_host=sample)
    known = RenderHosts.read(root)
    due = known.due(list(pages), now, max_age)
    chosen = {h: pages[h] for h in due[:max_hosts]}
    if not chosen:
        return CycleProbe(len(pages), len(due), 0, len(known.rendered))
    if browser_executable() is None:
        return CycleProbe(len(pages), len(due), 0, len(known.rendered), "no Chromium installed")
    after = probe_due_hosts(root, chosen, now, max_age=max_age, settings=settings, sample=sample)
    return CycleProbe(len(pages), len(due), len(chosen), len(after.rendered))
