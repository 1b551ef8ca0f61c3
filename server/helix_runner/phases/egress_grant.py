"""A phase's grant at the model-API gateway and the egress proxy (helix_runner/egress).

``PhaseEgress`` is made when a phase is admitted (the request's egress entries are validated then,
before anything is written), issues the phase's capability when its first CLI starts — or binds
the one a warm-pool CLI was started with — keeps it across the phase's attempts, and revokes it
when the phase ends. It is the grant's sink: what the gateway and the proxy report goes to the
phase's ``GatewayLedger`` (the result's diagnostics, InspectPhase), its event stream (a
``GatewayEvent`` as it happens, at most ``MAX_STREAM_EVENTS`` per phase) and the metrics.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from typing import Any

from helix_runner.config import ServerConfig
from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.domain.gateway_report import GatewayLedger, GatewayReport
from helix_runner.domain.usage import TokenUsage
from helix_runner.egress.allowlist import request_patterns
from helix_runner.egress.capabilities import Grant, ModelAllowlist
from helix_runner.egress.service import Egress
from helix_runner.egress.vault import PhaseCredentials, SealedSecret

log = logging.getLogger(__name__)

# A model that hammers a refused domain or an overloaded API must not flood its own stream; every
# event is still counted in the report and the metrics.
MAX_STREAM_EVENTS = 200
# Never capped: someone must see a held request to decide it.
_HOLD_KINDS = frozenset({GatewayEventKind.EGRESS_HELD, GatewayEventKind.EGRESS_APPROVED,
                         GatewayEventKind.EGRESS_DENIED})


def allowed_models(config: ServerConfig, project: str) -> tuple[str, ...] | None:
    """The project's model allowlist (``model_allowlist``: its own entry, else ``*``); None: any model."""
    table = config.model_allowlist
    models = table.get(project, table.get("*"))
    return tuple(models) if models else None


class PhaseEgress:
    """One phase's capability, policy and reports (the egress ``GrantSink``)."""

    def __init__(self, egress: Egress, *, job_id: str, phase_id: str, project: str,
                 models: tuple[str, ...] | None, request_entries: tuple[str, ...] = (),
                 features: tuple[str, ...] = (), secrets: tuple[SealedSecret, ...] = ()) -> None:
        self.egress = egress
        policy = egress.policy.with_entries(request_patterns(request_entries, egress.policy.ports))
        credentials = PhaseCredentials(egress.vault, secrets) if secrets and egress.vault is not None else None
        self.grant = Grant(job_id=job_id, phase_id=phase_id, project=project, sink=self,
                           models=ModelAllowlist(models) if models else None, egress=policy,
                           features=frozenset(features), credentials=credentials)
        self.ledger = GatewayLedger(
            egress_allowlist=tuple(str(p) for p in policy.allowlist) if egress.proxy is not None else (),
            allowed_models=models or ())
        self._capability: str | None = None
        self._emit: Callable[[GatewayEvent], Any] | None = None
        self._telemetry: Any = None
        self._at_limit: Callable[[str], Any] | None = None
        self._gate: Callable[..., Awaitable[str | None]] | None = None
        self._streamed = 0

    def attach(self, emit: Callable[[GatewayEvent], Any], telemetry: Any,
               at_limit: Callable[[str], Any] | None = None,
               gate: Callable[..., Awaitable[str | None]] | None = None) -> None:
        """Where events go (the phase's stream), which metrics count them (its PhaseTelemetry),
        what stops the phase at one of the proxy's caps, and what holds a request (network
        breakpoints, phases/egress_holds.py)."""
        self._emit, self._telemetry, self._at_limit, self._gate = emit, telemetry, at_limit, gate

    # -- the capability ---------------------------------------------------------------------------
    def child_env(self) -> dict[str, str]:
        """The CLI's capability variables; the capability is issued on first use and kept for every attempt."""
        if self._capability is None:
            self._capability = self.egress.capabilities.issue(self.grant)
        env = self.egress.capability_env(self._capability)
        if self.grant.credentials is not None and self.egress.proxy is not None:
            env.update(self.grant.credentials.placeholders())  # HELIX_SECRET_<NAME>: never the value
        return env

    def adopt(self, env: Mapping[str, str]) -> bool:
        """A warm-pool CLI takes the phase: its capability (in ``env``, issued unbound) becomes the phase's."""
        capability = self.egress.capability_in(env)
        if capability is None or not self.egress.capabilities.bind(capability, self.grant):
            log.error("a prestarted CLI's capability could not be bound to its phase; its API requests will "
                      "be refused", extra={"fields": {"job_id": self.grant.job_id, "phase_id": self.grant.phase_id}})
            return False
        if self._capability is not None:
            self.egress.capabilities.revoke(self._capability)
        self._capability = capability
        return True

    def revoke(self) -> None:
        """The phase ended: its capability authenticates nothing any more (safe to call twice)."""
        if self._capability is not None:
            self.egress.capabilities.revoke(self._capability)
            self._capability = None

    def report(self) -> GatewayReport:
        return self.ledger.snapshot()

    # -- GrantSink ----------------------------------------------------------------------------------
    def on_response(self, model: str, status: int, usage: TokenUsage | None) -> None:
        self.ledger.on_response(model, status, usage)
        if self._telemetry is not None:
            self._telemetry.on_gateway_response(model, status, usage)

    def on_event(self, event: GatewayEvent) -> None:
        self.ledger.on_event(event)
        if self._telemetry is not None:
            self._telemetry.on_gateway_event(event.kind)
        if self._emit is None:
            return
        if event.kind in _HOLD_KINDS:  # a held request and its decision: always shown, whatever came before
            self._emit(event)
        elif self._streamed < MAX_STREAM_EVENTS:
            self._streamed += 1
            self._emit(event)

    def on_egress_connection(self, destination: str) -> None:
        self.ledger.on_egress_connection()
        if self._telemetry is not None:
            self._telemetry.on_egress_connection()

    async def egress_gate(self, host: str, port: int, method: str, path: str, refusal: str | None) -> str | None:
        if self._gate is None:
            return refusal
        return await self._gate(host, port, method, path, refusal)

    def on_egress_limit(self, reason: str) -> None:
        if self._at_limit is not None:
            self._at_limit(reason)


def prestart_env(egress: Egress) -> dict[str, str]:
    """A warm-pool CLI's capability variables: a capability issued unbound, bound by ``PhaseEgress.adopt``."""
    return egress.capability_env(egress.capabilities.issue())


def release_prestart_env(egress: Egress, env: Mapping[str, str]) -> None:
    """A warm-pool CLI was discarded before a phase took it: its capability goes with it."""
    capability = egress.capability_in(env)
    if capability is not None:
        egress.capabilities.revoke(capability)
