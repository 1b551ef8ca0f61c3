"""Bearer-token authentication for every RPC except health checking and reflection.

The kubelet's native gRPC probe sends no credentials, and reflection only describes the API,
so both stay open; everything else needs ``authorization: Bearer <token>``.

The configured secret is the token itself or ``sha256:<hex>``, the SHA-256 digest of the token:
the phases run as the server's user and can read its token file, and a digest read there
authenticates nobody (presented as a token it is hashed again).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

import grpc

from helix_runner.api.errors import to_status
from helix_runner.api.principals import Authenticator
from helix_runner.config import TOKEN_DIGEST_PREFIX
from helix_runner.errors import ErrorKind, RunnerError

_OPEN_PREFIXES = ("/grpc.health.v1.Health/", "/grpc.reflection.")


def unauthenticated() -> RunnerError:
    """The error every transport reports for a missing or wrong token."""
    return RunnerError(
        ErrorKind.UNAUTHENTICATED, "UNAUTHENTICATED", "missing or invalid bearer token in 'authorization'"
    )


def is_digest(token: str) -> bool:
    """Whether the configured secret is the token's SHA-256 digest (``sha256:`` and 64 hex digits)."""
    return token.startswith(TOKEN_DIGEST_PREFIX)


class BearerTokenInterceptor(grpc.aio.ServerInterceptor):
    """Rejects calls that name no principal with UNAUTHENTICATED + ErrorInfo, before the request is
    read: a bearer token the authenticator knows (``api/principals.py``), or, with mutual TLS where a
    certificate alone may do, no header at all (the handler then maps the certificate's subject)."""

    def __init__(self, authenticator: Authenticator):
        self._authenticator = authenticator

    async def intercept_service(
        self,
        continuation: Callable[[grpc.HandlerCallDetails], Awaitable[grpc.RpcMethodHandler]],
        details: grpc.HandlerCallDetails,
    ) -> grpc.RpcMethodHandler:
        if details.method.startswith(_OPEN_PREFIXES):
            return await continuation(details)
        presented = next((v for k, v in details.invocation_metadata or () if k == "authorization"), "")
        if (self._authenticator.from_header(presented) is not None if presented
                else self._authenticator.certificate_may_suffice):
            return await continuation(details)
        handler = await continuation(details)
        return _rejecting(handler)


def _rejecting(handler: grpc.RpcMethodHandler | None) -> grpc.RpcMethodHandler:
    status = to_status(unauthenticated())

    async def unary(request, context):
        await context.abort_with_status(status)

    async def stream(request, context):
        await context.abort_with_status(status)
        yield  # pragma: no cover - makes this an async generator

    if handler is None or not handler.response_streaming:
        return grpc.unary_unary_rpc_method_handler(
            unary,
            request_deserializer=handler.request_deserializer if handler else None,
            response_serializer=handler.response_serializer if handler else None,
        )
    return grpc.unary_stream_rpc_method_handler(
        stream, request_deserializer=handler.request_deserializer, response_serializer=handler.response_serializer
    )
