"""Typed domain events of a phase: one frozen dataclass per ``StreamEvent`` payload, plus the envelope.

The classes mirror ``proto/helix/runner/v1/events.proto`` field by field (and its size bounds, see the
header of ``resources.proto``) so that the mapping to protobuf in ``helix_runner.api.event_mapping`` is a
plain copy. Domain code never imports generated code; enums carry the proto's numeric values.

Units are in the field names: ``*_ms`` are the CLI's millisecond figures, ``*_ns`` come from our own
clock. Absent optional numbers are ``None``; absent strings are ``""`` (as in proto3).
"""

from __future__ import annotations

import dataclasses
import enum
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from helix_runner.domain.phase_status import PhaseStatus  # PhaseStatusChanged uses the shared enum

if TYPE_CHECKING:
    from helix_runner.domain.cost_ledger import PhaseCostSnapshot

_T = TypeVar("_T")
_P = ParamSpec("_P")


def fast_init(cls: type[_T]) -> type[_T]:
    """Give a frozen, slotted dataclass an ``__init__`` about 3x faster, with the same signature.

    A frozen dataclass sets each field through ``object.__setattr__`` (to get past its own
    ``__setattr__`` guard), which makes construction the single largest cost per stdout line. The
    replacement briefly switches the new instance to a plain twin class with the identical slot
    layout, stores the fields directly, and switches it back. Instances are genuine ``cls``
    objects: immutable, with the dataclass ``repr``/``eq``/``hash``; ``dataclasses.replace`` works.
    Apply it on top of ``@dataclass(frozen=True, slots=True)``.

    It also compiles a *maker* for the hot path (see ``maker``): a plain function with the same
    signature that skips ``type.__call__`` and the first class switch — it allocates the twin
    directly, fills the slots and switches it to ``cls`` once — roughly 1.5-2x faster again.
    """
    params = dataclasses.fields(cls)  # type: ignore[arg-type]
    if not cls.__dataclass_params__.frozen or not hasattr(cls, "__slots__"):
        raise TypeError(f"{cls.__name__}: fast_init needs @dataclass(frozen=True, slots=True)")
    if hasattr(cls, "__post_init__") or any(not f.init or f.kw_only for f in params):
        raise TypeError(f"{cls.__name__}: fast_init supports plain init fields only")
    twin = type(f"_{cls.__name__}Init", (), {"__slots__": cls.__slots__})
    namespace: dict[str, Any] = {
        "_cls": cls,
        "_twin": twin,
        "_set": object.__setattr__,
        "_new": object.__new__,
        "_MISSING": dataclasses.MISSING,
    }
    args, body = [], []
    for f in params:
        if f.default is not dataclasses.MISSING:
            namespace[f"_d_{f.name}"] = f.default
            args.append(f"{f.name}=_d_{f.name}")
        elif f.default_factory is not dataclasses.MISSING:
            namespace[f"_f_{f.name}"] = f.default_factory
            args.append(f"{f.name}=_MISSING")
            body.append(f"    if {f.name} is _MISSING: {f.name} = _f_{f.name}()")
        else:
            args.append(f.name)
        body.append(f"    self.{f.name} = {f.name}")
    source = "\n".join(
        [
            f"def __init__(self, {', '.join(args)}):",
            "    _set(self, '__class__', _twin)",
            *body,
            "    self.__class__ = _cls",
            "",
            f"def make({', '.join(args)}):",
            "    self = _new(_twin)",
            *body,
            "    self.__class__ = _cls",
            "    return self",
        ]
    )
    exec(source, namespace)
    init = namespace["__init__"]
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__doc__ = cls.__init__.__doc__
    cls.__init__ = init  # type: ignore[misc]
    make = namespace["make"]
    make.__name__ = make.__qualname__ = f"make_{cls.__name__}"
    make.__doc__ = f"Build a {cls.__name__} (same arguments as the class; see fast_init)."
    _MAKERS[cls] = make
    return cls


_MAKERS: dict[type, Callable[..., Any]] = {}


def maker(cls: Callable[_P, _T]) -> Callable[_P, _T]:
    """The fast constructor ``fast_init`` compiled for ``cls``: call it exactly like ``cls``.

    For the per-line hot path only (it saves a ``type.__call__`` and a class switch per object);
    everywhere else plain ``cls(...)`` is clearer and builds the identical object.
    """
    return _MAKERS[cls]  # type: ignore[index]


# Size bounds (bytes of UTF-8), from the header comment of resources.proto and the field comments of
# events.proto. Text is cut at a character boundary at or below the bound.
TOOL_INPUT_MAX_BYTES = 64 * 1024
TOOL_RESULT_PREVIEW_MAX_BYTES = 4 * 1024
STRUCTURED_RESULT_MAX_BYTES = 16 * 1024
ASSISTANT_TEXT_MAX_BYTES = 256 * 1024
RESULT_TEXT_MAX_BYTES = 64 * 1024
STDERR_LINE_MAX_BYTES = 4 * 1024
RAW_UNKNOWN_MAX_BYTES = 64 * 1024
PARTIAL_TEXT_MAX_BYTES = 64 * 1024
USER_TEXT_MAX_BYTES = 64 * 1024
SHORT_TEXT_MAX_BYTES = 4 * 1024  # hook output, task summary, API error text, control message


def utf8_len(text: str) -> int:
    """Byte length of ``text`` in UTF-8 (lone surrogates counted as 3 bytes, like the CLI writes them)."""
    if text.isascii():
        return len(text)
    return len(text.encode("utf-8", "surrogatepass"))


def bound_text(text: str, max_bytes: int) -> tuple[str, int, bool]:
    """Cut ``text`` to at most ``max_bytes`` of UTF-8: returns (text, full byte size, truncated).

    The cut never splits a character. ASCII text (the common case) is handled without encoding.
    """
    n = len(text)
    if text.isascii():
        if n <= max_bytes:
            return text, n, False
        return text[:max_bytes], n, True
    data = text.encode("utf-8", "surrogatepass")
    size = len(data)
    if size <= max_bytes:
        return text, size, False
    # "ignore" drops only the partial character left at the cut.
    return data[:max_bytes].decode("utf-8", "ignore"), size, True


def bound_bytes(data: bytes, max_bytes: int) -> tuple[str, int, bool]:
    """Decode UTF-8 ``data`` cut to at most ``max_bytes``: returns (text, full byte size, truncated)."""
    size = len(data)
    if size <= max_bytes:
        return data.decode("utf-8", "replace"), size, False
    return data[:max_bytes].decode("utf-8", "ignore"), size, True


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
# Values carried by payloads.


@fast_init
@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens by kind (``resources.proto`` TokenUsage); input excludes cache reads and writes."""

    input_tokens: int = 0
    output_tokens: int = 0
    cache_read_input_tokens: int = 0
    cache_write_5m_input_tokens: int = 0
    cache_write_1h_input_tokens: int = 0
    web_search_requests: int = 0

    def __add__(self, other: TokenUsage) -> TokenUsage:
        return _MAKERS[TokenUsage](  # maker(TokenUsage), the fast constructor
            self.input_tokens + other.input_tokens,
            self.output_tokens + other.output_tokens,
            self.cache_read_input_tokens + other.cache_read_input_tokens,
            self.cache_write_5m_input_tokens + other.cache_write_5m_input_tokens,
            self.cache_write_1h_input_tokens + other.cache_write_1h_input_tokens,
            self.web_search_requests + other.web_search_requests,
        )

    @property
    def total_tokens(self) -> int:
        """All tokens of every kind (web searches are requests, not tokens, and are left out)."""
        return (
            self.input_tokens
            + self.output_tokens
            + self.cache_read_input_tokens
            + self.cache_write_5m_input_tokens
            + self.cache_write_1h_input_tokens
        )


@fast_init
@dataclass(frozen=True, slots=True)
class ModelUsage:
    """One entry of ``result.modelUsage`` (subagents included; a running total for the process)."""

    model: str
    tokens: TokenUsage
    cost_usd: float | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class PermissionDenial:
    """One entry of ``result.permission_denials``."""

    tool_name: str
    tool_use_id: str
    tool_input_json: str


# --------------------------------------------------------------------------------------------------
# Payloads written by the CLI.


@fast_init
@dataclass(frozen=True, slots=True)
class SessionInit:
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


@fast_init
@dataclass(frozen=True, slots=True)
class AssistantText:
    """One text block of an assistant message (at most 256 KiB)."""

    text: str
    text_bytes: int
    text_truncated: bool
    message_id: str
    model: str


@fast_init
@dataclass(frozen=True, slots=True)
class Thinking:
    """One thinking block (at most 256 KiB); ``redacted`` for redacted or signature-only blocks."""

    text: str
    text_bytes: int
    text_truncated: bool
    redacted: bool
    message_id: str


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCallStarted:
    """A ``tool_use`` (or ``server_tool_use``) block; input as compact JSON, at most 64 KiB."""

    tool_use_id: str
    name: str
    input_json: str
    input_bytes: int
    input_truncated: bool
    message_id: str
    server_tool: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCallFinished:
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


@fast_init
@dataclass(frozen=True, slots=True)
class ApiRetry:
    """``system/api_retry``: the CLI retries an API request."""

    attempt: int
    max_retries: int
    retry_delay_ms: int
    error_status: int | None
    error: str


@fast_init
@dataclass(frozen=True, slots=True)
class ApiError:
    """A synthetic assistant message (model ``<synthetic>``) reporting an API failure.

    See docs/claude-cli-protocol.md §2.3.
    """

    error: str
    api_error_status: int | None
    message: str


@fast_init
@dataclass(frozen=True, slots=True)
class RateLimit:
    """``rate_limit_event`` (subscription auth only)."""

    status: str
    resets_at_s: int | None
    rate_limit_type: str
    utilization: float | None


@fast_init
@dataclass(frozen=True, slots=True)
class TaskEvent:
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


@fast_init
@dataclass(frozen=True, slots=True)
class Compaction:
    """Compaction start (``system/status`` compacting) or end (``system/compact_boundary``)."""

    completed: bool
    trigger: str = ""
    pre_tokens: int = 0
    post_tokens: int = 0
    duration_ms: int | None = None


@fast_init
@dataclass(frozen=True, slots=True)
class CliStatus:
    """``system/status`` other than compacting (e.g. ``requesting`` before each API call)."""

    status: str
    permission_mode: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class HookEvent:
    """``system/hook_started|progress|response`` (with ``--include-hook-events``).

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


@fast_init
@dataclass(frozen=True, slots=True)
class PermissionDenied:
    """``system/permission_denied``: a tool call refused without asking.

    Advisory; ``result.permission_denials`` is authoritative (docs/claude-cli-protocol.md §2.2).
    """

    tool_name: str
    tool_use_id: str
    decision_reason_type: str
    decision_reason: str
    message: str


@fast_init
@dataclass(frozen=True, slots=True)
class PartialDelta:
    """One ``stream_event`` (only when the run asked for partial messages); text at most 64 KiB."""

    kind: PartialDeltaKind
    index: int
    text: str
    message_id: str
    block_type: str = ""
    stop_reason: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class TurnResult:
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


@fast_init
@dataclass(frozen=True, slots=True)
class ControlResponse:
    """``control_response``: the CLI answered a control request the server sent.

    ``request_subtype`` is unknown to the parser (the CLI does not echo it); the supervisor, which
    sent the request, may fill it in with ``dataclasses.replace``.
    """

    request_id: str
    success: bool
    error: str = ""
    error_code: str = ""
    request_subtype: str = ""
    # The success payload (e.g. get_context_usage's answer); for the control layer, not the wire.
    response: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@fast_init
@dataclass(frozen=True, slots=True)
class ControlRequest:
    """``control_request`` from the CLI (``can_use_tool``, ``hook_callback``, ...); the server answers it.

    ``request`` is the CLI's whole ``request`` object, unbounded, for the supervisor that must answer
    (it needs e.g. ``callback_id`` and the tool input); it is not part of the proto message.
    """

    request_id: str
    subtype: str
    tool_name: str
    tool_use_id: str
    request: dict[str, Any] = field(default_factory=dict, repr=False, compare=False)


@fast_init
@dataclass(frozen=True, slots=True)
class UserMessage:
    """A user line that is not a tool result (injected message echo, replay, interrupt marker)."""

    text: str
    text_truncated: bool
    is_replay: bool
    is_synthetic: bool


@fast_init
@dataclass(frozen=True, slots=True)
class ToolProgress:
    """``tool_progress``: a long tool call is still running."""

    tool_use_id: str
    tool_name: str
    elapsed_s: float


@fast_init
@dataclass(frozen=True, slots=True)
class SessionWritesLost:
    """``system/session_writes_lost``: at exit the CLI reports it could not save what ``lost`` names
    (``transcript``, ``global_config``) because the disk was full (``error_code`` ``ENOSPC``) or the
    quota used up (``EDQUOT``); resuming ``session_ids`` may miss part of the conversation.
    At most 16 entries of 256 bytes each per list."""

    error_code: str
    lost: tuple[str, ...] = ()
    session_ids: tuple[str, ...] = ()


@fast_init
@dataclass(frozen=True, slots=True)
class Unknown:
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


@fast_init
@dataclass(frozen=True, slots=True)
class CostUpdate:
    """The phase's cost after a change."""

    cost: PhaseCostSnapshot


@fast_init
@dataclass(frozen=True, slots=True)
class StderrOutput:
    """A line the CLI wrote to stderr (at most 4 KiB, invalid UTF-8 replaced)."""

    text: str
    truncated: bool = False

    @classmethod
    def from_bytes(cls, line: bytes) -> StderrOutput:
        """Bound and decode one raw stderr line (trailing newline removed)."""
        text, _, truncated = bound_bytes(line.rstrip(b"\r\n"), STDERR_LINE_MAX_BYTES)
        return cls(text, truncated)


@fast_init
@dataclass(frozen=True, slots=True)
class PhaseStatusChanged:
    """A status transition of the phase."""

    from_status: PhaseStatus
    to_status: PhaseStatus
    reason: str = ""


@dataclass(frozen=True, slots=True)
class QueueState:
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


@fast_init
@dataclass(frozen=True, slots=True)
class ControlEvent:
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


@fast_init
@dataclass(frozen=True, slots=True)
class ParseError:
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
)


@fast_init
@dataclass(frozen=True, slots=True)
class Event:
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
