"""Maps ``RunnerError`` to ``google.rpc.Status`` with exactly one ``ErrorInfo`` (domain ``runner.helix``).

An error with a retry hint (``retry_after_s``, e.g. ``QUEUE_FULL`` in ``runner_service.proto``) also
carries one ``google.rpc.RetryInfo``, the standard detail for it; ``ErrorInfo`` stays the only ``ErrorInfo``.
"""

from __future__ import annotations

import grpc
from google.protobuf import any_pb2
from google.rpc import code_pb2, error_details_pb2, status_pb2
from grpc_status import rpc_status

from helix_runner.errors import ErrorKind, RunnerError

ERROR_DOMAIN = "runner.helix"

_CODES: dict[ErrorKind, int] = {
    ErrorKind.INVALID_ARGUMENT: code_pb2.INVALID_ARGUMENT,
    ErrorKind.NOT_FOUND: code_pb2.NOT_FOUND,
    ErrorKind.ALREADY_EXISTS: code_pb2.ALREADY_EXISTS,
    ErrorKind.FAILED_PRECONDITION: code_pb2.FAILED_PRECONDITION,
    ErrorKind.OUT_OF_RANGE: code_pb2.OUT_OF_RANGE,
    ErrorKind.RESOURCE_EXHAUSTED: code_pb2.RESOURCE_EXHAUSTED,
    ErrorKind.UNAVAILABLE: code_pb2.UNAVAILABLE,
    ErrorKind.UNIMPLEMENTED: code_pb2.UNIMPLEMENTED,
    ErrorKind.UNAUTHENTICATED: code_pb2.UNAUTHENTICATED,
    ErrorKind.PERMISSION_DENIED: code_pb2.PERMISSION_DENIED,
    ErrorKind.ABORTED: code_pb2.ABORTED,
    ErrorKind.INTERNAL: code_pb2.INTERNAL,
}
assert set(_CODES) == set(ErrorKind)


def to_status(error: RunnerError) -> grpc.Status:
    """The rich status for an error: code, message, one ErrorInfo detail and, with a hint, a RetryInfo."""
    info = error_details_pb2.ErrorInfo(reason=error.reason, domain=ERROR_DOMAIN, metadata=error.metadata)
    detail = any_pb2.Any()
    detail.Pack(info)
    details = [detail]
    if error.retry_after_s is not None:
        retry = error_details_pb2.RetryInfo()
        retry.retry_delay.FromNanoseconds(max(0, round(error.retry_after_s * 1e9)))
        hint = any_pb2.Any()
        hint.Pack(retry)
        details.append(hint)
    if error.quota_violation is not None:
        subject, description = error.quota_violation
        quota = error_details_pb2.QuotaFailure(
            violations=[error_details_pb2.QuotaFailure.Violation(subject=subject, description=description)])
        packed = any_pb2.Any()
        packed.Pack(quota)
        details.append(packed)
    return rpc_status.to_status(
        status_pb2.Status(code=_CODES[error.kind], message=error.message, details=details)
    )


async def abort(context: grpc.aio.ServicerContext, error: RunnerError) -> None:
    """Ends the call with the error's rich status (raises, as ``context.abort`` does)."""
    await context.abort_with_status(to_status(error))


def _detail(call_error: grpc.RpcError, message_class):
    """The first detail of a failed call's rich status that is a ``message_class``, if any."""
    status = rpc_status.from_call(call_error)
    if status is None:
        return None
    for detail in status.details:
        if detail.Is(message_class.DESCRIPTOR):
            info = message_class()
            detail.Unpack(info)
            return info
    return None


def retry_info(call_error: grpc.RpcError) -> error_details_pb2.RetryInfo | None:
    """Client-side helper: the RetryInfo detail of a failed call, if it has one."""
    return _detail(call_error, error_details_pb2.RetryInfo)


def quota_failure(call_error: grpc.RpcError) -> error_details_pb2.QuotaFailure | None:
    """Client-side helper: the QuotaFailure detail of a failed call, if it has one."""
    return _detail(call_error, error_details_pb2.QuotaFailure)


def error_info(call_error: grpc.RpcError) -> error_details_pb2.ErrorInfo | None:
    """Client-side helper: the ErrorInfo detail of a failed call, if it has one."""
    return _detail(call_error, error_details_pb2.ErrorInfo)
