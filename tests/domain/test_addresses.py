"""The address rules: what the proxy (and any caller-steered connection) may connect to."""

from __future__ import annotations

import ipaddress

import pytest

from helix_runner.domain.addresses import (
    OperatorExceptions,
    embedded_ipv4,
    parse_ip,
    refusal,
    split_host_port,
)


@pytest.mark.parametrize(("address", "why"), [
    ("127.0.0.1", "loopback"),
    ("127.9.9.9", "loopback"),
    ("::1", "loopback"),
    ("10.1.2.3", "private"),
    ("172.16.0.1", "private"),
    ("192.168.1.1", "private"),
    ("169.254.169.254", "link-local"),  # the cloud metadata endpoint
    ("fd00:ec2::254", "private"),  # AWS's IPv6 metadata endpoint (unique local)
    ("fe80::1", "link-local"),
    ("224.0.0.1", "multicast"),
    ("ff02::1", "multicast"),
    ("0.0.0.0", "unspecified"),
    ("::", "unspecified"),
    ("100.64.1.1", "shared address space"),
    ("255.255.255.255", "private"),
    ("::127.0.0.1", "reserved"),
])  # fmt: skip
def test_non_public_addresses_are_refused(address: str, why: str) -> None:
    assert refusal(ipaddress.ip_address(address)) == why


@pytest.mark.parametrize("address", [
    "::ffff:127.0.0.1",  # IPv4-mapped
    "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
    "2002:7f00:1::1",  # 6to4 around 127.0.0.1
    "::ffff:169.254.169.254",
])  # fmt: skip
def test_an_ipv6_address_cannot_smuggle_a_refused_ipv4_address(address: str) -> None:
    why = refusal(ipaddress.ip_address(address))
    assert why is not None and "embedded" in why


@pytest.mark.parametrize("address", ["8.8.8.8", "93.184.216.34", "2606:4700::1111", "::ffff:8.8.8.8",
                                     "64:ff9b::808:808"])
def test_public_addresses_are_allowed(address: str) -> None:
    assert refusal(ipaddress.ip_address(address)) is None


def test_embedded_ipv4_tells_an_alias_from_a_tunnel_endpoint() -> None:
    assert embedded_ipv4(ipaddress.ip_address("::ffff:1.2.3.4")) == (ipaddress.ip_address("1.2.3.4"), True)
    assert embedded_ipv4(ipaddress.ip_address("2002:0102:0304::1")) == (ipaddress.ip_address("1.2.3.4"), False)
    assert embedded_ipv4(ipaddress.ip_address("2606:4700::1111")) is None


def test_parse_ip_and_split_host_port() -> None:
    assert parse_ip("[::1]") == ipaddress.ip_address("::1")
    assert parse_ip("fe80::1%eth0") == ipaddress.ip_address("fe80::1")
    assert parse_ip("example.com") is None
    assert split_host_port("example.com:443") == ("example.com", 443)
    assert split_host_port("[::1]:8080") == ("::1", 8080)
    assert split_host_port("example.com") == ("example.com", None)
    for bad in ("example.com:0", "example.com:99999", "example.com:x", "[::1", "[::1]x"):
        with pytest.raises(ValueError):
            split_host_port(bad)


def test_operator_exceptions_allow_one_host_on_one_port() -> None:
    exceptions = OperatorExceptions.parse(["Registry.Internal:8080", "127.0.0.2:3141", "[::1]:9000"])
    assert exceptions.allows("registry.internal", 8080)
    assert exceptions.allows("registry.internal.", 8080)
    assert not exceptions.allows("registry.internal", 8081)
    assert not exceptions.allows("other.internal", 8080)
    # By address: what a name resolved to, when the operator named the address.
    assert exceptions.allows("some.name", 3141, ipaddress.ip_address("127.0.0.2"))
    assert not exceptions.allows("some.name", 3141, ipaddress.ip_address("127.0.0.3"))
    assert exceptions.allows("::1", 9000)
    with pytest.raises(ValueError, match="host:port"):
        OperatorExceptions.parse(["registry.internal"])
