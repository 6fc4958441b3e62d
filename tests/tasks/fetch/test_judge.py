"""What a final answer means (``tasks.fetch.attempt._judge``): the 2xx fast path and the rest."""

import pytest

from tasks.fetch.attempt import Attempt, Exchange, _judge
from tasks.fetch.response_guard import BodyLimitError

URL = "http://shop.example/p/1"
HEADERS = {
    "content-type": "text/html",
    "etag": '"v1"',
    "last-modified": "Thu, 03 Dec 2026 11:00:00 GMT",
}


def judged(status, body=b"<html>kettle</html>", headers=HEADERS, failure=None, plan=None):
    ex = Exchange(status, dict(headers), body, 900, failure, plan)
    return _judge(ex, False, URL, 1200, 0.25)


@pytest.mark.parametrize("status", [200, 203, 204, 206, 299])
def test_a_plain_2xx_is_ok_with_every_field_of_the_answer(status):
    assert judged(status) == Attempt(
        "ok",
        status,
        body=b"<html>kettle</html>",
        content_type="text/html",
        etag='"v1"',
        last_modified="Thu, 03 Dec 2026 11:00:00 GMT",
        wire_bytes=1200,
        duration_s=0.25,
        final_url=URL,
    )


def test_a_2xx_without_validators_names_none():
    attempt = judged(200, headers={})
    assert (attempt.outcome, attempt.content_type, attempt.etag, attempt.last_modified) == (
        "ok",
        None,
        None,
        None,
    )


def test_a_2xx_challenge_page_is_a_throttle_not_content():
    by_body = judged(200, body=b"<html><title>Just a moment...</title></html>")
    by_header = judged(200, headers={**HEADERS, "cf-mitigated": "challenge"})
    for attempt in (by_body, by_header):
        assert (attempt.outcome, attempt.challenge, attempt.retryable) == ("throttled", True, True)
        assert attempt.body is None


def test_a_2xx_that_broke_a_guard_rail_takes_its_outcome():
    attempt = judged(200, failure=BodyLimitError("too_large", "body over 10 MiB"))
    assert (attempt.outcome, attempt.reason) == ("too_large", "body over 10 MiB")
    assert attempt.body is None


def test_a_2xx_marked_as_a_plan_limit_is_the_apis_throttle():
    attempt = judged(200, plan="concurrency")
    assert (attempt.outcome, attempt.plan_limit, attempt.retryable) == (
        "throttled",
        "concurrency",
        True,
    )
