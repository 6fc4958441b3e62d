"""Body guard rails without sockets: bounded decoding, bombs, sizes, content types."""

import gzip
import random
import zlib

import pytest

from tasks.fetch.response_guard import (
    BodyLimitError,
    BoundedDecoder,
    check_content_type,
    check_declared_length,
    looks_like_challenge,
)


def _feed(decoder, data, chunk=16_384):
    for i in range(0, len(data), chunk):
        decoder.feed(data[i : i + chunk])
    return decoder.body()


def test_gzip_and_deflate_bodies_decode():
    page = b"<html>" + b"hello " * 5000 + b"</html>"
    assert _feed(BoundedDecoder("gzip", 1 << 20, 100.0), gzip.compress(page)) == page
    assert _feed(BoundedDecoder("deflate", 1 << 20, 100.0), zlib.compress(page)) == page
    raw = zlib.compressobj(wbits=-15)
    raw_deflate = raw.compress(page) + raw.flush()
    assert _feed(BoundedDecoder("deflate", 1 << 20, 100.0), raw_deflate) == page
    two_members = gzip.compress(b"a" * 10) + gzip.compress(b"b" * 10)
    assert _feed(BoundedDecoder("gzip", 1 << 20, 100.0), two_members) == b"a" * 10 + b"b" * 10


def test_gzip_bomb_is_stopped_without_inflating_it():
    bomb = gzip.compress(b"\0" * (200 * 1024 * 1024), compresslevel=9)  # 200 MiB of zeros
    assert len(bomb) < 300_000
    decoder = BoundedDecoder("gzip", 10 * 1024 * 1024, 100.0)
    with pytest.raises(BodyLimitError) as caught:
        _feed(decoder, bomb)
    assert caught.value.outcome == "decompression_bomb"
    assert "inflates" in caught.value.reason
    assert decoder.size <= 10 * 1024 * 1024 + 1  # never held more than the limit


def test_large_plain_body_is_too_large_not_a_bomb():
    decoder = BoundedDecoder(None, 1000, 100.0)
    with pytest.raises(BodyLimitError) as caught:
        _feed(decoder, b"x" * 5000, chunk=700)
    assert caught.value.outcome == "too_large"
    # compressible but honest: big after decoding, ratio under the bomb threshold
    text = random.Random(0).randbytes(200_000).hex().encode()  # compresses about 2:1
    with pytest.raises(BodyLimitError) as caught:
        _feed(BoundedDecoder("gzip", 100_000, 100.0), gzip.compress(text))
    assert caught.value.outcome == "too_large"


def test_truncating_decoder_keeps_the_head():
    decoder = BoundedDecoder("gzip", 100, 100.0, truncate=True)
    assert _feed(decoder, gzip.compress(b"y" * 10_000)) == b"y" * 100
    assert decoder.done


def test_unsupported_or_corrupt_encodings_are_errors():
    with pytest.raises(BodyLimitError, match="unsupported"):
        BoundedDecoder("br", 100, 100.0)
    with pytest.raises(BodyLimitError, match="stacked"):
        BoundedDecoder("gzip, gzip", 100, 100.0)
    with pytest.raises(BodyLimitError, match="corrupt"):
        BoundedDecoder("gzip", 100, 100.0).feed(b"not gzip at all")


def test_declared_length_and_content_type():
    check_declared_length("100", 100)
    check_declared_length(None, 100)
    with pytest.raises(BodyLimitError, match="Content-Length 101"):
        check_declared_length("101", 100)
    check_content_type("text/html; charset=utf-8", ["text/html"], accept_missing=True)
    check_content_type(None, ["text/html"], accept_missing=True)
    with pytest.raises(BodyLimitError) as caught:
        check_content_type("image/png", ["text/html"], accept_missing=True)
    assert caught.value.outcome == "bad_content_type"
    with pytest.raises(BodyLimitError, match="no Content-Type"):
        check_content_type(None, ["text/html"], accept_missing=False)


def test_challenge_pages():
    page = b"<html><head><title>Just a moment...</title></head><body>...</body></html>"
    assert looks_like_challenge(200, None, page)
    assert looks_like_challenge(403, "challenge", b"")
    assert not looks_like_challenge(200, None, b"<html><title>Kettle</title></html>")
    assert not looks_like_challenge(404, None, page)
