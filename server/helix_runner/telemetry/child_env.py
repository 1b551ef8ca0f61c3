"""What the CLI child needs to join our trace: ``TRACEPARENT`` and ``OTEL_RESOURCE_ATTRIBUTES``.

Claude Code 2.1.330 reads ``TRACEPARENT`` (and ``TRACESTATE``) in ``-p`` mode as the parent of its
``claude_code.interaction`` span, and its OpenTelemetry SDK reads ``OTEL_RESOURCE_ATTRIBUTES``; both
checked against the bundled binary (``tests/telemetry/test_real_phase_tracing.py`` runs it with
its own trace export on). The CLI exports spans only when the operator turns its telemetry on
(``CLAUDE_CODE_ENABLE_TELEMETRY=1``, ``CLAUDE_CODE_ENHANCED_TELEMETRY_BETA=1`` and an
``OTEL_TRACES_EXPORTER``); without that these variables cost it nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from urllib.parse import quote

from opentelemetry.trace import NonRecordingSpan, SpanContext, set_span_in_context
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

_W3C = TraceContextTextMapPropagator()


def resource_attributes(attributes: Mapping[str, str], inherited: str = "") -> str:
    """``OTEL_RESOURCE_ATTRIBUTES`` text: the inherited value, then ours (later keys win).

    Values are percent-encoded as the specification requires (W3C Baggage octets).
    """
    ours = ",".join(f"{key}={quote(value, safe='')}" for key, value in attributes.items() if value)
    return f"{inherited},{ours}" if inherited and ours else inherited or ours


def trace_context_env(
    span_context: SpanContext, attributes: Mapping[str, str], inherited: Mapping[str, str]
) -> dict[str, str]:
    """The variables to add to a child's environment so its spans nest under ``span_context``.

    Empty for an invalid context (tracing off): the child then gets nothing from us.
    """
    if not span_context.is_valid:
        return {}
    carrier: dict[str, str] = {}
    _W3C.inject(carrier, context=set_span_in_context(NonRecordingSpan(span_context)))
    env = {"TRACEPARENT": carrier["traceparent"]}
    if carrier.get("tracestate"):
        env["TRACESTATE"] = carrier["tracestate"]
    env["OTEL_RESOURCE_ATTRIBUTES"] = resource_attributes(
        attributes, inherited.get("OTEL_RESOURCE_ATTRIBUTES", "")
    )
    return env
