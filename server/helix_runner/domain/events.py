"""Typed domain events of a phase: one immutable struct per ``StreamEvent`` payload, plus the envelope.

The classes mirror ``proto/helix/runner/v1/events.proto`` field by field (``tests/domain/
test_proto_mirror.py`` checks it; size bounds in ``bounds``) so that the mapping to protobuf in
``helix_runner.api.event_mapping`` is a plain copy. Domain code never imports generated code; enums
carry the proto's numeric values.

Units are in the field names: ``*_ms`` are the CLI's millisecond figures, ``*_ns`` come from our own
clock. Absent optional numbers are ``None``; absent strings are ``""`` (as in proto3).

Payloads are ``msgspec.Struct``s: frozen, built by msgspec's C constructor (the parser makes one or
two per stdout line, and a struct is about 4x cheaper to build than a frozen dataclass), and not
tracked by the garbage collector (they hold no cycles), so a long stream adds no GC work.
"""

from __future__ import annotations

import enum
from typing import Any

import msgspec

from helix_runner.domain.bounds import (  # noqa: F401  (re-exported: callers import them from here)
    ASSISTANT_TEXT_MAX_BYTES,
    PARTIAL_TEXT_MAX_BYTES,
    RAW_UNKNOWN_MAX_BYTES,
    RESULT_TEXT_MAX_BYTES,
    SHORT_TEXT_MAX_BYTES,
    STDERR_LINE_MAX_BYTES,
    STRUCTURED_RESULT_MAX_BYTES,
    TOOL_INPUT_MAX_BYTES,
    TOOL_RESULT_PREVIEW_MAX_BYTES,
    USER_TEXT_MAX_BYTES,
    bound_bytes,
    bound_text,
    utf8_len,
)
from helix_runner.domain.cost import PhaseCostSnapshot
from helix_runner.domain.phase_status import PhaseStatus  # PhaseStatusChanged uses the shared enum
from helix_runner.domain.usage import ModelUsage, TokenUsage


class _Payload(msgspec.Struct, frozen=True, gc=False):
    """Base of the payloads: immutable, C-built, untracked by the GC (options inherited)."""


class _CarriesCliObject(msgspec.Struct, frozen=True):
    """Base of the control payloads whose last field is the CLI's raw object (a dict, so GC-tracked).

    That object is for the control layer, not the wire: it is left out of ``==``, ``hash`` and
    ``repr`` (it may be large, and may hold tool input).
    """

    def _shown(self) -> tuple[Any, ...]:
        return tuple(getattr(self, name) for name in self.__struct_fields__[:-1])

    def __eq__(self, other: object) -> bool:
        return other.__class__ is self.__class__ and self._shown() == other._shown()  # type: ignore[attr-defined]

    def __hash__(self) -> int:
        return hash(self._shown())

    def __repr__(self) -> str:
        fields = zip(self.__struct_fields__, self._shown(), strict=False)
        return f"{type(self).__name__}({', '.join(f'{name}={value!r}' for name, value in fields)})"


# --------------------------------------------------------------------------------------------------
# Enums (values are the proto enum numbers).


class TaskEventKind(enum.IntEnum):
    """Which ``system/task_*`` line a TaskEvent comes from."""

    UNSPECIFIED = 0
    STARTED = 1
    PROGRESS = 2
    UPDATED = 3
    NOTIFICATION = 4


class HookEventKind(enum.IntEnum):
    """Which ``system/hook_*`` line a HookEvent comes from."""

    UNSPECIFIED = 0
    STARTED = 1
    PROGRESS = 2
    RESPONSE = 3


class PartialDeltaKind(enum.IntEnum):
    """The Messages API streaming event inside a ``stream_event`` line."""

    UNSPECIFIED = 0
    MESSAGE_START = 1
    CONTENT_BLOCK_START = 2
    TEXT_DELTA = 3
    THINKING_DELTA = 4
    INPUT_JSON_DELTA = 5
    SIGNATURE_DELTA = 6
    CONTENT_BLOCK_STOP = 7
    MESSAGE_DELTA = 8
    MESSAGE_STOP = 9
    OTHER = 10


class ControlEventKind(enum.IntEnum):
    """A control action that took effect (emitted by the supervisor)."""

    UNSPECIFIED = 0
    PAUSE_REQUESTED = 1
    PAUSED = 2
    RESUMED = 3
    STEP_COMPLETE = 4
    BREAKPOINT_HIT = 5
    TOOL_APPROVED = 6
    TOOL_DENIED = 7
    TOOL_EDITED = 8
    MESSAGE_INJECTED = 9
    INTERRUPTED = 10
    CANCEL_REQUESTED = 11
    BREAKPOINT_ADDED = 12
    BREAKPOINT_REMOVED = 13
    DETACHED = 14
    RETRY_SCHEDULED = 15  # an attempt ended transiently; the next one waits out a backoff
    ATTEMPT_STARTED = 16  # the first event of every attempt
    QUEUED = 17  # the phase waits for admission, or what it waits for changed
    REWOUND = 18  # RewindPhase took the phase back to a checkpoint in place


class GatewayEventKind(enum.IntEnum):
    """What the model-API gateway or the egress proxy saw (``events.proto`` GatewayEventKind)."""

    UNSPECIFIED = 0
    RATE_LIMITED = 1  # the API answered 429
    OVERLOADED = 2  # the API answered 529, or sent an overloaded_error event mid-stream
    MODEL_REFUSED = 3  # the project's model allowlist refused the request's model
    EGRESS_REFUSED = 4  # the egress proxy refused a destination
    UPSTREAM_FAILED = 5  # the gateway could not reach the API (connection, TLS, timeout)
    FEATURE_REFUSED = 6  # a request used an API feature that reaches out (domain/api_features.py), not allowed
    EGRESS_CONNECTION = 7  # a connection the egress proxy let through ended (bytes each way, duration)
    EGRESS_HELD = 8  # a network breakpoint holds a request (phases/egress_holds.py)
    EGRESS_APPROVED = 9  # a held request was let through (once, for the phase, for the project)
    EGRESS_DENIED = 10  # a held request was refused (the reason is the proxy's 403 body)


class AttemptEndKind(enum.IntEnum):
    """How an attempt ended, which decides whether another attempt may help (``resources.proto``)."""

    UNSPECIFIED = 0
    COMPLETED = 1
    API_OVERLOADED = 2
    API_RATE_LIMITED = 3
    API_SERVER_ERROR = 4
    CONNECTION_FAILED = 5
    CRASHED = 6
    HUNG = 7
    STARTUP_TRANSIENT = 8
    API_INVALID_REQUEST = 9
    API_AUTHENTICATION = 10
    API_PERMISSION = 11
    API_REQUEST_TOO_LARGE = 12
    MAX_TURNS = 13
    MAX_BUDGET = 14
    STRUCTURED_OUTPUT = 15
    STARTUP_REFUSED = 16
    EXECUTION_ERROR = 17
    TIMED_OUT = 18
    CANCELLED = 19
    INTERRUPTED_BY_CLIENT = 20
    SERVER_SHUTDOWN = 21
    SPAWN_FAILED = 22
    MOVED = 23
    RESOURCE_LIMIT = 24
    REWOUND = 25  # RewindPhase stopped the attempt to go back to a checkpoint in place


class QueueReason(enum.IntEnum):
    """What a QUEUED phase waits for (``resources.proto`` QueueReason)."""

    UNSPECIFIED = 0
    SERVER_LIMIT = 1
    PROJECT_LIMIT = 2
    START_LIMIT = 3
    RATE_LIMITED = 4
    RETRY_BACKOFF = 5


class ParseErrorReason(enum.IntEnum):
    """Why a stdout line was not turned into an event."""

    UNSPECIFIED = 0
    NOT_JSON = 1
    INVALID_JSON = 2
    NOT_A_MESSAGE = 3
    INVALID_UTF8 = 4
    LINE_TOO_LONG = 5
    TRUNCATED_AT_EOF = 6
    BAD_SHAPE = 7
    UNPAIRED_SURROGATE = 8


# --------------------------------------------------------------------------------------------------
# Values carried by payloads (TokenUsage and ModelUsage live in ``usage``).


class PermissionDenial(_Payload):
    """One entry of ``result.permission_denials``."""

    tool_name: str
    tool_use_id: str
    tool_input_json: str


# --------------------------------------------------------------------------------------------------
# Payloads written by the CLI.


class SessionInit(_Payload):
    """``system/init``: the CLI started a turn (written again at the start of every turn)."""

    model: str
    tools: tuple[str, ...]
    cwd: str
    cli_version: str
    permission_mode: str
    mcp_servers: tuple[str, ...]
    capabilities: tuple[str, ...]
    api_key_source: str
    turn_index: int


class AssistantText(_Payload):
    """One text block of an assistant message (at most 256 KiB)."""

    text: str
    text_bytes: int
    text_truncated: bool
    message_id: str
    model: str


class Thinking(_Payload):
    """One thinking block (at most 256 KiB); ``redacted`` for redacted or signature-only blocks."""

    text: str
    text_bytes: int
    text_truncated: bool
    redacted: bool
    message_id: str


class ToolCallStarted(_Payload):
    """A ``tool_use`` (or ``server_tool_use``) block; input as compact JSON, at most 64 KiB."""

    tool_use_id: str
    name: str
    input_json: str
    input_bytes: int
    input_truncated: bool
    message_id: str
    server_tool: bool = False


class ToolCallFinished(_Payload):
    """A ``tool_result`` for an earlier call; name and durations come from the tool tracker."""

    tool_use_id: str
    name: str
    is_error: bool
    content_preview: str
    content_bytes: int
    content_truncated: bool
    structured_result_json: str = ""
    structured_result_truncated: bool = False
    duration_ns: int | None = None
    hook_duration_ms: int | None = None


class ApiRetry(_Payload):
    """``system/api_retry``: the CLI retries an API request."""

    attempt: int
    max_retries: int
    retry_delay_ms: int
    error_status: int | None
    error: str


class ApiError(_Payload):
    """A synthetic assistant message (model ``<synthetic>``) reporting an API failure.

    See docs/claude-cli-protocol.md §2.3.
    """

    error: str
    api_error_status: int | None
    message: str


class RateLimit(_Payload):
    """``rate_limit_event`` (subscription auth only)."""

    status: str
    resets_at_s: int | None
    rate_limit_type: str
    utilization: float | None


class TaskEvent(_Payload):
    """``system/task_started|progress|updated|notification``: a subagent or background task changed."""

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
    duration_ms: int | None


class Compaction(_Payload):
    """Compaction start (``system/status`` compacting) or end (``system/compact_boundary``)."""

    completed: bool
    trigger: str = ""
    pre_tokens: int = 0
    post_tokens: int = 0
    duration_ms: int | None = None


class CliStatus(_Payload):
    """``system/status`` other than compacting (e.g. ``requesting`` before each API call)."""

    status: str
    permission_mode: str = ""


class HookEvent(_Payload):
    """``system/hook_started|progress|response`` (with ``--include-hook-events``), or a call of one
    of the server's own hooks no tool call stands behind (``PreSkillShellCommand``, ``Interrupt``:
    kind STARTED, the hook input's own fields in ``output_preview``; domain/skill_shell.py).

    ``duration_ms`` and ``tool_use_id`` are not in the proto message; the tool tracker uses them
    to attach a hook's own timing to the call it ran for, when the CLI reports them.
    """

    kind: HookEventKind
    hook_id: str
    hook_name: str
    hook_event: str
    exit_code: int | None
    outcome: str
    output_preview: str
    duration_ms: int | None = None
    tool_use_id: str = ""


class PermissionDenied(_Payload):
    """``system/permission_denied``: a tool call refused without asking.

    Advisory; ``result.permission_denials`` is authoritative (docs/claude-cli-protocol.md §2.2).
    """

    tool_name: str
    tool_use_id: str
    decision_reason_type: str
    decision_reason: str
    message: str


class PartialDelta(_Payload):
    """One ``stream_event`` (only when the run asked for partial messages); text at most 64 KiB."""

    kind: PartialDeltaKind
    index: int
    text: str
    message_id: str
    block_type: str = ""
    stop_reason: str = ""


class TurnResult(_Payload):
    """A ``result`` line: one turn ended. A phase can have several (docs/claude-cli-protocol.md §0.5).

    ``total_cost_usd`` and ``model_usage`` are running totals for the process; ``usage`` is the main
    loop only. Branch on ``is_error`` first: ``subtype: success`` with ``is_error`` is an API error.
    """

    subtype: str
    is_error: bool
    api_error_status: int | None
    terminal_reason: str
    num_turns: int
    result_text: str
    result_truncated: bool
    duration_ms: int | None
    api_duration_ms: int | None
    total_cost_usd: float | None
    usage: TokenUsage
    model_usage: tuple[ModelUsage, ...]
    permission_denials: tuple[PermissionDenial, ...]
    errors: tuple[str, ...]
    result_index: int
    stop_reason: str
    has_model_usage: bool = True
    # Why the CLI refused to start (only on the zeroed result it writes for a known startup failure).
    startup_failure_reason: str = ""
    # ``model_usage_since_last_result`` (CLI 2.1.x; None when absent): this process's usage since its
    # previous result. On a process's first result, ``model_usage`` minus this is what the CLI restored
    # from the session it resumed (see domain/attempt_cost.py).
    usage_since_last_result: tuple[ModelUsage, ...] | None = None
    # ``structured_output`` (with --json-schema) as compact JSON, cut at STRUCTURED_OUTPUT_MAX_BYTES;
    # "" when the line has none.
    structured_output: str = ""
    structured_output_truncated: bool = False


class ControlResponse(_CarriesCliObject):
    """``control_response``: the CLI answered a control request the server sent.

    ``request_subtype`` is unknown to the parser (the CLI does not echo it); the supervisor, which
    sent the request, may fill it in with ``msgspec.structs.replace``.
    """

    request_id: str
    success: bool
    error: str = ""
    error_code: str = ""
    request_subtype: str = ""
    # The success payload (e.g. get_context_usage's answer); for the control layer, not the wire.
    response: dict[str, Any] = msgspec.field(default_factory=dict)


class ControlRequest(_CarriesCliObject):
    """``control_request`` from the CLI (``can_use_tool``, ``hook_callback``, ...); the server answers it.

    ``request`` is the CLI's whole ``request`` object, unbounded, for the supervisor that must answer
    (it needs e.g. ``callback_id`` and the tool input); it is not part of the proto message.
    """

    request_id: str
    subtype: str
    tool_name: str
    tool_use_id: str
    request: dict[str, Any] = msgspec.field(default_factory=dict)


class UserMessage(_Payload):
    """A user line that is not a tool result (injected message echo, replay, interrupt marker)."""

    text: str
    text_truncated: bool
    is_replay: bool
    is_synthetic: bool


class ToolProgress(_Payload):
    """``tool_progress``: a long tool call is still running."""

    tool_use_id: str
    tool_name: str
    elapsed_s: float


class SessionWritesLost(_Payload):
    """``system/session_writes_lost``: at exit the CLI reports it could not save what ``lost`` names
    (``transcript``, ``global_config``) because the disk was full (``error_code`` ``ENOSPC``) or the
    quota used up (``EDQUOT``); resuming ``session_ids`` may miss part of the conversation.
    At most 16 entries of 256 bytes each per list."""

    error_code: str
    lost: tuple[str, ...] = ()
    session_ids: tuple[str, ...] = ()


class Unknown(_Payload):
    """A line (or assistant content block) of a type or subtype this server does not model.

    For an unknown content block inside a known line, ``type`` is the line's type and ``subtype``
    is ``block:<block type>``. ``raw_json`` (at most 64 KiB) only when the run asked for it.
    """

    type: str
    subtype: str
    raw_json: str
    line_bytes: int


# --------------------------------------------------------------------------------------------------
# Payloads produced by the service.


class CostUpdate(_Payload):
    """The phase's cost after a change."""

    cost: PhaseCostSnapshot


class StderrOutput(_Payload):
    """A line the CLI wrote to stderr (at most 4 KiB, invalid UTF-8 replaced)."""

    text: str
    truncated: bool = False

    @classmethod
    def from_bytes(cls, line: bytes) -> StderrOutput:
        """Bound and decode one raw stderr line (trailing newline removed)."""
        text, _, truncated = bound_bytes(line.rstrip(b"\r\n"), STDERR_LINE_MAX_BYTES)
        return cls(text, truncated)


class PhaseStatusChanged(_Payload):
    """A status transition of the phase."""

    from_status: PhaseStatus
    to_status: PhaseStatus
    reason: str = ""


class QueueState(_Payload):
    """Where a QUEUED phase stands in the admission queue (``resources.proto`` QueueState).

    Times are wall-clock nanoseconds since the epoch; ``position`` is 0 while the phase cannot
    start before ``not_before_ns``.
    """

    reason: QueueReason
    detail: str = ""
    position: int = 0
    queued_count: int = 0
    not_before_ns: int | None = None
    enqueue_time_ns: int = 0
    next_attempt: int = 1


class ControlEvent(_Payload):
    """A control action that took effect; ``message`` at most 4 KiB, ``input_json`` at most 64 KiB.

    The attempt fields are set for ATTEMPT_STARTED and RETRY_SCHEDULED, ``queue`` for QUEUED.
    """

    kind: ControlEventKind
    tool_use_id: str = ""
    tool_name: str = ""
    breakpoint_id: str = ""
    message: str = ""
    input_json: str = ""
    attempt: int = 0
    max_attempts: int = 0
    end_kind: AttemptEndKind = AttemptEndKind.UNSPECIFIED
    retry_delay_ns: int | None = None
    resumed_session_id: str = ""
    queue: QueueState | None = None
    # REWOUND: the checkpoint gone back to, and the rewound part of the history (after..to].
    checkpoint: int = 0
    rewound_after_sequence: int = 0
    rewound_to_sequence: int = 0
    actor: str = ""  # who took the action, for actions a call takes (domain/access.py)


class GatewayEvent(_Payload):
    """A request of the phase the gateway or the egress proxy refused, or the API answered with
    a rate limit or an overload, as it happened, or a connection the proxy let through, once it
    ended; ``message`` at most 1 KiB."""

    kind: GatewayEventKind
    http_status: int = 0
    model: str = ""
    message: str = ""
    destination: str = ""  # EGRESS_REFUSED: host:port
    retry_after_ns: int | None = None  # the API's retry-after, when it sent one
    request_id: str = ""  # the API's request-id (or the gateway's own for a refusal)
    bytes_sent: int = 0  # EGRESS_CONNECTION: the phase's bytes out through the connection
    bytes_received: int = 0  # and in
    duration_ns: int = 0  # EGRESS_CONNECTION: how long it was open
    method: str = ""  # the request's, where the proxy saw it (plain HTTP, or terminated HTTPS)
    path: str = ""
    hold_id: str = ""  # EGRESS_HELD / _APPROVED / _DENIED: the held request
    actor: str = ""  # EGRESS_APPROVED / _DENIED: who decided
    breakpoint_id: str = ""  # EGRESS_HELD: the network breakpoint
    rule: str = ""  # EGRESS_CONNECTION / _REFUSED: what decided (allowlist entry, exception, approval, refusal)


class ParseError(_Payload):
    """A stdout line that could not be parsed as written. Never contains the line itself (redacted by design).

    ``repaired``: a warning only; the line was repaired (U+FFFD for what had no valid form) and its
    events follow this one.
    """

    reason: ParseErrorReason
    line_bytes: int
    line_number: int
    byte_offset: int
    detail: str = ""
    repaired: bool = False


# Every payload class is final (tests/domain/test_phase_stream.py checks it): the steps a run hands every
# event to dispatch on ``payload.__class__``, cheaper than ``isinstance`` per event.
Payload = (
    SessionInit
    | AssistantText
    | Thinking
    | ToolCallStarted
    | ToolCallFinished
    | ApiRetry
    | ApiError
    | RateLimit
    | TaskEvent
    | Compaction
    | CliStatus
    | HookEvent
    | PermissionDenied
    | PartialDelta
    | TurnResult
    | ControlResponse
    | ControlRequest
    | UserMessage
    | ToolProgress
    | SessionWritesLost
    | CostUpdate
    | StderrOutput
    | PhaseStatusChanged
    | ControlEvent
    | ParseError
    | Unknown
    | GatewayEvent
)


class Event(msgspec.Struct, frozen=True, gc=False):
    """The envelope: a payload with its per-phase ``sequence`` (gap-free from 1) and receive time.

    ``receive_time_ns`` is wall-clock nanoseconds since the epoch at which the line's last byte was
    read (or the service produced the event). The other fields come from the CLI line, "" if absent.
    """

    sequence: int
    receive_time_ns: int
    session_id: str
    parent_tool_use_id: str
    agent_id: str
    uuid: str
    payload: Payload
