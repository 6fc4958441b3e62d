"""Commit memory: peak RSS of ``commit_cycle`` at two cycle sizes, streamed vs the old path.

    .venv/bin/python benchmarks/bench_commit.py [--rows 100000,400000,1600000] [--batch-rows 2000]
                                                [--modes streamed,reference,unchecked]
                                                [--reference-commit d0747de] [--repeat 1]

For each size, a store is prepared once (in this process, not measured): cycle 0 holds every
page once (``ok``), and cycle 1 is split into batches of ``--batch-rows`` pages whose parts
are on disk as the fetch left them (85 % ``ok`` with a fifth of the record hashes changed,
8 % ``not_modified``, 7 % errors and timeouts; 50 pages a host). Each mode then commits
cycle 1 from a fresh copy of that store, in a fresh process, so peak RSS (``ru_maxrss``)
is the commit's own:

- ``streamed``: this tree's ``tasks.cycle.work.commit_cycle`` (parts staged one at a time, one
  DuckDB query under a memory limit streamed into the Parquet file, statistics aggregated
  from it);
- ``reference``: the commit as it was at ``--reference-commit`` (``git show`` of that
  commit's ``tasks/store/history.py`` and ``tasks/archive/cycle.py`` loaded as modules): every
  part read into one Arrow table, deduplicated, linked and conformed as Arrow tables;
- ``unchecked``: ``streamed`` with the store's file digests switched off
  (``benchmarks/digest_peer.py``): what checking cycle 0's part and the statistics before
  the commit and hashing the two files it writes cost (``streamed`` / ``unchecked``).

The RSS increase is the peak (``VmHWM``) minus the RSS just before the commit (after
the imports).
Both modes' published cycle 1 is compared row by row (same rows, same values) and its
Parquet schema is checked against ``HISTORY_SCHEMA``.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from types import ModuleType

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

#: The last commit before the streamed commit (issue 8): the reference implementation.
REFERENCE_COMMIT = "d0747de"
MODES = ("streamed", "reference", "unchecked")
T0 = datetime(2026, 3, 1, tzinfo=UTC)
PAGES_PER_HOST = 50


# ---------------------------------------------------------------------- data


def cycle_rows(pages: int, cycle_id: int, seed: int) -> object:
    """Synthetic history rows of one cycle over ``pages`` pages (an Arrow table)."""
    import numpy as np
    import pyarrow as pa

    from models.schemas import HISTORY_SCHEMA

    rng = np.random.default_rng(seed + cycle_id)
    ids = np.arange(1, pages + 1, dtype=np.int64) * 7919
    hosts = [f"host-{i // PAGES_PER_HOST:05d}.example.org" for i in range(pages)]
    start = T0 + timedelta(days=7 * cycle_id)
    offsets_us = rng.integers(0, 86_400_000_000, pages)
    fetched = pa.array(
        [start + timedelta(microseconds=int(o)) for o in offsets_us],
        HISTORY_SCHEMA.field("fetched_at").type,
    )
    if cycle_id == 0:
        outcome = np.full(pages, "ok", dtype=object)
    else:
        outcome = rng.choice(
            np.array(["ok", "not_modified", "error", "timeout"], dtype=object),
            pages,
            p=[0.85, 0.08, 0.04, 0.03],
        )
    version = (rng.random(pages) < 0.2).astype(np.int64) * cycle_id
    ok = outcome == "ok"
    record_hash = [
        f"{(int(i) * 2654435761 + int(v)) % 2**128:032x}" for i, v in zip(ids, version, strict=True)
    ]
    status = np.where(ok, 200, np.where(outcome == "not_modified", 304, 500))
    columns = {
        "url_id": pa.array(ids),
        "host": pa.array(hosts),
        "cycle_id": pa.array(np.full(pages, cycle_id, dtype=np.int64)),
        "fetched_at": fetched,
        "status": pa.array(status.astype(np.int16)),
        "outcome": pa.array(outcome.tolist(), pa.string()),
        "record_hash": pa.array([h if o else None for h, o in zip(record_hash, ok, strict=True)]),
        "etag": pa.array(
            [f'W/"{h[:16]}"' if o else None for h, o in zip(record_hash, ok, strict=True)]
        ),
        "last_modified": pa.array(
            [start.strftime("%a, %d %b %Y %H:%M:%S GMT") if o else None for o in ok]
        ),
        "bytes": pa.array(rng.integers(2_000, 80_000, pages)),
        "latency_s": pa.array(rng.random(pages)),
        "cost": pa.array(np.ones(pages)),
        "retries": pa.array(np.zeros(pages, dtype=np.int16)),
        "reason": pa.array([None if o else "synthetic failure" for o in ok], pa.string()),
    }
    return pa.table(columns)


def prepare(root: Path, pages: int, batch_rows: int) -> None:
    """Cycle 0 published; cycle 1's batches and parts on disk, ready for ``commit_cycle``."""
    import pyarrow.parquet as pq

    from tasks.cycle.work import INDEX, work_dir
    from tasks.store.history import HistoryStore, validate_history_rows

    HistoryStore(root).write_cycle(0, cycle_rows(pages, 0, seed=1))
    rows = validate_history_rows(cycle_rows(pages, 1, seed=1), 1, linked=False)
    folder = work_dir(root, 1)
    (folder / "parts").mkdir(parents=True)
    (folder / "batches").mkdir()
    batches = []
    for index, start in enumerate(range(0, pages, batch_rows)):
        name = f"batch-{index:05d}"
        part = rows.slice(start, batch_rows)
        pq.write_table(part, folder / "parts" / f"{name}.parquet")
        hosts = sorted(set(part["host"].to_pylist()))
        path = str(folder / "batches" / f"{name}.parquet")
        batches.append({"name": name, "path": path, "hosts": hosts, "urls": part.num_rows})
    (folder / INDEX).write_text(json.dumps({"batches": batches}))


# ---------------------------------------------------------------------- commits


def _git_module(commit: str, path: str, name: str) -> ModuleType:
    """A module of this repository as it was at ``commit`` (read with ``git show``)."""
    source = subprocess.run(
        ["git", "show", f"{commit}:{path}"], cwd=ROOT, check=True, capture_output=True, text=True
    ).stdout
    spec = importlib.util.spec_from_loader(name, loader=None)
    assert spec is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    exec(compile(source, f"{commit}:{path}", "exec"), module.__dict__)
    return module


def reference_commit(root: Path, cycle_id: int, commit: str) -> int:
    """``commit_cycle`` as it was: every part in one Arrow table, then ``write_cycle``."""
    import pyarrow as pa

    from tasks.cycle.work import read_batches, read_part, work_dir

    history = _git_module(commit, "tasks/store/history.py", "history_reference")
    archive_module = _git_module(commit, "tasks/archive/cycle.py", "cycle_archive_reference")
    folder = work_dir(root, cycle_id)
    parts = [str(folder / "parts" / f"{s.name}.parquet") for s in read_batches(root, cycle_id)]
    rows = pa.concat_tables([read_part(p) for p in parts])
    archive = archive_module.CycleArchive(root, cycle_id, parts, rows)
    archive.remove_orphans()
    result = history.HistoryStore(root).write_cycle(cycle_id, rows)
    archive.remove_replaced()
    return int(result.rows)


def _status_mb(field: str) -> float:
    """``VmRSS`` (now) or ``VmHWM`` (peak) of this process, in MB.

    Not ``ru_maxrss``: a child keeps the RSS its parent had when it was forked as its
    starting maximum, so a parent holding a large prepared cycle would show in it.
    """
    with open("/proc/self/status") as handle:
        for line in handle:
            if line.startswith(f"{field}:"):
                return int(line.split()[1]) / 1024
    raise RuntimeError(f"no {field} in /proc/self/status")


def child(mode: str, root: Path, commit: str) -> None:
    """Commit cycle 1 of ``root`` in this fresh process and print the figures as JSON."""
    import duckdb  # noqa: F401  (imported before the baseline by both modes)
    import pandas  # noqa: F401
    import pyarrow  # noqa: F401

    import tasks.cycle.work

    if mode == "reference":
        for path, name in (
            ("tasks/store/history.py", "history_reference"),
            ("tasks/archive/cycle.py", "cycle_archive_reference"),
        ):
            _git_module(commit, path, name)  # compile before the baseline too
    before = _status_mb("VmRSS")
    started = time.perf_counter()
    if mode == "unchecked":
        from benchmarks.digest_peer import switch_off_digests

        switch_off_digests()
    if mode in ("streamed", "unchecked"):
        rows = tasks.cycle.work.commit_cycle(root, 1).rows
    else:
        rows = reference_commit(root, 1, commit)
    seconds = time.perf_counter() - started
    peak = _status_mb("VmHWM")
    print(json.dumps({"rows": rows, "seconds": seconds, "rss_before": before, "peak": peak}))


# ---------------------------------------------------------------------- driver


def _run_child(mode: str, root: Path, commit: str) -> dict[str, float]:
    out = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(root), "--reference-commit", commit],
        cwd=ROOT,
        check=True,
        capture_output=True,
        text=True,
    )
    result: dict[str, float] = json.loads(out.stdout.strip().splitlines()[-1])
    return result


def _same_cycle(a: Path, b: Path) -> None:
    """Both stores published the same cycle 1, row for row, in HISTORY_SCHEMA."""
    import pyarrow.parquet as pq

    from models.schemas import HISTORY_SCHEMA
    from tasks.store.history import HistoryStore

    # read unchecked: the ``unchecked`` mode recorded no real digests
    tables, stats = [], []
    for root in (a, b):
        store = HistoryStore(root)
        files = store.files([1], verify=False)
        for path in files:
            assert pq.read_schema(path).remove_metadata() == HISTORY_SCHEMA, path
        order = [("url_id", "ascending"), ("fetched_at", "ascending")]
        tables.append(pq.read_table(files).sort_by(order))
        stats.append(pq.read_table(store.stats_files(verify=False)[0]))
    assert tables[0].equals(tables[1]), "the two commits published different rows"
    assert stats[0].num_rows == stats[1].num_rows, "different per-page statistics"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="100000,400000,1600000")
    parser.add_argument("--batch-rows", type=int, default=2000)
    parser.add_argument("--modes", default="streamed,reference")
    parser.add_argument("--reference-commit", default=REFERENCE_COMMIT)
    parser.add_argument("--repeat", type=int, default=1, help="commits per mode and size")
    parser.add_argument("--child", nargs=2, metavar=("MODE", "ROOT"))
    args = parser.parse_args(argv)
    if args.child:
        child(args.child[0], Path(args.child[1]), args.reference_commit)
        return 0
    sizes = [int(n) for n in args.rows.split(",")]
    modes = [m for m in args.modes.split(",") if m]
    if unknown := set(modes) - set(MODES):
        parser.error(f"unknown mode(s) {sorted(unknown)}; one of {', '.join(MODES)}")
    results: dict[tuple[str, int], dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
        for pages in sizes:
            template = Path(tmp) / f"template-{pages}"
            prepare(template, pages, args.batch_rows)
            runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
            for repeat in range(args.repeat):  # modes alternate, each commit on a fresh copy
                roots = []
                for mode in modes:
                    root = Path(tmp) / f"{mode}-{pages}-{repeat}"
                    shutil.copytree(template, root)
                    runs[mode].append(_run_child(mode, root, args.reference_commit))
                    roots.append(root)
                for other in roots[1:]:
                    _same_cycle(roots[0], other)
                for root in roots:
                    shutil.rmtree(root)
            for mode, done in runs.items():
                median = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
                results[mode, pages] = {**median, "peak": max(r["peak"] for r in done)}
            shutil.rmtree(template)
    print(
        f"commit of cycle 1 (parts of {args.batch_rows} rows); {os.cpu_count()} cores; "
        f"median time of {args.repeat} run(s), highest peak"
    )
    print("| mode | rows | time | RSS before | peak RSS | increase |")
    print("|---|---:|---:|---:|---:|---:|")
    for (mode, pages), r in results.items():
        increase = r["peak"] - r["rss_before"]
        print(
            f"| {mode} | {pages:,} | {r['seconds']:.1f} s | {r['rss_before']:.0f} MB "
            f"| {r['peak']:.0f} MB | {increase:.0f} MB |"
        )
    if {"streamed", "unchecked"} <= set(modes):
        for pages in sizes:
            checked, unchecked = results["streamed", pages], results["unchecked", pages]
            print(
                f"digests at {pages:,} rows: streamed / unchecked time = "
                f"{checked['seconds'] / unchecked['seconds']:.3f}x "
                f"({checked['seconds'] - unchecked['seconds']:+.2f} s), peak RSS "
                f"{checked['peak'] - unchecked['peak']:+.0f} MB"
            )
    small = sizes[0]
    for mode in modes:
        base = results[mode, small]
        grow_small = base["peak"] - base["rss_before"]
        for large in sizes[1:]:
            r = results[mode, large]
            grow = r["peak"] - r["rss_before"]
            print(
                f"{mode}: increase at {large:,} rows / at {small:,} rows = "
                f"{grow / max(grow_small, 1e-9):.2f}x ({grow - grow_small:+.0f} MB)"
            )
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
