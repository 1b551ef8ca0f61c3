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


def error_info_from_metadata(trailers: Iterable[tuple[str, Any]] | None) -> google_rpc.ErrorInfo | None:
    """The first ``ErrorInfo`` in the ``grpc-status-details-bin`` trailer, if there is one."""
    for key, value in trailers or ():
        if key != _STATUS_DETAILS_KEY or not isinstance(value, bytes | bytearray):
            continue
        status = google_rpc.Status.parse(bytes(value))
        for detail in status.details:
            if detail.type_url == _ERROR_INFO_TYPE_URL:
                return google_rpc.ErrorInfo.parse(detail.value)
    return None


class RunnerError(Exception):
    """A failed call: the gRPC status code and message, and the ``ErrorInfo`` when there is one."""

    def __init__(self, code: grpc.StatusCode, message: str, info: google_rpc.ErrorInfo | None = None):
        super().__init__(f"{code.name}: {message}" + (f" [{info.reason}]" if info else ""))
        self.code = code
        self.message = message
        self.info = info

    @classmethod
    def from_rpc_error(cls, error: grpc.aio.AioRpcError) -> RunnerError:
        """Wraps a grpc.aio error, decoding the ErrorInfo from its trailers."""
        info = error_info_from_metadata(error.trailing_metadata())
        return cls(error.code(), error.details() or "", info)

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
        value = pb.ErrorReason.betterproto_renamed_proto_names_to_value().get(f"ERROR_REASON_{self.info.reason}")
        return None if value is None else pb.ErrorReason(value)
