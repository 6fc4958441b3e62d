"""A sitemap's changefreq as a prior: a new page is estimated like the pages its site
declares alike, as they were observed to change (``tasks.cycle.estimation`` groups by it)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pandas as pd
import pytest

from models.discovery.urls import url_id
from tasks.cycle.estimation import load_rate_estimates
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
HOST = "shop.example"


def _url(kind: str, k: int) -> str:
    return f"http://{HOST}/{kind}/{k}"


@pytest.mark.parametrize("prior", ["mixture", "empirical"])
def test_a_new_page_takes_the_prior_of_its_changefreq(tmp_path, prior):
    kinds = {"hourly": "hourly", "yearly": "yearly", "plain": None}
    rows = [(_url(kind, k), cf) for kind, cf in kinds.items() for k in range(31)]
    CatalogStore(tmp_path).upsert(
        pd.DataFrame(
            {
                "url": [u for u, _ in rows],
                "host": HOST,
                "changefreq": [cf for _, cf in rows],
            }
        )
    )
    # pages 1..30 of each kind observed daily for 6 days; page 0 of each kind is new
    store = HistoryStore(tmp_path)
    for day in range(6):
        observed = []
        for kind in kinds:
            for k in range(1, 31):
                # hourly pages changed at every visit, yearly never, plain every other day
                version = {"hourly": day, "yearly": 0, "plain": day // 2}[kind]
                observed.append(
                    {
                        "url_id": url_id(_url(kind, k)),
                        "host": HOST,
                        "fetched_at": START + timedelta(days=day),
                        "outcome": "ok",
                        "record_hash": f"{kind}-{k}-v{version}",
                    }
                )
        store.write_cycle(day, pd.DataFrame(observed))

    estimates = load_rate_estimates(tmp_path, prior=prior).set_index("url_id")
    new = {kind: float(estimates.loc[url_id(_url(kind, 0)), "rate"]) for kind in kinds}
    # one host, one catalog group: without the changefreq split all three would be equal
    assert new["hourly"] > 2 * new["plain"] > 3 * new["yearly"]
    group = estimates.loc[url_id(_url("hourly", 0)), "group"]
    assert group == f"{HOST} changefreq=hourly"
    assert estimates.loc[url_id(_url("plain", 0)), "group"] == HOST
