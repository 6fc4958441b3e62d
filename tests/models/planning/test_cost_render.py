"""Rendering priced by the billing model: bytes under bandwidth, nothing more under credits."""

import numpy as np
import pytest

from models.planning.cost import (
    MIB,
    BandwidthBilling,
    CatalogCost,
    CostInputError,
    CreditBilling,
    render_cost,
)


def test_bandwidth_bills_the_browsers_bytes():
    cost = render_cost(BandwidthBilling(price_per_mib=3.0), [MIB, MIB / 4, 0.0])
    np.testing.assert_allclose(cost, [3.0, 0.75, 0.0], rtol=1e-12)  # exact binary fractions


def test_a_scraping_api_bills_one_credit_rendered_or_not():
    np.testing.assert_array_equal(render_cost(CreditBilling(credits=2.0), [MIB, 10.0]), [0, 0])
    np.testing.assert_array_equal(render_cost(CatalogCost(), [MIB]), [0.0])


def test_a_rendered_visit_costs_the_plain_fetch_plus_the_render_under_bandwidth():
    model = BandwidthBilling()
    plain = model.attempt_cost(["ok"], [20_000])
    rendered = model.attempt_cost(["ok"], [20_000 + 50_000])
    np.testing.assert_allclose(rendered, plain + render_cost(model, [50_000]), rtol=1e-12)


def test_negative_render_bytes_are_refused():
    with pytest.raises(CostInputError, match="non-negative"):
        render_cost(BandwidthBilling(), [-1.0])
