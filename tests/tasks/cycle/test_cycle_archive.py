"""WARC across cycles: unchanged payloads become revisit records naming the previous capture,
and the files of a batch run that crashed never outlive the cycle's commit."""

from __future__ import annotations

from datetime import timedelta
from pathlib import Path

import pytest
from warcio.archiveiterator import ArchiveIterator

import tasks.cycle.work
from models.discovery.urls import url_id
from tasks.archive.read import read_record, read_warc_record, verify_file
from tasks.archive.warc import PROFILE_IDENTICAL, REFERS_TO_LOCATION, WarcSettings
from tasks.cycle.work import (
    commit_cycle,
    fixed_clock,
    read_batches,
    run_host_batch,
    split_plan,
)
from tasks.store.history import HistoryStore
from tests.tasks.cycle.conftest import SETTINGS, START, add_to_catalog, run_cycle, write_plan

DAY = timedelta(days=1)


def _rows(root, cycle) -> dict[int, dict]:
    return {r["url_id"]: r for r in HistoryStore(root).read([cycle]).to_pylist()}


def _warcio_records(root: Path, relative: str) -> dict[str, dict[str, str]]:
    """Every record of a file as warcio reads it: WARC-Record-ID -> its WARC headers."""
    out = {}
    with open(root / relative, "rb") as handle:
        for record in ArchiveIterator(handle, check_digests="raise"):
            headers = dict(record.rec_headers.headers)
            record.content_stream().read()
            out[headers["WARC-Record-ID"]] = {**headers, "type": record.rec_type}
    return out


def test_an_unchanged_page_is_a_revisit_of_its_previous_capture(page_server, tmp_path):
    s = page_server
    s.html("/same", "<main><p>" + "a page that does not change " * 50 + "</p></main>")
    s.html("/moves", "<main><p>first version</p></main>")
    urls = [s.url("/same"), s.url("/moves")]
    add_to_catalog(tmp_path, urls)
    run_cycle(tmp_path, 0, write_plan(tmp_path, 0, urls), content=None)
    s.html("/moves", "<main><p>second version</p></main>")
    run_cycle(tmp_path, 1, write_plan(tmp_path, 1, urls), START + DAY, content=None)

    first, second = _rows(tmp_path, 0), _rows(tmp_path, 1)
    same = url_id(s.url("/same"))
    assert second[same]["outcome"] == "ok"  # no validators: a full 200 again
    original = read_warc_record(tmp_path, first[same]["warc_file"], first[same]["warc_offset"])
    assert original.record_type == "response"
    assert second[same]["warc_file"] != first[same]["warc_file"]  # another cycle's file

    # read back with warcio itself: the revisit refers to the first capture
    records = _warcio_records(tmp_path, second[same]["warc_file"])
    (revisit,) = [r for r in records.values() if r["type"] == "revisit"]
    assert revisit["WARC-Profile"] == PROFILE_IDENTICAL
    assert revisit["WARC-Refers-To"] == original.header("WARC-Record-ID")
    assert revisit["WARC-Refers-To-Target-URI"] == original.header("WARC-Target-URI")
    assert revisit["WARC-Refers-To-Date"] == original.header("WARC-Date")
    assert revisit["WARC-Payload-Digest"] == original.header("WARC-Payload-Digest")
    assert revisit[REFERS_TO_LOCATION] == f"{first[same]['warc_file']}#{first[same]['warc_offset']}"
    _, body = read_record(tmp_path, second[same]["warc_file"], second[same]["warc_offset"])
    assert body == s.pages["/same"][1]  # the revisit resolves to the stored payload

    # a page that changed is stored in full
    moved = url_id(s.url("/moves"))
    assert (
        read_warc_record(
            tmp_path, second[moved]["warc_file"], second[moved]["warc_offset"]
        ).record_type
        == "response"
    )

    # a third cycle's revisit still names the original capture, not the revisit
    run_cycle(tmp_path, 2, write_plan(tmp_path, 2, urls), START + 2 * DAY, content=None)
    third = _rows(tmp_path, 2)[same]
    again = read_warc_record(tmp_path, third["warc_file"], third["warc_offset"])
    assert again.header("WARC-Refers-To") == original.header("WARC-Record-ID")


def _split(root, server, pages) -> str:
    urls = [server.url(p) for p in pages]
    add_to_catalog(root, urls)
    (spec,) = split_plan(root, 0, write_plan(root, 0, urls))
    return spec.name


def test_a_crashed_batch_runs_files_are_deleted_at_commit(page_server, tmp_path, monkeypatch):
    for k in range(4):
        page_server.html(f"/p{k}", f"<main><p>page {k}</p></main>")
    batch = _split(tmp_path, page_server, [f"/p{k}" for k in range(4)])
    folder = tmp_path / "warc" / "cycle=0"

    # the run publishes its WARC file, then dies before its part is written
    real_write_part = tasks.cycle.work._write_part

    def die(*args, **kwargs):
        raise KeyboardInterrupt("killed between the WARC file and the part")

    monkeypatch.setattr(tasks.cycle.work, "_write_part", die)
    with pytest.raises(KeyboardInterrupt):
        run_host_batch(tmp_path, 0, batch, settings=SETTINGS, clock=fixed_clock(START))
    crashed = sorted(p.name for p in folder.glob("*.warc.gz"))
    assert len(crashed) == 1
    # and a writer killed mid-file leaves a temporary file behind
    stray = folder / f".{crashed[0].replace('-00000.', '-00001.')}.tmp"
    stray.write_bytes(b"\x1f\x8b half a record")

    monkeypatch.setattr(tasks.cycle.work, "_write_part", real_write_part)
    run_host_batch(tmp_path, 0, batch, settings=SETTINGS, clock=fixed_clock(START))
    commit = commit_cycle(tmp_path, 0, clock=fixed_clock(START))

    assert commit.orphaned_warc_files == 2
    left = sorted(p.name for p in folder.iterdir())
    assert crashed[0] not in left and stray.name not in left
    named = {r["warc_file"] for r in HistoryStore(tmp_path).read([0]).to_pylist()}
    assert {f"warc/cycle=0/{name}" for name in left} == named  # every file named, and exists
    for file in named:
        assert verify_file(tmp_path, file) > 0


def test_a_failed_batch_leaves_no_warc_file(page_server, tmp_path, monkeypatch):
    for k in range(3):
        page_server.html(f"/q{k}", f"<main><p>page {k}</p></main>")
    batch = _split(tmp_path, page_server, [f"/q{k}" for k in range(3)])
    real_fetch = tasks.cycle.work.fetch_batch

    async def fetch_then_fail(requests, **kwargs):
        await real_fetch(requests, **kwargs)
        raise ConnectionError("simulated crash of the fetch engine")

    monkeypatch.setattr(tasks.cycle.work, "fetch_batch", fetch_then_fail)
    tiny = WarcSettings(max_file_bytes=1024)  # every exchange fills a file: published at once
    with pytest.raises(tasks.cycle.work.BatchFailedError):
        run_host_batch(tmp_path, 0, batch, settings=SETTINGS, clock=fixed_clock(START), warc=tiny)
    published = list((tmp_path / "warc" / "cycle=0").glob("*.warc.gz"))
    assert len(published) == 3
    assert read_batches(tmp_path, 0)[0].name == batch
    commit = commit_cycle(tmp_path, 0, clock=fixed_clock(START))
    assert commit.orphaned_warc_files == 3
    assert not list((tmp_path / "warc" / "cycle=0").glob("*.warc.gz"))
    rows = HistoryStore(tmp_path).read([0]).to_pylist()
    assert all(r["outcome"] == "error" and r["warc_file"] is None for r in rows)


def test_a_file_the_run_listed_survives_the_commit_though_no_row_names_it(page_server, tmp_path):
    """The commit collects the WARC names as it reads the parts (rows and the run's list in
    the part's metadata), without opening them again: a file only the list names is kept,
    one nothing names is an orphan."""
    import pyarrow.parquet as pq

    from tasks.archive.cycle import with_archived_files
    from tasks.cycle.work import work_dir

    for k in range(2):
        page_server.html(f"/l{k}", f"<main><p>page {k}</p></main>")
    batch = _split(tmp_path, page_server, ["/l0", "/l1"])
    run_host_batch(tmp_path, 0, batch, settings=SETTINGS, clock=fixed_clock(START))
    folder = tmp_path / "warc" / "cycle=0"
    (written,) = folder.glob("*.warc.gz")
    # two more files of the run (named as its writer names them)
    listed = folder / written.name.replace("-00000.", "-00007.")
    unnamed = folder / written.name.replace("-00000.", "-00008.")
    assert listed != written != unnamed
    listed.write_bytes(written.read_bytes())
    unnamed.write_bytes(written.read_bytes())
    part = work_dir(tmp_path, 0) / "parts" / f"{batch}.parquet"
    rows = pq.read_table(part)
    runs_list = [f"warc/cycle=0/{written.name}", f"warc/cycle=0/{listed.name}"]
    pq.write_table(with_archived_files(rows.replace_schema_metadata(None), runs_list), part)

    commit = commit_cycle(tmp_path, 0, clock=fixed_clock(START))
    assert commit.orphaned_warc_files == 1
    assert listed.exists() and written.exists() and not unnamed.exists()
