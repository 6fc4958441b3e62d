"""``capture_ref`` reads a capture's WARC headers from the start of its gzip member only:
the same reference as a full, digest-checked read, and a clear error for anything else."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest

from tasks.archive.read import capture_ref, payload_ref
from tasks.archive.warc import WarcError, WarcWriter

AT = datetime(2026, 1, 1, tzinfo=UTC)
HEADERS = [("Content-Type", "text/html")]


def _write(root, bodies: list[bytes], urls: list[str] | None = None):
    urls = urls or [f"http://a.test/p/{i}" for i in range(len(bodies))]
    with WarcWriter(root, 0, part="batch-t") as warc:
        return [
            warc.write_exchange(u, status=200, response_headers=HEADERS, body=b, fetched_at=AT)
            for u, b in zip(urls, bodies, strict=True)
        ]


def test_a_capture_ref_equals_the_full_read_for_responses_and_revisits(tmp_path):
    body = b"<p>" + b"words " * 5000 + b"</p>"  # the body spans many 4 KiB chunks
    locations = _write(tmp_path, [body, b"other", body])  # the third is a revisit
    assert [loc.record_type for loc in locations] == ["response", "response", "revisit"]
    for loc in locations:
        assert capture_ref(tmp_path, loc.file, loc.offset) == payload_ref(
            tmp_path, loc.file, loc.offset
        )
    # the revisit's reference is its original's
    assert capture_ref(tmp_path, locations[2].file, locations[2].offset).location == (
        f"{locations[0].file}#{locations[0].offset}"
    )


def test_headers_longer_than_one_read_are_read_whole(tmp_path):
    url = "http://a.test/" + "x" * 9000  # WARC-Target-URI alone is over two chunks
    (loc,) = _write(tmp_path, [b"page"], [url])
    assert capture_ref(tmp_path, loc.file, loc.offset).uri == url


def test_anything_but_a_record_start_is_a_warc_error(tmp_path):
    (loc,) = _write(tmp_path, [b"page"])
    with pytest.raises(WarcError, match=r"cannot read|no WARC record"):
        capture_ref(tmp_path, loc.file, loc.offset + 3)  # inside a gzip member
    with pytest.raises(WarcError, match="does not exist"):
        capture_ref(tmp_path, "warc/cycle=0/missing.warc.gz", 0)
    with pytest.raises(WarcError, match="no WARC record"):
        capture_ref(tmp_path, loc.file, 10**9)  # past the end
    plain = tmp_path / "warc" / "cycle=0" / "plain.warc.gz"
    plain.write_bytes(b"not gzip at all")
    with pytest.raises(WarcError):
        capture_ref(tmp_path, "warc/cycle=0/plain.warc.gz", 0)
    with pytest.raises(WarcError, match="negative"):
        capture_ref(tmp_path, loc.file, -1)


def _open_fds() -> int:
    import os

    return len(os.listdir("/proc/self/fd"))


@pytest.mark.skipif(not __import__("os").path.isdir("/proc/self/fd"), reason="needs /proc")
def test_previous_captures_keep_files_open_until_the_writer_closes(tmp_path):
    """One descriptor per file read, reused page after page, none left after close; a file
    replaced under the lookup (read failed) is opened again, not read through a stale fd."""
    from tasks.archive.read import PreviousCaptures

    locations = _write(tmp_path, [b"a", b"b", b"c"])
    urls = [f"http://a.test/p/{i}" for i in range(3)]
    captures = PreviousCaptures(
        tmp_path, {u: (loc.file, loc.offset) for u, loc in zip(urls, locations, strict=True)}
    )
    before = _open_fds()
    refs = [captures(u) for u in urls]
    assert [r.location for r in refs] == [f"{loc.file}#{loc.offset}" for loc in locations]
    assert _open_fds() == before + 1  # the one file, kept open
    with WarcWriter(tmp_path, 1, part="batch-u", previous_captures=captures) as warc:
        warc.write_exchange(urls[0], status=304, response_headers=HEADERS, fetched_at=AT)
    assert _open_fds() == before  # closed with the writer
    missing = PreviousCaptures(tmp_path, {urls[0]: (locations[0].file, 10**6)})
    assert missing(urls[0]) is None and missing.unreadable == 1
    assert _open_fds() == before  # the failed read's descriptor is not kept
