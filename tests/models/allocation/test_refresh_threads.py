"""A refresh and the final evaluation give the same answer in one thread as in several.

Passes run their blocks in the calling thread (``refresh.PASS_THREADS``: less CPU); the
threaded path stays available through ``chunked``. Per page nothing depends on the thread;
per host the loads are summed in another order, so they agree to rounding: the sum of n
non-negative terms in any order is within n eps of the exact sum (relative), and a host
here has under 10^4 pages, so 1e-10 bounds it with room to spare.
"""

import threading

import numpy as np
import pytest

from models.allocation import refresh
from models.allocation.allocate import AllocationProblem
from models.allocation.model import Centres
from models.allocation.refresh import BLOCK_PAGES, Pages, chunked, evaluate, expand
from models.allocation.solver import page_scale
from models.estimation.synthetic import allocation_web

LOAD_RTOL = 1e-10  # n eps with n < 1e4 pages a host (see the module docstring)


@pytest.fixture(autouse=True)
def small_groups(monkeypatch: pytest.MonkeyPatch) -> None:
    """Groups of two blocks: the pages below make three groups and a bit, so two threads
    split them and every group's per-host sums are added in the end."""
    monkeypatch.setattr(refresh, "GROUP_PAGES", 2 * BLOCK_PAGES)


@pytest.fixture(scope="module")
def pages():
    web = allocation_web(6 * BLOCK_PAGES + 123, 300, seed=4)
    capacity = np.minimum(1440.0, np.maximum(1.0, 0.5 * web.pages_per_host))
    problem = AllocationProblem.build(
        web.rates,
        0.2 * float(web.costs.sum()),
        weights=web.weights,
        costs=web.costs,
        hosts=web.hosts,
        host_capacity=capacity,
        max_frequency=1.0,
    )
    return problem, Pages.of(problem, page_scale(problem))


def test_chunked_runs_in_the_calling_thread_when_asked_for_one():
    seen = chunked(lambda lo: (lo, threading.get_ident()), 5 * 7, 7, threads=1)
    assert [lo for lo, _ in seen] == [0, 7, 14, 21, 28]
    assert {ident for _, ident in seen} == {threading.get_ident()}


def test_the_passes_use_the_calling_thread_by_default():
    assert refresh.PASS_THREADS == 1


@pytest.mark.parametrize("single", [True, False], ids=["float32", "float64"])
def test_a_refresh_is_the_same_in_one_thread_and_in_two(pages, monkeypatch, single):
    problem, pg = pages
    n_hosts = problem.host_capacity.shape[0]
    slot = np.zeros(pg.size, dtype=np.int32)
    mu = 0.5
    c = Centres(
        np.array([mu]),
        np.zeros(1),
        np.array([0.04 * mu if single else 1e-4 * mu]),
        np.zeros(1),
        np.zeros(1),
        np.array([not single]),
    )
    done = {}
    for threads in (1, 2):
        monkeypatch.setattr(refresh, "PASS_THREADS", threads)
        done[threads] = expand(pg, slot, c, 1, n_hosts, single)
    one, two = done[1], done[2]
    # block sums are added in block order either way: the same floats
    np.testing.assert_array_equal(one.moments, two.moments)
    np.testing.assert_array_equal(one.boundary, two.boundary)
    assert one.boundary.size > 0  # the box is wide enough to have some
    np.testing.assert_allclose(one.host_load, two.host_load, rtol=LOAD_RTOL, atol=0.0)


def test_the_final_evaluation_is_the_same_in_one_thread_and_in_two(pages, monkeypatch):
    problem, pg = pages
    n_hosts = problem.host_capacity.shape[0]
    slot = np.zeros(pg.size, dtype=np.int32)
    out = {}
    for threads in (1, 2):
        monkeypatch.setattr(refresh, "PASS_THREADS", threads)
        out[threads] = evaluate(pg, slot, 0.5, np.zeros(1), n_hosts, problem.weights)
    (f1, load1, spend1, values1), (f2, load2, spend2, values2) = out[1], out[2]
    np.testing.assert_array_equal(f1, f2)
    assert (f1 > 0).any() and (f1 == 0).any()
    # per-block spends and values are summed with fsum in block order: the same floats
    assert spend1 == spend2
    assert values1 == values2
    np.testing.assert_allclose(load1, load2, rtol=LOAD_RTOL, atol=0.0)
    np.testing.assert_allclose(load1, np.bincount(problem.hosts, f1, n_hosts), rtol=LOAD_RTOL)
