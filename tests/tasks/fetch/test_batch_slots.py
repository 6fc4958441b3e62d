"""ActiveBatches: a place is given back once, early or at the end, never twice."""

from __future__ import annotations

import threading

import pytest

from tasks.fetch.batch_slots import ActiveBatches


def test_a_place_given_back_early_is_not_given_back_again():
    places = ActiveBatches(1)
    with places.hold() as give_back:
        assert places.active == 1
        give_back()
        give_back()  # idempotent: the semaphore is bounded and would raise on a second release
        assert places.active == 0
        with places.hold():  # the place is free for another batch while this one goes on
            assert places.active == 1
    assert places.active == 0 and places.peak == 1


def test_a_place_is_given_back_when_the_batch_fails():
    places = ActiveBatches(1)
    with pytest.raises(RuntimeError), places.hold():
        raise RuntimeError("batch failed")
    acquired = threading.Event()

    def other() -> None:
        with places.hold():
            acquired.set()

    thread = threading.Thread(target=other)
    thread.start()
    thread.join(5)
    assert acquired.is_set()


def test_bad_limit_is_named():
    with pytest.raises(ValueError, match="active batches must be >= 1, got 0"):
        ActiveBatches(0)


def test_the_slot_lease_is_60_s_or_what_the_environment_sets_above_it(monkeypatch):
    from tasks.fetch.batch_slots import lease_seconds

    monkeypatch.delenv("RECRAWL_SLOT_LEASE_S", raising=False)
    assert lease_seconds() == 60.0
    monkeypatch.setenv("RECRAWL_SLOT_LEASE_S", "300")
    assert lease_seconds() == 300.0
    for bad, message in (("10", ">= 60 s"), ("soon", "a number of seconds")):
        monkeypatch.setenv("RECRAWL_SLOT_LEASE_S", bad)
        with pytest.raises(ValueError, match=message):
            lease_seconds()


class _OneAtATimeClient:
    """A slot API that notes how many of its calls were in flight at once; each call waits
    up to 0.2 s for another to join it (so calls left side by side are seen overlapping)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.inside = 0
        self.most = 0
        self.calls = 0

    def _call(self) -> None:
        with self._lock:
            self.inside += 1
            self.calls += 1
            self.most = max(self.most, self.inside)
        for _ in range(20):
            if self.most > 1:
                break
            threading.Event().wait(0.01)
        with self._lock:
            self.inside -= 1

    def increment_concurrency_slots_with_lease(self, **_: object) -> object:
        import uuid
        from types import SimpleNamespace

        self._call()
        body = {"limits": [{"name": "x"}], "lease_id": str(uuid.uuid4())}
        return SimpleNamespace(json=lambda: body)

    def release_concurrency_slots_with_lease(self, lease: object) -> None:
        self._call()

    def renew_concurrency_lease(self, lease: object, lease_duration: float) -> None:
        self._call()


def test_a_process_makes_one_slot_call_at_a_time():
    # side by side, the local server's SQLite answers some of them 503 and Prefect's client
    # backs off 2 s or more: measured as most of a 100-host cycle's orchestration time
    from tasks.fetch.batch_slots import ProcessSlots, batch_slots

    client = _OneAtATimeClient()
    slots = ProcessSlots()
    slots.client = lambda: client  # type: ignore[method-assign]
    start = threading.Barrier(4)

    def batch(k: int) -> None:
        start.wait()
        with batch_slots([f"host:h{k}"], slots=slots, lease_s=60.0):
            pass

    threads = [threading.Thread(target=batch, args=(k,)) for k in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(30)
    assert client.calls == 8  # an acquisition and a release each
    assert client.most == 1
