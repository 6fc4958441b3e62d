"""The production estimator reads Last-Modified from the stored history, host by host."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from email.utils import format_datetime

import numpy as np
import pandas as pd

from tasks.cycle.estimation import load_rate_estimates
from tasks.store.history import HistoryStore

START = datetime(2026, 1, 1, tzinfo=UTC)
HOSTS = ("honest.test", "now.test", "garbled.test", "silent.test")


def write_history(root, *, with_header: bool) -> None:
    """Four hosts of pages that changed at every daily visit (about 20 times a day).

    ``honest.test`` sends the true time of the last change, ``now.test`` the fetch time,
    ``garbled.test`` a Last-Modified no parser accepts (or a date in the future),
    ``silent.test`` nothing.
    """
    rng = np.random.default_rng(0)
    store = HistoryStore(root)
    pages = [(h, i) for h in HOSTS for i in range(6)]
    for day in range(5):
        at = START + timedelta(days=day)
        rows = []
        for host, i in pages:
            age = timedelta(seconds=float(rng.exponential(86_400 / 20)) + 5)
            header = {
                "honest.test": format_datetime(at - age, usegmt=True),
                "now.test": format_datetime(at, usegmt=True),
                "garbled.test": "yesterday-ish"
                if i % 2
                else format_datetime(at + timedelta(days=3), usegmt=True),
                "silent.test": None,
            }[host]
            rows.append(
                {
                    "url_id": hash((host, i)) & 0x7FFFFFFF,
                    "host": host,
                    "fetched_at": at,
                    "outcome": "ok",
                    "record_hash": f"{host}{i}-{day}",
                    "last_modified": header if with_header else None,
                }
            )
        store.write_cycle(day, pd.DataFrame(rows))


def estimates(root, with_header: bool) -> pd.DataFrame:
    write_history(root, with_header=with_header)
    frame = load_rate_estimates(root, use_catalog=False)
    return frame.groupby(frame["host"].astype(str))["rate"].median()


def test_trusted_ages_raise_the_rate_of_pages_changed_at_every_visit(tmp_path):
    with_lm = estimates(tmp_path / "lm", True)
    without = estimates(tmp_path / "plain", False)
    assert np.isfinite(with_lm).all()
    assert with_lm["honest.test"] > 2 * without["honest.test"]
    assert 8 < with_lm["honest.test"] < 50
    # a "now" stamp, a malformed or future date, or no header: changed-or-not only
    for host in ("now.test", "garbled.test", "silent.test"):
        assert with_lm[host] == without[host]
