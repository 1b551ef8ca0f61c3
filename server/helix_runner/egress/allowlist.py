"""Which destinations a phase may reach through the egress proxy: domain allowlists and ports (pure).

A phase's policy is the server's allowlist (config ``egress_allowlist``) plus the entries its request
adds (``PhaseOptions.egress_allowlist``). An entry is a domain name (``pypi.org``: that name only)
or a wildcard (``*.pythonhosted.org``: every name below it, not the name itself), optionally with
one port (``example.com:8443``); IP literals are refused, so a request can only name what DNS
answers for, and every address is then checked (domain/addresses.py). Ports outside
``egress_allowed_ports`` are refused whatever the entry. The operator's ``host:port`` exceptions
(``egress_private_allow``) pass both checks; the server's own ports never do.

An entry can also be an HTTP rule: methods before the name and a path after it
(``GET,HEAD github.com/org/*``: those methods, paths under ``/org/``; ``POST api.example.com/v1/run``:
that one path). A host that only rules name is reached through the proxy's TLS termination
(egress/interception.py), and each request on it must match one of them; the refusal names the
rules. Entries add up: a plain entry for the same host lets every request through.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass, field, replace

from helix_runner.domain.addresses import IPAddress, OperatorExceptions, parse_ip, refusal, split_host_port
from helix_runner.errors import ErrorKind, RunnerError

MAX_REQUEST_ENTRIES = 32
MAX_ENTRY_LENGTH = 260  # a 253-character name and ':65535'
MAX_RULE_LENGTH = 1024  # methods, a name and a path
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_METHODS_WORD = re.compile(r"^[A-Z]+(,[A-Z]+)*\s")  # an entry that starts with methods
METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"})
# A path rule's characters: RFC 3986 pchar and '/', no '%' (a rule compares the path as sent, so
# an escape would match only one of its spellings), '*' only at the end (a prefix).
_PATH = re.compile(r"^/[A-Za-z0-9._~!$&'()+,;=:@/-]*\*?$")
# A request path that could mean another path to the server: dot segments, empty segments, escaped
# dots, slashes or backslashes. A rule-checked host refuses it rather than guess how it is read.
_AMBIGUOUS = re.compile(r"(^|/)\.{1,2}(/|$)|//|\\|%2[eEfF]|%5[cC]")


@dataclass(frozen=True)
class DomainPattern:
    """One allowlist entry: a name, or every name below it (``wildcard``), on one port or any allowed one."""

    domain: str  # lower case ASCII (IDNA), no trailing dot
    wildcard: bool = False
    port: int | None = None
    # An HTTP rule: the methods it allows (empty: any) and its path ('' any; ending in '*': a prefix).
    methods: frozenset[str] = frozenset()
    path: str = ""

    def matches(self, host: str, port: int) -> bool:
        if self.port is not None and port != self.port:
            return False
        if self.wildcard:
            return host.endswith("." + self.domain)
        return host == self.domain

    @property
    def is_rule(self) -> bool:
        """Whether the entry restricts requests (methods or a path), not only names a host."""
        return bool(self.methods or self.path)

    def allows_request(self, method: str, path: str) -> bool:
        """Whether a request's method and path (without its query) match this entry."""
        if self.methods and method not in self.methods:
            return False
        if not self.path:
            return True
        if self.path.endswith("*"):
            return path.startswith(self.path[:-1])
        return path == self.path

    def __str__(self) -> str:
        name = f"*.{self.domain}" if self.wildcard else self.domain
        name = name if self.port is None else f"{name}:{self.port}"
        methods = ",".join(sorted(self.methods))
        return f"{methods} {name}{self.path}" if methods else f"{name}{self.path}"


def parse_pattern(text: str, allowed_ports: frozenset[int]) -> DomainPattern:
    """An allowlist entry (a name, or an HTTP rule); ValueError saying what is wrong with it."""
    entry = text.strip()
    if "/" in entry or _METHODS_WORD.match(entry):
        return _parse_rule(entry, allowed_ports)
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


def _parse_rule(entry: str, allowed_ports: frozenset[int]) -> DomainPattern:
    """``[METHOD[,METHOD...]] host[:port][/path[*]]``."""
    if len(entry) > MAX_RULE_LENGTH:
        raise ValueError(f"an HTTP rule must be at most {MAX_RULE_LENGTH} characters")
    words = entry.split()
    if len(words) > 2:
        raise ValueError("an HTTP rule is 'METHODS host/path' (methods comma-separated, no spaces)")
    methods: frozenset[str] = frozenset()
    if len(words) == 2:
        named = words[0].split(",")
        unknown = [m for m in named if m not in METHODS]
        if unknown:
            raise ValueError(f"unknown method {unknown[0][:20]!r} (methods: {', '.join(sorted(METHODS))}, "
                             "upper case)")
        methods = frozenset(named)
    target = words[-1]
    slash = target.find("/")
    name, path = (target, "") if slash < 0 else (target[:slash], target[slash:])
    if path and not _PATH.match(path):
        raise ValueError("a rule's path starts with '/', has no '%', spaces or '*' except a final one")
    if path in ("/*", ""):
        path = ""  # every path: only the methods restrict
    if not methods and not path:
        raise ValueError("an HTTP rule names methods, a path, or both")
    return replace(parse_pattern(name, allowed_ports), methods=methods, path=path)


def ambiguous_path(path: str) -> bool:
    """Whether a request path has a spelling a server may read as another path (see ``_AMBIGUOUS``)."""
    return bool(_AMBIGUOUS.search(path))


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

    def deciding_entry(self, host: str, port: int, method: str = "", path: str = "") -> str:
        """What lets ``host:port`` (and the request, when given) through, in words: the HTTP rule or
        allowlist entry, or the operator's exception ("" when none does: an approval). For the
        phase's egress events."""
        name = host.lower().rstrip(".")
        if method:  # a request on a host with HTTP rules: the rule that let it through
            rule = next((r for r in self.http_rules(host, port) if r.allows_request(method, path)), None)
            if rule is not None:
                return str(rule)
        if self.exceptions.allows(name, port):
            return "operator exception (egress_private_allow)"
        return next((str(p) for p in self.allowlist if p.matches(name, port)), "")

    def http_rules(self, host: str, port: int) -> tuple[DomainPattern, ...]:
        """The rules each request to ``host:port`` must match; () when none restrict it (a plain
        entry names it too, or no rule does)."""
        name = host.lower().rstrip(".")
        rules = []
        for entry in self.allowlist:
            if entry.matches(name, port):
                if not entry.is_rule:
                    return ()
                rules.append(entry)
        return tuple(rules)

    def check_request(self, host: str, port: int, method: str, path: str) -> str | None:
        """Why a request (method, path without its query) to ``host:port`` is refused, or None."""
        rules = self.http_rules(host, port)
        if not rules:
            return None
        named = "; ".join(str(r) for r in rules[:8])
        if ambiguous_path(path):
            return f"the path {path[:200]!r} is not in canonical form (the rules for {host} compare paths: {named})"
        if any(r.allows_request(method, path) for r in rules):
            return None
        return f"{method} {host}{path[:200]} matches no HTTP rule for {host} (allowed: {named})"

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
