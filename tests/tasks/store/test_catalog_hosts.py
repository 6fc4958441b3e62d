"""One server, one host key: the catalog names a host as discovery and the fetcher do."""

import pandas as pd
import pytest

from models.discovery.urls import normalize, url_host
from tasks.fetch.engine import fetch_batch_sync
from tasks.fetch.settings import FetchSettings
from tasks.store.catalog import CatalogInputError, CatalogStore


def test_an_imported_page_keeps_its_port_in_the_host_as_discovery_does(tmp_path):
    urls = ["http://127.0.0.1:8080/a", "HTTP://127.0.0.1:8080/b", "http://example.test:80/c"]
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": urls}))
    catalog = CatalogStore(tmp_path).read().to_pandas().sort_values("url")
    assert catalog["host"].tolist() == ["127.0.0.1:8080", "127.0.0.1:8080", "example.test"]
    assert catalog["host"].tolist() == [url_host(normalize(u)) for u in catalog["url"]]
    assert catalog["group"].tolist() == catalog["host"].tolist()


def test_the_fetcher_names_the_same_host(tmp_path):
    # nothing listens on port 9 of 127.0.0.2: the row is an error, named by the same key
    rows = fetch_batch_sync(
        ["http://127.0.0.2:9/a"],
        settings=FetchSettings(allowed_networks=["127.0.0.0/8"], connect_timeout_s=1.0),
    ).rows
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": ["http://127.0.0.2:9/a"]}))
    assert rows["host"].to_pylist() == CatalogStore(tmp_path).read()["host"].to_pylist()


def test_a_host_column_that_contradicts_the_url_is_refused(tmp_path):
    frame = pd.DataFrame({"url": ["http://127.0.0.1:8080/a"], "host": ["127.0.0.1"]})
    with pytest.raises(CatalogInputError, match="is not the host of"):
        CatalogStore(tmp_path).upsert(frame)
    assert not CatalogStore(tmp_path).path.exists()


@pytest.mark.parametrize("bad", [float("inf"), float("nan"), -1.0, 0.0])
def test_value_and_cost_must_be_positive_and_finite(tmp_path, bad):
    for column in ("value", "cost"):
        frame = pd.DataFrame({"url": ["http://a.test/1"], column: [bad]})
        if bad != bad:  # NaN means "not given": the default fills it
            CatalogStore(tmp_path).upsert(frame)
            continue
        with pytest.raises(CatalogInputError, match=f"'{column}' must be positive and finite"):
            CatalogStore(tmp_path).upsert(frame)
