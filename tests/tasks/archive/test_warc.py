"""WARC writing and reading: records read back byte for byte with warcio, revisits, offsets,
rotation, secrets, concurrency, and a SIGKILLed writer."""

from __future__ import annotations

import asyncio
import gzip
import os
import signal
import subprocess
import sys
import threading
import time
import zlib
from datetime import UTC, datetime
from pathlib import Path

import httpx
import pandas as pd
import pytest
from warcio.archiveiterator import ArchiveIterator

from tasks.archive.read import iter_records, payload_ref, read_record, read_warc_record, verify_file
from tasks.archive.warc import (
    PROFILE_IDENTICAL,
    PROFILE_NOT_MODIFIED,
    WarcError,
    WarcSettings,
    WarcWriter,
    payload_digest,
    remove_stale_temp_files,
)
from tasks.store.history import HistoryStore

T0 = datetime(2026, 1, 2, 3, 4, 5, 678901, tzinfo=UTC)
BINARY = bytes(range(256)) * 40 + b"\r\n\r\nWARC/1.1\r\n"  # bytes that look like framing

EXCHANGES = [
    # url, status, response headers, body
    (
        "http://a.test/p/1",
        200,
        [("Content-Type", "text/html; charset=utf-8"), ("ETag", '"v1"'), ("Content-Length", "19")],
        b"<html>caf\xc3\xa9</html>\n",
    ),
    ("http://a.test/bin", 200, [("Content-Type", "application/octet-stream")], BINARY),
    ("http://a.test/missing", 404, [("Content-Type", "text/plain")], b"not found\n"),
    ("http://a.test/boom", 503, [("Retry-After", "30"), ("Content-Length", "0")], b""),
    ("http://a.test/api/item/1.json", 200, [("Content-Type", "application/json")], b'{"a": 1}'),
]


def _write_all(root: Path, exchanges=EXCHANGES, **settings):
    with WarcWriter(root, 7, settings=WarcSettings(**settings)) as warc:
        locations = [
            warc.write_exchange(
                url,
                status=status,
                response_headers=headers,
                body=body,
                request_headers=[("User-Agent", "recrawler-test/1.0"), ("Accept", "*/*")],
                fetched_at=T0,
            )
            for url, status, headers, body in exchanges
        ]
    return warc, locations


def test_records_read_back_byte_for_byte(tmp_path):
    warc, locations = _write_all(tmp_path)
    assert len(warc.published) == 1
    for (url, status, headers, body), loc in zip(EXCHANGES, locations, strict=True):
        http, stored = read_record(tmp_path, loc.file, loc.offset)
        assert stored == body
        assert http.get_statuscode() == str(status)
        expected = list(headers)
        if body and not any(n.lower() == "content-length" for n, _ in headers):
            expected.append(("Content-Length", str(len(body))))
        assert http.headers == expected
        record = read_warc_record(tmp_path, loc.file, loc.offset)
        assert record.record_type == "response"
        assert record.header("WARC-Target-URI") == url
        assert record.header("WARC-Date") == "2026-01-02T03:04:05.678901Z"
        assert record.header("WARC-Payload-Digest") == payload_digest(body)
        assert record.header(
            "WARC-Block-Digest",
        ).startswith("sha1:")
        assert record.warc_headers.protocol == "WARC/1.1"


def test_a_plain_warcio_scan_sees_warcinfo_then_response_request_pairs(tmp_path):
    warc, locations = _write_all(tmp_path)
    path = tmp_path / warc.published[0]
    types, concurrent, ids = [], [], {}
    with open(path, "rb") as handle:
        iterator = ArchiveIterator(handle, check_digests="raise")
        for record in iterator:
            types.append(record.rec_type)
            ids[iterator.get_record_offset()] = record.rec_headers.get_header("WARC-Record-ID")
            concurrent.append(record.rec_headers.get_header("WARC-Concurrent-To"))
            record.content_stream().read()
    assert types == ["warcinfo"] + ["response", "request"] * len(EXCHANGES)
    for i, loc in enumerate(locations):  # each request names its response
        assert concurrent[2 + 2 * i] == ids[loc.offset]


def test_offsets_point_at_single_gzip_members(tmp_path):
    warc, locations = _write_all(tmp_path)
    data = (tmp_path / warc.published[0]).read_bytes()
    for (url, *_), loc in zip(EXCHANGES, locations, strict=True):
        member = data[loc.offset : loc.offset + loc.length]
        decompressor = zlib.decompressobj(31)
        text = decompressor.decompress(member)
        assert decompressor.eof and not decompressor.unused_data  # exactly one member
        assert text.startswith(b"WARC/1.1\r\n")
        assert f"WARC-Target-URI: {url}\r\n".encode() in text
    # the file as a whole is an ordinary multi-member gzip
    assert gzip.decompress(data).count(b"\r\nWARC-Type: ") == 1 + 2 * len(EXCHANGES)


def test_bad_locations_raise_naming_the_problem(tmp_path):
    _, locations = _write_all(tmp_path)
    loc = locations[1]
    with pytest.raises(WarcError, match="relative to the root"):
        read_record(tmp_path, "../etc/passwd", 0)
    with pytest.raises(WarcError, match="does not exist"):
        read_record(tmp_path, "warc/cycle=7/nope.warc.gz", 0)
    with pytest.raises(WarcError, match=r"#\d+"):
        read_record(tmp_path, loc.file, loc.offset + 3)
    path = tmp_path / loc.file
    data = bytearray(path.read_bytes())
    data[loc.offset + loc.length // 2] ^= 0xFF  # corrupt the binary body's member
    path.write_bytes(bytes(data))
    with pytest.raises(WarcError, match=loc.file):
        read_record(tmp_path, loc.file, loc.offset)
    read_record(tmp_path, locations[0].file, locations[0].offset)  # the others still read


def test_304_is_a_server_not_modified_revisit(tmp_path):
    with WarcWriter(tmp_path, 1) as warc:
        first = warc.write_exchange(
            "http://a.test/p/1", status=200, response_headers=[("ETag", '"v1"')], body=b"hello"
        )
        ref = warc.known_payload(payload_digest(b"hello"))
        again = warc.write_exchange(
            "http://a.test/p/1",
            status=304,
            reason="Not Modified",
            response_headers=[("ETag", '"v1"'), ("Date", "Fri, 02 Jan 2026 03:04:05 GMT")],
            request_headers=[("If-None-Match", '"v1"')],
            previous=ref,
        )
    assert first.record_type == "response" and again.record_type == "revisit"
    record = read_warc_record(tmp_path, again.file, again.offset)
    assert record.header("WARC-Profile") == PROFILE_NOT_MODIFIED
    assert record.header("WARC-Refers-To-Target-URI") == "http://a.test/p/1"
    http, body = read_record(tmp_path, again.file, again.offset)
    assert http.statusline == "304 Not Modified" and body == b""
    assert http.get_header("ETag") == '"v1"'


def test_identical_payloads_become_revisits_within_and_across_cycles(tmp_path):
    page = b"<html>same content</html>" * 50
    with WarcWriter(tmp_path, 1) as warc:
        original = warc.write_exchange(
            "http://a.test/p/1", status=200, response_headers=[], body=page
        )
        mirror = warc.write_exchange(
            "http://b.test/p/9", status=200, response_headers=[], body=page
        )
        other = warc.write_exchange("http://a.test/p/2", status=200, response_headers=[], body=b"x")
    assert (original.record_type, mirror.record_type, other.record_type) == (
        "response",
        "revisit",
        "response",
    )
    record = read_warc_record(tmp_path, mirror.file, mirror.offset)
    assert record.header("WARC-Profile") == PROFILE_IDENTICAL
    assert record.header("WARC-Refers-To-Target-URI") == "http://a.test/p/1"
    assert record.header("WARC-Payload-Digest") == payload_digest(page)
    assert record.body == b""  # only headers are stored again
    assert read_record(tmp_path, mirror.file, mirror.offset)[1] == page
    assert read_record(tmp_path, mirror.file, mirror.offset, resolve_revisit=False)[1] == b""

    # Next cycle: the history row of the last observation gives the payload to refer to.
    previous = payload_ref(tmp_path, mirror.file, mirror.offset)  # a revisit passes it on
    assert previous.location == f"{original.file}#{original.offset}"
    with WarcWriter(tmp_path, 2) as warc:
        same = warc.write_exchange(
            "http://b.test/p/9", status=200, response_headers=[], body=page, previous=previous
        )
        changed = warc.write_exchange(
            "http://a.test/p/2",
            status=200,
            response_headers=[],
            body=b"y",
            previous=payload_ref(tmp_path, other.file, other.offset),
        )
    assert same.record_type == "revisit" and changed.record_type == "response"
    assert same.file != original.file
    assert read_record(tmp_path, same.file, same.offset)[1] == page
    assert read_record(tmp_path, changed.file, changed.offset)[1] == b"y"


def test_deduplication_can_be_switched_off(tmp_path):
    _, locations = _write_all(tmp_path, [EXCHANGES[0], EXCHANGES[0]], deduplicate=False)
    assert [loc.record_type for loc in locations] == ["response", "response"]


def test_secrets_never_reach_the_request_record(tmp_path):
    with WarcWriter(tmp_path, 1) as warc:
        loc = warc.write_exchange(
            "http://a.test/p/1?api_key=SECRET1&color=red&token=SECRET2",
            status=200,
            response_headers=[("Content-Type", "text/html")],
            body=b"ok",
            request_url="http://user:SECRET3@127.0.0.1:9/fetch?url=http%3A%2F%2Fa.test%2Fp%2F1"
            "&apikey=SECRET4",
            request_headers=[
                ("User-Agent", "recrawler"),
                ("Authorization", "Bearer SECRET5"),
                ("Proxy-Authorization", "Basic SECRET6"),
                ("Cookie", "session=SECRET7"),
                ("X-Api-Key", "SECRET8"),
                ("X-RapidAPI-Key", "SECRET9"),
            ],
        )
    raw = gzip.decompress((tmp_path / loc.file).read_bytes())
    assert b"SECRET" not in raw
    requests = [r for _, r in iter_records(tmp_path, loc.file) if r.record_type == "request"]
    http = requests[0].http_headers
    assert http.protocol == "GET"
    assert http.statusline == "/fetch?url=http%3A%2F%2Fa.test%2Fp%2F1 HTTP/1.1"
    assert http.headers == [("Host", "127.0.0.1:9"), ("User-Agent", "recrawler")]
    assert requests[0].header("WARC-Target-URI") == "http://a.test/p/1?color=red"


def test_decoded_bodies_keep_the_wire_headers_under_another_name(tmp_path):
    body = b"<html>" + b"x" * 1000 + b"</html>"
    with WarcWriter(tmp_path, 1) as warc:
        loc = warc.write_exchange(
            "http://a.test/p/1",
            status=200,
            response_headers=[("Content-Encoding", "gzip"), ("Content-Length", "40")],
            body=body,
        )
    http, stored = read_record(tmp_path, loc.file, loc.offset)
    assert stored == body
    assert http.headers == [
        ("X-Archive-Orig-Content-Encoding", "gzip"),
        ("X-Archive-Orig-Content-Length", "40"),
        ("Content-Length", str(len(body))),
    ]
    # A replaying reader decodes nothing and gets the page.
    with open(tmp_path / loc.file, "rb") as handle:
        handle.seek(loc.offset)
        record = next(iter(ArchiveIterator(handle)))
        assert record.content_stream().read() == body


def test_rotation_at_the_size_limit_gives_complete_files(tmp_path):
    pages = [(f"http://a.test/p/{i}", 200, [], os.urandom(600)) for i in range(40)]
    warc, locations = _write_all(tmp_path, pages, max_file_bytes=4096)
    assert len(warc.published) >= 5
    assert len(set(warc.published)) == len(warc.published)
    for file in warc.published:
        assert verify_file(tmp_path, file) >= 3
        records = list(iter_records(tmp_path, file))
        assert records[0][1].record_type == "warcinfo"
        assert records[0][1].header("WARC-Filename") == Path(file).name
        assert (tmp_path / file).stat().st_size < 4096 + 2 * 1000
    for (_, _, _, body), loc in zip(pages, locations, strict=True):
        assert read_record(tmp_path, loc.file, loc.offset)[1] == body
    assert not list((tmp_path / "warc").rglob("*.tmp"))


def test_concurrent_asyncio_tasks_and_threads_never_interleave_records(tmp_path):
    bodies = {f"http://h{i % 7}.test/p/{i}": os.urandom(2000) for i in range(120)}
    locations = {}
    warc = WarcWriter(tmp_path, 3, settings=WarcSettings(max_file_bytes=64 * 1024))

    async def one(url):
        await asyncio.sleep(0)
        locations[url] = warc.write_exchange(url, status=200, response_headers=[], body=bodies[url])

    async def many(urls):
        await asyncio.gather(*(one(u) for u in urls))

    urls = list(bodies)
    threads = [threading.Thread(target=asyncio.run, args=(many(urls[k::3]),)) for k in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    warc.close()
    for url, loc in locations.items():
        record = read_warc_record(tmp_path, loc.file, loc.offset)
        assert record.header("WARC-Target-URI") == url and record.body == bodies[url]
    assert sum(len(list(iter_records(tmp_path, f))) for f in warc.published) == (
        len(warc.published) + 2 * len(bodies)
    )


def test_history_rows_carry_the_location(tmp_path):
    _, locations = _write_all(tmp_path)
    rows = pd.DataFrame(
        {
            "url_id": range(len(locations)),
            "host": "a.test",
            "fetched_at": pd.Timestamp(T0),
            "outcome": "ok",
            "warc_file": [loc.file for loc in locations],
            "warc_offset": [loc.offset for loc in locations],
        }
    )
    HistoryStore(tmp_path).write_cycle(7, rows)
    stored = HistoryStore(tmp_path).read().to_pandas()
    for _, row in stored.iterrows():
        body = read_record(tmp_path, row["warc_file"], int(row["warc_offset"]))[1]
        assert body == EXCHANGES[row["url_id"]][3]


def test_writer_rejects_bad_input(tmp_path):
    with pytest.raises(ValueError, match="max_file_bytes"):
        WarcSettings(max_file_bytes=10)
    with pytest.raises(ValueError, match="part"):
        WarcWriter(tmp_path, 1, part="../x")
    warc = WarcWriter(tmp_path, 1)
    with pytest.raises(ValueError, match="status"):
        warc.write_exchange("http://a.test/", status=42, response_headers=[])
    with pytest.raises(ValueError, match="timezone"):
        warc.write_exchange(
            "http://a.test/", status=200, response_headers=[], fetched_at=datetime(2026, 1, 1)
        )
    warc.close()
    with pytest.raises(WarcError, match="closed"):
        warc.write_exchange("http://a.test/", status=200, response_headers=[])


KILLED_WRITER = """
import sys
from datetime import UTC, datetime, timedelta
import httpx
import pandas as pd
from tasks.store.history import HistoryStore
from tasks.archive.warc import WarcSettings, WarcWriter

root = sys.argv[1]
settings = WarcSettings(max_file_bytes=256 * 1024)
t0 = datetime(2026, 1, 1, tzinfo=UTC)

def cycle(cycle_id, pages):
    locations = []
    with WarcWriter(root, cycle_id, settings=settings) as warc:
        for i in range(pages):
            body = (f"page {i} of cycle {cycle_id} " * 200).encode()
            locations.append(warc.write_exchange(
                f"http://a.test/p/{i}", status=200, response_headers=[], body=body,
                fetched_at=t0 + timedelta(days=cycle_id),
            ))
            if i == 500:
                print("writing", flush=True)
    # the history is committed only once every WARC file of the cycle is in place
    HistoryStore(root).write_cycle(cycle_id, pd.DataFrame({
        "url_id": range(pages), "host": "a.test",
        "fetched_at": pd.Timestamp(t0 + timedelta(days=cycle_id)), "outcome": "ok",
        "warc_file": [l.file for l in locations], "warc_offset": [l.offset for l in locations],
    }))
    print("committed", cycle_id, flush=True)

cycle(0, 800)
cycle(1, 10**7)  # killed while writing
"""


def test_a_killed_writer_leaves_nothing_the_history_points_to_unreadable(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[3])}
    proc = subprocess.Popen(
        [sys.executable, "-c", KILLED_WRITER, str(tmp_path)],
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    assert proc.stdout is not None
    lines = [proc.stdout.readline().strip() for _ in range(3)]
    assert lines == ["writing", "committed 0", "writing"]
    # well into cycle 1, past at least one rotation: waited for, not slept for (0.3 s of
    # sleep was not always a rotation on a loaded machine)
    deadline = time.monotonic() + 300
    cycle_1 = tmp_path / "warc" / "cycle=1"
    while not (list(cycle_1.glob("*.warc.gz")) and list(cycle_1.glob(".*.tmp"))):
        assert proc.poll() is None and time.monotonic() < deadline, "cycle 1 never rotated"
        time.sleep(0.01)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()

    store = HistoryStore(tmp_path)
    assert store.cycles() == [0]
    rows = store.read().to_pandas()
    for _, row in rows.iterrows():
        body = read_record(tmp_path, row["warc_file"], int(row["warc_offset"]))[1]
        assert body == (f"page {row['url_id']} of cycle 0 " * 200).encode()
    # Every published file of either cycle is complete; the one being written is a temp file.
    published = sorted((tmp_path / "warc").glob("cycle=*/*.warc.gz"))
    assert any(p.parent.name == "cycle=1" for p in published)  # rotated before the kill
    for path in published:
        file = path.relative_to(tmp_path).as_posix()
        assert verify_file(tmp_path, file) > 1  # whole gzip members, digests right
    temps = list((tmp_path / "warc").glob("cycle=1/.*.tmp"))
    # the file being written (none if the kill fell between a rotation and the next record)
    assert len(temps) <= 1
    assert remove_stale_temp_files(tmp_path, older_than_s=3600) == 0  # too young to be stale
    assert remove_stale_temp_files(tmp_path, older_than_s=0) == len(temps)
    assert not list((tmp_path / "warc").rglob("*.tmp"))


def test_verify_file_catches_a_cut_off_file_that_warcio_reads_quietly(tmp_path):
    warc, locations = _write_all(tmp_path)
    file = warc.published[0]
    assert verify_file(tmp_path, file) == 1 + 2 * len(EXCHANGES)
    path = tmp_path / file
    path.write_bytes(path.read_bytes()[: locations[-1].offset + 50])
    assert len(list(iter_records(tmp_path, file))) == 2 * len(EXCHANGES) - 1  # no error
    with pytest.raises(WarcError, match="ends inside a record"):
        verify_file(tmp_path, file)


def test_httpx_exchanges_with_the_sandbox_read_back_as_received(tmp_path):
    from sandbox import SandboxWeb, SimClock, serve_sandbox
    from tasks.archive.warc import write_httpx_exchange

    web = SandboxWeb.generate(hosts=1, pages_per_host=3, seed=2, clock=SimClock(start=T0))
    with serve_sandbox(web, port=0) as running, httpx.Client(trust_env=False) as client:
        url = running.page_urls(0)[0]
        page = client.get(url, headers={"Authorization": "Bearer SECRET"})
        again = client.get(url, headers={"If-None-Match": page.headers["etag"]})
        missing = client.get(running.base_url(0) + "/nowhere")
        with WarcWriter(tmp_path, 1) as warc:
            locs = [write_httpx_exchange(warc, r, r.content) for r in (page, again, missing)]
    assert page.headers["content-encoding"] == "gzip" and again.status_code == 304
    assert [loc.record_type for loc in locs] == ["response", "revisit", "response"]
    for response, loc in zip((page, again, missing), locs, strict=True):
        http, body = read_record(tmp_path, loc.file, loc.offset)
        assert body == response.content
        assert http.get_statuscode() == str(response.status_code)
        raw = [(k.decode(), v.decode()) for k, v in response.headers.raw]
        renamed = [
            (f"X-Archive-Orig-{k}", v)
            if k.lower() in ("content-encoding", "content-length")
            and "content-encoding" in response.headers
            else (k, v)
            for k, v in raw
        ]
        assert http.headers[: len(renamed)] == renamed
    assert b"SECRET" not in gzip.decompress((tmp_path / locs[0].file).read_bytes())


# Fields warcio's writer sets itself; every other WARC field is passed to it as given.
_WARCIO_SETS = ("WARC-Type", "WARC-Record-ID", "WARC-Target-URI", "WARC-Block-Digest")
_WARCIO_SETS += ("Content-Type", "Content-Length")


def _warcio_rebuilt(record, body: bytes) -> bytes:
    """The record as warcio's own writer serializes it from the same fields and blocks."""
    import io

    from warcio.warcwriter import WARCWriter

    buffer = io.BytesIO()
    builder = WARCWriter(buffer, gzip=False, warc_version="1.1")
    headers = record.rec_headers
    given = {n: v for n, v in headers.headers if n not in _WARCIO_SETS}
    if record.rec_type == "warcinfo":
        rebuilt = builder.create_warc_record(
            "", "warcinfo", payload=io.BytesIO(body), length=len(body), warc_headers_dict={}
        )
        rebuilt.rec_headers.headers = [
            ("WARC-Type", "warcinfo"),
            ("WARC-Record-ID", headers.get_header("WARC-Record-ID")),
            *given.items(),
        ]
        rebuilt.content_type = "application/warc-fields"
    else:
        rebuilt = builder.create_warc_record(
            headers.get_header("WARC-Target-URI"),
            record.rec_type,
            payload=io.BytesIO(body) if record.rec_type == "response" else None,
            length=len(body) if record.rec_type == "response" else None,
            http_headers=record.http_headers,
            warc_headers_dict=given,
        )
        rebuilt.rec_headers.replace_header("WARC-Record-ID", headers.get_header("WARC-Record-ID"))
    builder.write_record(rebuilt)
    return buffer.getvalue()


def test_records_are_byte_for_byte_what_warcio_writes_from_the_same_fields(tmp_path):
    """The writer serializes records itself: each must be the bytes warcio's writer makes of
    the same fields, HTTP headers and payload (so every WARC tool reads them as before)."""
    exchanges = [
        *EXCHANGES,
        ("http://a.test/p/1", 304, [("ETag", '"v1"')], b""),  # server-not-modified revisit
        EXCHANGES[0],  # identical-payload revisit
        ("http://a.test/q?x=1&y=%C3%A9", 200, [("X-Name", "caf\xe9")], b"latin-1 header"),
    ]
    _write_all(tmp_path, exchanges)
    (path,) = (tmp_path / "warc" / "cycle=7").glob("*.warc.gz")
    data = path.read_bytes()
    members = []
    while data:
        decompressor = zlib.decompressobj(31)
        members.append(decompressor.decompress(data))
        data = decompressor.unused_data
    with open(path, "rb") as handle:
        records = [(r, r.raw_stream.read()) for r in ArchiveIterator(handle)]
    assert [r.rec_type for r, _ in records][:3] == ["warcinfo", "response", "request"]
    kinds = sorted({r.rec_type for r, _ in records})
    assert kinds == ["request", "response", "revisit", "warcinfo"]
    assert len(members) == len(records) == 1 + 2 * len(exchanges)
    for member, (record, body) in zip(members, records, strict=True):
        assert member == _warcio_rebuilt(record, body), record.rec_headers


def test_sha1_labels_are_base32_as_rfc_4648_writes_them():
    import base64
    import hashlib

    from tasks.archive.warc import sha1_label

    for n in range(300):
        digest = hashlib.sha1(bytes(range(n % 256)) * (n // 7 + 1)).digest()
        assert sha1_label(digest) == "sha1:" + base64.b32encode(digest).decode("ascii")
    assert sha1_label(b"\x00" * 20) == "sha1:" + "A" * 32
    assert sha1_label(b"\xff" * 20) == "sha1:" + "7" * 32
    with pytest.raises(ValueError, match="20 bytes"):
        sha1_label(b"\x00" * 19)
