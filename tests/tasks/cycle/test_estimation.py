import numpy as np
import pandas as pd
import pyarrow as pa
import pytest

from models.estimation.synthetic import generate_history, generate_web
from tasks.cycle.estimation import load_rate_estimates
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryStore


def stored_cycles(tables: list[pa.Table], cycle_id: int) -> pa.Table:
    """Several simulated daily visits as the rows of one stored cycle."""
    rows = pa.concat_tables(tables)
    column = rows.schema.get_field_index("cycle_id")
    cycle = pa.array([cycle_id] * rows.num_rows, rows.schema.field(column).type)
    return rows.set_column(column, "cycle_id", cycle)


def test_load_rate_estimates_covers_catalog_and_tracks_truth(tmp_path):
    web = generate_web(4000, seed=11)
    CatalogStore(tmp_path).upsert(web.catalog_table())
    store = HistoryStore(tmp_path)
    # A tenth of the catalog is never fetched: those pages must still get an estimate.
    fetched = web.url_ids[: int(web.size * 0.9)]
    # 40 daily visits (pages with > 30 intervals below), stored as 8 cycles of 5 visits
    # (the rows keep the simulator's links): a commit costs ~0.3 CPU s whatever its size.
    # Every estimate is within 2% of what 40 one-visit cycles give (measured).
    visits = []
    for day, table in generate_history(web, 40, seed=11):
        visits.append(table.filter(np.isin(table["url_id"].to_numpy(), fetched)))
        if len(visits) == 5:
            store.write_cycle(day // 5, stored_cycles(visits, day // 5), link=False)
            visits = []

    frame = load_rate_estimates(tmp_path)
    assert len(frame) == web.size
    assert set(frame.columns) >= {"url_id", "host", "group", "rate", "rate_low", "rate_high"}
    assert np.isfinite(frame["rate"]).all() and (frame["rate"] > 0).all()
    unseen = frame[frame["n_intervals"] == 0]
    assert len(unseen) == web.size - len(fetched)
    np.testing.assert_allclose(unseen["rate"], unseen["prior_rate"].clip(5e-4, 7), rtol=1e-9)

    truth = pd.Series(web.rate, index=web.url_ids).reindex(frame["url_id"]).to_numpy()
    measurable = (frame["n_intervals"].to_numpy() > 30) & (truth > 0.05) & (truth < 2)
    ratio = frame["rate"].to_numpy()[measurable] / truth[measurable]
    assert 0.85 < np.median(ratio) < 1.15


def test_without_catalog_groups_by_host(tmp_path):
    web = generate_web(500, seed=12)
    store = HistoryStore(tmp_path)
    for cycle_id, table in generate_history(web, 5, seed=12):
        store.write_cycle(cycle_id, table, link=False)
    frame = load_rate_estimates(tmp_path, use_catalog=False)
    assert (frame["group"].astype(str) == frame["host"].astype(str)).all()


def test_page_observed_once_gets_its_group_prior(tmp_path):
    from datetime import UTC, datetime

    import pandas as pd

    web = generate_web(300, seed=13)
    CatalogStore(tmp_path).upsert(web.catalog_table())
    store = HistoryStore(tmp_path)
    for cycle_id, table in generate_history(web, 6, seed=13):
        store.write_cycle(cycle_id, table, link=False)
    newcomer = pd.DataFrame({"url": ["http://h0.sandbox.test/new"], "host": ["h0.sandbox.test"]})
    CatalogStore(tmp_path).upsert(newcomer)
    from models.discovery.urls import url_id

    new_id = url_id("http://h0.sandbox.test/new")
    store.write_cycle(
        6,
        pd.DataFrame(
            {
                "url_id": [new_id],
                "host": ["h0.sandbox.test"],
                "fetched_at": [datetime(2026, 1, 8, tzinfo=UTC)],
                "outcome": ["ok"],
                "record_hash": ["x"],
            }
        ),
    )
    frame = load_rate_estimates(tmp_path).set_index("url_id")
    row = frame.loc[new_id]
    assert row["n_intervals"] == 0
    assert row["rate"] == pytest.approx(row["prior_rate"])
    assert row["rate_low"] < row["rate"] < row["rate_high"]
