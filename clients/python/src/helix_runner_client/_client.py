"""The async client: a stub for every RPC over grpc.aio, plus phase streaming helpers.

betterproto2 0.10 generates async stubs only for grpclib (a second HTTP/2 stack) and sync stubs
for grpcio; this module gives the generated messages an async grpcio stub instead, so the client
shares the server's transport. ``_METHODS`` mirrors the service (a test checks it against the
generated sync stub, which lists every RPC).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable, Sequence
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
    ("set_phase_permission_mode", "SetPhasePermissionMode", pb.SetPhasePermissionModeRequest,
     pb.SetPhasePermissionModeResponse, False),
    ("stop_task", "StopTask", pb.StopTaskRequest, pb.StopTaskResponse, False),
    ("get_task_output", "GetTaskOutput", pb.GetTaskOutputRequest, pb.GetTaskOutputResponse, False),
    ("get_server_status", "GetServerStatus", pb.GetServerStatusRequest, pb.GetServerStatusResponse, False),
    ("create_webhook", "CreateWebhook", pb.CreateWebhookRequest, pb.CreateWebhookResponse, False),
    ("list_webhooks", "ListWebhooks", pb.ListWebhooksRequest, pb.ListWebhooksResponse, False),
    ("delete_webhook", "DeleteWebhook", pb.DeleteWebhookRequest, pb.DeleteWebhookResponse, False),
    ("list_webhook_deliveries", "ListWebhookDeliveries", pb.ListWebhookDeliveriesRequest,
     pb.ListWebhookDeliveriesResponse, False),
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


class PhaseStream(Generic[_Response]):
    """The events of one phase (``async for``), then its :attr:`result`.

    Iteration yields every :class:`pb.StreamEvent` in sequence order and stops when the
    :class:`pb.PhaseResult` arrives, which is then in :attr:`result`. A failed call raises
    :class:`RunnerError`; a stream that ends without a result raises one with code INTERNAL.
    Use it as an async context manager (or call :meth:`cancel`) to cancel the call early;
    cancelling RunPhase cancels the phase unless it was started with ``ON_DISCONNECT_DETACH``.
    """

    def __init__(self, call: Any):
        self._call = call
        self._responses: AsyncIterator[_Response] = call.__aiter__()
        self._pending: list[pb.StreamEvent] = []
        self._index = 0
        self.result: pb.PhaseResult | None = None
        self._done = False

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
                raise RunnerError(grpc.StatusCode.INTERNAL, "the phase stream ended without a PhaseResult") from None
            except grpc.aio.AioRpcError as exc:
                self._done = True
                raise RunnerError.from_rpc_error(exc) from None
            self._pending, self._index = list(response.events), 0
            if response.result is not None:
                self.result = response.result
                self._done = True

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
    ):
        self._owns_channel = channel is None
        self.channel = channel if channel is not None else grpc.aio.insecure_channel(target)
        self.stub = RunnerServiceAsyncStub(self.channel)
        self._metadata: tuple[tuple[str, str], ...] = (("authorization", f"Bearer {token}"),) if token else ()
        self.timeout = timeout
        """Deadline in seconds for unary calls (streams have none)."""

    async def __aenter__(self) -> RunnerClient:
        return self

    async def __aexit__(self, *exc_info: object) -> None:
        await self.close()

    async def close(self) -> None:
        if self._owns_channel:
            await self.channel.close()

    # -- streams -----------------------------------------------------------------------------

    def run_phase(self, request: pb.RunPhaseRequest) -> PhaseStream[pb.RunPhaseResponse]:
        """Starts a phase and streams it (events, then :attr:`PhaseStream.result`)."""
        return PhaseStream(self.stub.run_phase(request, metadata=self._metadata))

    def watch_phase(self, job_id: str, phase_id: str, after_sequence: int = 0) -> PhaseStream[pb.WatchPhaseResponse]:
        """Attaches to a phase: events after ``after_sequence`` (recorded, then live), then the result."""
        request = pb.WatchPhaseRequest(job_id=job_id, phase_id=phase_id, after_sequence=after_sequence)
        return PhaseStream(self.stub.watch_phase(request, metadata=self._metadata))

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

    async def list_tool_calls(self, job_id: str, phase_id: str = "", **fields: Any) -> pb.ListToolCallsResponse:
        return await self.call("list_tool_calls", pb.ListToolCallsRequest(job_id=job_id, phase_id=phase_id, **fields))

    async def get_cost_totals(self, *, project_id: str = "", job_id: str = "", phase_id: str = "") -> pb.CostTotals:
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
