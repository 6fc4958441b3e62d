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
