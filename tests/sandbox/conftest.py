"""Helpers for the sandbox tests: a fresh clock, a way to read a page's real fields."""

from __future__ import annotations

import html
import json
import re
from datetime import UTC, datetime

import pytest

from sandbox import SimClock

START = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.fixture
def clock() -> SimClock:
    return SimClock(start=START)


def extract_record(page: str) -> dict[str, object]:
    """The real fields of a sandbox HTML page, read the way a crawler's extractor would."""
    title = re.search(r'<h1 class="title" itemprop="name">(.*?)</h1>', page)
    price = re.search(r'<p class="price" itemprop="price" content="([0-9.]+)">', page)
    availability = re.search(r'<p class="availability" itemprop="availability">(\w+)</p>', page)
    description = re.search(
        r'<div class="description" itemprop="description">\n(.*?)</div>', page, re.S
    )
    assert title and price and availability and description, "not a sandbox product page"
    paragraphs = re.findall(r"<p>(.*?)</p>", description.group(1))
    return {
        "title": html.unescape(title.group(1)),
        "price": float(price.group(1)),
        "availability": availability.group(1),
        "body": "\n\n".join(html.unescape(p) for p in paragraphs),
    }


def json_record(text: str) -> dict[str, object]:
    doc = json.loads(text)
    return {k: doc[k] for k in ("title", "price", "availability", "body")}
