"""Domain events and records → the contract's protobuf messages (``StreamEvent``, ``ToolCall``, ...).

The domain dataclasses mirror the proto field by field, so each converter is a plain copy; the
only translations are units (ns/ms → ``Duration``/``Timestamp``), ``None`` → an unset optional
field, and enums (the domain enums carry the proto numbers). This is the only module of the stream
engine that imports generated code.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from google.protobuf import duration_pb2, timestamp_pb2

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix_runner.domain import events as d
from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.tool_tracker import ToolCall, ToolStats

# Numbers the CLI writes are unbounded in JSON; the proto's are not. Out-of-range values are
# clamped rather than failing the whole event (the mapping is total).
_I32_MIN, _I32_MAX = -(2**31), 2**31 - 1
_I64_MIN, _I64_MAX = -(2**63), 2**63 - 1
_DURATION_MAX_NS = 315_576_000_000 * 1_000_000_000  # google.protobuf.Duration's range
_TIMESTAMP_MIN_S, _TIMESTAMP_MAX_S = -62_135_596_800, 253_402_300_799  # years 1 to 9999


def _i32(value: int) -> int:
    return _I32_MAX if value > _I32_MAX else _I32_MIN if value < _I32_MIN else value


def _i64(value: int) -> int:
    return _I64_MAX if value > _I64_MAX else _I64_MIN if value < _I64_MIN else value


def _set_duration_ns(field: duration_pb2.Duration, ns: int) -> None:
    field.FromNanoseconds(max(-_DURATION_MAX_NS, min(ns, _DURATION_MAX_NS)))


def _set_duration_ms(field: duration_pb2.Duration, ms: int) -> None:
    _set_duration_ns(field, ms * 1_000_000)


_Timestamp = timestamp_pb2.Timestamp


def _duration_ns(ns: int) -> duration_pb2.Duration:
    value = duration_pb2.Duration()
    _set_duration_ns(value, ns)
    return value


def _timestamp_ns(ns: int) -> timestamp_pb2.Timestamp:
    # The constructor, not Timestamp.FromNanoseconds (Python code in protobuf's well-known types):
    # ~1.8 µs of the ~6 µs it took to encode an event (every event has a receive_time). Same value:
    # FromNanoseconds also floors the seconds and keeps nanos in [0, 1e9).
    seconds, nanos = divmod(ns, 1_000_000_000)
    return _Timestamp(seconds=seconds, nanos=nanos)


# --------------------------------------------------------------------------------------------------
# Values.


def token_usage_to_proto(usage: d.TokenUsage) -> res.TokenUsage:
    """TokenUsage → resources.TokenUsage."""
    return res.TokenUsage(
        input_tokens=_i64(usage.input_tokens),
        output_tokens=_i64(usage.output_tokens),
        cache_read_input_tokens=_i64(usage.cache_read_input_tokens),
        cache_write_5m_input_tokens=_i64(usage.cache_write_5m_input_tokens),
        cache_write_1h_input_tokens=_i64(usage.cache_write_1h_input_tokens),
        web_search_requests=_i64(usage.web_search_requests),
    )


def model_cost_to_proto(cost: ModelCost) -> res.ModelCost:
    """ModelCost → resources.ModelCost (``reported_usd`` unset when the CLI gave none)."""
    msg = res.ModelCost(
        model=cost.model,
        tokens=token_usage_to_proto(cost.tokens),
        computed_usd=cost.computed_usd,
        pricing_source=int(cost.pricing_source),
    )
    if cost.reported_usd is not None:
        msg.reported_usd = cost.reported_usd
    return msg


def phase_cost_to_proto(cost: PhaseCostSnapshot) -> res.PhaseCost:
    """PhaseCostSnapshot → resources.PhaseCost (reported/difference unset without a result)."""
    msg = res.PhaseCost(
        computed_usd=cost.computed_usd,
        computed_only=cost.computed_only,
        tokens=token_usage_to_proto(cost.tokens),
        models=[model_cost_to_proto(m) for m in cost.models],
        unpriced_models=list(cost.unpriced_models),
    )
    if cost.reported_usd is not None:
        msg.reported_usd = cost.reported_usd
    if cost.difference_usd is not None:
        msg.difference_usd = cost.difference_usd
    return msg


def queue_state_to_proto(state: d.QueueState) -> res.QueueState:
    """QueueState → resources.QueueState (``not_before`` unset when the phase waits only for a slot)."""
    msg = res.QueueState(
        reason=int(state.reason),
        detail=state.detail,
        position=_i32(state.position),
        queued_count=_i32(state.queued_count),
        next_attempt=_i32(state.next_attempt),
    )
    if state.not_before_ns is not None:
        msg.not_before.CopyFrom(_timestamp_ns(state.not_before_ns))
    if state.enqueue_time_ns:
        msg.enqueue_time.CopyFrom(_timestamp_ns(state.enqueue_time_ns))
    return msg


def attempt_to_proto(attempt: Attempt) -> res.Attempt:
    """Attempt → resources.Attempt (optional numbers and times unset when unknown)."""
    msg = res.Attempt(
        number=_i32(attempt.number),
        status=int(attempt.status),
        reason=attempt.reason,
        end_kind=int(attempt.end_kind),
        retryable=attempt.retryable,
        exit_signal=attempt.exit_signal or "",
        session_id=attempt.session_id,
        resumed_session_id=attempt.resumed_session_id,
        first_sequence=_i64(attempt.first_sequence),
        last_sequence=_i64(attempt.last_sequence),
        startup_failure_reason=attempt.startup_failure_reason,
        replica_id=attempt.replica_id,
    )
    if attempt.exit_code is not None:
        msg.exit_code = _i32(attempt.exit_code)
    if attempt.api_error_status is not None:
        msg.api_error_status = _i32(attempt.api_error_status)
    if attempt.start_time_ns is not None:
        msg.start_time.CopyFrom(_timestamp_ns(attempt.start_time_ns))
    if attempt.end_time_ns is not None:
        msg.end_time.CopyFrom(_timestamp_ns(attempt.end_time_ns))
    if attempt.cost is not None:
        msg.cost.CopyFrom(phase_cost_to_proto(attempt.cost))
    if attempt.retry_delay_ns is not None:
        _set_duration_ns(msg.retry_delay, attempt.retry_delay_ns)
    return msg


def tool_call_to_proto(call: ToolCall, *, job_id: str = "", phase_id: str = "") -> res.ToolCall:
    """ToolCall → resources.ToolCall (end time and duration unset while the call runs)."""
    msg = res.ToolCall(
        job_id=job_id,
        phase_id=phase_id,
        tool_use_id=call.tool_use_id,
        name=call.name,
        input_json=call.input_json,
        input_bytes=call.input_bytes,
        input_truncated=call.input_truncated,
        parent_tool_use_id=call.parent_tool_use_id,
        status=int(call.status),
        start_time=_timestamp_ns(call.start_time_ns),
        result_preview=call.result_preview,
        result_bytes=call.result_bytes,
        result_truncated=call.result_truncated,
        structured_result_json=call.structured_result_json,
        structured_result_truncated=call.structured_result_truncated,
        start_sequence=call.start_sequence,
        end_sequence=call.end_sequence,
        held_by_breakpoint_id=call.held_by_breakpoint_id,
    )
    if call.end_time_ns is not None:
        msg.end_time.FromNanoseconds(call.end_time_ns)
        _set_duration_ns(msg.duration, max(call.end_time_ns - call.start_time_ns, 0))
    return msg


def add_permission_denials(target: Any, denials: Iterable[d.PermissionDenial]) -> None:
    """Appends denials to a repeated ``PermissionDenial`` field (TurnResult's or PhaseResult's)."""
    for denial in denials:
        target.add(tool_name=denial.tool_name, tool_use_id=denial.tool_use_id,
                   tool_input_json=denial.tool_input_json)


def tool_stats_to_proto(stats: ToolStats) -> res.ToolStats:
    """ToolStats → resources.ToolStats."""
    return res.ToolStats(
        name=stats.name,
        count=stats.count,
        failures=stats.failures,
        unfinished=stats.unfinished,
        total_duration=_duration_ns(stats.total_duration_ns),
        mean_duration=_duration_ns(stats.mean_duration_ns),
        p95_duration=_duration_ns(stats.p95_duration_ns),
    )


# --------------------------------------------------------------------------------------------------
# Payloads: each converter fills the StreamEvent's oneof field in place.


def _session_init(p: d.SessionInit, m: ev.SessionInit) -> None:
    m.model = p.model
    m.tools.extend(p.tools)
    m.cwd = p.cwd
    m.cli_version = p.cli_version
    m.permission_mode = p.permission_mode
    m.mcp_servers.extend(p.mcp_servers)
    m.capabilities.extend(p.capabilities)
    m.api_key_source = p.api_key_source
    m.turn_index = _i32(p.turn_index)


def _assistant_text(p: d.AssistantText, m: ev.AssistantText) -> None:
    m.text = p.text
    m.text_bytes = p.text_bytes
    m.text_truncated = p.text_truncated
    m.message_id = p.message_id
    m.model = p.model


def _thinking(p: d.Thinking, m: ev.Thinking) -> None:
    m.text = p.text
    m.text_bytes = p.text_bytes
    m.text_truncated = p.text_truncated
    m.redacted = p.redacted
    m.message_id = p.message_id


def _tool_call_started(p: d.ToolCallStarted, m: ev.ToolCallStarted) -> None:
    m.tool_use_id = p.tool_use_id
    m.name = p.name
    m.input_json = p.input_json
    m.input_bytes = p.input_bytes
    m.input_truncated = p.input_truncated
    m.message_id = p.message_id
    m.server_tool = p.server_tool


def _tool_call_finished(p: d.ToolCallFinished, m: ev.ToolCallFinished) -> None:
    m.tool_use_id = p.tool_use_id
    m.name = p.name
    m.is_error = p.is_error
    m.content_preview = p.content_preview
    m.content_bytes = p.content_bytes
    m.content_truncated = p.content_truncated
    m.structured_result_json = p.structured_result_json
    m.structured_result_truncated = p.structured_result_truncated
    if p.duration_ns is not None:
        _set_duration_ns(m.duration, p.duration_ns)
    if p.hook_duration_ms is not None:
        _set_duration_ms(m.hook_duration, p.hook_duration_ms)


def _api_retry(p: d.ApiRetry, m: ev.ApiRetry) -> None:
    m.attempt = _i32(p.attempt)
    m.max_retries = _i32(p.max_retries)
    _set_duration_ms(m.retry_delay, p.retry_delay_ms)
    if p.error_status is not None:
        m.error_status = _i32(p.error_status)
    m.error = p.error


def _api_error(p: d.ApiError, m: ev.ApiError) -> None:
    m.error = p.error
    if p.api_error_status is not None:
        m.api_error_status = _i32(p.api_error_status)
    m.message = p.message


def _rate_limit(p: d.RateLimit, m: ev.RateLimit) -> None:
    m.status = p.status
    if p.resets_at_s is not None:
        m.resets_at.FromSeconds(max(_TIMESTAMP_MIN_S, min(p.resets_at_s, _TIMESTAMP_MAX_S)))
    m.rate_limit_type = p.rate_limit_type
    m.utilization = p.utilization or 0.0


def _task(p: d.TaskEvent, m: ev.TaskEvent) -> None:
    m.kind = int(p.kind)
    m.task_id = p.task_id
    m.tool_use_id = p.tool_use_id
    m.description = p.description
    m.subagent_type = p.subagent_type
    m.task_type = p.task_type
    m.status = p.status
    m.summary = p.summary
    m.backgrounded = p.backgrounded
    m.total_tokens = _i64(p.total_tokens)
    m.tool_uses = _i64(p.tool_uses)
    if p.duration_ms is not None:
        _set_duration_ms(m.duration, p.duration_ms)


def _compaction(p: d.Compaction, m: ev.Compaction) -> None:
    m.completed = p.completed
    m.trigger = p.trigger
    m.pre_tokens = _i64(p.pre_tokens)
    m.post_tokens = _i64(p.post_tokens)
    if p.duration_ms is not None:
        _set_duration_ms(m.duration, p.duration_ms)


def _cli_status(p: d.CliStatus, m: ev.CliStatus) -> None:
    m.status = p.status
    m.permission_mode = p.permission_mode


def _hook(p: d.HookEvent, m: ev.HookEvent) -> None:
    m.kind = int(p.kind)
    m.hook_id = p.hook_id
    m.hook_name = p.hook_name
    m.hook_event = p.hook_event
    if p.exit_code is not None:
        m.exit_code = _i32(p.exit_code)
    m.outcome = p.outcome
    m.output_preview = p.output_preview


def _permission_denied(p: d.PermissionDenied, m: ev.PermissionDenied) -> None:
    m.tool_name = p.tool_name
    m.tool_use_id = p.tool_use_id
    m.decision_reason_type = p.decision_reason_type
    m.decision_reason = p.decision_reason
    m.message = p.message


def _partial_delta(p: d.PartialDelta, m: ev.PartialDelta) -> None:
    m.kind = int(p.kind)
    m.index = _i32(p.index)
    m.text = p.text
    m.message_id = p.message_id
    m.block_type = p.block_type
    m.stop_reason = p.stop_reason


def _turn_result(p: d.TurnResult, m: ev.TurnResult) -> None:
    m.subtype = p.subtype
    m.is_error = p.is_error
    if p.api_error_status is not None:
        m.api_error_status = _i32(p.api_error_status)
    m.terminal_reason = p.terminal_reason
    m.num_turns = _i32(p.num_turns)
    m.result_text = p.result_text
    m.result_truncated = p.result_truncated
    if p.duration_ms is not None:
        _set_duration_ms(m.duration, p.duration_ms)
    if p.api_duration_ms is not None:
        _set_duration_ms(m.api_duration, p.api_duration_ms)
    if p.total_cost_usd is not None:
        m.total_cost_usd = p.total_cost_usd
    m.usage.CopyFrom(token_usage_to_proto(p.usage))
    for mu in p.model_usage:
        model_usage = m.model_usage.add(model=mu.model, cost_usd=mu.cost_usd or 0.0)
        model_usage.tokens.CopyFrom(token_usage_to_proto(mu.tokens))
    add_permission_denials(m.permission_denials, p.permission_denials)
    m.errors.extend(p.errors)
    m.result_index = _i32(p.result_index)
    m.stop_reason = p.stop_reason
    m.startup_failure_reason = p.startup_failure_reason
    m.structured_output = p.structured_output
    m.structured_output_truncated = p.structured_output_truncated


def _control_response(p: d.ControlResponse, m: ev.ControlResponse) -> None:
    m.request_id = p.request_id
    m.request_subtype = p.request_subtype
    m.success = p.success
    m.error = p.error
    m.error_code = p.error_code


def _control_request(p: d.ControlRequest, m: ev.ControlRequest) -> None:
    m.request_id = p.request_id
    m.subtype = p.subtype
    m.tool_name = p.tool_name
    m.tool_use_id = p.tool_use_id


def _user_message(p: d.UserMessage, m: ev.UserMessage) -> None:
    m.text = p.text
    m.text_truncated = p.text_truncated
    m.is_replay = p.is_replay
    m.is_synthetic = p.is_synthetic


def _tool_progress(p: d.ToolProgress, m: ev.ToolProgress) -> None:
    m.tool_use_id = p.tool_use_id
    m.tool_name = p.tool_name
    _set_duration_ns(m.elapsed, int(min(max(p.elapsed_s, -3.2e11), 3.2e11) * 1_000_000_000))


def _cost_update(p: d.CostUpdate, m: ev.CostUpdate) -> None:
    m.cost.CopyFrom(phase_cost_to_proto(p.cost))


def _stderr(p: d.StderrOutput, m: ev.StderrOutput) -> None:
    m.text = p.text
    m.truncated = p.truncated


def _status_changed(p: d.PhaseStatusChanged, m: ev.PhaseStatusChanged) -> None:
    m.from_status = int(p.from_status)
    m.to_status = int(p.to_status)
    m.reason = p.reason


def _control(p: d.ControlEvent, m: ev.ControlEvent) -> None:
    m.kind = int(p.kind)
    m.tool_use_id = p.tool_use_id
    m.tool_name = p.tool_name
    m.breakpoint_id = p.breakpoint_id
    m.message = p.message
    m.input_json = p.input_json
    m.attempt = _i32(p.attempt)
    m.max_attempts = _i32(p.max_attempts)
    m.end_kind = int(p.end_kind)
    if p.retry_delay_ns is not None:
        _set_duration_ns(m.retry_delay, p.retry_delay_ns)
    m.resumed_session_id = p.resumed_session_id
    m.actor = p.actor
    if p.queue is not None:
        m.queue.CopyFrom(queue_state_to_proto(p.queue))
    if p.kind is d.ControlEventKind.REWOUND:
        m.checkpoint = _i32(p.checkpoint)
        m.rewound_after_sequence = p.rewound_after_sequence
        m.rewound_to_sequence = p.rewound_to_sequence


def _parse_error(p: d.ParseError, m: ev.ParseError) -> None:
    m.reason = int(p.reason)
    m.line_bytes = p.line_bytes
    m.line_number = p.line_number
    m.byte_offset = p.byte_offset
    m.detail = p.detail
    m.repaired = p.repaired


def _gateway(p: d.GatewayEvent, m: ev.GatewayEvent) -> None:
    m.kind = int(p.kind)
    m.http_status = _i32(p.http_status)
    m.model = p.model
    m.message = p.message
    m.destination = p.destination
    if p.retry_after_ns is not None:
        _set_duration_ns(m.retry_after, p.retry_after_ns)
    m.request_id = p.request_id
    m.bytes_sent = p.bytes_sent
    m.bytes_received = p.bytes_received
    if p.duration_ns:
        _set_duration_ns(m.duration, p.duration_ns)
    m.method = p.method
    m.path = p.path
    m.hold_id = p.hold_id
    m.actor = p.actor
    m.breakpoint_id = p.breakpoint_id


def _session_writes_lost(p: d.SessionWritesLost, m: ev.SessionWritesLost) -> None:
    m.error_code = p.error_code
    m.lost.extend(p.lost)
    m.session_ids.extend(p.session_ids)


def _unknown(p: d.Unknown, m: ev.Unknown) -> None:
    m.type = p.type
    m.subtype = p.subtype
    m.raw_json = p.raw_json
    m.line_bytes = p.line_bytes


# Payload class → (StreamEvent oneof field, converter). Total: a test checks every oneof field.
PAYLOAD_FIELDS: dict[type, tuple[str, Callable[[Any, Any], None]]] = {
    d.SessionInit: ("session_init", _session_init),
    d.AssistantText: ("assistant_text", _assistant_text),
    d.Thinking: ("thinking", _thinking),
    d.ToolCallStarted: ("tool_call_started", _tool_call_started),
    d.ToolCallFinished: ("tool_call_finished", _tool_call_finished),
    d.ApiRetry: ("api_retry", _api_retry),
    d.ApiError: ("api_error", _api_error),
    d.RateLimit: ("rate_limit", _rate_limit),
    d.TaskEvent: ("task", _task),
    d.Compaction: ("compaction", _compaction),
    d.CliStatus: ("cli_status", _cli_status),
    d.HookEvent: ("hook", _hook),
    d.PermissionDenied: ("permission_denied", _permission_denied),
    d.PartialDelta: ("partial_delta", _partial_delta),
    d.TurnResult: ("turn_result", _turn_result),
    d.ControlResponse: ("control_response", _control_response),
    d.ControlRequest: ("control_request", _control_request),
    d.UserMessage: ("user_message", _user_message),
    d.ToolProgress: ("tool_progress", _tool_progress),
    d.SessionWritesLost: ("session_writes_lost", _session_writes_lost),
    d.CostUpdate: ("cost_update", _cost_update),
    d.StderrOutput: ("stderr", _stderr),
    d.PhaseStatusChanged: ("status_changed", _status_changed),
    d.ControlEvent: ("control", _control),
    d.ParseError: ("parse_error", _parse_error),
    d.Unknown: ("unknown", _unknown),
    d.GatewayEvent: ("gateway", _gateway),
}


def payload_kind(payload: d.Payload) -> str:
    """The StreamEvent oneof field name of a payload (e.g. ``tool_call_started``)."""
    return PAYLOAD_FIELDS[type(payload)][0]


def event_to_proto(event: d.Event, *, job_id: str = "", phase_id: str = "") -> ev.StreamEvent:
    """Event → StreamEvent, with the phase's job and phase ids."""
    msg = ev.StreamEvent(
        sequence=event.sequence,
        receive_time=_timestamp_ns(event.receive_time_ns),
        job_id=job_id,
        phase_id=phase_id,
        session_id=event.session_id,
        parent_tool_use_id=event.parent_tool_use_id,
        agent_id=event.agent_id,
        uuid=event.uuid,
    )
    field, convert = PAYLOAD_FIELDS[type(event.payload)]
    convert(event.payload, getattr(msg, field))
    if not msg.HasField(field):  # a payload with every field at its default still selects the oneof
        getattr(msg, field).SetInParent()
    return msg
