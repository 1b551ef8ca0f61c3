"""RunnerService over gRPC: each handler maps its request, asks the application, maps the answer.

Starting and watching a phase go to the phase service, job control to the command surface
(``phases/commands``: one command per handler), questions to the read model (``phases/queries``);
messages become domain values in ``request_mapping`` and views become messages in
``resource_mapping``, so no handler computes anything, reads the store or reaches a running phase.
Only this package imports generated code.
Every handler is wrapped (``_unary`` / ``_stream``, enforced by ``add_runner_service``): the
request's enum fields are checked first, then its route is decided once (``api/routing.py``: served
here, forwarded to the replica that owns the phase, or relayed to one with room), a
``RunnerError`` becomes a rich status, and any other exception is logged with its traceback and
answered INTERNAL with a generic message, so no exception text reaches a caller. The two
streaming RPCs, GetJob and ListJobs send pre-encoded bytes (see ``wire``, ``resource_mapping.job_bytes``),
so responses that are bytes pass the serializer untouched.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from typing import Any

import grpc
from google.protobuf.message import DecodeError

from helix.runner.v1 import resources_pb2, runner_service_pb2, runner_service_pb2_grpc
from helix_runner.api import event_mapping as m
from helix_runner.api.authorization import Authorization
from helix_runner.api.call_access import CallAccess
from helix_runner.api.checkpoint_mapping import (
    checkpoint_to_proto,
    fork_point_from_proto,
    fork_request,
    storable_request,
)
from helix_runner.api.egress_secret_mapping import presentation_from_request, secret_to_proto
from helix_runner.api.errors import abort
from helix_runner.api.forwarding import OwnerForwarder, OwnerStatus
from helix_runner.api.pagination import make_token, page_size, read_token
from helix_runner.api.phase_diff import read_diff_page
from helix_runner.api.principals import Authenticator
from helix_runner.api.request_mapping import (
    HARD_PAUSE,
    INTERRUPT_FIRST,
    breakpoint_from_proto,
    breakpoints_from_request,
    cancel_reason,
    decision_from_request,
    egress_decision_from_request,
    enum_value,
    permission_mode_from_request,
    spec_from_request,
    statuses_from_request,
)
from helix_runner.api.resource_mapping import (
    audit_entry_to_proto,
    breakpoint_to_proto,
    cost_totals_to_proto,
    egress_allowance_to_proto,
    get_job_response,
    inspection_to_proto,
    list_jobs_response,
    phase_to_proto,
    principal_to_proto,
    project_quota_to_proto,
    server_status_to_proto,
    tool_call_to_proto,
)
from helix_runner.api.retry_options import retry_policy_from_options
from helix_runner.api.routing import PERMISSIONS, Forward, Need, Place, Router, check_routes
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.api.validation import check_enums
from helix_runner.api.webhook_mapping import (
    delivery_to_proto,
    states_from_request,
    webhook_spec_from_request,
    webhook_to_proto,
)
from helix_runner.api.wire import event_responses, result_response
from helix_runner.domain.access import ADMIN, Role, acting
from helix_runner.domain.phase_spec import DEFAULT_PROJECT
from helix_runner.domain.quotas import ProjectQuota, check_limit
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.commands import PhaseCommands
from helix_runner.phases.handover import phase_moved_error
from helix_runner.phases.queries import PhaseQueries
from helix_runner.phases.service import PhaseService

log = logging.getLogger(__name__)

_REQUEST_TYPES = {m.name: getattr(runner_service_pb2, m.input_type.name) for m in SERVICE.methods}


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


class _Call:
    """One call's principal, permission check and audit entry (``api/authorization.py``).

    ``allow`` resolves the principal, checks the method's permission and makes the principal the one
    ``acting`` (control events name it); ``done`` records an action once, with how it ended."""

    __slots__ = ("access", "name", "need", "context", "principal", "project", "request", "outcome", "token",
                 "recorded")

    def __init__(self, access: CallAccess, name: str, need: Need, context: Any):
        self.access = access
        self.name = name
        self.need = need
        self.context = context
        self.principal = None
        self.project = ""
        self.request = None
        self.outcome = "OK"
        self.token = None
        self.recorded = False

    def allow(self, request: Any) -> None:
        self.request = request
        self.principal = self.access.principal(self.context)
        self.token = acting.set(self.principal)
        self.project = self.access.authorization.check(self.need, request, self.principal)

    def failed(self, code: str, reason: str) -> None:
        self.outcome = code if not reason or reason == code else f"{code} {reason}"

    def done(self) -> None:
        if self.token is not None:
            with contextlib.suppress(ValueError):  # a stream's generator may end in another context
                acting.reset(self.token)
            self.token = None
        if self.recorded or self.principal is None or not self.need.audited or self.request is None:
            return
        self.recorded = True
        if not self.project:  # refused before its project was settled
            self.project = self.access.authorization.touched(self.need, self.request)
        self.access.authorization.record(self.name, self.request, self.principal, self.project, self.outcome,
                                         self.access.peer(self.context))


def _unary(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wraps a unary handler: enum checks first; RunnerError → rich status; anything else → INTERNAL."""

    name = handler.__name__
    need = PERMISSIONS[name]

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        call = _Call(self.access, name, need, context)
        try:
            request = _parse(name, request)
            check_enums(request)
            call.allow(request)  # who calls, and may they (api/authorization.py)
            decision = self.router.decide(name, request, context)
            if isinstance(decision, Forward):  # another replica answers (api/routing.py)
                return await self.router.forward(name, request, decision, context)
            return await handler(self, request, context)
        except RunnerError as exc:
            call.failed(exc.kind.name, exc.reason)
            await abort(context, exc)
        except OwnerStatus as exc:
            call.failed(exc.status.code.name, "")
            await context.abort_with_status(exc.status)
        except grpc.aio.AbortError:
            raise  # the handler answered already
        except Exception:
            log.exception("%s failed unexpectedly", name, extra={"fields": {"method": name}})
            call.failed("INTERNAL", "")
            await abort(context, _internal(name))
        finally:
            call.done()

    wrapper.guarded = True  # type: ignore[attr-defined]
    return wrapper


def _stream(handler: Callable[..., AsyncIterator[Any]]) -> Callable[..., AsyncIterator[Any]]:
    """``_unary`` for server-streaming handlers; an error after some messages ends the stream with it."""

    name = handler.__name__
    need = PERMISSIONS[name]

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        call = _Call(self.access, name, need, context)
        try:
            request = _parse(name, request)
            check_enums(request)
            call.allow(request)  # who calls, and may they (api/authorization.py)
            decision = self.router.decide(name, request, context)
            # Relayed to a replica with room (api/routing.py), unless it refused: then it runs here.
            relayed = await self.router.place(request, decision, context) if isinstance(decision, Place) else None
            stream = relayed if relayed is not None else handler(self, request, context)
            # aclosing: when the client goes away, the handler's own cleanup (finally) runs now.
            async with contextlib.aclosing(stream) as messages:
                async for message in messages:
                    call.done()  # audited once it started (a RunPhase may last hours)
                    yield message
        except RunnerError as exc:
            call.failed(exc.kind.name, exc.reason)
            await abort(context, exc)
        except OwnerStatus as exc:  # a placed RunPhase: the replica running it answered with an error
            call.failed(exc.status.code.name, "")
            await context.abort_with_status(exc.status)
        except grpc.aio.AbortError:
            raise
        except Exception:
            log.exception("%s failed unexpectedly", name, extra={"fields": {"method": name}})
            call.failed("INTERNAL", "")
            await abort(context, _internal(name))
        finally:
            call.done()

    wrapper.guarded = True  # type: ignore[attr-defined]
    return wrapper


class RunnerServicer(runner_service_pb2_grpc.RunnerServiceServicer):
    """The gRPC face of the runner: phases start and are watched through the phase service, job
    control goes to the command surface, questions to the read model."""

    def __init__(self, service: PhaseService, queries: PhaseQueries, forwarder: OwnerForwarder | None = None,
                 authenticator: Authenticator | None = None,
                 annotate_principal: Callable[[str, str], None] | None = None):
        self.service = service
        self.commands = PhaseCommands(service)
        self.queries = queries
        # Who calls and what they may do (docs/tenancy.md); without credentials configured, admin.
        self.access = CallAccess(authenticator or Authenticator(None), Authorization(
            queries.project_of, self._webhook_project, service.store.append_audit), annotate_principal)
        # A shared database (a forwarder): calls go to the replica their route names (api/routing.py).
        self.router = Router(service.replicas, forwarder, place_on_free_replica=service.config.place_on_free_replica,
                             new_phase_id=service.new_phase_id)

    # -- streams ---------------------------------------------------------------------------

    @_stream
    async def RunPhase(self, request, context) -> AsyncIterator[bytes]:
        spec = spec_from_request(request, request.phase_id or self.service.new_phase_id())
        retry = retry_policy_from_options(request.options, self.service.retry_defaults)
        live = await self.service.start(spec, breakpoints_from_request(request), retry,
                                        request_pb=storable_request(request))
        state = {"completed": False, "handled": False}

        def caller_gone(*_: object) -> None:
            """Applies ``on_disconnect`` once, whichever way the caller's going away is seen first."""
            if state["completed"] or state["handled"]:
                return
            state["handled"] = True
            self.commands.caller_gone(spec.job_id, spec.phase_id)

        # A cancel that lands while grpc writes a message (not inside this generator) never reaches
        # the finally below until the generator is collected; the call's done callback always runs.
        if hasattr(context, "add_done_callback"):
            context.add_done_callback(caller_gone)
        try:
            sent = 0
            async for delivery in live.events.subscribe(0):
                if delivery.moved is not None:  # handed over to another replica: WatchPhase continues there
                    state["completed"] = True
                    raise phase_moved_error(spec.job_id, spec.phase_id, sent, delivery.moved.from_replica,
                                            delivery.moved.retry_after_s)
                if delivery.result is not None:
                    state["completed"] = True
                    yield result_response(delivery.result)
                    return
                sent = delivery.last_sequence
                if delivery.message is not None:  # framed once at publish, the same bytes for every stream
                    yield delivery.message
                    continue
                for message in event_responses(delivery.events):
                    yield message
        finally:
            # A client cancel arrives as CancelledError or as a failed write, depending on where the
            # handler was (docs/grpc-python-service.md §3.2).
            caller_gone()

    @_stream
    async def WatchPhase(self, request, context) -> AsyncIterator[bytes]:
        deliveries = await self.service.watch(request.job_id, request.phase_id, request.after_sequence)
        sent = request.after_sequence
        async for delivery in deliveries:
            if delivery.moved is not None:  # handed over to another replica: WatchPhase continues there
                raise phase_moved_error(request.job_id, request.phase_id, sent, delivery.moved.from_replica,
                                        delivery.moved.retry_after_s)
            if delivery.result is None:
                sent = delivery.last_sequence
            if delivery.result is not None:
                if delivery.result:
                    yield result_response(delivery.result)
                return
            if delivery.message is not None:
                yield delivery.message
                continue
            for message in event_responses(delivery.events):
                yield message

    # -- jobs, phases, tool calls, costs (the read model) ----------------------------------

    @_unary
    async def GetJob(self, request, context):
        return get_job_response(self.queries.job(request.job_id))

    @_unary
    async def ListJobs(self, request, context):
        statuses = statuses_from_request(request.statuses)
        query = {"project": request.project_id, "statuses": [s.name for s in statuses]}
        after = read_token(request.page_token, query, (int, str))
        visible = self.access.authorization.visible(acting.get() or ADMIN)
        projects: str | list[str] = request.project_id
        if visible is not None:  # only the projects the caller may see; a foreign one is empty
            projects = [request.project_id] if request.project_id in visible else \
                sorted(visible) if not request.project_id else []
        page = self.queries.list_jobs(projects, statuses, page_size(request.page_size, 50, 500),
                                      tuple(after) if after else None)
        return list_jobs_response(page.jobs, make_token(query, list(page.next_after)) if page.next_after else "",
                                  full_prompts=request.full_prompts)

    @_unary
    async def ListToolCalls(self, request, context):
        query = {"job": request.job_id, "phase": request.phase_id, "tool": request.tool_name,
                 "failed": request.only_failed}
        after = read_token(request.page_token, query, (int, int, str))
        page = self.queries.list_tool_calls(request.job_id, request.phase_id, request.tool_name, request.only_failed,
                                            page_size(request.page_size, 100, 1000), tuple(after) if after else None)
        return runner_service_pb2.ListToolCallsResponse(
            tool_calls=[tool_call_to_proto(c) for c in page.calls],
            next_page_token=make_token(query, list(page.next_after)) if page.next_after else "",
            stats=[m.tool_stats_to_proto(s) for s in page.stats])

    @_unary
    async def GetCostTotals(self, request, context):
        totals = self.queries.cost_totals(request.project_id, request.job_id, request.phase_id)
        return runner_service_pb2.GetCostTotalsResponse(totals=cost_totals_to_proto(totals))

    @_unary
    async def GetServerStatus(self, request, context):
        return runner_service_pb2.GetServerStatusResponse(status=server_status_to_proto(self.service.server_status()))

    @_unary
    async def GetPhaseDiff(self, request, context):
        return read_diff_page(self.service.require_phase(request.job_id, request.phase_id), request)

    @_unary
    async def InspectPhase(self, request, context):
        inspection = await self.queries.inspect(request.job_id, request.phase_id, request.include_context_usage)
        return runner_service_pb2.InspectPhaseResponse(inspection=inspection_to_proto(inspection))

    # -- job control -----------------------------------------------------------------------

    async def _phase(self, job_id: str, phase_id: str) -> resources_pb2.Phase:
        """The phase after a control call: once this replica's writes so far are committed (the
        status the call set is in the store, for a read here or on any replica)."""
        await self.service.writer.committed()
        return phase_to_proto(self.queries.phase(job_id, phase_id))

    @_unary
    async def CancelPhase(self, request, context):
        await self.commands.cancel(request.job_id, request.phase_id, cancel_reason(request))
        return runner_service_pb2.CancelPhaseResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def PausePhase(self, request, context):
        await self.commands.pause(request.job_id, request.phase_id, hard=enum_value(HARD_PAUSE, request.mode, "mode"))
        return runner_service_pb2.PausePhaseResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def ResumePhase(self, request, context):
        await self.commands.resume(request.job_id, request.phase_id)
        return runner_service_pb2.ResumePhaseResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def StepPhase(self, request, context):
        self.commands.step(request.job_id, request.phase_id)
        return runner_service_pb2.StepPhaseResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def InterruptPhase(self, request, context):
        await self.commands.interrupt(request.job_id, request.phase_id)
        return runner_service_pb2.InterruptPhaseResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def SetPhaseModel(self, request, context):
        await self.commands.set_model(request.job_id, request.phase_id, request.model)
        return runner_service_pb2.SetPhaseModelResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def SetPhasePermissionMode(self, request, context):
        effective = await self.commands.set_permission_mode(request.job_id, request.phase_id,
                                                            permission_mode_from_request(request))
        return runner_service_pb2.SetPhasePermissionModeResponse(
            mode=effective, phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def StopTask(self, request, context):
        await self.commands.stop_task(request.job_id, request.phase_id, request.task_id)
        return runner_service_pb2.StopTaskResponse(phase=await self._phase(request.job_id, request.phase_id))

    @_unary
    async def GetTaskOutput(self, request, context):
        output, total, truncated = await self.commands.task_output(request.job_id, request.phase_id, request.task_id,
                                                                   request.max_bytes)
        return runner_service_pb2.GetTaskOutputResponse(output=output, total_bytes=total, truncated=truncated)

    @_unary
    async def InjectMessage(self, request, context):
        message_uuid, sequence = await self.commands.inject(
            request.job_id, request.phase_id, request.text,
            interrupt_first=enum_value(INTERRUPT_FIRST, request.mode, "mode"))
        return runner_service_pb2.InjectMessageResponse(message_uuid=message_uuid, sequence=sequence)

    @_unary
    async def AddBreakpoint(self, request, context):
        bp = self.commands.add_breakpoint(request.job_id, request.phase_id, breakpoint_from_proto(request.breakpoint))
        return runner_service_pb2.AddBreakpointResponse(breakpoint=breakpoint_to_proto(bp))

    @_unary
    async def ListBreakpoints(self, request, context):
        breakpoints = self.commands.list_breakpoints(request.job_id, request.phase_id)
        return runner_service_pb2.ListBreakpointsResponse(breakpoints=[breakpoint_to_proto(bp) for bp in breakpoints])

    @_unary
    async def RemoveBreakpoint(self, request, context):
        bp = self.commands.remove_breakpoint(request.job_id, request.phase_id, request.breakpoint_id)
        return runner_service_pb2.RemoveBreakpointResponse(breakpoint=breakpoint_to_proto(bp))

    @_unary
    async def ResolveToolCall(self, request, context):
        call = self.commands.resolve(request.job_id, request.phase_id, request.tool_use_id,
                                     decision_from_request(request))
        msg = (m.tool_call_to_proto(call, job_id=request.job_id, phase_id=request.phase_id) if call
               else resources_pb2.ToolCall(tool_use_id=request.tool_use_id))
        return runner_service_pb2.ResolveToolCallResponse(tool_call=msg)


    # -- fork and rewind (docs/fork-and-rewind.md) -----------------------------------------------

    @_unary
    async def ForkPhase(self, request, context):
        point = fork_point_from_proto(request.point, request.conversation_only)
        row, stored = await self.service.fork_source(request.job_id, request.phase_id)
        base = fork_request(request, stored, row.prompt, row.working_dir, row.model, row.project_id,
                            request.new_phase_id or self.service.new_phase_id())
        spec = spec_from_request(base, base.phase_id)
        retry = retry_policy_from_options(base.options, self.service.retry_defaults)
        live, checkpoint = await self.service.fork(spec, request.job_id, request.phase_id, point,
                                                   breakpoints_from_request(base), retry,
                                                   request_pb=storable_request(base))
        return runner_service_pb2.ForkPhaseResponse(phase=await self._phase(spec.job_id, spec.phase_id),
                                                    checkpoint=checkpoint_to_proto(checkpoint))

    @_unary
    async def RewindPhase(self, request, context):
        checkpoint, sequence = await self.commands.rewind(
            request.job_id, request.phase_id, fork_point_from_proto(request.point, request.conversation_only))
        return runner_service_pb2.RewindPhaseResponse(checkpoint=checkpoint_to_proto(checkpoint), sequence=sequence)

    # -- principals and the audit trail (docs/tenancy.md) ----------------------------------------

    def _webhook_project(self, webhook_id: str) -> str | None:
        row = self.service.store.get_webhook(webhook_id)
        return None if row is None else (row.project_id or "*")

    @_unary
    async def WhoAmI(self, request, context):
        return runner_service_pb2.WhoAmIResponse(principal=principal_to_proto(acting.get()))

    @_unary
    async def ListAuditEntries(self, request, context):
        principal = acting.get()
        projects = [request.project_id] if request.project_id else None
        if projects is None and principal is not None and not principal.everywhere(Role.ADMIN):
            projects = sorted(principal.projects(Role.ADMIN))
        query = {"project": request.project_id, "job": request.job_id, "principal": request.principal}
        after = read_token(request.page_token, query, (int,))
        limit = page_size(request.page_size, 100, 1000)
        entries = await asyncio.to_thread(self.queries.audit_entries, projects, request.job_id, request.principal,
                                          limit + 1, after[0] if after else None)
        more = len(entries) > limit
        entries = entries[:limit]
        return runner_service_pb2.ListAuditEntriesResponse(
            entries=[audit_entry_to_proto(e) for e in entries],
            next_page_token=make_token(query, [entries[-1].entry_id]) if more and entries else "")

    @_unary
    async def SetProjectQuota(self, request, context):
        project = request.project_id or DEFAULT_PROJECT
        try:
            day = check_limit("spend_usd_per_day", request.spend_usd_per_day)
            month = check_limit("spend_usd_per_month", request.spend_usd_per_month)
        except ValueError as exc:
            raise invalid_field(str(exc).split()[0], str(exc)) from None
        principal = acting.get()
        await self.commands.set_quota(ProjectQuota(project, day, month, time.time_ns(),
                                                   principal.name if principal else ""))
        quota, spend = await self.commands.quota(project)
        return runner_service_pb2.SetProjectQuotaResponse(quota=project_quota_to_proto(quota, spend))

    @_unary
    async def GetProjectQuota(self, request, context):
        project = request.project_id or DEFAULT_PROJECT
        quota, spend = await self.commands.quota(project)
        return runner_service_pb2.GetProjectQuotaResponse(quota=project_quota_to_proto(quota, spend))

    # -- network breakpoints (docs/network.md; phases/egress_holds.py) ------------------------------

    @_unary
    async def ResolveEgressHold(self, request, context):
        destination = await self.commands.resolve_egress(request.job_id, request.phase_id, request.hold_id,
                                                         egress_decision_from_request(request))
        return runner_service_pb2.ResolveEgressHoldResponse(destination=destination)

    @_unary
    async def ListEgressAllowances(self, request, context):
        rows = await self.commands.egress_allowances(request.project_id or DEFAULT_PROJECT)
        return runner_service_pb2.ListEgressAllowancesResponse(allowances=[egress_allowance_to_proto(*r) for r in rows])

    @_unary
    async def DeleteEgressAllowance(self, request, context):
        if not request.host:
            raise invalid_field("host", "is required")
        await self.commands.delete_egress_allowance(request.project_id or DEFAULT_PROJECT, request.host)
        return runner_service_pb2.DeleteEgressAllowanceResponse()

    # -- the credential vault (docs/network.md; phases/egress_vault.py) -------------------------

    def _vault(self):
        if self.service.egress_vault is None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "NOT_IMPLEMENTED", "the credential vault needs the "
                              "egress proxy (egress_proxy = true)", {"missing": "egress_proxy"})
        return self.service.egress_vault

    @_unary
    async def PutEgressSecret(self, request, context):
        vault = self._vault()
        kind = presentation_from_request(request)
        info = await asyncio.to_thread(vault.put, request.project_id, request.name, request.value,
                                       list(request.hosts), kind, request.header, request.username)
        return runner_service_pb2.PutEgressSecretResponse(secret=secret_to_proto(info))

    @_unary
    async def ListEgressSecrets(self, request, context):
        infos = await asyncio.to_thread(self._vault().list, request.project_id)
        return runner_service_pb2.ListEgressSecretsResponse(secrets=[secret_to_proto(i) for i in infos])

    @_unary
    async def DeleteEgressSecret(self, request, context):
        await asyncio.to_thread(self._vault().delete, request.project_id, request.name)
        return runner_service_pb2.DeleteEgressSecretResponse()

    # -- webhooks (README "Webhooks"; phases/webhooks.py) --------------------------------------

    def _webhooks(self):
        if self.service.webhooks is None:
            raise RunnerError(ErrorKind.UNIMPLEMENTED, "NOT_IMPLEMENTED", "webhooks are not enabled on this server",
                              {"missing": "webhooks"})
        return self.service.webhooks

    @_unary
    async def CreateWebhook(self, request, context):
        row, secret = self._webhooks().create(webhook_spec_from_request(request))
        # The secret goes back only when the server made it, and only now.
        return runner_service_pb2.CreateWebhookResponse(webhook=webhook_to_proto(row),
                                                        secret="" if request.secret else secret)

    @_unary
    async def ListWebhooks(self, request, context):
        return runner_service_pb2.ListWebhooksResponse(
            webhooks=[webhook_to_proto(r) for r in self._webhooks().list(request.project_id)])

    @_unary
    async def DeleteWebhook(self, request, context):
        if not request.webhook_id:
            raise invalid_field("webhook_id", "is required")
        row, cancelled = self._webhooks().delete(request.webhook_id)
        return runner_service_pb2.DeleteWebhookResponse(webhook=webhook_to_proto(row), cancelled_deliveries=cancelled)

    @_unary
    async def ListWebhookDeliveries(self, request, context):
        states = states_from_request(request.states)
        query = {"webhook": request.webhook_id, "job": request.job_id, "phase": request.phase_id, "states": states}
        after = read_token(request.page_token, query, (int,))
        page, more = self._webhooks().deliveries(request.webhook_id, request.job_id, request.phase_id, states,
                                                 page_size(request.page_size, 50, 500), after[0] if after else None)
        return runner_service_pb2.ListWebhookDeliveriesResponse(
            deliveries=[delivery_to_proto(row, attempts) for row, attempts in page],
            next_page_token=make_token(query, [more]) if more is not None else "")


def _pass_through(message: bytes | Any) -> bytes:
    return message if isinstance(message, bytes) else message.SerializeToString()


def _unary_serializer(response_cls: type) -> Callable[[Any], bytes]:
    """A unary response's serializer: a message is encoded, pre-encoded bytes pass as they are."""
    serialize = response_cls.SerializeToString

    def serializer(response: Any) -> bytes:
        return response if type(response) is bytes else serialize(response)

    return serializer


def add_runner_service(servicer: RunnerServicer, server: grpc.aio.Server) -> None:
    """Registers the service; the streaming methods may yield pre-encoded response bytes.

    Requests are handed over as bytes and parsed by the handler's wrapper (``_parse``).
    """
    check_routes(SERVICE)  # every RPC has a route it can take (api/routing.py)
    handlers = {}
    for method in SERVICE.methods:
        behaviour = getattr(servicer, method.name)
        if not getattr(behaviour, "guarded", False):  # every RPC gets the checks and the INTERNAL guard
            raise TypeError(f"RunnerServicer.{method.name} must be wrapped by _unary or _stream")
        if method.server_streaming:
            handlers[method.name] = grpc.unary_stream_rpc_method_handler(behaviour, response_serializer=_pass_through)
        else:
            response_cls = getattr(runner_service_pb2, method.output_type.name)
            handlers[method.name] = grpc.unary_unary_rpc_method_handler(
                behaviour, response_serializer=_unary_serializer(response_cls))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE.full_name, handlers),))
    server.add_registered_method_handlers(SERVICE.full_name, handlers)
