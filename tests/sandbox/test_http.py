"""The sandbox's own HTTP/1.1 parser and writer (pure functions)."""

from __future__ import annotations

import pytest

from sandbox.http import BadRequestError, Reply, encode_response, parse_request


def test_parses_one_request_at_a_time_and_waits_for_the_rest():
    data = bytearray(b"GET /p/1?x=1 HTTP/1.1\r\nHost: a\r\nX-Two: 1\r\nx-two: 2\r\n\r\nGET /p/2 HT")
    request, used = parse_request(data)
    assert (request.method, request.target, request.path, request.query) == (
        "GET",
        "/p/1?x=1",
        "/p/1",
        "x=1",
    )
    assert request.headers == {"host": "a", "x-two": "1, 2"} and request.keep_alive
    del data[:used]
    assert parse_request(data) is None  # incomplete


def test_content_length_body_is_consumed():
    data = bytearray(b"POST /x HTTP/1.1\r\nContent-Length: 5\r\n\r\nhel")
    assert parse_request(data) is None
    data += b"loGET"
    _, used = parse_request(data)
    assert data[used:] == b"GET"


@pytest.mark.parametrize(
    ("head", "keep_alive"),
    [
        (b"GET / HTTP/1.1\r\n\r\n", True),
        (b"GET / HTTP/1.1\r\nConnection: close\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\n\r\n", False),
        (b"GET / HTTP/1.0\r\nConnection: keep-alive\r\n\r\n", True),
    ],
)
def test_keep_alive_rules(head, keep_alive):
    assert parse_request(bytearray(head))[0].keep_alive is keep_alive


def test_absolute_form_targets_keep_the_url_and_give_the_path():
    request, _ = parse_request(bytearray(b"GET http://127.0.1.1:80/p/3?a HTTP/1.1\r\n\r\n"))
    assert request.target == "http://127.0.1.1:80/p/3?a" and request.path == "/p/3"


@pytest.mark.parametrize(
    ("data", "status"),
    [
        (b"GET /\r\n\r\n", 400),
        (b"GET / HTTP/2.0\r\n\r\n", 505),
        (b"GET / HTTP/1.1\r\nno colon\r\n\r\n", 400),
        (b"GET / HTTP/1.1\r\nContent-Length: x\r\n\r\n", 400),
        (b"POST / HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n", 501),
        (b"GET / HTTP/1.1\r\nX: " + b"a" * 70_000, 431),
    ],
)
def test_bad_requests_name_their_status(data, status):
    with pytest.raises(BadRequestError) as caught:
        parse_request(bytearray(data))
    assert caught.value.status == status


def test_encoding_of_bodies_head_and_304():
    reply = Reply(200, [("Content-Type", "text/plain")], b"hello")
    full = encode_response(reply, head_only=False, keep_alive=True)
    assert full.startswith(b"HTTP/1.1 200 OK\r\n") and full.endswith(b"\r\n\r\nhello")
    assert b"Content-Length: 5" in full and b"Connection: keep-alive" in full
    head = encode_response(reply, head_only=True, keep_alive=False)
    assert head.endswith(b"Connection: close\r\n\r\n") and b"Content-Length: 5" in head
    not_modified = encode_response(Reply(304), head_only=False, keep_alive=True)
    assert b"Content-Length" not in not_modified
    assert encode_response(Reply(509), head_only=False, keep_alive=True).startswith(
        b"HTTP/1.1 509 Bandwidth Limit Exceeded"
    )
