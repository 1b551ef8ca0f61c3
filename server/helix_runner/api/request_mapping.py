"""Request messages to domain values: phase specs, breakpoints, and what each request enum means here.

Every value a caller sets is validated on the way in; a bad one is INVALID_ARGUMENT naming its
field (``errors.invalid_field``). Enum values the server does not know were already refused by
``validation.check_enums``; the tables here still reject them, so no mapping can guess.
"""

from __future__ import annotations

from typing import Any

from helix.runner.v1 import resources_pb2, runner_service_pb2
from helix_runner.api.run_options import run_options, set_run_options
from helix_runner.domain.breakpoints import MAX_BREAKPOINTS, Breakpoint, BreakpointKind
from helix_runner.domain.egress_hold import EgressDecision, EgressScope
from helix_runner.domain.phase_spec import OnDisconnect, PermissionMode, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_decision import Decision
from helix_runner.errors import invalid_field

# UNSPECIFIED: the CLI's default mode (a phase's options), or no mode at all (SetPhasePermissionMode).
PERMISSION_MODES = {
    resources_pb2.PERMISSION_MODE_UNSPECIFIED: "",
    resources_pb2.PERMISSION_MODE_DEFAULT: PermissionMode.DEFAULT,
    resources_pb2.PERMISSION_MODE_ACCEPT_EDITS: PermissionMode.ACCEPT_EDITS,
    resources_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS: PermissionMode.BYPASS_PERMISSIONS,
    resources_pb2.PERMISSION_MODE_PLAN: PermissionMode.PLAN,
    resources_pb2.PERMISSION_MODE_DONT_ASK: PermissionMode.DONT_ASK,
}
ON_DISCONNECT = {
    resources_pb2.ON_DISCONNECT_UNSPECIFIED: OnDisconnect.CANCEL,
    resources_pb2.ON_DISCONNECT_CANCEL: OnDisconnect.CANCEL,
    resources_pb2.ON_DISCONNECT_DETACH: OnDisconnect.DETACH,
}
HARD_PAUSE = {
    runner_service_pb2.PAUSE_MODE_UNSPECIFIED: False,
    runner_service_pb2.PAUSE_MODE_BEFORE_NEXT_TOOL: False,
    runner_service_pb2.PAUSE_MODE_HARD: True,
}
INTERRUPT_FIRST = {
    runner_service_pb2.INJECT_MODE_UNSPECIFIED: False,
    runner_service_pb2.INJECT_MODE_QUEUE: False,
    runner_service_pb2.INJECT_MODE_INTERRUPT_AND_SEND: True,
}
# CancelPhaseRequest.reason (runner_service.proto).
MAX_CANCEL_REASON_BYTES = 1024


def enum_value(table: dict[int, Any], value: int, field: str) -> Any:
    """What a request's enum value means here; INVALID_ARGUMENT for a value this server does not handle."""
    try:
        return table[value]
    except KeyError:
        raise invalid_field(field, f"unknown value {value}") from None


def spec_from_request(request: runner_service_pb2.RunPhaseRequest, phase_id: str) -> PhaseSpec:
    """The validated domain spec for a RunPhase request."""
    o = request.options
    return PhaseSpec.create(
        job_id=request.job_id,
        phase_id=phase_id,
        project_id=request.project_id,
        prompt=request.prompt,
        working_dir=request.working_dir,
        model=o.model,
        allowed_tools=tuple(o.allowed_tools),
        disallowed_tools=tuple(o.disallowed_tools),
        permission_mode=enum_value(PERMISSION_MODES, o.permission_mode, "options.permission_mode"),
        max_turns=o.max_turns,
        max_budget_usd=o.max_budget_usd if o.HasField("max_budget_usd") else None,
        append_system_prompt=o.append_system_prompt,
        resume_session_id=o.resume_session_id,
        timeout_s=o.timeout.ToNanoseconds() / 1e9,
        idle_timeout_s=o.idle_timeout.ToNanoseconds() / 1e9,
        include_partial_messages=o.include_partial_messages,
        include_raw_unknown=o.include_raw_unknown,
        on_disconnect=enum_value(ON_DISCONNECT, o.on_disconnect, "options.on_disconnect"),
        env=dict(o.env),
        fallback_model=o.fallback_model,
        memory_limit_bytes=o.memory_limit_bytes,
        cpu_limit_millicores=o.cpu_limit_millicores,
        **run_options(o),
    )


_PERMISSION_MODES_BACK = {mode: number for number, mode in PERMISSION_MODES.items()}
_ON_DISCONNECT_BACK = {OnDisconnect.CANCEL: resources_pb2.ON_DISCONNECT_CANCEL,
                       OnDisconnect.DETACH: resources_pb2.ON_DISCONNECT_DETACH}


def request_from_spec(spec: PhaseSpec) -> runner_service_pb2.RunPhaseRequest:
    """The RunPhase request ``spec_from_request`` makes ``spec`` of (its phase_id set): a spec kept as
    the contract's message. ``resume_session_at`` is the server's, not a request's: not included."""
    request = runner_service_pb2.RunPhaseRequest(job_id=spec.job_id, phase_id=spec.phase_id,
                                                 project_id=spec.project_id, prompt=spec.prompt,
                                                 working_dir=spec.working_dir)
    o = request.options
    o.model = spec.model
    o.allowed_tools.extend(spec.allowed_tools)
    o.disallowed_tools.extend(spec.disallowed_tools)
    o.permission_mode = _PERMISSION_MODES_BACK[spec.permission_mode]
    o.max_turns = spec.max_turns
    if spec.max_budget_usd is not None:
        o.max_budget_usd = spec.max_budget_usd
    o.append_system_prompt = spec.append_system_prompt
    o.resume_session_id = spec.resume_session_id
    if spec.timeout_s:
        o.timeout.FromNanoseconds(round(spec.timeout_s * 1e9))
    if spec.idle_timeout_s:
        o.idle_timeout.FromNanoseconds(round(spec.idle_timeout_s * 1e9))
    o.include_partial_messages = spec.include_partial_messages
    o.include_raw_unknown = spec.include_raw_unknown
    o.on_disconnect = _ON_DISCONNECT_BACK[OnDisconnect(spec.on_disconnect)]
    o.env.update(spec.env)
    o.fallback_model = spec.fallback_model
    o.memory_limit_bytes = spec.memory_limit_bytes
    o.cpu_limit_millicores = spec.cpu_limit_millicores
    set_run_options(o, spec)
    return request


def breakpoints_from_request(request: runner_service_pb2.RunPhaseRequest) -> list[Breakpoint]:
    """The validated breakpoints a RunPhase request starts with."""
    requested = request.options.breakpoints
    if len(requested) > MAX_BREAKPOINTS:  # before compiling thousands of patterns
        raise invalid_field("options.breakpoints", f"a phase can have at most {MAX_BREAKPOINTS} breakpoints")
    return [breakpoint_from_proto(b, f"options.breakpoints[{i}]") for i, b in enumerate(requested)]


def breakpoint_from_proto(msg: resources_pb2.Breakpoint, field_path: str = "breakpoint") -> Breakpoint:
    """The domain breakpoint for a request's Breakpoint (validated; errors name fields under ``field_path``)."""
    kind = msg.WhichOneof("condition")
    if kind is None:
        raise invalid_field(
            field_path, "a condition (tool_name, input_pattern, cost_threshold_usd, turn_count or egress) is required"
        )
    return Breakpoint.create(
        kind=BreakpointKind(kind),
        breakpoint_id=msg.breakpoint_id,
        tool_name=msg.tool_name or msg.input_pattern.tool_name,
        regex=msg.input_pattern.regex,
        cost_threshold_usd=msg.cost_threshold_usd,
        turn_count=msg.turn_count,
        once=msg.once,
        field_path=field_path,
        egress_host=msg.egress.host,
        egress_unlisted=msg.egress.unlisted_hosts,
    )


def statuses_from_request(values: list[int] | Any) -> list[PhaseStatus]:
    """A request's PhaseStatus filter, by name (the domain enum has the proto numbers)."""
    return sorted({PhaseStatus(v) for v in values}, key=lambda s: s.name)


def permission_mode_from_request(request: runner_service_pb2.SetPhasePermissionModeRequest) -> PermissionMode:
    """SetPhasePermissionModeRequest.mode, which must be set."""
    mode = enum_value(PERMISSION_MODES, request.mode, "mode")
    if not mode:
        raise invalid_field("mode", "is required")
    return mode


def decision_from_request(request: runner_service_pb2.ResolveToolCallRequest) -> Decision:
    """ResolveToolCallRequest's decision (validated: the deny message's size, the edit's JSON object)."""
    chosen = request.WhichOneof("decision")
    if chosen == "approve":
        return Decision.approve()
    if chosen == "deny":
        return Decision.deny(request.deny.message)
    if chosen == "edit":
        return Decision.edit(request.edit.input_json)
    raise invalid_field("decision", "one of approve, deny or edit is required")


def cancel_reason(request: runner_service_pb2.CancelPhaseRequest) -> str:
    """CancelPhaseRequest.reason, at most 1 KiB."""
    if len(request.reason.encode()) > MAX_CANCEL_REASON_BYTES:
        raise invalid_field("reason", "exceeds 1 KiB")
    return request.reason


_EGRESS_SCOPES = {
    runner_service_pb2.EGRESS_HOLD_DECISION_APPROVE_ONCE: EgressScope.ONCE,
    runner_service_pb2.EGRESS_HOLD_DECISION_APPROVE_PHASE: EgressScope.PHASE,
    runner_service_pb2.EGRESS_HOLD_DECISION_APPROVE_PROJECT: EgressScope.PROJECT,
}


def egress_decision_from_request(request: runner_service_pb2.ResolveEgressHoldRequest) -> EgressDecision:
    """ResolveEgressHoldRequest's decision (INVALID_ARGUMENT when it names none)."""
    if not request.hold_id:
        raise invalid_field("hold_id", "is required")
    if request.decision == runner_service_pb2.EGRESS_HOLD_DECISION_DENY:
        return EgressDecision.deny(request.reason)
    scope = _EGRESS_SCOPES.get(request.decision)
    if scope is None:
        raise invalid_field("decision", "is required: APPROVE_ONCE, APPROVE_PHASE, APPROVE_PROJECT or DENY")
    return EgressDecision(True, scope)
