"""Fuzz: robots.txt interpretation and matching (``tasks.fetch.robots`` over protego) on bad input.

Random bytes, real-looking files mutated byte by byte (flips, insertions, deletions, cuts),
BOMs, odd line endings and invalid UTF-8, as 2xx bodies and with every status. Properties:
interpreting a fetch never raises; a verdict is always one of the three; decisions are
booleans (protego's) and denials ``None`` or a reason; the Crawl-delay honoured is finite
and within its cap; and a file that disallows everything for every agent still disallows
every URL whatever junk, comments, case and spacing surround its two lines. The pure
helpers (``verdict_for_status``, ``robots_text``, ``capped_crawl_delay``) are fuzzed too.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime

import pytest
from hypothesis import strategies as st

from models.fetching.robots_policy import (
    ROBOTS_MAX_BYTES,
    RobotsCachePolicy,
    RobotsVerdict,
    capped_crawl_delay,
    robots_text,
    verdict_for_status,
)
from tasks.fetch.robots import RobotsFetch, interpret_robots
from tests.reliability.fuzz.budget import BUDGETS, check
from tests.reliability.fuzz.mutate import mutated

pytestmark = pytest.mark.reliability

TOKEN = "recrawler"
NOW = datetime(2026, 1, 1, tzinfo=UTC)
CAP_S = 30.0

#: Files shaped like real ones (written for this test): groups, wildcards, ``$``, comments,
#: Crawl-delay, Sitemap lines, a group for this crawler, odd spacing.
SEEDS = [
    b"User-agent: *\nDisallow: /private/\nAllow: /private/public$\nCrawl-delay: 2\n"
    b"Sitemap: https://shop.example/sitemap.xml\n",
    b"# shop robots\nUser-agent: Googlebot\nUser-agent: Bingbot\nDisallow: /search\n\n"
    b"User-agent: recrawler\nDisallow: /cart/\nDisallow: /*?sessionid=\nCrawl-delay: 0.5\n\n"
    b"User-agent: *\nDisallow: /\n",
    b"\xef\xbb\xbfUser-Agent : *\r\nDisallow : /admin\r\nAllow: /admin/help*\r\n"
    b"Request-rate: 1/5\r\nVisit-time: 0600-0845\r\nHost: shop.example\r\n",
    b"User-agent: *\nDisallow: /*.php$\nDisallow: /%7Euser/\nAllow: /\nCrawl-delay: nan\n",
    b"User-agent: *\rDisallow: /a\rUser-agent: recrawler\rAllow: /a/b\rCrawl-delay: 1e400\r",
]


bodies = st.one_of(
    st.binary(max_size=600),
    mutated(SEEDS),
    st.text(max_size=300).map(lambda t: t.encode("utf-8", "surrogatepass")),
)
statuses = st.one_of(st.none(), st.integers(100, 599), st.sampled_from([200, 404, 429, 503]))
paths = st.one_of(
    st.text(st.sampled_from("/abc?=&*$%.~-_éü"), max_size=30).map(lambda p: "/" + p),
    st.sampled_from(["/", "/private/x", "/admin/help", "/cart/", "/a/b", "/p?sessionid=1"]),
)


def _interpret(status: int | None, body: bytes, *, redirects: bool = False):
    fetched = RobotsFetch(status, body, f"HTTP {status}", len(body), 0.01, redirects)
    return interpret_robots(
        fetched,
        now=NOW,
        policy=RobotsCachePolicy(),
        token=TOKEN,
        max_bytes=ROBOTS_MAX_BYTES,
        crawl_delay_cap_s=CAP_S,
    )


def _robots_property(status: int | None, body: bytes, redirects: bool, path: str) -> None:
    rules = _interpret(status, body, redirects=redirects)
    assert isinstance(rules.verdict, RobotsVerdict)
    assert rules.expires_at > NOW or rules.verdict is not RobotsVerdict.PARSE
    assert math.isfinite(rules.crawl_delay_s) and 0.0 <= rules.crawl_delay_s <= CAP_S
    url = "http://shop.example" + path
    denial = rules.denial(url, TOKEN)
    assert denial is None or (isinstance(denial, str) and denial)
    if rules.parser is not None:
        assert isinstance(rules.parser.can_fetch(url, TOKEN), bool)
        assert isinstance(rules.parser.can_fetch(url, "Mozilla/5.0 (compatible)"), bool)
        list(rules.parser.sitemaps)
    if (status is None or status >= 500 or status == 429) and not redirects:
        assert denial is not None, "an unreachable robots.txt must disallow everything"


@pytest.mark.parametrize("budget", BUDGETS)
def test_any_robots_answer_is_interpreted_without_error(budget):
    check(
        "robots.interpret_and_match",
        1_000 * budget,
        _robots_property,
        status=statuses,
        body=bodies,
        redirects=st.booleans(),
        path=paths,
    )


# A disallow-all group in the spellings protego and RFC 9309 accept, and junk that cannot
# make a directive: comment lines, lines without letters, invalid UTF-8, other agents' groups
# that allow everything (their names are never a part of ours, so never match us).
_AGENT_LINE = st.sampled_from(
    ["User-agent: *", "user-agent:*", "USER-AGENT :  *", "User agent: *", "useragent: *"]
)
_DISALLOW_LINE = st.sampled_from(["Disallow: /", "disallow:/", "DISALLOW :  /", "Disallow: /*"])
_OWN_AGENT_LINE = st.sampled_from([f"User-agent: {TOKEN}", f"user-agent: {TOKEN.upper()}"])
_OTHER_AGENT = st.text(st.sampled_from("qxzjkw-"), min_size=2, max_size=10).filter(
    lambda name: name.strip("-") and name.lower() not in TOKEN
)
_JUNK_LINE = st.one_of(
    st.text(max_size=40).map(lambda t: "# " + t.replace("\n", " ").replace("\r", " ")),
    st.text(st.sampled_from("0123456789 \t.,;!?/*$=+-_~%"), max_size=30),
    _OTHER_AGENT.map(lambda name: f"User-agent: {name}\nAllow: /"),
    st.just(""),
)
_NEWLINE = st.sampled_from(["\n", "\r\n", "\r"])


@st.composite
def disallow_all_files(draw: st.DrawFn) -> bytes:
    newline = draw(_NEWLINE)
    before = draw(st.lists(_JUNK_LINE, max_size=5))
    after = draw(st.lists(_JUNK_LINE, max_size=5))
    agent = draw(st.one_of(_AGENT_LINE, _OWN_AGENT_LINE))
    group = [agent, draw(_DISALLOW_LINE)]
    text = newline.join([*before, *group, *after]) + draw(st.sampled_from(["", newline]))
    data = text.replace("\n", newline).encode()
    if draw(st.booleans()):
        data = b"\xef\xbb\xbf" + data
    if draw(st.booleans()):  # a line of invalid UTF-8 at the end
        data += newline.encode() + draw(st.binary(min_size=1, max_size=20)).replace(b":", b"")
    return data


def _disallow_all_property(body: bytes, path: str) -> None:
    rules = _interpret(200, body)
    assert rules.verdict is RobotsVerdict.PARSE
    url = "http://shop.example" + path
    assert rules.denial(url, TOKEN) == "disallowed by robots.txt", body


@pytest.mark.parametrize("budget", BUDGETS)
def test_a_disallow_all_file_still_disallows_everything(budget):
    check(
        "robots.disallow_all_survives_junk",
        700 * budget,
        _disallow_all_property,
        body=disallow_all_files(),
        path=paths,
    )


def _helpers_property(status: int | None, body: bytes, limit: int, delay: float) -> None:
    assert isinstance(verdict_for_status(status), RobotsVerdict)
    text = robots_text(body, limit)
    assert isinstance(text, str) and len(text) <= max(limit, 0)
    honoured = capped_crawl_delay(delay, CAP_S)
    assert 0.0 <= honoured <= CAP_S


@pytest.mark.parametrize("budget", BUDGETS)
def test_robots_policy_helpers_accept_any_input(budget):
    check(
        "robots.policy_helpers",
        500 * budget,
        _helpers_property,
        status=statuses,
        body=bodies,
        limit=st.integers(0, 2_000),
        delay=st.floats(allow_nan=True, allow_infinity=True),
    )
