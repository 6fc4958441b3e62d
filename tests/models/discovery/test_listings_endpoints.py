"""JSON endpoints: the page declares one, and the page and the endpoint give one record hash."""

from __future__ import annotations

import json

import pytest

from models.content.extract import same_record
from models.discovery.endpoints import (
    PRODUCT_FIELDS,
    EndpointFields,
    endpoint_link,
    record_of,
)

URL = "http://shop.example/p/4"


def _page(title="Calm Kettle A100", price="12.30", availability="InStock", alternate=True):
    link = '<link rel="alternate" type="application/json" href="/api/item/4.json">'
    return (
        f"<html><head><title>{title}</title>{link if alternate else ''}</head><body><main>"
        '<article class="product" itemscope itemtype="https://schema.org/Product">'
        f'<h1 class="title" itemprop="name">{title}</h1>'
        f'<p class="price" itemprop="price" content="{price}">{price} EUR</p>'
        f'<p class="availability" itemprop="availability">{availability}</p>'
        '<div class="description" itemprop="description">\n<p>First  part.</p>\n'
        "<p>Second part.</p>\n</div></article>"
        '<aside class="ad">offer #17</aside></main></body></html>'
    ).encode()


def _endpoint(title="Calm Kettle A100", price=12.3, availability="InStock"):
    return json.dumps(
        {
            "title": title,
            "price": price,
            "availability": availability,
            "body": "First part.\n\nSecond part.",
            "id": 4,
            "meta": {"served_at": "2026-01-01T00:00:00+00:00", "viewers": 12},
        }
    ).encode()


def test_the_page_declares_its_endpoint():
    assert endpoint_link(_page(), "text/html", URL) == "http://shop.example/api/item/4.json"
    assert endpoint_link(_page(alternate=False), "text/html", URL) is None
    assert endpoint_link(_endpoint(), "application/json", URL) is None


def test_page_and_endpoint_give_the_same_record_hash():
    page = record_of(_page(), "text/html; charset=utf-8", URL)
    endpoint = record_of(_endpoint(), "application/json", "http://shop.example/api/item/4.json")
    assert page.fields == endpoint.fields
    assert page.fields["price"] == "12.3" and page.fields["body"] == "First part. Second part."
    assert page.record_hash == endpoint.record_hash
    assert page.missing == () and endpoint.missing == ()


@pytest.mark.parametrize(
    ("page_kw", "json_kw"),
    [
        ({"price": "12.40"}, {"price": 12.3}),
        ({"availability": "OutOfStock"}, {}),
        ({"title": "Calm Kettle A101"}, {}),
    ],
)
def test_a_field_that_differs_gives_another_hash(page_kw, json_kw):
    page = record_of(_page(**page_kw), "text/html", URL)
    endpoint = record_of(_endpoint(**json_kw), "application/json", URL + ".json")
    assert page.record_hash != endpoint.record_hash


def test_numbers_are_compared_as_numbers_and_text_without_its_spacing():
    a = record_of(_page(price="100.00"), "text/html", URL)
    b = record_of(_endpoint(price=100), "application/json", URL + ".json")
    assert a.fields["price"] == b.fields["price"] == "100"
    assert a.record_hash == b.record_hash


def test_same_record_keeps_what_is_not_a_number():
    from models.content.extract import Record

    raw = Record({"code": "007", "name": "  a  b "}, "", "", "", 0, "html")
    fields = same_record(raw).fields
    assert fields == {"code": "007", "name": "a b"}  # "007" is a code, not the number 7


def test_fields_must_be_the_same_on_both_sides():
    with pytest.raises(ValueError, match="same fields"):
        EndpointFields(css={"title": "h1"}, json={"name": "$.name"})
    assert set(PRODUCT_FIELDS.css) == set(PRODUCT_FIELDS.json)
