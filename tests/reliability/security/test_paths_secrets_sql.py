"""Nothing fetched becomes a path or SQL, and secrets stay out of every output (issue 8).

- A URL or header full of ``../`` cannot make the crawler write outside its data root: WARC,
  history and catalog file names come from cycle ids, batch names and uuids, never from a
  page (every file written is checked, not only the expected ones).
- A scraping API key (and proxy credentials) never appear in a log line, a WARC record, a
  history row, the batch metrics or the settings' repr: a real batch through the sandbox's
  API mode is run with a key, and every output file (decompressed) and every captured log
  line is searched for it.
- SQL passed to DuckDB binds values: a static scan finds no SQL text built from variables
  other than a few named, constant fragments, and a URL and validators carrying
  ``'); DROP TABLE`` go through the store and come back intact.
"""

from __future__ import annotations

import ast
import gzip
import json
import logging
import re
import secrets
from dataclasses import asdict
from pathlib import Path
from urllib.parse import urlsplit

import pandas as pd
import pyarrow.parquet as pq
import pytest

from models.discovery.urls import normalize, url_id
from sandbox import SANDBOX_NETWORKS, ScrapingApi
from tasks.archive.read import read_warc_record
from tasks.archive.warc import WarcWriter
from tasks.fetch.engine import FetchRequest, fetch_batch_sync
from tasks.fetch.settings import FetchSettings
from tasks.reports.cycle_report import report_dir
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore
from tests.reliability.security.loopback import page, serve
from tests.tasks.fetch.conftest import sandbox

pytestmark = pytest.mark.reliability

REPO = Path(__file__).resolve().parents[3]


def fast(**overrides: object) -> FetchSettings:
    base: dict[str, object] = {
        "min_delay_s": 0.0,
        "max_delay_s": 0.05,
        "request_timeout_s": 5.0,
        "robots_timeout_s": 2.0,
        "seed": 5,
    }
    base.update(overrides)
    return FetchSettings(**base)  # type: ignore[arg-type]


# ---------------------------------------------------------------------- paths

TRAVERSAL = "../../../../escape"


def traversal_answer(path: str):
    if path == "/robots.txt":
        return page(path)
    if path.startswith("/hop"):
        return 302, {"Location": f"/{TRAVERSAL}-hop/..%2f..%2f{TRAVERSAL}"}, b""
    headers = {
        "Content-Type": "text/html; charset=utf-8",
        "Content-Disposition": f'attachment; filename="{TRAVERSAL}.html"',
        "ETag": f'"{TRAVERSAL}"',
        "Last-Modified": TRAVERSAL,
        "Content-Location": f"/{TRAVERSAL}",
        "X-Archive-Name": TRAVERSAL,
    }
    return 200, headers, f"<html><body><article>{TRAVERSAL}</article></body></html>".encode()


def test_urls_and_headers_cannot_write_outside_the_data_root(tmp_path, loopback_only):
    root = tmp_path / "root"
    root.mkdir()
    with serve(traversal_answer) as host:
        urls = [
            host.base + f"/{TRAVERSAL}.html",
            host.base + "/a/%2e%2e/%2e%2e/%2e%2e/escape",
            host.base + f"/p?file={TRAVERSAL}&name=..%2F..%2Fescape",
            host.base + "/hop",
        ]
        writer = WarcWriter(root, 4, part="batch-0001")
        result = fetch_batch_sync(
            urls, settings=fast(allowed_networks=("127.0.0.2/32",)), cycle_id=4, warc=writer
        )
        writer.close()
    assert set(result.metrics.outcomes) == {"ok"}
    HistoryStore(root).write_cycle(4, result.rows)
    CatalogStore(root).upsert(
        pd.DataFrame({"url": urls[:3], "host": [urlsplit(u).netloc for u in urls[:3]]})
    )

    written = [p for p in tmp_path.rglob("*") if p.is_file()]
    assert written and all(p.is_relative_to(root) for p in written), written
    names = [p.relative_to(root).as_posix() for p in written]
    assert not any("escape" in n for n in names), names
    warc_files = [n for n in names if n.startswith("warc/")]
    assert warc_files and all(
        re.fullmatch(r"warc/cycle=4/recrawl-4-\d{8}T\d{6}Z-batch-0001-\d{5}\.warc\.gz", n)
        for n in warc_files
    ), warc_files
    # What the page said is kept as data: the record holds its headers verbatim.
    row = result.rows.to_pylist()[0]
    record = read_warc_record(root, row["warc_file"], row["warc_offset"])
    assert TRAVERSAL in str(record.http_headers)
    assert row["etag"] == f'"{TRAVERSAL}"'
    # Names that do come from callers are checked, whatever a page could influence.
    with pytest.raises(ValueError, match="part must be"):
        WarcWriter(root, 4, part="../../x")
    with pytest.raises(ValueError):
        report_dir(root, "../../x")  # type: ignore[arg-type]
    assert loopback_only.blocked == []


# ---------------------------------------------------------------------- secrets


def _texts(root: Path) -> dict[str, bytes]:
    """Every file under ``root`` as bytes a secret would show in (gzip and Parquet opened)."""
    out: dict[str, bytes] = {}
    for path in root.rglob("*"):
        if not path.is_file():
            continue
        data = path.read_bytes()
        if path.name.endswith(".gz"):
            data = gzip.decompress(data)
        elif path.suffix == ".parquet":
            data = json.dumps(pq.read_table(path).to_pylist(), default=str).encode()
        out[path.relative_to(root).as_posix()] = data
    return out


def test_api_key_and_proxy_password_never_reach_an_output(
    tmp_path, caplog, capfd, monkeypatch, loopback_only, fake_dns
):
    key = "sk-live-" + secrets.token_hex(16)
    password = "pw-" + secrets.token_hex(12)
    monkeypatch.setenv("RECRAWL_API_KEY", key)  # secrets come from the environment
    root = tmp_path / "root"
    outputs: list[str] = []
    first = None
    with (
        caplog.at_level(logging.DEBUG),
        sandbox(hosts=2, pages=3, api=ScrapingApi(api_key=key)) as sb,
    ):
        api = FetchSettings(
            mode="api",
            api_url=sb.api_url,
            allowed_networks=SANDBOX_NETWORKS,
            min_delay_s=0.0,
            max_delay_s=0.05,
        )
        proxy_url = sb.proxy_url.replace("http://", f"http://crawler:{password}@")
        proxy = fast(mode="proxy", proxy_url=proxy_url, allowed_networks=SANDBOX_NETWORKS)
        for cycle, (settings, urls) in enumerate(
            [
                (api, sb.page_urls()),
                (proxy, sb.page_urls()),
                # a refused target and an unreachable gateway make error messages too
                (api.model_copy(update={"allowed_networks": ()}), sb.page_urls(0)),
                (fast(mode="api", api_url="http://127.0.0.1:9", api_key=key), sb.page_urls(1)),
                (
                    fast(mode="proxy", proxy_url=f"http://u:{password}@127.0.0.1:9"),
                    ["http://a.test/"],
                ),
            ]
        ):
            writer = WarcWriter(root, cycle, part=f"batch-{cycle:04d}")
            result = fetch_batch_sync(urls, settings=settings, cycle_id=cycle, warc=writer)
            writer.close()
            first = first or result
            HistoryStore(root).write_cycle(cycle, result.rows)
            (root / f"metrics-{cycle}.json").write_text(json.dumps(asdict(result.metrics)))
            outputs += [result.metrics.summary(), repr(settings), str(settings)]
            outputs.append(settings.model_dump_json())
            outputs.append(json.dumps(result.rows.to_pylist(), default=str))
        api_stats = sb.api.stats()
    assert first is not None and first.metrics.outcomes == {"ok": 6}  # the key was accepted
    assert api_stats.charged >= 6
    files = _texts(root)
    assert any(name.startswith("warc/") for name in files)
    captured = capfd.readouterr()
    haystacks = {
        **files,
        "logs": "\n".join(r.getMessage() for r in caplog.records).encode(),
        "log records": repr([r.__dict__ for r in caplog.records]).encode(),
        "stdout+stderr": (captured.out + captured.err).encode(),
        "values": "\n".join(outputs).encode(),
    }
    for secret in (key, password):
        leaks = [name for name, text in haystacks.items() if secret.encode() in text]
        assert leaks == [], f"secret found in {leaks}"
    api_records = [t for n, t in files.items() if n.startswith("warc/cycle=0/")]
    assert api_records and all(b"fetch?url=" in t for t in api_records)  # API requests kept
    assert all(b"x-api-key" not in t.lower() for t in api_records)  # the header stripped
    assert loopback_only.blocked == []


def test_secrets_are_refused_as_flow_parameters():
    from flows.recrawl import recrawl_flow

    with pytest.raises(ValueError, match="secrets are not flow parameters"):
        recrawl_flow.fn(root="unused", fetch={"api_key": "sk-x"})
    with pytest.raises(ValueError, match="secrets are not flow parameters"):
        recrawl_flow.fn(root="unused", fetch={"proxy_url": "http://u:p@proxy.test:3128"})


# ---------------------------------------------------------------------- SQL

#: SQL text built from variables, each reviewed: the variables are constants of the code
#: (operators, schema column names and types), never data.
REVIEWED_SQL_INTERPOLATIONS = {
    ("tasks/store/catalog.py", "relation"),  # NULL::<type> AS <schema column> for missing columns
    # the callers' column lists and SQL defaults (write_shards, write_stats_shards) and the
    # shard count, an int: HOST_SHARD's hash(host) % K
    ("tasks/cycle/sharded_planning.py", "partition_by_host"),
}
_SQL_METHODS = {"sql", "execute", "query", "filter", "project", "aggregate", "order"}


def _built_sql_calls(path: Path) -> list[tuple[str, int]]:
    """(function, line) of every DuckDB call whose SQL text is built (f-string, format, +, %)."""
    tree = ast.parse(path.read_text())
    found = []
    for func in ast.walk(tree):
        if not isinstance(func, ast.FunctionDef | ast.AsyncFunctionDef):
            continue
        for node in ast.walk(func):
            if not (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr in _SQL_METHODS
                and node.args
            ):
                continue
            sql = node.args[0]
            built = isinstance(sql, ast.JoinedStr | ast.BinOp) or (
                isinstance(sql, ast.Call)
                and isinstance(sql.func, ast.Attribute)
                and sql.func.attr == "format"
            )
            if built:
                found.append((func.name, node.lineno))
    return found


def test_no_sql_text_is_built_from_data(tmp_path):
    sample = tmp_path / "sample.py"
    sample.write_text(
        "def bad(con, url):\n"
        "    con.sql(f\"SELECT * FROM t WHERE url = '{url}'\")\n"
        "    con.execute('SELECT 1 WHERE x = ' + url)\n"
        "    con.sql('SELECT * FROM t WHERE url = $url', params={'url': url})\n"
    )
    assert _built_sql_calls(sample) == [("bad", 2), ("bad", 3)]  # the scanner sees them
    unreviewed = []
    for folder in ("tasks", "flows", "models"):
        for path in sorted((REPO / folder).rglob("*.py")):
            rel = path.relative_to(REPO).as_posix()
            for func, line in _built_sql_calls(path):
                if (rel, func) not in REVIEWED_SQL_INTERPOLATIONS:
                    unreviewed.append(f"{rel}:{line} in {func}()")
    assert unreviewed == [], "SQL built from variables (bind values instead): " + ", ".join(
        unreviewed
    )


def test_injection_strings_go_through_the_store_as_data(tmp_path, loopback_only):
    payload = "'); DROP TABLE history; --"

    def answer(path: str):
        if path == "/robots.txt":
            return page(path)
        headers = {"ETag": f'"{payload}"', "Last-Modified": payload, "Content-Type": "text/html"}
        return 200, headers, b"<html><body><article>x</article></body></html>"

    store = HistoryStore(tmp_path)
    with serve(answer) as host:
        url = host.base + "/p?q=" + payload.replace(" ", "%20")
        policy = fast(allowed_networks=("127.0.0.2/32",))
        first = fetch_batch_sync([url], settings=policy)
        store.write_cycle(0, first.rows)  # the next cycle's request carries its validators
        again = FetchRequest(url, etag=f'"{payload}"', last_modified=payload, record_hash="h")
        second = fetch_batch_sync([again], settings=policy, cycle_id=1)
        store.write_cycle(1, second.rows)
    catalog = CatalogStore(tmp_path)
    catalog.upsert(pd.DataFrame({"url": [url], "host": [urlsplit(url).netloc]}))

    back = store.read([0, 1]).to_pylist()
    assert len(back) == 2 and all(r["etag"] == f'"{payload}"' for r in back)
    assert all(r["last_modified"] == payload for r in back)
    pages = catalog.read().to_pylist()
    assert pages[0]["url_id"] == url_id(normalize(url)) and "DROP%20TABLE" in pages[0]["url"]
    assert loopback_only.blocked == []
