"""Which addresses and schemes the crawler may reach: the pure address policy (SSRF guard).

A crawler fetches URLs that strangers wrote: a sitemap, a redirect or a DNS answer can point
it at ``127.0.0.1``, at the cloud metadata service on ``169.254.169.254`` or at a router on
the private network. By default every address that is not a public unicast address is
refused, whatever form it is written in (``::ffff:127.0.0.1``, ``2002:7f00:1::``...), and so
is every scheme other than http and https. An explicit allow-list of networks (the sandbox
and the tests pass ``127.0.0.0/8`` and ``::1``) opens chosen networks again.

This module only classifies; ``tasks.fetch.net_guard`` applies it after DNS resolution, to the
address the connection then goes to (no second lookup, so no DNS rebinding window).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from ipaddress import IPv4Address, IPv4Network, IPv6Address, IPv6Network, ip_address, ip_network

Address = IPv4Address | IPv6Address
Network = IPv4Network | IPv6Network

#: The schemes a crawler fetches; everything else (file:, ftp:, gopher:, data:...) is refused.
ALLOWED_SCHEMES: frozenset[str] = frozenset({"http", "https"})
#: What the sandbox web and loopback test servers need: the allow-list to pass for them.
LOOPBACK_NETWORKS: tuple[str, ...] = ("127.0.0.0/8", "::1/128")

#: Refused ranges, most specific first, with the reason a history row names (IANA special-
#: purpose registries, RFC 6890 and successors). Anything else that Python does not consider
#: globally reachable is refused as ``reserved`` by ``classify``.
_REFUSED_V4: tuple[tuple[str, str], ...] = (
    ("169.254.169.254/32", "link-local (cloud metadata service)"),
    ("0.0.0.0/8", "unspecified ('this network')"),
    ("10.0.0.0/8", "private (RFC 1918)"),
    ("100.64.0.0/10", "shared address space (carrier-grade NAT)"),
    ("127.0.0.0/8", "loopback"),
    ("169.254.0.0/16", "link-local"),
    ("172.16.0.0/12", "private (RFC 1918)"),
    ("192.0.0.0/24", "reserved (IETF protocol assignments)"),
    ("192.0.2.0/24", "reserved (documentation)"),
    ("192.88.99.0/24", "reserved (6to4 relay anycast)"),
    ("192.168.0.0/16", "private (RFC 1918)"),
    ("198.18.0.0/15", "reserved (benchmarking)"),
    ("198.51.100.0/24", "reserved (documentation)"),
    ("203.0.113.0/24", "reserved (documentation)"),
    ("224.0.0.0/4", "multicast"),
    ("255.255.255.255/32", "broadcast"),
    ("240.0.0.0/4", "reserved (future use)"),
)
_REFUSED_V6: tuple[tuple[str, str], ...] = (
    ("::/128", "unspecified"),
    ("::1/128", "loopback"),
    ("::/96", "reserved (IPv4-compatible)"),
    ("64:ff9b:1::/48", "reserved (local NAT64)"),
    ("100::/64", "reserved (discard-only)"),
    ("2001:db8::/32", "reserved (documentation)"),
    ("2001::/23", "reserved (IETF protocol assignments)"),
    ("3fff::/20", "reserved (documentation)"),
    ("fc00::/7", "private (unique local)"),
    ("fe80::/10", "link-local"),
    ("fec0::/10", "reserved (site-local)"),
    ("ff00::/8", "multicast"),
)
_V4_TABLE = tuple((IPv4Network(net), why) for net, why in _REFUSED_V4)
_V6_TABLE = tuple((IPv6Network(net), why) for net, why in _REFUSED_V6)
_NAT64 = IPv6Network("64:ff9b::/96")
_SIX_TO_FOUR = IPv6Network("2002::/16")


def embedded_ipv4(address: IPv6Address) -> IPv4Address | None:
    """The IPv4 address an IPv6 form carries and routes to, if any.

    IPv4-mapped (``::ffff:a.b.c.d``), NAT64 (``64:ff9b::a.b.c.d``) and 6to4
    (``2002:AABB:CCDD::``) addresses all end up at an IPv4 host, so they are judged by it.
    """
    if address.ipv4_mapped is not None:
        return address.ipv4_mapped
    if address in _NAT64:
        return IPv4Address(int(address) & 0xFFFFFFFF)
    if address.sixtofour is not None:
        return address.sixtofour
    return None


def classify(address: Address) -> str | None:
    """Why the default policy refuses ``address`` (e.g. ``"loopback"``), None if public."""
    if isinstance(address, IPv6Address):
        inner = embedded_ipv4(address)
        if inner is not None:
            why = classify(inner)
            return None if why is None else f"{why} (carries IPv4 {inner})"
        for v6_network, v6_reason in _V6_TABLE:
            if address in v6_network:
                return v6_reason
    else:
        for v4_network, v4_reason in _V4_TABLE:
            if address in v4_network:
                return v4_reason
    if not address.is_global:
        return "reserved"
    return None


def parse_address(text: str) -> Address | None:
    """An IP literal (brackets and an IPv6 zone allowed), or None for a host name."""
    host = text.strip()
    if host.startswith("[") and host.endswith("]"):
        host = host[1:-1]
    host = host.split("%", 1)[0]  # fe80::1%eth0: the zone does not change the class
    try:
        return ip_address(host)
    except ValueError:
        return None


def parse_networks(values: Iterable[str]) -> tuple[Network, ...]:
    """Networks of an allow-list (``"127.0.0.0/8"``, ``"::1"``); ValueError names a bad one."""
    networks: list[Network] = []
    for value in values:
        text = value.strip()
        if not text:
            continue
        try:
            networks.append(ip_network(text, strict=True))
        except ValueError as exc:
            raise ValueError(
                f"allowed network {value!r} is not a CIDR network like '127.0.0.0/8' or "
                f"'::1' ({exc})"
            ) from None
    return tuple(networks)


@dataclass(frozen=True)
class AddressPolicy:
    """The default refusals, minus the networks of an explicit allow-list."""

    allowed: tuple[Network, ...] = ()

    @classmethod
    def from_strings(cls, networks: Iterable[str]) -> AddressPolicy:
        return cls(parse_networks(networks))

    def refused_class(self, address: Address) -> str | None:
        """The class that refuses ``address`` (``"loopback"``...), None when it is allowed."""
        judged: Address = address
        if isinstance(address, IPv6Address) and address.ipv4_mapped is not None:
            judged = address.ipv4_mapped  # the same host: allowed if its IPv4 form is
        for network in self.allowed:
            if judged.version == network.version and judged in network:
                return None
        return classify(judged)

    def refusal(self, address: Address) -> str | None:
        """Why ``address`` may not be contacted (``"127.0.0.1 is loopback"``), or None."""
        why = self.refused_class(address)
        return None if why is None else f"{address} is {why}"

    def scheme_refusal(self, scheme: str) -> str | None:
        """Why a URL scheme is refused (only http and https are fetched), or None."""
        if scheme.lower() in ALLOWED_SCHEMES:
            return None
        return f"scheme {scheme!r} is not fetched (only http and https)"

    def host_refusal(self, host: str) -> str | None:
        """Why a URL's host is refused without resolving it: an IP literal the policy refuses.

        Host names are judged after resolution, address by address; only literals are
        judged here, which is what a proxy or scraping API would otherwise connect to.
        """
        address = parse_address(host)
        return None if address is None else self.refusal(address)
