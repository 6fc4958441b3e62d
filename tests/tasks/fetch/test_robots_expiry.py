"""robots.txt rules expire within a batch, on the loop's clock (UTC) or on the caller's."""

from datetime import UTC, datetime, timedelta

from models.fetching.robots_policy import RobotsVerdict
from tasks.fetch.robots import RobotsRules
from tests.tasks.fetch.conftest import article_hash, quick_settings, run, sandbox


def test_rules_expire_during_a_batch_on_the_default_clock():
    # One host, pages 0.15 s apart, rules kept 0.25 s: they expire mid-batch and are fetched
    # again before the next page (the engine keeps them until a loop time, not datetime.now).
    with sandbox(hosts=1, pages=6) as sb:
        settings = quick_settings(min_delay_s=0.15, robots_ttl_s=0.25)
        result = run(sb.page_urls(0), settings)
        entries = sb.log.entries()
    assert result.rows.column("outcome").to_pylist() == ["ok"] * 6
    fetched = sum(e.path == "/robots.txt" for e in entries)
    assert fetched == result.metrics.robots_fetches
    # 6 pages over >= 0.75 s of pacing: at least two lifetimes of 0.25 s.
    assert fetched >= 3


def test_rules_kept_while_fresh_on_the_default_clock():
    with sandbox(hosts=1, pages=6) as sb:
        result = run(sb.page_urls(0), quick_settings(min_delay_s=0.05))
    assert result.metrics.robots_fetches == 1


def test_rules_expire_on_a_callers_clock_that_outruns_the_loop():
    # A clock an hour further on at every reading: the day-long rules run out within the
    # batch although the loop's clock moves by a second or so; they are fetched again.
    start = datetime(2026, 1, 1, tzinfo=UTC)
    readings = []

    def clock() -> datetime:
        readings.append(None)
        return start + timedelta(hours=len(readings))

    with sandbox(hosts=1, pages=20) as sb:
        result = run(sb.page_urls(0), quick_settings(), clock=clock)
    assert result.rows.column("outcome").to_pylist() == ["ok"] * 20
    assert result.metrics.robots_fetches >= 2


def test_rules_replaced_in_the_cache_apply_at_once(engine_state):
    # Rules kept until a loop time are used only while they are still the cache's entry: a
    # newer robots.txt put there meanwhile (by another batch on the same state) replaces them
    # for the very next page, long before the day-long rules would have run out.
    with sandbox(hosts=1, pages=6) as sb:
        urls = sb.page_urls(0)
        replaced = []

        def hasher(body: bytes, content_type: str | None, url: str | None = None) -> str:
            if not replaced:  # after the first page: the host now disallows everything
                rules = RobotsRules(
                    RobotsVerdict.DISALLOW_ALL,
                    datetime.now(UTC) + timedelta(hours=1),
                    503,
                    "HTTP 503",
                )
                engine_state.robots.put(urls[0], rules)
                replaced.append(rules)
            return article_hash(body, content_type, url)

        settings = quick_settings(min_delay_s=0.05, concurrency=1)
        result = run(urls, settings, state=engine_state, record_hasher=hasher)
    outcomes = result.rows.column("outcome").to_pylist()
    assert outcomes.count("ok") == 1
    assert outcomes.count("robots_denied") == 5
    assert result.metrics.robots_fetches == 1
