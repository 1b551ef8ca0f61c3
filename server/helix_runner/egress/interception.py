"""TLS termination in the egress proxy: for which hosts, with which contexts, and what a request gets.

The proxy terminates TLS only for a host the phase has a secret bound to (vault.py) or HTTP rules
for (allowlist.py); any other ``CONNECT`` stays a tunnel whose bytes it never reads, so certificate
pinning there still works. For a terminated host it connects upstream first and verifies the
upstream's certificate against the system's roots (and the operator's ``egress_upstream_ca_file``
for internal hosts), then answers the tool's ``CONNECT`` and presents a leaf of the server's own CA
(authority.py), which the phase trusts through its ``SSL_CERT_FILE`` and the like.

Inside, each HTTP/1.1 request is checked against the host's rules and gets the secrets bound to
the host: a placeholder the phase holds (``HELIX_SECRET_<NAME>``) is replaced by the value in any
header (also inside ``Basic`` credentials), and the secret's presentation header is set, replacing
one the tool sent. Only HTTP/1.1 is spoken inside (ALPN offers nothing else), and no protocol
upgrade (WebSocket) is passed on a terminated host.
"""

from __future__ import annotations

import base64
import binascii
import ssl
from pathlib import Path

from helix_runner.domain.egress_secrets import SecretBinding
from helix_runner.egress.authority import CertificateAuthority

HOP_BY_HOP = frozenset({b"keep-alive", b"proxy-connection", b"proxy-authorization", b"proxy-authenticate",
                        b"te", b"trailer", b"upgrade"})


class Interceptor:
    """The server's CA and the client context the proxy verifies upstreams with."""

    def __init__(self, authority: CertificateAuthority, upstream_ca_file: Path | None = None) -> None:
        self.authority = authority
        self.upstream_context = ssl.create_default_context()
        if upstream_ca_file is not None:
            self.upstream_context.load_verify_locations(cafile=str(upstream_ca_file))
        self.upstream_context.set_alpn_protocols(["http/1.1"])

    def server_context(self, host: str) -> ssl.SSLContext:
        return self.authority.server_context(host)


def presented(binding: SecretBinding, value: bytes) -> tuple[bytes, bytes]:
    """The header that presents ``value`` as ``binding`` says."""
    p = binding.presentation
    if p.kind == "bearer":
        return b"authorization", b"Bearer " + value
    if p.kind == "basic":
        return b"authorization", b"Basic " + base64.b64encode(p.username.encode() + b":" + value)
    return p.header.encode("latin-1"), value


def _substitute(value: bytes, swaps: list[tuple[bytes, bytes]]) -> bytes:
    for placeholder, real in swaps:
        if placeholder in value:
            value = value.replace(placeholder, real)
    if value[:6].lower() == b"basic ":  # credentials a tool made from a URL: user:placeholder
        try:
            decoded = base64.b64decode(value[6:].strip(), validate=True)
        except (binascii.Error, ValueError):
            return value
        changed = _substitute(decoded, swaps)
        if changed != decoded:
            return value[:6] + base64.b64encode(changed)
    return value


def with_secrets(headers: list[tuple[bytes, bytes]],
                 secrets: list[tuple[SecretBinding, bytes]]) -> list[tuple[bytes, bytes]]:
    """A bound request's headers: placeholders replaced, each secret's header set (first secret per
    header name wins); hop-by-hop proxy headers dropped. ``headers`` have lower-case names."""
    kept = [(k, v) for k, v in headers if k not in HOP_BY_HOP]
    if not secrets:
        return kept
    swaps = [(b.placeholder.encode(), value) for b, value in secrets]
    kept = [(k, _substitute(v, swaps)) for k, v in kept]
    set_here: dict[bytes, bytes] = {}
    for binding, value in secrets:
        name, header = presented(binding, value)
        set_here.setdefault(name, header)
    return [(k, v) for k, v in kept if k not in set_here] + list(set_here.items())
