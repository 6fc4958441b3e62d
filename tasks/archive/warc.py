"""Raw responses in WARC files (ISO 28500, WARC/1.1), one gzip member per record, in large
files per cycle. Records are serialized here (the format is a block of ``Name: value``
lines and the HTTP message; warcio's per-header objects cost more than the gzip) and laid
out as warcio lays them out; warcio reads them back (``tasks.archive.read``).

Layout under ``<root>/warc/cycle=<id>/``::

    recrawl-<cycle>-<UTC time>-<part>-<seq>.warc.gz      published files (closed, complete)
    .recrawl-<...>.warc.gz.<hex>.tmp                     a file being written

Each file opens with a ``warcinfo`` record. Every exchange that got an HTTP answer (2xx, 304,
4xx, 5xx alike) becomes a ``request`` record (secrets stripped, ``models.fetching.redaction``) and a
``response`` record, or a ``revisit`` record when nothing new needs storing: a 304 (profile
``server-not-modified``) or a 2xx whose payload digest equals one already stored (profile
``identical-payload-digest``; the digest of a page's previous observation given by the
caller, or any payload this writer stored before). Across cycles the caller names each
page's previous capture: ``previous=`` per call, or a lookup by page URL given to the writer
(``WarcWriter(previous_captures=...)``, e.g. ``tasks.archive.read.PreviousCaptures`` over the
history's ``warc_file``/``warc_offset``), asked only for 2xx and 304 answers. Every record
carries ``WARC-Block-Digest`` and, where it has a payload, ``WARC-Payload-Digest`` (SHA-1,
base 32, as warcio computes).

Crash safety: a file is written under a temporary name and renamed into place durably
(``tasks.store.durable.durable_rename``: fsync, rename, fsync of the folder) only when it is
complete (``close`` or rotation at ``max_file_bytes``). The history must be committed only
after the writer is closed (``with WarcWriter(...) as warc: ...`` then ``write_cycle``); a
process killed before that leaves temporary files that no history row names and that
``remove_stale_temp_files`` deletes. A record that fails half-way (disk full) is cut off
again, so a published file never holds a partial record.

Bodies: the fetch engine hands over the body it decoded (gzip removed). Such a body is stored
as it is and the headers that described the wire form are renamed ``X-Archive-Orig-*``
(``Content-Encoding``, ``Transfer-Encoding``, ``Content-Length``), with a ``Content-Length`` of
the stored body, so any WARC reader replays it correctly. Pass ``body_decoded=False`` with the
content-encoded bytes to keep them as received (transfer coding is always removed: httpx
never exposes chunk framing).
"""

from __future__ import annotations

import contextlib
import dataclasses
import hashlib
import logging
import os
import random
import threading
import time
import uuid
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http import HTTPStatus
from pathlib import Path
from typing import IO
from urllib.parse import urlsplit

import httpx
from warcio.statusandheaders import StatusAndHeaders

from models.fetching.redaction import DEFAULT_POLICY, RedactionPolicy, redact_headers, redact_url
from tasks.store.durable import durable_rename, fsync_dir, temp_path

log = logging.getLogger(__name__)

WARC_DIR = "warc"
PROFILE_IDENTICAL = "http://netpreserve.org/warc/1.1/revisit/identical-payload-digest"
PROFILE_NOT_MODIFIED = "http://netpreserve.org/warc/1.1/revisit/server-not-modified"
#: Extension field of our revisit records: where the payload they refer to is stored
#: (``<file>#<offset>``, relative to the root), so a reader can follow it without an index.
REFERS_TO_LOCATION = "WARC-Recrawl-Refers-To-Location"
_WIRE_HEADERS = ("content-encoding", "transfer-encoding", "content-length")
TEMP_MAX_AGE_S = 6 * 3600.0


class WarcError(RuntimeError):
    """A WARC file or record cannot be written or read; the message names it."""


@dataclass(frozen=True, slots=True)
class WarcLocation:
    """Where the response (or revisit) record of one exchange is: what a history row keeps."""

    file: str  # relative to the store root, POSIX separators
    offset: int  # byte offset of the record's gzip member
    length: int  # compressed length of the record
    record_type: str  # "response" or "revisit"


@dataclass(frozen=True, slots=True)
class PayloadRef:
    """A stored payload a later identical one can refer to instead of being stored again."""

    digest: str  # "sha1:<BASE32>"
    uri: str
    date: str  # WARC-Date of the record that holds it
    record_id: str
    location: str | None = None  # "<file>#<offset>" if known


@dataclass(frozen=True, slots=True)
class HttpExchange:
    """One request and its answer, as archived (``date`` is the WARC-Date)."""

    target: str  # the page's URL, secrets already stripped
    request_url: str  # what was requested (the page, or a scraping API's endpoint)
    method: str
    http_version: str
    request_headers: tuple[tuple[str, str], ...]
    status: int
    reason: str
    response_headers: tuple[tuple[str, str], ...]
    body: bytes
    body_decoded: bool
    date: str
    remote_ip: str | None = None


@dataclass(frozen=True)
class WarcSettings:
    """How WARC files are written (sizes in bytes)."""

    max_file_bytes: int = 1 << 30  # rotate after a file reaches this size
    #: zlib level of each record's gzip member. 1: on 36-40 KB HTML pages a third of level
    #: 6's CPU (250-350 against 730-950 us a page) for files 11-14% larger (0.28-0.32 of the
    #: page against 0.25-0.28); at level 6 compression alone costs about what fetching does.
    compress_level: int = 1
    redaction: RedactionPolicy = DEFAULT_POLICY
    deduplicate: bool = True  # revisit records for payloads already stored
    remembered_payloads: int = 200_000  # digests one writer keeps for deduplication
    prefix: str = "recrawl"
    software: str = "recrawler/0.1"
    info: Mapping[str, str] = field(default_factory=dict)  # extra warcinfo fields

    def __post_init__(self) -> None:
        if self.max_file_bytes < 1024:
            raise ValueError(f"max_file_bytes must be >= 1024, got {self.max_file_bytes}")
        if not 0 <= self.compress_level <= 9:
            raise ValueError(f"compress_level must be within [0, 9], got {self.compress_level}")
        if not self.prefix or "/" in self.prefix or self.prefix.startswith("."):
            raise ValueError(f"bad WARC file prefix {self.prefix!r}")


def payload_digest(body: bytes) -> str:
    """The WARC payload digest of a body, as warcio writes it (``sha1:<BASE32>``)."""
    return sha1_label(hashlib.sha1(body).digest())


#: Base 32 (RFC 4648) of every 10-bit value: a SHA-1 digest (160 bits) is 16 of them.
#: ``base64.b32encode`` is a Python loop in this Python (15 us a digest, three an exchange).
_B32_PAIRS = [
    a + b for a in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567" for b in "ABCDEFGHIJKLMNOPQRSTUVWXYZ234567"
]


def sha1_label(digest: bytes) -> str:
    """``sha1:<BASE32>`` of a 20-byte SHA-1 digest (what ``base64.b32encode`` gives)."""
    if len(digest) != 20:
        raise ValueError(f"a SHA-1 digest has 20 bytes, got {len(digest)}")
    n = int.from_bytes(digest, "big")
    return "sha1:" + "".join([_B32_PAIRS[(n >> shift) & 1023] for shift in _SHIFTS])


_SHIFTS = range(150, -1, -10)


_EMPTY_DIGEST = payload_digest(b"")


class WarcWriter:
    """Writes the exchanges of one batch (or part of a cycle) into WARC files; see the module.

    One writer per batch: calls are serialized by a lock, so it is safe from asyncio code
    (where the calls never interleave anyway) and from threads. Records go through a 1 MiB
    buffer; a call costs the gzip of one record and, now and then, one write.
    """

    def __init__(
        self,
        root: str | Path,
        cycle_id: int,
        *,
        settings: WarcSettings | None = None,
        part: str | None = None,
        previous_captures: Callable[[str], PayloadRef | None] | None = None,
    ) -> None:
        self.root = Path(root)
        self.previous_captures = previous_captures
        self.cycle_id = int(cycle_id)
        self.settings = settings or WarcSettings()
        self.part = part or uuid.uuid4().hex[:12]
        if not self.part.replace("-", "").replace("_", "").isalnum():
            raise ValueError(f"part must be letters, digits, '-' or '_', got {self.part!r}")
        self.dir = self.root / WARC_DIR / f"cycle={self.cycle_id}"
        self.published: list[str] = []
        self.records = 0
        self._lock = threading.Lock()
        self._seq = 0
        self._handle: IO[bytes] | None = None
        self._temp: Path | None = None
        self._name: str | None = None
        self._warcinfo_id: str | None = None
        self._payloads: OrderedDict[str, PayloadRef] = OrderedDict()
        self._closed = False

    # ------------------------------------------------------------------ public

    def __enter__(self) -> WarcWriter:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def write_exchange(
        self,
        url: str,
        *,
        status: int,
        response_headers: Iterable[tuple[str, str]],
        body: bytes = b"",
        request_headers: Iterable[tuple[str, str]] = (),
        method: str = "GET",
        reason: str = "",
        http_version: str = "HTTP/1.1",
        fetched_at: datetime | None = None,
        request_url: str | None = None,
        body_decoded: bool = True,
        remote_ip: str | None = None,
        previous: PayloadRef | None = None,
    ) -> WarcLocation:
        """Archive one request/response; returns where its response or revisit record is.

        ``url`` is the page (WARC-Target-URI); ``request_url`` what was actually requested
        (a scraping API's endpoint), default ``url``. ``previous`` is the payload of the
        page's last stored observation: an identical body becomes a revisit record (default:
        what the writer's ``previous_captures`` lookup says of ``url``, for 2xx and 304).
        """
        if not 100 <= int(status) <= 999:
            raise ValueError(f"status must be an HTTP status code, got {status!r}")
        answered = 200 <= int(status) < 300 or int(status) == 304
        if previous is None and self.previous_captures is not None and answered:
            previous = self.previous_captures(url)
        when = fetched_at or datetime.now(UTC)
        if when.tzinfo is None:
            raise ValueError("fetched_at must be timezone-aware (UTC)")
        exchange = HttpExchange(
            target=redact_url(url, self.settings.redaction),
            request_url=request_url or url,
            method=method.upper(),
            http_version=http_version,
            request_headers=tuple(request_headers),
            status=int(status),
            reason=reason or _reason(int(status)),
            response_headers=tuple(response_headers),
            body=body,
            body_decoded=body_decoded,
            date=_warc_date(when),
            remote_ip=remote_ip,
        )
        return self.write(exchange, previous)

    def write(self, exchange: HttpExchange, previous: PayloadRef | None = None) -> WarcLocation:
        """``write_exchange`` for a ready ``HttpExchange`` (target already redacted)."""
        with self._lock:
            if self._closed:
                raise WarcError(f"WARC writer for cycle {self.cycle_id} is closed")
            self._ensure_file()
            response = self._response_record(exchange, previous)
            response_id = response.record_id
            offset, length = self._write(response)
            self._write(self._request_record(exchange, response_id))
            self.records += 2
            assert self._name is not None
            rel = self._relative(self._name)
            if response.rec_type == "response" and 200 <= exchange.status < 300 and exchange.body:
                digest = payload_digest_of(response)
                ref = PayloadRef(digest, exchange.target, exchange.date, response_id)
                self._remember(dataclasses.replace(ref, location=f"{rel}#{offset}"))
            location = WarcLocation(rel, offset, length, response.rec_type)
            assert self._handle is not None
            if self._handle.tell() >= self.settings.max_file_bytes:
                self._publish()
            return location

    def close(self) -> list[str]:
        """Publish the open file; returns every file this writer published (relative)."""
        with self._lock:
            if not self._closed:
                self._closed = True
                self._publish()
                self._release_captures()
            return list(self.published)

    def abort(self) -> None:
        """Drop the file being written (published files stay: they are complete)."""
        with self._lock:
            self._closed = True
            if self._handle is not None:
                self._handle.close()
                self._handle = None
            if self._temp is not None:
                self._temp.unlink(missing_ok=True)
                self._temp = None
            self._release_captures()

    def _release_captures(self) -> None:
        """The lookup's open files (``tasks.archive.read.PreviousCaptures``) are closed."""
        close = getattr(self.previous_captures, "close", None)
        if close is not None:
            close()

    def known_payload(self, digest: str) -> PayloadRef | None:
        """The stored payload with this digest, if this writer remembers one."""
        return self._payloads.get(digest)

    # ------------------------------------------------------------------ records

    def _response_record(self, ex: HttpExchange, previous: PayloadRef | None) -> _Record:
        headers = archived_response_headers(ex.response_headers, len(ex.body), ex.body_decoded)
        http = _http_block(f"{ex.http_version} {ex.status} {ex.reason}".rstrip(), headers)
        common = self._common_headers(ex)
        if ex.status == 304:
            common.append(("WARC-Profile", PROFILE_NOT_MODIFIED))
            if previous is not None:
                common += _refers_to(previous)
            return _Record("revisit", ex.target, common, http, b"", _RESPONSE_TYPE)
        digest = payload_digest(ex.body)
        original = None
        if 200 <= ex.status < 300 and ex.body:
            original = self._original_for(digest, previous)
        if original is not None:
            common += [("WARC-Profile", PROFILE_IDENTICAL), ("WARC-Payload-Digest", digest)]
            common += _refers_to(original)
            return _Record("revisit", ex.target, common, http, b"", _RESPONSE_TYPE)
        common.append(("WARC-Payload-Digest", digest))
        return _Record("response", ex.target, common, http, ex.body, _RESPONSE_TYPE)

    def _request_record(self, ex: HttpExchange, response_id: str) -> _Record:
        policy = self.settings.redaction
        sent = urlsplit(redact_url(ex.request_url, policy))
        origin_form = (sent.path or "/") + (f"?{sent.query}" if sent.query else "")
        kept = redact_headers(ex.request_headers, policy)
        if not any(name.lower() == "host" for name, _ in kept):
            kept.insert(0, ("Host", sent.netloc.rpartition("@")[2]))
        http = _http_block(f"{ex.method} {origin_form} {ex.http_version}", kept)
        common = self._common_headers(ex)
        common += [("WARC-Concurrent-To", response_id), ("WARC-Payload-Digest", _EMPTY_DIGEST)]
        return _Record("request", ex.target, common, http, b"", _REQUEST_TYPE)

    def _common_headers(self, ex: HttpExchange) -> list[tuple[str, str]]:
        headers = [("WARC-Date", ex.date)]
        if self._warcinfo_id:
            headers.append(("WARC-Warcinfo-ID", self._warcinfo_id))
        if ex.remote_ip:
            headers.append(("WARC-IP-Address", ex.remote_ip))
        return headers

    def _original_for(self, digest: str, previous: PayloadRef | None) -> PayloadRef | None:
        if not self.settings.deduplicate:
            return None
        if previous is not None and previous.digest == digest:
            return previous
        return self._payloads.get(digest)

    def _remember(self, ref: PayloadRef) -> None:
        if not self.settings.deduplicate or ref.digest in self._payloads:
            return
        self._payloads[ref.digest] = ref
        if len(self._payloads) > self.settings.remembered_payloads:
            self._payloads.popitem(last=False)

    # ------------------------------------------------------------------ files

    def _ensure_file(self) -> None:
        if self._handle is not None:
            return
        self.dir.mkdir(parents=True, exist_ok=True)
        stamp = datetime.now(UTC).strftime("%Y%m%dT%H%M%SZ")
        name = f"{self.settings.prefix}-{self.cycle_id}-{stamp}-{self.part}-{self._seq:05d}.warc.gz"
        self._seq += 1
        self._name = name
        self._temp = temp_path(self.dir / name)
        self._handle = open(self._temp, "wb", buffering=1 << 20)  # noqa: SIM115 (kept open)
        info = {
            "software": self.settings.software,
            "format": "WARC File Format 1.1",
            "conformsTo": "http://iipc.github.io/warc-specifications/specifications/"
            "warc-format/warc-1.1/",
            "isPartOf": f"{self.settings.prefix} cycle={self.cycle_id}",
            "robots": "obey (RFC 9309)",
            **self.settings.info,
        }
        fields = "".join(f"{key}: {value}\r\n" for key, value in info.items()).encode("utf-8")
        record = _Record(
            "warcinfo",
            None,
            [("WARC-Filename", name), ("WARC-Date", _warc_date(datetime.now(UTC)))],
            b"",
            fields,
            "application/warc-fields",
            first=True,
        )
        self._warcinfo_id = record.record_id
        self._write(record)

    def _write(self, record: _Record) -> tuple[int, int]:
        """Append one record as its own gzip member; returns (offset, length)."""
        compressor = zlib.compressobj(self.settings.compress_level, zlib.DEFLATED, 31)
        head, block, payload = record.serialized()
        member = compressor.compress(head) + compressor.compress(block)
        if payload:
            member += compressor.compress(payload)
        member += compressor.compress(b"\r\n\r\n") + compressor.flush()
        handle = self._handle
        assert handle is not None
        offset = handle.tell()
        try:
            handle.write(member)
        except BaseException:
            with contextlib.suppress(OSError):  # never leave a partial record in the file
                handle.seek(offset)
                handle.truncate()
            raise
        return offset, len(member)

    def _publish(self) -> None:
        """Close the open file and rename it into place durably (nothing to do if none is
        open)."""
        handle, temp, name = self._handle, self._temp, self._name
        if handle is None or temp is None or name is None:
            return
        self._handle = self._temp = None
        handle.close()
        durable_rename(temp, self.dir / name)
        self.published.append(self._relative(name))
        log.debug("published WARC file %s", name)

    def _relative(self, name: str) -> str:
        return f"{WARC_DIR}/cycle={self.cycle_id}/{name}"


_RESPONSE_TYPE = "application/http; msgtype=response"
_REQUEST_TYPE = "application/http; msgtype=request"


class _Record:
    """One WARC record before serialization: what ``WarcWriter._write`` compresses.

    The WARC header block is laid out as warcio lays it out (the given fields, then
    WARC-Type, WARC-Record-ID, WARC-Target-URI, the block digest, Content-Type and
    Content-Length; a warcinfo record starts with its type and id), so the records read the
    same as those warcio wrote before; the block is the HTTP header block, then the payload
    (none for a revisit or a request).
    """

    __slots__ = (
        "content_type",
        "fields",
        "first",
        "http",
        "payload",
        "rec_type",
        "record_id",
        "target",
    )

    def __init__(
        self,
        rec_type: str,
        target: str | None,
        fields: list[tuple[str, str]],
        http: bytes,
        payload: bytes,
        content_type: str,
        *,
        first: bool = False,
    ) -> None:
        self.rec_type = rec_type
        self.target = target
        self.fields = fields
        self.http = http
        self.payload = payload
        self.content_type = content_type
        self.first = first
        self.record_id = _record_id()

    def serialized(self) -> tuple[bytes, bytes, bytes]:
        """(WARC header block, HTTP header block, payload)."""
        block = hashlib.sha1(self.http)
        if self.payload:
            block.update(self.payload)
        ident = [("WARC-Type", self.rec_type), ("WARC-Record-ID", self.record_id)]
        fields = [*ident, *self.fields] if self.first else [*self.fields, *ident]
        if self.target is not None:
            fields.append(("WARC-Target-URI", self.target))
        fields.append(("WARC-Block-Digest", sha1_label(block.digest())))
        fields.append(("Content-Type", self.content_type))
        fields.append(("Content-Length", str(len(self.http) + len(self.payload))))
        text = "WARC/1.1\r\n" + "".join(f"{name}: {value}\r\n" for name, value in fields)
        return (text + "\r\n").encode("utf-8"), self.http, self.payload


_IDS = random.Random()  # seeded from os.urandom
_IDS_PID = os.getpid()


def _record_id() -> str:
    """A random (version 4) UUID as a WARC-Record-ID. ``uuid.uuid4`` reads ``os.urandom``
    for each (a system call, two a page): a Mersenne Twister seeded from ``os.urandom``
    gives unique ids (122 random bits), and a forked process reseeds before its first."""
    global _IDS_PID
    if os.getpid() != _IDS_PID:
        _IDS.seed()
        _IDS_PID = os.getpid()
    return f"<urn:uuid:{uuid.UUID(int=_IDS.getrandbits(128), version=4)}>"


def payload_digest_of(record: _Record) -> str:
    """The WARC-Payload-Digest a record carries (its fields)."""
    for name, value in record.fields:
        if name == "WARC-Payload-Digest":
            return value
    raise WarcError(f"{record.rec_type} record {record.record_id} has no payload digest")


def _http_block(first_line: str, headers: Iterable[tuple[str, str]]) -> bytes:
    """An HTTP message's header block as warcio stores it: ASCII, non-ASCII values
    percent-encoded (RFC 8187) by warcio's own rule (the rare case)."""
    text = first_line + "\r\n" + "".join(f"{name}: {value}\r\n" for name, value in headers)
    try:
        return (text + "\r\n").encode("ascii")
    except UnicodeEncodeError:
        protocol, _, status = first_line.partition(" ")
        return bytes(StatusAndHeaders(status, list(headers), protocol).to_ascii_bytes())


def _warc_date(when: datetime) -> str:
    """WARC-Date with microseconds (``2026-01-01T00:00:00.000000Z``), as warcio writes it."""
    if when.utcoffset():
        when = when.astimezone(UTC)
    return when.replace(tzinfo=None).isoformat(timespec="microseconds") + "Z"


def write_httpx_exchange(
    warc: WarcWriter,
    response: httpx.Response,
    body: bytes,
    *,
    target: str | None = None,
    fetched_at: datetime | None = None,
    body_decoded: bool = True,
    previous: PayloadRef | None = None,
) -> WarcLocation:
    """Archive an httpx response (and the request it answers) as received.

    Header names and values are taken raw (``headers.raw``, Latin-1 as HTTP defines them),
    so they read back exactly; ``target`` is the page when the request went to a scraping
    API, and ``body`` the body as read (decoded by the caller unless ``body_decoded`` is
    False).
    """
    request = response.request
    return warc.write_exchange(
        target or str(request.url),
        status=response.status_code,
        reason=response.reason_phrase,
        http_version=response.http_version,
        response_headers=_raw(response.headers),
        body=body,
        request_headers=_raw(request.headers),
        method=request.method,
        request_url=str(request.url),
        fetched_at=fetched_at,
        body_decoded=body_decoded,
        previous=previous,
    )


def _raw(headers: httpx.Headers) -> list[tuple[str, str]]:
    return [(k.decode("latin-1"), v.decode("latin-1")) for k, v in headers.raw]


def archived_response_headers(
    headers: Iterable[tuple[str, str]], body_length: int, decoded: bool
) -> list[tuple[str, str]]:
    """Response headers as stored with the body: wire-only headers renamed (see the module)."""
    given = list(headers)
    names = {name.lower() for name, _ in given}
    rename = {"transfer-encoding"}
    if decoded and "content-encoding" in names:
        rename |= {"content-encoding", "content-length"}
    out = [
        (f"X-Archive-Orig-{name}", value) if name.lower() in rename else (name, value)
        for name, value in given
    ]
    renamed = bool(rename & names)
    if renamed:
        out = [(n, v) for n, v in out if n.lower() != "content-length"]
    if renamed or ("content-length" not in names and body_length > 0):
        out.append(("Content-Length", str(body_length)))
    return out


def _refers_to(original: PayloadRef) -> list[tuple[str, str]]:
    headers = [
        ("WARC-Refers-To", original.record_id),
        ("WARC-Refers-To-Target-URI", original.uri),
        ("WARC-Refers-To-Date", original.date),
    ]
    if original.location:
        headers.append((REFERS_TO_LOCATION, original.location))
    return headers


def _reason(status: int) -> str:
    try:
        return HTTPStatus(status).phrase
    except ValueError:
        return ""


def remove_stale_temp_files(root: str | Path, older_than_s: float = TEMP_MAX_AGE_S) -> int:
    """Delete temporary WARC files left by killed writers; returns how many were removed."""
    removed = 0
    now = time.time()
    # ``.<name>.<hex>.tmp`` (tasks.store.durable.temp_path), and ``.<name>.tmp`` of older writers
    for temp in (Path(root) / WARC_DIR).glob("cycle=*/.*.warc.gz*.tmp"):
        with contextlib.suppress(OSError):
            if now - temp.stat().st_mtime >= older_than_s:
                temp.unlink()
                removed += 1
    return removed


def remove_orphaned_files(
    root: str | Path, cycle_id: int, keep: set[str], *, pattern: str = "*-batch-*"
) -> list[str]:
    """Delete the cycle's WARC files (published or temporary) named by ``pattern`` that are
    not in ``keep`` (paths relative to the root); returns those deleted.

    The recrawl cycle calls it at commit with the files its batches' parts name: what is
    left was written by a batch run that crashed or failed, which no history row names.
    """
    folder = Path(root) / WARC_DIR / f"cycle={int(cycle_id)}"
    removed = []
    for path in sorted([*folder.glob(f"{pattern}.warc.gz"), *folder.glob(f".{pattern}.tmp")]):
        relative = f"{WARC_DIR}/cycle={int(cycle_id)}/{path.name}"
        if relative in keep:
            continue
        with contextlib.suppress(FileNotFoundError):
            path.unlink()
            removed.append(relative)
    if removed:
        fsync_dir(folder)
    return removed
