import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from helix.runner.v1 import resources_pb2 as _resources_pb2
from helix.runner.v1 import runner_service_pb2 as _runner_service_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class SavedPhaseRequest(_message.Message):
    __slots__ = ("format", "request", "retry", "accept_time", "attempts", "resume_session_at")
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    REQUEST_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    ACCEPT_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESUME_SESSION_AT_FIELD_NUMBER: _ClassVar[int]
    format: int
    request: _runner_service_pb2.RunPhaseRequest
    retry: SavedRetryPolicy
    accept_time: _timestamp_pb2.Timestamp
    attempts: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Attempt]
    resume_session_at: str
    def __init__(self, format: _Optional[int] = ..., request: _Optional[_Union[_runner_service_pb2.RunPhaseRequest, _Mapping]] = ..., retry: _Optional[_Union[SavedRetryPolicy, _Mapping]] = ..., accept_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[_resources_pb2.Attempt, _Mapping]]] = ..., resume_session_at: _Optional[str] = ...) -> None: ...

class SavedRetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "backoff_multiplier", "max_backoff", "jitter", "continuation_prompt")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    JITTER_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    backoff_multiplier: float
    max_backoff: _duration_pb2.Duration
    jitter: bool
    continuation_prompt: str
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff_multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., jitter: _Optional[bool] = ..., continuation_prompt: _Optional[str] = ...) -> None: ...
