"""The async client: a stub for every RPC over grpc.aio, plus phase streaming helpers.

betterproto2 0.10 generates async stubs only for grpclib (a second HTTP/2 stack) and sync stubs
for grpcio; this module gives the generated messages an async grpcio stub instead, so the client
shares the server's transport. ``_METHODS`` mirrors the service (a test checks it against the
generated sync stub, which lists every RPC).
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import betterproto2
import grpc

from ._errors import RunnerError
from ._proto.helix.runner import v1 as pb

_SERVICE = "/helix.runner.v1.RunnerService/"

# (python name, RPC name, request type, response type, server streaming)
_METHODS: tuple[tuple[str, str, type, type, bool], ...] = (
    ("run_phase", "RunPhase", pb.RunPhaseRequest, pb.RunPhaseResponse, True),
    ("watch_phase", "WatchPhase", pb.WatchPhaseRequest, pb.WatchPhaseResponse, True),
    ("get_job", "GetJob", pb.GetJobRequest, pb.GetJobResponse, False),
    ("list_jobs", "ListJobs", pb.ListJobsRequest, pb.ListJobsResponse, False),
    ("list_tool_calls", "ListToolCalls", pb.ListToolCallsRequest, pb.ListToolCallsResponse, False),
    ("get_cost_totals", "GetCostTotals", pb.GetCostTotalsRequest, pb.GetCostTotalsResponse, False),
    ("pause_phase", "PausePhase", pb.PausePhaseRequest, pb.PausePhaseResponse, False),
    ("resume_phase", "ResumePhase", pb.ResumePhaseRequest, pb.ResumePhaseResponse, False),
    ("step_phase", "StepPhase", pb.StepPhaseRequest, pb.StepPhaseResponse, False),
    ("interrupt_phase", "InterruptPhase", pb.InterruptPhaseRequest, pb.InterruptPhaseResponse, False),
    ("cancel_phase", "CancelPhase", pb.CancelPhaseRequest, pb.CancelPhaseResponse, False),
    ("inject_message", "InjectMessage", pb.InjectMessageRequest, pb.InjectMessageResponse, False),
    ("inspect_phase", "InspectPhase", pb.InspectPhaseRequest, pb.InspectPhaseResponse, False),
    ("add_breakpoint", "AddBreakpoint", pb.AddBreakpointRequest, pb.AddBreakpointResponse, False),
    ("list_breakpoints", "ListBreakpoints", pb.ListBreakpointsRequest, pb.ListBreakpointsResponse, False),
    ("remove_breakpoint", "RemoveBreakpoint", pb.RemoveBreakpointRequest, pb.RemoveBreakpointResponse, False),
    ("resolve_tool_call", "ResolveToolCall", pb.ResolveToolCallRequest, pb.ResolveToolCallResponse, False),
    ("get_phase_diff", "GetPhaseDiff", pb.GetPhaseDiffRequest, pb.GetPhaseDiffResponse, False),
    ("set_phase_model", "SetPhaseModel", pb.SetPhaseModelRequest, pb.SetPhaseModelResponse, False),
    (
        "set_phase_permission_mode",
        "SetPhasePermissionMode",
        pb.SetPhasePermissionModeRequest,
        pb.SetPhasePermissionModeResponse,
        False,
    ),
    ("stop_task", "StopTask", pb.StopTaskRequest, pb.StopTaskResponse, False),
    ("get_task_output", "GetTaskOutput", pb.GetTaskOutputRequest, pb.GetTaskOutputResponse, False),
    ("get_server_status", "GetServerStatus", pb.GetServerStatusRequest, pb.GetServerStatusResponse, False),
    ("create_webhook", "CreateWebhook", pb.CreateWebhookRequest, pb.CreateWebhookResponse, False),
    ("list_webhooks", "ListWebhooks", pb.ListWebhooksRequest, pb.ListWebhooksResponse, False),
    ("delete_webhook", "DeleteWebhook", pb.DeleteWebhookRequest, pb.DeleteWebhookResponse, False),
    (
        "list_webhook_deliveries",
        "ListWebhookDeliveries",
        pb.ListWebhookDeliveriesRequest,
        pb.ListWebhookDeliveriesResponse,
        False,
    ),
    ("fork_phase", "ForkPhase", pb.ForkPhaseRequest, pb.ForkPhaseResponse, False),
    ("rewind_phase", "RewindPhase", pb.RewindPhaseRequest, pb.RewindPhaseResponse, False),
    ("put_egress_secret", "PutEgressSecret", pb.PutEgressSecretRequest, pb.PutEgressSecretResponse, False),
    ("list_egress_secrets", "ListEgressSecrets", pb.ListEgressSecretsRequest, pb.ListEgressSecretsResponse, False),
    ("delete_egress_secret", "DeleteEgressSecret", pb.DeleteEgressSecretRequest, pb.DeleteEgressSecretResponse, False),
    ("list_audit_entries", "ListAuditEntries", pb.ListAuditEntriesRequest, pb.ListAuditEntriesResponse, False),
    ("who_am_i", "WhoAmI", pb.WhoAmIRequest, pb.WhoAmIResponse, False),
    ("set_project_quota", "SetProjectQuota", pb.SetProjectQuotaRequest, pb.SetProjectQuotaResponse, False),
    ("get_project_quota", "GetProjectQuota", pb.GetProjectQuotaRequest, pb.GetProjectQuotaResponse, False),
    ("resolve_egress_hold", "ResolveEgressHold", pb.ResolveEgressHoldRequest, pb.ResolveEgressHoldResponse, False),
    ("list_egress_allowances", "ListEgressAllowances", pb.ListEgressAllowancesRequest,
     pb.ListEgressAllowancesResponse, False),
    ("delete_egress_allowance", "DeleteEgressAllowance", pb.DeleteEgressAllowanceRequest,
     pb.DeleteEgressAllowanceResponse, False),
)


class RunnerServiceAsyncStub:
    """The raw RunnerService over a ``grpc.aio`` channel, with betterproto2 messages.

    Each RPC is an attribute named like the generated sync stub's method (``get_job``,
    ``run_phase``...), holding a grpc.aio multi-callable: ``await stub.get_job(request,
    timeout=5)`` for unary RPCs, ``async for response in stub.run_phase(request)`` for streams.
    Failures raise ``grpc.aio.AioRpcError``; :class:`RunnerClient` turns them into
    :class:`RunnerError`.
    """

    def __init__(self, channel: grpc.aio.Channel):
        for name, rpc, request_type, response_type, streaming in _METHODS:
            factory = channel.unary_stream if streaming else channel.unary_unary
            callable_ = factory(_SERVICE + rpc, request_type.SerializeToString, response_type.FromString)
            setattr(self, name, callable_)

    def __getattr__(self, name: str) -> Any:  # pragma: no cover - for type checkers only
        raise AttributeError(name)


def event_kind(event: pb.StreamEvent) -> str:
    """The name of the payload field that is set (``"tool_call_started"``...), ``""`` if none."""
    name, _ = betterproto2.which_one_of(event, "payload")
    return name


_Response = TypeVar("_Response", pb.RunPhaseResponse, pb.WatchPhaseResponse)

# Following a moved phase: the first re-attach is immediate (WatchPhase waits for the adopter's
# events itself); a re-attach that fails again (the draining replica answered, or its port is
# already closed) is retried after a backoff from 0.2 s up to 2 s.
_FIRST_BACKOFF_S = 0.2
_MAX_BACKOFF_S = 2.0
DEFAULT_MOVE_TIMEOUT_S = 120.0
"""How long a stream keeps trying to re-attach to a moved phase before it raises (at least the
``RetryInfo`` delay the server sent with ``PHASE_MOVED``)."""


@dataclass(frozen=True)
class PhaseMove:
    """One hand-over a stream followed: the replica the phase left and the last sequence it had sent."""

    job_id: str
    phase_id: str
    from_replica: str
    after_sequence: int
    message: str


class PhaseStream(Generic[_Response]):
    """The events of one phase (``async for``), then its :attr:`result`.

    Iteration yields every :class:`pb.StreamEvent` in sequence order and stops when the
    :class:`pb.PhaseResult` arrives, which is then in :attr:`result`. A failed call raises
    :class:`RunnerError`; a stream that ends without a result raises one with code INTERNAL.
    Use it as an async context manager (or call :meth:`cancel`) to cancel the call early;
    cancelling RunPhase cancels the phase unless it was started with ``ON_DISCONNECT_DETACH``.

    **Moves.** When the replica serving the stream drains, it hands the phase over to another
    replica and ends the stream with ``UNAVAILABLE`` / ``PHASE_MOVED`` (see :data:`PHASE_MOVED`).
    A stream made with ``reattach`` (the default of :class:`RunnerClient`) then calls
    ``WatchPhase`` after the last sequence it received, through the same channel (a Kubernetes
    Service, or a target naming several replicas, reaches one that is not draining), and goes on:
    the caller sees one gap-free sequence, each event once. Each move is in :attr:`moves` and
    told to ``on_move``. After a move the stream is a watch: leaving it no longer cancels the
    phase (cancel it with ``CancelPhase``).
    """

    def __init__(
        self,
        call: Any,
        *,
        reattach: Callable[[int], Any] | None = None,
        move_timeout: float = DEFAULT_MOVE_TIMEOUT_S,
        on_move: Callable[[PhaseMove], None] | None = None,
    ):
        self._call = call
        self._responses: AsyncIterator[Any] = call.__aiter__()
        self._pending: list[pb.StreamEvent] = []
        self._index = 0
        self.result: pb.PhaseResult | None = None
        self._done = False
        self._reattach = reattach
        self._move_timeout = move_timeout
        self._on_move = on_move
        self.last_sequence = 0
        """The sequence of the last event this stream yielded or holds (its re-attach cursor)."""
        self.moves: list[PhaseMove] = []

    def __aiter__(self) -> PhaseStream[_Response]:
        return self

    async def __anext__(self) -> pb.StreamEvent:
        while True:
            if self._index < len(self._pending):
                event = self._pending[self._index]
                self._index += 1
                return event
            if self._done:
                raise StopAsyncIteration
            try:
                response = await self._responses.__anext__()
            except StopAsyncIteration:
                self._done = True
                raise RunnerError(
                    grpc.StatusCode.INTERNAL, "the phase stream ended without a PhaseResult"
                ) from None
            except grpc.aio.AioRpcError as exc:
                error = RunnerError.from_rpc_error(exc)
                if self._reattach is None or not error.phase_moved or self._done:
                    self._done = True
                    raise error from None
                await self._follow(error)
                continue
            # Events at or below the cursor were delivered before a move: never twice.
            fresh = [e for e in response.events if e.sequence > self.last_sequence]
            if fresh:
                self.last_sequence = fresh[-1].sequence
            self._pending, self._index = fresh, 0
            if response.result is not None:
                self.result = response.result
                self._done = True

    async def _follow(self, moved: RunnerError) -> None:
        """Re-attaches through WatchPhase after ``moved`` (a PHASE_MOVED end), retrying while the
        answer is another PHASE_MOVED or an unreachable replica, for at most the move timeout."""
        assert self._reattach is not None
        meta = moved.metadata
        move = PhaseMove(meta.get("job_id", ""), meta.get("phase_id", ""), meta.get("from_replica", ""),
                         int(meta.get("after_sequence") or 0), moved.message)  # fmt: skip
        self.moves.append(move)
        if self._on_move is not None:
            self._on_move(move)
        # Our own cursor, not the server's after_sequence: it is what this caller really received.
        loop = asyncio.get_running_loop()
        deadline = loop.time() + max(self._move_timeout, moved.retry_delay or 0.0)
        backoff = _FIRST_BACKOFF_S
        while True:
            if self._done:  # cancelled by the caller meanwhile
                return
            call = self._reattach(self.last_sequence)
            self._call = call  # so that cancel() reaches the call being made
            responses = call.__aiter__()
            try:
                first = await responses.__anext__()
            except (grpc.aio.AioRpcError, StopAsyncIteration) as exc:
                if self._done:
                    return
                error = (
                    RunnerError.from_rpc_error(exc)
                    if isinstance(exc, grpc.aio.AioRpcError)
                    else RunnerError(grpc.StatusCode.INTERNAL, "the phase stream ended without a PhaseResult")
                )
                # CANCELLED here is not ours (``_done`` is): the old replica's server stopping under
                # the re-attach at the end of its drain; the phase goes on elsewhere.
                retry = (
                    error.phase_moved
                    or error.code in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.CANCELLED)
                    or error.reason == "DRAINING"
                )
                if not retry or loop.time() + backoff > deadline:
                    self._done = True
                    raise error from None
                await asyncio.sleep(backoff)
                backoff = min(backoff * 2, _MAX_BACKOFF_S)
                continue
            self._responses = _prepend(first, responses)
            return

    async def collect(self) -> tuple[list[pb.StreamEvent], pb.PhaseResult]:
        """Reads to the end: every remaining event and the result."""
        events = [event async for event in self]
        assert self.result is not None
        return events, self.result

    def cancel(self) -> None:
        """Cancels the call (no-op once it has finished)."""
        self._done = True
        self._call.cancel()

    async def __aenter__(self) -> PhaseStream[_Response]:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        if self.result is None:
            self.cancel()


async def _prepend(first: Any, rest: AsyncIterator[Any]) -> AsyncIterator[Any]:
    yield first
    async for item in rest:
        yield item


def secure_channel(
    target: str,
    *,
    root_certificates: bytes | None = None,
    certificate_chain: bytes | None = None,
    private_key: bytes | None = None,
    server_name: str | None = None,
) -> grpc.aio.Channel:
    """A TLS ``grpc.aio`` channel for ``RunnerClient(channel=...)``; arguments are PEM bytes.

    ``root_certificates`` verifies the server (default: grpc's roots); ``certificate_chain`` and
    ``private_key`` are this client's certificate for a server that requires mutual TLS;
    ``server_name`` is the name expected in the server's certificate when it differs from the
    target's host (an IP address, a port-forward to ``127.0.0.1``).
    """
    if (certificate_chain is None) != (private_key is None):
        raise ValueError("certificate_chain and private_key go together")
    credentials = grpc.ssl_channel_credentials(
        root_certificates=root_certificates, private_key=private_key, certificate_chain=certificate_chain
    )
    options = [("grpc.ssl_target_name_override", server_name)] if server_name else []
    return grpc.aio.secure_channel(target, credentials, options=options)


class RunnerClient:
    """An async RunnerService client.

    ``RunnerClient("host:port")`` opens an insecure channel (use ``channel=secure_channel(...)`` for
    TLS or mutual TLS, or any channel with custom options); ``token=`` sends ``authorization: Bearer <token>`` with every call. Close it with
    ``await client.close()`` or use ``async with``. :attr:`stub` is the raw stub for every RPC;
    the methods below wrap the common ones and raise :class:`RunnerError`.
    """

    def __init__(
        self,
        target: str = "127.0.0.1:50051",
        *,
        channel: grpc.aio.Channel | None = None,
        token: str | None = None,
        timeout: float | None = 30.0,
        follow_moves: bool = True,
        move_timeout: float = DEFAULT_MOVE_TIMEOUT_S,
    ):
        self._owns_channel = channel is None
        self.channel = channel if channel is not None else grpc.aio.insecure_channel(target)
        self.stub = RunnerServiceAsyncStub(self.channel)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        """Deadline in seconds for unary calls (streams have none)."""
        self.follow_moves = follow_moves
        """Whether phase streams re-attach through WatchPhase when their phase moves to another
        replica (``PHASE_MOVED``, a drain); off, the stream raises that error instead."""
        self.move_timeout = move_timeout

    async def __aenter__(self) -> RunnerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_channel:
            await self.channel.close()

    # -- streams -----------------------------------------------------------------------------

    def run_phase(
        self, request: pb.RunPhaseRequest, *, on_move: Callable[[PhaseMove], None] | None = None
    ) -> PhaseStream[pb.RunPhaseResponse]:
        """Starts a phase and streams it (events, then :attr:`PhaseStream.result`), following the
        phase when it moves to another replica (:class:`PhaseStream`, "Moves")."""
        call = self.stub.run_phase(request, metadata=self._metadata)
        return self._stream(call, request.job_id, request.phase_id, on_move)

    def watch_phase(
        self,
        job_id: str,
        phase_id: str,
        after_sequence: int = 0,
        *,
        on_move: Callable[[PhaseMove], None] | None = None,
    ) -> PhaseStream[pb.WatchPhaseResponse]:
        """Attaches to a phase: events after ``after_sequence`` (recorded, then live), then the
        result; follows the phase when it moves to another replica."""
        stream = self._stream(self._watch_call(job_id, phase_id, after_sequence), job_id, phase_id, on_move)
        stream.last_sequence = after_sequence
        return stream

    def _watch_call(self, job_id: str, phase_id: str, after_sequence: int) -> Any:
        request = pb.WatchPhaseRequest(job_id=job_id, phase_id=phase_id, after_sequence=after_sequence)
        return self.stub.watch_phase(request, metadata=self._metadata)

    def _stream(
        self, call: Any, job_id: str, phase_id: str, on_move: Callable[[PhaseMove], None] | None
    ) -> Any:
        if not self.follow_moves:
            return PhaseStream(call)
        return PhaseStream(call, reattach=lambda after: self._watch_call(job_id, phase_id, after),
                           move_timeout=self.move_timeout, on_move=on_move)  # fmt: skip

    # -- unary calls ---------------------------------------------------------------------------

    async def call(self, name: str, request: betterproto2.Message) -> Any:
        """Any unary RPC by its stub name (``"pause_phase"``...), raising :class:`RunnerError`."""
        try:
            return await getattr(self.stub, name)(request, timeout=self.timeout, metadata=self._metadata)
        except grpc.aio.AioRpcError as exc:
            raise RunnerError.from_rpc_error(exc) from None

    async def get_job(self, job_id: str) -> pb.Job:
        response = await self.call("get_job", pb.GetJobRequest(job_id=job_id))
        return response.job

    async def list_jobs(
        self,
        project_id: str = "",
        statuses: Sequence[pb.PhaseStatus] = (),
        page_size: int = 0,
        page_token: str = "",
    ) -> pb.ListJobsResponse:
        """One page of jobs, newest first."""
        request = pb.ListJobsRequest(
            project_id=project_id, statuses=list(statuses), page_size=page_size, page_token=page_token
        )
        return await self.call("list_jobs", request)

    async def iter_jobs(
        self, project_id: str = "", statuses: Iterable[pb.PhaseStatus] = (), page_size: int = 0
    ) -> AsyncIterator[pb.Job]:
        """Every matching job, newest first, following page tokens."""
        token = ""
        while True:
            page = await self.list_jobs(project_id, list(statuses), page_size, token)
            for job in page.jobs:
                yield job
            token = page.next_page_token
            if not token:
                return

    async def list_tool_calls(
        self, job_id: str, phase_id: str = "", **fields: Any
    ) -> pb.ListToolCallsResponse:
        return await self.call(
            "list_tool_calls", pb.ListToolCallsRequest(job_id=job_id, phase_id=phase_id, **fields)
        )

    async def get_cost_totals(
        self, *, project_id: str = "", job_id: str = "", phase_id: str = ""
    ) -> pb.CostTotals:
        request = pb.GetCostTotalsRequest(project_id=project_id, job_id=job_id, phase_id=phase_id)
        response = await self.call("get_cost_totals", request)
        return response.totals

    async def get_server_status(self) -> pb.ServerStatus:
        """How the server runs phases: its sandbox's layers, its containment mode, any refusal."""
        response = await self.call("get_server_status", pb.GetServerStatusRequest())
        return response.status

    async def cancel_phase(self, job_id: str, phase_id: str, reason: str = "") -> pb.Phase:
        request = pb.CancelPhaseRequest(job_id=job_id, phase_id=phase_id, reason=reason)
        response = await self.call("cancel_phase", request)
        return response.phase

    async def fork_phase(
        self, job_id: str, phase_id: str, point: pb.ForkPoint, *, new_phase_id: str = "", **fields: Any
    ) -> pb.ForkPhaseResponse:
        """Starts a new phase of the job from a checkpoint of ``phase_id`` (``point``: a tool call,
        a turn or a checkpoint number, and optionally a deny or edit of that call or a message);
        ``fields``: ``model``, ``permission_mode``, ``breakpoints``, ``conversation_only``. Watch the
        fork with :meth:`watch_phase` (its id is ``response.phase.phase_id``)."""
        request = pb.ForkPhaseRequest(job_id=job_id, phase_id=phase_id, point=point, new_phase_id=new_phase_id,
                                      **fields)
        return await self.call("fork_phase", request)

    async def rewind_phase(
        self, job_id: str, phase_id: str, point: pb.ForkPoint, *, conversation_only: bool = False
    ) -> pb.RewindPhaseResponse:
        """Takes a paused or held phase back to a checkpoint in place (its stream gets a REWOUND event)."""
        request = pb.RewindPhaseRequest(job_id=job_id, phase_id=phase_id, point=point,
                                        conversation_only=conversation_only)
        return await self.call("rewind_phase", request)

    async def put_egress_secret(
        self, project_id: str, name: str, value: bytes, hosts: list[str], presentation: pb.EgressSecretPresentation,
        *, header: str = "", username: str = ""
    ) -> pb.EgressSecret:
        """Stores a secret in the project's credential vault (write-only: the value never comes back);
        the egress proxy adds it to the project's requests for ``hosts`` only (docs/network.md)."""
        request = pb.PutEgressSecretRequest(project_id=project_id, name=name, value=value, hosts=hosts,
                                            presentation=presentation, header=header, username=username)
        return (await self.call("put_egress_secret", request)).secret

    async def list_egress_secrets(self, project_id: str) -> list[pb.EgressSecret]:
        """The project's secrets: names, hosts, presentation; never values."""
        return list((await self.call("list_egress_secrets", pb.ListEgressSecretsRequest(project_id=project_id))).secrets)

    async def delete_egress_secret(self, project_id: str, name: str) -> None:
        await self.call("delete_egress_secret", pb.DeleteEgressSecretRequest(project_id=project_id, name=name))

    async def who_am_i(self) -> pb.Principal:
        """Who the server takes this client for, and its grants per project (docs/tenancy.md)."""
        return (await self.call("who_am_i", pb.WhoAmIRequest())).principal

    async def set_project_quota(self, project_id: str, *, spend_usd_per_day: float = 0.0,
                                spend_usd_per_month: float = 0.0) -> pb.ProjectQuota:
        """Sets a project's spend caps (0: none); needs ``admin`` (docs/tenancy.md)."""
        return (await self.call("set_project_quota", pb.SetProjectQuotaRequest(
            project_id=project_id, spend_usd_per_day=spend_usd_per_day,
            spend_usd_per_month=spend_usd_per_month))).quota

    async def get_project_quota(self, project_id: str = "") -> pb.ProjectQuota:
        """A project's caps and what it spent today and this month."""
        return (await self.call("get_project_quota", pb.GetProjectQuotaRequest(project_id=project_id))).quota

    async def resolve_egress_hold(self, job_id: str, phase_id: str, hold_id: str,
                                  decision: pb.EgressHoldDecision, *, reason: str = "") -> str:
        """Decides a network request a breakpoint holds (docs/network.md); its destination."""
        return (await self.call("resolve_egress_hold", pb.ResolveEgressHoldRequest(
            job_id=job_id, phase_id=phase_id, hold_id=hold_id, decision=decision, reason=reason))).destination

    async def list_audit_entries(self, *, project_id: str = "", job_id: str = "", principal: str = "",
                                 page_size: int = 0, page_token: str = "") -> pb.ListAuditEntriesResponse:
        """A page of the audit trail, newest first (needs ``admin``)."""
        return await self.call("list_audit_entries", pb.ListAuditEntriesRequest(
            project_id=project_id, job_id=job_id, principal=principal, page_size=page_size, page_token=page_token))
