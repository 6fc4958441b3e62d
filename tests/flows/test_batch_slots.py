"""A batch's host slots through one Prefect client per process (``tasks.fetch.batch_slots``).

Against Prefect's test server: two batches sharing a host never hold it at once (the second
waits for the first's release), every batch of a process goes through one API client (one
TLS context: Prefect's tagged task runs build several per batch), a held slot counts as
leased (so the leaked-slot repair of ``tasks.cycle.host_limits`` leaves it alone), and the
slots come back when the batch fails. The expiry of a dead holder's lease is the scale-out
test's (a real server, a worker SIGKILLed).
"""

from __future__ import annotations

import ssl
import threading
import time
import uuid

import pytest
from prefect import flow, task
from prefect.client.orchestration import get_client
from prefect.client.schemas.actions import GlobalConcurrencyLimitCreate

from tasks.cycle.host_limits import leaked_slots, repair_leaked_slots
from tasks.fetch.batch_slots import ProcessSlots, batch_slots


@pytest.fixture(scope="module")
def api(prefect_server):
    """The test's own client, opened before any TLS context is counted."""
    with get_client(sync_client=True) as client:
        yield client


@pytest.fixture
def hosts(api):
    """Two fresh host tags with a 1-slot limit each."""
    tags = [f"host:slots-{uuid.uuid4().hex[:8]}-{i}" for i in range(2)]
    for tag in tags:
        api.create_global_concurrency_limit(
            GlobalConcurrencyLimitCreate(name=f"tag:{tag}", limit=1)
        )
    return tags


@pytest.fixture
def contexts(monkeypatch):
    """Every TLS context built from here on (one per Prefect API client)."""
    built: list[int] = []
    real = ssl.create_default_context

    def counting(*args, **kwargs):
        built.append(1)
        return real(*args, **kwargs)

    monkeypatch.setattr(ssl, "create_default_context", counting)
    return built


def active(api, tag: str) -> int:
    return api.read_global_concurrency_limit_by_name(f"tag:{tag}").active_slots


def test_two_batches_of_one_host_do_not_overlap_and_share_one_client(api, hosts, contexts):
    slots = ProcessSlots()
    held: dict[str, tuple[float, float]] = {}
    first_holds = threading.Event()

    def batch(name: str, tags: list[str], until_refused: bool) -> None:
        with batch_slots(tags, slots=slots):
            start = time.monotonic()
            first_holds.set()
            assert all(active(api, t) == 1 for t in tags)
            # The first batch holds until the second was told to wait (not for a fixed time:
            # on a loaded server one API call can take longer than any fixed hold).
            deadline = start + 60.0
            while until_refused and slots.stats.refusals < 1 and time.monotonic() < deadline:
                time.sleep(0.05)
            held[name] = (start, time.monotonic())

    one = threading.Thread(target=batch, args=("one", hosts, True))
    one.start()
    first_holds.wait(30)
    two = threading.Thread(target=batch, args=("two", hosts[:1], False))
    two.start()
    one.join(90)
    two.join(90)
    assert held["two"][0] >= held["one"][1], held  # the shared host never held twice at once
    assert slots.stats.acquisitions == 2 and slots.stats.releases == 2
    assert slots.stats.refusals >= 1  # the second batch was told to wait, and asked again
    assert slots.stats.clients == 1 and len(contexts) == 1  # one client, one TLS context
    assert [active(api, t) for t in hosts] == [0, 0]
    slots.close()


def test_prefect_tagged_task_runs_build_a_client_per_batch(hosts, contexts):
    """What the process client replaces: a tagged task run builds clients (TLS contexts)."""

    @task
    def tagged() -> None:
        return None

    @flow
    def two_batches() -> None:
        tagged.with_options(tags=hosts[:1])()
        tagged.with_options(tags=hosts[1:])()

    two_batches()
    slots = ProcessSlots()
    before = len(contexts)
    for tag in hosts:  # the same two batches' slots through the process client
        with batch_slots([tag], slots=slots):
            pass
    assert len(contexts) - before == 1
    assert before >= 2 * 2, before  # at least an acquisition and a renewal client per batch
    slots.close()


def test_a_held_slot_has_its_lease_so_the_repair_leaves_it(api, hosts):
    slots = ProcessSlots()
    holder = uuid.uuid4()
    with batch_slots(hosts[:1], holder=holder, slots=slots) as lease:
        assert lease is not None
        assert leaked_slots(api, f"tag:{hosts[0]}") == (1, 1)
        limit = api.read_global_concurrency_limit_by_name(f"tag:{hosts[0]}")
        assert repair_leaked_slots(api, [limit]) == ()
        assert active(api, hosts[0]) == 1
    assert active(api, hosts[0]) == 0
    slots.close()


def test_slots_come_back_when_the_batch_fails_and_missing_limits_hold_nothing(api, hosts):
    slots = ProcessSlots()
    with pytest.raises(RuntimeError, match="batch failed"), batch_slots(hosts, slots=slots):
        assert [active(api, t) for t in hosts] == [1, 1]
        raise RuntimeError("batch failed")
    assert [active(api, t) for t in hosts] == [0, 0]
    with batch_slots([f"host:no-limit-{uuid.uuid4().hex}"], slots=slots) as lease:
        assert lease is None
    with batch_slots([], slots=slots) as lease:
        assert lease is None
    slots.close()
