"""Which IP addresses the server may connect to on someone else's behalf (pure).

Only globally routable unicast addresses are allowed by default: a loopback, private, link-local
(169.254.169.254 and ``fd00:ec2::254``, the cloud metadata endpoints, among them), shared
(100.64/10), multicast, unspecified or otherwise reserved address is refused, and so is an IPv6
address that embeds such an IPv4 address (IPv4-mapped ``::ffff:a.b.c.d``, NAT64 ``64:ff9b::/96``,
6to4, Teredo), which would otherwise smuggle ``127.0.0.1`` past an IPv4-only check. The operator
(server config, never a request) may allow specific ``host:port`` pairs anyway (``OperatorExceptions``).

The check is made on the address the caller then connects to, never on a name: a name resolved
once for the check and again for the connection could answer differently the second time (DNS
rebinding). The egress proxy (egress/proxy.py) uses it; so can any other outbound connection a
caller steers (webhooks).
"""

from __future__ import annotations

import ipaddress
from collections.abc import Iterable
from dataclasses import dataclass

IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")
_SHARED = ipaddress.IPv4Network("100.64.0.0/10")


def parse_ip(text: str) -> IPAddress | None:
    """``text`` as an IP address (brackets and an IPv6 zone allowed), or None when it is a name."""
    text = text.strip("[]").split("%", 1)[0]
    try:
        return ipaddress.ip_address(text)
    except ValueError:
        return None


def embedded_ipv4(ip: IPAddress) -> tuple[ipaddress.IPv4Address, bool] | None:
    """The IPv4 address an IPv6 address carries, and whether it *is* that address (IPv4-mapped,
    NAT64) rather than a tunnel endpoint (6to4, Teredo); None when it carries none."""
    if isinstance(ip, ipaddress.IPv4Address):
        return None
    if ip.ipv4_mapped is not None:
        return ip.ipv4_mapped, True
    if ip in _NAT64:
        return ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF), True
    if ip.sixtofour is not None:
        return ip.sixtofour, False
    if ip.teredo is not None:
        return ip.teredo[1], False
    return None


def refusal(ip: IPAddress) -> str | None:
    """Why a connection to ``ip`` is refused by default (``"loopback"``, ``"private"``, ...), or None."""
    embedded = embedded_ipv4(ip)
    if embedded is not None:
        inner, same = embedded
        why = refusal(inner)
        if why is not None:
            return f"{why} (embedded in {ip})"
        if same:  # it is that public IPv4 address, reached another way
            return None
    if ip.is_unspecified:
        return "unspecified"
    if ip.is_loopback:
        return "loopback"
    if ip.is_link_local:
        return "link-local"
    if ip.is_multicast:
        return "multicast"
    if isinstance(ip, ipaddress.IPv4Address) and ip in _SHARED:
        return "shared address space"
    if ip.is_private:
        return "private"
    if ip.is_reserved or not ip.is_global:
        return "reserved"
    return None


@dataclass(frozen=True)
class OperatorExceptions:
    """``host:port`` pairs the operator allows although their addresses are not public.

    A pair names a host (a DNS name or an IP literal, compared as written in the config, lower
    case) and one port; it allows that host on that port whatever its addresses are, and nothing
    else. Never built from a request.
    """

    pairs: frozenset[tuple[str, int]] = frozenset()

    @classmethod
    def parse(cls, entries: Iterable[str]) -> OperatorExceptions:
        """From ``host:port`` / ``[v6]:port`` entries; ValueError naming a bad one."""
        pairs = set()
        for entry in entries:
            host, port = split_host_port(entry.strip())
            if port is None:
                raise ValueError(f"{entry!r} must be host:port (one port)")
            pairs.add((normalize_host(host), port))
        return cls(frozenset(pairs))

    def allows(self, host: str, port: int, ip: IPAddress | None = None) -> bool:
        """Whether ``host:port`` (or the address it resolved to, ``ip``) is an exception."""
        if (normalize_host(host), port) in self.pairs:
            return True
        return ip is not None and (str(ip), port) in self.pairs


def normalize_host(host: str) -> str:
    """A host as compared: lower case, no trailing dot, an IP literal in its canonical form."""
    ip = parse_ip(host)
    if ip is not None:
        return str(ip)
    return host.lower().rstrip(".")


def split_host_port(text: str) -> tuple[str, int | None]:
    """``host``, ``host:port``, ``[v6]`` or ``[v6]:port``; ValueError for a bad port or bracket."""
    if text.startswith("["):
        end = text.find("]")
        if end < 0:
            raise ValueError(f"{text!r}: unclosed '['")
        host, rest = text[1:end], text[end + 1 :]
        if rest and not rest.startswith(":"):
            raise ValueError(f"{text!r}: unexpected text after ']'")
        return host, _port(rest[1:], text) if rest else None
    if text.count(":") == 1:
        host, port = text.split(":")
        return host, _port(port, text)
    return text, None


def _port(text: str, whole: str) -> int:
    if not text.isdigit() or not 0 < int(text) < 65536:
        raise ValueError(f"{whole!r}: the port must be 1-65535")
    return int(text)
