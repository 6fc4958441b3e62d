"""Volatile-noise patterns: what is removed, and what must survive (prices, codes, words)."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from models.content.noise import (
    _VOLATILE_TEXT,
    is_volatile_key,
    prune_volatile_json,
    strip_volatile_text,
)

pytestmark = pytest.mark.numerics_free


@pytest.mark.parametrize(
    "noise",
    [
        "2026-01-05",
        "2026-01-05T10:42:07+00:00",
        "2026-01-05 10:42:07.123Z",
        "Thu, 01 Jan 2026 10:00:00 GMT",
        "1 January 2026",
        "Jan 5th, 2026",
        "March 12, 2026",
        "01/02/2026",
        "1.2.2026",
        "10:42",
        "10:42:07 pm UTC",
        "5 minutes ago",
        "1 hour ago",
        "just now",
        "12 people viewing this item",
        "1,204 users online",
        "3 people are viewing this item right now",
        "7 customers have this in their cart",
        "123e4567-e89b-12d3-a456-426614174000",
        "9d39f497cacbc71b",
        "0b6825e2fede733995e6c3ec",
        "dGhpcyBpcyBhIHNlc3Npb24gdG9rZW4x",
        "eyJhbGciOiJIUzI1NiJ9",
    ],
)
def test_noise_is_removed(noise: str) -> None:
    assert strip_volatile_text(f"before {noise} after") == "before after"


@pytest.mark.parametrize(
    "keep",
    [
        "Price 24.90 EUR",
        "Model A123 in stock: 5",
        "version 2.10.11",
        "internationalization",
        "Order 12345",
        "3 for 2 offer",
        "Size 10/12",
        "Ratio 16:9",
        "May the best one win",
        "10 people",
        "deadbeef",
    ],
)
def test_real_content_survives(keep: str) -> None:
    assert strip_volatile_text(keep) == keep


def test_whitespace_is_collapsed() -> None:
    assert strip_volatile_text("  a \n\t b  ") == "a b"


@pytest.mark.parametrize(
    ("key", "volatile"),
    [
        ("served_at", True),
        ("updatedAt", True),
        ("timestamp", True),
        ("request_id", True),
        ("requestId", True),
        ("csrfToken", True),
        ("sessionID", True),
        ("viewers", True),
        ("price", False),
        ("title", False),
        ("address", False),
        ("id", False),
        ("availability", False),
    ],
)
def test_volatile_json_keys(key: str, volatile: bool) -> None:
    assert is_volatile_key(key) is volatile


def test_prune_volatile_json() -> None:
    doc = {"a": [1, "2026-01-01", "x"], "b": {"ts": 5, "c": "9d39f497cacbc71b"}, "d": "keep"}
    assert prune_volatile_json(doc) == {"a": [1, "x"], "b": {}, "d": "keep"}


_WORDS = """5 12 1,204 2026 01 24.90 10:42 2026-01-05 01/02/2026 minutes hours ago just now
people users are viewing online this item right Jan January Thu, (Jan 5, March the price EUR
kettle . 9d39f497cacbc71b dGhpcyBpcyBhIHNlc3Npb24gdG9rZW4x may sat monitor"""
_VOCABULARY = _WORDS.split()


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(_VOCABULARY), max_size=60))
def test_windowed_scan_equals_a_scan_of_the_whole_text(words: list[str]) -> None:
    text = " ".join(words)
    whole = " ".join(_VOLATILE_TEXT.sub(" ", text).split())
    assert strip_volatile_text(text) == whole
