"""Shared pieces of the fault tests: worker processes, history snapshots, invariant checks.

The invariants a fault must never break, checked after every kill:

* every cycle committed before the fault is byte-for-byte the same data (same manifest
  entry, same rows: a digest of the sorted rows);
* the cycle being written is either absent or complete (one row per planned page), never
  partial, and no (url_id, cycle_id) appears twice anywhere;
* the per-page statistics equal a rebuild from the history files;
* every file the manifest names is readable.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from tasks.fetch.settings import FetchSettings
from tasks.store.history import HistoryStore, connect, stats_sql

REPO = Path(__file__).resolve().parents[3]
START = datetime(2026, 1, 1, tzinfo=UTC)
LOOPBACK = ("127.0.0.0/8",)


def sandbox_fetch(base: dict[str, Any]) -> dict[str, Any]:
    """Fetch settings (a flow's ``fetch`` dict) that may reach the sandbox on loopback."""
    values = dict(base)
    if "allowed_networks" in FetchSettings.model_fields:
        values.setdefault("allowed_networks", list(LOOPBACK))
    return values


# ---------------------------------------------------------------------- worker processes


def kill_worker(
    root: Path,
    cycle: int,
    at: datetime,
    budget: float,
    stage: str = "none",
    index: int = 1,
    *,
    fault_log: Path,
    fsize_at: str | None = None,
    extra: tuple[str, ...] = (),
) -> subprocess.Popen[bytes]:
    """Start ``kill_worker`` (the crash test's cycle worker with a planned fault)."""
    own = [stage, str(index), *(["--fsize-at", fsize_at] if fsize_at else [])]
    args = [str(root), str(cycle), at.isoformat(), str(budget), *extra]
    cmd = [sys.executable, "-m", "tests.reliability.faults.kill_worker", *own, "--", *args]
    env = {**os.environ, "FAULT_LOG": str(fault_log)}
    return subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)


def finish(proc: subprocess.Popen[bytes], timeout: float = 120) -> tuple[int, str, str]:
    out, err = proc.communicate(timeout=timeout)
    return proc.returncode, out.decode(), err.decode()


def fault_events(path: Path) -> list[dict[str, Any]]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


# ---------------------------------------------------------------------- history checks


@dataclass(frozen=True)
class CycleSnapshot:
    entry: str  # the manifest entry (version folder, files, row count) as JSON
    rows: int
    digest: str  # BLAKE2b of the cycle's rows sorted by url_id, fetched_at


def snapshot(root: Path) -> dict[int, CycleSnapshot]:
    """Every committed cycle's manifest entry and row digest."""
    store = HistoryStore(root)
    entries = store.manifest()["cycles"]
    out = {}
    for cycle in store.cycles():
        frame = store.read([cycle]).to_pandas()
        frame = frame.sort_values(["url_id", "fetched_at"]).reset_index(drop=True)
        hashed = pd.util.hash_pandas_object(frame, index=False).to_numpy().tobytes()
        entry = {k: v for k, v in entries[str(cycle)].items() if k != "committed_at"}
        out[cycle] = CycleSnapshot(
            json.dumps(entry, sort_keys=True),
            len(frame),
            hashlib.blake2b(hashed, digest_size=16).hexdigest(),
        )
    return out


def planned_ids(root: Path, cycle: int) -> list[int]:
    plan = pd.read_parquet(root / "plans" / f"cycle={cycle}.parquet", columns=["url_id"])
    return sorted(plan["url_id"].tolist())


def check_history(root: Path, before: dict[int, CycleSnapshot], cycle: int) -> bool:
    """Assert the invariants; True if ``cycle`` is committed (then it is complete)."""
    store = HistoryStore(root)
    now = snapshot(root)
    for old, snap in before.items():
        assert now.get(old) == snap, f"committed cycle {old} changed after a fault"
    assert set(now) <= set(before) | {cycle}, f"unexpected cycles {sorted(now)}"
    history = store.read().to_pandas()
    assert not history.duplicated(["url_id", "cycle_id"]).any(), "an observation counted twice"
    assert stats_equal_rebuild(root), "per-page statistics differ from a rebuild"
    if cycle not in now:
        return False
    rows = store.read([cycle]).to_pandas()
    assert sorted(rows["url_id"]) == planned_ids(root, cycle), f"cycle {cycle} is partial"
    return True


def stats_equal_rebuild(root: Path) -> bool:
    """The published per-page statistics equal the ones recomputed from every file."""
    store = HistoryStore(root)
    con = connect()
    con.register("everything", store.relation(con))
    rebuilt = con.sql(stats_sql("everything")).df().sort_values("url_id")
    published = store.page_stats().to_pandas().sort_values("url_id")
    if len(rebuilt) != len(published):
        return False
    rebuilt, published = rebuilt.reset_index(drop=True), published.reset_index(drop=True)
    for column in published.columns:
        a, b = published[column].to_numpy(), rebuilt[column].to_numpy()
        if a.dtype.kind == "f" or b.dtype.kind == "f":
            if not np.allclose(a.astype(float), b.astype(float), rtol=1e-9, atol=1e-9):
                return False
        elif not (a == b).all():
            return False
    return True


def bootstrap(root: Path, budget: float) -> None:
    """Cycle 0 (every page once) in this process: the crash test's worker, no kill."""
    from tests.tasks.cycle import cycle_worker

    settings = cycle_worker.SETTINGS
    if "allowed_networks" in FetchSettings.model_fields and not settings.allowed_networks:
        patched = FetchSettings(
            **settings.model_dump(exclude_unset=True), allowed_networks=LOOPBACK
        )
        cycle_worker.SETTINGS = patched
    try:
        code = cycle_worker.main([str(root), "0", START.isoformat(), str(budget), "--bootstrap"])
    finally:
        cycle_worker.SETTINGS = settings
    assert code == 0
