"""The example catalog names pages that the README's sandbox command really serves."""

import argparse
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd

from sandbox.cli import add_serve_arguments, web_from_args
from sandbox.server import host_address
from tasks.store.catalog import CatalogStore

REPO = Path(__file__).resolve().parent.parent
EXAMPLE = REPO / "data" / "examples" / "catalog.csv"
#: As README.md says: `recrawl sandbox --hosts 3 --pages-per-host 4 --port 8081`
SANDBOX_ARGS = ["--hosts", "3", "--pages-per-host", "4", "--port", "8081"]


def test_every_example_url_is_a_page_of_the_readmes_sandbox(tmp_path):
    parser = argparse.ArgumentParser()
    add_serve_arguments(parser)
    args = parser.parse_args(SANDBOX_ARGS)
    web = web_from_args(args)
    served = {
        f"http://{host_address(h)}:{args.port}{path}"
        for h in range(web.n_hosts)
        for path in web.page_paths(h)
    }
    urls = pd.read_csv(EXAMPLE)["url"].tolist()
    assert urls and set(urls) <= served
    assert " ".join(SANDBOX_ARGS) in (REPO / "README.md").read_text()
    CatalogStore(tmp_path).upsert(pd.read_csv(EXAMPLE))
    hosts = set(CatalogStore(tmp_path).read()["host"].to_pylist())
    assert hosts == {urlsplit(u).netloc for u in urls}
