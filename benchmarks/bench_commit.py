"""Commit time and memory: ``commit_cycle`` against writing the same rows as one Parquet file.

    .venv/bin/python benchmarks/bench_commit.py [--rows 1000000] [--batch-rows 2000]
                                                [--prior-cycles 1]
                                                [--modes streamed,parquet,reference,unchecked]
                                                [--reference-commit d0747de] [--repeat 1]

For each size, a store is prepared once (in this process, not measured): cycles 0 ..
``--prior-cycles`` - 1 hold every page once (``ok``), and the next cycle is split into
batches of ``--batch-rows`` pages whose parts are on disk as the fetch left them (85 % ``ok``
with a fifth of the record hashes changed, 8 % ``not_modified``, 7 % errors and timeouts; 50
pages a host). Each mode then runs from a fresh copy of that store, in a fresh process, so
peak RSS (``VmHWM``) and time are its own:

- ``streamed``: this tree's ``tasks.cycle.work.commit_cycle`` (parts staged one at a time,
  deduplication and links on the rows' keys, the data file and the statistics streamed;
  durable, atomic, digests recorded);
- ``parquet``: the peer, the ceiling of issue 19: the cycle's parts read into one Arrow table
  (not timed), then written as one Parquet file by ``pq.write_table`` with its defaults
  (``parquet``'s time) and again with the store's options, zstd (printed beside it);
- ``reference``: the commit as it was at ``--reference-commit`` (``git show`` of that
  commit's ``tasks/store/history.py`` and ``tasks/archive/cycle.py`` loaded as modules): every
  part read into one Arrow table, deduplicated, linked and conformed as Arrow tables;
- ``unchecked``: ``streamed`` with the store's file digests switched off
  (``benchmarks/digest_peer.py``): what checking the history and the statistics before
  the commit and hashing the files it writes cost (``streamed`` / ``unchecked``).

Printed: the table, the ratio commit / one Parquet file (issue 19's target: at most 3x at
1,000,000 rows), the command, and the machine's load average before and after each size.
The RSS increase is the peak minus the RSS just before the commit (after the imports).
The commit modes' published cycle is compared row by row (same rows, same values) and its
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
MODES = ("streamed", "parquet", "reference", "unchecked")
#: The commit modes (the others publish nothing).
COMMITS = ("streamed", "reference", "unchecked")
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


def prepare(root: Path, pages: int, batch_rows: int, prior_cycles: int = 1) -> int:
    """Cycles ``0 .. prior_cycles - 1`` published; the next cycle's batches and parts on disk,
    ready for ``commit_cycle``; return that cycle's id."""
    import pyarrow.parquet as pq

    from tasks.cycle.work import INDEX, work_dir
    from tasks.store.history import HistoryStore, validate_history_rows

    for prior in range(prior_cycles):
        HistoryStore(root).write_cycle(prior, cycle_rows(pages, prior, seed=1))
    cycle = prior_cycles
    rows = validate_history_rows(cycle_rows(pages, cycle, seed=1), cycle, linked=False)
    folder = work_dir(root, cycle)
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
    return cycle


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


def parquet_peer(root: Path, cycle_id: int) -> dict[str, float]:
    """The peer: the cycle's parts as one Arrow table (not timed), written as one Parquet
    file with ``pq.write_table``'s defaults (timed), then with the store's zstd (timed)."""
    import pyarrow as pa
    import pyarrow.parquet as pq

    from tasks.cycle.work import read_batches, read_part, work_dir

    folder = work_dir(root, cycle_id)
    parts = [folder / "parts" / f"{s.name}.parquet" for s in read_batches(root, cycle_id)]
    rows = pa.concat_tables([read_part(str(p)) for p in parts]).combine_chunks()
    started, cpu = time.perf_counter(), _cpu_s()
    pq.write_table(rows, root / "peer.parquet")
    seconds, cpu = time.perf_counter() - started, _cpu_s() - cpu
    started, zstd_cpu = time.perf_counter(), _cpu_s()
    pq.write_table(rows, root / "peer-zstd.parquet", compression="zstd")
    zstd, zstd_cpu = time.perf_counter() - started, _cpu_s() - zstd_cpu
    return {
        "rows": rows.num_rows,
        "seconds": seconds,
        "cpu": cpu,
        "zstd_seconds": zstd,
        "zstd_cpu": zstd_cpu,
    }


def child(mode: str, root: Path, commit: str) -> None:
    """Run ``mode`` on the pending cycle of ``root`` in this fresh process and print the
    figures as JSON."""
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
    cycle = int((root / "pending-cycle").read_text())
    before = _status_mb("VmRSS")
    if mode == "parquet":
        peer = parquet_peer(root, cycle)
        print(json.dumps({**peer, "rss_before": before, "peak": _status_mb("VmHWM")}))
        return
    started = time.perf_counter()
    cpu = _cpu_s()
    if mode == "unchecked":
        from benchmarks.digest_peer import switch_off_digests

        switch_off_digests()
    if mode in ("streamed", "unchecked"):
        rows = tasks.cycle.work.commit_cycle(root, cycle).rows
    else:
        rows = reference_commit(root, cycle, commit)
    seconds = time.perf_counter() - started
    cpu = _cpu_s() - cpu
    peak = _status_mb("VmHWM")
    print(
        json.dumps(
            {"rows": rows, "seconds": seconds, "cpu": cpu, "rss_before": before, "peak": peak}
        )
    )


def _cpu_s() -> float:
    """CPU time (user + system) of this process so far, its threads included."""
    times = os.times()
    return times.user + times.system


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


def _same_cycle(a: Path, b: Path, cycle: int) -> None:
    """Both stores published the same ``cycle``, row for row, in HISTORY_SCHEMA."""
    import pyarrow.parquet as pq

    from models.schemas import HISTORY_SCHEMA
    from tasks.store.history import HistoryStore

    # read unchecked: the ``unchecked`` mode recorded no real digests
    tables, stats = [], []
    for root in (a, b):
        store = HistoryStore(root)
        files = store.files([cycle], verify=False)
        for path in files:
            assert pq.read_schema(path).remove_metadata() == HISTORY_SCHEMA, path
        order = [("url_id", "ascending"), ("fetched_at", "ascending")]
        tables.append(pq.read_table(files).sort_by(order))
        stats.append(pq.read_table(store.stats_files(verify=False)[0]))
    assert tables[0].equals(tables[1]), "the two commits published different rows"
    assert stats[0].num_rows == stats[1].num_rows, "different per-page statistics"


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", default="1000000")
    parser.add_argument("--batch-rows", type=int, default=2000)
    parser.add_argument("--modes", default="streamed,parquet")
    parser.add_argument(
        "--prior-cycles", type=int, default=1, help="published cycles before the committed one"
    )
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
    loads: dict[int, tuple[float, float]] = {}
    with tempfile.TemporaryDirectory(prefix="bench-commit-") as tmp:
        for pages in sizes:
            template = Path(tmp) / f"template-{pages}"
            cycle = prepare(template, pages, args.batch_rows, args.prior_cycles)
            (template / "pending-cycle").write_text(str(cycle))
            load_before = os.getloadavg()[0]
            runs: dict[str, list[dict[str, float]]] = {mode: [] for mode in modes}
            for repeat in range(args.repeat):  # modes alternate, each on a fresh copy
                roots = []
                for mode in modes:
                    root = Path(tmp) / f"{mode}-{pages}-{repeat}"
                    shutil.copytree(template, root)
                    runs[mode].append(_run_child(mode, root, args.reference_commit))
                    roots.append(root)
                committed = [r for r, m in zip(roots, modes, strict=True) if m in COMMITS]
                for other in committed[1:]:
                    _same_cycle(committed[0], other, cycle)
                for root in roots:
                    shutil.rmtree(root)
            for mode, done in runs.items():
                median = sorted(done, key=lambda r: r["seconds"])[len(done) // 2]
                results[mode, pages] = {**median, "peak": max(r["peak"] for r in done)}
            loads[pages] = (load_before, os.getloadavg()[0])
            shutil.rmtree(template)
    print("command: .venv/bin/python benchmarks/bench_commit.py " + " ".join(argv))
    print(
        f"commit of cycle {args.prior_cycles} over {args.prior_cycles} published cycle(s) "
        f"(parts of {args.batch_rows} rows); {os.cpu_count()} cores; "
        f"median time of {args.repeat} run(s), highest peak"
    )
    print("| mode | rows | time | CPU (user + sys) | RSS before | peak RSS | increase |")
    print("|---|---:|---:|---:|---:|---:|---:|")
    for (mode, pages), r in results.items():
        increase = r["peak"] - r["rss_before"]
        print(
            f"| {mode} | {pages:,} | {r['seconds']:.2f} s | {r['cpu']:.2f} s "
            f"| {r['rss_before']:.0f} MB | {r['peak']:.0f} MB | {increase:.0f} MB |"
        )
    for pages in sizes:
        before, after = loads[pages]
        print(f"load average (1 min) at {pages:,} rows: {before:.2f} before, {after:.2f} after")
        if "parquet" in modes:
            peer = results["parquet", pages]
            print(
                f"one Parquet file of {pages:,} rows: {peer['seconds']:.2f} s, CPU "
                f"{peer['cpu']:.2f} s (zstd {peer['zstd_seconds']:.2f} s, CPU "
                f"{peer['zstd_cpu']:.2f} s)"
            )
            for mode in (m for m in modes if m in COMMITS):
                r = results[mode, pages]
                print(
                    f"{mode} / one Parquet file at {pages:,} rows = "
                    f"{r['seconds'] / peer['seconds']:.1f}x time, "
                    f"{r['cpu'] / peer['cpu']:.1f}x CPU "
                    f"({r['seconds'] / peer['zstd_seconds']:.1f}x, "
                    f"{r['cpu'] / peer['zstd_cpu']:.1f}x the zstd write); "
                    "issue 19's target: at most 3x"
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
    for mode in (m for m in modes if m in COMMITS):
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
