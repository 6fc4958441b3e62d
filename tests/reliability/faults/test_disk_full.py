"""A full disk and truncated files: a clear error, the history intact and readable.

A full disk is simulated two ways. Portable (no root): a subprocess lowers its
RLIMIT_FSIZE with SIGXFSZ ignored, so writes fail with EFBIG from a chosen point of the
commit on (``disk_worker``, and ``kill_worker --fsize-at`` for a real cycle). As root, a small
tmpfs is really filled (ENOSPC); skipped where it cannot be mounted. Either way the commit
raises ``HistoryWriteError`` naming the file and the cause, the published history is
unchanged and readable, the failed commit leaves no files behind, and a re-run once there
is space commits cleanly. Truncated Parquet files (history, statistics, manifest, a
batch's staged part, a plan) are refused with an error naming the file.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from datetime import timedelta
from pathlib import Path

import pandas as pd
import pytest

from models.discovery.urls import normalize, url_id
from sandbox import HostBehaviour, SandboxWeb, SimClock, serve_sandbox
from tasks.cycle.work import CycleInputError, commit_cycle, split_plan, work_dir, write_failed_part
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryCorruptError, HistoryStore, HistoryWriteError
from tests.flows.conftest import import_catalog
from tests.reliability.faults.disk_worker import PAGES, POINTS, synthetic_rows
from tests.reliability.faults.harness import (
    REPO,
    START,
    bootstrap,
    check_history,
    finish,
    kill_worker,
    snapshot,
    stats_equal_rebuild,
)

pytestmark = pytest.mark.reliability


def _history_files(root: Path) -> set[str]:
    """Every file and folder under the history folder but the manifest and the lock."""
    return {
        str(p.relative_to(root))
        for p in (root / "history").rglob("*")
        if p.name not in (".lock", "_manifest.json")
    }


def _two_cycles(root: Path) -> None:
    store = HistoryStore(root)
    for cycle in (0, 1):
        store.write_cycle(cycle, synthetic_rows(cycle))


def _disk_worker(root: Path, cycle: int, full_at: str | None = None) -> tuple[int, dict]:
    cmd = [sys.executable, "-m", "tests.reliability.faults.disk_worker", str(root), str(cycle)]
    if full_at:
        cmd += ["--full-at", full_at]
    done = subprocess.run(cmd, cwd=REPO, capture_output=True, timeout=120, check=False)
    lines = done.stdout.decode().strip().splitlines()
    assert lines, done.stderr.decode()
    return done.returncode, json.loads(lines[-1])


def _assert_full_disk_commit_fails_cleanly(root: Path, point: str) -> str:
    before, files = snapshot(root), _history_files(root)
    code, out = _disk_worker(root, 2, full_at=point)
    assert code == 1 and out["error"] == "HistoryWriteError", out
    assert "file size limit" in out["message"] and str(root) in out["message"], out
    assert "Nothing was published" in out["message"]
    assert snapshot(root) == before  # the history as it was, and readable
    assert stats_equal_rebuild(root)
    assert _history_files(root) == files, "a failed commit left files behind"
    return out["message"]


def test_a_full_disk_fails_the_commit_cleanly_and_a_rerun_commits(tmp_path):
    """RLIMIT_FSIZE (no root needed): the version file of the new cycle cannot be written."""
    _two_cycles(tmp_path)
    message = _assert_full_disk_commit_fails_cleanly(tmp_path, "version")
    assert "data file of cycle 2" in message and "cycle=2/" in message
    code, out = _disk_worker(tmp_path, 2)  # space is back
    assert code == 0 and out == {"ok": PAGES}
    assert HistoryStore(tmp_path).cycles() == [0, 1, 2]
    assert stats_equal_rebuild(tmp_path)


@pytest.mark.long_reliability
@pytest.mark.parametrize("point", POINTS)
def test_a_full_disk_at_each_write_of_the_commit(tmp_path, point):
    _two_cycles(tmp_path)
    before = snapshot(tmp_path)
    _assert_full_disk_commit_fails_cleanly(tmp_path, point)
    code, out = _disk_worker(tmp_path, 2)
    assert code == 0 and out == {"ok": PAGES}
    after = snapshot(tmp_path)
    assert {c: after[c] for c in (0, 1)} == before and after[2].rows == PAGES


# ---------------------------------------------------------------------- a real full disk


@contextlib.contextmanager
def _small_tmpfs(size: str) -> Iterator[Path]:
    if os.geteuid() != 0:
        pytest.skip("mounting a tmpfs needs root; the RLIMIT_FSIZE tests cover the rest")
    mount = Path(tempfile.mkdtemp(prefix="faults-tmpfs-"))
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(mount)],
        capture_output=True,
        check=False,
    )
    if done.returncode != 0:
        mount.rmdir()
        pytest.skip(f"cannot mount a tmpfs here: {done.stderr.decode().strip()}")
    try:
        yield mount
    finally:
        gc.collect()  # DuckDB connections left to the collector hold files open
        if subprocess.run(["umount", str(mount)], check=False).returncode != 0:
            subprocess.run(["umount", "-l", str(mount)], check=False)  # detached when free
        mount.rmdir()


def _fill(path: Path) -> None:
    """Write zeros to ``path`` until the file system is full (to the last block)."""
    fd = os.open(path, os.O_WRONLY | os.O_CREAT, 0o600)
    try:
        for size in (1 << 16, 512):
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, b"\0" * size)
    finally:
        os.close(fd)


def test_a_really_full_tmpfs_fails_the_commit_cleanly():
    with _small_tmpfs("8m") as root:
        _two_cycles(root)
        before, files = snapshot(root), _history_files(root)
        ballast = root / "ballast"
        _fill(ballast)
        with pytest.raises(HistoryWriteError, match="no space left on the device") as raised:
            HistoryStore(root).write_cycle(2, synthetic_rows(2))
        assert str(root) in str(raised.value)
        assert snapshot(root) == before and _history_files(root) == files
        assert len(HistoryStore(root).read()) == 2 * PAGES  # readable while the disk is full
        ballast.unlink()  # space returns
        result = HistoryStore(root).write_cycle(2, synthetic_rows(2))
        assert result.rows == PAGES and HistoryStore(root).cycles() == [0, 1, 2]
        assert stats_equal_rebuild(root)


# ---------------------------------------------------------------------- a cycle on a full disk


@pytest.mark.long_reliability
def test_a_full_disk_at_each_stage_of_a_real_cycle(tmp_path):
    """The crash test's cycle worker with RLIMIT_FSIZE lowered at one stage: it fails with
    the disk's error; the history is unchanged; a re-run with space completes the cycle."""
    clock = SimClock(START)
    web = SandboxWeb.generate(4, 8, seed=9, default=HostBehaviour(latency_s=0.01), clock=clock)
    root, log = tmp_path / "store", tmp_path / "faults.jsonl"
    stages = ("fetch", "parts", "commit-stage", "commit-write", "commit-manifest")
    with serve_sandbox(web) as running:
        bootstrap(root, len(import_catalog(root, running)))
        for cycle, stage in enumerate(stages, start=1):
            at = START + timedelta(days=cycle)
            running.clock.set(at)
            before = snapshot(root)
            proc = kill_worker(root, cycle, at, 16, fault_log=log, fsize_at=stage)
            code, _, err = finish(proc)
            assert code == 1, err
            assert "File too large" in err or "file size limit" in err, err[-2000:]
            if stage.startswith("commit"):
                assert "HistoryWriteError" in err, err[-2000:]
            print(f"disk full at {stage}: {err.strip().splitlines()[-1][:300]}")
            assert not check_history(root, before, cycle)
            code, _, err = finish(kill_worker(root, cycle, at, 16, fault_log=log))
            assert code == 0, err
            assert check_history(root, before, cycle)


# ---------------------------------------------------------------------- truncated files


def _truncate(path: Path) -> None:
    os.truncate(path, path.stat().st_size // 2)


def test_truncated_history_files_raise_corrupt_errors_naming_them(tmp_path):
    _two_cycles(tmp_path)
    store = HistoryStore(tmp_path)
    data = Path(store.files([1])[0])
    stats = tmp_path / "history" / store.manifest()["stats"]["file"]
    manifest = tmp_path / "history" / "_manifest.json"
    for path, read in (
        (data, store.read),
        (data, lambda: store.write_cycle(2, synthetic_rows(2))),  # linking reads cycle 1
        (stats, store.page_stats),
        (manifest, store.cycles),
    ):
        saved = path.read_bytes()
        _truncate(path)
        with pytest.raises(HistoryCorruptError) as raised:
            read()
        assert str(path) in str(raised.value)
        path.write_bytes(saved)
    assert store.cycles() == [0, 1] and len(store.read()) == 2 * PAGES


def _split_without_fetching(root: Path, cycle: int) -> list[str]:
    """A cycle's plan, split and parts (every batch recorded as not run): no network."""
    urls = [f"http://h{i % 3}.example/p{i}" for i in range(12)]
    hosts = [u.split("/")[2] for u in urls]
    CatalogStore(root).upsert(pd.DataFrame({"url": urls, "host": hosts}))
    plan = root / "plans" / f"cycle={cycle}.parquet"
    plan.parent.mkdir(parents=True, exist_ok=True)
    ids = [url_id(normalize(u)) for u in urls]
    pd.DataFrame({"url_id": ids, "host": hosts, "score": 1.0}).to_parquet(plan)
    specs = split_plan(root, cycle, plan, max_urls=6, max_hosts=1)
    at = START + timedelta(days=cycle)
    for spec in specs:
        write_failed_part(root, cycle, spec.name, "not fetched (test)", clock=lambda: at)
    return [spec.name for spec in specs]


def test_a_truncated_staged_part_or_plan_is_refused_naming_it(tmp_path):
    _two_cycles(tmp_path)
    before = snapshot(tmp_path)
    names = _split_without_fetching(tmp_path, 2)
    part = work_dir(tmp_path, 2) / "parts" / f"{names[1]}.parquet"
    _truncate(part)
    with pytest.raises(HistoryCorruptError, match="staged part") as raised:
        commit_cycle(tmp_path, 2)
    assert str(part) in str(raised.value)
    assert snapshot(tmp_path) == before
    part.unlink()  # as the message says: the batch is then recorded as not run
    assert commit_cycle(tmp_path, 2).missing_batches == 1
    assert HistoryStore(tmp_path).cycles() == [0, 1, 2]

    plan = tmp_path / "plans" / "cycle=3.parquet"
    plan.write_bytes((tmp_path / "plans" / "cycle=2.parquet").read_bytes())
    _truncate(plan)
    with pytest.raises(CycleInputError, match="not a readable Parquet file") as raised:
        split_plan(tmp_path, 3, plan)
    assert str(plan) in str(raised.value)
