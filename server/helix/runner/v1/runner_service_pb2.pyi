import datetime

from google.protobuf import duration_pb2 as _duration_pb2
from google.protobuf import timestamp_pb2 as _timestamp_pb2
from helix.runner.v1 import events_pb2 as _events_pb2
from helix.runner.v1 import resources_pb2 as _resources_pb2
from google.protobuf.internal import containers as _containers
from google.protobuf.internal import enum_type_wrapper as _enum_type_wrapper
from google.protobuf import descriptor as _descriptor
from google.protobuf import message as _message
from collections.abc import Iterable as _Iterable, Mapping as _Mapping
from typing import ClassVar as _ClassVar, Optional as _Optional, Union as _Union

DESCRIPTOR: _descriptor.FileDescriptor

class ErrorReason(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    ERROR_REASON_UNSPECIFIED: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_FIELD: _ClassVar[ErrorReason]
    ERROR_REASON_WORKING_DIR_OUTSIDE_ROOTS: _ClassVar[ErrorReason]
    ERROR_REASON_JOB_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_PHASE_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_PHASE_ALREADY_EXISTS: _ClassVar[ErrorReason]
    ERROR_REASON_ILLEGAL_TRANSITION: _ClassVar[ErrorReason]
    ERROR_REASON_PHASE_NOT_RUNNING: _ClassVar[ErrorReason]
    ERROR_REASON_CLAUDE_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_PREFLIGHT_FAILED: _ClassVar[ErrorReason]
    ERROR_REASON_ENV_NOT_ALLOWED: _ClassVar[ErrorReason]
    ERROR_REASON_DRAINING: _ClassVar[ErrorReason]
    ERROR_REASON_NOT_IMPLEMENTED: _ClassVar[ErrorReason]
    ERROR_REASON_CURSOR_OUT_OF_RANGE: _ClassVar[ErrorReason]
    ERROR_REASON_WATCHER_TOO_SLOW: _ClassVar[ErrorReason]
    ERROR_REASON_TOOL_CALL_NOT_HELD: _ClassVar[ErrorReason]
    ERROR_REASON_BREAKPOINT_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_UNAUTHENTICATED: _ClassVar[ErrorReason]
    ERROR_REASON_TOO_MANY_PHASES: _ClassVar[ErrorReason]
    ERROR_REASON_INVALID_PAGE_TOKEN: _ClassVar[ErrorReason]
    ERROR_REASON_INTERNAL: _ClassVar[ErrorReason]
    ERROR_REASON_QUEUE_FULL: _ClassVar[ErrorReason]
    ERROR_REASON_DIFF_NOT_AVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_TASK_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_WEBHOOK_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_WEBHOOK_DESTINATION_REFUSED: _ClassVar[ErrorReason]
    ERROR_REASON_WEBHOOK_FROM_CONFIG: _ClassVar[ErrorReason]
    ERROR_REASON_TOO_MANY_WEBHOOKS: _ClassVar[ErrorReason]
    ERROR_REASON_PHASE_MOVED: _ClassVar[ErrorReason]
    ERROR_REASON_CHECKPOINT_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_WORKSPACE_NOT_KEPT: _ClassVar[ErrorReason]
    ERROR_REASON_TRANSCRIPT_UNAVAILABLE: _ClassVar[ErrorReason]
    ERROR_REASON_OPTIONS_NOT_KEPT: _ClassVar[ErrorReason]
    ERROR_REASON_SECRET_NOT_FOUND: _ClassVar[ErrorReason]
    ERROR_REASON_SECRETS_LIMIT: _ClassVar[ErrorReason]
    ERROR_REASON_PERMISSION_DENIED: _ClassVar[ErrorReason]
    ERROR_REASON_QUOTA_EXCEEDED: _ClassVar[ErrorReason]
    ERROR_REASON_EGRESS_NOT_HELD: _ClassVar[ErrorReason]

class InjectMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    INJECT_MODE_UNSPECIFIED: _ClassVar[InjectMode]
    INJECT_MODE_QUEUE: _ClassVar[InjectMode]
    INJECT_MODE_INTERRUPT_AND_SEND: _ClassVar[InjectMode]

class PauseMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    PAUSE_MODE_UNSPECIFIED: _ClassVar[PauseMode]
    PAUSE_MODE_BEFORE_NEXT_TOOL: _ClassVar[PauseMode]
    PAUSE_MODE_HARD: _ClassVar[PauseMode]

class WorkspaceMode(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKSPACE_MODE_UNSPECIFIED: _ClassVar[WorkspaceMode]
    WORKSPACE_MODE_IN_PLACE: _ClassVar[WorkspaceMode]
    WORKSPACE_MODE_GIT_WORKTREE: _ClassVar[WorkspaceMode]

class WorktreeRetention(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    WORKTREE_RETENTION_UNSPECIFIED: _ClassVar[WorktreeRetention]
    WORKTREE_RETENTION_KEEP: _ClassVar[WorktreeRetention]
    WORKTREE_RETENTION_REMOVE: _ClassVar[WorktreeRetention]
    WORKTREE_RETENTION_REMOVE_ON_SUCCESS: _ClassVar[WorktreeRetention]

class EgressSecretPresentation(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EGRESS_SECRET_PRESENTATION_UNSPECIFIED: _ClassVar[EgressSecretPresentation]
    EGRESS_SECRET_PRESENTATION_HEADER: _ClassVar[EgressSecretPresentation]
    EGRESS_SECRET_PRESENTATION_BEARER: _ClassVar[EgressSecretPresentation]
    EGRESS_SECRET_PRESENTATION_BASIC: _ClassVar[EgressSecretPresentation]

class EgressHoldDecision(int, metaclass=_enum_type_wrapper.EnumTypeWrapper):
    __slots__ = ()
    EGRESS_HOLD_DECISION_UNSPECIFIED: _ClassVar[EgressHoldDecision]
    EGRESS_HOLD_DECISION_APPROVE_ONCE: _ClassVar[EgressHoldDecision]
    EGRESS_HOLD_DECISION_APPROVE_PHASE: _ClassVar[EgressHoldDecision]
    EGRESS_HOLD_DECISION_APPROVE_PROJECT: _ClassVar[EgressHoldDecision]
    EGRESS_HOLD_DECISION_DENY: _ClassVar[EgressHoldDecision]
ERROR_REASON_UNSPECIFIED: ErrorReason
ERROR_REASON_INVALID_FIELD: ErrorReason
ERROR_REASON_WORKING_DIR_OUTSIDE_ROOTS: ErrorReason
ERROR_REASON_JOB_NOT_FOUND: ErrorReason
ERROR_REASON_PHASE_NOT_FOUND: ErrorReason
ERROR_REASON_PHASE_ALREADY_EXISTS: ErrorReason
ERROR_REASON_ILLEGAL_TRANSITION: ErrorReason
ERROR_REASON_PHASE_NOT_RUNNING: ErrorReason
ERROR_REASON_CLAUDE_NOT_FOUND: ErrorReason
ERROR_REASON_PREFLIGHT_FAILED: ErrorReason
ERROR_REASON_ENV_NOT_ALLOWED: ErrorReason
ERROR_REASON_DRAINING: ErrorReason
ERROR_REASON_NOT_IMPLEMENTED: ErrorReason
ERROR_REASON_CURSOR_OUT_OF_RANGE: ErrorReason
ERROR_REASON_WATCHER_TOO_SLOW: ErrorReason
ERROR_REASON_TOOL_CALL_NOT_HELD: ErrorReason
ERROR_REASON_BREAKPOINT_NOT_FOUND: ErrorReason
ERROR_REASON_UNAUTHENTICATED: ErrorReason
ERROR_REASON_TOO_MANY_PHASES: ErrorReason
ERROR_REASON_INVALID_PAGE_TOKEN: ErrorReason
ERROR_REASON_INTERNAL: ErrorReason
ERROR_REASON_QUEUE_FULL: ErrorReason
ERROR_REASON_DIFF_NOT_AVAILABLE: ErrorReason
ERROR_REASON_TASK_NOT_FOUND: ErrorReason
ERROR_REASON_WEBHOOK_NOT_FOUND: ErrorReason
ERROR_REASON_WEBHOOK_DESTINATION_REFUSED: ErrorReason
ERROR_REASON_WEBHOOK_FROM_CONFIG: ErrorReason
ERROR_REASON_TOO_MANY_WEBHOOKS: ErrorReason
ERROR_REASON_PHASE_MOVED: ErrorReason
ERROR_REASON_CHECKPOINT_NOT_FOUND: ErrorReason
ERROR_REASON_WORKSPACE_NOT_KEPT: ErrorReason
ERROR_REASON_TRANSCRIPT_UNAVAILABLE: ErrorReason
ERROR_REASON_OPTIONS_NOT_KEPT: ErrorReason
ERROR_REASON_SECRET_NOT_FOUND: ErrorReason
ERROR_REASON_SECRETS_LIMIT: ErrorReason
ERROR_REASON_PERMISSION_DENIED: ErrorReason
ERROR_REASON_QUOTA_EXCEEDED: ErrorReason
ERROR_REASON_EGRESS_NOT_HELD: ErrorReason
INJECT_MODE_UNSPECIFIED: InjectMode
INJECT_MODE_QUEUE: InjectMode
INJECT_MODE_INTERRUPT_AND_SEND: InjectMode
PAUSE_MODE_UNSPECIFIED: PauseMode
PAUSE_MODE_BEFORE_NEXT_TOOL: PauseMode
PAUSE_MODE_HARD: PauseMode
WORKSPACE_MODE_UNSPECIFIED: WorkspaceMode
WORKSPACE_MODE_IN_PLACE: WorkspaceMode
WORKSPACE_MODE_GIT_WORKTREE: WorkspaceMode
WORKTREE_RETENTION_UNSPECIFIED: WorktreeRetention
WORKTREE_RETENTION_KEEP: WorktreeRetention
WORKTREE_RETENTION_REMOVE: WorktreeRetention
WORKTREE_RETENTION_REMOVE_ON_SUCCESS: WorktreeRetention
EGRESS_SECRET_PRESENTATION_UNSPECIFIED: EgressSecretPresentation
EGRESS_SECRET_PRESENTATION_HEADER: EgressSecretPresentation
EGRESS_SECRET_PRESENTATION_BEARER: EgressSecretPresentation
EGRESS_SECRET_PRESENTATION_BASIC: EgressSecretPresentation
EGRESS_HOLD_DECISION_UNSPECIFIED: EgressHoldDecision
EGRESS_HOLD_DECISION_APPROVE_ONCE: EgressHoldDecision
EGRESS_HOLD_DECISION_APPROVE_PHASE: EgressHoldDecision
EGRESS_HOLD_DECISION_APPROVE_PROJECT: EgressHoldDecision
EGRESS_HOLD_DECISION_DENY: EgressHoldDecision

class PhaseOptions(_message.Message):
    __slots__ = ("model", "allowed_tools", "disallowed_tools", "permission_mode", "max_turns", "max_budget_usd", "append_system_prompt", "resume_session_id", "timeout", "include_partial_messages", "on_disconnect", "breakpoints", "env", "include_raw_unknown", "idle_timeout", "fallback_model", "retry", "memory_limit_bytes", "cpu_limit_millicores", "workspace", "base_ref", "worktree_retention", "add_dirs", "system_prompt", "effort", "tools", "session_id", "fork_session", "include_hook_events", "no_session_persistence", "bare", "mcp_config", "strict_mcp_config", "agents", "settings", "setting_sources", "json_schema", "egress_allowlist", "allow_repository_config_writes", "pids_limit", "api_features", "workspace_max_bytes")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    MODEL_FIELD_NUMBER: _ClassVar[int]
    ALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    DISALLOWED_TOOLS_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    MAX_TURNS_FIELD_NUMBER: _ClassVar[int]
    MAX_BUDGET_USD_FIELD_NUMBER: _ClassVar[int]
    APPEND_SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    RESUME_SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_PARTIAL_MESSAGES_FIELD_NUMBER: _ClassVar[int]
    ON_DISCONNECT_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_RAW_UNKNOWN_FIELD_NUMBER: _ClassVar[int]
    IDLE_TIMEOUT_FIELD_NUMBER: _ClassVar[int]
    FALLBACK_MODEL_FIELD_NUMBER: _ClassVar[int]
    RETRY_FIELD_NUMBER: _ClassVar[int]
    MEMORY_LIMIT_BYTES_FIELD_NUMBER: _ClassVar[int]
    CPU_LIMIT_MILLICORES_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_FIELD_NUMBER: _ClassVar[int]
    BASE_REF_FIELD_NUMBER: _ClassVar[int]
    WORKTREE_RETENTION_FIELD_NUMBER: _ClassVar[int]
    ADD_DIRS_FIELD_NUMBER: _ClassVar[int]
    SYSTEM_PROMPT_FIELD_NUMBER: _ClassVar[int]
    EFFORT_FIELD_NUMBER: _ClassVar[int]
    TOOLS_FIELD_NUMBER: _ClassVar[int]
    SESSION_ID_FIELD_NUMBER: _ClassVar[int]
    FORK_SESSION_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_HOOK_EVENTS_FIELD_NUMBER: _ClassVar[int]
    NO_SESSION_PERSISTENCE_FIELD_NUMBER: _ClassVar[int]
    BARE_FIELD_NUMBER: _ClassVar[int]
    MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    STRICT_MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    AGENTS_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    SETTING_SOURCES_FIELD_NUMBER: _ClassVar[int]
    JSON_SCHEMA_FIELD_NUMBER: _ClassVar[int]
    EGRESS_ALLOWLIST_FIELD_NUMBER: _ClassVar[int]
    ALLOW_REPOSITORY_CONFIG_WRITES_FIELD_NUMBER: _ClassVar[int]
    PIDS_LIMIT_FIELD_NUMBER: _ClassVar[int]
    API_FEATURES_FIELD_NUMBER: _ClassVar[int]
    WORKSPACE_MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    model: str
    allowed_tools: _containers.RepeatedScalarFieldContainer[str]
    disallowed_tools: _containers.RepeatedScalarFieldContainer[str]
    permission_mode: _resources_pb2.PermissionMode
    max_turns: int
    max_budget_usd: float
    append_system_prompt: str
    resume_session_id: str
    timeout: _duration_pb2.Duration
    include_partial_messages: bool
    on_disconnect: _resources_pb2.OnDisconnect
    breakpoints: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Breakpoint]
    env: _containers.ScalarMap[str, str]
    include_raw_unknown: bool
    idle_timeout: _duration_pb2.Duration
    fallback_model: str
    retry: RetryPolicy
    memory_limit_bytes: int
    cpu_limit_millicores: int
    workspace: WorkspaceMode
    base_ref: str
    worktree_retention: WorktreeRetention
    add_dirs: _containers.RepeatedScalarFieldContainer[str]
    system_prompt: str
    effort: str
    tools: str
    session_id: str
    fork_session: bool
    include_hook_events: bool
    no_session_persistence: bool
    bare: bool
    mcp_config: str
    strict_mcp_config: bool
    agents: str
    settings: str
    setting_sources: str
    json_schema: str
    egress_allowlist: _containers.RepeatedScalarFieldContainer[str]
    allow_repository_config_writes: bool
    pids_limit: int
    api_features: _containers.RepeatedScalarFieldContainer[str]
    workspace_max_bytes: int
    def __init__(self, model: _Optional[str] = ..., allowed_tools: _Optional[_Iterable[str]] = ..., disallowed_tools: _Optional[_Iterable[str]] = ..., permission_mode: _Optional[_Union[_resources_pb2.PermissionMode, str]] = ..., max_turns: _Optional[int] = ..., max_budget_usd: _Optional[float] = ..., append_system_prompt: _Optional[str] = ..., resume_session_id: _Optional[str] = ..., timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., include_partial_messages: _Optional[bool] = ..., on_disconnect: _Optional[_Union[_resources_pb2.OnDisconnect, str]] = ..., breakpoints: _Optional[_Iterable[_Union[_resources_pb2.Breakpoint, _Mapping]]] = ..., env: _Optional[_Mapping[str, str]] = ..., include_raw_unknown: _Optional[bool] = ..., idle_timeout: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., fallback_model: _Optional[str] = ..., retry: _Optional[_Union[RetryPolicy, _Mapping]] = ..., memory_limit_bytes: _Optional[int] = ..., cpu_limit_millicores: _Optional[int] = ..., workspace: _Optional[_Union[WorkspaceMode, str]] = ..., base_ref: _Optional[str] = ..., worktree_retention: _Optional[_Union[WorktreeRetention, str]] = ..., add_dirs: _Optional[_Iterable[str]] = ..., system_prompt: _Optional[str] = ..., effort: _Optional[str] = ..., tools: _Optional[str] = ..., session_id: _Optional[str] = ..., fork_session: _Optional[bool] = ..., include_hook_events: _Optional[bool] = ..., no_session_persistence: _Optional[bool] = ..., bare: _Optional[bool] = ..., mcp_config: _Optional[str] = ..., strict_mcp_config: _Optional[bool] = ..., agents: _Optional[str] = ..., settings: _Optional[str] = ..., setting_sources: _Optional[str] = ..., json_schema: _Optional[str] = ..., egress_allowlist: _Optional[_Iterable[str]] = ..., allow_repository_config_writes: _Optional[bool] = ..., pids_limit: _Optional[int] = ..., api_features: _Optional[_Iterable[str]] = ..., workspace_max_bytes: _Optional[int] = ...) -> None: ...

class RetryPolicy(_message.Message):
    __slots__ = ("max_attempts", "initial_backoff", "backoff_multiplier", "max_backoff", "disable_jitter", "continuation_prompt")
    MAX_ATTEMPTS_FIELD_NUMBER: _ClassVar[int]
    INITIAL_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    BACKOFF_MULTIPLIER_FIELD_NUMBER: _ClassVar[int]
    MAX_BACKOFF_FIELD_NUMBER: _ClassVar[int]
    DISABLE_JITTER_FIELD_NUMBER: _ClassVar[int]
    CONTINUATION_PROMPT_FIELD_NUMBER: _ClassVar[int]
    max_attempts: int
    initial_backoff: _duration_pb2.Duration
    backoff_multiplier: float
    max_backoff: _duration_pb2.Duration
    disable_jitter: bool
    continuation_prompt: str
    def __init__(self, max_attempts: _Optional[int] = ..., initial_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., backoff_multiplier: _Optional[float] = ..., max_backoff: _Optional[_Union[datetime.timedelta, _duration_pb2.Duration, _Mapping]] = ..., disable_jitter: _Optional[bool] = ..., continuation_prompt: _Optional[str] = ...) -> None: ...

class RunPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "project_id", "prompt", "working_dir", "options")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    PROMPT_FIELD_NUMBER: _ClassVar[int]
    WORKING_DIR_FIELD_NUMBER: _ClassVar[int]
    OPTIONS_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    project_id: str
    prompt: str
    working_dir: str
    options: PhaseOptions
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., project_id: _Optional[str] = ..., prompt: _Optional[str] = ..., working_dir: _Optional[str] = ..., options: _Optional[_Union[PhaseOptions, _Mapping]] = ...) -> None: ...

class RunPhaseResponse(_message.Message):
    __slots__ = ("events", "result")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.StreamEvent]
    result: _resources_pb2.PhaseResult
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.StreamEvent, _Mapping]]] = ..., result: _Optional[_Union[_resources_pb2.PhaseResult, _Mapping]] = ...) -> None: ...

class WatchPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "after_sequence")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    AFTER_SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    after_sequence: int
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., after_sequence: _Optional[int] = ...) -> None: ...

class WatchPhaseResponse(_message.Message):
    __slots__ = ("events", "result")
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    RESULT_FIELD_NUMBER: _ClassVar[int]
    events: _containers.RepeatedCompositeFieldContainer[_events_pb2.StreamEvent]
    result: _resources_pb2.PhaseResult
    def __init__(self, events: _Optional[_Iterable[_Union[_events_pb2.StreamEvent, _Mapping]]] = ..., result: _Optional[_Union[_resources_pb2.PhaseResult, _Mapping]] = ...) -> None: ...

class GetJobRequest(_message.Message):
    __slots__ = ("job_id",)
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    def __init__(self, job_id: _Optional[str] = ...) -> None: ...

class GetJobResponse(_message.Message):
    __slots__ = ("job",)
    JOB_FIELD_NUMBER: _ClassVar[int]
    job: _resources_pb2.Job
    def __init__(self, job: _Optional[_Union[_resources_pb2.Job, _Mapping]] = ...) -> None: ...

class ListJobsRequest(_message.Message):
    __slots__ = ("project_id", "statuses", "page_size", "page_token", "full_prompts")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    FULL_PROMPTS_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    statuses: _containers.RepeatedScalarFieldContainer[_resources_pb2.PhaseStatus]
    page_size: int
    page_token: str
    full_prompts: bool
    def __init__(self, project_id: _Optional[str] = ..., statuses: _Optional[_Iterable[_Union[_resources_pb2.PhaseStatus, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ..., full_prompts: _Optional[bool] = ...) -> None: ...

class ListJobsResponse(_message.Message):
    __slots__ = ("jobs", "next_page_token")
    JOBS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    jobs: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Job]
    next_page_token: str
    def __init__(self, jobs: _Optional[_Iterable[_Union[_resources_pb2.Job, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ListToolCallsRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "tool_name", "only_failed", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_NAME_FIELD_NUMBER: _ClassVar[int]
    ONLY_FAILED_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    tool_name: str
    only_failed: bool
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., tool_name: _Optional[str] = ..., only_failed: _Optional[bool] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListToolCallsResponse(_message.Message):
    __slots__ = ("tool_calls", "next_page_token", "stats")
    TOOL_CALLS_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    STATS_FIELD_NUMBER: _ClassVar[int]
    tool_calls: _containers.RepeatedCompositeFieldContainer[_resources_pb2.ToolCall]
    next_page_token: str
    stats: _containers.RepeatedCompositeFieldContainer[_resources_pb2.ToolStats]
    def __init__(self, tool_calls: _Optional[_Iterable[_Union[_resources_pb2.ToolCall, _Mapping]]] = ..., next_page_token: _Optional[str] = ..., stats: _Optional[_Iterable[_Union[_resources_pb2.ToolStats, _Mapping]]] = ...) -> None: ...

class GetServerStatusRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class GetServerStatusResponse(_message.Message):
    __slots__ = ("status",)
    STATUS_FIELD_NUMBER: _ClassVar[int]
    status: _resources_pb2.ServerStatus
    def __init__(self, status: _Optional[_Union[_resources_pb2.ServerStatus, _Mapping]] = ...) -> None: ...

class GetCostTotalsRequest(_message.Message):
    __slots__ = ("project_id", "job_id", "phase_id")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    job_id: str
    phase_id: str
    def __init__(self, project_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase_id: _Optional[str] = ...) -> None: ...

class GetCostTotalsResponse(_message.Message):
    __slots__ = ("totals",)
    TOTALS_FIELD_NUMBER: _ClassVar[int]
    totals: _resources_pb2.CostTotals
    def __init__(self, totals: _Optional[_Union[_resources_pb2.CostTotals, _Mapping]] = ...) -> None: ...

class PausePhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "mode")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    mode: PauseMode
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., mode: _Optional[_Union[PauseMode, str]] = ...) -> None: ...

class PausePhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class ResumePhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ...) -> None: ...

class ResumePhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class StepPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ...) -> None: ...

class StepPhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class InterruptPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ...) -> None: ...

class InterruptPhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class CancelPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., reason: _Optional[str] = ...) -> None: ...

class CancelPhaseResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class InjectMessageRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "text", "mode")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TEXT_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    text: str
    mode: InjectMode
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., text: _Optional[str] = ..., mode: _Optional[_Union[InjectMode, str]] = ...) -> None: ...

class InjectMessageResponse(_message.Message):
    __slots__ = ("message_uuid", "sequence")
    MESSAGE_UUID_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    message_uuid: str
    sequence: int
    def __init__(self, message_uuid: _Optional[str] = ..., sequence: _Optional[int] = ...) -> None: ...

class InspectPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "include_context_usage")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    INCLUDE_CONTEXT_USAGE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    include_context_usage: bool
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., include_context_usage: _Optional[bool] = ...) -> None: ...

class InspectPhaseResponse(_message.Message):
    __slots__ = ("inspection",)
    INSPECTION_FIELD_NUMBER: _ClassVar[int]
    inspection: _resources_pb2.PhaseInspection
    def __init__(self, inspection: _Optional[_Union[_resources_pb2.PhaseInspection, _Mapping]] = ...) -> None: ...

class AddBreakpointRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "breakpoint")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    breakpoint: _resources_pb2.Breakpoint
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., breakpoint: _Optional[_Union[_resources_pb2.Breakpoint, _Mapping]] = ...) -> None: ...

class AddBreakpointResponse(_message.Message):
    __slots__ = ("breakpoint",)
    BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    breakpoint: _resources_pb2.Breakpoint
    def __init__(self, breakpoint: _Optional[_Union[_resources_pb2.Breakpoint, _Mapping]] = ...) -> None: ...

class ListBreakpointsRequest(_message.Message):
    __slots__ = ("job_id", "phase_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ...) -> None: ...

class ListBreakpointsResponse(_message.Message):
    __slots__ = ("breakpoints",)
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    breakpoints: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Breakpoint]
    def __init__(self, breakpoints: _Optional[_Iterable[_Union[_resources_pb2.Breakpoint, _Mapping]]] = ...) -> None: ...

class RemoveBreakpointRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "breakpoint_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINT_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    breakpoint_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., breakpoint_id: _Optional[str] = ...) -> None: ...

class RemoveBreakpointResponse(_message.Message):
    __slots__ = ("breakpoint",)
    BREAKPOINT_FIELD_NUMBER: _ClassVar[int]
    breakpoint: _resources_pb2.Breakpoint
    def __init__(self, breakpoint: _Optional[_Union[_resources_pb2.Breakpoint, _Mapping]] = ...) -> None: ...

class ResolveToolCallRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "tool_use_id", "approve", "deny", "edit")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    APPROVE_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    EDIT_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    tool_use_id: str
    approve: ApproveDecision
    deny: DenyDecision
    edit: EditDecision
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., tool_use_id: _Optional[str] = ..., approve: _Optional[_Union[ApproveDecision, _Mapping]] = ..., deny: _Optional[_Union[DenyDecision, _Mapping]] = ..., edit: _Optional[_Union[EditDecision, _Mapping]] = ...) -> None: ...

class ApproveDecision(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class DenyDecision(_message.Message):
    __slots__ = ("message",)
    MESSAGE_FIELD_NUMBER: _ClassVar[int]
    message: str
    def __init__(self, message: _Optional[str] = ...) -> None: ...

class EditDecision(_message.Message):
    __slots__ = ("input_json",)
    INPUT_JSON_FIELD_NUMBER: _ClassVar[int]
    input_json: str
    def __init__(self, input_json: _Optional[str] = ...) -> None: ...

class ResolveToolCallResponse(_message.Message):
    __slots__ = ("tool_call",)
    TOOL_CALL_FIELD_NUMBER: _ClassVar[int]
    tool_call: _resources_pb2.ToolCall
    def __init__(self, tool_call: _Optional[_Union[_resources_pb2.ToolCall, _Mapping]] = ...) -> None: ...

class GetPhaseDiffRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "page_size", "page_token")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    page_size: int
    page_token: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class GetPhaseDiffResponse(_message.Message):
    __slots__ = ("chunk", "next_page_token", "total_bytes")
    CHUNK_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    chunk: bytes
    next_page_token: str
    total_bytes: int
    def __init__(self, chunk: _Optional[bytes] = ..., next_page_token: _Optional[str] = ..., total_bytes: _Optional[int] = ...) -> None: ...

class SetPhaseModelRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "model")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    model: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., model: _Optional[str] = ...) -> None: ...

class SetPhaseModelResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class SetPhasePermissionModeRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "mode")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODE_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    mode: _resources_pb2.PermissionMode
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., mode: _Optional[_Union[_resources_pb2.PermissionMode, str]] = ...) -> None: ...

class SetPhasePermissionModeResponse(_message.Message):
    __slots__ = ("mode", "phase")
    MODE_FIELD_NUMBER: _ClassVar[int]
    PHASE_FIELD_NUMBER: _ClassVar[int]
    mode: str
    phase: _resources_pb2.Phase
    def __init__(self, mode: _Optional[str] = ..., phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class StopTaskRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "task_id")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    task_id: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., task_id: _Optional[str] = ...) -> None: ...

class StopTaskResponse(_message.Message):
    __slots__ = ("phase",)
    PHASE_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ...) -> None: ...

class GetTaskOutputRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "task_id", "max_bytes")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    TASK_ID_FIELD_NUMBER: _ClassVar[int]
    MAX_BYTES_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    task_id: str
    max_bytes: int
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., task_id: _Optional[str] = ..., max_bytes: _Optional[int] = ...) -> None: ...

class GetTaskOutputResponse(_message.Message):
    __slots__ = ("output", "total_bytes", "truncated")
    OUTPUT_FIELD_NUMBER: _ClassVar[int]
    TOTAL_BYTES_FIELD_NUMBER: _ClassVar[int]
    TRUNCATED_FIELD_NUMBER: _ClassVar[int]
    output: str
    total_bytes: int
    truncated: bool
    def __init__(self, output: _Optional[str] = ..., total_bytes: _Optional[int] = ..., truncated: _Optional[bool] = ...) -> None: ...

class CreateWebhookRequest(_message.Message):
    __slots__ = ("project_id", "url", "events", "statuses", "cost_threshold_usd", "format", "description", "secret")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    URL_FIELD_NUMBER: _ClassVar[int]
    EVENTS_FIELD_NUMBER: _ClassVar[int]
    STATUSES_FIELD_NUMBER: _ClassVar[int]
    COST_THRESHOLD_USD_FIELD_NUMBER: _ClassVar[int]
    FORMAT_FIELD_NUMBER: _ClassVar[int]
    DESCRIPTION_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    url: str
    events: _containers.RepeatedScalarFieldContainer[_resources_pb2.WebhookEventType]
    statuses: _containers.RepeatedScalarFieldContainer[_resources_pb2.PhaseStatus]
    cost_threshold_usd: float
    format: _resources_pb2.WebhookFormat
    description: str
    secret: str
    def __init__(self, project_id: _Optional[str] = ..., url: _Optional[str] = ..., events: _Optional[_Iterable[_Union[_resources_pb2.WebhookEventType, str]]] = ..., statuses: _Optional[_Iterable[_Union[_resources_pb2.PhaseStatus, str]]] = ..., cost_threshold_usd: _Optional[float] = ..., format: _Optional[_Union[_resources_pb2.WebhookFormat, str]] = ..., description: _Optional[str] = ..., secret: _Optional[str] = ...) -> None: ...

class CreateWebhookResponse(_message.Message):
    __slots__ = ("webhook", "secret")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    SECRET_FIELD_NUMBER: _ClassVar[int]
    webhook: _resources_pb2.Webhook
    secret: str
    def __init__(self, webhook: _Optional[_Union[_resources_pb2.Webhook, _Mapping]] = ..., secret: _Optional[str] = ...) -> None: ...

class ListWebhooksRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ListWebhooksResponse(_message.Message):
    __slots__ = ("webhooks",)
    WEBHOOKS_FIELD_NUMBER: _ClassVar[int]
    webhooks: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Webhook]
    def __init__(self, webhooks: _Optional[_Iterable[_Union[_resources_pb2.Webhook, _Mapping]]] = ...) -> None: ...

class DeleteWebhookRequest(_message.Message):
    __slots__ = ("webhook_id",)
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    def __init__(self, webhook_id: _Optional[str] = ...) -> None: ...

class DeleteWebhookResponse(_message.Message):
    __slots__ = ("webhook", "cancelled_deliveries")
    WEBHOOK_FIELD_NUMBER: _ClassVar[int]
    CANCELLED_DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    webhook: _resources_pb2.Webhook
    cancelled_deliveries: int
    def __init__(self, webhook: _Optional[_Union[_resources_pb2.Webhook, _Mapping]] = ..., cancelled_deliveries: _Optional[int] = ...) -> None: ...

class ListWebhookDeliveriesRequest(_message.Message):
    __slots__ = ("webhook_id", "job_id", "phase_id", "states", "page_size", "page_token")
    WEBHOOK_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    STATES_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    webhook_id: str
    job_id: str
    phase_id: str
    states: _containers.RepeatedScalarFieldContainer[_resources_pb2.WebhookDeliveryState]
    page_size: int
    page_token: str
    def __init__(self, webhook_id: _Optional[str] = ..., job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., states: _Optional[_Iterable[_Union[_resources_pb2.WebhookDeliveryState, str]]] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListWebhookDeliveriesResponse(_message.Message):
    __slots__ = ("deliveries", "next_page_token")
    DELIVERIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    deliveries: _containers.RepeatedCompositeFieldContainer[_resources_pb2.WebhookDelivery]
    next_page_token: str
    def __init__(self, deliveries: _Optional[_Iterable[_Union[_resources_pb2.WebhookDelivery, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class ForkPoint(_message.Message):
    __slots__ = ("tool_use_id", "turn", "checkpoint", "deny", "edit", "inject")
    TOOL_USE_ID_FIELD_NUMBER: _ClassVar[int]
    TURN_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    DENY_FIELD_NUMBER: _ClassVar[int]
    EDIT_FIELD_NUMBER: _ClassVar[int]
    INJECT_FIELD_NUMBER: _ClassVar[int]
    tool_use_id: str
    turn: int
    checkpoint: int
    deny: DenyDecision
    edit: EditDecision
    inject: str
    def __init__(self, tool_use_id: _Optional[str] = ..., turn: _Optional[int] = ..., checkpoint: _Optional[int] = ..., deny: _Optional[_Union[DenyDecision, _Mapping]] = ..., edit: _Optional[_Union[EditDecision, _Mapping]] = ..., inject: _Optional[str] = ...) -> None: ...

class ForkPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "point", "new_phase_id", "model", "permission_mode", "breakpoints", "clear_breakpoints", "conversation_only", "mcp_config", "settings", "env")
    class EnvEntry(_message.Message):
        __slots__ = ("key", "value")
        KEY_FIELD_NUMBER: _ClassVar[int]
        VALUE_FIELD_NUMBER: _ClassVar[int]
        key: str
        value: str
        def __init__(self, key: _Optional[str] = ..., value: _Optional[str] = ...) -> None: ...
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    NEW_PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    MODEL_FIELD_NUMBER: _ClassVar[int]
    PERMISSION_MODE_FIELD_NUMBER: _ClassVar[int]
    BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CLEAR_BREAKPOINTS_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ONLY_FIELD_NUMBER: _ClassVar[int]
    MCP_CONFIG_FIELD_NUMBER: _ClassVar[int]
    SETTINGS_FIELD_NUMBER: _ClassVar[int]
    ENV_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    point: ForkPoint
    new_phase_id: str
    model: str
    permission_mode: _resources_pb2.PermissionMode
    breakpoints: _containers.RepeatedCompositeFieldContainer[_resources_pb2.Breakpoint]
    clear_breakpoints: bool
    conversation_only: bool
    mcp_config: str
    settings: str
    env: _containers.ScalarMap[str, str]
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., point: _Optional[_Union[ForkPoint, _Mapping]] = ..., new_phase_id: _Optional[str] = ..., model: _Optional[str] = ..., permission_mode: _Optional[_Union[_resources_pb2.PermissionMode, str]] = ..., breakpoints: _Optional[_Iterable[_Union[_resources_pb2.Breakpoint, _Mapping]]] = ..., clear_breakpoints: _Optional[bool] = ..., conversation_only: _Optional[bool] = ..., mcp_config: _Optional[str] = ..., settings: _Optional[str] = ..., env: _Optional[_Mapping[str, str]] = ...) -> None: ...

class ForkPhaseResponse(_message.Message):
    __slots__ = ("phase", "checkpoint")
    PHASE_FIELD_NUMBER: _ClassVar[int]
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    phase: _resources_pb2.Phase
    checkpoint: _resources_pb2.Checkpoint
    def __init__(self, phase: _Optional[_Union[_resources_pb2.Phase, _Mapping]] = ..., checkpoint: _Optional[_Union[_resources_pb2.Checkpoint, _Mapping]] = ...) -> None: ...

class RewindPhaseRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "point", "conversation_only")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    POINT_FIELD_NUMBER: _ClassVar[int]
    CONVERSATION_ONLY_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    point: ForkPoint
    conversation_only: bool
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., point: _Optional[_Union[ForkPoint, _Mapping]] = ..., conversation_only: _Optional[bool] = ...) -> None: ...

class RewindPhaseResponse(_message.Message):
    __slots__ = ("checkpoint", "sequence")
    CHECKPOINT_FIELD_NUMBER: _ClassVar[int]
    SEQUENCE_FIELD_NUMBER: _ClassVar[int]
    checkpoint: _resources_pb2.Checkpoint
    sequence: int
    def __init__(self, checkpoint: _Optional[_Union[_resources_pb2.Checkpoint, _Mapping]] = ..., sequence: _Optional[int] = ...) -> None: ...

class PutEgressSecretRequest(_message.Message):
    __slots__ = ("project_id", "name", "value", "hosts", "presentation", "header", "username")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    VALUE_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    PRESENTATION_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    value: bytes
    hosts: _containers.RepeatedScalarFieldContainer[str]
    presentation: EgressSecretPresentation
    header: str
    username: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., value: _Optional[bytes] = ..., hosts: _Optional[_Iterable[str]] = ..., presentation: _Optional[_Union[EgressSecretPresentation, str]] = ..., header: _Optional[str] = ..., username: _Optional[str] = ...) -> None: ...

class PutEgressSecretResponse(_message.Message):
    __slots__ = ("secret",)
    SECRET_FIELD_NUMBER: _ClassVar[int]
    secret: EgressSecret
    def __init__(self, secret: _Optional[_Union[EgressSecret, _Mapping]] = ...) -> None: ...

class ListEgressSecretsRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ListEgressSecretsResponse(_message.Message):
    __slots__ = ("secrets",)
    SECRETS_FIELD_NUMBER: _ClassVar[int]
    secrets: _containers.RepeatedCompositeFieldContainer[EgressSecret]
    def __init__(self, secrets: _Optional[_Iterable[_Union[EgressSecret, _Mapping]]] = ...) -> None: ...

class DeleteEgressSecretRequest(_message.Message):
    __slots__ = ("project_id", "name")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ...) -> None: ...

class DeleteEgressSecretResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class EgressSecret(_message.Message):
    __slots__ = ("project_id", "name", "hosts", "presentation", "header", "username", "create_time", "env_name", "openable")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    NAME_FIELD_NUMBER: _ClassVar[int]
    HOSTS_FIELD_NUMBER: _ClassVar[int]
    PRESENTATION_FIELD_NUMBER: _ClassVar[int]
    HEADER_FIELD_NUMBER: _ClassVar[int]
    USERNAME_FIELD_NUMBER: _ClassVar[int]
    CREATE_TIME_FIELD_NUMBER: _ClassVar[int]
    ENV_NAME_FIELD_NUMBER: _ClassVar[int]
    OPENABLE_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    name: str
    hosts: _containers.RepeatedScalarFieldContainer[str]
    presentation: EgressSecretPresentation
    header: str
    username: str
    create_time: _timestamp_pb2.Timestamp
    env_name: str
    openable: bool
    def __init__(self, project_id: _Optional[str] = ..., name: _Optional[str] = ..., hosts: _Optional[_Iterable[str]] = ..., presentation: _Optional[_Union[EgressSecretPresentation, str]] = ..., header: _Optional[str] = ..., username: _Optional[str] = ..., create_time: _Optional[_Union[datetime.datetime, _timestamp_pb2.Timestamp, _Mapping]] = ..., env_name: _Optional[str] = ..., openable: _Optional[bool] = ...) -> None: ...

class ListAuditEntriesRequest(_message.Message):
    __slots__ = ("project_id", "job_id", "principal", "page_size", "page_token")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    PAGE_SIZE_FIELD_NUMBER: _ClassVar[int]
    PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    job_id: str
    principal: str
    page_size: int
    page_token: str
    def __init__(self, project_id: _Optional[str] = ..., job_id: _Optional[str] = ..., principal: _Optional[str] = ..., page_size: _Optional[int] = ..., page_token: _Optional[str] = ...) -> None: ...

class ListAuditEntriesResponse(_message.Message):
    __slots__ = ("entries", "next_page_token")
    ENTRIES_FIELD_NUMBER: _ClassVar[int]
    NEXT_PAGE_TOKEN_FIELD_NUMBER: _ClassVar[int]
    entries: _containers.RepeatedCompositeFieldContainer[_resources_pb2.AuditEntry]
    next_page_token: str
    def __init__(self, entries: _Optional[_Iterable[_Union[_resources_pb2.AuditEntry, _Mapping]]] = ..., next_page_token: _Optional[str] = ...) -> None: ...

class WhoAmIRequest(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...

class WhoAmIResponse(_message.Message):
    __slots__ = ("principal",)
    PRINCIPAL_FIELD_NUMBER: _ClassVar[int]
    principal: _resources_pb2.Principal
    def __init__(self, principal: _Optional[_Union[_resources_pb2.Principal, _Mapping]] = ...) -> None: ...

class SetProjectQuotaRequest(_message.Message):
    __slots__ = ("project_id", "spend_usd_per_day", "spend_usd_per_month")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    SPEND_USD_PER_DAY_FIELD_NUMBER: _ClassVar[int]
    SPEND_USD_PER_MONTH_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    spend_usd_per_day: float
    spend_usd_per_month: float
    def __init__(self, project_id: _Optional[str] = ..., spend_usd_per_day: _Optional[float] = ..., spend_usd_per_month: _Optional[float] = ...) -> None: ...

class SetProjectQuotaResponse(_message.Message):
    __slots__ = ("quota",)
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    quota: _resources_pb2.ProjectQuota
    def __init__(self, quota: _Optional[_Union[_resources_pb2.ProjectQuota, _Mapping]] = ...) -> None: ...

class GetProjectQuotaRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class GetProjectQuotaResponse(_message.Message):
    __slots__ = ("quota",)
    QUOTA_FIELD_NUMBER: _ClassVar[int]
    quota: _resources_pb2.ProjectQuota
    def __init__(self, quota: _Optional[_Union[_resources_pb2.ProjectQuota, _Mapping]] = ...) -> None: ...

class ResolveEgressHoldRequest(_message.Message):
    __slots__ = ("job_id", "phase_id", "hold_id", "decision", "reason")
    JOB_ID_FIELD_NUMBER: _ClassVar[int]
    PHASE_ID_FIELD_NUMBER: _ClassVar[int]
    HOLD_ID_FIELD_NUMBER: _ClassVar[int]
    DECISION_FIELD_NUMBER: _ClassVar[int]
    REASON_FIELD_NUMBER: _ClassVar[int]
    job_id: str
    phase_id: str
    hold_id: str
    decision: EgressHoldDecision
    reason: str
    def __init__(self, job_id: _Optional[str] = ..., phase_id: _Optional[str] = ..., hold_id: _Optional[str] = ..., decision: _Optional[_Union[EgressHoldDecision, str]] = ..., reason: _Optional[str] = ...) -> None: ...

class ResolveEgressHoldResponse(_message.Message):
    __slots__ = ("destination",)
    DESTINATION_FIELD_NUMBER: _ClassVar[int]
    destination: str
    def __init__(self, destination: _Optional[str] = ...) -> None: ...

class ListEgressAllowancesRequest(_message.Message):
    __slots__ = ("project_id",)
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    def __init__(self, project_id: _Optional[str] = ...) -> None: ...

class ListEgressAllowancesResponse(_message.Message):
    __slots__ = ("allowances",)
    ALLOWANCES_FIELD_NUMBER: _ClassVar[int]
    allowances: _containers.RepeatedCompositeFieldContainer[_resources_pb2.EgressAllowance]
    def __init__(self, allowances: _Optional[_Iterable[_Union[_resources_pb2.EgressAllowance, _Mapping]]] = ...) -> None: ...

class DeleteEgressAllowanceRequest(_message.Message):
    __slots__ = ("project_id", "host")
    PROJECT_ID_FIELD_NUMBER: _ClassVar[int]
    HOST_FIELD_NUMBER: _ClassVar[int]
    project_id: str
    host: str
    def __init__(self, project_id: _Optional[str] = ..., host: _Optional[str] = ...) -> None: ...

class DeleteEgressAllowanceResponse(_message.Message):
    __slots__ = ()
    def __init__(self) -> None: ...
