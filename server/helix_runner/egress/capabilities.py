"""Per-phase capabilities: the random tokens a phase's CLI and tools present to the gateway and the proxy.

A capability stands for one phase's ``Grant``: which phase it is, what it may use (its project's
model allowlist, its egress policy) and where its usage and errors go (a ``GrantSink``). The phase
gets it in its environment instead of the API key (``ANTHROPIC_API_KEY``, sent as ``x-api-key``; CLI
2.1.332 sends ``ANTHROPIC_AUTH_TOKEN`` as ``authorization: Bearer``, which the gateway accepts too)
and in its proxy URL (``Proxy-Authorization``). It is issued when the phase starts and revoked when
it ends; a prestarted warm-pool CLI holds one issued unbound, which is bound to the phase that takes
the process. An unknown, unbound or revoked capability authenticates nothing.

The table is keyed by the token's SHA-256, so it never holds a token and a lookup's timing depends
on a digest, not on how much of a guess was right.
"""

from __future__ import annotations

import base64
import hashlib
import logging
import secrets
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from fnmatch import fnmatchcase
from typing import Protocol

from helix_runner.domain.events import GatewayEvent
from helix_runner.domain.usage import TokenUsage
from helix_runner.egress.allowlist import EgressPolicy
from helix_runner.egress.vault import PhaseCredentials

log = logging.getLogger(__name__)

PREFIX = "helix-cap-"


class GrantSink(Protocol):
    """Where the gateway and the proxy report what one phase did (called on the event loop)."""

    def on_response(self, model: str, status: int, usage: TokenUsage | None) -> None:
        """The API answered one of the phase's requests; ``usage`` as the answer reported it."""

    def on_event(self, event: GatewayEvent) -> None:
        """A refusal, a 429 / 529, or an unreachable API, as it happened."""

    def on_egress_connection(self, destination: str) -> None:
        """The egress proxy connected the phase to ``destination`` (host:port)."""

    def on_egress_limit(self, reason: str) -> None:
        """The phase passed one of the proxy's caps that ends it (``reason`` names the limit)."""

    async def egress_gate(self, host: str, port: int, method: str, path: str, refusal: str | None) -> str | None:
        """Why a request to ``host:port`` is refused, given ``refusal`` (the allowlist's answer, or
        None): a network breakpoint may hold it first, an earlier approval may let it through."""


@dataclass(frozen=True)
class ModelAllowlist:
    """The models a project may use: exact ids or ``*`` patterns (``claude-sonnet-4-5*``)."""

    patterns: tuple[str, ...]

    def allows(self, model: str) -> bool:
        return any(fnmatchcase(model, p) for p in self.patterns)


@dataclass(frozen=True)
class Grant:
    """What one phase's capability allows, and where its reports go."""

    job_id: str
    phase_id: str
    project: str
    sink: GrantSink
    models: ModelAllowlist | None = None  # None: any model
    # The API features that reach out (domain/api_features.py) this phase may use; none by default.
    features: frozenset[str] = frozenset()
    egress: EgressPolicy = EgressPolicy()
    # The project's vault secrets as the phase took them at its start (None: none, or no vault).
    credentials: PhaseCredentials | None = None
    # What the phase moved through the proxy so far (mutable: the proxy counts into it).
    traffic: EgressTraffic = field(default_factory=lambda: EgressTraffic())


@dataclass
class EgressTraffic:
    """Bytes one phase moved through the proxy (both ways), and the cap's verdict once it passed it."""

    bytes: int = 0
    over_limit: str = ""  # the reason, once the phase passed egress_max_bytes_per_phase


def _digest(token: str) -> bytes:
    return hashlib.sha256(token.encode()).digest()


class Capabilities:
    """The server's capability table (one per server, shared by the gateway and the proxy)."""

    def __init__(self) -> None:
        self._grants: dict[bytes, Grant | None] = {}  # digest -> grant (None: issued, not bound yet)

    def issue(self, grant: Grant | None = None) -> str:
        """A new capability, bound to ``grant`` (or unbound until ``bind``)."""
        token = PREFIX + secrets.token_urlsafe(32)
        self._grants[_digest(token)] = grant
        return token

    def bind(self, token: str, grant: Grant) -> bool:
        """Binds an unbound capability (a warm-pool CLI's) to a phase; False if it is unknown or bound."""
        digest = _digest(token)
        if digest not in self._grants or self._grants[digest] is not None:
            return False
        self._grants[digest] = grant
        return True

    def revoke(self, token: str) -> None:
        """The capability authenticates nothing from now on (its phase ended, its process was discarded)."""
        self._grants.pop(_digest(token), None)

    def grant(self, token: str | None) -> Grant | None:
        """The grant a presented capability stands for; None for anything else."""
        if not token or not token.startswith(PREFIX) or len(token) > 128:
            return None
        return self._grants.get(_digest(token))

    def __len__(self) -> int:
        return len(self._grants)


def presented_api_capability(headers: Sequence[tuple[bytes, bytes]]) -> str | None:
    """The capability of a Messages API request: ``x-api-key``, else ``authorization: Bearer``."""
    bearer = None
    for name, value in headers:
        if name == b"x-api-key":
            return value.decode("latin-1").strip()
        if name == b"authorization" and value[:7].lower() == b"bearer ":
            bearer = value[7:].decode("latin-1").strip()
    return bearer


def presented_proxy_capability(value: bytes | None) -> str | None:
    """The capability in a ``Proxy-Authorization: Basic base64(user:capability)`` header (any user)."""
    if not value or value[:6].lower() != b"basic ":
        return None
    try:
        decoded = base64.b64decode(value[6:].strip(), validate=True).decode("latin-1")
    except (ValueError, UnicodeDecodeError):
        return None
    _, sep, password = decoded.partition(":")
    return password if sep else None


def tell(report: Callable[..., None], *args: object) -> None:
    """Calls one of a grant sink's methods; what it raises is logged, never let into the traffic."""
    try:
        report(*args)
    except Exception:
        log.exception("a phase's gateway report failed")
