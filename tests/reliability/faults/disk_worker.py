"""Commit one synthetic cycle to a history store, with the disk "full" from a chosen write.

``python -m tests.reliability.faults.disk_worker ROOT CYCLE [--full-at POINT]`` writes
``synthetic_rows(CYCLE)`` as the cycle through ``HistoryStore.write_cycle``. With
``--full-at`` the process's RLIMIT_FSIZE drops to a few bytes (SIGXFSZ ignored) just before
that write, so it and every later write fail with EFBIG, as on a full disk, without root:

* ``staging``: the staged part of the cycle's rows;
* ``version``: the commit's one pass, which writes the cycle's new version file, the
  per-page statistics and the pages' last observations (the rows are staged);
* ``stats``: the new per-page statistics file, in that pass (the bucket's rows of the
  version file and of the last observations are written);
* ``manifest``: the new manifest (every data file is written; nothing is published yet).

Prints one JSON line: ``{"ok": rows}`` or ``{"error": type, "message": text}`` (status 1).
"""

from __future__ import annotations

import argparse
import json
import resource
import signal
import sys
from datetime import timedelta
from typing import Any

import numpy as np
import pandas as pd
import pyarrow.parquet as pq

from models.schemas import PAGE_STATS_FILE_SCHEMA
from tasks.store import history
from tests.reliability.faults.harness import START

POINTS = ("staging", "version", "stats", "manifest")
PAGES = 2_000


def synthetic_rows(cycle: int, pages: int = PAGES) -> pd.DataFrame:
    """One fetch of every page at cycle ``cycle`` (day ``cycle``); a tenth changed."""
    rng = np.random.default_rng(cycle)
    ids = np.arange(1, pages + 1, dtype=np.int64)
    changed = rng.random(pages) < 0.1
    return pd.DataFrame(
        {
            "url_id": ids,
            "host": [f"host{i % 50}.example" for i in ids],
            "fetched_at": pd.Timestamp(START + timedelta(days=cycle))
            + pd.to_timedelta(rng.integers(0, 3600, pages), unit="s"),
            "status": np.full(pages, 200, dtype=np.int16),
            "outcome": "ok",
            "record_hash": [f"h{i}-{cycle if c else 0}" for i, c in zip(ids, changed, strict=True)],
            "bytes": rng.integers(1_000, 50_000, pages),
            "cost": 1.0,
        }
    )


def fill_disk_at(point: str) -> None:
    """Make every write from ``point`` on fail with EFBIG (RLIMIT_FSIZE of 16 bytes)."""

    def full() -> None:
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)
        _, hard = resource.getrlimit(resource.RLIMIT_FSIZE)
        resource.setrlimit(resource.RLIMIT_FSIZE, (16, hard))

    if point == "staging":
        append = history.StagedRows.append

        def append_full(self: Any, table: Any) -> None:
            full()
            append(self, table)

        history.StagedRows.append = append_full  # type: ignore[method-assign]
    elif point == "version":
        link = history._link

        def link_full(*args: Any, **kwargs: Any) -> Any:
            full()
            return link(*args, **kwargs)

        history._link = link_full
    elif point == "stats":
        write_table = pq.ParquetWriter.write_table

        def write_full(self: Any, table: Any, *args: Any, **kwargs: Any) -> None:
            if table.schema.equals(PAGE_STATS_FILE_SCHEMA):
                full()
            write_table(self, table, *args, **kwargs)

        pq.ParquetWriter.write_table = write_full  # type: ignore[method-assign]
    elif point == "manifest":
        publish = history.HistoryStore._publish

        def publish_full(self: Any, manifest: Any, retire: Any) -> None:
            full()
            publish(self, manifest, retire)

        history.HistoryStore._publish = publish_full  # type: ignore[method-assign]
    else:
        raise SystemExit(f"unknown point {point!r}; one of {', '.join(POINTS)}")


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("root")
    parser.add_argument("cycle", type=int)
    parser.add_argument("--full-at", choices=POINTS)
    args = parser.parse_args(argv)
    if args.full_at:
        fill_disk_at(args.full_at)
    try:
        result = history.HistoryStore(args.root).write_cycle(args.cycle, synthetic_rows(args.cycle))
    except Exception as exc:
        print(json.dumps({"error": type(exc).__name__, "message": str(exc)}))
        return 1
    print(json.dumps({"ok": result.rows}))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
