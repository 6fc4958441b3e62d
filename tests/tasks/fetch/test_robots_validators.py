"""robots.txt status handling and validator trust as pure policy (no sockets)."""

import random
from datetime import UTC, datetime, timedelta

import pytest

from models.fetching.robots_policy import (
    ROBOTS_MAX_BYTES,
    RobotsCachePolicy,
    RobotsVerdict,
    capped_crawl_delay,
    robots_text,
    verdict_for_status,
)
from models.fetching.validators import (
    ValidatorEvidence,
    ValidatorPolicy,
    ValidatorTrust,
    conditional_headers,
    judge_validators,
)
from tasks.fetch.robots import RobotsCache, RobotsFetch, interpret_robots

NOW = datetime(2026, 1, 1, tzinfo=UTC)


@pytest.mark.parametrize(
    ("status", "verdict"),
    [
        (200, RobotsVerdict.PARSE),
        (204, RobotsVerdict.PARSE),
        (400, RobotsVerdict.ALLOW_ALL),
        (401, RobotsVerdict.ALLOW_ALL),
        (403, RobotsVerdict.ALLOW_ALL),
        (404, RobotsVerdict.ALLOW_ALL),
        (410, RobotsVerdict.ALLOW_ALL),
        (500, RobotsVerdict.DISALLOW_ALL),
        (503, RobotsVerdict.DISALLOW_ALL),
        (None, RobotsVerdict.DISALLOW_ALL),  # network error, timeout
    ],
)
def test_rfc9309_status_mapping(status, verdict):
    assert verdict_for_status(status) is verdict


def test_errors_are_cached_for_less_time():
    policy = RobotsCachePolicy()
    assert policy.ttl(RobotsVerdict.PARSE) == 24 * 3600
    assert policy.ttl(RobotsVerdict.ALLOW_ALL) == 24 * 3600
    assert policy.ttl(RobotsVerdict.DISALLOW_ALL) < policy.ttl(RobotsVerdict.PARSE)


def test_robots_text_strips_bom_and_keeps_only_the_first_500_kib():
    body = b"\xef\xbb\xbfUser-agent: *\nDisallow: /a\n" + b"#" * (2 * ROBOTS_MAX_BYTES)
    text = robots_text(body)
    assert text.startswith("User-agent: *")
    assert len(text.encode()) <= ROBOTS_MAX_BYTES


def test_rules_past_500_kib_are_ignored_and_bom_does_not_hide_the_first_group():
    head = b"\xef\xbb\xbfUser-agent: *\nDisallow: /private/\n"
    padding = b"# " + b"x" * (ROBOTS_MAX_BYTES + 10) + b"\n"
    late = b"User-agent: *\nDisallow: /late/\n"
    rules = interpret_robots(
        RobotsFetch(200, head + padding + late, "HTTP 200", 0, 0.0),
        now=NOW,
        policy=RobotsCachePolicy(),
        token="recrawler",
        max_bytes=ROBOTS_MAX_BYTES,
        crawl_delay_cap_s=30.0,
    )
    assert rules.denial("http://a.test/private/x", "recrawler") is not None
    assert rules.denial("http://a.test/late/x", "recrawler") is None


def _interpret(status, body=b"", *, too_many=False, cap=30.0):
    return interpret_robots(
        RobotsFetch(status, body, f"HTTP {status}", 0, 0.0, too_many_redirects=too_many),
        now=NOW,
        policy=RobotsCachePolicy(error_ttl_s=600.0),
        token="recrawler",
        max_bytes=ROBOTS_MAX_BYTES,
        crawl_delay_cap_s=cap,
    )


def test_interpretation_matches_the_product_token_and_caps_crawl_delay():
    body = (
        b"User-agent: otherbot\nDisallow: /\n\n"
        b"User-agent: recrawler\nDisallow: /nope/\nAllow: /nope/yes\nCrawl-delay: 500\n"
    )
    rules = _interpret(200, body)
    assert rules.denial("http://a.test/page", "recrawler") is None
    assert rules.denial("http://a.test/nope/x", "recrawler") == "disallowed by robots.txt"
    assert rules.denial("http://a.test/nope/yes", "recrawler") is None  # longest match
    assert rules.crawl_delay_s == 30.0
    assert _interpret(200, body, cap=None).crawl_delay_s == 0.0  # not honoured


def test_interpretation_of_failures():
    assert _interpret(404).denial("http://a.test/x", "recrawler") is None
    denied = _interpret(500)
    assert "disallow all" in denied.denial("http://a.test/x", "recrawler")
    assert denied.expires_at == NOW + timedelta(seconds=600)
    assert _interpret(None).verdict is RobotsVerdict.DISALLOW_ALL
    assert _interpret(429).verdict is RobotsVerdict.DISALLOW_ALL  # throttled: unreachable
    assert _interpret(301, too_many=True).verdict is RobotsVerdict.ALLOW_ALL


def test_robots_cache_expires_on_the_callers_clock():
    cache = RobotsCache()
    cache.put("http://a.test/x", _interpret(500))
    assert cache.get("http://a.test/other", NOW) is not None  # per host
    assert cache.get("http://b.test/x", NOW) is None
    assert cache.get("http://a.test/x", NOW + timedelta(seconds=601)) is None


def test_crawl_delay_values():
    assert capped_crawl_delay(None, 10.0) == 0.0
    assert capped_crawl_delay(float("nan"), 10.0) == 0.0
    assert capped_crawl_delay(3.0, 10.0) == 3.0
    assert capped_crawl_delay(300.0, 10.0) == 10.0


def _judge(old_etag, new_etag, old_hash, new_hash, conditional=False, old_lm=None, new_lm=None):
    return judge_validators(
        sent_conditional=conditional,
        old_etag=old_etag,
        old_last_modified=old_lm,
        old_record_hash=old_hash,
        new_etag=new_etag,
        new_last_modified=new_lm,
        new_record_hash=new_hash,
    )


def test_judging_validators_against_the_record():
    ev = ValidatorEvidence
    assert _judge('"a"', '"a"', "h1", "h1") is ev.CONSISTENT
    assert _judge('"a"', '"b"', "h1", "h2") is ev.CONSISTENT
    assert _judge('"a"', '"a"', "h1", "h2") is ev.HIDDEN_CHANGE  # a 304 would have lied
    assert _judge('"a"', '"b"', "h1", "h1") is ev.VOLATILE
    assert _judge('"a"', '"a"', "h1", "h1", conditional=True) is ev.IGNORED
    assert _judge('W/"a"', '"a"', "h1", "h1") is ev.CONSISTENT  # weak comparison
    assert _judge(None, None, "h1", "h2", old_lm="Mon", new_lm="Mon") is ev.HIDDEN_CHANGE
    assert _judge(None, None, "h1", "h2") is ev.UNKNOWN
    assert _judge('"a"', '"a"', None, "h2") is ev.UNKNOWN


def test_trust_is_lost_after_one_hidden_change_or_mostly_wasteful_validators():
    policy = ValidatorPolicy(min_probes=2, probe_rate=0.0, min_evidence=3)
    trust = ValidatorTrust()
    assert trust.trusted
    assert trust.wants_probe(policy, random.Random(0))
    lied = trust.record(ValidatorEvidence.HIDDEN_CHANGE, policy)
    assert not lied.trusted and "unchanged validator" in lied.distrusted
    volatile = ValidatorTrust()
    for _ in range(2):
        volatile = volatile.record(ValidatorEvidence.VOLATILE, policy, probe=True)
    assert volatile.trusted  # not enough evidence yet
    assert not volatile.wants_probe(policy, random.Random(0))  # probes done, rate 0
    volatile = volatile.record(ValidatorEvidence.VOLATILE, policy)
    assert not volatile.trusted
    assert "without a record change" in volatile.distrusted
    for _ in range(10):  # no conditional requests any more: answers look consistent
        volatile = volatile.record(ValidatorEvidence.CONSISTENT, policy)
    assert not volatile.trusted  # distrust latches
    mixed = ValidatorTrust(consistent=10)
    for _ in range(3):
        mixed = mixed.record(ValidatorEvidence.VOLATILE, policy)
    assert mixed.trusted  # a few volatile answers among many good ones


def test_conditional_headers_only_for_trusted_hosts_and_never_for_probes():
    policy = ValidatorPolicy(min_probes=1, probe_rate=0.0, min_evidence=3)
    rng = random.Random(0)
    fresh = ValidatorTrust()
    assert conditional_headers('"e"', "Mon", "h", fresh, policy, rng) == ({}, True)  # probe
    probed = fresh.record(ValidatorEvidence.CONSISTENT, policy, probe=True)
    headers, probe = conditional_headers('"e"', "Mon", "h", probed, policy, rng)
    assert headers == {"If-None-Match": '"e"', "If-Modified-Since": "Mon"} and not probe
    assert conditional_headers('"e"', None, None, fresh, policy, rng)[0] == {
        "If-None-Match": '"e"'
    }  # no record to compare with: no probe possible
    assert conditional_headers(None, None, "h", probed, policy, rng) == ({}, False)
    liar = probed.record(ValidatorEvidence.HIDDEN_CHANGE, policy)
    assert conditional_headers('"e"', "Mon", "h", liar, policy, rng) == ({}, False)
    assert conditional_headers('"e"', "Mon", "h", probed, policy, rng, enabled=False) == (
        {},
        False,
    )
