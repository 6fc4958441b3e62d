"""The rows step without a browser: nothing to render starts nothing; verdicts persist."""

from __future__ import annotations

import asyncio
from datetime import UTC, datetime, timedelta

import pytest

from models.discovery.render_need import RenderVerdict
from models.discovery.urls import normalize, url_id
from tasks.fetch.render import RenderSettings
from tasks.fetch.rows import Row, rows_table
from tasks.render.hosts import RenderHosts, probe_due_hosts
from tasks.render.rows import render_batch_rows, render_rows, rows_to_render

AT = datetime(2026, 1, 1, tzinfo=UTC)


URLS = ["http://plain.test/p/1", "http://js.test/p/2", "http://js.test/p/3"]


def _rows():
    ids = [url_id(normalize(u)) for u in URLS]
    return rows_table(
        [
            Row(ids[0], "plain.test", AT, "ok", record_hash="a"),
            Row(ids[1], "js.test", AT, "not_modified", record_hash="b"),
            Row(ids[2], "js.test", AT, "ok", record_hash="c"),
        ],
        cycle_id=1,
    )


def test_only_ok_rows_of_rendered_hosts_are_picked():
    assert rows_to_render(_rows(), {"js.test"}).tolist() == [2]  # a 304 needs no browser
    assert rows_to_render(_rows(), set()).tolist() == []


def test_no_browser_starts_when_no_row_needs_one():
    # a browser that does not exist: starting it would fail, so nothing tried to
    settings = RenderSettings(executable="/nonexistent/chromium")
    done = asyncio.run(render_rows(_rows(), [], {"other.test"}, settings=settings))
    assert done.stats is None and done.rendered == 0 and done.rows.equals(_rows())


def test_verdicts_round_trip_and_say_which_hosts_are_due(tmp_path):
    verdicts = {
        "js.test": RenderVerdict("js.test", True, 3, 0.0, 800.0),
        "plain.test": RenderVerdict("plain.test", False, 3, 1.0, 0.0),
        "new.test": RenderVerdict("new.test", None, 0, float("nan"), 0.0),
    }
    RenderHosts({}, {}).merged(verdicts, AT).write(tmp_path)
    read = RenderHosts.read(tmp_path)
    assert read.rendered == {"js.test"}
    later = AT + timedelta(days=40)
    due = read.due(["js.test", "plain.test", "new.test", "unseen.test"], later, timedelta(days=30))
    assert due == ["js.test", "plain.test", "new.test", "unseen.test"]
    assert read.due(["js.test", "new.test"], AT, timedelta(days=30)) == ["new.test"]


def test_a_corrupt_verdict_file_is_one_line_error(tmp_path):
    (tmp_path / "signals").mkdir()
    (tmp_path / "signals" / "render_hosts.json").write_text("{not json")
    with pytest.raises(ValueError, match="unreadable render verdicts"):
        RenderHosts.read(tmp_path)


def test_the_cycle_hook_renders_nothing_without_verdicts_and_fails_rows_without_a_browser(
    tmp_path,
):
    assert render_batch_rows(tmp_path, _rows(), URLS).equals(_rows())  # no verdicts: no browser
    verdict = RenderVerdict("js.test", True, 3, 0.0, 800.0)
    RenderHosts({}, {}).merged({"js.test": verdict}, AT).write(tmp_path)
    settings = RenderSettings(executable="/nonexistent/chromium")
    rows = render_batch_rows(tmp_path, _rows(), URLS, settings=settings).to_pylist()
    assert [r["outcome"] for r in rows] == ["ok", "not_modified", "error"]
    assert rows[2]["record_hash"] is None and "unavailable" in rows[2]["reason"]
    assert rows[0]["record_hash"] == "a" and rows[1]["record_hash"] == "b"


def test_probing_skips_hosts_judged_recently_and_starts_nothing(tmp_path):
    verdict = RenderVerdict("js.test", True, 3, 0.0, 800.0)
    RenderHosts({}, {}).merged({"js.test": verdict}, AT).write(tmp_path)
    settings = RenderSettings(executable="/nonexistent/chromium")  # would fail if started
    known = probe_due_hosts(
        tmp_path, {"js.test": ["http://js.test/p/1"]}, AT + timedelta(days=1), render=settings
    )
    assert known.rendered == {"js.test"}
