"""Silent corruption: a byte flipped inside a file the store wrote, its size unchanged.

Such a file often still reads (a raw zstd literal or a statistic in the footer decodes to
another value: ``interval_days`` of +-1e300), so the store checks each published file
against the digest recorded when it was written (``tasks.store.history.verify_file``). A flip
at the start, the middle or the footer of a history part, the statistics, the catalog or
the cycle report is reported by file name (``HistoryCorruptError``; the CLI prints one
line and exits 2), nothing in the store changes, and ``history rebuild-stats`` refuses to
build from a corrupt part (and repairs corrupt statistics). The offsets chosen below read
silently without the check (the store before it: the values changed, no error).
"""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pandas as pd
import pytest

import flows.cli
from flows.evaluation.estimation_demo import run_estimation_demo
from tasks.reports.cycle_report import record_cycle
from tasks.store.catalog import CatalogStore
from tasks.store.history import HistoryCorruptError, HistoryStore, connect
from tests.cycle_numbers import sample_numbers
from tests.reliability.faults.harness import REPO

pytestmark = pytest.mark.reliability

PAGES, CYCLES = 300, 3


@pytest.fixture(scope="module")
def template(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A store of a catalog and three committed cycles (built once)."""
    root = tmp_path_factory.mktemp("flips") / "store"
    run_estimation_demo(root, pages=PAGES, cycles=CYCLES, seed=3)
    return root


@pytest.fixture
def store_root(template: Path, tmp_path: Path) -> Path:
    root = tmp_path / "store"
    shutil.copytree(template, root)
    return root


def snapshot(root: Path) -> dict[str, bytes]:
    """Every file of the store but the lock files, by relative path."""
    return {
        str(p.relative_to(root)): p.read_bytes()
        for p in sorted(root.rglob("*"))
        if p.is_file() and not p.name.endswith(".lock")
    }


def flip(path: Path, where: str) -> int:
    """Invert one byte of ``path`` in place (size unchanged); return its offset.

    ``start`` is just past the leading magic and the first page header, ``middle`` the
    middle of the file, ``footer`` near the end of the Parquet footer (the metadata).
    """
    data = bytearray(path.read_bytes())
    offset = {"start": 64, "middle": len(data) // 2, "footer": len(data) - 12}[where]
    data[offset] ^= 0xFF
    path.write_bytes(bytes(data))
    assert path.stat().st_size == len(data)
    return offset


def refused(read, path: Path) -> None:
    with pytest.raises(HistoryCorruptError) as raised:
        read()
    assert str(path) in str(raised.value)
    assert "\n" not in str(raised.value)


WHERE = ("start", "middle", "footer")


@pytest.mark.parametrize("where", WHERE)
def test_a_flipped_byte_in_a_history_part_is_named_and_nothing_changes(store_root, where):
    store = HistoryStore(store_root)
    store.read()  # checked once: a change after the check is found all the same
    part = Path(store.files([1])[0])
    flip(part, where)
    before = snapshot(store_root)
    refused(store.read, part)
    refused(lambda: store.relation(connect()).to_arrow_table(), part)
    refused(store.rebuild_stats, part)  # refuses to build from it
    later = store.read([CYCLES - 1]).drop_columns(["changed", "interval_days"])
    refused(lambda: store.write_cycle(CYCLES, later.to_pandas().drop(columns="cycle_id")), part)
    assert snapshot(store_root) == before
    assert store.cycles() == list(range(CYCLES))


@pytest.mark.parametrize("where", WHERE)
def test_flipped_statistics_are_named_and_rebuild_stats_repairs_them(store_root, where):
    store = HistoryStore(store_root)
    store.rebuild_stats()  # what a rebuild gives (the commits' sums differ in rounding)
    good = store.page_sums()
    stats = Path(store.stats_files()[0])
    flip(stats, where)
    before = snapshot(store_root)
    refused(store.page_sums, stats)
    refused(store.page_stats, stats)
    later = store.read([CYCLES - 1]).drop_columns(["changed", "interval_days"])
    refused(lambda: store.write_cycle(CYCLES, later.to_pandas().drop(columns="cycle_id")), stats)
    assert snapshot(store_root) == before
    store.rebuild_stats()  # built from the parts, which are sound
    assert store.page_sums().sort_by("url_id").equals(good.sort_by("url_id"))


@pytest.mark.parametrize("where", WHERE)
def test_a_flipped_byte_in_the_catalog_is_named_and_nothing_changes(store_root, where):
    catalog = CatalogStore(store_root)
    catalog.read()
    flip(catalog.path, where)
    before = snapshot(store_root)
    refused(catalog.read, catalog.path)
    refused(lambda: catalog.relation(connect()).to_arrow_table(), catalog.path)
    new_page = pd.DataFrame({"url": ["http://new.test/page"]})
    refused(lambda: catalog.upsert(new_page), catalog.path)
    assert snapshot(store_root) == before


@pytest.mark.parametrize("kind", ["part", "stats", "catalog"])
def test_a_flip_anywhere_in_a_file_is_found(store_root, kind):
    """Thirty-two offsets evenly over the whole file, one flip at a time."""
    store, catalog = HistoryStore(store_root), CatalogStore(store_root)
    path, read = {
        "part": (Path(store.files([0])[0]), store.read),
        "stats": (Path(store.stats_files()[0]), store.page_sums),
        "catalog": (catalog.path, catalog.read),
    }[kind]
    original = path.read_bytes()
    for offset in range(0, len(original), -(-len(original) // 32)):
        data = bytearray(original)
        data[offset] ^= 0x01  # one bit
        path.write_bytes(bytes(data))
        refused(read, path)
    path.write_bytes(original)
    read()


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    """``python -m flows.cli ARGS`` in a process of its own: the entry point itself."""
    return subprocess.run(
        [sys.executable, "-m", "flows.cli", *args], capture_output=True, text=True, cwd=REPO
    )


def cli_in_process(monkeypatch, capsys, *args: str) -> subprocess.CompletedProcess[str]:
    """``recrawl ARGS`` in this process (a process start costs seconds of imports), as
    ``cli`` gives it. The process-wide settings ``main`` makes for a process of its own
    (Prefect's environment defaults, glibc's keep-freed-memory policy) are left out; an
    exception escaping ``main`` (the traceback ``cli`` would show) fails the test."""
    monkeypatch.setattr(flows.cli, "apply_prefect_defaults", lambda **_: None)
    monkeypatch.setattr(flows.cli, "keep_freed_memory", lambda: False)
    capsys.readouterr()
    try:
        code = flows.cli.main(list(args))
    except SystemExit as exc:  # argparse
        code = exc.code if isinstance(exc.code, int) else 2
    out, err = capsys.readouterr()
    return subprocess.CompletedProcess(["recrawl", *args], code, out, err)


#: Commands that read each kind of file (``estimate`` reads the statistics, not the parts).
CLI_READERS = {
    "part": (["history", "rebuild-stats"], ["plan", "--budget", "20"], ["history", "show"]),
    "stats": (["estimate"], ["plan", "--budget", "20"]),
    "catalog": (["plan", "--budget", "20"], ["catalog", "import", "{csv}"]),
}


@pytest.mark.parametrize("kind", sorted(CLI_READERS))
def test_the_cli_prints_one_line_and_exits_2(store_root, tmp_path, kind, monkeypatch, capsys):
    """Each command in this process; the first of the part's also through the real entry
    point (``python -m flows.cli``), once, so a traceback printed outside ``main`` shows."""
    store = HistoryStore(store_root)
    path = {
        "part": lambda: Path(store.files([1])[0]),
        "stats": lambda: Path(store.stats_files()[0]),
        "catalog": lambda: CatalogStore(store_root).path,
    }[kind]()
    csv = tmp_path / "more.csv"
    csv.write_text("url\nhttp://new.test/page\n")
    flip(path, "middle")
    before = snapshot(store_root)
    runs = [(cli_in_process, args) for args in CLI_READERS[kind]]
    if kind == "part":
        runs.insert(0, (lambda _m, _c, *a: cli(*a), CLI_READERS[kind][0]))
    for run, args in runs:
        done = run(
            monkeypatch, capsys, *[a.format(csv=csv) for a in args], "--root", str(store_root)
        )
        assert done.returncode == 2, (args, done.stdout, done.stderr)
        assert str(path) in done.stderr and "Traceback" not in done.stderr, args
        assert done.stderr.count("\n") == 1, done.stderr
    assert snapshot(store_root) == before


@pytest.mark.parametrize("where", WHERE)
def test_a_flipped_byte_in_the_cycle_report_is_named_and_nothing_changes(tmp_path, where):
    record_cycle(tmp_path, sample_numbers(0))
    path = tmp_path / "reports" / "cycles.parquet"
    flip(path, where)
    before = snapshot(tmp_path)
    refused(lambda: record_cycle(tmp_path, sample_numbers(1)), path)
    assert snapshot(tmp_path) == before
