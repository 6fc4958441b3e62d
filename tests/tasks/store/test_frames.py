"""The store as pandas DataFrames in one call, and the history view with URLs."""

from datetime import UTC, datetime, timedelta

import numpy as np
import pandas as pd
import pytest

from flows.cli import main
from models.discovery.urls import url_id
from tasks.cycle.estimation import load_rate_estimates
from tasks.cycle.planning import plan_cycle
from tasks.store import frames
from tasks.store.catalog import CatalogStore, StoreMissingError
from tasks.store.history import HistoryStore

T0 = datetime(2026, 3, 1, tzinfo=UTC)
URLS = [f"http://a.test/p/{i}" for i in range(6)]
#: A page fetched but not in the catalog (a URL fetched with `recrawl fetch`, say).
STRAY = 424242


@pytest.fixture
def store(tmp_path):
    """Six catalog pages fetched in cycles 0-2 (page i changes when cycle % (i+1) == 0),
    plus one stray page not in the catalog, fetched in cycle 1."""
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": URLS, "host": "a.test"}))
    ids = [url_id(u) for u in URLS]
    hist = HistoryStore(tmp_path)
    for cycle in range(3):
        rows = pd.DataFrame(
            {
                "url_id": ids,
                "host": "a.test",
                # fetched in reverse catalog order, a minute apart: the order is the fetch's
                "fetched_at": [
                    T0 + timedelta(days=cycle, minutes=len(ids) - i) for i in range(len(ids))
                ],
                "outcome": "ok",
                "record_hash": [f"{i}-{cycle // (i + 1)}" for i in range(len(ids))],
            }
        )
        if cycle == 1:
            stray = {"url_id": STRAY, "host": "b.test", "fetched_at": T0 + timedelta(days=1)}
            rows = pd.concat([rows, pd.DataFrame([{**stray, "outcome": "error"}])])
        hist.write_cycle(cycle, rows)
    return tmp_path


def test_history_rows_carry_the_catalogs_url(store):
    frame = frames.history(store)
    stored = HistoryStore(store).read().to_pandas()
    assert list(frame.columns) == ["url", *stored.columns]
    assert len(frame) == len(stored) == 3 * 6 + 1
    by_id = dict(zip([url_id(u) for u in URLS], URLS, strict=True))
    known = frame[frame["url_id"] != STRAY]
    assert (known["url"] == known["url_id"].map(by_id)).all()
    assert frame.loc[frame["url_id"] == STRAY, "url"].isna().all()
    # by cycle, then as fetched
    assert frame["cycle_id"].is_monotonic_increasing
    for _, rows in frame.groupby("cycle_id"):
        assert rows["fetched_at"].is_monotonic_increasing


def test_history_of_some_cycles(store):
    assert set(frames.history(store, cycles=1)["cycle_id"]) == {1}
    assert set(frames.history(store, cycles=[0, np.int64(2)])["cycle_id"]) == {0, 2}
    assert frames.history(store, cycles=[]).empty
    assert frames.history(store, cycles=[7]).empty
    with pytest.raises(frames.StoreReadError, match="integers >= 0"):
        frames.history(store, cycles=[-1])


def test_the_view_a_user_queries(store):
    con = frames.open_store(store)
    counts = con.sql(
        "SELECT count(*), count(url), count(*) FILTER (WHERE changed) FROM history_with_urls"
    ).fetchall()[0]
    changed = int(frames.history(store)["changed"].fillna(False).sum())
    assert counts == (19, 18, changed)
    assert con.sql("SELECT count(*) FROM catalog").fetchall()[0][0] == 6
    assert con.sql("SELECT count(*) FROM history").fetchall()[0][0] == 19


def test_catalog_plan_and_estimates_in_one_call(store):
    assert sorted(frames.catalog(store)["url"]) == sorted(URLS)

    with pytest.raises(frames.StoreReadError, match="no cycle's plan under"):
        frames.plan(store)
    adhoc = plan_cycle(store, 3, budget=3, host_capacity=10, adhoc_name="look-ahead")
    assert frames.adhoc_plans(store) == ["look-ahead"]
    ahead = frames.plan(store, name="look-ahead")
    assert ahead["url_id"].tolist() == pd.read_parquet(adhoc.path)["url_id"].tolist()
    assert ahead["url"].notna().all()
    with pytest.raises(frames.StoreReadError, match=r"no ad hoc plan 'x' .*: look-ahead\)"):
        frames.plan(store, name="x")
    result = plan_cycle(store, 3, budget=4, host_capacity=10)
    on_disk = pd.read_parquet(result.path)
    planned = frames.plan(store)  # the newest plan
    assert list(planned.columns) == ["url", *on_disk.columns]
    assert planned["url_id"].tolist() == on_disk["url_id"].tolist()  # the plan's order
    assert (planned["url"].map(url_id) == planned["url_id"]).all()
    assert frames.plan(store, 3)["url_id"].tolist() == on_disk["url_id"].tolist()
    assert frames.plan_cycles(store) == [3]
    with pytest.raises(frames.StoreReadError, match=r"no plan for cycle 9 .*cycles 3\)"):
        frames.plan(store, 9)

    est = frames.estimates(store)
    direct = load_rate_estimates(store).set_index("url_id")
    assert len(est) == len(direct) == 6
    assert (est["url"].map(url_id) == est["url_id"]).all()
    assert est["rate"].is_monotonic_decreasing
    pd.testing.assert_series_equal(
        est.set_index("url_id")["rate"].loc[direct.index], direct["rate"], check_exact=True
    )
    assert isinstance(est["host"].dtype, pd.CategoricalDtype)


def test_a_root_without_a_store_is_one_clear_error(tmp_path):
    for read in (frames.history, frames.catalog, frames.plan, frames.estimates, frames.open_store):
        for root in (tmp_path / "nope", tmp_path):  # missing, and empty
            with pytest.raises(StoreMissingError, match="no store at"):
                read(root)


def test_history_show_prints_url_outcome_changed_fetched_at(store, capsys):
    assert main(["history", "show", "--root", str(store), "--limit", "2"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert lines[0] == "cycle 2: 2 of 6 rows, by fetch time"
    assert lines[1].split() == ["url", "outcome", "changed", "fetched_at"]
    # cycle 2 was fetched in reverse catalog order: the last page first
    assert lines[2].split()[:2] == [URLS[-1], "ok"]
    assert lines[3].split()[0] == URLS[-2]
    assert len(lines) == 4

    assert main(["history", "show", "--root", str(store), "--cycle", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("cycle 1: 7 of 7 rows")
    assert f"(url_id {STRAY}, not in the catalog)" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--cycle", "5"], "cycle 5 is not in the history under {root} (cycles 0-2)"),
        (["--cycle", "-1"], "cycle -1 is not in the history under {root} (cycles 0-2)"),
        (["--limit", "0"], "--limit must be at least 1, got 0"),
    ],
)
def test_history_show_refuses_bad_input_in_one_line(store, capsys, argv, message):
    assert main(["history", "show", "--root", str(store), *argv]) == 2
    captured = capsys.readouterr()
    assert captured.err == f"recrawl history: {message.format(root=store)}\n"
    assert captured.out == ""


def test_history_show_without_a_history(tmp_path, capsys):
    assert main(["history", "show", "--root", str(tmp_path / "none")]) == 2
    assert "no store at" in capsys.readouterr().err
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": URLS, "host": "a.test"}))
    assert main(["history", "show", "--root", str(tmp_path)]) == 2
    assert capsys.readouterr().err == (
        f"recrawl history: no history under {tmp_path}: no cycle has been committed\n"
    )


def test_plan_keeps_the_plans_order_when_the_join_runs_in_parallel(tmp_path):
    """A plan of several row groups is scanned by several DuckDB threads, whose join
    output comes in no fixed order: the frame must still be in the file's order."""
    n = 300_000  # six row groups of 50,000: a parallel scan on any machine of 2+ cores
    ids = np.random.default_rng(0).permutation(n).astype(np.int64)
    CatalogStore(tmp_path).upsert(pd.DataFrame({"url": URLS, "host": "a.test"}))
    (tmp_path / "plans").mkdir()
    pd.DataFrame({"url_id": ids, "host": "a.test", "score": np.arange(n, dtype=float)}).to_parquet(
        tmp_path / "plans" / "cycle=0.parquet", row_group_size=50_000
    )
    planned = frames.plan(tmp_path, 0)
    np.testing.assert_array_equal(planned["url_id"].to_numpy(), ids)
    assert planned["url"].isna().all()  # pages the catalog does not know: every row kept
