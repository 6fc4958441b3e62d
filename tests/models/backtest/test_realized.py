import numpy as np
import pytest

from models.backtest.realized import Events, changes_caught, fresh_share


def ev(pages, times):
    return Events(np.asarray(pages, dtype=np.int64), np.asarray(times, dtype=np.float64))


def test_fresh_until_the_first_change_after_a_visit():
    visits = ev([0, 0], [0.0, 2.0])
    changes = ev([0, 0], [1.0, 1.5])
    share = fresh_share(visits, changes, np.array([-0.5, 0.5, 1.0, 1.2, 2.0, 2.5]), 1)
    # nothing held before the first visit; a change at exactly t makes t stale
    assert share.tolist() == [0.0, 1.0, 0.0, 0.0, 1.0, 1.0]


def test_pages_do_not_leak_into_each_other():
    visits = ev([0, 1], [0.0, 0.0])
    changes = ev([1], [0.5])
    share = fresh_share(visits, changes, np.array([0.25, 0.75]), 3)  # page 2 never visited
    assert share == pytest.approx([2 / 3, 1 / 3])


def test_a_visit_catches_a_change_only_if_one_happened_since_the_previous_visit():
    visits = ev([0, 0, 0, 1, 1], [0.0, 1.0, 2.0, 0.0, 3.0])
    changes = ev([0, 0, 1], [0.5, 0.7, 10.0])
    # page 0: (0, 1] has two changes -> caught once; (1, 2] none; page 1: (0, 3] none
    assert changes_caught(visits, changes) == (1, 2)


def test_events_reject_mismatched_arrays():
    with pytest.raises(ValueError, match="same shape"):
        Events(np.zeros(2, dtype=np.int64), np.zeros(3))


@pytest.mark.parametrize("high", [2.9959942719202353, 3.0, 7.3, 29.9])
def test_every_page_keeps_its_own_visits_whatever_the_time_span(high):
    """Regression: with a time span that is not a power of two, ``page * span / span`` can
    round to ``page - 1``, attaching a page's visit at the earliest time to the page before
    (the toy demo counted 14 "visits after a visit" among 12 revisits)."""
    pages = np.arange(400)
    visits = ev(np.r_[pages, pages], np.r_[np.zeros(400), np.full(400, 1.0)])
    changes = ev([0, 5], [0.5, high])  # the last change sets the span
    found, none = changes_caught(visits, changes)
    assert (found, none) == (1, 399)
