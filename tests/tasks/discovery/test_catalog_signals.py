"""The catalog's sitemap columns: kept on re-import, updated by signals, old files readable."""

from __future__ import annotations

import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from models.discovery.urls import url_id
from tasks.store.catalog import CatalogInputError, CatalogStore
from tests.tasks.store.legacy_store import strip_digests

T1 = pd.Timestamp("2026-01-01", tz="UTC")
T2 = pd.Timestamp("2026-02-01", tz="UTC")


def test_upsert_keeps_discovery_time_and_known_signals(tmp_path):
    store = CatalogStore(tmp_path)
    store.upsert(
        pd.DataFrame(
            {
                "url": ["http://a.test/1"],
                "source": "sitemap",
                "discovered_at": T1,
                "lastmod": T1,
                "changefreq": "daily",
            }
        )
    )
    store.upsert(pd.DataFrame({"url": ["http://a.test/1"], "value": [5.0], "source": "link"}))
    row = store.read().to_pylist()[0]
    assert row["discovered_at"] == T1 and row["value"] == 5.0
    assert (row["lastmod"], row["changefreq"]) == (T1, "daily")  # NULL means not known


def test_signals_update_only_lastmod_and_changefreq(tmp_path):
    store = CatalogStore(tmp_path)
    store.upsert(pd.DataFrame({"url": ["http://a.test/1", "http://a.test/2"], "value": [3.0, 1.0]}))
    signals = pa.table(
        {
            "url_id": [url_id("http://a.test/1"), url_id("http://a.test/2")],
            "lastmod": pa.array([T2, None], pa.timestamp("us", tz="UTC")),
            "changefreq": [None, "weekly"],
        }
    )
    assert store.update_sitemap_signals(signals) == 2
    assert store.update_sitemap_signals(signals) == 0  # nothing new the second time
    rows = {r["url"]: r for r in store.read().to_pylist()}
    assert rows["http://a.test/1"]["lastmod"] == T2 and rows["http://a.test/1"]["value"] == 3.0
    assert rows["http://a.test/2"]["changefreq"] == "weekly"
    assert rows["http://a.test/2"]["lastmod"] is None
    with pytest.raises(CatalogInputError, match="lastmod"):
        store.update_sitemap_signals(pa.table({"url_id": [1]}))


def test_a_catalog_written_before_the_columns_existed_still_reads(tmp_path):
    store = CatalogStore(tmp_path)
    store.upsert(pd.DataFrame({"url": ["http://a.test/1"]}))
    old = store.read().drop_columns(["lastmod", "changefreq"])
    pq.write_table(old, store.path)
    strip_digests(tmp_path)  # such a catalog was written before digests too
    assert store.read().column("lastmod").null_count == 1
    assert store.upsert(pd.DataFrame({"url": ["http://a.test/2"], "lastmod": [T1]})) == 2
