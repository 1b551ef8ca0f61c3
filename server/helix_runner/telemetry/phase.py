"""The telemetry of one phase, driven only by its domain events: metrics always, spans when tracing.

The phase runner calls four things, in order: ``on_start`` (the process is about to start),
``child_env`` (variables for the CLI child), ``on_events`` (every batch it publishes) and
``on_end`` (the final result). Everything else is derived from the events, so the same code can
be replayed over a recorded transcript (``tests/telemetry``).

Span tree (names low-cardinality; times are the events' receive times)::

    RunPhase (gRPC server span, parent from the request's W3C trace context)
      helix.attempt                  one per CLI process run (retries add more)
        invoke_agent claude-code     one per turn: from its first CLI line to its ``result`` line
          chat <model>               one per API message (model request)
          execute_tool <tool>        tool_use to tool_result; ``helix.hold`` child while held
            chat / execute_tool      a subagent's requests and calls nest under its Task/Agent call

Held time: a call is held from the control event that holds it (``PAUSED`` or ``BREAKPOINT_HIT``
with its id) until it is approved, denied or edited, the phase resumes or leaves the held status,
or the call shows activity (progress, a subagent line, its result). Run time is the call's
duration minus held time.
"""

from __future__ import annotations

import logging
import time
from collections import OrderedDict, deque
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING, Any

from opentelemetry import context as otel_context
from opentelemetry.trace import (
    NonRecordingSpan,
    Span,
    SpanContext,
    SpanKind,
    Status,
    StatusCode,
    Tracer,
    set_span_in_context,
)

from helix_runner.domain.events import (
    ApiError,
    ApiRetry,
    AssistantText,
    CliStatus,
    Compaction,
    ControlEvent,
    ControlEventKind,
    CostUpdate,
    Event,
    GatewayEvent,
    GatewayEventKind,
    ParseError,
    PhaseStatusChanged,
    RateLimit,
    SessionInit,
    TaskEvent,
    TaskEventKind,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnResult,
)
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.usage import TokenUsage
from helix_runner.telemetry import tracing as t
from helix_runner.telemetry.child_env import trace_context_env
from helix_runner.telemetry.metrics import TOKEN_KINDS, Metrics, rate_limit_label, status_label

if TYPE_CHECKING:
    from helix_runner.domain.cost_ledger import PhaseCostSnapshot
    from helix_runner.domain.phase_result import PhaseResult

log = logging.getLogger(__name__)

_HELD_STATUSES = frozenset({PhaseStatus.PAUSED, PhaseStatus.AWAITING_APPROVAL})
_HOLD_KINDS = frozenset({ControlEventKind.PAUSED, ControlEventKind.BREAKPOINT_HIT})
_RELEASE_KINDS = frozenset(
    {ControlEventKind.TOOL_APPROVED, ControlEventKind.TOOL_DENIED, ControlEventKind.TOOL_EDITED}
)
# Span contexts of finished tool calls kept so a subagent's late lines still nest under their call.
_TOOL_CONTEXTS_KEPT = 2048
_REASON_MAX = 512


class _Chat:
    """An open ``chat`` span: one API message, closed at its last line once something else follows."""

    __slots__ = ("message_id", "span", "last_ns")

    def __init__(self, message_id: str, span: Span, last_ns: int) -> None:
        self.message_id = message_id
        self.span = span
        self.last_ns = last_ns


# The egress events that are decisions on a request, as helix.egress.decision names them.
_EGRESS_DECISIONS = {
    GatewayEventKind.EGRESS_CONNECTION: "allowed",
    GatewayEventKind.EGRESS_REFUSED: "refused",
    GatewayEventKind.EGRESS_HELD: "held",
    GatewayEventKind.EGRESS_APPROVED: "approved",
    GatewayEventKind.EGRESS_DENIED: "denied",
}


class _Hold:
    __slots__ = ("since_ns", "breakpoint", "span")

    def __init__(self, since_ns: int, breakpoint: bool, span: Span | None) -> None:
        self.since_ns = since_ns
        self.breakpoint = breakpoint
        self.span = span


class PhaseTelemetry:
    """Metrics and spans of one phase; ``metrics`` and ``tracer`` may each be None (that part is off)."""

    def __init__(
        self,
        metrics: Metrics | None,
        tracer: Tracer | None,
        *,
        job_id: str,
        phase_id: str,
        project_id: str,
        model: str = "",
        parent: otel_context.Context | None = None,
    ) -> None:
        self._m = metrics
        self._tracer = tracer
        self.ids = {t.HELIX_JOB_ID: job_id, t.HELIX_PHASE_ID: phase_id, t.HELIX_PROJECT_ID: project_id}
        self._project = metrics.project(project_id) if metrics is not None else ""
        self._parent = parent
        self._model = model
        self._started = self._ended = False
        self._held_phase = False
        self._holds: dict[str, _Hold] = {}
        self._held_ns: dict[str, int] = {}
        self._token_hwm: dict[tuple[str, int], int] = {}
        self._cost_hwm: dict[tuple[str, str], float] = {}
        # Tracing state.
        self.attempt_number = 0
        self._attempt: Span | None = None
        # Turns without their result yet, oldest first: the CLI can start the next turn before it
        # writes the previous one's result (a background subagent's follow-up, corpus localcli-09),
        # and results come in turn order. The newest is the current turn; ``_turn_has_init`` is about it.
        self._turns: deque[Span] = deque()
        self._turn_has_init = False
        self._turn_index = 0
        self._session_id = ""
        self._chats: dict[str, _Chat] = {}
        self._requesting: dict[str, int] = {}
        self._tools: dict[str, Span] = {}
        self._tool_contexts: OrderedDict[str, SpanContext] = OrderedDict()
        # Handlers by payload class: the shared ones always (their span parts check that an attempt is
        # open), the span-only ones while an attempt is open.
        self._shared: dict[type, Callable[[Event], None]] = {}
        if metrics is not None or tracer is not None:
            self._shared = {
                ToolCallFinished: self._on_tool_finished,
                ApiRetry: self._on_api_retry,
                RateLimit: self._on_rate_limit,
                ParseError: self._on_parse_error,
                CostUpdate: self._on_cost_update,
                PhaseStatusChanged: self._on_status,
                ControlEvent: self._on_control,
                ToolProgress: self._on_tool_progress,
            }
        self._traced = {**self._shared}
        if tracer is not None:
            self._traced.update(
                {
                    SessionInit: self._on_session_init,
                    CliStatus: self._on_cli_status,
                    AssistantText: self._on_text,
                    Thinking: self._on_thinking,
                    ToolCallStarted: self._on_tool_started,
                    TurnResult: self._on_turn_result,
                    TaskEvent: self._on_task,
                    Compaction: self._on_compaction,
                    ApiError: self._on_api_error,
                    GatewayEvent: self._on_gateway,
                }
            )
        self._dispatch = self._shared

    @property
    def tracing(self) -> bool:
        return self._tracer is not None

    # -- the four calls of the phase runner ------------------------------------------------------

    def on_start(self, start_ns: int | None = None) -> None:
        """The phase's process is about to start: counts it running and opens attempt 1."""
        if self._started:
            return
        self._started = True
        if self._m is not None:
            self._m.phases_started.inc()
            self._m.phases_running.inc()
        self.start_attempt(start_ns)

    def start_attempt(self, start_ns: int | None = None) -> None:
        """Opens the span of the next attempt (the first from ``on_start``; a retry calls it again)."""
        if self._tracer is None:
            return
        now = start_ns or time.time_ns()
        if self._attempt is not None:
            self._close_open_spans(now, "a new attempt started")
            self._attempt.end(end_time=now)
        self.attempt_number += 1
        self._attempt = self._tracer.start_span(
            "helix.attempt",
            context=self._parent,
            kind=SpanKind.INTERNAL,
            start_time=now,
            attributes={
                **self.ids,
                t.HELIX_ATTEMPT: self.attempt_number,
                t.GEN_AI_AGENT_NAME: t.AGENT_NAME,
                t.GEN_AI_PROVIDER_NAME: t.PROVIDER_ANTHROPIC,
                **({t.GEN_AI_REQUEST_MODEL: self._model} if self._model else {}),
            },
        )
        self._turns.clear()
        self._chats.clear()
        self._requesting.clear()
        self._dispatch = self._traced

    # -- the gateway and the egress proxy (phases/egress_grant.py) -------------------------------------
    def on_gateway_response(self, model: str, status: int, usage: TokenUsage | None) -> None:
        """The API answered one of the phase's requests through the gateway."""
        if self._m is None:
            return
        label = self._m.model(model or "unknown")
        self._m.gateway_requests.labels(label, self._project, status_label(status)).inc()
        if usage is not None:
            for kind, value in zip(TOKEN_KINDS, (usage.input_tokens, usage.output_tokens,
                                                 usage.cache_read_input_tokens, usage.cache_write_5m_input_tokens,
                                                 usage.cache_write_1h_input_tokens), strict=True):
                if value:
                    self._m.gateway_tokens.labels(label, kind).inc(value)

    def on_gateway_event(self, kind: GatewayEventKind) -> None:
        if self._m is not None:
            self._m.gateway_events.labels(self._project, kind.name.lower()).inc()

    def on_egress_connection(self) -> None:
        if self._m is not None:
            self._m.egress_connections.labels(self._project).inc()

    def child_env(self, inherited: Mapping[str, str]) -> dict[str, str]:
        """``TRACEPARENT`` (the current attempt) and ``OTEL_RESOURCE_ATTRIBUTES`` for the CLI; {} when off."""
        if self._attempt is None:
            return {}
        attributes = {**self.ids, t.HELIX_ATTEMPT: str(self.attempt_number)}
        return trace_context_env(self._attempt.get_span_context(), attributes, inherited)

    def on_events(self, events: list[Event]) -> None:
        """Every batch of events the phase publishes, in order. Never raises into the phase."""
        try:
            self._observe(events)
        except Exception:
            # A telemetry bug must not end a phase: report it once and stop observing this phase.
            log.exception(
                "phase telemetry failed; it is off for this phase", extra={"fields": self._log_fields()}
            )
            self._shared = self._traced = self._dispatch = {}

    def _observe(self, events: list[Event]) -> None:
        if self._m is not None:
            self._m.events_published.inc(len(events))
        dispatch = self._dispatch
        if not dispatch:
            return
        holds = self._holds
        for e in events:
            handler = dispatch.get(e.payload.__class__)
            if handler is not None:
                handler(e)
            if holds and e.parent_tool_use_id in holds:  # a held call's subagent is working
                self._end_hold(e.parent_tool_use_id, e.receive_time_ns)

    def on_end(self, result: PhaseResult) -> None:
        """The final result: closes every span and settles the phase's metrics. Never raises."""
        if self._ended:
            return
        self._ended = True
        try:
            self._settle(result)
        except Exception:
            log.exception(
                "phase telemetry failed at the end of the phase", extra={"fields": self._log_fields()}
            )

    def on_moved(self) -> None:
        """The phase was handed over to another replica (issue 24): it no longer runs here, and it has
        not finished (the adopter counts its end). Its open spans end; never raises."""
        if self._ended:
            return
        self._ended = True
        try:
            now = time.time_ns()
            for tool_use_id in list(self._holds):
                self._end_hold(tool_use_id, now)
            m = self._m
            if m is not None:
                if self._started:
                    m.phases_running.dec()
                if self._held_phase:
                    self._held_phase = False
                    m.phases_held.dec()
            if self._attempt is not None:
                self._close_open_spans(now, "the phase moved to another replica")
                self._attempt.set_attribute(t.HELIX_PHASE_REASON, "moved to another replica")
                self._attempt.end(end_time=now)
                self._attempt = None
                self._dispatch = self._shared
        except Exception:
            log.exception("phase telemetry failed when the phase moved", extra={"fields": self._log_fields()})

    def _log_fields(self) -> dict[str, str]:
        return {"job_id": self.ids[t.HELIX_JOB_ID], "phase_id": self.ids[t.HELIX_PHASE_ID]}

    def _settle(self, result: PhaseResult) -> None:
        end_ns = result.end_time_ns or time.time_ns()
        for tool_use_id in list(self._holds):
            self._end_hold(tool_use_id, end_ns)
        m = self._m
        if m is not None:
            status = result.status.name
            m.phases_finished.labels(status).inc()
            if result.start_time_ns is not None:
                m.phase_duration.labels(status).observe(max(0, end_ns - result.start_time_ns) / 1e9)
            if self._started:
                m.phases_running.dec()
            if self._held_phase:
                self._held_phase = False
                m.phases_held.dec()
            for stats in result.tool_stats:
                if stats.unfinished:
                    m.tool_series(stats.name).unfinished.inc(stats.unfinished)
            if result.cost is not None:
                self._count_cost(result.cost)
        if self._attempt is not None:
            self._close_open_spans(end_ns, "the phase ended first")
            attempt = self._attempt
            attrs: dict[str, Any] = {
                t.HELIX_PHASE_STATUS: result.status.name,
                t.HELIX_PHASE_REASON: result.reason[:_REASON_MAX],
            }
            if result.exit_code is not None:
                attrs[t.HELIX_EXIT_CODE] = result.exit_code
            if result.session_id:
                attrs[t.GEN_AI_CONVERSATION_ID] = result.session_id
            if result.cost is not None:
                attrs[t.HELIX_COST_COMPUTED_USD] = result.cost.computed_usd
                if result.cost.reported_usd is not None:
                    attrs[t.HELIX_COST_REPORTED_USD] = result.cost.reported_usd
                attrs.update(t.gen_ai_usage(result.cost.tokens))
            attempt.set_attributes(attrs)
            if result.status is PhaseStatus.SUCCEEDED:
                attempt.set_status(Status(StatusCode.OK))
            else:
                attempt.set_attribute(t.ERROR_TYPE, result.status.name)
                attempt.set_status(Status(StatusCode.ERROR, result.reason[:_REASON_MAX]))
            attempt.end(end_time=end_ns)
            self._attempt = None
            self._dispatch = self._shared

    # -- metrics (and spans) from events -----------------------------------------------------------

    def _on_tool_finished(self, e: Event) -> None:
        p: ToolCallFinished = e.payload  # type: ignore[assignment]
        now = e.receive_time_ns
        self._end_hold(p.tool_use_id, now)
        held = self._held_ns.pop(p.tool_use_id, 0)
        if self._m is not None:
            series = self._m.tool_series(p.name)
            (series.error if p.is_error else series.success).inc()
            if p.duration_ns is not None:
                series.duration.observe(max(0, p.duration_ns - held) / 1e9)
            if held:
                series.held.observe(held / 1e9)
        if self._attempt is None:
            return
        self._end_chat(e.parent_tool_use_id)  # the message that asked for the call is complete
        span = self._tools.pop(p.tool_use_id, None)
        if span is None:  # an orphan result (its tool_use line was never seen)
            return
        if p.duration_ns is not None:
            span.set_attributes(
                {
                    t.HELIX_TOOL_DURATION_MS: p.duration_ns / 1e6,
                    t.HELIX_TOOL_HELD_MS: held / 1e6,
                    t.HELIX_TOOL_RUN_MS: max(0, p.duration_ns - held) / 1e6,
                }
            )
        if p.is_error:
            span.set_attribute(t.ERROR_TYPE, "tool_error")
            span.set_status(Status(StatusCode.ERROR, "the tool returned an error"))
        span.end(end_time=now)

    def _on_api_retry(self, e: Event) -> None:
        p: ApiRetry = e.payload  # type: ignore[assignment]
        if self._m is not None:
            self._m.api_retries.labels(status_label(p.error_status)).inc()
        if self._attempt is not None:
            self._scope_span(e.parent_tool_use_id).add_event(
                "helix.api_retry",
                {
                    "helix.retry.attempt": p.attempt,
                    "helix.retry.max_retries": p.max_retries,
                    "helix.retry.delay_ms": p.retry_delay_ms,
                    "http.response.status_code": p.error_status or 0,
                },
                timestamp=e.receive_time_ns,
            )

    def _on_rate_limit(self, e: Event) -> None:
        p: RateLimit = e.payload  # type: ignore[assignment]
        if self._m is not None:
            self._m.rate_limit_events.labels(rate_limit_label(p.status)).inc()
        if self._attempt is not None:
            self._scope_span(e.parent_tool_use_id).add_event(
                "helix.rate_limit",
                {"helix.rate_limit.status": p.status, "helix.rate_limit.type": p.rate_limit_type},
                timestamp=e.receive_time_ns,
            )

    def _on_parse_error(self, e: Event) -> None:
        if self._m is not None:
            self._m.parse_errors.labels(e.payload.reason.name.lower()).inc()  # type: ignore[union-attr]

    def _on_cost_update(self, e: Event) -> None:
        if self._m is not None:
            self._count_cost(e.payload.cost)  # type: ignore[union-attr]

    def _count_cost(self, snapshot: PhaseCostSnapshot) -> None:
        """Adds what grew since the last snapshot (running totals; counters only move up)."""
        m = self._m
        assert m is not None
        token_hwm, cost_hwm = self._token_hwm, self._cost_hwm
        for mc in snapshot.models:
            series = m.model_series(mc.model, self._project)
            tk = mc.tokens
            counts = (
                tk.input_tokens,
                tk.output_tokens,
                tk.cache_read_input_tokens,
                tk.cache_write_5m_input_tokens,
                tk.cache_write_1h_input_tokens,
                tk.web_search_requests,
            )
            for i, value in enumerate(counts):
                previous = token_hwm.get((mc.model, i), 0)
                if value > previous:
                    token_hwm[(mc.model, i)] = value
                    series.counts[i].inc(value - previous)
            for source, usd, counter in (
                ("reported", mc.reported_usd, series.reported_usd),
                ("computed", mc.computed_usd, series.computed_usd),
            ):
                if usd is None:
                    continue
                previous_usd = cost_hwm.get((mc.model, source), 0.0)
                if usd > previous_usd:
                    cost_hwm[(mc.model, source)] = usd
                    counter.inc(usd - previous_usd)

    def _on_status(self, e: Event) -> None:
        p: PhaseStatusChanged = e.payload  # type: ignore[assignment]
        held = p.to_status in _HELD_STATUSES
        if self._m is not None and held != self._held_phase:
            if held:
                self._m.phases_held.inc()
            else:
                self._m.phases_held.dec()
        self._held_phase = held
        if self._holds and p.to_status in (PhaseStatus.RUNNING, PhaseStatus.PAUSING):
            # RUNNING: nothing is held any more; PAUSING: pause holds were released (a step).
            for tool_use_id, hold in list(self._holds.items()):
                if p.to_status is PhaseStatus.RUNNING or not hold.breakpoint:
                    self._end_hold(tool_use_id, e.receive_time_ns)

    def _on_control(self, e: Event) -> None:
        p: ControlEvent = e.payload  # type: ignore[assignment]
        kind = p.kind
        if kind in _HOLD_KINDS and p.tool_use_id:
            self._start_hold(p.tool_use_id, e.receive_time_ns, p.breakpoint_id, kind)
        elif kind in _RELEASE_KINDS and p.tool_use_id:
            self._end_hold(p.tool_use_id, e.receive_time_ns)
        elif kind is ControlEventKind.RESUMED:
            for tool_use_id, hold in list(self._holds.items()):
                if not hold.breakpoint:
                    self._end_hold(tool_use_id, e.receive_time_ns)

    def _on_tool_progress(self, e: Event) -> None:
        self._end_hold(e.payload.tool_use_id, e.receive_time_ns)  # type: ignore[union-attr]

    def _on_gateway(self, e: Event) -> None:
        """One span per egress decision (``helix.egress``): a connection let through spans its life,
        a refusal, a held request and its decision are instants, each with the destination."""
        p = e.payload
        assert isinstance(p, GatewayEvent) and self._tracer is not None
        if p.kind not in _EGRESS_DECISIONS or self._attempt is None:
            return
        end = e.receive_time_ns
        start = end - p.duration_ns if p.kind is GatewayEventKind.EGRESS_CONNECTION else end
        attributes = {
            t.HELIX_EGRESS_DECISION: _EGRESS_DECISIONS[p.kind],
            "server.address": p.destination.rsplit(":", 1)[0],
            **({"server.port": int(p.destination.rsplit(":", 1)[1])} if p.destination.rpartition(":")[2].isdigit()
               else {}),
            **({"http.request.method": p.method} if p.method else {}),
            **({"url.path": p.path} if p.path else {}),
            **({"helix.egress.hold_id": p.hold_id} if p.hold_id else {}),
            **({"enduser.id": p.actor} if p.actor else {}),
        }
        if p.kind is GatewayEventKind.EGRESS_CONNECTION:
            attributes["helix.egress.bytes_sent"] = p.bytes_sent
            attributes["helix.egress.bytes_received"] = p.bytes_received
        span = self._tracer.start_span("helix.egress", context=set_span_in_context(self._scope_span("")),
                                       start_time=start, attributes=attributes)
        if p.kind in (GatewayEventKind.EGRESS_REFUSED, GatewayEventKind.EGRESS_DENIED):
            span.set_status(Status(StatusCode.ERROR, p.message[:200]))
        span.end(end_time=end)

    def _start_hold(self, tool_use_id: str, now: int, breakpoint_id: str, kind: ControlEventKind) -> None:
        if tool_use_id in self._holds:
            return
        span = None
        if self._tracer is not None and self._attempt is not None:
            parent = self._tools.get(tool_use_id) or self._scope_span("")
            span = self._tracer.start_span(
                "helix.hold",
                context=set_span_in_context(parent),
                start_time=now,
                attributes={
                    t.HELIX_HOLD_REASON: "breakpoint"
                    if kind is ControlEventKind.BREAKPOINT_HIT
                    else "paused",
                    **({t.HELIX_BREAKPOINT_ID: breakpoint_id} if breakpoint_id else {}),
                },
            )
        self._holds[tool_use_id] = _Hold(now, bool(breakpoint_id), span)

    def _end_hold(self, tool_use_id: str, now: int) -> None:
        hold = self._holds.pop(tool_use_id, None)
        if hold is None:
            return
        self._held_ns[tool_use_id] = self._held_ns.get(tool_use_id, 0) + max(0, now - hold.since_ns)
        if hold.span is not None:
            hold.span.end(end_time=now)

    # -- spans only --------------------------------------------------------------------------------

    def _on_session_init(self, e: Event) -> None:
        p: SessionInit = e.payload  # type: ignore[assignment]
        if p.model:
            self._model = p.model
        if e.parent_tool_use_id:
            return
        if self._turn_has_init or not self._turns:  # system/init starts every turn
            self._end_chat("")
            self._start_turn(e.receive_time_ns)
        self._turn_has_init = True
        turn = self._turns[-1]
        if e.session_id and e.session_id != self._session_id:
            self._session_id = e.session_id
            assert self._attempt is not None
            self._attempt.set_attribute(t.GEN_AI_CONVERSATION_ID, e.session_id)
        if e.session_id:
            turn.set_attribute(t.GEN_AI_CONVERSATION_ID, e.session_id)

    def _on_cli_status(self, e: Event) -> None:
        if e.payload.status != "requesting":  # type: ignore[union-attr]
            return
        scope = e.parent_tool_use_id
        self._end_chat(scope)
        if not scope:
            self._ensure_turn(e.receive_time_ns)
        self._requesting[scope] = e.receive_time_ns

    def _on_text(self, e: Event) -> None:
        p: AssistantText = e.payload  # type: ignore[assignment]
        self._message(e, p.message_id, p.model)

    def _on_thinking(self, e: Event) -> None:
        self._message(e, e.payload.message_id, "")  # type: ignore[union-attr]

    def _on_tool_started(self, e: Event) -> None:
        p: ToolCallStarted = e.payload  # type: ignore[assignment]
        now = e.receive_time_ns
        self._message(e, p.message_id, "")
        assert self._tracer is not None
        attrs: dict[str, Any] = {
            t.GEN_AI_OPERATION_NAME: t.OP_EXECUTE_TOOL,
            t.GEN_AI_TOOL_NAME: p.name,
            t.GEN_AI_TOOL_CALL_ID: p.tool_use_id,
            t.GEN_AI_TOOL_TYPE: "extension" if p.server_tool else "function",
        }
        if e.parent_tool_use_id:
            attrs[t.HELIX_TOOL_PARENT_ID] = e.parent_tool_use_id
        span = self._tracer.start_span(
            f"execute_tool {p.name}",
            context=set_span_in_context(self._scope_span(e.parent_tool_use_id)),
            kind=SpanKind.INTERNAL,
            start_time=now,
            attributes=attrs,
        )
        self._tools[p.tool_use_id] = span
        contexts = self._tool_contexts
        contexts[p.tool_use_id] = span.get_span_context()
        if len(contexts) > _TOOL_CONTEXTS_KEPT:
            contexts.popitem(last=False)

    def _on_turn_result(self, e: Event) -> None:
        if e.parent_tool_use_id:
            return
        p: TurnResult = e.payload  # type: ignore[assignment]
        now = e.receive_time_ns
        self._end_chat("")
        if not self._turns:  # a result without any line of its turn
            self._start_turn(now)
        turn = self._turns.popleft()
        if not self._turns:
            self._turn_has_init = False
        attrs: dict[str, Any] = {
            t.HELIX_TURN_SUBTYPE: p.subtype,
            t.HELIX_TURN_NUM_TURNS: p.num_turns,
            **t.gen_ai_usage(p.usage),
        }
        if p.stop_reason:
            attrs[t.GEN_AI_RESPONSE_FINISH_REASONS] = (p.stop_reason,)
        if p.total_cost_usd is not None:
            attrs[t.HELIX_TURN_COST_USD] = p.total_cost_usd
        turn.set_attributes(attrs)
        if p.is_error:
            turn.set_attribute(t.ERROR_TYPE, str(p.api_error_status) if p.api_error_status else p.subtype)
            turn.set_status(
                Status(StatusCode.ERROR, (p.errors[0] if p.errors else p.result_text)[:_REASON_MAX])
            )
        turn.end(end_time=now)

    def _on_task(self, e: Event) -> None:
        p: TaskEvent = e.payload  # type: ignore[assignment]
        if p.kind is TaskEventKind.STARTED and p.subagent_type:
            span = self._tools.get(p.tool_use_id)
            if span is not None:
                span.set_attribute(t.HELIX_SUBAGENT_TYPE, p.subagent_type)

    def _on_compaction(self, e: Event) -> None:
        p: Compaction = e.payload  # type: ignore[assignment]
        self._scope_span(e.parent_tool_use_id).add_event(
            "helix.compaction",
            {"helix.compaction.completed": p.completed, "helix.compaction.trigger": p.trigger},
            timestamp=e.receive_time_ns,
        )

    def _on_api_error(self, e: Event) -> None:
        p: ApiError = e.payload  # type: ignore[assignment]
        self._scope_span(e.parent_tool_use_id).add_event(
            "helix.api_error",
            {"http.response.status_code": p.api_error_status or 0, "helix.api_error": p.error},
            timestamp=e.receive_time_ns,
        )

    # -- span helpers ------------------------------------------------------------------------------

    def _ensure_turn(self, now: int) -> Span:
        return self._turns[-1] if self._turns else self._start_turn(now)

    def _start_turn(self, now: int) -> Span:
        assert self._tracer is not None and self._attempt is not None
        self._turn_index += 1
        self._turn_has_init = False
        turn = self._tracer.start_span(
            f"{t.OP_INVOKE_AGENT} {t.AGENT_NAME}",
            context=set_span_in_context(self._attempt),
            kind=SpanKind.INTERNAL,
            start_time=now,
            attributes={
                t.GEN_AI_OPERATION_NAME: t.OP_INVOKE_AGENT,
                t.GEN_AI_AGENT_NAME: t.AGENT_NAME,
                t.GEN_AI_PROVIDER_NAME: t.PROVIDER_ANTHROPIC,
                t.HELIX_TURN_INDEX: self._turn_index,
                **self.ids,
                **({t.GEN_AI_REQUEST_MODEL: self._model} if self._model else {}),
            },
        )
        self._turns.append(turn)
        return turn

    def _scope_span(self, scope: str) -> Span:
        """The parent for a line of ``scope`` (its parent_tool_use_id): that call, else the turn/attempt."""
        if scope:
            span = self._tools.get(scope)
            if span is not None:
                return span
            context = self._tool_contexts.get(scope)
            if context is not None:  # the call already ended (a background subagent goes on)
                return NonRecordingSpan(context)
        if self._turns:
            return self._turns[-1]
        assert self._attempt is not None
        return self._attempt

    def _message(self, e: Event, message_id: str, model: str) -> None:
        scope = e.parent_tool_use_id
        now = e.receive_time_ns
        chat = self._chats.get(scope)
        if chat is not None:
            if chat.message_id == message_id:
                chat.last_ns = now
                if model and chat.span.is_recording():
                    chat.span.set_attribute(t.GEN_AI_RESPONSE_MODEL, model)
                return
            self._end_chat(scope)
        if not scope:
            self._ensure_turn(now)
        assert self._tracer is not None
        model = model or self._model
        attrs: dict[str, Any] = {
            t.GEN_AI_OPERATION_NAME: t.OP_CHAT,
            t.GEN_AI_PROVIDER_NAME: t.PROVIDER_ANTHROPIC,
        }
        if model:
            attrs[t.GEN_AI_REQUEST_MODEL] = model
            attrs[t.GEN_AI_RESPONSE_MODEL] = model
        if message_id:
            attrs[t.GEN_AI_RESPONSE_ID] = message_id
        span = self._tracer.start_span(
            f"{t.OP_CHAT} {model}" if model else t.OP_CHAT,
            context=set_span_in_context(self._scope_span(scope)),
            kind=SpanKind.CLIENT,
            start_time=self._requesting.pop(scope, now),
            attributes=attrs,
        )
        self._chats[scope] = _Chat(message_id, span, now)

    def _end_chat(self, scope: str) -> None:
        chat = self._chats.pop(scope, None)
        if chat is not None:
            chat.span.end(end_time=chat.last_ns)

    def _close_open_spans(self, now: int, why: str) -> None:
        """Ends what the attempt left open: chats, unfinished tool calls (errors), the turn."""
        for scope in list(self._chats):
            self._end_chat(scope)
        for span in self._tools.values():
            span.set_attribute(t.ERROR_TYPE, "unfinished")
            span.set_status(Status(StatusCode.ERROR, f"the tool call never finished: {why}"))
            span.end(end_time=now)
        self._tools.clear()
        for turn in self._turns:
            turn.set_attribute(t.ERROR_TYPE, "incomplete")
            turn.set_status(Status(StatusCode.ERROR, f"the turn wrote no result: {why}"))
            turn.end(end_time=now)
        self._turns.clear()
        self._turn_has_init = False
