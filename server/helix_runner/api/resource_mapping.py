"""Read-model views to resource messages: Job, Phase, ToolCall, CostTotals, Breakpoint, PhaseInspection.

Pure translation: every figure was computed by the read model (``phases/queries``). What the
store keeps encoded (``*_pb``, written by ``api/proto_records.py``) is parsed straight into the message.
"""

from __future__ import annotations

from collections.abc import Iterable

from helix.runner.v1 import events_pb2, resources_pb2
from helix_runner.api import event_mapping as m
from helix_runner.api.checkpoint_mapping import checkpoint_to_proto
from helix_runner.api.event_summary import summarize
from helix_runner.api.proto_records import containment_to_proto, gateway_report_to_proto, sandbox_to_proto
from helix_runner.api.wire import embedded
from helix_runner.domain.access import Principal
from helix_runner.domain.audit import AuditEntry
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.phase_result import queue_wait_ns
from helix_runner.domain.quotas import ProjectQuota, Spend
from helix_runner.phases.views import CostTotals, Inspection, JobView, PhaseView, ServerStatus, StoredToolCall

# PhaseInspection.recent_events[].summary (resources.proto).
MAX_SUMMARY_CHARS = 500


_NS = 1_000_000_000
_DETACH, _CANCEL = resources_pb2.ON_DISCONNECT_DETACH, resources_pb2.ON_DISCONNECT_CANCEL

# A page of jobs maps every job and phase, so these fill messages in place (``add``, direct field
# assignment) instead of building sub-messages and copying them in: the copies and the checked
# Timestamp.FromNanoseconds were half of a ListJobs page's mapping time.


def _time(field, ns: int) -> None:
    """Sets a Timestamp from server clock nanoseconds (always in range: no check needed)."""
    field.seconds, field.nanos = divmod(ns, _NS)


def _tokens(msg, usage) -> None:
    try:
        msg.input_tokens = usage.input_tokens
        msg.output_tokens = usage.output_tokens
        msg.cache_read_input_tokens = usage.cache_read_input_tokens
        msg.cache_write_5m_input_tokens = usage.cache_write_5m_input_tokens
        msg.cache_write_1h_input_tokens = usage.cache_write_1h_input_tokens
        msg.web_search_requests = usage.web_search_requests
    except ValueError:  # a sum past int64 (absurd, but never a failed request): clamp every field
        msg.CopyFrom(m.token_usage_to_proto(usage))


def phase_to_proto(view: PhaseView) -> resources_pb2.Phase:
    """A phase: live cost, statistics and current tool while it runs here; else its stored figures and result."""
    msg = resources_pb2.Phase()
    _fill_phase(msg, view)
    return msg


PROMPT_FIRST_LINE_CHARS = 200


def prompt_summary(prompt: str) -> tuple[str, int]:
    """A prompt's first line (at most 200 characters) and its size in bytes: what a listing shows."""
    return prompt.lstrip().split("\n", 1)[0][:PROMPT_FIRST_LINE_CHARS].rstrip(), len(prompt.encode())


def _fill_phase(msg: resources_pb2.Phase, view: PhaseView) -> None:
    msg.job_id = view.job_id
    msg.phase_id = view.phase_id
    msg.project_id = view.project_id
    msg.status = view.status
    msg.status_reason = view.status_reason
    msg.session_id = view.session_id
    msg.model = view.model
    msg.working_dir = view.working_dir
    msg.last_sequence = view.last_sequence
    msg.prompt = view.prompt
    msg.prompt_first_line, msg.prompt_bytes = prompt_summary(view.prompt)
    msg.on_disconnect = _DETACH if view.on_disconnect == "DETACH" else _CANCEL
    if view.fork_pb:
        msg.forked_from.ParseFromString(view.fork_pb)
    _time(msg.create_time, view.create_time_ns)
    if view.start_time_ns:
        _time(msg.start_time, view.start_time_ns)
        msg.queue_wait.FromNanoseconds(queue_wait_ns(view.create_time_ns, view.start_time_ns))
    if view.end_time_ns:
        _time(msg.end_time, view.end_time_ns)
    live = view.live
    if live is not None:
        msg.cost.CopyFrom(m.phase_cost_to_proto(live.cost))
        msg.tool_stats.extend(m.tool_stats_to_proto(s) for s in live.tool_stats)
        if live.current_tool is not None:
            msg.current_tool.CopyFrom(
                m.tool_call_to_proto(live.current_tool, job_id=view.job_id, phase_id=view.phase_id)
            )
        msg.attempts.extend(m.attempt_to_proto(a) for a in live.attempts)
        msg.auth_source = live.auth_source
        if live.queue is not None:
            msg.queue.CopyFrom(m.queue_state_to_proto(live.queue))
        if view.result_pb:  # ended, still live while its worktree's retention runs: its result is stored
            msg.result.ParseFromString(view.result_pb)
        return
    if view.cost_pb:
        msg.cost.ParseFromString(view.cost_pb)
    if view.tool_stats_pb:
        # An encoded Phase holding only tool_stats (ProtoRecordEncoder.encode_tool_stats): merging appends them.
        msg.MergeFromString(view.tool_stats_pb)
    if view.result_pb:
        msg.result.ParseFromString(view.result_pb)
        msg.attempts.extend(msg.result.attempts)
        msg.auth_source = msg.result.auth_source
        if view.cost_pb and not msg.result.HasField("cost"):
            msg.result.cost.CopyFrom(msg.cost)  # results recovered before they carried the cost
    elif view.attempts_pb:
        # Running (or waiting for its next attempt) on another replica: the attempts it recorded so far.
        msg.MergeFromString(view.attempts_pb)


def cost_totals_to_proto(totals: CostTotals) -> resources_pb2.CostTotals:
    msg = resources_pb2.CostTotals()
    _fill_cost_totals(msg, totals)
    return msg


def _fill_cost_totals(msg: resources_pb2.CostTotals, totals: CostTotals) -> None:
    msg.reported_usd = totals.reported_usd
    msg.computed_usd = totals.computed_usd
    msg.phase_count = totals.phase_count
    msg.computed_only_phase_count = totals.computed_only_phase_count
    _tokens(msg.tokens, totals.tokens)
    for cost in totals.models:
        model = msg.models.add(
            model=cost.model, computed_usd=cost.computed_usd, pricing_source=cost.pricing_source
        )
        if cost.reported_usd is not None:
            model.reported_usd = cost.reported_usd
        _tokens(model.tokens, cost.tokens)
    msg.unpriced_models.extend(totals.unpriced_models)


def job_to_proto(view: JobView) -> resources_pb2.Job:
    msg = resources_pb2.Job()
    _fill_job(msg, view)
    return msg


def _fill_job(msg: resources_pb2.Job, view: JobView) -> None:
    msg.job_id = view.job_id
    msg.project_id = view.project_id
    msg.status = view.status
    _time(msg.create_time, view.create_time_ns)
    _time(msg.update_time, view.update_time_ns)
    phases = msg.phases
    for phase in view.phases:
        _fill_phase(phases.add(), phase)
    _fill_cost_totals(msg.cost, view.cost)


def job_bytes(view: JobView, *, full_prompts: bool = True) -> bytes:
    """The encoded Job of a view, made once per view and kept in its ``memo`` (with its phases'
    whole prompts, or for a listing without them: their first lines and sizes stay).

    The read model serves a finished job's view from its cache until the job changes, so a page of
    such jobs costs no message building at all (phases/queries.py JobViewCache).
    """
    key = "job_pb" if full_prompts else "job_pb_listed"
    data = view.memo.get(key)
    if data is None:
        msg = job_to_proto(view)
        if not full_prompts:
            for phase in msg.phases:
                phase.ClearField("prompt")
        data = view.memo[key] = msg.SerializeToString()
    return data


# GetJobResponse.job = 1; ListJobsResponse.jobs = 1, next_page_token = 2 (runner_service.proto):
# length-delimited fields, so a response is its jobs' encodings behind their tags (as api.wire).
_JOB_TAG, _NEXT_PAGE_TOKEN_TAG = b"\x0a", b"\x12"


def get_job_response(view: JobView) -> bytes:
    """An encoded GetJobResponse."""
    return embedded(_JOB_TAG, job_bytes(view))


def list_jobs_response(views: Iterable[JobView], next_page_token: str, *, full_prompts: bool = False) -> bytes:
    """An encoded ListJobsResponse: the jobs' cached encodings joined, without building messages."""
    parts = [embedded(_JOB_TAG, job_bytes(v, full_prompts=full_prompts)) for v in views]
    if next_page_token:
        parts.append(embedded(_NEXT_PAGE_TOKEN_TAG, next_page_token.encode()))
    return b"".join(parts)


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
    elif bp.kind is BreakpointKind.EGRESS:
        msg.egress.host = bp.egress_host
        msg.egress.unlisted_hosts = bp.egress_unlisted
    else:
        msg.turn_count = bp.turn_count
    return msg


def inspection_to_proto(inspection: Inspection) -> resources_pb2.PhaseInspection:
    view = inspection.phase
    msg = resources_pb2.PhaseInspection(phase=phase_to_proto(view))
    # The phase's attempts as its Phase lists them: live ones here, its result's, or those stored.
    msg.attempts.extend(msg.phase.attempts)
    msg.checkpoints.extend(checkpoint_to_proto(c) for c in inspection.checkpoints)
    for recent in inspection.recent_events:
        event = events_pb2.StreamEvent.FromString(recent.body)
        ref = msg.recent_events.add(
            sequence=event.sequence, kind=recent.kind, summary=summarize(event)[:MAX_SUMMARY_CHARS]
        )
        ref.receive_time.CopyFrom(event.receive_time)
    live = view.live
    if live is None:
        # Ended: the final figures, when the phase recorded them (the turn results its result
        # counted; the message counters lived with the run).
        if msg.phase.result.diagnostics.HasField("containment"):
            msg.containment.CopyFrom(msg.phase.result.diagnostics.containment)
        msg.turn_count = msg.phase.result.result_count
        if msg.phase.result.diagnostics.HasField("gateway"):
            msg.gateway.CopyFrom(msg.phase.result.diagnostics.gateway)
        if msg.phase.result.diagnostics.HasField("sandbox"):
            msg.sandbox.CopyFrom(msg.phase.result.diagnostics.sandbox)
        return msg
    if live.containment is not None:
        msg.containment.CopyFrom(containment_to_proto(live.containment))
    if live.gateway is not None:
        msg.gateway.CopyFrom(gateway_report_to_proto(live.gateway))
    if live.sandbox is not None:
        msg.sandbox.CopyFrom(sandbox_to_proto(live.sandbox))
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


def server_status_to_proto(status: ServerStatus) -> resources_pb2.ServerStatus:
    return resources_pb2.ServerStatus(sandbox=sandbox_to_proto(status.sandbox),
                                      containment_mode=int(status.containment_mode), refusal=status.refusal,
                                      version=status.version, offline=status.offline)


def principal_to_proto(principal: Principal | None) -> resources_pb2.Principal:
    if principal is None:
        return resources_pb2.Principal()
    return resources_pb2.Principal(name=principal.name, source=principal.source, grants=[
        resources_pb2.Grant(project_id=project, roles=roles) for project, roles in principal.describe().items()])


def audit_entry_to_proto(entry: AuditEntry) -> resources_pb2.AuditEntry:
    msg = resources_pb2.AuditEntry(entry_id=entry.entry_id, principal=entry.principal,
                                   principal_source=entry.principal_source, action=entry.action,
                                   project_id=entry.project_id, job_id=entry.job_id, phase_id=entry.phase_id,
                                   target=entry.target, detail=entry.detail, peer=entry.peer, outcome=entry.outcome)
    msg.time.FromNanoseconds(entry.time_ns)
    return msg


def project_quota_to_proto(quota: ProjectQuota, spend: Spend) -> resources_pb2.ProjectQuota:
    msg = resources_pb2.ProjectQuota(project_id=quota.project_id, spend_usd_per_day=quota.spend_usd_per_day,
                                     spend_usd_per_month=quota.spend_usd_per_month, spent_today_usd=spend.today_usd,
                                     spent_this_month_usd=spend.this_month_usd, updated_by=quota.updated_by)
    if quota.update_time_ns:
        msg.update_time.FromNanoseconds(quota.update_time_ns)
    return msg


def egress_allowance_to_proto(project_id: str, host: str, created_by: str,
                              create_time_ns: int) -> resources_pb2.EgressAllowance:
    msg = resources_pb2.EgressAllowance(project_id=project_id, host=host, created_by=created_by)
    msg.create_time.FromNanoseconds(create_time_ns)
    return msg
