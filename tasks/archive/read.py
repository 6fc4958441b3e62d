"""Reading archived responses back: one record by file and offset (what a history row keeps).

Records are parsed by warcio's ``ArchiveIterator`` from the offset of their gzip member, with
digests verified; an identical-payload revisit written by ``tasks.archive.warc.WarcWriter`` is
followed to the record that holds the payload.

``PreviousCaptures`` is the writer's lookup of each page's previous capture across cycles:
the recrawl cycle gives it the history's last ``warc_file``/``warc_offset`` per page (carried
in the batch's Parquet) and it reads the record's WARC headers only when a page answers.
"""

from __future__ import annotations

import contextlib
import functools
import logging
import os
import zlib
from collections import OrderedDict
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from warcio.archiveiterator import ArchiveIterator
from warcio.exceptions import ArchiveLoadFailed
from warcio.statusandheaders import StatusAndHeaders

from tasks.archive.warc import (
    PROFILE_IDENTICAL,
    REFERS_TO_LOCATION,
    WARC_DIR,
    PayloadRef,
    WarcError,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class ArchivedRecord:
    """One record read back: its WARC headers, HTTP headers and stored payload."""

    record_type: str
    warc_headers: StatusAndHeaders
    http_headers: StatusAndHeaders | None
    body: bytes

    def header(self, name: str) -> str | None:
        value: str | None = self.warc_headers.get_header(name)
        return value


def read_record(
    root: str | Path, file: str, offset: int, *, resolve_revisit: bool = True
) -> tuple[StatusAndHeaders, bytes]:
    """The HTTP headers and body of the response stored at ``file``/``offset``.

    For an identical-payload revisit the body is the original's (followed through
    ``WARC-Recrawl-Refers-To-Location``) unless ``resolve_revisit`` is False; a 304 revisit
    has no body. Digests are verified; a mismatch or a broken record raises ``WarcError``.
    """
    record = read_warc_record(root, file, offset)
    if record.http_headers is None:
        raise WarcError(f"record at {file}#{offset} is a {record.record_type} without HTTP headers")
    body = record.body
    profile = record.header("WARC-Profile")
    if resolve_revisit and record.record_type == "revisit" and profile == PROFILE_IDENTICAL:
        location = record.header(REFERS_TO_LOCATION)
        if not location or "#" not in location:
            raise WarcError(f"revisit at {file}#{offset} does not say where its payload is")
        ref_file, _, ref_offset = location.rpartition("#")
        original = read_warc_record(root, ref_file, int(ref_offset))
        if original.header("WARC-Payload-Digest") != record.header("WARC-Payload-Digest"):
            raise WarcError(f"revisit at {file}#{offset} refers to a different payload")
        body = original.body
    return record.http_headers, body


def read_warc_record(root: str | Path, file: str, offset: int) -> ArchivedRecord:
    """The record whose gzip member starts at ``offset`` of ``file`` (relative to ``root``)."""
    path = _checked_path(root, file)
    if offset < 0:
        raise WarcError(f"negative WARC offset {offset} for {file}")
    try:
        with open(path, "rb") as handle:
            handle.seek(offset)
            iterator = ArchiveIterator(handle, check_digests="raise")
            record = next(iter(iterator), None)
            if record is None:
                raise WarcError(f"no WARC record at {file}#{offset}")
            body = record.raw_stream.read()
            iterator.close()
    except FileNotFoundError:
        raise WarcError(f"WARC file {file} does not exist under {root}") from None
    except (ArchiveLoadFailed, OSError, ValueError, EOFError, zlib.error) as exc:
        raise WarcError(f"cannot read a WARC record at {file}#{offset}: {exc}") from None
    return ArchivedRecord(record.rec_type, record.rec_headers, record.http_headers, body)


def iter_records(root: str | Path, file: str) -> Iterator[tuple[int, ArchivedRecord]]:
    """Every record of a file with its offset (checks a whole file; digests verified)."""
    path = _checked_path(root, file)
    try:
        with open(path, "rb") as handle:
            iterator = ArchiveIterator(handle, check_digests="raise")
            for record in iterator:
                offset = iterator.get_record_offset()
                body = record.raw_stream.read()
                yield (
                    offset,
                    ArchivedRecord(record.rec_type, record.rec_headers, record.http_headers, body),
                )
    except (ArchiveLoadFailed, OSError, ValueError, EOFError, zlib.error) as exc:
        raise WarcError(f"cannot read WARC file {file}: {exc}") from None


def verify_file(root: str | Path, file: str) -> int:
    """Check a whole file: complete gzip members and every record's digests; returns the
    number of records. warcio stops quietly at a cut-off member, so the members are
    walked here first: a file truncated anywhere raises ``WarcError``."""
    path = _checked_path(root, file)
    members = 0
    decompressor = zlib.decompressobj(31)
    pending = False  # bytes fed to a member that has not ended yet
    try:
        with open(path, "rb") as handle:
            while chunk := handle.read(1 << 20):
                while chunk:
                    decompressor.decompress(chunk, 1 << 20)
                    pending = True
                    while decompressor.unconsumed_tail and not decompressor.eof:
                        decompressor.decompress(decompressor.unconsumed_tail, 1 << 20)
                    if not decompressor.eof:
                        break
                    members += 1
                    chunk = decompressor.unused_data
                    decompressor = zlib.decompressobj(31)
                    pending = False
    except (OSError, zlib.error) as exc:
        raise WarcError(f"WARC file {file} is not a valid gzip stream: {exc}") from None
    if pending:
        raise WarcError(f"WARC file {file} ends inside a record (truncated after {members})")
    records = sum(1 for _ in iter_records(root, file))
    if records != members:
        raise WarcError(f"WARC file {file} has {members} gzip members but {records} records")
    return records


def payload_ref(root: str | Path, file: str, offset: int) -> PayloadRef:
    """What a later identical payload would refer to: the stored record at ``file``/``offset``.

    With the history's ``warc_file``/``warc_offset`` of a page's last observation this gives
    ``write_exchange(previous=...)`` across cycles; a revisit passes its original on.
    """
    record = read_warc_record(root, file, offset)
    if record.record_type == "revisit":
        location = record.header(REFERS_TO_LOCATION)
        if not location or "#" not in location:
            raise WarcError(f"revisit at {file}#{offset} names no stored payload")
        ref_file, _, ref_offset = location.rpartition("#")
        original = read_warc_record(root, ref_file, int(ref_offset))
        if original.record_type != "response":
            raise WarcError(f"revisit at {file}#{offset} refers to a {original.record_type}")
        record, file, offset = original, ref_file, int(ref_offset)
    elif record.record_type != "response":
        raise WarcError(f"record at {file}#{offset} is a {record.record_type}, not a response")
    return PayloadRef(
        str(record.header("WARC-Payload-Digest")),
        str(record.header("WARC-Target-URI")),
        str(record.header("WARC-Date")),
        str(record.header("WARC-Record-ID")),
        f"{file}#{offset}",
    )


def capture_ref(
    root: str | Path, file: str, offset: int, *, files: _OpenFiles | None = None
) -> PayloadRef:
    """``payload_ref`` from the WARC headers alone (no body read, no digest check): what a
    page's next identical capture refers to. A revisit is followed to its original once.
    ``files`` keeps the files open between calls (``PreviousCaptures``)."""
    headers = _headers_at(root, file, offset, files)
    if headers["warc-type"] == "revisit":
        location = headers.get(REFERS_TO_LOCATION.lower())
        if not location or "#" not in location:
            raise WarcError(f"revisit at {file}#{offset} names no stored payload")
        ref_file, _, ref_offset = location.rpartition("#")
        file, offset = ref_file, int(ref_offset)
        headers = _headers_at(root, file, offset, files)
    if headers["warc-type"] != "response":
        raise WarcError(f"record at {file}#{offset} is a {headers['warc-type']}, not a response")
    digest = headers.get("warc-payload-digest")
    if not digest:
        raise WarcError(f"response at {file}#{offset} has no payload digest")
    return PayloadRef(
        digest,
        str(headers.get("warc-target-uri")),
        str(headers.get("warc-date")),
        str(headers.get("warc-record-id")),
        f"{file}#{offset}",
    )


class PreviousCaptures:
    """Each page's previous capture, by normalized page URL: a ``WarcWriter`` lookup.

    ``locations`` maps a page URL to the ``(warc_file, warc_offset)`` of its last observation
    (the history's columns). The record is read (headers only, ``capture_ref``) the first
    time the page answers; a capture that cannot be read (file removed, not a response) is
    counted in ``unreadable`` and the page is stored in full, as if it had none. The files
    read stay open (a few: a batch's pages were mostly written into the same files) until
    ``close``, which the writer calls when it closes.
    """

    def __init__(self, root: str | Path, locations: Mapping[str, tuple[str, int]]) -> None:
        self.root = root
        self.locations = locations
        self.unreadable = 0
        self._refs: dict[str, PayloadRef | None] = {}
        self._files = _OpenFiles()

    def close(self) -> None:
        self._files.close()

    def __len__(self) -> int:
        return len(self.locations)

    def __call__(self, url: str) -> PayloadRef | None:
        if url in self._refs:
            return self._refs[url]
        where = self.locations.get(url)
        ref = None
        if where is not None:
            try:
                ref = capture_ref(self.root, where[0], int(where[1]), files=self._files)
            except WarcError as exc:
                self.unreadable += 1
                if self.unreadable == 1:
                    log.warning("previous WARC capture unreadable (stored in full): %s", exc)
        self._refs[url] = ref
        return ref


#: Compressed bytes read at a time for a record's WARC headers (they come first in the
#: record's gzip member, a few hundred bytes; more is read only if they do not end there).
_HEADER_CHUNK = 4096
_HEADER_LIMIT = 1 << 20  # WARC headers longer than this: not a record of ours


class _OpenFiles:
    """Descriptors of the WARC files last read, at most ``limit`` (the oldest closed)."""

    def __init__(self, limit: int = 16) -> None:
        self.limit = limit
        self._fds: OrderedDict[str, int] = OrderedDict()

    def fd(self, path: str) -> int:
        fd = self._fds.get(path)
        if fd is not None:
            self._fds.move_to_end(path)
            return fd
        fd = self._fds[path] = os.open(path, os.O_RDONLY)
        if len(self._fds) > self.limit:
            os.close(self._fds.popitem(last=False)[1])
        return fd

    def forget(self, path: str) -> None:
        """After a failed read: the next one opens the file again."""
        fd = self._fds.pop(path, None)
        if fd is not None:
            os.close(fd)

    def close(self) -> None:
        while self._fds:
            os.close(self._fds.popitem()[1])

    def __del__(self) -> None:
        with contextlib.suppress(OSError):
            self.close()


def _headers_at(
    root: str | Path, file: str, offset: int, files: _OpenFiles | None = None
) -> dict[str, str]:
    """The WARC headers (lower-case names; ``warc-type`` always there) of the record at
    ``offset``, from the first bytes of its gzip member only (the body is never
    decompressed: a capture's headers are what a later revisit refers to). Raises
    ``WarcError`` for anything that is not a WARC record. ``pread``s of a few KB, no
    buffered file object: the cycle reads one capture per re-fetched page."""
    path = _checked_path_cached(str(root), file)
    if offset < 0:
        raise WarcError(f"negative WARC offset {offset} for {file}")
    try:
        fd = files.fd(path) if files is not None else os.open(path, os.O_RDONLY)
    except FileNotFoundError:
        raise WarcError(f"WARC file {file} does not exist under {root}") from None
    except OSError as exc:
        raise WarcError(f"cannot read a WARC record at {file}#{offset}: {exc}") from None
    try:
        text, end = _read_header_block(fd, offset, file)
    except WarcError:
        if files is not None:
            files.forget(path)
        raise
    finally:
        if files is None:
            os.close(fd)
    lines = text[:end].decode("utf-8", "replace").split("\r\n")
    if not lines[0].startswith("WARC/"):
        raise WarcError(f"no WARC record at {file}#{offset} (starts {lines[0][:20]!r})")
    headers: dict[str, str] = {}
    for line in lines[1:]:
        name, sep, value = line.partition(":")
        if not sep:
            raise WarcError(f"malformed WARC header at {file}#{offset}: {line[:60]!r}")
        headers.setdefault(name.strip().lower(), value.strip())  # the first of a repeated one
    if not headers.get("warc-type"):
        raise WarcError(f"WARC record at {file}#{offset} has no WARC-Type")
    return headers


def _read_header_block(fd: int, offset: int, file: str) -> tuple[bytes, int]:
    """The decompressed start of the gzip member at ``offset`` up to the end of the WARC
    header block, and where that block ends."""
    decompressor = zlib.decompressobj(31)
    text = b""
    try:
        at = offset
        pending = b""
        while (end := text.find(b"\r\n\r\n")) < 0:
            if not pending:
                pending = os.pread(fd, _HEADER_CHUNK, at)
                at += len(pending)
            if not pending or decompressor.eof or len(text) > _HEADER_LIMIT:
                raise WarcError(f"no WARC record at {file}#{offset}")
            # a little output at a time: the body behind the headers stays compressed
            text += decompressor.decompress(pending, _HEADER_CHUNK)
            pending = decompressor.unconsumed_tail
    except (OSError, zlib.error) as exc:
        raise WarcError(f"cannot read a WARC record at {file}#{offset}: {exc}") from None
    return text, end


@functools.lru_cache(maxsize=4096)
def _checked_path_cached(root: str, file: str) -> str:
    return str(_checked_path(root, file))


def _checked_path(root: str | Path, file: str) -> Path:
    rel = PurePosixPath(file)
    if rel.is_absolute() or ".." in rel.parts or not rel.parts or rel.parts[0] != WARC_DIR:
        raise WarcError(
            f"WARC file must be a path under {WARC_DIR}/ relative to the root: {file!r}"
        )
    return Path(root).joinpath(*rel.parts)
