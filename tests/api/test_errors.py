"""RunnerError → google.rpc.Status: one ErrorInfo always, plus a RetryInfo when there is a retry hint."""

from __future__ import annotations

import grpc
from google.rpc import code_pb2, error_details_pb2, status_pb2

from helix_runner.api.errors import ERROR_DOMAIN, error_info, retry_info, to_status
from helix_runner.errors import ErrorKind, RunnerError


def details_of(status: grpc.Status) -> list:
    (raw,) = [value for key, value in status.trailing_metadata if key == "grpc-status-details-bin"]
    return list(status_pb2.Status.FromString(raw).details)


class FailedCall(grpc.RpcError):
    """What a client sees: the status the server sent, as a failed call."""

    def __init__(self, status: grpc.Status) -> None:
        self._status = status

    def code(self) -> grpc.StatusCode:
        return self._status.code

    def details(self) -> str:
        return self._status.details

    def trailing_metadata(self):
        return self._status.trailing_metadata


def test_a_retry_hint_travels_as_retry_info_next_to_the_one_error_info():
    error = RunnerError(
        ErrorKind.RESOURCE_EXHAUSTED,
        "QUEUE_FULL",
        "the admission queue is full (1000 phases wait; the limit is 1000)",
        {"limit": 1000, "scope": "server", "retry_after_ms": 2500},
        retry_after_s=2.5,
    )
    status = to_status(error)
    assert status.code is grpc.StatusCode.RESOURCE_EXHAUSTED
    details = details_of(status)
    assert [d.Is(error_details_pb2.ErrorInfo.DESCRIPTOR) for d in details] == [True, False]
    assert details[1].Is(error_details_pb2.RetryInfo.DESCRIPTOR)

    call = FailedCall(status)
    info = error_info(call)
    assert (info.reason, info.domain, info.metadata["retry_after_ms"]) == ("QUEUE_FULL", ERROR_DOMAIN, "2500")
    assert retry_info(call).retry_delay.ToMilliseconds() == 2500


def test_without_a_hint_there_is_only_the_error_info():
    status = to_status(RunnerError(ErrorKind.NOT_FOUND, "JOB_NOT_FOUND", "no job j", {"job_id": "j"}))
    (detail,) = details_of(status)
    assert detail.Is(error_details_pb2.ErrorInfo.DESCRIPTOR)
    assert retry_info(FailedCall(status)) is None
    assert status_pb2.Status.FromString(dict(status.trailing_metadata)["grpc-status-details-bin"]).code == (
        code_pb2.NOT_FOUND
    )
