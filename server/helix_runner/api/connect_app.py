"""RunnerService over the Connect protocol, for browsers: the gRPC servicer's handlers, unchanged.

Browsers cannot speak gRPC (HTTP/2 trailers), so the dashboard calls the same service through
connectrpc's ASGI application (Connect, gRPC-Web; binary or JSON). Nothing is implemented twice:
every method here calls the ``RunnerServicer`` handler of the same name with a small context shim,
so a call is checked and routed among replicas exactly as over gRPC (``api/routing.py``).
A handler ends a failed call with ``context.abort_with_status(status)`` (``api.errors.abort``);
the shim turns that rich status into a ``ConnectError`` with the same code, message and the one
``google.rpc.ErrorInfo`` detail, so both transports report errors identically.

The streaming handlers yield pre-encoded response bytes (``api.wire``), and some unary ones
(GetJob, ListJobs) return them; the binary codec passes them through untouched, the JSON codec
decodes them once to render JSON.
"""

from __future__ import annotations

import contextlib
import logging
import re
from collections.abc import AsyncIterator, Callable
from typing import Any

import grpc
from connectrpc.code import Code
from connectrpc.compat import google_protobuf_binary_codec, google_protobuf_json_codec
from connectrpc.errors import ConnectError, ErrorDetail
from connectrpc.request import RequestContext
from google.protobuf.message import Message
from google.rpc import status_pb2
from protobuf.wkt import Any as WireAny

from helix.runner.v1 import runner_service_pb2
from helix.runner.v1.runner_service_connect import RunnerServiceASGIApplication
from helix_runner.api.auth import unauthenticated
from helix_runner.api.errors import to_status
from helix_runner.api.principals import Authenticator
from helix_runner.api.service_descriptor import SERVICE
from helix_runner.api.servicer import RunnerServicer
from helix_runner.domain.bounds import MAX_JSON_DEPTH
from helix_runner.domain.json_depth import nesting_depth
from helix_runner.errors import ErrorKind, RunnerError

log = logging.getLogger(__name__)

_DETAILS_KEY = "grpc-status-details-bin"
# gRPC spells one code differently from Connect; the rest share their names.
_CODE_NAMES = {"CANCELLED": "CANCELED"}


class _Encoded:
    """A response message already encoded by the servicer, with the class to decode it for JSON."""

    __slots__ = ("data", "message_class")

    def __init__(self, data: bytes, message_class: type[Message]):
        self.data = data
        self.message_class = message_class


class _PassThroughBinaryCodec:
    """The protobuf binary codec that sends pre-encoded responses as they are."""

    def __init__(self) -> None:
        self._inner = google_protobuf_binary_codec()

    def name(self) -> str:
        return self._inner.name()

    def encode(self, message: Any) -> bytes:
        return message.data if isinstance(message, _Encoded) else self._inner.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type) -> Any:
        return self._inner.decode(data, message_class)


class _DecodingJsonCodec:
    """The protobuf JSON codec; pre-encoded responses are decoded first (JSON is for people and curl)."""

    def __init__(self) -> None:
        self._inner = google_protobuf_json_codec()

    def name(self) -> str:
        return self._inner.name()

    def encode(self, message: Any) -> bytes:
        if isinstance(message, _Encoded):
            message = message.message_class.FromString(message.data)
        return self._inner.encode(message)

    def decode(self, data: bytes | bytearray, message_class: type) -> Any:
        # protobuf's JSON parser runs Python's recursive json.loads first: a body nested a few
        # thousand levels would end in its RecursionError's text (domain/json_depth.py).
        depth = nesting_depth(bytes(data).decode("utf-8", "replace"))
        if depth > MAX_JSON_DEPTH:
            raise connect_error(to_status(RunnerError(
                ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                f"the request body nests {depth} levels deep; the limit is {MAX_JSON_DEPTH}",
                {"field": "request", "depth": depth, "max_depth": MAX_JSON_DEPTH})))
        return self._inner.decode(data, message_class)


def connect_error(status: grpc.Status) -> ConnectError:
    """The Connect error for a rich gRPC status: same code, message and details (the ErrorInfo)."""
    code = Code[_CODE_NAMES.get(status.code.name, status.code.name)]
    details: list[ErrorDetail] = []
    message = status.details or ""
    for key, value in status.trailing_metadata or ():
        if key == _DETAILS_KEY:
            rich = status_pb2.Status.FromString(value)
            message = rich.message
            details = [ErrorDetail(WireAny(type_url=d.type_url, value=d.value)) for d in rich.details]
    return ConnectError(code, message, details)


class _Aborted(Exception):
    """Raised by the context shim where grpc.aio's ``abort_with_status`` would raise."""

    def __init__(self, status: grpc.Status):
        super().__init__(status.details)
        self.status = status


class _ContextShim:
    """The part of ``grpc.aio.ServicerContext`` the servicer uses: ending a call with a status, the
    caller's deadline and metadata (for routing, api/routing.py)."""

    __slots__ = ("_ctx",)

    def __init__(self, ctx: RequestContext):
        self._ctx = ctx

    async def abort_with_status(self, status: grpc.Status) -> None:
        raise _Aborted(status)

    def time_remaining(self) -> float | None:
        timeout_ms = self._ctx.timeout_ms
        return None if timeout_ms is None else max(0.0, timeout_ms / 1000)

    def invocation_metadata(self) -> tuple[tuple[str, str], ...]:
        # The caller's credential only; never the forwarding or principal headers: replicas forward
        # over gRPC, so a Connect call is always routed and checked as its own caller.
        authorization = self._ctx.request_headers.get("authorization")
        return (("authorization", authorization),) if authorization else ()

    def peer(self) -> str:
        return ""


def _internal(method: str) -> ConnectError:
    # Like the gRPC path, an unexpected exception's text never reaches the caller; the log has it.
    log.exception("unexpected error in a Connect call", extra={"fields": {"method": method}})
    return ConnectError(Code.INTERNAL, "internal error")


def _snake(name: str) -> str:
    return re.sub(r"(?<!^)(?=[A-Z])", "_", name).lower()


class ConnectRunnerService:
    """The generated Connect ``RunnerService`` protocol, each method delegating to the gRPC servicer."""

    def __init__(self, servicer: RunnerServicer):
        self._servicer = servicer
        for method in SERVICE.methods:
            handler = getattr(servicer, method.name)
            response_class = getattr(runner_service_pb2, method.output_type.name)
            if method.server_streaming:
                setattr(self, _snake(method.name), self._streaming(method.name, handler, response_class))
            else:
                setattr(self, _snake(method.name), self._unary(method.name, handler, response_class))

    @staticmethod
    def _unary(name: str, handler: Callable[..., Any], response_class: type[Message]) -> Callable[..., Any]:
        async def call(request: Message, ctx: RequestContext) -> Message | _Encoded:
            try:
                response = await handler(request, _ContextShim(ctx))
                return _Encoded(response, response_class) if type(response) is bytes else response
            except _Aborted as exc:
                raise connect_error(exc.status) from None
            except ConnectError:
                raise
            except Exception:  # noqa: BLE001 - mapped to INTERNAL without leaking the text
                raise _internal(name) from None

        return call

    @staticmethod
    def _streaming(
        name: str, handler: Callable[..., Any], response_class: type[Message]
    ) -> Callable[..., Any]:
        async def call(request: Message, ctx: RequestContext) -> AsyncIterator[_Encoded]:
            try:
                # aclosing: a client that goes away closes the servicer's generator at once, so its
                # own cleanup (cancel or detach the phase, unsubscribe) runs now, not at GC time.
                async with contextlib.aclosing(handler(request, _ContextShim(ctx))) as responses:
                    async for data in responses:
                        yield _Encoded(data, response_class)
            except _Aborted as exc:
                raise connect_error(exc.status) from None
            except ConnectError:
                raise
            except Exception:  # noqa: BLE001 - mapped to INTERNAL without leaking the text
                raise _internal(name) from None

        return call


class BearerTokenCheck:
    """Connect metadata interceptor: the gRPC port's bearer-token rule (``api.auth``) for HTTP callers.

    Runs before the request body is read, so an unauthenticated caller costs nothing. (What the
    caller may do is checked per call, as on the gRPC port: ``api/authorization.py``.)
    """

    def __init__(self, authenticator: Authenticator):
        self._authenticator = authenticator

    async def on_start(self, ctx: RequestContext) -> None:
        if self._authenticator.from_header(ctx.request_headers.get("authorization", "")) is None:
            raise connect_error(to_status(unauthenticated()))

    async def on_end(self, token: None, ctx: RequestContext, error: Exception | None) -> None:
        return None


def build_connect_app(servicer: RunnerServicer) -> RunnerServiceASGIApplication:
    """The ASGI application serving RunnerService at ``/helix.runner.v1.RunnerService/*``; callers are
    authenticated as on the gRPC port (the servicer's authenticator)."""
    authenticator = servicer.access.authenticator
    return RunnerServiceASGIApplication(
        ConnectRunnerService(servicer),  # type: ignore[arg-type]  # methods are set per descriptor
        interceptors=[] if authenticator.open else [BearerTokenCheck(authenticator)],
        codecs=[_PassThroughBinaryCodec(), _DecodingJsonCodec()],
    )
