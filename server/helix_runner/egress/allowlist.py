"""Which destinations a phase may reach through the egress proxy: domain allowlists and ports (pure).

A phase's policy is the server's allowlist (config ``egress_allowlist``) plus the entries its request
adds (``PhaseOptions.egress_allowlist``). An entry is a domain name (``pypi.org``: that name only)
or a wildcard (``*.pythonhosted.org``: every name below it, not the name itself), optionally with
one port (``example.com:8443``); IP literals are refused, so a request can only name what DNS
answers for, and every address is then checked (domain/addresses.py). Ports outside
``egress_allowed_ports`` are refused whatever the entry. The operator's ``host:port`` exceptions
(``egress_private_allow``) pass both checks; the server's own ports never do.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from helix_runner.domain.addresses import IPAddress, OperatorExceptions, parse_ip, refusal, split_host_port
from helix_runner.errors import ErrorKind, RunnerError

MAX_REQUEST_ENTRIES = 32
MAX_ENTRY_LENGTH = 260  # a 253-character name and ':65535'
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")


@dataclass(frozen=True)
class DomainPattern:
    """One allowlist entry: a name, or every name below it (``wildcard``), on one port or any allowed one."""

    domain: str  # lower case ASCII (IDNA), no trailing dot
    wildcard: bool = False
    port: int | None = None

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.domain)
        return host == self.domain

    def __str__(self) -> str:
        name = f"*.{self.domain}" if self.wildcard else self.domain
        return name if self.port is None else f"{name}:{self.port}"


def parse_pattern(text: str, allowed_ports: frozenset[int]) -> DomainPattern:
    """An allowlist entry; ValueError saying what is wrong with it."""
    entry = text.strip()
    if not entry or len(entry) > MAX_ENTRY_LENGTH:
        raise ValueError(f"must be 1 to {MAX_ENTRY_LENGTH} characters")
    host, port = split_host_port(entry)
    if parse_ip(host) is not None or entry.startswith("["):
        raise ValueError("IP addresses are not allowed: name a domain")
    wildcard = host.startswith("*.")
    if wildcard:
        host = host[2:]
    if "*" in host:
        raise ValueError("a wildcard is allowed only as the first label ('*.example.com')")
    try:
        name = host.rstrip(".").encode("idna").decode("ascii").lower()
    except UnicodeError:
        raise ValueError("is not a valid domain name") from None
    labels = name.split(".")
    if len(name) > 253 or len(labels) < 2 or not all(_LABEL.match(label) for label in labels):
        raise ValueError("is not a domain name of at least two labels (letters, digits, '-')")
    if labels[-1].isdigit():
        raise ValueError("IP addresses are not allowed: name a domain")
    if port is not None and port not in allowed_ports:
        raise ValueError(f"port {port} is not allowed (allowed: {_ports(allowed_ports)})")
    return DomainPattern(name, wildcard, port)


def request_patterns(entries: Iterable[str], allowed_ports: frozenset[int],
                     name: str = "options.egress_allowlist") -> tuple[DomainPattern, ...]:
    """A request's entries, validated; INVALID_ARGUMENT naming the field and the first bad entry."""
    entries = list(entries)
    if len(entries) > MAX_REQUEST_ENTRIES:
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{name}: at most {MAX_REQUEST_ENTRIES} "
                          f"entries, not {len(entries)}", {"field": name, "count": str(len(entries)),
                                                          "max": str(MAX_REQUEST_ENTRIES)})
    patterns = []
    for entry in entries:
        try:
            patterns.append(parse_pattern(entry, allowed_ports))
        except ValueError as exc:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{name}: {entry[:80]!r}: {exc}",
                              {"field": name, "entry": entry[:80], "problem": str(exc)}) from None
    return tuple(dict.fromkeys(patterns))


@dataclass(frozen=True)
class EgressPolicy:
    """What one phase may reach: its allowlist, the allowed ports, the operator's exceptions, and
    the server's own ports (never reachable)."""

    allowlist: tuple[DomainPattern, ...] = ()
    ports: frozenset[int] = frozenset({80, 443})
    exceptions: OperatorExceptions = field(default_factory=OperatorExceptions)
    own_ports: frozenset[int] = frozenset()

    def with_entries(self, patterns: Iterable[DomainPattern]) -> EgressPolicy:
        """This policy with a request's entries added."""
        return replace(self, allowlist=tuple(dict.fromkeys((*self.allowlist, *patterns))))

    def check_name(self, host: str, port: int) -> str | None:
        """Why ``host:port`` is refused before it is resolved, or None."""
        name = host.lower().rstrip(".")
        if self.exceptions.allows(name, port):
            return None
        if port not in self.ports:
            return f"port {port} is not allowed (allowed: {_ports(self.ports)})"
        if parse_ip(name) is not None:
            return "IP addresses are not allowed: the allowlist names domains"
        if not any(p.matches(name, port) for p in self.allowlist):
            return f"{name} is not in the phase's egress allowlist"
        return None

    def check_address(self, host: str, port: int, ip: IPAddress, *, local: bool) -> str | None:
        """Why connecting to ``ip`` (what ``host`` resolved to) on ``port`` is refused, or None.

        ``local``: ``ip`` is an address of this machine (the caller knows; this module is pure).
        """
        if (local or ip.is_loopback or ip.is_unspecified) and port in self.own_ports:
            return f"{ip}:{port} is one of the server's own ports"
        why = refusal(ip)
        if why is not None and not self.exceptions.allows(host, port, ip):
            return f"{host} resolved to {ip}, a {why} address"
        return None


def _ports(ports: Iterable[int]) -> str:
    return ", ".join(str(p) for p in sorted(ports))
