"""The script model: the turns the scripted Messages API answers with, and the requests it records.

A :class:`Script` is an ordered list of turns. Each turn is a :class:`Reply` (content blocks, streamed
as server-sent events by ``sse.py``) or an :class:`ApiError` (an HTTP error with the API's JSON error
body, possibly ``times`` times in a row). An optional :class:`RequestMatcher` restricts a turn to
matching requests, which is how a test tells a subagent's requests from the main thread's. Scripts
round-trip through JSON (``helix-runner serve --offline-script``); unknown keys are refused so a typo
in a hand-written script fails loudly. Every request the server receives becomes a
:class:`RecordedRequest`.
"""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, ClassVar, Literal

SESSION_HEADER = "x-claude-code-session-id"
"""The request header (CLI 2.1.x) naming the CLI session; turn uses are counted per session."""

DEFAULT_SIGNATURE = "c2NyaXB0ZWQtdGhpbmtpbmctc2lnbmF0dXJl"
"""Signature sent with scripted thinking blocks; the CLI stores it opaquely and sends it back."""

StopReason = Literal["end_turn", "tool_use", "max_tokens", "stop_sequence", "pause_turn", "refusal"]


class ScriptError(ValueError):
    """A script (dict or JSON) does not have the expected shape."""


def _check_keys(data: Mapping[str, Any], allowed: Iterable[str], what: str) -> None:
    """Reject unknown keys so that a typo in a hand-written script fails loudly instead of being ignored."""
    if not isinstance(data, Mapping):
        raise ScriptError(f"{what} must be a JSON object, got {type(data).__name__}")
    unknown = sorted(set(data) - set(allowed))
    if unknown:
        raise ScriptError(f"{what}: unknown key(s) {unknown}; allowed: {sorted(allowed)}")


def _drop_none(data: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in data.items() if value is not None}


# --------------------------------------------------------------------------------------------------
# Content blocks
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class TextBlock:
    """A ``text`` content block; streamed word by word as ``text_delta`` events."""

    text: str

    def to_dict(self) -> dict[str, Any]:
        return {"type": "text", "text": self.text}


@dataclass(frozen=True)
class ThinkingBlock:
    """A ``thinking`` block; streamed as ``thinking_delta`` events followed by one ``signature_delta``."""

    thinking: str
    signature: str = DEFAULT_SIGNATURE

    def to_dict(self) -> dict[str, Any]:
        return {"type": "thinking", "thinking": self.thinking, "signature": self.signature}


@dataclass(frozen=True)
class ToolUseBlock:
    """A ``tool_use`` block for any tool name and input; the CLI runs the tool and returns its result.

    ``id`` defaults to a fresh ``toolu_...`` id per reply so a turn with ``times > 1`` stays valid.
    """

    name: str
    input: Mapping[str, Any] = field(default_factory=dict)
    id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_none({"type": "tool_use", "id": self.id, "name": self.name, "input": dict(self.input)})


ContentBlock = TextBlock | ThinkingBlock | ToolUseBlock


def _block_from_dict(data: Mapping[str, Any]) -> ContentBlock:
    kind = data.get("type") if isinstance(data, Mapping) else None
    if kind == "text":
        _check_keys(data, ("type", "text"), "text block")
        return TextBlock(text=str(data["text"]))
    if kind == "thinking":
        _check_keys(data, ("type", "thinking", "signature"), "thinking block")
        return ThinkingBlock(
            thinking=str(data["thinking"]), signature=str(data.get("signature", DEFAULT_SIGNATURE))
        )
    if kind == "tool_use":
        _check_keys(data, ("type", "id", "name", "input"), "tool_use block")
        tool_input = data.get("input", {})
        if not isinstance(tool_input, Mapping):
            raise ScriptError(f"tool_use block {data.get('name')!r}: input must be an object")
        return ToolUseBlock(name=str(data["name"]), input=dict(tool_input), id=data.get("id"))
    raise ScriptError(f"content block must have type text, thinking or tool_use, got {data!r}")


# --------------------------------------------------------------------------------------------------
# Turns
# --------------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Usage:
    """Token counts reported for a reply (``message_start`` and ``message_delta``).

    The CLI turns these into ``result.usage``, ``result.modelUsage`` and ``total_cost_usd``.
    """

    input_tokens: int = 100
    output_tokens: int = 20
    cache_creation_input_tokens: int = 0
    cache_read_input_tokens: int = 0

    _KEYS: ClassVar[tuple[str, ...]] = (
        "input_tokens",
        "output_tokens",
        "cache_creation_input_tokens",
        "cache_read_input_tokens",
    )

    def to_dict(self) -> dict[str, int]:
        return {key: getattr(self, key) for key in self._KEYS}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Usage:
        _check_keys(data, cls._KEYS, "usage")
        return cls(**{key: int(value) for key, value in data.items()})


@dataclass(frozen=True)
class RequestMatcher:
    """Restricts a turn to requests whose content matches; all given conditions must hold.

    Substring tests run over the *text* of the request: string contents, text blocks, tool results
    and tool inputs (ids, types and signatures are left out). ``first_user_contains`` is the reliable
    way to single out a subagent: its conversation starts with the prompt the Agent tool was given,
    while the main thread's conversation starts with the user's prompt (and merely mentions the
    subagent prompt later, inside a tool_use input).
    """

    contains: str | None = None
    """Anywhere in ``system`` or ``messages``."""
    system_contains: str | None = None
    first_user_contains: str | None = None
    last_user_contains: str | None = None
    not_contains: str | None = None
    """Must NOT occur anywhere in ``system`` or ``messages``."""
    model_contains: str | None = None
    tool_use_ids: tuple[str, ...] | None = None
    """The ids of every ``tool_use`` block in the request's messages, in order, exactly: what a forked
    or rewound session must carry (its history up to the cut, nothing after it)."""

    _KEYS: ClassVar[tuple[str, ...]] = (
        "contains",
        "system_contains",
        "first_user_contains",
        "last_user_contains",
        "not_contains",
        "model_contains",
        "tool_use_ids",
    )

    def matches(self, body: Any) -> bool:
        """Whether a parsed ``/v1/messages`` request body satisfies every condition."""
        if not isinstance(body, Mapping):
            return False
        messages = body.get("messages") if isinstance(body.get("messages"), list) else []
        system = _flatten_text(body.get("system"))
        everything = system + "\n" + _flatten_text(messages)
        user_messages = [m for m in messages if isinstance(m, Mapping) and m.get("role") == "user"]
        checks: list[tuple[str | None, Callable[[str], bool]]] = [
            (self.contains, lambda s: s in everything),
            (self.system_contains, lambda s: s in system),
            (
                self.first_user_contains,
                lambda s: bool(user_messages) and s in _flatten_text(user_messages[0]),
            ),
            (
                self.last_user_contains,
                lambda s: bool(user_messages) and s in _flatten_text(user_messages[-1]),
            ),
            (self.not_contains, lambda s: s not in everything),
            (self.model_contains, lambda s: s in str(body.get("model", ""))),
        ]
        if self.tool_use_ids is not None and tuple(_tool_use_ids(messages)) != tuple(self.tool_use_ids):
            return False
        return all(check(needle) for needle, check in checks if needle is not None)

    def to_dict(self) -> dict[str, Any]:
        out = _drop_none({key: getattr(self, key) for key in self._KEYS})
        if self.tool_use_ids is not None:
            out["tool_use_ids"] = list(self.tool_use_ids)
        return out

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestMatcher:
        _check_keys(data, cls._KEYS, "match")
        ids = data.get("tool_use_ids")
        if ids is not None and (not isinstance(ids, list) or not all(isinstance(i, str) for i in ids)):
            raise ScriptError("match: tool_use_ids must be a list of strings")
        return cls(**{key: str(value) for key, value in data.items() if key != "tool_use_ids"},
                   tool_use_ids=tuple(ids) if ids is not None else None)


def _tool_use_ids(messages: Any) -> list[str]:
    """The ids of the ``tool_use`` blocks of a request's messages, in order."""
    out: list[str] = []
    for message in messages if isinstance(messages, list) else []:
        content = message.get("content") if isinstance(message, Mapping) else None
        if isinstance(content, list):
            out.extend(str(b.get("id")) for b in content if isinstance(b, Mapping) and b.get("type") == "tool_use")
    return out


@dataclass(frozen=True)
class Reply:
    """A successful model reply, streamed as SSE (or returned whole to a non-streaming request).

    ``stop_reason`` defaults to ``tool_use`` when the content has a tool_use block, else ``end_turn``.
    ``model`` defaults to the model named in the request. ``chunk_delay`` (seconds) is slept between
    SSE events, to make a reply observable while it streams. ``times`` serves the same reply that many
    times.
    """

    content: Sequence[ContentBlock]
    stop_reason: StopReason | None = None
    usage: Usage = field(default_factory=Usage)
    model: str | None = None
    chunk_delay: float = 0.0
    times: int = 1
    match: RequestMatcher | None = None
    label: str | None = None
    """Free text shown in recordings and logs, to tell turns apart."""

    _KEYS: ClassVar[tuple[str, ...]] = (
        "kind",
        "content",
        "stop_reason",
        "usage",
        "model",
        "chunk_delay",
        "times",
        "match",
        "label",
    )

    def __post_init__(self) -> None:
        object.__setattr__(self, "content", tuple(self.content))
        if self.times < 1:
            raise ScriptError(f"reply {self.label or ''}: times must be >= 1")
        if self.chunk_delay < 0:
            raise ScriptError(f"reply {self.label or ''}: chunk_delay must be >= 0")

    @classmethod
    def text(cls, text: str, **kwargs: Any) -> Reply:
        """A reply with a single text block."""
        return cls(content=[TextBlock(text)], **kwargs)

    @classmethod
    def tool_use(
        cls,
        name: str,
        tool_input: Mapping[str, Any],
        *,
        text: str | None = None,
        tool_use_id: str | None = None,
        **kwargs: Any,
    ) -> Reply:
        """A reply that calls one tool, optionally preceded by a text block (as real models often do)."""
        blocks: list[ContentBlock] = [TextBlock(text)] if text else []
        blocks.append(ToolUseBlock(name=name, input=dict(tool_input), id=tool_use_id))
        return cls(content=blocks, **kwargs)

    @property
    def effective_stop_reason(self) -> str:
        if self.stop_reason is not None:
            return self.stop_reason
        return "tool_use" if any(isinstance(b, ToolUseBlock) for b in self.content) else "end_turn"

    def to_dict(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": "reply",
                "content": [block.to_dict() for block in self.content],
                "stop_reason": self.stop_reason,
                "usage": self.usage.to_dict(),
                "model": self.model,
                "chunk_delay": self.chunk_delay or None,
                "times": self.times if self.times != 1 else None,
                "match": self.match.to_dict() if self.match else None,
                "label": self.label,
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Reply:
        _check_keys(data, cls._KEYS, "reply")
        content = data.get("content")
        if isinstance(content, str):
            blocks: list[ContentBlock] = [TextBlock(content)]
        elif isinstance(content, list):
            blocks = [_block_from_dict(block) for block in content]
        else:
            raise ScriptError("reply: content must be a string or a list of content blocks")
        return cls(
            content=blocks,
            stop_reason=data.get("stop_reason"),
            usage=Usage.from_dict(data["usage"]) if "usage" in data else Usage(),
            model=data.get("model"),
            chunk_delay=float(data.get("chunk_delay", 0.0)),
            times=int(data.get("times", 1)),
            match=RequestMatcher.from_dict(data["match"]) if data.get("match") else None,
            label=data.get("label"),
        )


_ERROR_TYPES: dict[int, tuple[str, str]] = {
    # Status -> (error.type, default message), per the Messages API's documented error shapes.
    400: ("invalid_request_error", "Invalid request (scripted API error)."),
    401: ("authentication_error", "invalid x-api-key (scripted API error)"),
    403: ("permission_error", "Your API key does not have permission to use the specified resource."),
    404: ("not_found_error", "The requested resource could not be found."),
    413: ("request_too_large", "Request exceeds the maximum allowed number of bytes."),
    429: ("rate_limit_error", "Number of request tokens has exceeded your rate limit (scripted API error)."),
    500: ("api_error", "Internal server error (scripted API error)."),
    529: ("overloaded_error", "Overloaded (scripted API error)."),
}


@dataclass(frozen=True)
class ApiError:
    """An HTTP error answer with the API's body ``{"type":"error","error":{"type","message"},"request_id"}``.

    ``times`` errors are served before the script moves on to the next turn. ``error_type`` and
    ``message`` default from the status (e.g. 529 -> ``overloaded_error``). ``retry_after`` (seconds)
    and ``should_retry`` set the ``retry-after`` and ``x-should-retry`` headers the real API sends.
    """

    status: int
    times: int = 1
    error_type: str | None = None
    message: str | None = None
    retry_after: float | None = None
    should_retry: bool | None = None
    match: RequestMatcher | None = None
    label: str | None = None

    _KEYS: ClassVar[tuple[str, ...]] = (
        "kind",
        "status",
        "times",
        "error_type",
        "message",
        "retry_after",
        "should_retry",
        "match",
        "label",
    )

    def __post_init__(self) -> None:
        if not 400 <= self.status <= 599:
            raise ScriptError(f"error turn: status must be 4xx or 5xx, got {self.status}")
        if self.times < 1:
            raise ScriptError(f"error turn {self.label or self.status}: times must be >= 1")

    @property
    def effective_error_type(self) -> str:
        if self.error_type:
            return self.error_type
        return _ERROR_TYPES.get(
            self.status, ("invalid_request_error" if self.status < 500 else "api_error", "")
        )[0]

    @property
    def effective_message(self) -> str:
        if self.message:
            return self.message
        return _ERROR_TYPES.get(self.status, ("", f"HTTP {self.status} (scripted API error)."))[1]

    def body(self, request_id: str) -> dict[str, Any]:
        """The JSON error body, shaped like the real API's."""
        return {
            "type": "error",
            "error": {"type": self.effective_error_type, "message": self.effective_message},
            "request_id": request_id,
        }

    def to_dict(self) -> dict[str, Any]:
        return _drop_none(
            {
                "kind": "error",
                "status": self.status,
                "times": self.times if self.times != 1 else None,
                "error_type": self.error_type,
                "message": self.message,
                "retry_after": self.retry_after,
                "should_retry": self.should_retry,
                "match": self.match.to_dict() if self.match else None,
                "label": self.label,
            }
        )

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> ApiError:
        _check_keys(data, cls._KEYS, "error turn")
        if "status" not in data:
            raise ScriptError("error turn: status is required")
        return cls(
            status=int(data["status"]),
            times=int(data.get("times", 1)),
            error_type=data.get("error_type"),
            message=data.get("message"),
            retry_after=float(data["retry_after"]) if data.get("retry_after") is not None else None,
            should_retry=bool(data["should_retry"]) if data.get("should_retry") is not None else None,
            match=RequestMatcher.from_dict(data["match"]) if data.get("match") else None,
            label=data.get("label"),
        )


Turn = Reply | ApiError


def _turn_from_dict(data: Mapping[str, Any]) -> Turn:
    if not isinstance(data, Mapping):
        raise ScriptError(f"a turn must be a JSON object, got {type(data).__name__}")
    kind = data.get("kind", "error" if "status" in data else "reply")
    if kind == "reply":
        return Reply.from_dict(data)
    if kind == "error":
        return ApiError.from_dict(data)
    raise ScriptError(f"turn kind must be 'reply' or 'error', got {kind!r}")


def _default_fallback() -> Turn:
    return Reply.text("(scripted API: the script has no turn left for this request)", label="fallback")


@dataclass(frozen=True)
class Script:
    """The ordered turns the stand-in answers with, plus the fallback for requests beyond them.

    For each ``/v1/messages`` request the first turn that still has uses left and whose matcher (if
    any) accepts the request is served. Requests nothing matches get ``fallback`` and are recorded
    with ``outcome="fallback"``.
    """

    turns: Sequence[Turn] = ()
    fallback: Turn = field(default_factory=_default_fallback)

    def __post_init__(self) -> None:
        object.__setattr__(self, "turns", tuple(self.turns))

    def to_dict(self) -> dict[str, Any]:
        return {"turns": [turn.to_dict() for turn in self.turns], "fallback": self.fallback.to_dict()}

    @classmethod
    def from_dict(cls, data: Mapping[str, Any] | Sequence[Mapping[str, Any]]) -> Script:
        """Build a script from ``{"turns": [...], "fallback": {...}}`` or a bare list of turns."""
        if isinstance(data, Sequence) and not isinstance(data, str | bytes):
            data = {"turns": list(data)}
        _check_keys(data, ("turns", "fallback"), "script")
        turns = data.get("turns", [])
        if not isinstance(turns, list):
            raise ScriptError("script: turns must be a list")
        fallback = _turn_from_dict(data["fallback"]) if data.get("fallback") else _default_fallback()
        return cls(turns=[_turn_from_dict(turn) for turn in turns], fallback=fallback)

    def to_json(self, indent: int | None = 2) -> str:
        return json.dumps(self.to_dict(), indent=indent)

    @classmethod
    def from_json(cls, text: str) -> Script:
        try:
            return cls.from_dict(json.loads(text))
        except json.JSONDecodeError as exc:
            raise ScriptError(f"script is not valid JSON: {exc}") from exc

    @classmethod
    def load(cls, path: str | os.PathLike[str]) -> Script:
        """Read a script from a JSON file (the format :meth:`to_dict` writes)."""
        return cls.from_json(Path(path).read_text(encoding="utf-8"))

    def save(self, path: str | os.PathLike[str]) -> None:
        Path(path).write_text(self.to_json() + "\n", encoding="utf-8")


# --------------------------------------------------------------------------------------------------
# Recording
# --------------------------------------------------------------------------------------------------

Outcome = Literal["reply", "error", "fallback", "count_tokens", "unknown_endpoint", "bad_request"]

_TEXT_SKIP_KEYS = frozenset({"type", "id", "tool_use_id", "signature", "cache_control", "media_type", "data"})


def _flatten_text(value: Any) -> str:
    """All human-readable strings inside a request's system/messages, joined by newlines."""
    if isinstance(value, str):
        return value
    if isinstance(value, Mapping):
        return "\n".join(_flatten_text(v) for k, v in value.items() if k not in _TEXT_SKIP_KEYS)
    if isinstance(value, list | tuple):
        return "\n".join(_flatten_text(v) for v in value)
    return ""


@dataclass(frozen=True)
class RecordedRequest:
    """One HTTP request the stand-in received, with how it was answered."""

    index: int
    method: str
    path: str
    query: str
    headers: Mapping[str, str]
    """Lower-cased names; ``x-api-key`` and ``authorization`` values are redacted."""
    body: Any
    """Parsed JSON body, or the raw text if it was not JSON, or None if empty."""
    outcome: Outcome
    status: int
    turn_index: int | None
    """Index into ``Script.turns`` of the turn that answered, None for fallback and non-message calls."""
    label: str | None
    received_at: float
    """``time.monotonic()`` when the request was read."""
    api_key_sha256: str | None = None
    """SHA-256 (hex) of the ``x-api-key`` the client sent, None without one: tests can check which key
    arrived while the key itself is recorded nowhere."""

    @property
    def session_id(self) -> str:
        """The CLI session that sent the request (``""`` when it did not say)."""
        return self.headers.get(SESSION_HEADER, "")

    @property
    def messages(self) -> list[dict[str, Any]]:
        body = self.body if isinstance(self.body, Mapping) else {}
        messages = body.get("messages")
        return list(messages) if isinstance(messages, list) else []

    @property
    def system_text(self) -> str:
        return _flatten_text(self.body.get("system")) if isinstance(self.body, Mapping) else ""

    @property
    def model(self) -> str | None:
        return self.body.get("model") if isinstance(self.body, Mapping) else None

    @property
    def streaming(self) -> bool:
        return bool(isinstance(self.body, Mapping) and self.body.get("stream"))

    def tool_results(self) -> list[dict[str, Any]]:
        """The ``tool_result`` blocks of the last user message: what the model is being told."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                content = message.get("content")
                if isinstance(content, list):
                    return [b for b in content if isinstance(b, Mapping) and b.get("type") == "tool_result"]
                return []
        return []

    def tool_result_text(self, tool_use_id: str | None = None) -> str:
        """Text of the last user message's tool results (optionally only the one for ``tool_use_id``)."""
        return "\n".join(
            _flatten_text(block.get("content"))
            for block in self.tool_results()
            if tool_use_id is None or block.get("tool_use_id") == tool_use_id
        )

    def describe(self) -> str:
        """One line for a failing test: which session sent it, the calls in its history, what it tells the model."""
        last = self.tool_result_text()[:160].replace("\n", " ")
        return (f"#{self.index} {self.outcome} session={self.session_id[:8]} messages={len(self.messages)} "
                f"calls={_tool_use_ids(self.messages)} last results={last!r}")

    def text(self) -> str:
        """All text in system and messages, as matched by :class:`RequestMatcher`."""
        return self.system_text + "\n" + _flatten_text(self.messages)
