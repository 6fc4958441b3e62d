"""The outcome vocabulary: every outcome a history row may record, and every class of them.

A fetch attempt ends in exactly one outcome (the history's ``outcome`` column). What an
outcome *means* to the rest of the system (was the page seen, does it cost a credit, does
it count against the host...) is decided here and nowhere else: code tests membership in
one of the classes below (``outcome in OBSERVED``; in SQL the class is bound as a list
parameter, ``outcome IN (SELECT unnest($observed))``), never a list of names of its own.

Adding an outcome: add it to ``OUTCOME_MEANINGS`` with its one-line meaning, put it in
every class it belongs to, and add its row to the table of
``tests/models/test_outcomes.py`` (which fails until both agree).
"""

from __future__ import annotations

from typing import Literal

#: Every outcome of a fetch attempt, with what it means (the history's ``outcome``).
OUTCOME_MEANINGS: dict[str, str] = {
    "ok": "2xx with a body that was extracted and hashed",
    "not_modified": "304 to a conditional request: unchanged",
    "throttled": "429 / 503 or a challenge page (Retry-After recorded by the fetcher)",
    "timeout": "no complete answer in time (connect, read or the attempt's total)",
    "error": "network error, 5xx, unparseable response, or an unexpected exception",
    "gone": "404 / 410",
    "redirect": "redirect not followed (limit, off-host, bad target)",
    "robots_denied": "robots.txt disallows the page (or the redirect target)",
    "shed": "dropped by load shedding before any request was sent",
    # Guard rails and plan limits of the fetch engine (``reason`` says which limit and value):
    "too_large": "body above the size limit (declared or counted while streaming)",
    "bad_content_type": "a content type the fetcher does not accept",
    "decompression_bomb": "decoded body far larger than the bytes on the wire",
    "redirect_loop": "a redirect chain that comes back to a URL it already visited",
    "api_exhausted": "the scraping API answered 509: the plan's credits are spent",
    # Failures told apart by tasks.fetch.transport_errors (issue 8), and the address policy:
    "refused_address": "the address policy refused it (models.fetching.net_policy): never sent",
    "tls_error": "the TLS handshake failed (bad certificate, not TLS at all)",
    "bad_response": "not valid HTTP (status line, headers, framing)",
    "truncated": "the connection broke mid-body (reset, shorter than Content-Length)",
    # Cheap signals (issue 20): seen without fetching the page itself.
    "listing_unchanged": "its listing page showed the item's summary unchanged: not fetched",
}
#: The vocabulary, in its documented order (``HISTORY_SCHEMA``'s ``outcome`` is one of these).
OUTCOMES: tuple[str, ...] = tuple(OUTCOME_MEANINGS)

#: The page's content was seen, so whether it changed can be judged (the only outcomes
#: that are observations; every other one says nothing about change). An item its listing
#: showed unchanged is a cheap observation of no change (its summary is what the listing
#: shows: a change outside the summary is missed, as a 304 from a careless server would).
OBSERVED = frozenset({"ok", "not_modified", "listing_unchanged"})
#: A scraping API bills it (the credits cost model, and the fetcher's default cost hook in
#: API mode): the page was delivered, a 304 included; failures and errors are free. The
#: bandwidth model prices bytes whatever the outcome.
BILLED = frozenset({"ok", "not_modified"})
#: No request left the machine: it costs nothing and says nothing of the host's health;
#: pricing and reports count these apart from the requests sent.
NOT_SENT = frozenset({"shed", "robots_denied", "refused_address", "listing_unchanged"})
#: The host is struggling or pushing back: counts against its health (the cost model's
#: health multiplier).
UNHEALTHY = frozenset({"throttled", "timeout", "error", "tls_error", "bad_response", "truncated"})
#: The host kept its batch waiting (the unhealthy ones, and what could not be fetched
#: within the batch's window): a host's record packs such hosts together.
STRAINED = UNHEALTHY | {"shed"}
#: Left out of a host's record altogether: the site's own rules refused the page, the host
#: did nothing in the batch.
OFF_HOST_RECORD = frozenset({"robots_denied"})
#: A connection or protocol failure: the host is not well (an error signal, keep pacing).
CONNECTION_FAILED = frozenset({"tls_error", "bad_response", "truncated"})
#: Another attempt could plausibly succeed, whatever the status.
RETRYABLE = frozenset({"timeout", "throttled", "truncated"})
#: Another attempt could succeed when there is no status (a network error) or the status
#: is a transient one (``models.fetching.politeness.RETRYABLE_STATUS``).
RETRYABLE_IF_TRANSIENT = frozenset({"error"})
#: A 200 answer whose body was read: the rows that carry a record hash, a simhash and links.
WITH_BODY = frozenset({"ok"})
#: The host cannot be reached at all (its address is refused, TLS to it fails): when its
#: robots.txt request ends so, every page of the host is recorded with that outcome.
HOST_UNREACHABLE = frozenset({"refused_address", "tls_error"})

#: What a headless render of one page ends in (``tasks/fetch/render.py``): fetch outcomes.
RenderOutcome = Literal["ok", "timeout", "error", "shed"]

#: Every class, by name (the names above).
CLASSES: dict[str, frozenset[str]] = {
    "OBSERVED": OBSERVED,
    "BILLED": BILLED,
    "NOT_SENT": NOT_SENT,
    "UNHEALTHY": UNHEALTHY,
    "STRAINED": STRAINED,
    "OFF_HOST_RECORD": OFF_HOST_RECORD,
    "CONNECTION_FAILED": CONNECTION_FAILED,
    "RETRYABLE": RETRYABLE,
    "RETRYABLE_IF_TRANSIENT": RETRYABLE_IF_TRANSIENT,
    "WITH_BODY": WITH_BODY,
    "HOST_UNREACHABLE": HOST_UNREACHABLE,
}


def classes_of(outcome: str) -> frozenset[str]:
    """The names of the classes ``outcome`` belongs to; ``KeyError`` if it is no outcome."""
    if outcome not in OUTCOME_MEANINGS:
        raise KeyError(f"unknown outcome {outcome!r}")
    return frozenset(name for name, members in CLASSES.items() if outcome in members)


def sql_list(members: frozenset[str]) -> list[str]:
    """A class as a DuckDB list parameter (sorted, so a query's parameters are stable)."""
    return sorted(members)
