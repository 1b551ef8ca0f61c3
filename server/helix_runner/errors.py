"""Errors the service reports to callers, independent of the transport.

Each error carries a kind (which becomes the gRPC status code in the API layer), a reason from
the contract's ``ErrorReason`` (without its prefix), a one-sentence message, and metadata holding
every dynamic value of the message. An error a caller should retry later (a full admission queue)
also carries ``retry_after_s``, which the API layer sends as a ``google.rpc.RetryInfo``.
"""

from __future__ import annotations

import enum
from collections.abc import Mapping


class ErrorKind(enum.Enum):
    """Transport-neutral error categories (mapped 1:1 to gRPC codes in ``api.errors``)."""

    INVALID_ARGUMENT = "invalid_argument"
    NOT_FOUND = "not_found"
    ALREADY_EXISTS = "already_exists"
    FAILED_PRECONDITION = "failed_precondition"
    OUT_OF_RANGE = "out_of_range"
    RESOURCE_EXHAUSTED = "resource_exhausted"
    UNAVAILABLE = "unavailable"
    UNIMPLEMENTED = "unimplemented"
    UNAUTHENTICATED = "unauthenticated"
    PERMISSION_DENIED = "permission_denied"
    ABORTED = "aborted"
    INTERNAL = "internal"


class RunnerError(Exception):
    """A failure to report to the caller with a clear status."""

    def __init__(
        self,
        kind: ErrorKind,
        reason: str,
        message: str,
        metadata: Mapping[str, object] | None = None,
        *,
        retry_after_s: float | None = None,
        quota_violation: tuple[str, str] | None = None,
    ):
        super().__init__(message)
        self.kind = kind
        self.reason = reason
        self.message = message
        self.metadata = {k: str(v) for k, v in (metadata or {}).items()}
        self.retry_after_s = retry_after_s
        self.quota_violation = quota_violation  # (subject, description): a QuotaFailure detail

    def __repr__(self) -> str:
        return f"RunnerError({self.kind.name}, {self.reason}, {self.message!r})"


def invalid_field(field: str, problem: str, **values: object) -> RunnerError:
    """INVALID_ARGUMENT naming the offending request field; ``values`` are the other dynamic values
    ``problem`` names (a path, a size, a key), which the contract puts in the ErrorInfo metadata too."""
    return RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"{field}: {problem}", {"field": field, **values})
