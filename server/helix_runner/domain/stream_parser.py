"""One complete stdout line of the CLI → typed domain payloads (plus what the cost ledger needs).

Dispatch is on ``type``, then ``subtype`` — never on key order or prefixes, which are not stable
(notes §0.7). Known quirks handled here, each with its source:

* one assistant line per content block, consecutive lines sharing ``message.id``; their
  ``message.usage`` is the message_start usage, not final (notes §0.2; CAP 02/07);
* tool results are ``tool_result`` blocks in ``user`` lines; ``content`` is a string or a block
  list; ``is_error`` may be absent, meaning false (notes §2.4; CAP 02/03/09);
* ``subtype: success`` may carry ``is_error: true`` (API errors); ``error_*`` subtypes carry
  ``errors[]`` and no ``result`` (notes §0.4; CAP 06/10);
* synthetic API-error assistant messages have model ``<synthetic>`` and an ``error`` (CAP 10);
* unknown types, subtypes and content blocks pass through as ``Unknown`` (notes §0.6).

Two paths, one result. The *typed* path decodes the common lines (assistant, user, stream_event)
straight into ``stream_lines`` structs with msgspec and builds their payloads from typed fields;
the *generic* path (``parse_generic``: ``orjson.loads``, then a handler per ``type`` reading the
dict) takes every other line and every line the typed schema does not accept. On any line both
accept they give the same payloads (``tests/domain/test_stream_lines.py``); the typed path is only
faster (it skips what it does not need and builds no dicts).

The parser is pure apart from counting ``system/init`` lines (for ``SessionInit.turn_index``) and
remembering the last message's usage.
Nothing here raises on bad input: a line that cannot be read yields a ``ParseError`` that never
contains the line's content. A line whose only defect is its text encoding (invalid UTF-8, an
unpaired surrogate escape) is repaired instead (``line_repair``): its events are delivered after
a ``ParseError`` with ``repaired`` set.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import msgspec
import orjson
from msgspec import UNSET

from helix_runner.domain.bounds import (
    ASSISTANT_TEXT_MAX_BYTES,
    PARTIAL_TEXT_MAX_BYTES,
    RAW_UNKNOWN_MAX_BYTES,
    RESULT_TEXT_MAX_BYTES,
    SHORT_TEXT_MAX_BYTES,
    STRUCTURED_OUTPUT_MAX_BYTES,
    STRUCTURED_RESULT_MAX_BYTES,
    TOOL_INPUT_MAX_BYTES,
    TOOL_RESULT_PREVIEW_MAX_BYTES,
    USER_TEXT_MAX_BYTES,
    bound_bytes,
    bound_text,
    utf8_len,
)
from helix_runner.domain.events import (
    ApiError,
    ApiRetry,
    AssistantText,
    CliStatus,
    Compaction,
    ControlRequest,
    ControlResponse,
    HookEvent,
    HookEventKind,
    ParseError,
    ParseErrorReason,
    PartialDelta,
    PartialDeltaKind,
    Payload,
    PermissionDenial,
    PermissionDenied,
    RateLimit,
    SessionInit,
    SessionWritesLost,
    TaskEvent,
    TaskEventKind,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    ToolProgress,
    TurnResult,
    Unknown,
    UserMessage,
)
from helix_runner.domain.line_repair import repair_line
from helix_runner.domain.pricing import split_cache_writes
from helix_runner.domain.stream_lines import (
    AssistantLine,
    ContentBlockDelta,
    ContentBlockStart,
    ContentBlockStop,
    InputJsonDelta,
    MessageDelta,
    MessageStart,
    MessageStop,
    ServerToolUseBlock,
    StreamEventLine,
    TextBlock,
    TextDelta,
    ThinkingBlock,
    ThinkingDelta,
    ToolResultBlock,
    ToolUseBlock,
    Usage,
    UserLine,
    decode_line,
)
from helix_runner.domain.usage import ModelUsage, TokenUsage

_loads = orjson.loads
_dumps = orjson.dumps
_JSONDecodeError = orjson.JSONDecodeError

# Synthetic assistant messages carry this model and no real usage (CAP 10).
SYNTHETIC_MODEL = "<synthetic>"

# What a handler raises on a line of unexpected shape (reported as BAD_SHAPE, never propagated).
SHAPE_ERRORS = (KeyError, TypeError, AttributeError, ValueError, IndexError, ArithmeticError)


class NotTyped(ValueError):
    """Raised by a typed handler for a line its schema accepts but it leaves to the generic path."""


# Why the typed path passes a line on to the generic one: off the schema (msgspec), invalid UTF-8
# (the check before decoding), a value orjson cannot write back (TypeError), NotTyped, or nesting
# deeper than msgspec decodes (RecursionError: a hostile model's tool input; orjson then refuses
# it past 1024 levels, a ParseError).
TYPED_MISSES = (msgspec.DecodeError, RecursionError, *SHAPE_ERRORS)


# What the cost ledger needs from an assistant line or a stream_event: (message id, model, the
# Messages-API usage object — raw, or typed by stream_lines —, final_output). ``final_output``
# marks a ``message_delta``, whose usage carries only the final ``output_tokens``. Plain tuples:
# this is the hot path.
UsageObservation = tuple[str, str, Usage, bool]

# What one line produced: (session_id, parent_tool_use_id, agent_id, uuid, payloads in order,
# usage observation or None). The first four are the CLI's envelope fields, "" when absent.
ParsedLine = tuple[str, str, str, str, list[Payload], UsageObservation | None]

# What a type handler returns: the payloads and the usage observation.
_Handled = tuple[list[Payload], UsageObservation | None]


def envelope(obj: dict[str, Any]) -> tuple[str, str, str, str]:
    """The CLI's envelope fields of a line: (session_id, parent_tool_use_id, agent_id, uuid).

    Each is "" when absent, null or not a string (``PhaseStream.feed`` inlines this).
    """
    sid = obj.get("session_id")
    parent = obj.get("parent_tool_use_id")
    agent = obj.get("agent_id")
    uid = obj.get("uuid")
    return (
        sid if sid.__class__ is str else "",
        parent if parent.__class__ is str else "",
        agent if agent.__class__ is str else "",
        uid if uid.__class__ is str else "",
    )


def _str(value: Any) -> str:
    """A string field, "" when absent or of another type."""
    return value if value.__class__ is str else ""


def _int(value: Any) -> int | None:
    """An integer field, None when absent or not a number (bools excluded)."""
    if value.__class__ is int:
        return value
    if value.__class__ is float:
        return int(value)
    return None


def _int0(value: Any) -> int:
    if value.__class__ is int:
        return value
    if value.__class__ is float:
        return int(value)
    return 0


def _id(value: Any) -> str:
    """A tool_use id; anything but a string makes the line BAD_SHAPE (ids key the tool tracker)."""
    if value.__class__ is not str:
        raise TypeError("tool_use id is not a string")
    return value


def _strings(value: Any) -> tuple[str, ...]:
    """A list of names as a tuple of str (anything else: empty)."""
    return tuple(map(str, value)) if value.__class__ is list else ()


def _float(value: Any) -> float | None:
    if value.__class__ is float or value.__class__ is int:
        return float(value)
    return None


def _compact_json(value: Any, max_bytes: int) -> tuple[str, int, bool]:
    """Compact JSON of ``value`` bounded to ``max_bytes``: (text, full byte size, truncated)."""
    try:
        data = _dumps(value)
    except TypeError:  # orjson refuses e.g. integers over 64 bits; the shape is still readable
        data = _dumps(str(value))
    return bound_bytes(data, max_bytes)


def _ints(*values: Any) -> list[int]:
    """Token counts as non-negative ints (absent, null or malformed counts are 0)."""
    return [v if v.__class__ is int and v > 0 else 0 for v in values]  # a list: no generator


def token_usage_from_api(usage: Any) -> TokenUsage:
    """Messages-API ``usage`` (snake_case, as on assistant lines and ``result.usage``) → TokenUsage."""
    if usage.__class__ is not dict:
        return TokenUsage()
    get = usage.get
    inp, out, read, write = _ints(
        get("input_tokens"),
        get("output_tokens"),
        get("cache_read_input_tokens"),
        get("cache_creation_input_tokens"),
    )
    split = get("cache_creation")
    if split.__class__ is dict:
        write_5m, write_1h = split_cache_writes(
            write, *_ints(split.get("ephemeral_5m_input_tokens"), split.get("ephemeral_1h_input_tokens"))
        )
    else:
        write_5m, write_1h = write, 0
    server = get("server_tool_use")
    searches = _int0(server.get("web_search_requests")) if server.__class__ is dict else 0
    return TokenUsage(inp, out, read, write_5m, write_1h, searches)


def model_usage_of(model_usage: dict[str, Any]) -> tuple[ModelUsage, ...]:
    """A ``modelUsage`` object (a result's, or a transcript's ``cost-state``) → ModelUsage entries."""
    return _model_usage(model_usage, 0) if isinstance(model_usage, dict) else ()


def _model_usage(model_usage: dict[str, Any], main_loop_1h: int) -> tuple[ModelUsage, ...]:
    """``result.modelUsage`` (camelCase) → ModelUsage entries, cache writes split per the pricing rule."""
    entries = [(m, u) for m, u in model_usage.items() if u.__class__ is dict]
    if not entries:
        return ()
    # Rule 2 of split_cache_writes: the main loop's 1-hour writes go to the model with most writes.
    main_model = (
        max(entries, key=lambda e: _int0(e[1].get("cacheCreationInputTokens")))[0] if main_loop_1h else ""
    )
    out = []
    for model, u in entries:
        get = u.get
        inp, output, read, write, searches = _ints(
            get("inputTokens"),
            get("outputTokens"),
            get("cacheReadInputTokens"),
            get("cacheCreationInputTokens"),
            get("webSearchRequests"),
        )
        write_5m, write_1h = split_cache_writes(
            write,
            _int(get("cacheCreationEphemeral5mInputTokens")),
            _int(get("cacheCreationEphemeral1hInputTokens")),
            main_loop_1h if model == main_model else 0,
        )
        out.append(
            ModelUsage(
                model, TokenUsage(inp, output, read, write_5m, write_1h, searches), _float(get("costUSD"))
            )
        )
    return tuple(out)


def _content_preview(content: Any, max_bytes: int) -> tuple[str, int, bool]:
    """A tool_result's content as bounded text: (preview, full byte size, truncated).

    String content is used as is. For a block list, text blocks are joined with newlines and other
    blocks (images, documents) appear as ``[<type>]``; the full size counts text blocks' UTF-8
    bytes and other blocks' compact JSON bytes (e.g. an image's base64 data), plus separators.
    """
    if content.__class__ is str:
        return bound_text(content, max_bytes)
    if content.__class__ is not list:
        if content is None:
            return "", 0, False
        return _compact_json(content, max_bytes)
    parts: list[str] = []
    size = 0
    for block in content:
        if block.__class__ is dict and block.get("type") == "text":
            text = _str(block.get("text"))
            parts.append(text)
            size += utf8_len(text)
        else:
            kind = block.get("type") if block.__class__ is dict else None
            parts.append(f"[{kind if kind.__class__ is str else 'block'}]")
            size += len(_dumps(block))
    if parts:
        size += len(parts) - 1
    preview, _, truncated = bound_text("\n".join(parts), max_bytes)
    return preview, size, truncated


class StreamParser:
    """Parses complete lines into payloads. One instance per phase (it counts turns)."""

    __slots__ = (
        "_include_partial",
        "_include_raw",
        "_init_count",
        "_handlers",
        "_system_handlers",
        "_typed_handlers",
        "_last_usage_id",
        "_last_output",
    )

    def __init__(self, *, include_partial_messages: bool = False, include_raw_unknown: bool = False) -> None:
        self._include_partial = include_partial_messages
        self._include_raw = include_raw_unknown
        self._init_count = 0
        # The previous assistant line's message id and output count: the next lines of the same
        # message repeat its usage (notes §0.2), so they are reported to the ledger only if it grew.
        self._last_usage_id = ""
        self._last_output = -1
        self._handlers: dict[str, Callable[[dict[str, Any], bytes], _Handled]] = {
            "assistant": self._assistant,
            "user": self._user,
            "system": self._system,
            "result": self._result,
            "stream_event": self._stream_event,
            "rate_limit_event": self._rate_limit,
            "control_response": self._control_response,
            "control_request": self._control_request,
            "control_cancel_request": self._control_cancel,
            "tool_progress": self._tool_progress,
            "keep_alive": self._keep_alive,
        }
        self._system_handlers: dict[str, Callable[[dict[str, Any]], Payload]] = {
            "init": self._init,
            "api_retry": _api_retry,
            "status": _status,
            "compact_boundary": _compact_boundary,
            "hook_started": _hook_started,
            "hook_progress": _hook_progress,
            "hook_response": _hook_response,
            "permission_denied": _permission_denied,
            "task_started": _task_started,
            "task_progress": _task_progress,
            "task_updated": _task_updated,
            "task_notification": _task_notification,
            "session_writes_lost": _session_writes_lost,
        }
        self._typed_handlers: dict[type, Callable[[Any], _Handled]] = {
            AssistantLine: self._typed_assistant,
            UserLine: self._typed_user,
            StreamEventLine: self._typed_stream_event,
        }

    # ----------------------------------------------------------------------------------------------
    # Entry point.

    def parse(self, line: bytes, line_number: int, byte_offset: int) -> ParsedLine:
        """Parse one complete line (no newline). Never raises; bad lines give a ParseError payload.

        The typed path first (``stream_lines``: the common lines, decoded straight into structs),
        the generic one for every other line. ``PhaseStream.feed`` runs the same steps inline (it
        is the hot path).
        """
        try:
            if not line.isascii():
                str(line, "utf-8")  # msgspec does not validate what it skips (see stream_lines)
            msg = decode_line(line)
            payloads, usage = self._typed_handlers[msg.__class__](msg)
        except TYPED_MISSES:
            return self.parse_generic(line, line_number, byte_offset)
        return (
            msg.session_id or "",
            msg.parent_tool_use_id or "",
            msg.agent_id or "",
            msg.uuid or "",
            payloads,
            usage,
        )

    def parse_generic(self, line: bytes, line_number: int, byte_offset: int) -> ParsedLine:
        """``parse`` the generic way: ``orjson.loads``, then the handler of ``obj["type"]``.

        Handles every line: any shape, unknown types (passed through as ``Unknown``), unreadable
        lines (repaired when only their encoding is broken, else a ``ParseError``).
        """
        try:
            obj = _loads(line)
        except _JSONDecodeError as exc:
            return self._unreadable(line, line_number, byte_offset, exc)
        return self._parsed(obj, line, line_number, byte_offset)

    def _parsed(self, obj: Any, line: bytes, line_number: int, byte_offset: int) -> ParsedLine:
        """``parse`` after ``loads``: dispatch on the line's type."""
        try:
            # KeyError/TypeError: not an object, no type, an unhashable or unknown type.
            handler = self._handlers[obj["type"]]
        except (KeyError, TypeError):
            return self.parse_unhandled(obj, line, line_number, byte_offset)
        try:
            payloads, usage = handler(obj, line)
        except SHAPE_ERRORS as exc:
            return self.parse_failed(obj, exc, line, line_number, byte_offset)
        return (*envelope(obj), payloads, usage)

    @property
    def handlers(self) -> dict[str, Callable[[dict[str, Any], Any], _Handled]]:
        """Line type → generic handler returning (payloads, usage observation); may raise a shape error."""
        return self._handlers

    @property
    def typed_handlers(self) -> dict[type, Callable[[Any], _Handled]]:
        """Typed line class (``stream_lines.Line``) → handler returning (payloads, usage observation).

        A handler may raise one of ``TYPED_MISSES`` (then the line takes the generic path); it
        changes the parser's state only once it cannot fail any more.
        """
        return self._typed_handlers

    def parse_unhandled(self, obj: Any, line: bytes, line_number: int, byte_offset: int) -> ParsedLine:
        """A parsed line without a handler: not an object, no string type, or an unknown type."""
        if obj.__class__ is not dict:
            return _error_line(
                ParseErrorReason.NOT_A_MESSAGE, line, line_number, byte_offset, "not an object"
            )
        kind = obj.get("type")
        if kind.__class__ is not str:
            return _error_line(
                ParseErrorReason.NOT_A_MESSAGE, line, line_number, byte_offset, "no string type"
            )
        return (*envelope(obj), [self._unknown(kind, obj.get("subtype"), line)], None)

    def parse_failed(
        self, obj: dict[str, Any], exc: Exception, line: bytes, line_number: int, byte_offset: int
    ) -> ParsedLine:
        """A line whose handler hit an unexpected shape (``exc``, one of the shape errors)."""
        # Only the exception class: messages could quote content (redaction).
        detail = f"{obj['type']}: {type(exc).__name__}"
        return _error_line(ParseErrorReason.BAD_SHAPE, line, line_number, byte_offset, detail)

    def _unreadable(
        self, line: bytes, line_number: int, byte_offset: int, exc: orjson.JSONDecodeError
    ) -> ParsedLine:
        """Repair a line orjson rejected for its encoding, else classify it: invalid UTF-8, noise, or
        broken JSON."""
        line = bytes(line)  # PhaseStream passes memoryviews
        repair = repair_line(line)
        if repair is not None:
            fixed, reason, detail = repair
            try:
                obj = _loads(fixed)
            except _JSONDecodeError:
                pass  # broken beyond its encoding: reported as such below
            else:
                sid, parent, agent, uid, payloads, usage = self._parsed(obj, fixed, line_number, byte_offset)
                warning = ParseError(reason, len(line), line_number, byte_offset, detail, True)
                return sid, parent, agent, uid, [warning, *payloads], usage
        try:
            line.decode("utf-8")
        except UnicodeDecodeError as err:
            return _error_line(
                ParseErrorReason.INVALID_UTF8, line, line_number, byte_offset, f"byte {err.start}"
            )
        if line.lstrip()[:1] != b"{":
            # Noise such as "[SandboxDebug] ..." or a config warning (notes §4, PY #347).
            return _error_line(ParseErrorReason.NOT_JSON, line, line_number, byte_offset, "")
        return _error_line(
            ParseErrorReason.INVALID_JSON, line, line_number, byte_offset, f"at char {getattr(exc, 'pos', 0)}"
        )

    # ----------------------------------------------------------------------------------------------
    # Helpers.

    def _unknown(self, kind: str, subtype: Any, line: bytes) -> Unknown:
        raw = bound_bytes(bytes(line), RAW_UNKNOWN_MAX_BYTES)[0] if self._include_raw else ""
        return Unknown(kind, subtype if subtype.__class__ is str else "", raw, len(line))

    # ----------------------------------------------------------------------------------------------
    # assistant / user.

    def _assistant(self, obj: dict[str, Any], line: bytes) -> _Handled:
        msg = obj["message"]
        message_id = msg.get("id", "")
        if message_id.__class__ is not str:
            message_id = ""
        model = msg.get("model", "")
        if model.__class__ is not str:
            model = ""
        content = msg["content"]
        if content.__class__ is str:
            content = [{"type": "text", "text": content}]
        if obj.get("error") is not None or obj.get("is_api_error_message") is True:
            # Synthetic API-error message (CAP 10/11/12): one ApiError instead of text events.
            text = "\n".join(
                _str(b.get("text")) for b in content if b.__class__ is dict and b.get("type") == "text"
            )
            error = ApiError(
                _str(obj.get("error")),
                _int(obj.get("api_error_status")),
                bound_text(text, SHORT_TEXT_MAX_BYTES)[0],
            )
            return [error], None
        payloads: list[Payload] = []
        for block in content:
            btype = block["type"]
            if btype == "text":
                text = block["text"]
                if text.isascii() and len(text) <= ASSISTANT_TEXT_MAX_BYTES:  # fast path of bound_text
                    payloads.append(AssistantText(text, len(text), False, message_id, model))
                else:
                    text, size, cut = bound_text(text, ASSISTANT_TEXT_MAX_BYTES)
                    payloads.append(AssistantText(text, size, cut, message_id, model))
            elif btype == "tool_use" or btype == "server_tool_use":
                try:
                    data = _dumps(block.get("input"))
                except TypeError:
                    data = _dumps(str(block.get("input")))
                size = len(data)
                if size <= TOOL_INPUT_MAX_BYTES:  # fast path of _compact_json
                    input_json, cut = data.decode(), False
                else:
                    input_json, size, cut = bound_bytes(data, TOOL_INPUT_MAX_BYTES)
                name = block.get("name", "")
                tool_use_id = block["id"]
                if tool_use_id.__class__ is not str:  # _id, inlined
                    raise TypeError("tool_use id is not a string")
                payloads.append(
                    ToolCallStarted(
                        tool_use_id,
                        name if name.__class__ is str else "",
                        input_json,
                        size,
                        cut,
                        message_id,
                        btype == "server_tool_use",
                    )
                )
            elif btype == "thinking":
                # Redacted/omitted thinking arrives as "" with only a signature (notes §2.3).
                thinking = _str(block.get("thinking"))
                text, size, cut = bound_text(thinking, ASSISTANT_TEXT_MAX_BYTES)
                payloads.append(Thinking(text, size, cut, not thinking, message_id))
            elif btype == "redacted_thinking":
                payloads.append(Thinking("", 0, False, True, message_id))
            elif btype.endswith("_tool_result") and block.get("tool_use_id").__class__ is str:
                # Server tool results (web_search_tool_result, ...) close a server_tool_use call.
                result_content = block.get("content")
                is_error = result_content.__class__ is dict and _str(result_content.get("type")).endswith(
                    "_error"
                )
                preview, size, cut = _content_preview(result_content, TOOL_RESULT_PREVIEW_MAX_BYTES)
                payloads.append(ToolCallFinished(block["tool_use_id"], "", is_error, preview, size, cut))
            else:
                payloads.append(self._unknown("assistant", f"block:{btype}", line))
        usage = msg.get("usage")
        if usage.__class__ is not dict or not message_id or model == SYNTHETIC_MODEL:
            return payloads, None
        output = usage.get("output_tokens", 0)
        if message_id == self._last_usage_id and (output.__class__ is not int or output <= self._last_output):
            return payloads, None  # same message, nothing new for the ledger
        self._last_usage_id = message_id
        self._last_output = output if output.__class__ is int else 0
        return payloads, (message_id, model, usage, False)

    def _user(self, obj: dict[str, Any], line: bytes) -> _Handled:
        msg = obj["message"]
        content = msg["content"]
        if content.__class__ is str:
            text, _, cut = bound_text(content, USER_TEXT_MAX_BYTES)
            message = UserMessage(text, cut, obj.get("isReplay") is True, obj.get("isSynthetic") is True)
            return [message], None
        payloads: list[Payload] = []
        texts: list[str] = []
        structured = obj.get("tool_use_result")
        for block in content:
            btype = block["type"]
            if btype == "tool_result":
                result = block.get("content")
                if result.__class__ is str:  # _content_preview, inlined for the usual string
                    if result.isascii():  # and bound_text's fast path too
                        size = len(result)
                        cut = size > TOOL_RESULT_PREVIEW_MAX_BYTES
                        preview = result[:TOOL_RESULT_PREVIEW_MAX_BYTES] if cut else result
                    else:
                        preview, size, cut = bound_text(result, TOOL_RESULT_PREVIEW_MAX_BYTES)
                else:
                    preview, size, cut = _content_preview(result, TOOL_RESULT_PREVIEW_MAX_BYTES)
                # The CLI writes one tool result per user line with its structured output
                # alongside (CAP 02); with several results in one line it goes with the first.
                if structured is not None:
                    try:
                        data = _dumps(structured)
                    except TypeError:
                        data = _dumps(str(structured))
                    if len(data) <= STRUCTURED_RESULT_MAX_BYTES:  # fast path of _compact_json
                        sjson, scut = data.decode(), False
                    else:
                        sjson, _, scut = bound_bytes(data, STRUCTURED_RESULT_MAX_BYTES)
                    structured = None
                else:
                    sjson, scut = "", False
                tool_use_id = block["tool_use_id"]
                if tool_use_id.__class__ is not str:  # _id, inlined
                    raise TypeError("tool_use id is not a string")
                payloads.append(
                    ToolCallFinished(
                        tool_use_id,
                        "",
                        block.get("is_error") is True,
                        preview,
                        size,
                        cut,
                        sjson,
                        scut,
                    )
                )
            elif btype == "text":
                texts.append(_str(block.get("text")))
            else:
                texts.append(f"[{btype}]")
        if texts:
            text, _, cut = bound_text("\n".join(texts), USER_TEXT_MAX_BYTES)
            payloads.append(
                UserMessage(text, cut, obj.get("isReplay") is True, obj.get("isSynthetic") is True)
            )
        return payloads, None

    # ----------------------------------------------------------------------------------------------
    # The typed path (stream_lines). Each handler gives exactly what the generic handler of the
    # same type gives for the same line; it raises (TYPED_MISSES) for anything it does not cover.

    def _typed_assistant(self, line: AssistantLine) -> _Handled:
        if line.error is not None or line.is_api_error_message is True:
            raise NotTyped("synthetic API-error message")
        msg = line.message
        message_id = msg.id
        model = msg.model
        payloads: list[Payload] = []
        append = payloads.append
        for block in msg.content:
            cls = block.__class__
            if cls is TextBlock:
                text = block.text
                if text.isascii() and len(text) <= ASSISTANT_TEXT_MAX_BYTES:  # fast path of bound_text
                    append(AssistantText(text, len(text), False, message_id, model))
                else:
                    text, size, cut = bound_text(text, ASSISTANT_TEXT_MAX_BYTES)
                    append(AssistantText(text, size, cut, message_id, model))
            elif cls is ToolUseBlock or cls is ServerToolUseBlock:
                data = _dumps(block.input)  # TypeError (e.g. an integer past 64 bits): generic path
                size = len(data)
                if size <= TOOL_INPUT_MAX_BYTES:
                    input_json, cut = data.decode(), False
                else:
                    input_json, size, cut = bound_bytes(data, TOOL_INPUT_MAX_BYTES)
                append(
                    ToolCallStarted(
                        block.id, block.name, input_json, size, cut, message_id, cls is ServerToolUseBlock
                    )
                )
            elif cls is ThinkingBlock:
                # Redacted/omitted thinking arrives as "" with only a signature (notes §2.3).
                thinking = block.thinking
                text, size, cut = bound_text(thinking, ASSISTANT_TEXT_MAX_BYTES)
                append(Thinking(text, size, cut, not thinking, message_id))
            else:  # RedactedThinkingBlock
                append(Thinking("", 0, False, True, message_id))
        usage = msg.usage
        if usage is None or not message_id or model == SYNTHETIC_MODEL:
            return payloads, None
        output = usage.output_tokens
        if output is UNSET:  # absent (the generic path reads it with a default of 0)
            output = 0
        if message_id == self._last_usage_id and output <= self._last_output:
            return payloads, None  # same message, nothing new for the ledger
        self._last_usage_id = message_id
        self._last_output = output
        return payloads, (message_id, model, usage, False)

    def _typed_user(self, line: UserLine) -> _Handled:
        payloads: list[Payload] = []
        texts: list[str] = []
        structured = line.tool_use_result
        for block in line.message.content:
            if block.__class__ is ToolResultBlock:
                result = block.content
                if result.__class__ is str:
                    if result.isascii():  # bound_text's fast path
                        size = len(result)
                        cut = size > TOOL_RESULT_PREVIEW_MAX_BYTES
                        preview = result[:TOOL_RESULT_PREVIEW_MAX_BYTES] if cut else result
                    else:
                        preview, size, cut = bound_text(result, TOOL_RESULT_PREVIEW_MAX_BYTES)
                elif result is None or result.__class__ is list:
                    preview, size, cut = _content_preview(result, TOOL_RESULT_PREVIEW_MAX_BYTES)
                else:  # _compact_json would write str(value) where orjson cannot encode it
                    raise NotTyped("tool result content of another type")
                # The CLI writes one tool result per user line with its structured output
                # alongside (CAP 02); with several results in one line it goes with the first.
                if structured is not None:
                    data = _dumps(structured)  # TypeError: generic path (see _typed_assistant)
                    if len(data) <= STRUCTURED_RESULT_MAX_BYTES:
                        sjson, scut = data.decode(), False
                    else:
                        sjson, _, scut = bound_bytes(data, STRUCTURED_RESULT_MAX_BYTES)
                    structured = None
                else:
                    sjson, scut = "", False
                payloads.append(
                    ToolCallFinished(
                        block.tool_use_id, "", block.is_error is True, preview, size, cut, sjson, scut
                    )
                )
            else:  # UserTextBlock
                texts.append(block.text)
        if texts:
            text, _, cut = bound_text("\n".join(texts), USER_TEXT_MAX_BYTES)
            payloads.append(UserMessage(text, cut, line.is_replay is True, line.is_synthetic is True))
        return payloads, None

    def _typed_stream_event(self, line: StreamEventLine) -> _Handled:
        event = line.event
        cls = event.__class__
        message_id = line.api_message_id or ""
        observation = None
        if cls is MessageStart:
            message = event.message
            if message is not None:
                message_id = message_id or message.id
                usage = message.usage
                if usage is not None and message_id and message.model != SYNTHETIC_MODEL:
                    observation = (message_id, message.model, usage, False)
        elif cls is MessageDelta:
            if event.usage is not None and message_id:
                observation = (message_id, "", event.usage, True)
        if not self._include_partial:
            # The run did not ask for partial messages: no event, but the usage still counts.
            return [], observation
        index = event.index
        if cls is ContentBlockDelta:
            delta = event.delta
            dcls = delta.__class__
            if dcls is TextDelta:
                kind, text = PartialDeltaKind.TEXT_DELTA, delta.text
            elif dcls is ThinkingDelta:
                kind, text = PartialDeltaKind.THINKING_DELTA, delta.thinking
            elif dcls is InputJsonDelta:
                kind, text = PartialDeltaKind.INPUT_JSON_DELTA, delta.partial_json
            else:  # SignatureDelta
                kind, text = PartialDeltaKind.SIGNATURE_DELTA, delta.signature
            payload = PartialDelta(kind, index, bound_text(text, PARTIAL_TEXT_MAX_BYTES)[0], message_id)
        elif cls is ContentBlockStart:
            block = event.content_block
            block_type = block.type if block is not None else ""
            payload = PartialDelta(PartialDeltaKind.CONTENT_BLOCK_START, index, "", message_id, block_type)
        elif cls is MessageDelta:
            stop = (event.delta.stop_reason or "") if event.delta is not None else ""
            payload = PartialDelta(PartialDeltaKind.MESSAGE_DELTA, index, "", message_id, "", stop)
        else:
            payload = PartialDelta(_TYPED_EVENT_KINDS[cls], index, "", message_id)
        return [payload], observation

    # ----------------------------------------------------------------------------------------------
    # system.

    def _system(self, obj: dict[str, Any], line: bytes) -> _Handled:
        subtype = obj.get("subtype")
        handler = self._system_handlers.get(subtype) if subtype.__class__ is str else None
        if handler is None:
            # thinking_tokens, background_tasks_changed, session_state_changed, ... (notes §2.2)
            return [self._unknown("system", subtype, line)], None
        return [handler(obj)], None

    def _init(self, obj: dict[str, Any]) -> SessionInit:
        self._init_count += 1
        servers = []
        for server in obj.get("mcp_servers") or ():
            if server.__class__ is dict:
                servers.append(f"{_str(server.get('name'))}:{_str(server.get('status'))}")
            elif server.__class__ is str:
                servers.append(server)
        return SessionInit(
            _str(obj.get("model")),
            _strings(obj.get("tools")),
            _str(obj.get("cwd")),
            _str(obj.get("claude_code_version")),  # absent on old CLIs (HM-8)
            _str(obj.get("permissionMode")),
            tuple(servers),
            _strings(obj.get("capabilities")),
            _str(obj.get("apiKeySource")),
            self._init_count,
        )

    # ----------------------------------------------------------------------------------------------
    # result.

    def _result(self, obj: dict[str, Any], line: bytes) -> _Handled:
        usage = obj.get("usage")
        main_usage = token_usage_from_api(usage)
        raw_model_usage = obj.get("modelUsage")
        has_model_usage = raw_model_usage.__class__ is dict
        model_usage = (
            _model_usage(raw_model_usage, main_usage.cache_write_1h_input_tokens) if has_model_usage else ()
        )
        denials = []
        for denial in obj.get("permission_denials") or ():
            if denial.__class__ is dict:
                denials.append(
                    PermissionDenial(
                        _str(denial.get("tool_name")),
                        _str(denial.get("tool_use_id")),
                        _compact_json(denial.get("tool_input"), TOOL_INPUT_MAX_BYTES)[0],
                    )
                )
        errors = tuple(
            bound_text(e, SHORT_TEXT_MAX_BYTES)[0]
            if e.__class__ is str
            else _compact_json(e, SHORT_TEXT_MAX_BYTES)[0]
            for e in obj.get("errors") or ()
        )
        result_text, _, result_cut = bound_text(_str(obj.get("result")), RESULT_TEXT_MAX_BYTES)
        # `structured_output` (with --json-schema; docs/claude-cli-protocol.md §2.5): the object the
        # StructuredOutput tool accepted; absent when none was produced (null counts as absent).
        structured, structured_cut = "", False
        if obj.get("structured_output") is not None:
            structured, _, structured_cut = _compact_json(obj["structured_output"], STRUCTURED_OUTPUT_MAX_BYTES)
        since = obj.get("model_usage_since_last_result")
        result = TurnResult(
            subtype=_str(obj.get("subtype")),
            is_error=obj.get("is_error") is True,
            api_error_status=_int(obj.get("api_error_status")),
            terminal_reason=_str(obj.get("terminal_reason")),
            num_turns=_int0(obj.get("num_turns")),
            result_text=result_text,
            result_truncated=result_cut,
            structured_output=structured,
            structured_output_truncated=structured_cut,
            duration_ms=_int(obj.get("duration_ms")),
            api_duration_ms=_int(obj.get("duration_api_ms")),
            total_cost_usd=_float(obj.get("total_cost_usd")),
            usage=main_usage,
            model_usage=model_usage,
            permission_denials=tuple(denials),
            errors=errors,
            result_index=_int0(obj.get("result_index")),
            stop_reason=_str(obj.get("stop_reason")),
            has_model_usage=has_model_usage,
            startup_failure_reason=_str(obj.get("startup_failure_reason")),
            usage_since_last_result=(
                _model_usage(since, main_usage.cache_write_1h_input_tokens)
                if since.__class__ is dict
                else None
            ),
        )
        return [result], None

    # ----------------------------------------------------------------------------------------------
    # stream_event (notes §2.6).

    def _stream_event(self, obj: dict[str, Any], line: bytes) -> _Handled:
        event = obj["event"]
        etype = event["type"]
        message_id = _str(obj.get("api_message_id"))
        observation = None
        if etype == "message_start":
            message = event.get("message")
            if message.__class__ is dict:
                message_id = message_id or _str(message.get("id"))
                usage = message.get("usage")
                model = _str(message.get("model"))
                if usage.__class__ is dict and message_id and model != SYNTHETIC_MODEL:
                    observation = (message_id, model, usage, False)
        elif etype == "message_delta":
            usage = event.get("usage")
            if usage.__class__ is dict and message_id:
                observation = (message_id, "", usage, True)
        if not self._include_partial:
            # The run did not ask for partial messages: no event, but the usage still counts.
            return [], observation
        return [_partial_delta(event, etype, message_id)], observation

    # ----------------------------------------------------------------------------------------------
    # Other top-level types (notes §2.7, §3).

    def _rate_limit(self, obj: dict[str, Any], line: bytes) -> _Handled:
        info = obj.get("rate_limit_info")
        if info.__class__ is not dict:
            info = {}
        payload = RateLimit(
            _str(info.get("status")),
            _int(info.get("resetsAt")),
            _str(info.get("rateLimitType")),
            _float(info.get("utilization")),
        )
        return [payload], None

    def _control_response(self, obj: dict[str, Any], line: bytes) -> _Handled:
        response = obj["response"]
        success = response.get("subtype") == "success"
        error = response.get("error")
        payload = ControlResponse(
            _str(response.get("request_id")),
            success,
            bound_text(error, SHORT_TEXT_MAX_BYTES)[0] if error.__class__ is str else "",
            _str(response.get("error_code")),
            "",
            body if (body := response.get("response")).__class__ is dict else {},
        )
        return [payload], None

    def _control_request(self, obj: dict[str, Any], line: bytes) -> _Handled:
        request = obj["request"]
        tool_name = request.get("tool_name")
        tool_use_id = request.get("tool_use_id")
        hook_input = request.get("input")
        if hook_input.__class__ is dict:  # hook_callback carries the tool inside ``input`` (CAP 16/23)
            tool_name = tool_name or hook_input.get("tool_name")
            tool_use_id = tool_use_id or hook_input.get("tool_use_id")
        payload = ControlRequest(
            _str(obj.get("request_id")),
            _str(request.get("subtype")),
            _str(tool_name),
            _str(tool_use_id),
            request,
        )
        return [payload], None

    def _control_cancel(self, obj: dict[str, Any], line: bytes) -> _Handled:
        # The CLI withdraws a request it sent (notes §3.1); the supervisor must drop its answer.
        payload = ControlRequest(_str(obj.get("request_id")), "control_cancel_request", "", "", {})
        return [payload], None

    def _tool_progress(self, obj: dict[str, Any], line: bytes) -> _Handled:
        payload = ToolProgress(
            _str(obj.get("tool_use_id")),
            _str(obj.get("tool_name")),
            _float(obj.get("elapsed_time_seconds")) or 0.0,
        )
        return [payload], None

    def _keep_alive(self, obj: dict[str, Any], line: bytes) -> _Handled:
        # Heartbeat without payload (notes §2.7): nothing to report.
        return [], None


# --------------------------------------------------------------------------------------------------
# system subtypes without state.


def _api_retry(obj: dict[str, Any]) -> ApiRetry:
    return ApiRetry(
        _int0(obj.get("attempt")),
        _int0(obj.get("max_retries")),
        _int0(obj.get("retry_delay_ms")),
        _int(obj.get("error_status")),
        _str(obj.get("error")),
    )


def _status(obj: dict[str, Any]) -> Compaction | CliStatus:
    status = _str(obj.get("status"))
    if status == "compacting":  # notes §2.2; CAP 20
        return Compaction(False)
    return CliStatus(status, _str(obj.get("permissionMode")))


def _compact_boundary(obj: dict[str, Any]) -> Compaction:
    meta = obj.get("compact_metadata")
    if meta.__class__ is not dict:
        meta = {}
    return Compaction(
        True,
        _str(meta.get("trigger")),
        _int0(meta.get("pre_tokens")),
        _int0(meta.get("post_tokens")),
        _int(meta.get("duration_ms")),
    )


def _session_writes_lost(obj: dict[str, Any]) -> SessionWritesLost:
    def names(value: Any) -> tuple[str, ...]:
        return tuple(bound_text(name, 256)[0] for name in _strings(value)[:16])

    return SessionWritesLost(
        bound_text(_str(obj.get("error_code")), 256)[0],
        names(obj.get("lost")),
        names(obj.get("transcript_session_ids")),
    )


def _hook(obj: dict[str, Any], kind: HookEventKind) -> HookEvent:
    output = obj.get("output")
    if output.__class__ is not str:
        output = _str(obj.get("stdout")) + _str(obj.get("stderr"))
    return HookEvent(
        kind,
        _str(obj.get("hook_id")),
        _str(obj.get("hook_name")),
        _str(obj.get("hook_event")),
        _int(obj.get("exit_code")),
        _str(obj.get("outcome")),
        bound_text(output, SHORT_TEXT_MAX_BYTES)[0],
        _int(obj.get("duration_ms")),
        _str(obj.get("tool_use_id")),
    )


def _hook_started(obj: dict[str, Any]) -> HookEvent:
    return _hook(obj, HookEventKind.STARTED)


def _hook_progress(obj: dict[str, Any]) -> HookEvent:
    return _hook(obj, HookEventKind.PROGRESS)


def _hook_response(obj: dict[str, Any]) -> HookEvent:
    return _hook(obj, HookEventKind.RESPONSE)


def _permission_denied(obj: dict[str, Any]) -> PermissionDenied:
    return PermissionDenied(
        _str(obj.get("tool_name")),
        _str(obj.get("tool_use_id")),
        _str(obj.get("decision_reason_type")),
        bound_text(_str(obj.get("decision_reason")), SHORT_TEXT_MAX_BYTES)[0],
        bound_text(_str(obj.get("message")), SHORT_TEXT_MAX_BYTES)[0],
    )


def _task(obj: dict[str, Any], kind: TaskEventKind) -> TaskEvent:
    usage = obj.get("usage")
    if usage.__class__ is not dict:
        usage = {}
    status = obj.get("status")
    patch = obj.get("patch")
    if status.__class__ is not str and patch.__class__ is dict:  # task_updated carries a patch (CAP 09)
        status = patch.get("status")
    return TaskEvent(
        kind,
        _str(obj.get("task_id")),
        _str(obj.get("tool_use_id")),
        _str(obj.get("description")),
        _str(obj.get("subagent_type")),
        _str(obj.get("task_type")),
        _str(status),
        bound_text(_str(obj.get("summary")), SHORT_TEXT_MAX_BYTES)[0],
        obj.get("is_backgrounded") is True,
        _int0(usage.get("total_tokens")),
        _int0(usage.get("tool_uses")),
        _int(usage.get("duration_ms")),
    )


def _task_started(obj: dict[str, Any]) -> TaskEvent:
    return _task(obj, TaskEventKind.STARTED)


def _task_progress(obj: dict[str, Any]) -> TaskEvent:
    return _task(obj, TaskEventKind.PROGRESS)


def _task_updated(obj: dict[str, Any]) -> TaskEvent:
    return _task(obj, TaskEventKind.UPDATED)


def _task_notification(obj: dict[str, Any]) -> TaskEvent:
    return _task(obj, TaskEventKind.NOTIFICATION)


_DELTA_KINDS = {
    "text_delta": (PartialDeltaKind.TEXT_DELTA, "text"),
    "thinking_delta": (PartialDeltaKind.THINKING_DELTA, "thinking"),
    "input_json_delta": (PartialDeltaKind.INPUT_JSON_DELTA, "partial_json"),
    "signature_delta": (PartialDeltaKind.SIGNATURE_DELTA, "signature"),
}

_EVENT_KINDS = {
    "message_start": PartialDeltaKind.MESSAGE_START,
    "content_block_start": PartialDeltaKind.CONTENT_BLOCK_START,
    "content_block_stop": PartialDeltaKind.CONTENT_BLOCK_STOP,
    "message_delta": PartialDeltaKind.MESSAGE_DELTA,
    "message_stop": PartialDeltaKind.MESSAGE_STOP,
}


_TYPED_EVENT_KINDS: dict[type, PartialDeltaKind] = {
    MessageStart: PartialDeltaKind.MESSAGE_START,
    ContentBlockStop: PartialDeltaKind.CONTENT_BLOCK_STOP,
    MessageStop: PartialDeltaKind.MESSAGE_STOP,
}


def _partial_delta(event: dict[str, Any], etype: str, message_id: str) -> PartialDelta:
    index = _int0(event.get("index"))
    if etype == "content_block_delta":
        delta = event.get("delta")
        dtype = delta.get("type") if delta.__class__ is dict else None
        kind, field = _DELTA_KINDS.get(dtype, (PartialDeltaKind.OTHER, ""))
        text = bound_text(_str(delta.get(field)), PARTIAL_TEXT_MAX_BYTES)[0] if field else ""
        return PartialDelta(kind, index, text, message_id)
    kind = _EVENT_KINDS.get(etype, PartialDeltaKind.OTHER)
    if kind is PartialDeltaKind.CONTENT_BLOCK_START:
        block = event.get("content_block")
        block_type = _str(block.get("type")) if block.__class__ is dict else ""
        return PartialDelta(kind, index, "", message_id, block_type)
    if kind is PartialDeltaKind.MESSAGE_DELTA:
        delta = event.get("delta")
        stop = _str(delta.get("stop_reason")) if delta.__class__ is dict else ""
        return PartialDelta(kind, index, "", message_id, "", stop)
    return PartialDelta(kind, index, "", message_id)


def _error_line(
    reason: ParseErrorReason, line: bytes, line_number: int, byte_offset: int, detail: str
) -> ParsedLine:
    return ("", "", "", "", [ParseError(reason, len(line), line_number, byte_offset, detail)], None)
