"""One-line human summaries of StreamEvents (for `helix-runner run` and InspectPhase)."""

from __future__ import annotations

from helix.runner.v1 import events_pb2


def describe(event: events_pb2.StreamEvent) -> str | None:
    """A one-line description of events worth a line of their own in non-terminal output."""
    kind = event.WhichOneof("payload")
    p = getattr(event, kind)
    if kind == "session_init":
        return f"session {event.session_id} model {p.model} (CLI {p.cli_version})"
    if kind == "tool_call_started":
        return f"→ {p.name} {p.input_json[:100]}"
    if kind == "tool_call_finished":
        mark = "✗" if p.is_error else "✓"
        return f"{mark} {p.name} ({p.duration.ToMilliseconds()} ms) {p.content_preview[:100]!r}"
    if kind == "api_retry":
        return f"API retry {p.attempt}/{p.max_retries}: {p.error} (HTTP {p.error_status})"
    if kind == "assistant_text":
        return f"assistant: {p.text[:200]}"
    if kind == "turn_result":
        return f"turn result: {p.subtype} is_error={p.is_error}"
    if kind == "stderr":
        return f"stderr: {p.text[:200]}"
    if kind == "gateway":
        what = events_pb2.GatewayEventKind.Name(p.kind).removeprefix("GATEWAY_EVENT_KIND_").lower()
        where = p.destination or p.model
        return f"gateway: {what.replace('_', ' ')}{f' {where}' if where else ''} (HTTP {p.http_status}) {p.message[:160]}"
    if kind == "parse_error":
        if p.repaired:
            return f"repaired stdout line ({p.line_bytes} bytes): {p.detail}"
        return f"unparsable stdout line ({p.line_bytes} bytes)"
    return None


def summarize(event: events_pb2.StreamEvent) -> str:
    """A summary for any event: the notable ones described, the rest by their kind."""
    return describe(event) or (event.WhichOneof("payload") or "event").replace("_", " ")
