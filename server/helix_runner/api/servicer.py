"""RunnerService over gRPC: translates requests to domain calls and domain results to messages.

This is the only place (with ``event_mapping`` and ``errors``) that touches generated code.
Every handler converts ``RunnerError`` into a rich status; nothing else leaks to the caller.
"""

from __future__ import annotations

import functools
import logging
from collections.abc import Awaitable, Callable
from typing import Any

import grpc

from helix.runner.v1 import runner_service_pb2_grpc
from helix_runner.api.errors import abort
from helix_runner.errors import RunnerError, not_implemented

log = logging.getLogger(__name__)


def _unary(handler: Callable[..., Awaitable[Any]]) -> Callable[..., Awaitable[Any]]:
    """Wraps a unary handler so domain errors become rich statuses."""

    @functools.wraps(handler)
    async def wrapper(self, request, context: grpc.aio.ServicerContext):
        try:
            return await handler(self, request, context)
        except RunnerError as exc:
            await abort(context, exc)

    return wrapper


class RunnerServicer(runner_service_pb2_grpc.RunnerServiceServicer):
    """The gRPC face of the runner."""

    @_unary
    async def PausePhase(self, request, context):
        raise not_implemented("PausePhase", "job control (pause before the next tool call) arrives with issue 5")

    @_unary
    async def ResumePhase(self, request, context):
        raise not_implemented("ResumePhase", "job control (resume a paused phase) arrives with issue 5")

    @_unary
    async def StepPhase(self, request, context):
        raise not_implemented("StepPhase", "job control (step one tool call) arrives with issue 5")

    @_unary
    async def InterruptPhase(self, request, context):
        raise not_implemented("InterruptPhase", "the stdin control protocol's interrupt arrives with issue 5")

    @_unary
    async def InjectMessage(self, request, context):
        raise not_implemented("InjectMessage", "message injection over the stdin control protocol arrives with issue 5")

    @_unary
    async def InspectPhase(self, request, context):
        raise not_implemented("InspectPhase", "phase inspection arrives with issue 5")

    @_unary
    async def AddBreakpoint(self, request, context):
        raise not_implemented("AddBreakpoint", "breakpoints arrive with issue 5")

    @_unary
    async def ListBreakpoints(self, request, context):
        raise not_implemented("ListBreakpoints", "breakpoints arrive with issue 5")

    @_unary
    async def RemoveBreakpoint(self, request, context):
        raise not_implemented("RemoveBreakpoint", "breakpoints arrive with issue 5")

    @_unary
    async def ResolveToolCall(self, request, context):
        raise not_implemented("ResolveToolCall", "approve / deny / edit of held tool calls arrives with issue 5")

    @_unary
    async def CancelPhase(self, request, context):
        raise not_implemented("CancelPhase", "phase supervision arrives with issue 4")

    @_unary
    async def GetJob(self, request, context):
        raise not_implemented("GetJob", "job and phase persistence arrives with issue 4")

    @_unary
    async def ListJobs(self, request, context):
        raise not_implemented("ListJobs", "job and phase persistence arrives with issue 4")

    @_unary
    async def ListToolCalls(self, request, context):
        raise not_implemented("ListToolCalls", "tool-call persistence arrives with issue 4")

    @_unary
    async def GetCostTotals(self, request, context):
        raise not_implemented("GetCostTotals", "cost persistence arrives with issue 4")

    async def RunPhase(self, request, context):
        await abort(context, not_implemented("RunPhase", "phase supervision of the claude CLI arrives with issue 4"))
        yield  # pragma: no cover

    async def WatchPhase(self, request, context):
        await abort(context, not_implemented("WatchPhase", "watching recorded phases arrives with issue 4"))
        yield  # pragma: no cover
