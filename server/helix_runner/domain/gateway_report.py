"""What the model-API gateway and the egress proxy measured for one phase (``resources.proto`` GatewayReport).

The gateway sees every Messages API request of the phase's CLI: it counts the tokens each answer
reports (the SSE ``message_start`` / ``message_delta`` usage, or the JSON body's), per model, and the
rate-limit and overload answers as they pass. That is measured at the wire, independent of what the
CLI reports in its own result (``PhaseCost``), so the two can be put side by side. The egress proxy
adds its connections and refusals. ``GatewayLedger`` accumulates; ``GatewayReport`` is a snapshot.
"""

from __future__ import annotations

import msgspec

from helix_runner.domain.events import GatewayEvent, GatewayEventKind
from helix_runner.domain.usage import TokenUsage


class GatewayModelUsage(msgspec.Struct, frozen=True, gc=False):
    """One model's measured requests and tokens."""

    model: str
    requests: int
    tokens: TokenUsage


class GatewayReport(msgspec.Struct, frozen=True, gc=False):
    """The gateway's and the egress proxy's figures for one phase (all its attempts)."""

    requests: int = 0  # answered by the API (whatever the status)
    models: tuple[GatewayModelUsage, ...] = ()
    rate_limited: int = 0  # 429 answers
    overloaded: int = 0  # 529 answers and mid-stream overloaded_error events
    api_errors: int = 0  # other 4xx / 5xx answers of the API
    model_refusals: int = 0
    upstream_failures: int = 0
    egress_connections: int = 0
    egress_refusals: int = 0
    egress_allowlist: tuple[str, ...] = ()  # the phase's own: the server's entries and the request's
    allowed_models: tuple[str, ...] = ()  # the project's model allowlist (empty: any model)
    feature_refusals: int = 0  # requests refused for an API feature that reaches out (api_features.py)

    @property
    def tokens(self) -> TokenUsage:
        """Every model's tokens together."""
        total = TokenUsage()
        for m in self.models:
            total = total + m.tokens
        return total


class GatewayLedger:
    """Accumulates a phase's gateway figures as requests end and events happen (one per phase)."""

    def __init__(self, egress_allowlist: tuple[str, ...] = (), allowed_models: tuple[str, ...] = ()):
        self._egress_allowlist = egress_allowlist
        self._allowed_models = allowed_models
        self._models: dict[str, list] = {}  # model -> [requests, TokenUsage]
        self._counts = dict.fromkeys(("requests", "rate_limited", "overloaded", "api_errors", "model_refusals",
                                      "upstream_failures", "egress_connections", "egress_refusals", "feature_refusals"), 0)

    def on_response(self, model: str, status: int, usage: TokenUsage | None) -> None:
        """The API answered one request (the stream ended or was cut); ``usage`` as it reported it."""
        self._counts["requests"] += 1
        entry = self._models.setdefault(model or "(unknown)", [0, TokenUsage()])
        entry[0] += 1
        if usage is not None:
            entry[1] = entry[1] + usage
        if status >= 400 and status not in (429, 529):
            self._counts["api_errors"] += 1

    def on_event(self, event: GatewayEvent) -> None:
        """A gateway event of the phase (each one counted, whether or not it reached the stream)."""
        key = _COUNTED.get(event.kind)
        if key is not None:
            self._counts[key] += 1

    def on_egress_connection(self) -> None:
        self._counts["egress_connections"] += 1

    def snapshot(self) -> GatewayReport:
        models = tuple(GatewayModelUsage(name, requests, tokens)
                       for name, (requests, tokens) in sorted(self._models.items()))
        return GatewayReport(models=models, egress_allowlist=self._egress_allowlist,
                             allowed_models=self._allowed_models, **self._counts)


_COUNTED = {
    GatewayEventKind.RATE_LIMITED: "rate_limited",
    GatewayEventKind.OVERLOADED: "overloaded",
    GatewayEventKind.MODEL_REFUSED: "model_refusals",
    GatewayEventKind.EGRESS_REFUSED: "egress_refusals",
    GatewayEventKind.UPSTREAM_FAILED: "upstream_failures",
    GatewayEventKind.FEATURE_REFUSED: "feature_refusals",
}
