import numpy as np
import pytest

from models.outcomes import BILLED, OUTCOMES
from models.planning.cost import (
    MIB,
    BandwidthBilling,
    CatalogCost,
    CostInputError,
    CreditBilling,
    PageHistory,
    health_multiplier,
)


def history(attempts, billed, mean_bytes, host_attempts, host_billed, host_mean_bytes):
    return PageHistory(
        *(
            np.asarray(a, dtype=np.float64)
            for a in (attempts, billed, mean_bytes, host_attempts, host_billed, host_mean_bytes)
        )
    )


def test_bandwidth_counts_every_byte_of_every_attempt_that_sent_any():
    model = BandwidthBilling(price_per_mib=2.0)
    cost = model.attempt_cost(["ok", "error", "timeout", "shed"], [MIB, MIB / 2, np.nan, 0])
    # a failed request that transferred bytes costs; one that transferred none does not
    np.testing.assert_allclose(cost, [2.0, 1.0, 0.0, 0.0])


def test_bandwidth_visit_cost_is_bytes_per_delivered_visit_page_then_host_then_hint():
    model = BandwidthBilling(price_per_mib=1.0)
    h = history(
        [3, 3, 0, 0],
        [3, 1, 0, 0],
        [MIB, MIB, np.nan, np.nan],
        [5, 5, 5, 0],
        [5, 5, 2, 0],
        [4 * MIB, 4 * MIB, 4 * MIB, np.nan],
    )
    cost = model.visit_cost(h, [9.0, 9.0, 9.0, 9.0])
    # failed attempts' bytes are part of the price of the visits that deliver (smoothed)
    np.testing.assert_allclose(cost, [1.0, 2.0, 4.0 * 6 / 3, 9.0])


def test_credits_bill_delivered_responses_only():
    model = CreditBilling(credits=5.0)
    cost = model.attempt_cost(["ok", "not_modified", "throttled", "error", "gone"], [1, 1, 1, 1, 1])
    np.testing.assert_allclose(cost, [5.0, 5.0, 0.0, 0.0, 0.0])


def test_credits_price_one_attempt_as_they_price_many():
    """The engine prices one attempt at a time (a set look-up); arrays go through np.isin:
    both bill exactly the outcomes of ``models.outcomes.BILLED``."""
    model = CreditBilling(credits=3.0)
    one_by_one = [float(model.attempt_cost([o], [1])[0]) for o in OUTCOMES]
    many = model.attempt_cost(np.array(OUTCOMES * 20, dtype=object), [1] * (20 * len(OUTCOMES)))
    expected = [3.0 if o in BILLED else 0.0 for o in OUTCOMES]
    assert one_by_one == expected
    np.testing.assert_array_equal(many, expected * 20)


def test_credit_visit_cost_is_the_price_of_a_delivered_response():
    h = history([9, 3, 0], [9, 0, 0], [np.nan] * 3, [20, 20, 0], [20, 20, 0], [np.nan] * 3)
    np.testing.assert_allclose(CreditBilling(credits=2.0).visit_cost(h, [7.0] * 3), [2.0] * 3)


def test_catalog_cost_is_the_hint():
    h = history([1, 0], [1, 0], [1, 1], [1, 1], [1, 1], [1, 1])
    np.testing.assert_allclose(CatalogCost().visit_cost(h, [2.0, np.nan]), [2.0, 1.0])


def test_health_raises_cost_of_struggling_hosts_only():
    mult = health_multiplier([100, 100, 0, 1000], [0, 50, 0, 1000])
    assert mult[0] == 1.0 and mult[2] == 1.0  # healthy, and unknown
    assert mult[1] == pytest.approx(110 / 60)  # half throttled: ~1.8x
    assert mult[3] == 5.0  # capped
    assert health_multiplier([3], [1])[0] < 1.1  # one bad answer does not trip it


@pytest.mark.parametrize(
    ("call", "message"),
    [
        (lambda: BandwidthBilling(price_per_mib=0), "price_per_mib"),
        (lambda: CreditBilling(credits=-1), "credits"),
        (lambda: BandwidthBilling().attempt_cost(["ok"], [-5]), "non-negative"),
        (lambda: health_multiplier([1], [2]), "unhealthy"),
        (lambda: CatalogCost().visit_cost(history([0], [0], [1], [0], [0], [1]), [0.0]), "hint"),
    ],
)
def test_bad_cost_input_is_named(call, message):
    with pytest.raises(CostInputError, match=message):
        call()
