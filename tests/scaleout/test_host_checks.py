"""The checks the scale-out test relies on, on made-up logs, and the pacing hold of a batch."""

from __future__ import annotations

import math

import pytest

from flows.recrawl import pacing_left_s
from sandbox.log import RequestRecord
from tasks.fetch.engine import EngineState
from tasks.fetch.settings import FetchSettings
from tests.scaleout.host_checks import agent_window, host_politeness


def record(host, at, done, in_flight=1, agent="a"):
    return RequestRecord(at, done, host, "GET", "/", 200, in_flight, {"user-agent": agent})


def test_a_polite_log_shows_one_in_flight_and_the_gap():
    log = [
        record("h1:80", 2.0, 2.1, agent="b"),
        record("h1:80", 0.0, 0.1),
        record("h1:80", 1.1, 1.2),
        record("h2:80", 0.5, 0.6),
    ]
    hosts = host_politeness(log)
    assert hosts["h1:80"].requests == 3 and hosts["h1:80"].max_in_flight == 1
    assert hosts["h1:80"].min_gap_s == pytest.approx(0.8)  # 2.0 - 1.2
    assert hosts["h1:80"].agents == {"a", "b"}
    assert math.isinf(hosts["h2:80"].min_gap_s)
    assert agent_window(log, "a") == (0.0, 1.2)


def test_overlapping_or_hurried_requests_are_seen():
    overlapping = [record("h:80", 0.0, 1.0), record("h:80", 0.5, 0.7, in_flight=2)]
    assert host_politeness(overlapping)["h:80"].max_in_flight == 2
    assert host_politeness(overlapping)["h:80"].min_gap_s < 0
    hurried = [record("h:80", 0.0, 0.1), record("h:80", 0.3, 0.4)]
    assert host_politeness(hurried)["h:80"].min_gap_s == pytest.approx(0.2)
    with pytest.raises(ValueError, match="no request carried"):
        agent_window(hurried, "nobody")


def test_a_batch_holds_its_hosts_until_their_pacing_gap_ends():
    state = EngineState(FetchSettings())
    state.host("busy:80").cooling.extend([10.0, 12.5])
    state.host("idle:80")
    state.host("other:80").cooling.append(30.0)  # another batch's host: not waited for
    assert pacing_left_s(state, {"busy:80", "idle:80"}, now=11.0) == pytest.approx(1.5)
    assert pacing_left_s(state, {"busy:80"}, now=13.0) == 0.0
    assert pacing_left_s(state, {"idle:80", "unknown:80"}, now=11.0) == 0.0
