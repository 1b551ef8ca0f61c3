"""Errors of the service: a gRPC status plus its decoded ``google.rpc.ErrorInfo``."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

import grpc

from ._proto.google import rpc as google_rpc
from ._proto.helix.runner import v1 as pb

ERROR_DOMAIN = "runner.helix"
"""The ``ErrorInfo.domain`` of every error the service sends."""

_STATUS_DETAILS_KEY = "grpc-status-details-bin"
_ERROR_INFO_TYPE_URL = "type.googleapis.com/google.rpc.ErrorInfo"
_RETRY_INFO_TYPE_URL = "type.googleapis.com/google.rpc.RetryInfo"

PHASE_MOVED = "PHASE_MOVED"
"""``ErrorInfo.reason`` of a phase stream that ended because its replica handed the phase over to
another one (a drain): metadata ``job_id``, ``phase_id``, ``after_sequence`` (every event up to it
was delivered) and ``from_replica``; ``WatchPhase(after_sequence)`` on any replica gives the rest."""


def _details(trailers: Iterable[tuple[str, Any]] | None, type_url: str) -> bytes | None:
    for key, value in trailers or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes | bytearray):
            continue
        status = google_rpc.Status.parse(bytes(value))
        for detail in status.details:
            if detail.type_url == type_url:
                return detail.value
    return None


def error_info_from_metadata(trailers: Iterable[tuple[str, Any]] | None) -> google_rpc.ErrorInfo | None:
    """The first ``ErrorInfo`` in the ``grpc-status-details-bin`` trailer, if there is one."""
    value = _details(trailers, _ERROR_INFO_TYPE_URL)
    return None if value is None else google_rpc.ErrorInfo.parse(value)


def retry_delay_from_metadata(trailers: Iterable[tuple[str, Any]] | None) -> float | None:
    """``RetryInfo.retry_delay`` in seconds from the same trailer, if the server sent one."""
    value = _details(trailers, _RETRY_INFO_TYPE_URL)
    if value is None:
        return None
    delay = google_rpc.RetryInfo.parse(value).retry_delay
    return None if delay is None else delay.total_seconds()


class RunnerError(Exception):
    """A failed call: the gRPC status code and message, and the ``ErrorInfo`` when there is one."""

    def __init__(
        self,
        code: grpc.StatusCode,
        message: str,
        info: google_rpc.ErrorInfo | None = None,
        retry_delay: float | None = None,
    ):
        super().__init__(f"{code.name}: {message}" + (f" [{info.reason}]" if info else ""))
        self.code = code
        self.message = message
        self.info = info
        self.retry_delay = retry_delay
        """Seconds from the status's ``google.rpc.RetryInfo``, when the server sent one."""

    @classmethod
    def from_rpc_error(cls, error: grpc.aio.AioRpcError) -> RunnerError:
        """Wraps a grpc.aio error, decoding the ErrorInfo (and RetryInfo) from its trailers."""
        trailers = error.trailing_metadata()
        info = error_info_from_metadata(trailers)
        return cls(error.code(), error.details() or "", info, retry_delay_from_metadata(trailers))

    @property
    def phase_moved(self) -> bool:
        """Whether this ended a phase stream because the phase moved to another replica (``PHASE_MOVED``)."""
        return self.info is not None and self.info.domain == ERROR_DOMAIN and self.info.reason == PHASE_MOVED

    @property
    def reason(self) -> str | None:
        """``ErrorInfo.reason`` (e.g. ``"PHASE_NOT_FOUND"``)."""
        return self.info.reason if self.info else None

    @property
    def domain(self) -> str | None:
        """``ErrorInfo.domain`` (``"runner.helix"`` for this service's errors)."""
        return self.info.domain if self.info else None

    @property
    def metadata(self) -> Mapping[str, str]:
        """``ErrorInfo.metadata`` (empty without an ErrorInfo)."""
        return dict(self.info.metadata) if self.info else {}

    @property
    def error_reason(self) -> pb.ErrorReason | None:
        """The reason as the contract's ``ErrorReason``, when this client knows it."""
        if self.info is None or self.info.domain != ERROR_DOMAIN:
            return None
        value = pb.ErrorReason.betterproto_renamed_proto_names_to_value().get(
            f"ERROR_REASON_{self.info.reason}"
        )
        return None if value is None else pb.ErrorReason(value)
