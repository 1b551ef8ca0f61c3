import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class PhaseStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PHASE_STATUS_UNSPECIFIED: _ClassVar[PhaseStatus]
    PHASE_STATUS_PENDING: _ClassVar[PhaseStatus]
    PHASE_STATUS_RUNNING: _ClassVar[PhaseStatus]
    PHASE_STATUS_PAUSING: _ClassVar[PhaseStatus]
    PHASE_STATUS_PAUSED: _ClassVar[PhaseStatus]
    PHASE_STATUS_AWAITING_APPROVAL: _ClassVar[PhaseStatus]
    PHASE_STATUS_SUCCEEDED: _ClassVar[PhaseStatus]
    PHASE_STATUS_FAILED: _ClassVar[PhaseStatus]
    PHASE_STATUS_INCOMPLETE: _ClassVar[PhaseStatus]
    PHASE_STATUS_TIMED_OUT: _ClassVar[PhaseStatus]
    PHASE_STATUS_CANCELLED: _ClassVar[PhaseStatus]
    PHASE_STATUS_INTERRUPTED: _ClassVar[PhaseStatus]
    PHASE_STATUS_QUEUED: _ClassVar[PhaseStatus]

class PermissionMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PERMISSION_MODE_UNSPECIFIED: _ClassVar[PermissionMode]
    PERMISSION_MODE_DEFAULT: _ClassVar[PermissionMode]
    PERMISSION_MODE_ACCEPT_EDITS: _ClassVar[PermissionMode]
    PERMISSION_MODE_BYPASS_PERMISSIONS: _ClassVar[PermissionMode]
    PERMISSION_MODE_PLAN: _ClassVar[PermissionMode]
    PERMISSION_MODE_DONT_ASK: _ClassVar[PermissionMode]

class OnDisconnect(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ON_DISCONNECT_UNSPECIFIED: _ClassVar[OnDisconnect]
    ON_DISCONNECT_CANCEL: _ClassVar[OnDisconnect]
    ON_DISCONNECT_DETACH: _ClassVar[OnDisconnect]

class ToolCallStatus(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    TOOL_CALL_STATUS_UNSPECIFIED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_RUNNING: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_HELD: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_SUCCEEDED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_FAILED: _ClassVar[ToolCallStatus]
    TOOL_CALL_STATUS_UNFINISHED: _ClassVar[ToolCallStatus]

class PricingSource(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PRICING_SOURCE_UNSPECIFIED: _ClassVar[PricingSource]
    PRICING_SOURCE_PRICE_TABLE: _ClassVar[PricingSource]
    PRICING_SOURCE_OVERRIDE: _ClassVar[PricingSource]
    PRICING_SOURCE_UNPRICED: _ClassVar[PricingSource]

class ContainmentMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CONTAINMENT_MODE_UNSPECIFIED: _ClassVar[ContainmentMode]
    CONTAINMENT_MODE_CGROUP_V2: _ClassVar[ContainmentMode]
    CONTAINMENT_MODE_CGROUP_V1: _ClassVar[ContainmentMode]
    CONTAINMENT_MODE_SUBREAPER: _ClassVar[ContainmentMode]

class ResourceFault(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    RESOURCE_FAULT_UNSPECIFIED: _ClassVar[ResourceFault]
    RESOURCE_FAULT_OUT_OF_MEMORY: _ClassVar[ResourceFault]
    RESOURCE_FAULT_DISK_FULL: _ClassVar[ResourceFault]
    RESOURCE_FAULT_PROCESS_LIMIT: _ClassVar[ResourceFault]
    RESOURCE_FAULT_OUTPUT_LIMIT: _ClassVar[ResourceFault]
    RESOURCE_FAULT_LINE_LIMIT: _ClassVar[ResourceFault]
    RESOURCE_FAULT_EGRESS_LIMIT: _ClassVar[ResourceFault]
    RESOURCE_FAULT_WORKSPACE_LIMIT: _ClassVar[ResourceFault]

class AttemptEndKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ATTEMPT_END_KIND_UNSPECIFIED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_COMPLETED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_OVERLOADED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_RATE_LIMITED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_SERVER_ERROR: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_CONNECTION_FAILED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_CRASHED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_HUNG: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_STARTUP_TRANSIENT: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_INVALID_REQUEST: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_AUTHENTICATION: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_PERMISSION: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_API_REQUEST_TOO_LARGE: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_MAX_TURNS: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_MAX_BUDGET: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_STRUCTURED_OUTPUT: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_STARTUP_REFUSED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_EXECUTION_ERROR: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_TIMED_OUT: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_CANCELLED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_INTERRUPTED_BY_CLIENT: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_SERVER_SHUTDOWN: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_SPAWN_FAILED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_MOVED: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_RESOURCE_LIMIT: _ClassVar[AttemptEndKind]
    ATTEMPT_END_KIND_REWOUND: _ClassVar[AttemptEndKind]

class QueueReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    QUEUE_REASON_UNSPECIFIED: _ClassVar[QueueReason]
    QUEUE_REASON_SERVER_LIMIT: _ClassVar[QueueReason]
    QUEUE_REASON_PROJECT_LIMIT: _ClassVar[QueueReason]
    QUEUE_REASON_START_LIMIT: _ClassVar[QueueReason]
    QUEUE_REASON_RATE_LIMITED: _ClassVar[QueueReason]
    QUEUE_REASON_RETRY_BACKOFF: _ClassVar[QueueReason]

class WebhookEventType(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEBHOOK_EVENT_TYPE_UNSPECIFIED: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_PHASE_FINISHED: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_PHASE_COST_THRESHOLD: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_PHASE_RETRY_SCHEDULED: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_QUEUE_FULL: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_JOB_FINISHED: _ClassVar[WebhookEventType]
    WEBHOOK_EVENT_TYPE_QUOTA_EXCEEDED: _ClassVar[WebhookEventType]

class WebhookFormat(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEBHOOK_FORMAT_UNSPECIFIED: _ClassVar[WebhookFormat]
    WEBHOOK_FORMAT_STANDARD: _ClassVar[WebhookFormat]
    WEBHOOK_FORMAT_SLACK: _ClassVar[WebhookFormat]

class WebhookDeliveryState(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WEBHOOK_DELIVERY_STATE_UNSPECIFIED: _ClassVar[WebhookDeliveryState]
    WEBHOOK_DELIVERY_STATE_PENDING: _ClassVar[WebhookDeliveryState]
    WEBHOOK_DELIVERY_STATE_DELIVERED: _ClassVar[WebhookDeliveryState]
    WEBHOOK_DELIVERY_STATE_DEAD: _ClassVar[WebhookDeliveryState]
    WEBHOOK_DELIVERY_STATE_CANCELLED: _ClassVar[WebhookDeliveryState]

class CheckpointKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_KIND_UNSPECIFIED: _ClassVar[CheckpointKind]
    CHECKPOINT_KIND_START: _ClassVar[CheckpointKind]
    CHECKPOINT_KIND_TOOL_CALL: _ClassVar[CheckpointKind]
    CHECKPOINT_KIND_TURN_END: _ClassVar[CheckpointKind]

class CheckpointWorkspaceKind(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    CHECKPOINT_WORKSPACE_KIND_UNSPECIFIED: _ClassVar[CheckpointWorkspaceKind]
    CHECKPOINT_WORKSPACE_KIND_NONE: _ClassVar[CheckpointWorkspaceKind]
    CHECKPOINT_WORKSPACE_KIND_GIT_TREE: _ClassVar[CheckpointWorkspaceKind]
    CHECKPOINT_WORKSPACE_KIND_GIT_COMMIT: _ClassVar[CheckpointWorkspaceKind]
PHASE_STATUS_UNSPECIFIED: PhaseStatus
PHASE_STATUS_PENDING: PhaseStatus
PHASE_STATUS_RUNNING: PhaseStatus
PHASE_STATUS_PAUSING: PhaseStatus
PHASE_STATUS_PAUSED: PhaseStatus
PHASE_STATUS_AWAITING_APPROVAL: PhaseStatus
PHASE_STATUS_SUCCEEDED: PhaseStatus
PHASE_STATUS_FAILED: PhaseStatus
PHASE_STATUS_INCOMPLETE: PhaseStatus
PHASE_STATUS_TIMED_OUT: PhaseStatus
PHASE_STATUS_CANCELLED: PhaseStatus
PHASE_STATUS_INTERRUPTED: PhaseStatus
PHASE_STATUS_QUEUED: PhaseStatus
PERMISSION_MODE_UNSPECIFIED: PermissionMode
PERMISSION_MODE_DEFAULT: PermissionMode
PERMISSION_MODE_ACCEPT_EDITS: PermissionMode
PERMISSION_MODE_BYPASS_PERMISSIONS: PermissionMode
PERMISSION_MODE_PLAN: PermissionMode
PERMISSION_MODE_DONT_ASK: PermissionMode
ON_DISCONNECT_UNSPECIFIED: OnDisconnect
ON_DISCONNECT_CANCEL: OnDisconnect
ON_DISCONNECT_DETACH: OnDisconnect
TOOL_CALL_STATUS_UNSPECIFIED: ToolCallStatus
TOOL_CALL_STATUS_RUNNING: ToolCallStatus
TOOL_CALL_STATUS_HELD: ToolCallStatus
TOOL_CALL_STATUS_SUCCEEDED: ToolCallStatus
TOOL_CALL_STATUS_FAILED: ToolCallStatus
TOOL_CALL_STATUS_UNFINISHED: ToolCallStatus
PRICING_SOURCE_UNSPECIFIED: PricingSource
PRICING_SOURCE_PRICE_TABLE: PricingSource
PRICING_SOURCE_OVERRIDE: PricingSource
PRICING_SOURCE_UNPRICED: PricingSource
CONTAINMENT_MODE_UNSPECIFIED: ContainmentMode
CONTAINMENT_MODE_CGROUP_V2: ContainmentMode
CONTAINMENT_MODE_CGROUP_V1: ContainmentMode
CONTAINMENT_MODE_SUBREAPER: ContainmentMode
RESOURCE_FAULT_UNSPECIFIED: ResourceFault
RESOURCE_FAULT_OUT_OF_MEMORY: ResourceFault
RESOURCE_FAULT_DISK_FULL: ResourceFault
RESOURCE_FAULT_PROCESS_LIMIT: ResourceFault
RESOURCE_FAULT_OUTPUT_LIMIT: ResourceFault
RESOURCE_FAULT_LINE_LIMIT: ResourceFault
RESOURCE_FAULT_EGRESS_LIMIT: ResourceFault
RESOURCE_FAULT_WORKSPACE_LIMIT: ResourceFault
ATTEMPT_END_KIND_UNSPECIFIED: AttemptEndKind
ATTEMPT_END_KIND_COMPLETED: AttemptEndKind
ATTEMPT_END_KIND_API_OVERLOADED: AttemptEndKind
ATTEMPT_END_KIND_API_RATE_LIMITED: AttemptEndKind
ATTEMPT_END_KIND_API_SERVER_ERROR: AttemptEndKind
ATTEMPT_END_KIND_CONNECTION_FAILED: AttemptEndKind
ATTEMPT_END_KIND_CRASHED: AttemptEndKind
ATTEMPT_END_KIND_HUNG: AttemptEndKind
ATTEMPT_END_KIND_STARTUP_TRANSIENT: AttemptEndKind
ATTEMPT_END_KIND_API_INVALID_REQUEST: AttemptEndKind
ATTEMPT_END_KIND_API_AUTHENTICATION: AttemptEndKind
ATTEMPT_END_KIND_API_PERMISSION: AttemptEndKind
ATTEMPT_END_KIND_API_REQUEST_TOO_LARGE: AttemptEndKind
ATTEMPT_END_KIND_MAX_TURNS: AttemptEndKind
ATTEMPT_END_KIND_MAX_BUDGET: AttemptEndKind
ATTEMPT_END_KIND_STRUCTURED_OUTPUT: AttemptEndKind
ATTEMPT_END_KIND_STARTUP_REFUSED: AttemptEndKind
ATTEMPT_END_KIND_EXECUTION_ERROR: AttemptEndKind
ATTEMPT_END_KIND_TIMED_OUT: AttemptEndKind
ATTEMPT_END_KIND_CANCELLED: AttemptEndKind
ATTEMPT_END_KIND_INTERRUPTED_BY_CLIENT: AttemptEndKind
ATTEMPT_END_KIND_SERVER_SHUTDOWN: AttemptEndKind
ATTEMPT_END_KIND_SPAWN_FAILED: AttemptEndKind
ATTEMPT_END_KIND_MOVED: AttemptEndKind
ATTEMPT_END_KIND_RESOURCE_LIMIT: AttemptEndKind
ATTEMPT_END_KIND_REWOUND: AttemptEndKind
QUEUE_REASON_UNSPECIFIED: QueueReason
QUEUE_REASON_SERVER_LIMIT: QueueReason
QUEUE_REASON_PROJECT_LIMIT: QueueReason
QUEUE_REASON_START_LIMIT: QueueReason
QUEUE_REASON_RATE_LIMITED: QueueReason
QUEUE_REASON_RETRY_BACKOFF: QueueReason
WEBHOOK_EVENT_TYPE_UNSPECIFIED: WebhookEventType
WEBHOOK_EVENT_TYPE_PHASE_FINISHED: WebhookEventType
WEBHOOK_EVENT_TYPE_PHASE_AWAITING_APPROVAL: WebhookEventType
WEBHOOK_EVENT_TYPE_PHASE_COST_THRESHOLD: WebhookEventType
WEBHOOK_EVENT_TYPE_PHASE_RETRY_SCHEDULED: WebhookEventType
WEBHOOK_EVENT_TYPE_QUEUE_FULL: WebhookEventType
WEBHOOK_EVENT_TYPE_JOB_FINISHED: WebhookEventType
WEBHOOK_EVENT_TYPE_QUOTA_EXCEEDED: WebhookEventType
WEBHOOK_FORMAT_UNSPECIFIED: WebhookFormat
WEBHOOK_FORMAT_STANDARD: WebhookFormat
WEBHOOK_FORMAT_SLACK: WebhookFormat
WEBHOOK_DELIVERY_STATE_UNSPECIFIED: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_PENDING: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_DELIVERED: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_DEAD: WebhookDeliveryState
WEBHOOK_DELIVERY_STATE_CANCELLED: WebhookDeliveryState
CHECKPOINT_KIND_UNSPECIFIED: CheckpointKind
CHECKPOINT_KIND_START: CheckpointKind
CHECKPOINT_KIND_TOOL_CALL: CheckpointKind
CHECKPOINT_KIND_TURN_END: CheckpointKind
CHECKPOINT_WORKSPACE_KIND_UNSPECIFIED: CheckpointWorkspaceKind
CHECKPOINT_WORKSPACE_KIND_NONE: CheckpointWorkspaceKind
CHECKPOINT_WORKSPACE_KIND_GIT_TREE: CheckpointWorkspaceKind
CHECKPOINT_WORKSPACE_KIND_GIT_COMMIT: CheckpointWorkspaceKind

class PhaseContainment(_message.Message):
    __slots__ = ("mode", "cgroup_paths", "memory_limit_bytes", "cpu_limit_millicores", "process_count", "memory_current_bytes", "memory_peak_bytes", "oom_kills")
    MODE_FIELD_NUMBER: _ClassVar[int]
    CGROUP_PATHS_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_MILLICORES_FIELD_NUMBER: _ClassVar[int]
    PROCESS_COUNT_FIELD_NUMBER: _ClassVar[int]
    MEMORY_CURRENT_BYTES_FIELD_NUMBER: _ClassVar[int]
    MEMORY_PEAK_BYTES_FIELD_NUMBER: _ClassVar[int]
    OOM_KILLS_FIELD_NUMBER: _ClassVar[int]
    mode: ContainmentMode
    cgroup_paths: _containers.RepeatedScalarFieldContainer[str]
    memory_limit_bytes: int
    cpu_limit_millicores: int
    process_count: int
    memory_current_bytes: int
    memory_peak_bytes: int
    oom_kills: int
    def __init__(self, mode: _Optional[_Union[ContainmentMode, str]] = ..., cgroup_paths: _Optional[_Iterable[str]] = ..., memory_limit_bytes: _Optional[int] = ..., cpu_limit_millicores: _Optional[int] = ..., process_count: _Optional[int] = ..., memory_current_bytes: _Optional[int] = ..., memory_peak_bytes: _Optional[int] = ..., oom_kills: _Optional[int] = ...) -> None: ...

class Job(_message.Message):
    __slots__ = ("job_id", "project_id", "status", "create_time", "update_time", "phases", "cost")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    PHASES_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    project_id: str
    status: PhaseStatus
    create_time: _timestamp_pb2.Timestamp
    update_time: _timestamp_pb2.Timestamp
    phases: _containers.RepeatedCompositeFieldContainer[Phase]
    cost: CostTotals
    def __init__(self, job_id: _Optional[str] = ..., project_id: _Optional[str] = ..., status: _Optional[_Union[PhaseStatus, str]] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., phases: _Optional[_Iterable[_Union[Phase, _Mapping]]] = ..., cost: _Optional[_Union[CostTotals, _Mapping]] = ...) -> None: ...

class Phase(_message.Message):
    __slots__ = ("job_id", "phase_id", "project_id", "status", "status_reason", "create_time", "start_time", "end_time", "session_id", "model", "working_dir", "cost", "tool_stats", "current_tool", "last_sequence", "result", "on_disconnect", "prompt", "attempts", "queue", "auth_source", "queue_wait", "forked_from", "prompt_first_line", "prompt_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    STATUS_REASON_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    TOOL_STATS_FIELD_NUMBER: _ClassVar[int]
    CURRENT_TOOL_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    ON_DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    QUEUE_FIELD_NUMBER: _ClassVar[int]
    AUTH_SOURCE_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    FORKED_FROM_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIRST_LINE_FIELD_NUMBER: _ClassVar[int]
    PROMPT_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    project_id: str
    status: PhaseStatus
    status_reason: str
    create_time: _timestamp_pb2.Timestamp
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    session_id: str
    model: str
    working_dir: str
    cost: PhaseCost
    tool_stats: _containers.RepeatedCompositeFieldContainer[ToolStats]
    current_tool: ToolCall
    last_sequence: int
    result: PhaseResult
    on_disconnect: OnDisconnect
    prompt: str
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    queue: QueueState
    auth_source: str
    queue_wait: _duration_pb2.Duration
    forked_from: ForkOrigin
    prompt_first_line: str
    prompt_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., project_id: _Optional[str] = ..., status: _Optional[_Union[PhaseStatus, str]] = ..., status_reason: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., session_id: _Optional[str] = ..., model: _Optional[str] = ..., working_dir: _Optional[str] = ..., cost: _Optional[_Union[PhaseCost, _Mapping]] = ..., tool_stats: _Optional[_Iterable[_Union[ToolStats, _Mapping]]] = ..., current_tool: _Optional[_Union[ToolCall, _Mapping]] = ..., last_sequence: _Optional[int] = ..., result: _Optional[_Union[PhaseResult, _Mapping]] = ..., on_disconnect: _Optional[_Union[OnDisconnect, str]] = ..., prompt: _Optional[str] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., queue: _Optional[_Union[QueueState, _Mapping]] = ..., auth_source: _Optional[str] = ..., queue_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., forked_from: _Optional[_Union[ForkOrigin, _Mapping]] = ..., prompt_first_line: _Optional[str] = ..., prompt_bytes: _Optional[int] = ...) -> None: ...

class TokenUsage(_message.Message):
    __slots__ = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_write_5m_input_tokens", "cache_write_1h_input_tokens", "web_search_requests")
    INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    OUTPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_READ_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_5M_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    CACHE_WRITE_1H_INPUT_TOKENS_FIELD_NUMBER: _ClassVar[int]
    WEB_SEARCH_REQUESTS_FIELD_NUMBER: _ClassVar[int]
    input_tokens: int
    output_tokens: int
    cache_read_input_tokens: int
    cache_write_5m_input_tokens: int
    cache_write_1h_input_tokens: int
    web_search_requests: int
    def __init__(self, input_tokens: _Optional[int] = ..., output_tokens: _Optional[int] = ..., cache_read_input_tokens: _Optional[int] = ..., cache_write_5m_input_tokens: _Optional[int] = ..., cache_write_1h_input_tokens: _Optional[int] = ..., web_search_requests: _Optional[int] = ...) -> None: ...

class ModelCost(_message.Message):
    __slots__ = ("model", "tokens", "reported_usd", "computed_usd", "pricing_source")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    REPORTED_USD_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_USD_FIELD_NUMBER: _ClassVar[int]
    PRICING_SOURCE_FIELD_NUMBER: _ClassVar[int]
    model: str
    tokens: TokenUsage
    reported_usd: float
    computed_usd: float
    pricing_source: PricingSource
    def __init__(self, model: _Optional[str] = ..., tokens: _Optional[_Union[TokenUsage, _Mapping]] = ..., reported_usd: _Optional[float] = ..., computed_usd: _Optional[float] = ..., pricing_source: _Optional[_Union[PricingSource, str]] = ...) -> None: ...

class PhaseCost(_message.Message):
    __slots__ = ("reported_usd", "computed_usd", "difference_usd", "computed_only", "tokens", "models", "unpriced_models")
    REPORTED_USD_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_USD_FIELD_NUMBER: _ClassVar[int]
    DIFFERENCE_USD_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_ONLY_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    UNPRICED_MODELS_FIELD_NUMBER: _ClassVar[int]
    reported_usd: float
    computed_usd: float
    difference_usd: float
    computed_only: bool
    tokens: TokenUsage
    models: _containers.RepeatedCompositeFieldContainer[ModelCost]
    unpriced_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reported_usd: _Optional[float] = ..., computed_usd: _Optional[float] = ..., difference_usd: _Optional[float] = ..., computed_only: _Optional[bool] = ..., tokens: _Optional[_Union[TokenUsage, _Mapping]] = ..., models: _Optional[_Iterable[_Union[ModelCost, _Mapping]]] = ..., unpriced_models: _Optional[_Iterable[str]] = ...) -> None: ...

class CostTotals(_message.Message):
    __slots__ = ("reported_usd", "computed_usd", "tokens", "models", "phase_count", "computed_only_phase_count", "unpriced_models")
    REPORTED_USD_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_USD_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    PHASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    COMPUTED_ONLY_PHASE_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNPRICED_MODELS_FIELD_NUMBER: _ClassVar[int]
    reported_usd: float
    computed_usd: float
    tokens: TokenUsage
    models: _containers.RepeatedCompositeFieldContainer[ModelCost]
    phase_count: int
    computed_only_phase_count: int
    unpriced_models: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, reported_usd: _Optional[float] = ..., computed_usd: _Optional[float] = ..., tokens: _Optional[_Union[TokenUsage, _Mapping]] = ..., models: _Optional[_Iterable[_Union[ModelCost, _Mapping]]] = ..., phase_count: _Optional[int] = ..., computed_only_phase_count: _Optional[int] = ..., unpriced_models: _Optional[_Iterable[str]] = ...) -> None: ...

class ToolCall(_message.Message):
    __slots__ = ("job_id", "phase_id", "tool_use_id", "name", "input_json", "input_bytes", "input_truncated", "parent_tool_use_id", "status", "start_time", "end_time", "duration", "result_preview", "result_bytes", "result_truncated", "structured_result_json", "structured_result_truncated", "start_sequence", "end_sequence", "held_by_breakpoint_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    INPUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    INPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    PARENT_TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    DURATION_FIELD_NUMBER: _ClassVar[int]
    RESULT_PREVIEW_FIELD_NUMBER: _ClassVar[int]
    RESULT_BYTES_FIELD_NUMBER: _ClassVar[int]
    RESULT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_RESULT_JSON_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_RESULT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    START_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    END_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    HELD_BY_BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    tool_use_id: str
    name: str
    input_json: str
    input_bytes: int
    input_truncated: bool
    parent_tool_use_id: str
    status: ToolCallStatus
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    duration: _duration_pb2.Duration
    result_preview: str
    result_bytes: int
    result_truncated: bool
    structured_result_json: str
    structured_result_truncated: bool
    start_sequence: int
    end_sequence: int
    held_by_breakpoint_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., name: _Optional[str] = ..., input_json: _Optional[str] = ..., input_bytes: _Optional[int] = ..., input_truncated: _Optional[bool] = ..., parent_tool_use_id: _Optional[str] = ..., status: _Optional[_Union[ToolCallStatus, str]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., result_preview: _Optional[str] = ..., result_bytes: _Optional[int] = ..., result_truncated: _Optional[bool] = ..., structured_result_json: _Optional[str] = ..., structured_result_truncated: _Optional[bool] = ..., start_sequence: _Optional[int] = ..., end_sequence: _Optional[int] = ..., held_by_breakpoint_id: _Optional[str] = ...) -> None: ...

class ToolStats(_message.Message):
    __slots__ = ("name", "count", "failures", "unfinished", "total_duration", "mean_duration", "p95_duration")
    NAME_FIELD_NUMBER: _ClassVar[int]
    COUNT_FIELD_NUMBER: _ClassVar[int]
    FAILURES_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_FIELD_NUMBER: _ClassVar[int]
    TOTAL_DURATION_FIELD_NUMBER: _ClassVar[int]
    MEAN_DURATION_FIELD_NUMBER: _ClassVar[int]
    P95_DURATION_FIELD_NUMBER: _ClassVar[int]
    name: str
    count: int
    failures: int
    unfinished: int
    total_duration: _duration_pb2.Duration
    mean_duration: _duration_pb2.Duration
    p95_duration: _duration_pb2.Duration
    def __init__(self, name: _Optional[str] = ..., count: _Optional[int] = ..., failures: _Optional[int] = ..., unfinished: _Optional[int] = ..., total_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., mean_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., p95_duration: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PermissionDenial(_message.Message):
    __slots__ = ("tool_name", "tool_use_id", "tool_input_json")
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    tool_name: str
    tool_use_id: str
    tool_input_json: str
    def __init__(self, tool_name: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., tool_input_json: _Optional[str] = ...) -> None: ...

class PhaseDiagnostics(_message.Message):
    __slots__ = ("stderr_tail", "stderr_bytes", "parse_error_count", "unfinished_tool_calls", "stdout_bytes", "argv", "claude_path", "recording_path", "containment", "gateway", "sandbox")
    STDERR_TAIL_FIELD_NUMBER: _ClassVar[int]
    STDERR_BYTES_FIELD_NUMBER: _ClassVar[int]
    PARSE_ERROR_COUNT_FIELD_NUMBER: _ClassVar[int]
    UNFINISHED_TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    STDOUT_BYTES_FIELD_NUMBER: _ClassVar[int]
    ARGV_FIELD_NUMBER: _ClassVar[int]
    CLAUDE_PATH_FIELD_NUMBER: _ClassVar[int]
    RECORDING_PATH_FIELD_NUMBER: _ClassVar[int]
    CONTAINMENT_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    stderr_tail: str
    stderr_bytes: int
    parse_error_count: int
    unfinished_tool_calls: int
    stdout_bytes: int
    argv: _containers.RepeatedScalarFieldContainer[str]
    claude_path: str
    recording_path: str
    containment: PhaseContainment
    gateway: GatewayReport
    sandbox: SandboxReport
    def __init__(self, stderr_tail: _Optional[str] = ..., stderr_bytes: _Optional[int] = ..., parse_error_count: _Optional[int] = ..., unfinished_tool_calls: _Optional[int] = ..., stdout_bytes: _Optional[int] = ..., argv: _Optional[_Iterable[str]] = ..., claude_path: _Optional[str] = ..., recording_path: _Optional[str] = ..., containment: _Optional[_Union[PhaseContainment, _Mapping]] = ..., gateway: _Optional[_Union[GatewayReport, _Mapping]] = ..., sandbox: _Optional[_Union[SandboxReport, _Mapping]] = ...) -> None: ...

class GatewayReport(_message.Message):
    __slots__ = ("requests", "models", "rate_limited", "overloaded", "api_errors", "model_refusals", "upstream_failures", "egress_connections", "egress_refusals", "egress_allowlist", "allowed_models", "feature_refusals")
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    MODELS_FIELD_NUMBER: _ClassVar[int]
    RATE_LIMITED_FIELD_NUMBER: _ClassVar[int]
    OVERLOADED_FIELD_NUMBER: _ClassVar[int]
    API_ERRORS_FIELD_NUMBER: _ClassVar[int]
    MODEL_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    UPSTREAM_FAILURES_FIELD_NUMBER: _ClassVar[int]
    EGRESS_CONNECTIONS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_MODELS_FIELD_NUMBER: _ClassVar[int]
    FEATURE_REFUSALS_FIELD_NUMBER: _ClassVar[int]
    requests: int
    models: _containers.RepeatedCompositeFieldContainer[GatewayModelUsage]
    rate_limited: int
    overloaded: int
    api_errors: int
    model_refusals: int
    upstream_failures: int
    egress_connections: int
    egress_refusals: int
    egress_allowlist: _containers.RepeatedScalarFieldContainer[str]
    allowed_models: _containers.RepeatedScalarFieldContainer[str]
    feature_refusals: int
    def __init__(self, requests: _Optional[int] = ..., models: _Optional[_Iterable[_Union[GatewayModelUsage, _Mapping]]] = ..., rate_limited: _Optional[int] = ..., overloaded: _Optional[int] = ..., api_errors: _Optional[int] = ..., model_refusals: _Optional[int] = ..., upstream_failures: _Optional[int] = ..., egress_connections: _Optional[int] = ..., egress_refusals: _Optional[int] = ..., egress_allowlist: _Optional[_Iterable[str]] = ..., allowed_models: _Optional[_Iterable[str]] = ..., feature_refusals: _Optional[int] = ...) -> None: ...

class GatewayModelUsage(_message.Message):
    __slots__ = ("model", "requests", "tokens")
    MODEL_FIELD_NUMBER: _ClassVar[int]
    REQUESTS_FIELD_NUMBER: _ClassVar[int]
    TOKENS_FIELD_NUMBER: _ClassVar[int]
    model: str
    requests: int
    tokens: TokenUsage
    def __init__(self, model: _Optional[str] = ..., requests: _Optional[int] = ..., tokens: _Optional[_Union[TokenUsage, _Mapping]] = ...) -> None: ...

class PhaseResult(_message.Message):
    __slots__ = ("job_id", "phase_id", "status", "reason", "result_subtype", "is_error", "api_error_status", "terminal_reason", "num_turns", "result_text", "errors", "exit_code", "exit_signal", "result_count", "session_id", "cost", "tool_stats", "permission_denials", "start_time", "end_time", "last_sequence", "diagnostics", "attempts", "resource_fault", "artifacts", "auth_source", "structured_output", "structured_output_truncated", "queue_wait")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    RESULT_SUBTYPE_FIELD_NUMBER: _ClassVar[int]
    IS_ERROR_FIELD_NUMBER: _ClassVar[int]
    API_ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    TERMINAL_REASON_FIELD_NUMBER: _ClassVar[int]
    NUM_TURNS_FIELD_NUMBER: _ClassVar[int]
    RESULT_TEXT_FIELD_NUMBER: _ClassVar[int]
    ERRORS_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    RESULT_COUNT_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    TOOL_STATS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_DENIALS_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    DIAGNOSTICS_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    RESOURCE_FAULT_FIELD_NUMBER: _ClassVar[int]
    ARTIFACTS_FIELD_NUMBER: _ClassVar[int]
    AUTH_SOURCE_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_FIELD_NUMBER: _ClassVar[int]
    STRUCTURED_OUTPUT_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    QUEUE_WAIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    status: PhaseStatus
    reason: str
    result_subtype: str
    is_error: bool
    api_error_status: int
    terminal_reason: str
    num_turns: int
    result_text: str
    errors: _containers.RepeatedScalarFieldContainer[str]
    exit_code: int
    exit_signal: str
    result_count: int
    session_id: str
    cost: PhaseCost
    tool_stats: _containers.RepeatedCompositeFieldContainer[ToolStats]
    permission_denials: _containers.RepeatedCompositeFieldContainer[PermissionDenial]
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    last_sequence: int
    diagnostics: PhaseDiagnostics
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    resource_fault: ResourceFault
    artifacts: PhaseArtifacts
    auth_source: str
    structured_output: str
    structured_output_truncated: bool
    queue_wait: _duration_pb2.Duration
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., status: _Optional[_Union[PhaseStatus, str]] = ..., reason: _Optional[str] = ..., result_subtype: _Optional[str] = ..., is_error: _Optional[bool] = ..., api_error_status: _Optional[int] = ..., terminal_reason: _Optional[str] = ..., num_turns: _Optional[int] = ..., result_text: _Optional[str] = ..., errors: _Optional[_Iterable[str]] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[str] = ..., result_count: _Optional[int] = ..., session_id: _Optional[str] = ..., cost: _Optional[_Union[PhaseCost, _Mapping]] = ..., tool_stats: _Optional[_Iterable[_Union[ToolStats, _Mapping]]] = ..., permission_denials: _Optional[_Iterable[_Union[PermissionDenial, _Mapping]]] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., last_sequence: _Optional[int] = ..., diagnostics: _Optional[_Union[PhaseDiagnostics, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., resource_fault: _Optional[_Union[ResourceFault, str]] = ..., artifacts: _Optional[_Union[PhaseArtifacts, _Mapping]] = ..., auth_source: _Optional[str] = ..., structured_output: _Optional[str] = ..., structured_output_truncated: _Optional[bool] = ..., queue_wait: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ...) -> None: ...

class PhaseArtifacts(_message.Message):
    __slots__ = ("git_available", "unavailable_reason", "base_commit", "final_commit", "branch", "worktree_path", "worktree_kept", "changed_files", "diff", "diff_truncated", "diff_bytes")
    GIT_AVAILABLE_FIELD_NUMBER: _ClassVar[int]
    UNAVAILABLE_REASON_FIELD_NUMBER: _ClassVar[int]
    BASE_COMMIT_FIELD_NUMBER: _ClassVar[int]
    FINAL_COMMIT_FIELD_NUMBER: _ClassVar[int]
    BRANCH_FIELD_NUMBER: _ClassVar[int]
    WORKTREE_PATH_FIELD_NUMBER: _ClassVar[int]
    WORKTREE_KEPT_FIELD_NUMBER: _ClassVar[int]
    CHANGED_FILES_FIELD_NUMBER: _ClassVar[int]
    DIFF_FIELD_NUMBER: _ClassVar[int]
    DIFF_TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    DIFF_BYTES_FIELD_NUMBER: _ClassVar[int]
    git_available: bool
    unavailable_reason: str
    base_commit: str
    final_commit: str
    branch: str
    worktree_path: str
    worktree_kept: bool
    changed_files: _containers.RepeatedCompositeFieldContainer[ChangedFile]
    diff: str
    diff_truncated: bool
    diff_bytes: int
    def __init__(self, git_available: _Optional[bool] = ..., unavailable_reason: _Optional[str] = ..., base_commit: _Optional[str] = ..., final_commit: _Optional[str] = ..., branch: _Optional[str] = ..., worktree_path: _Optional[str] = ..., worktree_kept: _Optional[bool] = ..., changed_files: _Optional[_Iterable[_Union[ChangedFile, _Mapping]]] = ..., diff: _Optional[str] = ..., diff_truncated: _Optional[bool] = ..., diff_bytes: _Optional[int] = ...) -> None: ...

class ChangedFile(_message.Message):
    __slots__ = ("path", "old_path", "status", "lines_added", "lines_deleted", "binary")
    PATH_FIELD_NUMBER: _ClassVar[int]
    OLD_PATH_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    LINES_ADDED_FIELD_NUMBER: _ClassVar[int]
    LINES_DELETED_FIELD_NUMBER: _ClassVar[int]
    BINARY_FIELD_NUMBER: _ClassVar[int]
    path: str
    old_path: str
    status: str
    lines_added: int
    lines_deleted: int
    binary: bool
    def __init__(self, path: _Optional[str] = ..., old_path: _Optional[str] = ..., status: _Optional[str] = ..., lines_added: _Optional[int] = ..., lines_deleted: _Optional[int] = ..., binary: _Optional[bool] = ...) -> None: ...

class Attempt(_message.Message):
    __slots__ = ("number", "status", "reason", "end_kind", "retryable", "exit_code", "exit_signal", "api_error_status", "session_id", "resumed_session_id", "start_time", "end_time", "cost", "first_sequence", "last_sequence", "retry_delay", "startup_failure_reason", "replica_id")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    STATUS_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    END_KIND_FIELD_NUMBER: _ClassVar[int]
    RETRYABLE_FIELD_NUMBER: _ClassVar[int]
    EXIT_CODE_FIELD_NUMBER: _ClassVar[int]
    EXIT_SIGNAL_FIELD_NUMBER: _ClassVar[int]
    API_ERROR_STATUS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    RESUMED_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    START_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    COST_FIELD_NUMBER: _ClassVar[int]
    FIRST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    LAST_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    RETRY_DELAY_FIELD_NUMBER: _ClassVar[int]
    STARTUP_FAILURE_REASON_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    number: int
    status: PhaseStatus
    reason: str
    end_kind: AttemptEndKind
    retryable: bool
    exit_code: int
    exit_signal: str
    api_error_status: int
    session_id: str
    resumed_session_id: str
    start_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    cost: PhaseCost
    first_sequence: int
    last_sequence: int
    retry_delay: _duration_pb2.Duration
    startup_failure_reason: str
    replica_id: str
    def __init__(self, number: _Optional[int] = ..., status: _Optional[_Union[PhaseStatus, str]] = ..., reason: _Optional[str] = ..., end_kind: _Optional[_Union[AttemptEndKind, str]] = ..., retryable: _Optional[bool] = ..., exit_code: _Optional[int] = ..., exit_signal: _Optional[str] = ..., api_error_status: _Optional[int] = ..., session_id: _Optional[str] = ..., resumed_session_id: _Optional[str] = ..., start_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., cost: _Optional[_Union[PhaseCost, _Mapping]] = ..., first_sequence: _Optional[int] = ..., last_sequence: _Optional[int] = ..., retry_delay: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., startup_failure_reason: _Optional[str] = ..., replica_id: _Optional[str] = ...) -> None: ...

class QueueState(_message.Message):
    __slots__ = ("reason", "detail", "position", "queued_count", "not_before", "enqueue_time", "next_attempt")
    REASON_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    POSITION_FIELD_NUMBER: _ClassVar[int]
    QUEUED_COUNT_FIELD_NUMBER: _ClassVar[int]
    NOT_BEFORE_FIELD_NUMBER: _ClassVar[int]
    ENQUEUE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    reason: QueueReason
    detail: str
    position: int
    queued_count: int
    not_before: _timestamp_pb2.Timestamp
    enqueue_time: _timestamp_pb2.Timestamp
    next_attempt: int
    def __init__(self, reason: _Optional[_Union[QueueReason, str]] = ..., detail: _Optional[str] = ..., position: _Optional[int] = ..., queued_count: _Optional[int] = ..., not_before: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., enqueue_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt: _Optional[int] = ...) -> None: ...

class Breakpoint(_message.Message):
    __slots__ = ("breakpoint_id", "tool_name", "input_pattern", "cost_threshold_usd", "turn_count", "egress", "once", "hit_count")
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    INPUT_PATTERN_FIELD_NUMBER: _ClassVar[int]
    COST_THRESHOLD_USD_FIELD_NUMBER: _ClassVar[int]
    TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    EGRESS_FIELD_NUMBER: _ClassVar[int]
    ONCE_FIELD_NUMBER: _ClassVar[int]
    HIT_COUNT_FIELD_NUMBER: _ClassVar[int]
    breakpoint_id: str
    tool_name: str
    input_pattern: InputPatternCondition
    cost_threshold_usd: float
    turn_count: int
    egress: EgressCondition
    once: bool
    hit_count: int
    def __init__(self, breakpoint_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., input_pattern: _Optional[_Union[InputPatternCondition, _Mapping]] = ..., cost_threshold_usd: _Optional[float] = ..., turn_count: _Optional[int] = ..., egress: _Optional[_Union[EgressCondition, _Mapping]] = ..., once: _Optional[bool] = ..., hit_count: _Optional[int] = ...) -> None: ...

class EgressCondition(_message.Message):
    __slots__ = ("host", "unlisted_hosts")
    HOST_FIELD_NUMBER: _ClassVar[int]
    UNLISTED_HOSTS_FIELD_NUMBER: _ClassVar[int]
    host: str
    unlisted_hosts: bool
    def __init__(self, host: _Optional[str] = ..., unlisted_hosts: _Optional[bool] = ...) -> None: ...

class EgressAllowance(_message.Message):
    __slots__ = ("project_id", "host", "created_by", "create_time")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    CREATED_BY_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    host: str
    created_by: str
    create_time: _timestamp_pb2.Timestamp
    def __init__(self, project_id: _Optional[str] = ..., host: _Optional[str] = ..., created_by: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class InputPatternCondition(_message.Message):
    __slots__ = ("regex", "tool_name")
    REGEX_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    regex: str
    tool_name: str
    def __init__(self, regex: _Optional[str] = ..., tool_name: _Optional[str] = ...) -> None: ...

class PendingToolCall(_message.Message):
    __slots__ = ("call", "breakpoint_id", "hold_reason", "hold_time")
    CALL_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_REASON_FIELD_NUMBER: _ClassVar[int]
    HOLD_TIME_FIELD_NUMBER: _ClassVar[int]
    call: ToolCall
    breakpoint_id: str
    hold_reason: str
    hold_time: _timestamp_pb2.Timestamp
    def __init__(self, call: _Optional[_Union[ToolCall, _Mapping]] = ..., breakpoint_id: _Optional[str] = ..., hold_reason: _Optional[str] = ..., hold_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class ContextUsage(_message.Message):
    __slots__ = ("total_tokens", "max_tokens", "percentage", "raw_json")
    TOTAL_TOKENS_FIELD_NUMBER: _ClassVar[int]
    MAX_TOKENS_FIELD_NUMBER: _ClassVar[int]
    PERCENTAGE_FIELD_NUMBER: _ClassVar[int]
    RAW_JSON_FIELD_NUMBER: _ClassVar[int]
    total_tokens: int
    max_tokens: int
    percentage: float
    raw_json: str
    def __init__(self, total_tokens: _Optional[int] = ..., max_tokens: _Optional[int] = ..., percentage: _Optional[float] = ..., raw_json: _Optional[str] = ...) -> None: ...

class PhaseInspection(_message.Message):
    __slots__ = ("phase", "paused", "hard_paused", "pending_calls", "recent_events", "assistant_message_count", "user_message_count", "turn_count", "context_usage", "breakpoints", "containment", "attempts", "gateway", "sandbox", "checkpoints")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    PAUSED_FIELD_NUMBER: _ClassVar[int]
    HARD_PAUSED_FIELD_NUMBER: _ClassVar[int]
    PENDING_CALLS_FIELD_NUMBER: _ClassVar[int]
    RECENT_EVENTS_FIELD_NUMBER: _ClassVar[int]
    ASSISTANT_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    USER_MESSAGE_COUNT_FIELD_NUMBER: _ClassVar[int]
    TURN_COUNT_FIELD_NUMBER: _ClassVar[int]
    CONTEXT_USAGE_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CONTAINMENT_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    GATEWAY_FIELD_NUMBER: _ClassVar[int]
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINTS_FIELD_NUMBER: _ClassVar[int]
    phase: Phase
    paused: bool
    hard_paused: bool
    pending_calls: _containers.RepeatedCompositeFieldContainer[PendingToolCall]
    recent_events: _containers.RepeatedCompositeFieldContainer[StreamEventRef]
    assistant_message_count: int
    user_message_count: int
    turn_count: int
    context_usage: ContextUsage
    breakpoints: _containers.RepeatedCompositeFieldContainer[Breakpoint]
    containment: PhaseContainment
    attempts: _containers.RepeatedCompositeFieldContainer[Attempt]
    gateway: GatewayReport
    sandbox: SandboxReport
    checkpoints: _containers.RepeatedCompositeFieldContainer[Checkpoint]
    def __init__(self, phase: _Optional[_Union[Phase, _Mapping]] = ..., paused: _Optional[bool] = ..., hard_paused: _Optional[bool] = ..., pending_calls: _Optional[_Iterable[_Union[PendingToolCall, _Mapping]]] = ..., recent_events: _Optional[_Iterable[_Union[StreamEventRef, _Mapping]]] = ..., assistant_message_count: _Optional[int] = ..., user_message_count: _Optional[int] = ..., turn_count: _Optional[int] = ..., context_usage: _Optional[_Union[ContextUsage, _Mapping]] = ..., breakpoints: _Optional[_Iterable[_Union[Breakpoint, _Mapping]]] = ..., containment: _Optional[_Union[PhaseContainment, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[Attempt, _Mapping]]] = ..., gateway: _Optional[_Union[GatewayReport, _Mapping]] = ..., sandbox: _Optional[_Union[SandboxReport, _Mapping]] = ..., checkpoints: _Optional[_Iterable[_Union[Checkpoint, _Mapping]]] = ...) -> None: ...

class SandboxReport(_message.Message):
    __slots__ = ("setting", "layers", "home", "egress_ports", "protected", "restored")
    SETTING_FIELD_NUMBER: _ClassVar[int]
    LAYERS_FIELD_NUMBER: _ClassVar[int]
    HOME_FIELD_NUMBER: _ClassVar[int]
    EGRESS_PORTS_FIELD_NUMBER: _ClassVar[int]
    PROTECTED_FIELD_NUMBER: _ClassVar[int]
    RESTORED_FIELD_NUMBER: _ClassVar[int]
    setting: str
    layers: _containers.RepeatedCompositeFieldContainer[SandboxLayer]
    home: str
    egress_ports: _containers.RepeatedScalarFieldContainer[int]
    protected: _containers.RepeatedScalarFieldContainer[str]
    restored: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, setting: _Optional[str] = ..., layers: _Optional[_Iterable[_Union[SandboxLayer, _Mapping]]] = ..., home: _Optional[str] = ..., egress_ports: _Optional[_Iterable[int]] = ..., protected: _Optional[_Iterable[str]] = ..., restored: _Optional[_Iterable[str]] = ...) -> None: ...

class ServerStatus(_message.Message):
    __slots__ = ("sandbox", "containment_mode", "refusal", "version", "offline")
    SANDBOX_FIELD_NUMBER: _ClassVar[int]
    CONTAINMENT_MODE_FIELD_NUMBER: _ClassVar[int]
    REFUSAL_FIELD_NUMBER: _ClassVar[int]
    VERSION_FIELD_NUMBER: _ClassVar[int]
    OFFLINE_FIELD_NUMBER: _ClassVar[int]
    sandbox: SandboxReport
    containment_mode: ContainmentMode
    refusal: str
    version: str
    offline: bool
    def __init__(self, sandbox: _Optional[_Union[SandboxReport, _Mapping]] = ..., containment_mode: _Optional[_Union[ContainmentMode, str]] = ..., refusal: _Optional[str] = ..., version: _Optional[str] = ..., offline: _Optional[bool] = ...) -> None: ...

class SandboxLayer(_message.Message):
    __slots__ = ("name", "active", "detail")
    NAME_FIELD_NUMBER: _ClassVar[int]
    ACTIVE_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    name: str
    active: bool
    detail: str
    def __init__(self, name: _Optional[str] = ..., active: _Optional[bool] = ..., detail: _Optional[str] = ...) -> None: ...

class StreamEventRef(_message.Message):
    __slots__ = ("sequence", "kind", "summary", "receive_time")
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SUMMARY_FIELD_NUMBER: _ClassVar[int]
    RECEIVE_TIME_FIELD_NUMBER: _ClassVar[int]
    sequence: int
    kind: str
    summary: str
    receive_time: _timestamp_pb2.Timestamp
    def __init__(self, sequence: _Optional[int] = ..., kind: _Optional[str] = ..., summary: _Optional[str] = ..., receive_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ...) -> None: ...

class Webhook(_message.Message):
    __slots__ = ("webhook_id", "project_id", "url", "events", "statuses", "cost_threshold_usd", "format", "description", "create_time", "from_config", "disabled_time", "disabled_reason")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    COST_THRESHOLD_USD_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    FROM_CONFIG_FIELD_NUMBER: _ClassVar[int]
    DISABLED_TIME_FIELD_NUMBER: _ClassVar[int]
    DISABLED_REASON_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    project_id: str
    url: str
    events: _containers.RepeatedScalarFieldContainer[WebhookEventType]
    statuses: _containers.RepeatedScalarFieldContainer[PhaseStatus]
    cost_threshold_usd: float
    format: WebhookFormat
    description: str
    create_time: _timestamp_pb2.Timestamp
    from_config: bool
    disabled_time: _timestamp_pb2.Timestamp
    disabled_reason: str
    def __init__(self, webhook_id: _Optional[str] = ..., project_id: _Optional[str] = ..., url: _Optional[str] = ..., events: _Optional[_Iterable[_Union[WebhookEventType, str]]] = ..., statuses: _Optional[_Iterable[_Union[PhaseStatus, str]]] = ..., cost_threshold_usd: _Optional[float] = ..., format: _Optional[_Union[WebhookFormat, str]] = ..., description: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., from_config: _Optional[bool] = ..., disabled_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., disabled_reason: _Optional[str] = ...) -> None: ...

class WebhookAttempt(_message.Message):
    __slots__ = ("attempt", "time", "status_code", "latency", "error", "replica_id")
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    LATENCY_FIELD_NUMBER: _ClassVar[int]
    ERROR_FIELD_NUMBER: _ClassVar[int]
    REPLICA_ID_FIELD_NUMBER: _ClassVar[int]
    attempt: int
    time: _timestamp_pb2.Timestamp
    status_code: int
    latency: _duration_pb2.Duration
    error: str
    replica_id: str
    def __init__(self, attempt: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., status_code: _Optional[int] = ..., latency: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., error: _Optional[str] = ..., replica_id: _Optional[str] = ...) -> None: ...

class WebhookDelivery(_message.Message):
    __slots__ = ("delivery_id", "webhook_id", "event", "job_id", "phase_id", "sequence", "state", "attempt_count", "create_time", "next_attempt_time", "end_time", "attempts", "body", "last_status_code", "last_error")
    DELIVERY_ID_FIELD_NUMBER: _ClassVar[int]
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    EVENT_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    STATE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_COUNT_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    NEXT_ATTEMPT_TIME_FIELD_NUMBER: _ClassVar[int]
    END_TIME_FIELD_NUMBER: _ClassVar[int]
    ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    BODY_FIELD_NUMBER: _ClassVar[int]
    LAST_STATUS_CODE_FIELD_NUMBER: _ClassVar[int]
    LAST_ERROR_FIELD_NUMBER: _ClassVar[int]
    delivery_id: str
    webhook_id: str
    event: WebhookEventType
    job_id: str
    phase_id: str
    sequence: int
    state: WebhookDeliveryState
    attempt_count: int
    create_time: _timestamp_pb2.Timestamp
    next_attempt_time: _timestamp_pb2.Timestamp
    end_time: _timestamp_pb2.Timestamp
    attempts: _containers.RepeatedCompositeFieldContainer[WebhookAttempt]
    body: str
    last_status_code: int
    last_error: str
    def __init__(self, delivery_id: _Optional[str] = ..., webhook_id: _Optional[str] = ..., event: _Optional[_Union[WebhookEventType, str]] = ..., job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., sequence: _Optional[int] = ..., state: _Optional[_Union[WebhookDeliveryState, str]] = ..., attempt_count: _Optional[int] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., next_attempt_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., end_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., attempts: _Optional[_Iterable[_Union[WebhookAttempt, _Mapping]]] = ..., body: _Optional[str] = ..., last_status_code: _Optional[int] = ..., last_error: _Optional[str] = ...) -> None: ...

class CheckpointWorkspace(_message.Message):
    __slots__ = ("kind", "tree", "head", "commit", "ref", "repository", "reason", "same_as")
    KIND_FIELD_NUMBER: _ClassVar[int]
    TREE_FIELD_NUMBER: _ClassVar[int]
    HEAD_FIELD_NUMBER: _ClassVar[int]
    COMMIT_FIELD_NUMBER: _ClassVar[int]
    REF_FIELD_NUMBER: _ClassVar[int]
    REPOSITORY_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    SAME_AS_FIELD_NUMBER: _ClassVar[int]
    kind: CheckpointWorkspaceKind
    tree: str
    head: str
    commit: str
    ref: str
    repository: str
    reason: str
    same_as: int
    def __init__(self, kind: _Optional[_Union[CheckpointWorkspaceKind, str]] = ..., tree: _Optional[str] = ..., head: _Optional[str] = ..., commit: _Optional[str] = ..., ref: _Optional[str] = ..., repository: _Optional[str] = ..., reason: _Optional[str] = ..., same_as: _Optional[int] = ...) -> None: ...

class Checkpoint(_message.Message):
    __slots__ = ("number", "kind", "sequence", "session_id", "tool_use_id", "tool_name", "turn", "before", "attempt", "time", "rewound", "workspace")
    NUMBER_FIELD_NUMBER: _ClassVar[int]
    KIND_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    BEFORE_FIELD_NUMBER: _ClassVar[int]
    ATTEMPT_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    REWOUND_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    number: int
    kind: CheckpointKind
    sequence: int
    session_id: str
    tool_use_id: str
    tool_name: str
    turn: int
    before: int
    attempt: int
    time: _timestamp_pb2.Timestamp
    rewound: bool
    workspace: CheckpointWorkspace
    def __init__(self, number: _Optional[int] = ..., kind: _Optional[_Union[CheckpointKind, str]] = ..., sequence: _Optional[int] = ..., session_id: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., turn: _Optional[int] = ..., before: _Optional[int] = ..., attempt: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., rewound: _Optional[bool] = ..., workspace: _Optional[_Union[CheckpointWorkspace, _Mapping]] = ...) -> None: ...

class ForkOrigin(_message.Message):
    __slots__ = ("job_id", "phase_id", "checkpoint", "tool_use_id", "turn", "changes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    CHANGES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    checkpoint: int
    tool_use_id: str
    turn: int
    changes: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., checkpoint: _Optional[int] = ..., tool_use_id: _Optional[str] = ..., turn: _Optional[int] = ..., changes: _Optional[_Iterable[str]] = ...) -> None: ...

class Grant(_message.Message):
    __slots__ = ("project_id", "roles")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    ROLES_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    roles: _containers.RepeatedScalarFieldContainer[str]
    def __init__(self, project_id: _Optional[str] = ..., roles: _Optional[_Iterable[str]] = ...) -> None: ...

class Principal(_message.Message):
    __slots__ = ("name", "source", "grants")
    NAME_FIELD_NUMBER: _ClassVar[int]
    SOURCE_FIELD_NUMBER: _ClassVar[int]
    GRANTS_FIELD_NUMBER: _ClassVar[int]
    name: str
    source: str
    grants: _containers.RepeatedCompositeFieldContainer[Grant]
    def __init__(self, name: _Optional[str] = ..., source: _Optional[str] = ..., grants: _Optional[_Iterable[_Union[Grant, _Mapping]]] = ...) -> None: ...

class AuditEntry(_message.Message):
    __slots__ = ("entry_id", "time", "principal", "principal_source", "action", "project_id", "job_id", "phase_id", "target", "detail", "peer", "outcome")
    ENTRY_ID_FIELD_NUMBER: _ClassVar[int]
    TIME_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_SOURCE_FIELD_NUMBER: _ClassVar[int]
    ACTION_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TARGET_FIELD_NUMBER: _ClassVar[int]
    DETAIL_FIELD_NUMBER: _ClassVar[int]
    PEER_FIELD_NUMBER: _ClassVar[int]
    OUTCOME_FIELD_NUMBER: _ClassVar[int]
    entry_id: int
    time: _timestamp_pb2.Timestamp
    principal: str
    principal_source: str
    action: str
    project_id: str
    job_id: str
    phase_id: str
    target: str
    detail: str
    peer: str
    outcome: str
    def __init__(self, entry_id: _Optional[int] = ..., time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., principal: _Optional[str] = ..., principal_source: _Optional[str] = ..., action: _Optional[str] = ..., project_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., target: _Optional[str] = ..., detail: _Optional[str] = ..., peer: _Optional[str] = ..., outcome: _Optional[str] = ...) -> None: ...

class ProjectQuota(_message.Message):
    __slots__ = ("project_id", "spend_usd_per_day", "spend_usd_per_month", "spent_today_usd", "spent_this_month_usd", "update_time", "updated_by")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SPEND_USD_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    SPEND_USD_PER_MONTH_FIELD_NUMBER: _ClassVar[int]
    SPENT_TODAY_USD_FIELD_NUMBER: _ClassVar[int]
    SPENT_THIS_MONTH_USD_FIELD_NUMBER: _ClassVar[int]
    UPDATE_TIME_FIELD_NUMBER: _ClassVar[int]
    UPDATED_BY_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    spend_usd_per_day: float
    spend_usd_per_month: float
    spent_today_usd: float
    spent_this_month_usd: float
    update_time: _timestamp_pb2.Timestamp
    updated_by: str
    def __init__(self, project_id: _Optional[str] = ..., spend_usd_per_day: _Optional[float] = ..., spend_usd_per_month: _Optional[float] = ..., spent_today_usd: _Optional[float] = ..., spent_this_month_usd: _Optional[float] = ..., update_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., updated_by: _Optional[str] = ...) -> None: ...
