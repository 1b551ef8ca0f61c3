"""Read-model views to resource messages: Job, Phase, ToolCall, CostTotals, Breakpoint, PhaseInspection.

Pure translation: every figure was computed by the read model (``phases/queries``). What the
store keeps encoded (``*_pb``, written by ``record_codec``) is parsed straight into the message.
"""

from __future__ import annotations

from helix.runner.v1 import events_pb2, resources_pb2
from helix_runner.api import event_mapping as m
from helix_runner.api.event_summary import summarize
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.phases.views import CostTotals, Inspection, JobView, PhaseView, StoredToolCall

# PhaseInspection.recent_events[].summary (resources.proto).
MAX_SUMMARY_CHARS = 500


def phase_to_proto(view: PhaseView) -> resources_pb2.Phase:
    """A phase: live cost, statistics and current tool while it runs here; else its stored figures and result."""
    msg = resources_pb2.Phase(
        job_id=view.job_id,
        phase_id=view.phase_id,
        project_id=view.project_id,
        status=int(view.status),
        status_reason=view.status_reason,
        session_id=view.session_id,
        model=view.model,
        working_dir=view.working_dir,
        last_sequence=view.last_sequence,
        prompt=view.prompt,
        on_disconnect=resources_pb2.ON_DISCONNECT_DETACH
        if view.on_disconnect == "DETACH"
        else resources_pb2.ON_DISCONNECT_CANCEL,
    )
    msg.create_time.FromNanoseconds(view.create_time_ns)
    if view.start_time_ns:
        msg.start_time.FromNanoseconds(view.start_time_ns)
    if view.end_time_ns:
        msg.end_time.FromNanoseconds(view.end_time_ns)
    live = view.live
    if live is not None:
        msg.cost.CopyFrom(m.phase_cost_to_proto(live.cost))
        msg.tool_stats.extend(m.tool_stats_to_proto(s) for s in live.tool_stats)
        if live.current_tool is not None:
            msg.current_tool.CopyFrom(
                m.tool_call_to_proto(live.current_tool, job_id=view.job_id, phase_id=view.phase_id)
            )
        return msg
    if view.cost_pb:
        msg.cost.ParseFromString(view.cost_pb)
    if view.tool_stats_pb:
        # An encoded Phase holding only tool_stats (ProtoRecordCodec.encode_tool_stats): merging appends them.
        msg.MergeFromString(view.tool_stats_pb)
    if view.result_pb:
        msg.result.ParseFromString(view.result_pb)
        if not msg.result.HasField("cost") and msg.HasField("cost"):
            msg.result.cost.CopyFrom(msg.cost)
    return msg


def cost_totals_to_proto(totals: CostTotals) -> resources_pb2.CostTotals:
    return resources_pb2.CostTotals(
        reported_usd=totals.reported_usd,
        computed_usd=totals.computed_usd,
        tokens=m.token_usage_to_proto(totals.tokens),
        models=[m.model_cost_to_proto(c) for c in totals.models],
        phase_count=totals.phase_count,
        computed_only_phase_count=totals.computed_only_phase_count,
        unpriced_models=list(totals.unpriced_models),
    )


def job_to_proto(view: JobView) -> resources_pb2.Job:
    msg = resources_pb2.Job(
        job_id=view.job_id,
        project_id=view.project_id,
        status=int(view.status),
        phases=[phase_to_proto(p) for p in view.phases],
        cost=cost_totals_to_proto(view.cost),
    )
    msg.create_time.FromNanoseconds(view.create_time_ns)
    msg.update_time.FromNanoseconds(view.update_time_ns)
    return msg


def tool_call_to_proto(stored: StoredToolCall) -> resources_pb2.ToolCall:
    """A recorded call, with its authoritative status (the encoded one may be stale)."""
    call = resources_pb2.ToolCall.FromString(stored.body)
    call.status = int(stored.status)
    return call


def breakpoint_to_proto(bp: Breakpoint) -> resources_pb2.Breakpoint:
    msg = resources_pb2.Breakpoint(breakpoint_id=bp.breakpoint_id, once=bp.once, hit_count=bp.hit_count)
    if bp.kind is BreakpointKind.TOOL_NAME:
        msg.tool_name = bp.tool_name
    elif bp.kind is BreakpointKind.INPUT_PATTERN:
        msg.input_pattern.regex = bp.regex
        msg.input_pattern.tool_name = bp.tool_name
    elif bp.kind is BreakpointKind.COST_THRESHOLD:
        msg.cost_threshold_usd = bp.cost_threshold_usd
    else:
        msg.turn_count = bp.turn_count
    return msg


def inspection_to_proto(inspection: Inspection) -> resources_pb2.PhaseInspection:
    view = inspection.phase
    msg = resources_pb2.PhaseInspection(phase=phase_to_proto(view))
    for recent in inspection.recent_events:
        event = events_pb2.StreamEvent.FromString(recent.body)
        ref = msg.recent_events.add(
            sequence=event.sequence, kind=recent.kind, summary=summarize(event)[:MAX_SUMMARY_CHARS]
        )
        ref.receive_time.CopyFrom(event.receive_time)
    live = view.live
    if live is None:
        return msg
    msg.paused = live.paused
    msg.hard_paused = live.hard_paused
    for held in live.held_calls:
        pending = msg.pending_calls.add(breakpoint_id=held.breakpoint_id, hold_reason=held.reason)
        if held.call is not None:
            pending.call.CopyFrom(m.tool_call_to_proto(held.call, job_id=view.job_id, phase_id=view.phase_id))
        else:
            pending.call.tool_use_id, pending.call.name = held.tool_use_id, held.tool_name
            pending.call.input_json = held.input_json
        pending.hold_time.FromNanoseconds(held.since_ns)
    msg.assistant_message_count = live.assistant_message_count
    msg.user_message_count = live.user_message_count
    msg.turn_count = live.turn_count
    msg.breakpoints.extend(breakpoint_to_proto(bp) for bp in live.breakpoints)
    usage = inspection.context_usage
    if usage is not None:
        ctx = msg.context_usage
        ctx.total_tokens, ctx.max_tokens, ctx.percentage = (
            usage.total_tokens,
            usage.max_tokens,
            usage.percentage,
        )
        ctx.raw_json = usage.raw_json
    return msg
