"""What an operator may store in the credential vault, checked before anything is sealed (pure).

A secret belongs to a project and has a name (``GIT_TOKEN``), the hosts it is bound to
(``git.example.com``, ``registry.example.com:8443``, an IP literal for an internal host; port 443
unless named) and how the proxy presents it on a request to one of them: as a header of its own
name (``header``), as ``Authorization: Bearer`` (``bearer``) or as ``Authorization: Basic`` with
a user name (``basic``). The phase sees only a placeholder (``placeholder``) in
``HELIX_SECRET_<NAME>``; the proxy replaces it in a bound request's headers (egress/interception.py).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from helix_runner.domain.addresses import normalize_host, parse_ip, split_host_port

MAX_SECRETS_PER_PROJECT = 64
MAX_HOSTS = 16
MAX_VALUE_BYTES = 8192
PRESENTATIONS = ("header", "bearer", "basic")
PLACEHOLDER_PREFIX = "helix-secret-placeholder:"
_NAME = re.compile(r"^[A-Z][A-Z0-9_]{0,63}$")
_HEADER = re.compile(r"^[A-Za-z0-9!#$%&'*+.^_`|~-]{1,64}$")  # an RFC 9110 token
_LABEL = re.compile(r"^(?!-)[a-z0-9-]{1,63}(?<!-)$")
_HOP_OR_FRAMING = frozenset({"host", "content-length", "transfer-encoding", "connection", "te", "upgrade",
                             "proxy-authorization", "proxy-connection", "keep-alive", "trailer", "expect"})


@dataclass(frozen=True)
class Presentation:
    """How the proxy presents a secret: ``kind`` one of PRESENTATIONS; ``header`` (kind header) its
    name, lower case; ``username`` (kind basic) the user name that goes with it."""

    kind: str
    header: str = ""
    username: str = ""

    def header_name(self) -> str:
        return self.header if self.kind == "header" else "authorization"

    def __str__(self) -> str:
        if self.kind == "header":
            return f"header {self.header}"
        return f"basic as {self.username}" if self.kind == "basic" else "bearer"


@dataclass(frozen=True)
class SecretBinding:
    """A secret's name, project, hosts and presentation (never its value)."""

    project: str
    name: str
    hosts: tuple[tuple[str, int], ...]
    presentation: Presentation

    def bound_to(self, host: str, port: int) -> bool:
        return (normalize_host(host), port) in self.hosts

    @property
    def env_name(self) -> str:
        return f"HELIX_SECRET_{self.name}"

    @property
    def placeholder(self) -> str:
        """What the phase sees in place of the value (the same for every phase: it is no secret)."""
        return f"{PLACEHOLDER_PREFIX}{self.name}"

    def host_strings(self) -> tuple[str, ...]:
        return tuple(f"[{h}]:{p}" if ":" in h else f"{h}:{p}" for h, p in self.hosts)


def parse_host(text: str) -> tuple[str, int]:
    """A bound host: ``name``, ``name:port``, an IP literal (``[v6]:port``); ValueError why not."""
    entry = text.strip()
    if not entry or len(entry) > 260:
        raise ValueError("must be 1 to 260 characters")
    host, port = split_host_port(entry)
    if "*" in host:
        raise ValueError("a secret is bound to exact hosts, not wildcards")
    if parse_ip(host) is None:
        try:
            name = host.rstrip(".").encode("idna").decode("ascii").lower()
        except UnicodeError:
            raise ValueError("is not a valid host name") from None
        labels = name.split(".")
        if len(name) > 253 or not all(_LABEL.match(label) for label in labels) or labels[-1].isdigit():
            raise ValueError("is not a host name (letters, digits, '-' between dots) or an IP address")
        host = name
    return normalize_host(host), port or 443


def validate(project: str, name: str, hosts: list[str], kind: str, header: str = "", username: str = "",
             value: bytes | None = None) -> SecretBinding:
    """A binding from a request's fields; ValueError naming the field (``field: problem``)."""
    if not project or len(project) > 128:
        raise ValueError("project: must be 1 to 128 characters")
    if not _NAME.match(name):
        raise ValueError("name: 1 to 64 of A-Z, 0-9 and '_', starting with a letter (it becomes HELIX_SECRET_<name>)")
    if not hosts or len(hosts) > MAX_HOSTS:
        raise ValueError(f"hosts: 1 to {MAX_HOSTS} hosts")
    parsed: list[tuple[str, int]] = []
    for host in hosts:
        try:
            parsed.append(parse_host(host))
        except ValueError as exc:
            raise ValueError(f"hosts: {host[:80]!r}: {exc}") from None
    if kind not in PRESENTATIONS:
        raise ValueError(f"presentation: one of {', '.join(PRESENTATIONS)}")
    if kind == "header":
        if not _HEADER.match(header):
            raise ValueError("header: a header name (letters, digits and -, at most 64)")
        if header.lower() in _HOP_OR_FRAMING:
            raise ValueError(f"header: {header!r} frames or routes the request; it cannot carry a secret")
    elif header:
        raise ValueError("header: only for presentation 'header'")
    if kind == "basic":
        if not username or len(username) > 256 or ":" in username or not username.isprintable():
            raise ValueError("username: 1 to 256 printable characters without ':' (basic)")
    elif username:
        raise ValueError("username: only for presentation 'basic'")
    if value is not None:
        if not value or len(value) > MAX_VALUE_BYTES:
            raise ValueError(f"value: 1 to {MAX_VALUE_BYTES} bytes")
        if any(b < 0x20 or b == 0x7F for b in value):
            raise ValueError("value: no control characters (it goes into an HTTP header)")
    return SecretBinding(project, name, tuple(dict.fromkeys(parsed)),
                         Presentation(kind, header.lower() if kind == "header" else "", username))
