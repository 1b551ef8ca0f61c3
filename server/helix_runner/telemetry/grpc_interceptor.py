"""A gRPC server interceptor: RPC metrics by method and status code, and a server span per RPC.

The span's parent is the W3C trace context (``traceparent`` / ``tracestate``) in the call's
metadata, so an orchestrator's span becomes the parent of ``RunPhase`` and, through it, of the
phase's spans. The span is the current OpenTelemetry context while the handler runs, which is how
``Telemetry.phase`` finds it. It runs outermost (before authentication), so rejected calls count.
"""

from __future__ import annotations

import asyncio
import inspect
import time
from collections.abc import Awaitable, Callable
from typing import Any

import grpc
from opentelemetry import context as otel_context
from opentelemetry import propagate
from opentelemetry.trace import SpanKind, Status, StatusCode, Tracer, get_current_span, set_span_in_context

from helix_runner.telemetry import tracing as t
from helix_runner.telemetry.metrics import Metrics

# Codes that mark a server span as failed (OpenTelemetry RPC conventions for gRPC servers).
_SERVER_ERRORS = frozenset(
    {
        grpc.StatusCode.UNKNOWN,
        grpc.StatusCode.DEADLINE_EXCEEDED,
        grpc.StatusCode.UNIMPLEMENTED,
        grpc.StatusCode.INTERNAL,
        grpc.StatusCode.UNAVAILABLE,
        grpc.StatusCode.DATA_LOSS,
    }
)
_UNKNOWN = "unknown"


def _split(method: str) -> tuple[str, str]:
    """``/pkg.Service/Method`` -> (``pkg.Service``, ``Method``)."""
    service, _, name = method.lstrip("/").rpartition("/")
    return service or _UNKNOWN, name or _UNKNOWN


class _Call:
    """One RPC in flight: started metrics and span; ``finish`` records its status."""

    __slots__ = ("metrics", "labels", "span", "token", "started")

    def __init__(
        self,
        interceptor: TelemetryInterceptor,
        details: grpc.HandlerCallDetails,
        service: str,
        method: str,
        kind: str,
    ) -> None:
        self.metrics = interceptor.metrics
        self.labels = (service, method, kind)
        self.metrics.rpc_started.labels(*self.labels).inc()
        self.started = time.perf_counter()
        self.span = self.token = None
        tracer = interceptor.tracer
        if tracer is not None:
            carrier = {k: v for k, v in details.invocation_metadata or () if isinstance(v, str)}
            self.span = tracer.start_span(
                f"{service}/{method}",
                context=propagate.extract(carrier),
                kind=SpanKind.SERVER,
                attributes={t.RPC_SYSTEM: "grpc", t.RPC_SERVICE: service, t.RPC_METHOD: method},
            )
            self.token = otel_context.attach(set_span_in_context(self.span))

    def finish(self, context: grpc.aio.ServicerContext, exc: BaseException | None) -> None:
        if isinstance(exc, asyncio.CancelledError | GeneratorExit):  # the client went away
            code = grpc.StatusCode.CANCELLED
        else:
            code = context.code() or (
                grpc.StatusCode.UNKNOWN
                if exc is not None and not isinstance(exc, grpc.aio.AbortError)
                else grpc.StatusCode.OK
            )
        self.metrics.rpc_handled.labels(*self.labels, code.name).inc()
        self.metrics.rpc_duration.labels(*self.labels).observe(time.perf_counter() - self.started)
        if self.span is not None:
            self.span.set_attribute(t.RPC_GRPC_STATUS_CODE, code.value[0])
            if code in _SERVER_ERRORS:
                self.span.set_status(Status(StatusCode.ERROR, code.name))
            self.span.end()
            if self.token is not None:
                otel_context.detach(self.token)


class TelemetryInterceptor(grpc.aio.ServerInterceptor):
    """Counts and times every RPC (``grpc_server_*``) and traces it when a tracer is set."""

    def __init__(self, metrics: Metrics, tracer: Tracer | None) -> None:
        self.metrics = metrics
        self.tracer = tracer

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        handler = await continuation(details)
        if handler is None:
            # grpc answers UNIMPLEMENTED itself; the method name came from the client, so it is not a label.
            labels = (_UNKNOWN, _UNKNOWN, _UNKNOWN)
            self.metrics.rpc_started.labels(*labels).inc()
            self.metrics.rpc_handled.labels(*labels, grpc.StatusCode.UNIMPLEMENTED.name).inc()
            return handler
        service, method = _split(details.method)
        options = {
            "request_deserializer": handler.request_deserializer,
            "response_serializer": handler.response_serializer,
        }
        if handler.unary_unary is not None:
            inner: Any = handler.unary_unary

            async def unary_unary(request: Any, context: grpc.aio.ServicerContext) -> Any:
                call = _Call(self, details, service, method, "unary")
                exc: BaseException | None = None
                try:
                    return await inner(request, context)
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    call.finish(context, exc)

            return grpc.unary_unary_rpc_method_handler(unary_unary, **options)
        if handler.unary_stream is not None:
            return grpc.unary_stream_rpc_method_handler(
                self._streaming(handler.unary_stream, details, service, method, "server_stream"), **options
            )
        if handler.stream_unary is not None:
            inner = handler.stream_unary

            async def stream_unary(requests: Any, context: grpc.aio.ServicerContext) -> Any:
                call = _Call(self, details, service, method, "client_stream")
                exc: BaseException | None = None
                try:
                    return await inner(requests, context)
                except BaseException as e:
                    exc = e
                    raise
                finally:
                    call.finish(context, exc)

            return grpc.stream_unary_rpc_method_handler(stream_unary, **options)
        return grpc.stream_stream_rpc_method_handler(
            self._streaming(handler.stream_stream, details, service, method, "bidi_stream"), **options
        )

    def _streaming(
        self, inner: Any, details: grpc.HandlerCallDetails, service: str, method: str, kind: str
    ) -> Callable[..., Any]:
        """Wraps a streaming handler, whether it yields responses or writes them with ``context.write``."""

        async def streaming(request: Any, context: grpc.aio.ServicerContext) -> Any:
            call = _Call(self, details, service, method, kind)
            exc: BaseException | None = None
            try:
                result = inner(request, context)
                if inspect.isasyncgen(result):
                    async for response in result:
                        yield response
                else:
                    await result
            except BaseException as e:
                exc = e
                raise
            finally:
                call.finish(context, exc)

        return streaming


def annotate_principal(name: str, source: str) -> None:
    """Names the caller on the call's server span (OTel ``enduser.id``), when the call is traced."""
    span = get_current_span()
    if span.is_recording():
        span.set_attribute("enduser.id", name)
        span.set_attribute("helix.principal_source", source)
