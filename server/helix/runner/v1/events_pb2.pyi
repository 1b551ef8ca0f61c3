import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from helix.runner.v1 import resources_pb2 as _resources_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class TaskEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TASK_EVENT_KIND_UNSPECIFIED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_STARTED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_PROGRESS: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_UPDATED: _ClassVar[TaskEventKind]
    TASK_EVENT_KIND_NOTIFICATION: _ClassVar[TaskEventKind]

class HookEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    HOOK_EVENT_KIND_UNSPECIFIED: _ClassVar[HookEventKind]
    HOOK_EVENT_KIND_STARTED: _ClassVar[HookEventKind]
    HOOK_EVENT_KIND_PROGRESS: _ClassVar[HookEventKind]
    HOOK_EVENT_KIND_RESPONSE: _ClassVar[HookEventKind]

class PartialDeltaKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARTIAL_DELTA_KIND_UNSPECIFIED: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_MESSAGE_START: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_CONTENT_BLOCK_START: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_TEXT_DELTA: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_THINKING_DELTA: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_INPUT_JSON_DELTA: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_SIGNATURE_DELTA: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_CONTENT_BLOCK_STOP: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_MESSAGE_DELTA: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_MESSAGE_STOP: _ClassVar[PartialDeltaKind]
    PARTIAL_DELTA_KIND_OTHER: _ClassVar[PartialDeltaKind]

class ControlEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTROL_EVENT_KIND_UNSPECIFIED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_PAUSE_REQUESTED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_PAUSED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_RESUMED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_STEP_COMPLETE: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_BREAKPOINT_HIT: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_TOOL_APPROVED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_TOOL_DENIED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_TOOL_EDITED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_MESSAGE_INJECTED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_INTERRUPTED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_CANCEL_REQUESTED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_BREAKPOINT_ADDED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_BREAKPOINT_REMOVED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_DETACHED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_RETRY_SCHEDULED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_ATTEMPT_STARTED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_QUEUED: _ClassVar[ControlEventKind]
    CONTROL_EVENT_KIND_REWOUND: _ClassVar[ControlEventKind]

class GatewayEventKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    GATEWAY_EVENT_KIND_UNSPECIFIED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_RATE_LIMITED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_OVERLOADED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_MODEL_REFUSED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_EGRESS_REFUSED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_UPSTREAM_FAILED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_FEATURE_REFUSED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_EGRESS_CONNECTION: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_EGRESS_HELD: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_EGRESS_APPROVED: _ClassVar[GatewayEventKind]
    GATEWAY_EVENT_KIND_EGRESS_DENIED: _ClassVar[GatewayEventKind]

class ParseErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PARSE_ERROR_REASON_UNSPECIFIED: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_NOT_JSON: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_INVALID_JSON: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_NOT_A_MESSAGE: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_INVALID_UTF8: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_LINE_TOO_LONG: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_TRUNCATED_AT_EOF: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_BAD_SHAPE: _ClassVar[ParseErrorReason]
    PARSE_ERROR_REASON_UNPAIRED_SURROGATE: _ClassVar[ParseErrorReason]
TASK_EVENT_KIND_UNSPECIFIED: TaskEventKind
TASK_EVENT_KIND_STARTED: TaskEventKind
TASK_EVENT_KIND_PROGRESS: TaskEventKind
TASK_EVENT_KIND_UPDATED: TaskEventKind
TASK_EVENT_KIND_NOTIFICATION: TaskEventKind
HOOK_EVENT_KIND_UNSPECIFIED: HookEventKind
HOOK_EVENT_KIND_STARTED: HookEventKind
HOOK_EVENT_KIND_PROGRESS: HookEventKind
HOOK_EVENT_KIND_RESPONSE: HookEventKind
PARTIAL_DELTA_KIND_UNSPECIFIED: PartialDeltaKind
PARTIAL_DELTA_KIND_MESSAGE_START: PartialDeltaKind
PARTIAL_DELTA_KIND_CONTENT_BLOCK_START: PartialDeltaKind
PARTIAL_DELTA_KIND_TEXT_DELTA: PartialDeltaKind
PARTIAL_DELTA_KIND_THINKING_DELTA: PartialDeltaKind
PARTIAL_DELTA_KIND_INPUT_JSON_DELTA: PartialDeltaKind
PARTIAL_DELTA_KIND_SIGNATURE_DELTA: PartialDeltaKind
PARTIAL_DELTA_KIND_CONTENT_BLOCK_STOP: PartialDeltaKind
PARTIAL_DELTA_KIND_MESSAGE_DELTA: PartialDeltaKind
PARTIAL_DELTA_KIND_MESSAGE_STOP: PartialDeltaKind
PARTIAL_DELTA_KIND_OTHER: PartialDeltaKind
CONTROL_EVENT_KIND_UNSPECIFIED: ControlEventKind
CONTROL_EVENT_KIND_PAUSE_REQUESTED: ControlEventKind
CONTROL_EVENT_KIND_PAUSED: ControlEventKind
CONTROL_EVENT_KIND_RESUMED: ControlEventKind
CONTROL_EVENT_KIND_STEP_COMPLETE: ControlEventKind
CONTROL_EVENT_KIND_BREAKPOINT_HIT: ControlEventKind
CONTROL_EVENT_KIND_TOOL_APPROVED: ControlEventKind
CONTROL_EVENT_KIND_TOOL_DENIED: ControlEventKind
CONTROL_EVENT_KIND_TOOL_EDITED: ControlEventKind
CONTROL_EVENT_KIND_MESSAGE_INJECTED: ControlEventKind
CONTROL_EVENT_KIND_INTERRUPTED: ControlEventKind
CONTROL_EVENT_KIND_CANCEL_REQUESTED: ControlEventKind
CONTROL_EVENT_KIND_BREAKPOINT_ADDED: ControlEventKind
CONTROL_EVENT_KIND_BREAKPOINT_REMOVED: ControlEventKind
CONTROL_EVENT_KIND_DETACHED: ControlEventKind
CONTROL_EVENT_KIND_RETRY_SCHEDULED: ControlEventKind
CONTROL_EVENT_KIND_ATTEMPT_STARTED: ControlEventKind
CONTROL_EVENT_KIND_QUEUED: ControlEventKind
CONTROL_EVENT_KIND_REWOUND: ControlEventKind
GATEWAY_EVENT_KIND_UNSPECIFIED: GatewayEventKind
GATEWAY_EVENT_KIND_RATE_LIMITED: GatewayEventKind
GATEWAY_EVENT_KIND_OVERLOADED: GatewayEventKind
GATEWAY_EVENT_KIND_MODEL_REFUSED: GatewayEventKind
GATEWAY_EVENT_KIND_EGRESS_REFUSED: GatewayEventKind
GATEWAY_EVENT_KIND_UPSTREAM_FAILED: GatewayEventKind
GATEWAY_EVENT_KIND_FEATURE_REFUSED: GatewayEventKind
GATEWAY_EVENT_KIND_EGRESS_CONNECTION: GatewayEventKind
GATEWAY_EVENT_KIND_EGRESS_HELD: GatewayEventKind
GATEWAY_EVENT_KIND_EGRESS_APPROVED: GatewayEventKind
GATEWAY_EVENT_KIND_EGRESS_DENIED: GatewayEventKind
PARSE_ERROR_REASON_UNSPECIFIED: ParseErrorReason
PARSE_ERROR_REASON_NOT_JSON: ParseErrorReason
PARSE_ERROR_REASON_INVALID_JSON: ParseErrorReason
PARSE_ERROR_REASON_NOT_A_MESSAGE: ParseErrorReason
PARSE_ERROR_REASON_INVALID_UTF8: ParseErrorReason
PARSE_ERROR_REASON_LINE_TOO_LONG: ParseErrorReason
PARSE_ERROR_REASON_TRUNCATED_AT_EOF: ParseErrorReason
PARSE_ERROR_REASON_BAD_SHAPE: ParseErrorReason
PARSE_ERROR_REASON_UNPAIRED_SURROGATE: ParseErrorReason

class StreamEvent(_message.Message):
    __slots__ = ("sequence", "receive_time", "job_id", "phase_id", "session_id", "parent_tool_use_id", "agent_id", "uuid", "session_init", "assistant_text", "thinking", "tool_call_started", "tool_call_finished", "api_retry", "api_error", "rate_limit", "task", "compaction", "cli_status", "hook", "permission_denied", "partial_delta", "turn_result", "control_response", "control_request", "user_message", "tool_progress", "session_writes_lost", "cost_update", "stderr", "status_changed", "control", "parse_error", "unknown", "gateway")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    PARENT_TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    AGENT_ID_FIELD_NUMBER: _ClassVar[int]
    UUID_FIELD_NUMBER: _ClassVar[int]
    SESSION_INIT_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_TEXT_FIELD_NUMBER: _ClassVar[int]
    THINKING_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_STARTED_FIELD_NUMBER: _ClassVar[int]
    TOOL_CALL_FINISHED_FIELD_NUMBER: _ClassVar[int]
    API_RETRY_FIELD_NUMBER: _ClassVar[int]
    API_ERROR_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_FIELD_NUMBER: _ClassVar[int]
    TASK_FIELD_NUMBER: _ClassVar[int]
    COMPACTION_FIELD_NUMBER: _ClassVar[int]
    CLI_STATUS_FIELD_NUMBER: _ClassVar[int]
    HOOK_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_DENIED_FIELD_NUMBER: _ClassVar[int]
    PARTIAL_DELTA_FIELD_NUMBER: _ClassVar[int]
    TURN_RESULT_FIELD_NUMBER: _ClassVar[int]
    CONTROL_RESPONSE_FIELD_NUMBER: _ClassVar[int]
    CONTROL_REQUEST_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_FIELD_NUMBER: _ClassVar[int]
    TOOL_PROGRESS_FIELD_NUMBER: _ClassVar[int]
    SESSION_WRITES_LOST_FIELD_NUMBER: _ClassVar[int]
    COST_UPDATE_FIELD_NUMBER: _ClassVar[int]
    STDERR_FIELD_NUMBER: _ClassVar[int]
    STATUS_CHANGED_FIELD_NUMBER: _ClassVar[int]
    CONTROL_FIELD_NUMBER: _ClassVar[int]
    PARSE_ERROR_FIELD_NUMBER: _ClassVar[int]
    UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    receive_time: _timestamp_pb2.Timestamp
    job_id: str
    phase_id: str
    session_id: str
    parent_tool_use_id: str
    agent_id: str
    uuid: str
    session_init: SessionInit
    assistant_text: AssistantText
    thinking: Thinking
    tool_call_started: ToolCallStarted
    tool_call_finished: ToolCallFinished
    api_retry: ApiRetry
    api_error: ApiError
    rate_limit: RateLimit
    task: TaskEvent
    compaction: Compaction
    cli_status: CliStatus
    hook: HookEvent
    permission_denied: PermissionDenied
    partial_delta: PartialDelta
    turn_result: TurnResult
    control_response: ControlResponse
    control_request: ControlRequest
    user_message: UserMessage
    tool_progress: ToolProgress
    session_writes_lost: SessionWritesLost
    cost_update: CostUpdate
    stderr: StderrOutput
    status_changed: PhaseStatusChanged
    control: ControlEvent
    parse_error: ParseError
    unknown: Unknown
    gateway: GatewayEvent
    def __init__(self, sequence: _Optional[int] = ..., receive_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., session_id: _Optional[str] = ..., parent_tool_use_id: _Optional[str] = ..., agent_id: _Optional[str] = ..., uuid: _Optional[str] = ..., session_init: _Optional[_Union[SessionInit, _Mapping]] = ..., assistant_text: _Optional[_Union[AssistantText, _Mapping]] = ..., thinking: _Optional[_Union[Thinking, _Mapping]] = ..., tool_call_started: _Optional[_Union[ToolCallStarted, _Mapping]] = ..., tool_call_finished: _Optional[_Union[ToolCallFinished, _Mapping]] = ..., api_retry: _Optional[_Union[ApiRetry, _Mapping]] = ..., api_error: _Optional[_Union[ApiError, _Mapping]] = ..., rate_limit: _Optional[_Union[RateLimit, _Mapping]] = ..., task: _Optional[_Union[TaskEvent, _Mapping]] = ..., compaction: _Optional[_Union[Compaction, _Mapping]] = ..., cli_status: _Optional[_Union[CliStatus, _Mapping]] = ..., hook: _Optional[_Union[HookEvent, _Mapping]] = ..., permission_denied: _Optional[_Union[PermissionDenied, _Mapping]] = ..., partial_delta: _Optional[_Union[PartialDelta, _Mapping]] = ..., turn_result: _Optional[_Union[TurnResult, _Mapping]] = ..., control_response: _Optional[_Union[ControlResponse, _Mapping]] = ..., control_request: _Optional[_Union[ControlRequest, _Mapping]] = ..., user_message: _Optional[_Union[UserMessage, _Mapping]] = ..., tool_progress: _Optional[_Union[ToolProgress, _Mapping]] = ..., session_writes_lost: _Optional[_Union[SessionWritesLost, _Mapping]] = ..., cost_update: _Optional[_Union[CostUpdate, _Mapping]] = ..., stderr: _Optional[_Union[StderrOutput, _Mapping]] = ..., status_changed: _Optional[_Union[PhaseStatusChanged, _Mapping]] = ..., control: _Optional[_Union[ControlEvent, _Mapping]] = ..., parse_error: _Optional[_Union[ParseError, _Mapping]] = ..., unknown: _Optional[_Union[Unknown, _Mapping]] = ..., gateway: _Optional[_Union[GatewayEvent, _Mapping]] = ...) -> None: ...

class SessionInit(_message.Message):
    __slots__ = ("model", "tools", "cwd", "cli_version", "permission_mode", "mcp_servers", "capabilities", "api_key_source", "turn_index")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    CWD_FIELD_NUMBER: _ClassVar[int]
    CLI_VERSION_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MCP_SERVERS_FIELD_NUMBER: _ClassVar[int]
    CAPABILITIES_FIELD_NUMBER: _ClassVar[int]
    API_KEY_SOURCE_FIELD_NUMBER: _ClassVar[int]
    TURN_INDEX_FIELD_NUMBER: _ClassVar[int]
    model: str
    tools: _containers.RepeatedScalarFieldContainer[str]
    cwd: str
    cli_version: str
    permission_mode: str
    mcp_servers: _containers.RepeatedScalarFieldContainer[str]
    capabilities: _containers.RepeatedScalarFieldContainer[str]
    api_key_source: str
    turn_index: int
    def __init__(self, model: _Optional[str] = ..., tools: _Optional[_Iterable[str]] = ..., cwd: _Optional[str] = ..., cli_version: _Optional[str] = ..., permission_mode: _Optional[str] = ..., mcp_servers: _Optional[_Iterable[str]] = ..., capabilities: _Optional[_Iterable[str]] = ..., api_key_source: _Optional[str] = ..., turn_index: _Optional[int] = ...) -> None: ...

class AssistantText(_message.Message):
    __slots__ = ("text", "text_bytes", "text_truncated", "message_id", "model")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEXT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_bytes: int
    text_truncated: bool
    message_id: str
    model: str
    def __init__(self, text: _Optional[str] = ..., text_bytes: _Optional[int] = ..., text_truncated: _Optional[bool] = ..., message_id: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class Thinking(_message.Message):
    __slots__ = ("text", "text_bytes", "text_truncated", "redacted", "message_id")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_BYTES_FIELD_NUMBER: _ClassVar[int]
    TEXT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    REDACTED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_bytes: int
    text_truncated: bool
    redacted: bool
    message_id: str
    def __init__(self, text: _Optional[str] = ..., text_bytes: _Optional[int] = ..., text_truncated: _Optional[bool] = ..., redacted: _Optional[bool] = ..., message_id: _Optional[str] = ...) -> None: ...

class ToolCallStarted(_message.Message):
    __slots__ = ("tool_use_id", "name", "input_json", "input_bytes", "input_truncated", "message_id", "server_tool")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    INPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    SERVER_TOOL_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    name: str
    input_json: str
    input_bytes: int
    input_truncated: bool
    message_id: str
    server_tool: bool
    def __init__(self, tool_use_id: _Optional[str] = ..., name: _Optional[str] = ..., input_json: _Optional[str] = ..., input_bytes: _Optional[int] = ..., input_truncated: _Optional[bool] = ..., message_id: _Optional[str] = ..., server_tool: _Optional[bool] = ...) -> None: ...

class ToolCallFinished(_message.Message):
    __slots__ = ("tool_use_id", "name", "is_error", "content_preview", "content_bytes", "content_truncated", "structured_result_json", "structured_result_truncated", "duration", "hook_duration")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    CONTENT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    CONTENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CONTENT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_RESULT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    HOOK_DURATION_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    name: str
    is_error: bool
    content_preview: str
    content_bytes: int
    content_truncated: bool
    structured_result_json: str
    structured_result_truncated: bool
    duration: _duration_pb2.Duration
    hook_duration: _duration_pb2.Duration
    def __init__(self, tool_use_id: _Optional[str] = ..., name: _Optional[str] = ..., is_error: _Optional[bool] = ..., content_preview: _Optional[str] = ..., content_bytes: _Optional[int] = ..., content_truncated: _Optional[bool] = ..., structured_result_json: _Optional[str] = ..., structured_result_truncated: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., hook_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class ApiRetry(_message.Message):
    __slots__ = ("attempt", "max_retries", "retry_delay", "error_status", "error")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_RETRIES_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    max_retries: int
    retry_delay: _duration_pb2.Duration
    error_status: int
    error: str
    def __init__(self, attempt: _Optional[int] = ..., max_retries: _Optional[int] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., error_status: _Optional[int] = ..., error: _Optional[str] = ...) -> None: ...

class ApiError(_message.Message):
    __slots__ = ("error", "api_error_status", "message")
    ERROR_FIELD_NUMBER: _ClassVar[int]
    API_ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    error: str
    api_error_status: int
    message: str
    def __init__(self, error: _Optional[str] = ..., api_error_status: _Optional[int] = ..., message: _Optional[str] = ...) -> None: ...

class RateLimit(_message.Message):
    __slots__ = ("status", "resets_at", "rate_limit_type", "utilization")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    RESETS_AT_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMIT_TYPE_FIELD_NUMBER: _ClassVar[int]
    UTILIZATION_FIELD_NUMBER: _ClassVar[int]
    status: str
    resets_at: _timestamp_pb2.Timestamp
    rate_limit_type: str
    utilization: float
    def __init__(self, status: _Optional[str] = ..., resets_at: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rate_limit_type: _Optional[str] = ..., utilization: _Optional[float] = ...) -> None: ...

class TaskEvent(_message.Message):
    __slots__ = ("kind", "task_id", "tool_use_id", "description", "subagent_type", "task_type", "status", "summary", "backgrounded", "total_tokens", "tool_uses", "duration")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SUBAGENT_TYPE_FIELD_NUMBER: _ClassVar[int]
    TASK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    BACKGROUNDED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    TOOL_USES_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    kind: TaskEventKind
    task_id: str
    tool_use_id: str
    description: str
    subagent_type: str
    task_type: str
    status: str
    summary: str
    backgrounded: bool
    total_tokens: int
    tool_uses: int
    duration: _duration_pb2.Duration
    def __init__(self, kind: _Optional[_Union[TaskEventKind, str]] = ..., task_id: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., description: _Optional[str] = ..., subagent_type: _Optional[str] = ..., task_type: _Optional[str] = ..., status: _Optional[str] = ..., summary: _Optional[str] = ..., backgrounded: _Optional[bool] = ..., total_tokens: _Optional[int] = ..., tool_uses: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class Compaction(_message.Message):
    __slots__ = ("completed", "trigger", "pre_tokens", "post_tokens", "duration")
    COMPLETED_FIELD_NUMBER: _ClassVar[int]
    TRIGGER_FIELD_NUMBER: _ClassVar[int]
    PRE_TOKENS_FIELD_NUMBER: _ClassVar[int]
    POST_TOKENS_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    completed: bool
    trigger: str
    pre_tokens: int
    post_tokens: int
    duration: _duration_pb2.Duration
    def __init__(self, completed: _Optional[bool] = ..., trigger: _Optional[str] = ..., pre_tokens: _Optional[int] = ..., post_tokens: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class CliStatus(_message.Message):
    __slots__ = ("status", "permission_mode")
    STATUS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    status: str
    permission_mode: str
    def __init__(self, status: _Optional[str] = ..., permission_mode: _Optional[str] = ...) -> None: ...

class HookEvent(_message.Message):
    __slots__ = ("kind", "hook_id", "hook_name", "hook_event", "exit_code", "outcome", "output_preview")
    KIND_FIELD_NUMBER: _ClassVar[int]
    HOOK_ID_FIELD_NUMBER: _ClassVar[int]
    HOOK_NAME_FIELD_NUMBER: _ClassVar[int]
    HOOK_EVENT_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    kind: HookEventKind
    hook_id: str
    hook_name: str
    hook_event: str
    exit_code: int
    outcome: str
    output_preview: str
    def __init__(self, kind: _Optional[_Union[HookEventKind, str]] = ..., hook_id: _Optional[str] = ..., hook_name: _Optional[str] = ..., hook_event: _Optional[str] = ..., exit_code: _Optional[int] = ..., outcome: _Optional[str] = ..., output_preview: _Optional[str] = ...) -> None: ...

class PermissionDenied(_message.Message):
    __slots__ = ("tool_name", "tool_use_id", "decision_reason_type", "decision_reason", "message")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_REASON_TYPE_FIELD_NUMBER: _ClassVar[int]
    DECISION_REASON_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    tool_use_id: str
    decision_reason_type: str
    decision_reason: str
    message: str
    def __init__(self, tool_name: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., decision_reason_type: _Optional[str] = ..., decision_reason: _Optional[str] = ..., message: _Optional[str] = ...) -> None: ...

class PartialDelta(_message.Message):
    __slots__ = ("kind", "index", "text", "message_id", "block_type", "stop_reason")
    KIND_FIELD_NUMBER: _ClassVar[int]
    INDEX_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_ID_FIELD_NUMBER: _ClassVar[int]
    BLOCK_TYPE_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    kind: PartialDeltaKind
    index: int
    text: str
    message_id: str
    block_type: str
    stop_reason: str
    def __init__(self, kind: _Optional[_Union[PartialDeltaKind, str]] = ..., index: _Optional[int] = ..., text: _Optional[str] = ..., message_id: _Optional[str] = ..., block_type: _Optional[str] = ..., stop_reason: _Optional[str] = ...) -> None: ...

class ModelUsage(_message.Message):
    __slots__ = ("model", "tokens", "cost_usd")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    COST_USD_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokens: _resources_pb2.TokenUsage
    cost_usd: float
    def __init__(self, model: _Optional[str] = ..., tokens: _Optional[_Union[_resources_pb2.TokenUsage, _Mapping]] = ..., cost_usd: _Optional[float] = ...) -> None: ...

class TurnResult(_message.Message):
    __slots__ = ("subtype", "is_error", "api_error_status", "terminal_reason", "num_turns", "result_text", "result_truncated", "duration", "api_duration", "total_cost_usd", "usage", "model_usage", "permission_denials", "errors", "result_index", "stop_reason", "startup_failure_reason", "structured_output", "structured_output_truncated")
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    API_ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_TURNS_FIELD_NUMBER: _ClassVar[int]
    RESULT_TEXT_FIELD_NUMBER: _ClassVar[int]
    RESULT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    API_DURATION_FIELD_NUMBER: _ClassVar[int]
    TOTAL_COST_USD_FIELD_NUMBER: _ClassVar[int]
    USAGE_FIELD_NUMBER: _ClassVar[int]
    MODEL_USAGE_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_DENIALS_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    RESULT_INDEX_FIELD_NUMBER: _ClassVar[int]
    STOP_REASON_FIELD_NUMBER: _ClassVar[int]
    STARTUP_FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    subtype: str
    is_error: bool
    api_error_status: int
    terminal_reason: str
    num_turns: int
    result_text: str
    result_truncated: bool
    duration: _duration_pb2.Duration
    api_duration: _duration_pb2.Duration
    total_cost_usd: float
    usage: _resources_pb2.TokenUsage
    model_usage: _containers.RepeatedCompositeFieldContainer[ModelUsage]
    permission_denials: _containers.RepeatedCompositeFieldContainer[_resources_pb2.PermissionDenial]
    errors: _containers.RepeatedScalarFieldContainer[str]
    result_index: int
    stop_reason: str
    startup_failure_reason: str
    structured_output: str
    structured_output_truncated: bool
    def __init__(self, subtype: _Optional[str] = ..., is_error: _Optional[bool] = ..., api_error_status: _Optional[int] = ..., terminal_reason: _Optional[str] = ..., num_turns: _Optional[int] = ..., result_text: _Optional[str] = ..., result_truncated: _Optional[bool] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., api_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., total_cost_usd: _Optional[float] = ..., usage: _Optional[_Union[_resources_pb2.TokenUsage, _Mapping]] = ..., model_usage: _Optional[_Iterable[_Union[ModelUsage, _Mapping]]] = ..., permission_denials: _Optional[_Iterable[_Union[_resources_pb2.PermissionDenial, _Mapping]]] = ..., errors: _Optional[_Iterable[str]] = ..., result_index: _Optional[int] = ..., stop_reason: _Optional[str] = ..., startup_failure_reason: _Optional[str] = ..., structured_output: _Optional[str] = ..., structured_output_truncated: _Optional[bool] = ...) -> None: ...

class ControlResponse(_message.Message):
    __slots__ = ("request_id", "request_subtype", "success", "error", "error_code")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    REQUEST_SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    SUCCESS_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    request_subtype: str
    success: bool
    error: str
    error_code: str
    def __init__(self, request_id: _Optional[str] = ..., request_subtype: _Optional[str] = ..., success: _Optional[bool] = ..., error: _Optional[str] = ..., error_code: _Optional[str] = ...) -> None: ...

class ControlRequest(_message.Message):
    __slots__ = ("request_id", "subtype", "tool_name", "tool_use_id")
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    request_id: str
    subtype: str
    tool_name: str
    tool_use_id: str
    def __init__(self, request_id: _Optional[str] = ..., subtype: _Optional[str] = ..., tool_name: _Optional[str] = ..., tool_use_id: _Optional[str] = ...) -> None: ...

class UserMessage(_message.Message):
    __slots__ = ("text", "text_truncated", "is_replay", "is_synthetic")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TEXT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    IS_REPLAY_FIELD_NUMBER: _ClassVar[int]
    IS_SYNTHETIC_FIELD_NUMBER: _ClassVar[int]
    text: str
    text_truncated: bool
    is_replay: bool
    is_synthetic: bool
    def __init__(self, text: _Optional[str] = ..., text_truncated: _Optional[bool] = ..., is_replay: _Optional[bool] = ..., is_synthetic: _Optional[bool] = ...) -> None: ...

class ToolProgress(_message.Message):
    __slots__ = ("tool_use_id", "tool_name", "elapsed")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ELAPSED_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    tool_name: str
    elapsed: _duration_pb2.Duration
    def __init__(self, tool_use_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., elapsed: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class SessionWritesLost(_message.Message):
    __slots__ = ("error_code", "lost", "session_ids")
    ERROR_CODE_FIELD_NUMBER: _ClassVar[int]
    LOST_FIELD_NUMBER: _ClassVar[int]
    SESSION_IDS_FIELD_NUMBER: _ClassVar[int]
    error_code: str
    lost: _containers.RepeatedScalarFieldContainer[str]
    session_ids: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, error_code: _Optional[str] = ..., lost: _Optional[_Iterable[str]] = ..., session_ids: _Optional[_Iterable[str]] = ...) -> None: ...

class CostUpdate(_message.Message):
    __slots__ = ("cost",)
    COST_FIELD_NUMBER: _ClassVar[int]
    cost: _resources_pb2.PhaseCost
    def __init__(self, cost: _Optional[_Union[_resources_pb2.PhaseCost, _Mapping]] = ...) -> None: ...

class StderrOutput(_message.Message):
    __slots__ = ("text", "truncated")
    TEXT_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    text: str
    truncated: bool
    def __init__(self, text: _Optional[str] = ..., truncated: _Optional[bool] = ...) -> None: ...

class PhaseStatusChanged(_message.Message):
    __slots__ = ("from_status", "to_status", "reason")
    FROM_STATUS_FIELD_NUMBER: _ClassVar[int]
    TO_STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    from_status: _resources_pb2.PhaseStatus
    to_status: _resources_pb2.PhaseStatus
    reason: str
    def __init__(self, from_status: _Optional[_Union[_resources_pb2.PhaseStatus, str]] = ..., to_status: _Optional[_Union[_resources_pb2.PhaseStatus, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ControlEvent(_message.Message):
    __slots__ = ("kind", "tool_use_id", "tool_name", "breakpoint_id", "message", "input_json", "attempt", "max_attempts", "end_kind", "retry_delay", "resumed_session_id", "queue", "checkpoint", "rewound_after_sequence", "rewound_to_sequence", "actor")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    END_KIND_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    RESUMED_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    REWOUND_AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    REWOUND_TO_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    kind: ControlEventKind
    tool_use_id: str
    tool_name: str
    breakpoint_id: str
    message: str
    input_json: str
    attempt: int
    max_attempts: int
    end_kind: _resources_pb2.AttemptEndKind
    retry_delay: _duration_pb2.Duration
    resumed_session_id: str
    queue: _resources_pb2.QueueState
    checkpoint: int
    rewound_after_sequence: int
    rewound_to_sequence: int
    actor: str
    def __init__(self, kind: _Optional[_Union[ControlEventKind, str]] = ..., tool_use_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., breakpoint_id: _Optional[str] = ..., message: _Optional[str] = ..., input_json: _Optional[str] = ..., attempt: _Optional[int] = ..., max_attempts: _Optional[int] = ..., end_kind: _Optional[_Union[_resources_pb2.AttemptEndKind, str]] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., resumed_session_id: _Optional[str] = ..., queue: _Optional[_Union[_resources_pb2.QueueState, _Mapping]] = ..., checkpoint: _Optional[int] = ..., rewound_after_sequence: _Optional[int] = ..., rewound_to_sequence: _Optional[int] = ..., actor: _Optional[str] = ...) -> None: ...

class GatewayEvent(_message.Message):
    __slots__ = ("kind", "http_status", "model", "message", "destination", "retry_after", "request_id", "bytes_sent", "bytes_received", "duration", "method", "path", "hold_id", "actor", "breakpoint_id")
    KIND_FIELD_NUMBER: _ClassVar[int]
    HTTP_STATUS_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    RETRY_AFTER_FIELD_NUMBER: _ClassVar[int]
    REQUEST_ID_FIELD_NUMBER: _ClassVar[int]
    BYTES_SENT_FIELD_NUMBER: _ClassVar[int]
    BYTES_RECEIVED_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    METHOD_FIELD_NUMBER: _ClassVar[int]
    PATH_FIELD_NUMBER: _ClassVar[int]
    HOLD_ID_FIELD_NUMBER: _ClassVar[int]
    ACTOR_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    kind: GatewayEventKind
    http_status: int
    model: str
    message: str
    destination: str
    retry_after: _duration_pb2.Duration
    request_id: str
    bytes_sent: int
    bytes_received: int
    duration: _duration_pb2.Duration
    method: str
    path: str
    hold_id: str
    actor: str
    breakpoint_id: str
    def __init__(self, kind: _Optional[_Union[GatewayEventKind, str]] = ..., http_status: _Optional[int] = ..., model: _Optional[str] = ..., message: _Optional[str] = ..., destination: _Optional[str] = ..., retry_after: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., request_id: _Optional[str] = ..., bytes_sent: _Optional[int] = ..., bytes_received: _Optional[int] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., method: _Optional[str] = ..., path: _Optional[str] = ..., hold_id: _Optional[str] = ..., actor: _Optional[str] = ..., breakpoint_id: _Optional[str] = ...) -> None: ...

class ParseError(_message.Message):
    __slots__ = ("reason", "line_bytes", "line_number", "byte_offset", "detail", "repaired")
    REASON_FIELD_NUMBER: _ClassVar[int]
    LINE_BYTES_FIELD_NUMBER: _ClassVar[int]
    LINE_NUMBER_FIELD_NUMBER: _ClassVar[int]
    BYTE_OFFSET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    REPAIRED_FIELD_NUMBER: _ClassVar[int]
    reason: ParseErrorReason
    line_bytes: int
    line_number: int
    byte_offset: int
    detail: str
    repaired: bool
    def __init__(self, reason: _Optional[_Union[ParseErrorReason, str]] = ..., line_bytes: _Optional[int] = ..., line_number: _Optional[int] = ..., byte_offset: _Optional[int] = ..., detail: _Optional[str] = ..., repaired: _Optional[bool] = ...) -> None: ...

class Unknown(_message.Message):
    __slots__ = ("type", "subtype", "raw_json", "line_bytes")
    TYPE_FIELD_NUMBER: _ClassVar[int]
    SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    LINE_BYTES_FIELD_NUMBER: _ClassVar[int]
    type: str
    subtype: str
    raw_json: str
    line_bytes: int
    def __init__(self, type: _Optional[str] = ..., subtype: _Optional[str] = ..., raw_json: _Optional[str] = ..., line_bytes: _Optional[int] = ...) -> None: ...
