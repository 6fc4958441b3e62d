"""`recrawl fetch` end to end against the sandbox."""

import pyarrow.compute as pc
import pyarrow.parquet as pq

from flows.cli import main
from models.schemas import HISTORY_SCHEMA
from tests.tasks.fetch.conftest import sandbox


def test_recrawl_fetch_writes_rows_and_prints_outcomes(tmp_path, capsys, monkeypatch):
    monkeypatch.setenv("RECRAWL_MIN_DELAY_S", "0.05")  # settings come from the environment
    with sandbox(hosts=2, pages=2) as sb:
        url_file = tmp_path / "urls.txt"
        url_file.write_text("# pages\n" + "\n".join(sb.page_urls(1)) + "\n")
        out = tmp_path / "rows.parquet"
        private = sb.base_url(0) + "/private/1"
        args = ["--urls", str(url_file), "--out", str(out), "--concurrency", "4"]
        args += ["--allow-network", "127.0.0.0/8"]  # the sandbox is on loopback
        code = main(["fetch", *sb.page_urls(0), private, *args])
    assert code == 0
    table = pq.read_table(out)
    assert table.schema.field("url").type == "string"  # the URL, for a person reading it
    assert table.drop_columns(["url"]).schema.equals(HISTORY_SCHEMA)
    assert sorted(table.column("outcome").to_pylist()) == ["ok"] * 4 + ["robots_denied"]
    asked = [*sb.page_urls(0), private, *sb.page_urls(1)]
    assert sorted(table.column("url").to_pylist()) == sorted(asked)
    denied = table.filter(pc.equal(table["outcome"], "robots_denied"))
    assert denied.column("url").to_pylist() == [private]
    printed = capsys.readouterr().out
    assert "robots_denied" in printed and "disallowed by robots.txt" in printed
    assert "5 URLs" in printed


def test_recrawl_fetch_rejects_bad_input(tmp_path, capsys):
    assert main(["fetch", "--out", str(tmp_path / "x.parquet")]) == 2
    assert "no URLs given" in capsys.readouterr().err
    args = ["fetch", "http://127.0.0.1:9/", "--out", str(tmp_path / "x.parquet")]
    assert main([*args, "--mode", "api"]) == 2
    assert "api_url" in capsys.readouterr().err
    assert main([*args, "--allow-network", "127.0.0.1/8"]) == 2
    assert "127.0.0.1/8" in capsys.readouterr().err


def test_recrawl_fetch_refuses_loopback_without_an_allow_list(tmp_path, capsys):
    out = tmp_path / "rows.parquet"
    assert main(["fetch", "http://127.0.0.1:9/x", "--out", str(out)]) == 0
    assert pq.read_table(out).column("outcome").to_pylist() == ["refused_address"]
    assert "loopback" in capsys.readouterr().out


def test_recrawl_fetch_into_a_missing_folder_fails_before_any_request(tmp_path, capsys):
    with sandbox(hosts=1, pages=1) as sb:
        out = tmp_path / "nope" / "rows.parquet"
        code = main(
            ["fetch", *sb.page_urls(0), "--out", str(out), "--allow-network", "127.0.0.0/8"]
        )
        assert sb.log.entries() == []  # nothing was sent: the rows would have been lost
    assert code == 2
    assert f"--out: no such folder {out.parent}" in capsys.readouterr().err
