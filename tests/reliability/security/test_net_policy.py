"""The address policy as pure classification (models.fetching.net_policy), its settings."""

from __future__ import annotations

from ipaddress import ip_address

import pytest

from models.fetching.net_policy import AddressPolicy, classify, embedded_ipv4, parse_address
from tasks.discovery.sitemaps import SitemapSettings
from tasks.fetch.settings import FetchSettings

pytestmark = pytest.mark.reliability

REFUSED = [
    ("127.0.0.1", "loopback"),
    ("127.255.255.254", "loopback"),
    ("10.0.0.1", "private"),
    ("172.16.5.4", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "cloud metadata"),
    ("169.254.0.1", "link-local"),
    ("100.64.0.1", "carrier-grade NAT"),
    ("198.18.0.1", "benchmarking"),
    ("192.0.2.1", "documentation"),
    ("224.0.0.1", "multicast"),
    ("239.255.255.250", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("255.255.255.255", "broadcast"),
    ("240.0.0.1", "reserved"),
    ("::1", "loopback"),
    ("::", "unspecified"),
    ("fc00::1", "unique local"),
    ("fd12:3456::1", "unique local"),
    ("fe80::1", "link-local"),
    ("ff02::1", "multicast"),
    ("2001:db8::1", "documentation"),
    ("::ffff:127.0.0.1", "loopback"),  # IPv4-mapped forms are judged by their IPv4
    ("::ffff:169.254.169.254", "cloud metadata"),
    ("::ffff:10.1.1.1", "private"),
    ("64:ff9b::7f00:1", "loopback"),  # NAT64 of 127.0.0.1
    ("2002:a9fe:a9fe::", "cloud metadata"),  # 6to4 of 169.254.169.254
    ("::127.0.0.1", "IPv4-compatible"),
]
PUBLIC = ["93.184.216.34", "8.8.8.8", "1.1.1.1", "2606:4700:4700::1111", "::ffff:8.8.8.8"]


@pytest.mark.parametrize(("text", "why"), REFUSED)
def test_every_non_public_address_is_refused_naming_its_class(text, why):
    reason = AddressPolicy().refusal(ip_address(text))
    assert reason is not None and why in reason, reason


@pytest.mark.parametrize("text", PUBLIC)
def test_public_unicast_addresses_pass(text):
    assert classify(ip_address(text)) is None
    assert AddressPolicy().refusal(ip_address(text)) is None


def test_an_allow_list_opens_exactly_its_networks():
    policy = AddressPolicy.from_strings(["127.0.0.0/8", "::1", "10.20.0.0/16"])
    for allowed in ("127.0.0.1", "127.0.9.9", "::1", "::ffff:127.0.0.1", "10.20.3.4"):
        assert policy.refusal(ip_address(allowed)) is None, allowed
    for refused in ("10.21.0.1", "169.254.169.254", "192.168.0.1", "fe80::1"):
        assert policy.refusal(ip_address(refused)) is not None, refused


def test_schemes_and_literals_without_resolution():
    policy = AddressPolicy()
    assert policy.scheme_refusal("https") is None and policy.scheme_refusal("HTTP") is None
    for scheme in ("ftp", "file", "gopher", "data", "javascript"):
        assert "only http and https" in (policy.scheme_refusal(scheme) or "")
    assert policy.host_refusal("example.org") is None  # names are judged once resolved
    assert "loopback" in (policy.host_refusal("[::1]") or "")
    assert "link-local" in (policy.host_refusal("[fe80::1%25eth0]") or "")
    assert parse_address("example.org") is None
    assert embedded_ipv4(ip_address("2002:7f00:1::")) == ip_address("127.0.0.1")  # type: ignore[arg-type]


def test_bad_allow_lists_fail_naming_the_value(monkeypatch):
    with pytest.raises(ValueError, match=r"'127\.0\.0\.1/8'.*host bits"):
        AddressPolicy.from_strings(["127.0.0.1/8"])
    with pytest.raises(ValueError, match="'localhost'"):
        FetchSettings(allowed_networks=("localhost",))
    with pytest.raises(ValueError, match=r"'10\.0\.0\.0/33'"):
        SitemapSettings(allowed_networks=("10.0.0.0/33",))
    monkeypatch.setenv("RECRAWL_ALLOWED_NETWORKS", "127.0.0.0/8, ::1")
    assert FetchSettings().allowed_networks == ("127.0.0.0/8", "::1")
    assert SitemapSettings().allowed_networks == ("127.0.0.0/8", "::1")
    monkeypatch.delenv("RECRAWL_ALLOWED_NETWORKS")
    assert FetchSettings().allowed_networks == ()  # the default refuses loopback
    assert SitemapSettings().allowed_networks == ()
