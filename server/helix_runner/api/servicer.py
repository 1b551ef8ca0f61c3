"""RunnerService over gRPC: translates requests to domain calls and domain results to messages.

Only this package imports generated code. Every handler is wrapped (``_unary`` / ``_stream``,
enforced by ``add_runner_service``): the request's enum fields are checked first, a
``RunnerError`` becomes a rich status, and any other exception is logged with its traceback and
answered INTERNAL with a generic message, so no exception text reaches a caller. The two
streaming RPCs send pre-encoded bytes (see ``wire``), so they are registered with a pass-through
serializer.
"""

from __future__ import annotations

import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
import orjson
from google.protobuf.message import DecodeError

from helix.runner.v1 import events_pb2, resources_pb2, runner_service_pb2, runner_service_pb2_grpc
from helix_runner.api import event_mapping as m
from helix_runner.api.errors import abort
from helix_runner.api.event_summary import summarize
from helix_runner.api.pagination import make_token, page_size, read_token
from helix_runner.api.phase_diff import read_diff_page
from helix_runner.api.proto_records import containment_to_proto, tool_stats_from_bytes
from helix_runner.api.retry_options import retry_policy_from_options
from helix_runner.api.run_options import run_options
from helix_runner.api.validation import check_enums
from helix_runner.api.wire import event_responses, result_response
from helix_runner.domain.breakpoints import MAX_BREAKPOINTS, Breakpoint, BreakpointKind
from helix_runner.domain.events import ControlEvent, ControlEventKind
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCallStatus, summarize_calls
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.service import DEFAULT_PROJECT, PhaseService
from helix_runner.store.sqlite_store import JobRow, PhaseRow

log = logging.getLogger(__name__)

_PERMISSION_MODES = {
    resources_pb2.PERMISSION_MODE_UNSPECIFIED: "",
    resources_pb2.PERMISSION_MODE_DEFAULT: "default",
    resources_pb2.PERMISSION_MODE_ACCEPT_EDITS: "acceptEdits",
    resources_pb2.PERMISSION_MODE_BYPASS_PERMISSIONS: "bypassPermissions",
    resources_pb2.PERMISSION_MODE_PLAN: "plan",
    resources_pb2.PERMISSION_MODE_DONT_ASK: "dontAsk",
}
_ON_DISCONNECT = {
    resources_pb2.ON_DISCONNECT_UNSPECIFIED: "CANCEL",
    resources_pb2.ON_DISCONNECT_CANCEL: "CANCEL",
    resources_pb2.ON_DISCONNECT_DETACH: "DETACH",
}
_HARD_PAUSE = {
    runner_service_pb2.PAUSE_MODE_UNSPECIFIED: False,
    runner_service_pb2.PAUSE_MODE_BEFORE_NEXT_TOOL: False,
    runner_service_pb2.PAUSE_MODE_HARD: True,
}
_INTERRUPT_FIRST = {
    runner_service_pb2.INJECT_MODE_UNSPECIFIED: False,
    runner_service_pb2.INJECT_MODE_QUEUE: False,
    runner_service_pb2.INJECT_MODE_INTERRUPT_AND_SEND: True,
}


def _enum_value(table: dict[int, Any], value: int, field: str) -> Any:
    """What a request's enum value means here; INVALID_ARGUMENT for a value this server does not handle."""
    try:
        return table[value]
    except KeyError:
        raise invalid_field(field, f"unknown value {value}") from None


_SERVICE = runner_service_pb2.DESCRIPTOR.services_by_name["RunnerService"]
_REQUEST_TYPES = {m.name: getattr(runner_service_pb2, m.input_type.name) for m in _SERVICE.methods}


def _parse(method: str, request: bytes | Any) -> Any:
    """The request message; requests arrive as bytes so a malformed one is INVALID_ARGUMENT, not INTERNAL."""
    if not isinstance(request, bytes):
        return request
    request_type = _REQUEST_TYPES[method]
    try:
        return request_type.FromString(request)
    except DecodeError:
        raise invalid_field("request", f"is not a valid {request_type.DESCRIPTOR.full_name} "
                                       "(corrupt, or a string that is not UTF-8)") from None


def _internal(method: str) -> RunnerError:
    """The answer to an unexpected exception: its text and traceback go to the log, never to the caller."""
    return RunnerError(ErrorKind.INTERNAL, "INTERNAL", "internal error; the server log has the details",
                       {"method": method})


def _unary(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wraps a unary handler: enum checks first; RunnerError → rich status; anything else → INTERNAL."""

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        try:
            request = _parse(handler.__name__, request)
            check_enums(request)
            return await handler(self, request, context)
        except RunnerError as exc:
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise  # the handler answered already
        except Exception:
            log.exception("%s failed unexpectedly", handler.__name__, extra={"fields": {"method": handler.__name__}})
            await abort(context, _internal(handler.__name__))

    wrapper.guarded = True  # type: ignore[attr-defined]
    return wrapper


def _stream(handler: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """``_unary`` for server-streaming handlers; an error after some messages ends the stream with it."""

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        try:
            request = _parse(handler.__name__, request)
            check_enums(request)
            # aclosing: when the client goes away, the handler's own cleanup (finally) runs now.
            async with contextlib.aclosing(handler(self, request, context)) as messages:
                async for message in messages:
                    yield message
        except RunnerError as exc:
            await abort(context, exc)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("%s failed unexpectedly", handler.__name__, extra={"fields": {"method": handler.__name__}})
            await abort(context, _internal(handler.__name__))

    wrapper.guarded = True  # type: ignore[attr-defined]
    return wrapper


def spec_from_request(request: runner_service_pb2.RunPhaseRequest, phase_id: str) -> PhaseSpec:
    """The validated domain spec for a RunPhase request."""
    o = request.options
    if o.permission_mode not in _PERMISSION_MODES:
        raise invalid_field("options.permission_mode", f"unknown value {o.permission_mode}")
    return PhaseSpec.create(
        job_id=request.job_id,
        phase_id=phase_id,
        project_id=request.project_id,
        prompt=request.prompt,
        working_dir=request.working_dir,
        model=o.model,
        allowed_tools=tuple(o.allowed_tools),
        disallowed_tools=tuple(o.disallowed_tools),
        permission_mode=_PERMISSION_MODES[o.permission_mode],
        max_turns=o.max_turns,
        max_budget_usd=o.max_budget_usd if o.HasField("max_budget_usd") else None,
        append_system_prompt=o.append_system_prompt,
        resume_session_id=o.resume_session_id,
        timeout_s=o.timeout.ToNanoseconds() / 1e9,
        idle_timeout_s=o.idle_timeout.ToNanoseconds() / 1e9,
        include_partial_messages=o.include_partial_messages,
        include_raw_unknown=o.include_raw_unknown,
        on_disconnect=_enum_value(_ON_DISCONNECT, o.on_disconnect, "options.on_disconnect"),
        env=dict(o.env),
        fallback_model=o.fallback_model,
        memory_limit_bytes=o.memory_limit_bytes,
        cpu_limit_millicores=o.cpu_limit_millicores,
        **run_options(o),
    )


class RunnerServicer(runner_service_pb2_grpc.RunnerServiceServicer):
    """The gRPC face of the runner."""

    def __init__(self, manager: PhaseService):
        self.manager = manager

    # -- streams ---------------------------------------------------------------------------

    @_stream
    async def RunPhase(self, request, context) -> AsyncIterator[bytes]:
        spec = spec_from_request(request, request.phase_id or self.manager.new_phase_id())
        requested = request.options.breakpoints
        if len(requested) > MAX_BREAKPOINTS:  # before compiling thousands of patterns
            raise invalid_field("options.breakpoints", f"a phase can have at most {MAX_BREAKPOINTS} breakpoints")
        breakpoints = [breakpoint_from_proto(b, f"options.breakpoints[{i}]") for i, b in enumerate(requested)]
        retry = retry_policy_from_options(request.options, self.manager.retry_defaults)
        live = await self.manager.start(spec, breakpoints, retry)
        completed = False
        try:
            async for delivery in live.events.subscribe(0):
                if delivery.result is not None:
                    yield result_response(delivery.result)
                    completed = True
                    return
                for message in event_responses(delivery.events):
                    yield message
        finally:
            # Cleanup belongs in finally: a client cancel arrives as CancelledError or as a failed
            # write, depending on where the handler was (notes/grpc-python-service.md §3.2).
            if not completed and not live.done.is_set():
                if spec.on_disconnect == "DETACH":
                    live.run.emit(ControlEvent(ControlEventKind.DETACHED, message="the RunPhase caller went away"))
                else:
                    live.run.request_stop_with_reason(EndCause.CANCELLED, "the RunPhase caller disconnected")

    @_stream
    async def WatchPhase(self, request, context) -> AsyncIterator[bytes]:
        deliveries = await self.manager.watch(request.job_id, request.phase_id, request.after_sequence)
        async for delivery in deliveries:
            if delivery.result is not None:
                if delivery.result:
                    yield result_response(delivery.result)
                return
            for message in event_responses(delivery.events):
                yield message

    # -- jobs and phases -------------------------------------------------------------------

    def _phase(self, row: PhaseRow) -> resources_pb2.Phase:
        msg = resources_pb2.Phase(
            job_id=row.job_id, phase_id=row.phase_id, project_id=row.project_id,
            status=int(PhaseStatus[row.status]), status_reason=row.status_reason, session_id=row.session_id,
            model=row.model, working_dir=row.working_dir, last_sequence=row.last_sequence, prompt=row.prompt,
            on_disconnect=resources_pb2.ON_DISCONNECT_DETACH if row.on_disconnect == "DETACH"
            else resources_pb2.ON_DISCONNECT_CANCEL,
        )
        msg.create_time.FromNanoseconds(row.create_time_ns)
        if row.start_time_ns:
            msg.start_time.FromNanoseconds(row.start_time_ns)
        if row.end_time_ns:
            msg.end_time.FromNanoseconds(row.end_time_ns)
        live = self.manager.get_live(row.job_id, row.phase_id)
        if live is not None and not live.done.is_set():
            # Live figures are fresher than the last persisted snapshot.
            stream = live.run.stream
            msg.cost.CopyFrom(m.phase_cost_to_proto(stream.cost))
            msg.tool_stats.extend(m.tool_stats_to_proto(s) for s in stream.tools.stats())
            current = stream.tools.current
            if current is not None:
                msg.current_tool.CopyFrom(m.tool_call_to_proto(current, job_id=row.job_id, phase_id=row.phase_id))
            msg.last_sequence = live.events.last_sequence
            msg.attempts.extend(m.attempt_to_proto(a) for a in live.run.attempts)
            if (queue := live.run.queue_state()) is not None:
                msg.queue.CopyFrom(m.queue_state_to_proto(queue))
            return msg
        if row.cost_json:
            msg.cost.ParseFromString(row.cost_json)
        msg.tool_stats.extend(tool_stats_from_bytes(row.tool_stats_json))
        if row.result_json:
            msg.result.ParseFromString(row.result_json)
            msg.attempts.extend(msg.result.attempts)
            if not msg.result.HasField("cost") and msg.HasField("cost"):
                msg.result.cost.CopyFrom(msg.cost)
        return msg

    def _job(self, job: JobRow) -> resources_pb2.Job:
        phases = [self._phase(r) for r in self.manager.store.list_phases(job.job_id)]
        msg = resources_pb2.Job(job_id=job.job_id, project_id=job.project_id, status=int(PhaseStatus[job.status]),
                                phases=phases)
        msg.create_time.FromNanoseconds(job.create_time_ns)
        msg.update_time.FromNanoseconds(job.update_time_ns)
        msg.cost.CopyFrom(self._totals(job_id=job.job_id))
        return msg

    @_unary
    async def GetJob(self, request, context):
        return runner_service_pb2.GetJobResponse(job=self._job(self.manager.require_job(request.job_id)))

    @_unary
    async def ListJobs(self, request, context):
        size = page_size(request.page_size, 50, 500)
        statuses = sorted(resources_pb2.PhaseStatus.Name(s).removeprefix("PHASE_STATUS_") for s in request.statuses)
        query = {"project": request.project_id, "statuses": statuses}
        position = read_token(request.page_token, query)
        rows = self.manager.store.list_jobs(request.project_id or None, statuses, size + 1,
                                            tuple(position) if position else None)
        more = len(rows) > size
        rows = rows[:size]
        token = make_token(query, [rows[-1].create_time_ns, rows[-1].job_id]) if more and rows else ""
        return runner_service_pb2.ListJobsResponse(jobs=[self._job(r) for r in rows], next_page_token=token)

    @_unary
    async def ListToolCalls(self, request, context):
        self.manager.require_job(request.job_id)
        if request.phase_id:
            self.manager.require_phase(request.job_id, request.phase_id)
        size = page_size(request.page_size, 100, 1000)
        statuses = ["FAILED", "UNFINISHED"] if request.only_failed else []
        query = {"job": request.job_id, "phase": request.phase_id, "tool": request.tool_name,
                 "failed": request.only_failed}
        position = read_token(request.page_token, query)
        store = self.manager.store
        rows = store.list_tool_calls(request.job_id, request.phase_id or None, request.tool_name or None, statuses,
                                     size + 1, tuple(position) if position else None)
        more = len(rows) > size
        rows = rows[:size]
        calls = [_tool_call(r.body, r.status) for r in rows]
        token = ""
        if more and rows:
            last = rows[-1]
            token = make_token(query, [store.phase_ordinal(request.job_id, last.phase_id), last.start_sequence,
                                       last.tool_use_id])
        everything = store.list_tool_calls(request.job_id, request.phase_id or None, request.tool_name or None,
                                           statuses, 1_000_000)
        stats = _stats([_tool_call(r.body, r.status) for r in everything])
        return runner_service_pb2.ListToolCallsResponse(tool_calls=calls, next_page_token=token, stats=stats)

    def _totals(self, *, project_id: str | None = None, job_id: str | None = None,
                phase_id: str | None = None) -> resources_pb2.CostTotals:
        store = self.manager.store
        totals = resources_pb2.CostTotals()
        phases = store.phases_in_scope(project_id=project_id, job_id=job_id, phase_id=phase_id)
        totals.phase_count = len(phases)
        totals.reported_usd = sum(p.reported_usd or 0.0 for p in phases)
        totals.computed_usd = sum(p.computed_usd for p in phases)
        totals.computed_only_phase_count = sum(1 for p in phases if p.computed_only)
        by_model: dict[str, resources_pb2.ModelCost] = {}
        unpriced: set[str] = set()
        for _, _, row in store.model_costs(project_id=project_id, job_id=job_id, phase_id=phase_id):
            mc = by_model.setdefault(row.model, resources_pb2.ModelCost(model=row.model))
            t = mc.tokens
            t.input_tokens += row.input_tokens
            t.output_tokens += row.output_tokens
            t.cache_read_input_tokens += row.cache_read_input_tokens
            t.cache_write_5m_input_tokens += row.cache_write_5m_input_tokens
            t.cache_write_1h_input_tokens += row.cache_write_1h_input_tokens
            t.web_search_requests += row.web_search_requests
            if row.reported_usd is not None:
                mc.reported_usd = (mc.reported_usd if mc.HasField("reported_usd") else 0.0) + row.reported_usd
            mc.computed_usd += row.computed_usd
            source = resources_pb2.PricingSource.Value(f"PRICING_SOURCE_{row.pricing_source}")
            if row.pricing_source == "UNPRICED":
                unpriced.add(row.model)
            if mc.pricing_source in (resources_pb2.PRICING_SOURCE_UNSPECIFIED, resources_pb2.PRICING_SOURCE_PRICE_TABLE):
                mc.pricing_source = source
        for model in sorted(by_model):
            mc = by_model[model]
            totals.models.append(mc)
            for field in ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_write_5m_input_tokens",
                          "cache_write_1h_input_tokens", "web_search_requests"):
                setattr(totals.tokens, field, getattr(totals.tokens, field) + getattr(mc.tokens, field))
        totals.unpriced_models.extend(sorted(unpriced))
        return totals

    @_unary
    async def GetCostTotals(self, request, context):
        if request.phase_id and not request.job_id:
            raise invalid_field("job_id", "is required when phase_id is set")
        if request.job_id:
            self.manager.require_job(request.job_id)
            if request.phase_id:
                self.manager.require_phase(request.job_id, request.phase_id)
            totals = self._totals(job_id=request.job_id, phase_id=request.phase_id or None)
        else:
            totals = self._totals(project_id=request.project_id or DEFAULT_PROJECT)
        return runner_service_pb2.GetCostTotalsResponse(totals=totals)

    @_unary
    async def CancelPhase(self, request, context):
        if len(request.reason.encode()) > 1024:
            raise invalid_field("reason", "exceeds 1 KiB")
        live = self.manager.cancel(request.job_id, request.phase_id, request.reason)
        await live.done.wait()
        row = self.manager.require_phase(request.job_id, request.phase_id)
        return runner_service_pb2.CancelPhaseResponse(phase=self._phase(row))

    # -- job control -----------------------------------------------------------------------

    def _live_phase(self, live) -> resources_pb2.Phase:
        return self._phase(self.manager.require_phase(live.run.job_id, live.run.phase_id))

    @_unary
    async def PausePhase(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "pause")
        await live.run.control.pause(hard=_enum_value(_HARD_PAUSE, request.mode, "mode"))
        return runner_service_pb2.PausePhaseResponse(phase=self._live_phase(live))

    @_unary
    async def ResumePhase(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "resume")
        await live.run.control.resume()
        return runner_service_pb2.ResumePhaseResponse(phase=self._live_phase(live))

    @_unary
    async def StepPhase(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "step")
        live.run.control.step()
        return runner_service_pb2.StepPhaseResponse(phase=self._live_phase(live))

    @_unary
    async def InterruptPhase(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "interrupt")
        await live.run.control.interrupt()
        return runner_service_pb2.InterruptPhaseResponse(phase=self._live_phase(live))

    @_unary
    async def InjectMessage(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "inject a message")
        message_uuid, sequence = await live.run.control.inject(
            request.text, interrupt_first=_enum_value(_INTERRUPT_FIRST, request.mode, "mode"))
        return runner_service_pb2.InjectMessageResponse(message_uuid=message_uuid, sequence=sequence)

    @_unary
    async def AddBreakpoint(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "add a breakpoint")
        bp = live.run.control.add_breakpoint(breakpoint_from_proto(request.breakpoint))
        return runner_service_pb2.AddBreakpointResponse(breakpoint=breakpoint_to_proto(bp))

    @_unary
    async def ListBreakpoints(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "list breakpoints")
        return runner_service_pb2.ListBreakpointsResponse(
            breakpoints=[breakpoint_to_proto(bp) for bp in live.run.control.breakpoints.list()])

    @_unary
    async def RemoveBreakpoint(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "remove a breakpoint")
        bp = live.run.control.remove_breakpoint(request.breakpoint_id)
        return runner_service_pb2.RemoveBreakpointResponse(breakpoint=breakpoint_to_proto(bp))

    @_unary
    async def ResolveToolCall(self, request, context):
        live = self.manager.require_live(request.job_id, request.phase_id, "resolve a tool call")
        decision = request.WhichOneof("decision")
        if decision is None:
            raise invalid_field("decision", "one of approve, deny or edit is required")
        live.run.control.resolve(request.tool_use_id, decision, message=request.deny.message,
                                 input_json=request.edit.input_json)
        call = live.run.stream.tools.get(request.tool_use_id)
        msg = (m.tool_call_to_proto(call, job_id=request.job_id, phase_id=request.phase_id) if call
               else resources_pb2.ToolCall(tool_use_id=request.tool_use_id))
        return runner_service_pb2.ResolveToolCallResponse(tool_call=msg)

    @_unary
    async def GetPhaseDiff(self, request, context):
        return read_diff_page(self.manager.require_phase(request.job_id, request.phase_id), request)

    @_unary
    async def InspectPhase(self, request, context):
        row = self.manager.require_phase(request.job_id, request.phase_id)
        inspection = resources_pb2.PhaseInspection(phase=self._phase(row))
        tail = self.manager.store.read_events(row.job_id, row.phase_id, max(0, inspection.phase.last_sequence - 50), 50)
        for event_row in tail:
            event = events_pb2.StreamEvent.FromString(event_row.body)
            ref = inspection.recent_events.add(sequence=event.sequence, kind=event_row.kind,
                                               summary=summarize(event)[:500])
            ref.receive_time.CopyFrom(event.receive_time)
        live = self.manager.get_live(row.job_id, row.phase_id)
        if live is None or live.done.is_set():
            # Ended: the final figures, when the phase recorded them.
            if inspection.phase.result.diagnostics.HasField("containment"):
                inspection.containment.CopyFrom(inspection.phase.result.diagnostics.containment)
            return runner_service_pb2.InspectPhaseResponse(inspection=inspection)
        control, run = live.run.control, live.run
        inspection.containment.CopyFrom(containment_to_proto(run.plan.scope.report()))
        inspection.paused = control.pause_requested or control.hard_paused
        inspection.hard_paused = control.hard_paused
        for hold in list(control.holds.values()):
            call = run.stream.tools.get(hold.tool_use_id)
            pending = inspection.pending_calls.add(breakpoint_id=hold.breakpoint_id, hold_reason=hold.reason)
            if call is not None:
                pending.call.CopyFrom(m.tool_call_to_proto(call, job_id=row.job_id, phase_id=row.phase_id))
            else:
                pending.call.tool_use_id, pending.call.name = hold.tool_use_id, hold.tool_name
                pending.call.input_json = hold.input_json
            pending.hold_time.FromNanoseconds(hold.since_ns)
        inspection.assistant_message_count = run.assistant_turns
        inspection.user_message_count = run.user_messages
        inspection.turn_count = run.stream.result_count
        inspection.breakpoints.extend(breakpoint_to_proto(bp) for bp in control.breakpoints.list())
        if request.include_context_usage:
            usage = await control.context_usage()
            if usage is not None:
                ctx = inspection.context_usage
                ctx.total_tokens = int(usage.get("totalTokens") or 0)
                ctx.max_tokens = int(usage.get("maxTokens") or 0)
                ctx.percentage = float(usage.get("percentage") or (
                    100.0 * ctx.total_tokens / ctx.max_tokens if ctx.max_tokens else 0.0))
                raw = orjson.dumps(usage)
                ctx.raw_json = raw[:65536].decode("utf-8", "ignore")
        return runner_service_pb2.InspectPhaseResponse(inspection=inspection)


def breakpoint_from_proto(msg: resources_pb2.Breakpoint, field_path: str = "breakpoint") -> Breakpoint:
    """The domain breakpoint for a request's Breakpoint (validated; errors name fields under ``field_path``)."""
    kind = msg.WhichOneof("condition")
    if kind is None:
        raise invalid_field(field_path, "a condition (tool_name, input_pattern, cost_threshold_usd or "
                                        "turn_count) is required")
    return Breakpoint.create(
        kind=BreakpointKind(kind), breakpoint_id=msg.breakpoint_id, tool_name=msg.tool_name or msg.input_pattern.tool_name,
        regex=msg.input_pattern.regex, cost_threshold_usd=msg.cost_threshold_usd, turn_count=msg.turn_count,
        once=msg.once, field_path=field_path,
    )


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


def _tool_call(body: bytes, status: str) -> resources_pb2.ToolCall:
    call = resources_pb2.ToolCall.FromString(body)
    # The status column is authoritative: recovery marks calls UNFINISHED without re-encoding them.
    call.status = resources_pb2.ToolCallStatus.Value(f"TOOL_CALL_STATUS_{status}")
    return call


def _stats(calls: list[resources_pb2.ToolCall]) -> list[resources_pb2.ToolStats]:
    """Per-tool statistics of stored calls, by the domain's rules (the same as a live phase's)."""
    return [m.tool_stats_to_proto(s) for s in summarize_calls(
        (c.name, ToolCallStatus(c.status), c.duration.ToNanoseconds() if c.HasField("duration") else None)
        for c in calls)]


def _pass_through(message: bytes | Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def add_runner_service(servicer: RunnerServicer, server: grpc.aio.Server) -> None:
    """Registers the service; the streaming methods may yield pre-encoded response bytes.

    Requests are handed over as bytes and parsed by the handler's wrapper (``_parse``).
    """
    handlers = {}
    for method in _SERVICE.methods:
        behaviour = getattr(servicer, method.name)
        if not getattr(behaviour, "guarded", False):  # every RPC gets the checks and the INTERNAL guard
            raise TypeError(f"RunnerServicer.{method.name} must be wrapped by _unary or _stream")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(behaviour, response_serializer=_pass_through)
        else:
            response_cls = getattr(runner_service_pb2, method.output_type.name)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                behaviour, response_serializer=response_cls.SerializeToString)
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(_SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(_SERVICE.full_name, handlers)
