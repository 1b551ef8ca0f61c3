"""The ErrorInfo of a failed gRPC call (the service sends exactly one)."""

from __future__ import annotations

import grpc
from google.rpc import error_details_pb2, status_pb2


def error_info(error: grpc.aio.AioRpcError) -> error_details_pb2.ErrorInfo:
    (raw,) = [v for k, v in error.trailing_metadata() or () if k == "grpc-status-details-bin"]
    for detail in status_pb2.Status.FromString(raw).details:
        if detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR):
            info = error_details_pb2.ErrorInfo()
            detail.Unpack(info)
            return info
    raise AssertionError("no ErrorInfo")
