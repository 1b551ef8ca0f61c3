"""Protobuf implementation of ``RecordEncoder``: what the store keeps is what the wire carries."""

from __future__ import annotations

from collections.abc import Sequence

from google.protobuf.message import DecodeError

from helix.runner.v1 import resources_pb2
from helix_runner.api import event_mapping as m
from helix_runner.api.artifact_mapping import artifacts_to_proto
from helix_runner.api.checkpoint_mapping import fork_origin_to_proto
from helix_runner.api.wire import frame_events
from helix_runner.domain.checkpoints import ForkOrigin
from helix_runner.domain.cost_ledger import PhaseCostSnapshot
from helix_runner.domain.events import Event
from helix_runner.domain.gateway_report import GatewayReport
from helix_runner.domain.phase_outcome import ResourceFault
from helix_runner.domain.phase_result import Attempt, ContainmentReport, PhaseResult, SandboxReport
from helix_runner.domain.tool_tracker import ToolCall, ToolStats


def _ts(message, ns: int | None) -> None:
    if ns is not None:
        message.FromNanoseconds(ns)


class ProtoRecordEncoder:
    """Encodes domain records as the contract's messages."""

    def event_kind(self, event: Event) -> str:
        return m.payload_kind(event.payload)

    def encode_event(self, job_id: str, phase_id: str, event: Event) -> bytes:
        return m.event_to_proto(event, job_id=job_id, phase_id=phase_id).SerializeToString()

    def frame_events(self, bodies: Sequence[bytes]) -> bytes:
        return frame_events(bodies)

    def encode_cost(self, cost: PhaseCostSnapshot) -> bytes:
        return m.phase_cost_to_proto(cost).SerializeToString()

    def encode_tool_call(self, job_id: str, phase_id: str, call: ToolCall) -> bytes:
        return m.tool_call_to_proto(call, job_id=job_id, phase_id=phase_id).SerializeToString()

    def encode_tool_stats(self, stats: list[ToolStats]) -> bytes:
        # A Phase carrying only tool_stats: a container for the list (decoded by tool_stats_from_bytes).
        return resources_pb2.Phase(tool_stats=[m.tool_stats_to_proto(s) for s in stats]).SerializeToString()

    def encode_result(self, result: PhaseResult, *, cost_pb: bytes | None = None,
                      attempts_pb: bytes | None = None, interrupted: Attempt | None = None) -> bytes:
        msg = result_to_proto(result)
        if cost_pb and result.cost is None:
            msg.cost.ParseFromString(cost_pb)
        if attempts_pb and not result.attempts:
            # An encoded Phase holding only attempts (encode_attempts).
            msg.attempts.extend(resources_pb2.Phase.FromString(attempts_pb).attempts)
        if interrupted is not None:
            running = m.attempt_to_proto(interrupted)
            running.number = len(msg.attempts) + 1
            msg.attempts.append(running)
        return msg.SerializeToString()

    def encode_fork_origin(self, origin: ForkOrigin) -> bytes:
        return fork_origin_to_proto(origin).SerializeToString()

    def encode_attempts(self, attempts: Sequence[Attempt]) -> bytes:
        # A Phase carrying only attempts, as encode_tool_stats does for statistics.
        return resources_pb2.Phase(attempts=[m.attempt_to_proto(a) for a in attempts]).SerializeToString()


def tool_stats_from_bytes(data: bytes | None) -> list[resources_pb2.ToolStats]:
    return list(resources_pb2.Phase.FromString(data).tool_stats) if data else []


_RESOURCE_FAULTS = {
    None: resources_pb2.RESOURCE_FAULT_UNSPECIFIED,
    ResourceFault.OUT_OF_MEMORY: resources_pb2.RESOURCE_FAULT_OUT_OF_MEMORY,
    ResourceFault.DISK_FULL: resources_pb2.RESOURCE_FAULT_DISK_FULL,
    ResourceFault.PROCESS_LIMIT: resources_pb2.RESOURCE_FAULT_PROCESS_LIMIT,
    ResourceFault.OUTPUT_LIMIT: resources_pb2.RESOURCE_FAULT_OUTPUT_LIMIT,
    ResourceFault.LINE_LIMIT: resources_pb2.RESOURCE_FAULT_LINE_LIMIT,
    ResourceFault.EGRESS_LIMIT: resources_pb2.RESOURCE_FAULT_EGRESS_LIMIT,
    ResourceFault.WORKSPACE_LIMIT: resources_pb2.RESOURCE_FAULT_WORKSPACE_LIMIT,
}


def containment_to_proto(c: ContainmentReport) -> resources_pb2.PhaseContainment:
    msg = resources_pb2.PhaseContainment(
        mode=int(c.mode), cgroup_paths=list(c.cgroup_paths), memory_limit_bytes=c.memory_limit_bytes or 0,
        cpu_limit_millicores=c.cpu_limit_millicores or 0, process_count=c.process_count, oom_kills=c.oom_kills,
    )
    if c.memory_current_bytes is not None:
        msg.memory_current_bytes = c.memory_current_bytes
    if c.memory_peak_bytes is not None:
        msg.memory_peak_bytes = c.memory_peak_bytes
    return msg


def gateway_report_to_proto(g: GatewayReport) -> resources_pb2.GatewayReport:
    msg = resources_pb2.GatewayReport(
        requests=g.requests, rate_limited=g.rate_limited, overloaded=g.overloaded, api_errors=g.api_errors,
        model_refusals=g.model_refusals, upstream_failures=g.upstream_failures,
        egress_connections=g.egress_connections, egress_refusals=g.egress_refusals,
        egress_allowlist=list(g.egress_allowlist), allowed_models=list(g.allowed_models),
        feature_refusals=g.feature_refusals,
    )
    for usage in g.models:
        msg.models.add(model=usage.model, requests=usage.requests).tokens.CopyFrom(m.token_usage_to_proto(usage.tokens))
    return msg


def sandbox_to_proto(s: SandboxReport) -> resources_pb2.SandboxReport:
    return resources_pb2.SandboxReport(
        setting=s.setting, home=s.home, egress_ports=list(s.egress_ports),
        layers=[resources_pb2.SandboxLayer(name=x.name, active=x.active, detail=x.detail) for x in s.layers],
        protected=list(s.protected), restored=list(s.restored),
    )


def tool_call_duration_ns(body: bytes) -> int | None:
    """The duration of an encoded ToolCall, None while it ran (for ``SqliteStore.backfill_tool_call_durations``)."""
    try:
        call = resources_pb2.ToolCall.FromString(body)
    except DecodeError:
        return None  # not ours to repair; the call then just has no duration in the statistics
    return call.duration.ToNanoseconds() if call.HasField("duration") else None


def result_to_proto(r: PhaseResult) -> resources_pb2.PhaseResult:
    d = r.diagnostics
    msg = resources_pb2.PhaseResult(
        job_id=r.job_id,
        phase_id=r.phase_id,
        status=int(r.status),
        reason=r.reason,
        result_subtype=r.result_subtype,
        is_error=r.is_error,
        terminal_reason=r.terminal_reason,
        num_turns=r.num_turns,
        result_text=r.result_text,
        errors=list(r.errors),
        exit_signal=r.exit_signal or "",
        result_count=r.result_count,
        session_id=r.session_id,
        auth_source=r.auth_source,
        structured_output=r.structured_output,
        structured_output_truncated=r.structured_output_truncated,
        tool_stats=[m.tool_stats_to_proto(s) for s in r.tool_stats],
        last_sequence=r.last_sequence,
        resource_fault=_RESOURCE_FAULTS[r.resource_fault],
        diagnostics=resources_pb2.PhaseDiagnostics(
            stderr_tail=d.stderr_tail, stderr_bytes=d.stderr_bytes, parse_error_count=d.parse_error_count,
            unfinished_tool_calls=d.unfinished_tool_calls, stdout_bytes=d.stdout_bytes, argv=list(d.argv),
            claude_path=d.claude_path, recording_path=d.recording_path,
        ),
    )
    m.add_permission_denials(msg.permission_denials, r.permission_denials)
    if r.api_error_status is not None:
        msg.api_error_status = r.api_error_status
    if r.exit_code is not None:
        msg.exit_code = r.exit_code
    if r.cost is not None:
        msg.cost.CopyFrom(m.phase_cost_to_proto(r.cost))
    if d.containment is not None:
        msg.diagnostics.containment.CopyFrom(containment_to_proto(d.containment))
    if d.gateway is not None:
        msg.diagnostics.gateway.CopyFrom(gateway_report_to_proto(d.gateway))
    if d.sandbox is not None:
        msg.diagnostics.sandbox.CopyFrom(sandbox_to_proto(d.sandbox))
    if r.artifacts is not None:
        msg.artifacts.CopyFrom(artifacts_to_proto(r.artifacts))
    _ts(msg.start_time, r.start_time_ns)
    _ts(msg.end_time, r.end_time_ns)
    if r.queue_wait_ns is not None:
        msg.queue_wait.FromNanoseconds(r.queue_wait_ns)
    msg.attempts.extend(m.attempt_to_proto(a) for a in r.attempts)
    return msg

