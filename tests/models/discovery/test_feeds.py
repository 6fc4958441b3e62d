"""Feeds as change signals: Atom, RSS 2.0 and JSON Feed entries with their update times."""

from datetime import UTC, datetime

import pytest

from models.discovery.feeds import (
    FeedEntry,
    FeedRejectedError,
    changed_since,
    feed_links,
    parse_feed,
)

ATOM = b"""<?xml version="1.0"?><feed xmlns="http://www.w3.org/2005/Atom"><title>t</title>
<entry><link rel="alternate" href="/p/1"/><link rel="edit" href="/edit/1"/>
<updated>2026-01-02T10:00:00+01:00</updated></entry>
<entry><link href="http://shop.test/p/2"/><published>2026-01-01</published></entry>
<entry><title>no link</title></entry></feed>"""
RSS = b"""<rss version="2.0"><channel><item><link>http://shop.test/p/3</link>
<pubDate>Fri, 02 Jan 2026 09:00:00 GMT</pubDate></item><item><link>/p/4</link></item>
</channel></rss>"""
JSON = b"""{"version": "https://jsonfeed.org/version/1.1", "items": [
 {"url": "http://shop.test/p/5", "date_modified": "2026-01-03T00:00:00Z"},
 {"url": "http://shop.test/p/6"}, {"id": "no url"}]}"""


def test_atom_rss_and_json_feeds_give_links_and_utc_times():
    base = "http://shop.test/feed"
    assert parse_feed(ATOM, "application/atom+xml", base) == [
        FeedEntry("http://shop.test/p/1", datetime(2026, 1, 2, 9, tzinfo=UTC)),
        FeedEntry("http://shop.test/p/2", datetime(2026, 1, 1, tzinfo=UTC)),
    ]
    assert parse_feed(RSS, "application/rss+xml", base) == [
        FeedEntry("http://shop.test/p/3", datetime(2026, 1, 2, 9, tzinfo=UTC)),
        FeedEntry("http://shop.test/p/4", None),
    ]
    assert parse_feed(JSON, "application/feed+json") == [
        FeedEntry("http://shop.test/p/5", datetime(2026, 1, 3, tzinfo=UTC)),
        FeedEntry("http://shop.test/p/6", None),
    ]


def test_the_signal_is_an_update_after_the_visit_and_none_when_unlisted():
    entries = parse_feed(ATOM, "", "http://shop.test/")
    visit = datetime(2026, 1, 2, tzinfo=UTC)
    assert changed_since(entries, "http://shop.test/p/1", visit) is True
    assert changed_since(entries, "http://shop.test/p/2", visit) is False
    assert changed_since(entries, "http://shop.test/p/9", visit) is None


def test_pages_declare_their_feeds():
    html = (
        '<html><head><link rel="alternate" type="application/atom+xml" href="/feed.xml">'
        '<link rel="alternate" type="text/html" href="/fr/">'
        '<link rel="stylesheet" href="/s.css"></head></html>'
    )
    assert feed_links("http://shop.test/a/b", html) == ["http://shop.test/feed.xml"]


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b'<!DOCTYPE feed [<!ENTITY x "y">]><feed/>', "xml_entities"),
        (b"<feed><entry>", "invalid"),
        (b"<html><body/></html>", "not_a_feed"),
        (b'{"items": 3}', "not_a_feed"),
    ],
)
def test_bad_feeds_are_refused_with_a_reason(body, reason):
    with pytest.raises(FeedRejectedError) as caught:
        parse_feed(body)
    assert caught.value.reason == reason
