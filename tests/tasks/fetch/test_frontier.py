"""The batch frontier as pure scheduling: priorities, pacing, admission, shedding, plan gate."""

import random

import pytest

from models.fetching.frontier import BatchFrontier, PlanGate, WorkItem
from models.fetching.host_state import HostState, Signal
from models.fetching.politeness import AimdLimit, PacingPolicy, ThrottleBackoff


def make_frontier(*, ceiling=1.0, deadline=None, plan=None, max_host_queue=1000, max_urls=10_000):
    states = {}

    def new_state(host):
        return states.setdefault(host, HostState(AimdLimit(ceiling, 0.125, ceiling)))

    return BatchFrontier(
        pacing=PacingPolicy(10.0, 1.0, 5.0),
        backoff=ThrottleBackoff(10.0, 100.0, 50.0, 0.0),
        slow_factor=2.0,
        new_host_state=new_state,
        max_host_queue=max_host_queue,
        max_urls=max_urls,
        plan_gate=plan,
        deadline=deadline,
        rng=random.Random(0),
    )


def items(host, priorities):
    return [WorkItem(i, f"http://{host}/{i}", host, p) for i, p in enumerate(priorities)]


def drain_now(frontier, now):
    out = []
    while (item := frontier.next_dispatch(now)) is not None:
        out.append(item)
    return out


def test_highest_priority_first_and_one_request_per_host_at_a_time():
    frontier = make_frontier()
    frontier.admit_many(items("a", [1.0, 5.0, 3.0]) + items("b", [4.0, 2.0]), 0.0)
    first = drain_now(frontier, 0.0)
    assert [(i.host, i.priority) for i in first] == [("a", 5.0), ("b", 4.0)]
    assert frontier.next_wakeup(0.0) is None  # both hosts busy: only a completion helps
    frontier.complete(first[0], 0.5, 0.5, Signal.SUCCESS)
    assert frontier.next_dispatch(1.0) is None  # pacing: 10 x 0.5 s = 5 s after the end
    assert frontier.next_wakeup(1.0) == pytest.approx(5.5)
    assert frontier.next_dispatch(5.5).priority == 3.0


def test_a_slow_host_never_blocks_the_others():
    frontier = make_frontier()
    frontier.admit_many(items("slow", [9.0] * 5) + items("fast", [1.0] * 5), 0.0)
    slow_item, fast_item = drain_now(frontier, 0.0)
    assert slow_item.host == "slow"
    served = [fast_item]
    now = 0.0
    for _ in range(4):  # the slow host's first request is still running all along
        now += 0.2
        frontier.complete(served[-1], now, 0.01, Signal.SUCCESS)
        now = frontier.next_wakeup(now)
        served.append(frontier.next_dispatch(now))
    assert [i.host for i in served] == ["fast"] * 5


def test_throttle_pauses_only_that_host_and_retry_waits_for_admission():
    frontier = make_frontier(ceiling=4.0)
    frontier.admit_many(items("t", [1.0] * 6) + items("ok", [1.0] * 2), 0.0)
    batch = drain_now(frontier, 0.0)
    assert sum(i.host == "t" for i in batch) == 4  # ceiling 4
    throttled = next(i for i in batch if i.host == "t")
    frontier.complete(throttled, 0.1, 0.01, Signal.THROTTLED, retry_after_s=30.0)
    lane = frontier.lanes["t"]
    assert lane.state.limit.limit == 2.0 and lane.state.paused_until == pytest.approx(30.1)
    assert frontier.lanes["ok"].state.limit.limit == 4.0
    for other in batch:
        if other.host == "t" and other is not throttled:
            frontier.complete(other, 0.2, 0.01, Signal.SUCCESS)
    throttled.attempts = 1
    throttled.not_before = 5.0
    assert frontier.admit(throttled, 0.1)
    assert frontier.retries == 1
    assert all(i.host != "t" for i in drain_now(frontier, 20.0))
    later = drain_now(frontier, 31.0)
    assert throttled in later and all(i.host == "t" for i in later)


def test_admission_rejects_beyond_the_bounds():
    frontier = make_frontier(max_host_queue=3, max_urls=4)
    rejected = frontier.admit_many(items("a", [1.0] * 5) + items("b", [1.0] * 2), 0.0)
    assert len(rejected) == 3 and frontier.rejections == 3
    assert frontier.waiting == 4


def test_shedding_drops_the_lowest_priorities_that_cannot_fit():
    frontier = make_frontier(deadline=20.0)
    frontier.admit_many(items("a", list(range(10))), 0.0)
    first = frontier.next_dispatch(0.0)
    assert first.priority == 9
    frontier.complete(first, 0.5, 0.5, Signal.SUCCESS)  # 0.5 s + 5 s gap per request
    frontier.shed_for_window(0.5)
    shed = frontier.take_shed()
    kept = sorted(p for p, _, _ in frontier.lanes["a"].pending)
    # Starts at 5.5, 11 and 16.5 (done by 17) fit; the next would start at 22 > 20.
    assert kept == [6, 7, 8]
    assert sorted(s.item.priority for s in shed) == [0, 1, 2, 3, 4, 5]
    assert max(s.item.priority for s in shed) < min(kept)
    frontier.shed_for_window(20.0)
    assert len(frontier.take_shed()) == 3 and frontier.waiting == 0


def test_host_paused_past_the_window_is_shed_whole():
    frontier = make_frontier(deadline=10.0)
    frontier.admit_many(items("a", [1.0, 2.0]), 0.0)
    item = frontier.next_dispatch(0.0)
    frontier.complete(item, 0.1, 0.1, Signal.THROTTLED, retry_after_s=60.0)
    frontier.shed_for_window(0.2)
    shed = frontier.take_shed()
    assert [s.reason for s in shed] == ["host paused past the window"]


def test_robots_job_runs_alone_before_pages():
    frontier = make_frontier(ceiling=4.0)
    frontier.admit_many(items("a", [1.0, 2.0]), 0.0)
    frontier.require_robots("a", "http://a/0", 0.0)
    job = frontier.next_dispatch(0.0)
    assert job.kind == "robots"
    assert frontier.next_dispatch(0.0) is None  # pages wait for the rules
    frontier.complete(job, 0.1, 0.01, Signal.SUCCESS)
    assert frontier.next_dispatch(1.2).kind == "page"


def test_plan_gate_limits_all_hosts_but_no_host_state():
    gate = PlanGate(ceiling=4, pause_s=1.0)
    frontier = make_frontier(plan=gate)
    frontier.admit_many([w for h in "abcdef" for w in items(h, [1.0])], 0.0)
    out = drain_now(frontier, 0.0)
    assert len(out) == 4  # six hosts ready, four API slots
    frontier.complete(out[0], 0.1, 0.01, Signal.NOT_SENT, plan_throttled=True)
    assert gate.limit.limit == 2.0 and gate.paused_until == pytest.approx(1.1)
    assert frontier.lanes[out[0].host].state.limit.limit == 1.0  # host untouched
    assert frontier.lanes[out[0].host].state.paused_until == 0.0
    assert frontier.next_dispatch(0.5) is None  # paused, and 3 still in flight > 2
    for item in out[1:]:
        frontier.complete(item, 0.6, 0.01, Signal.SUCCESS)
    gate.stopped = True
    assert frontier.next_dispatch(5.0) is None
    assert len(frontier.drain_all()) == 2
    assert frontier.idle


def _scanned_oldest_age(frontier, now):
    """The definition, by a scan of every waiting page and retry (what the heap replaces)."""
    ages = [
        now - entry[2].enqueued_at
        for lane in frontier.lanes.values()
        for entry in (*lane.pending, *lane.delayed)
    ]
    return max(ages, default=0.0)


@pytest.mark.parametrize("seed", range(5))
def test_oldest_waiting_age_equals_a_scan_of_every_waiting_url(seed):
    """Admissions, dispatches, retries, shedding and drained hosts in random order: the
    heap's answer is the scan's, exactly (both subtract the same two floats)."""
    rng = random.Random(seed)
    frontier = make_frontier(deadline=400.0)
    hosts = [f"h{i}.test" for i in range(6)]
    now = 0.0
    frontier.admit_many(
        [WorkItem(i, f"http://{h}/{i}", h, rng.random()) for i, h in enumerate(hosts * 5)], now
    )
    next_index = 1000
    in_flight = []
    for _ in range(300):
        now += rng.random()
        action = rng.random()
        if action < 0.35:
            item = frontier.next_dispatch(now)
            if item is not None:
                in_flight.append(item)
        elif action < 0.6 and in_flight:
            item = in_flight.pop(rng.randrange(len(in_flight)))
            frontier.complete(item, now, 0.1, Signal.SUCCESS)
            if rng.random() < 0.5:  # a retry, after a backoff
                item.attempts += 1
                item.not_before = now + rng.random() * 5
                frontier.admit(item, now)
        elif action < 0.8:
            host = rng.choice(hosts)
            next_index += 1
            frontier.admit(WorkItem(next_index, f"http://{host}/{next_index}", host), now)
        elif action < 0.9:
            frontier.shed_for_window(now)
            frontier.take_shed()
        else:
            frontier.drain_host(rng.choice(hosts))
        assert frontier.oldest_waiting_age(now) == _scanned_oldest_age(frontier, now)
