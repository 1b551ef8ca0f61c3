"""A loopback stand-in for the Anthropic Messages API that answers from a script.

The real Claude Code CLI can be pointed at it (``ANTHROPIC_BASE_URL=http://127.0.0.1:PORT``) and then
runs exactly as it would against the real API: it streams the scripted replies, executes the tools
they ask for (Bash, Write, Agent, ...) and sends the tool results back in its next request. This makes
the CLI's behaviour reproducible without credentials, which the runner's "offline mode" and its tests
rely on.

A :class:`Script` is an ordered list of turns. Each turn is a :class:`Reply` (content blocks streamed
as server-sent events) or an :class:`ApiError` (an HTTP error with the API's JSON error body, possibly
``times`` times in a row). An optional :class:`RequestMatcher` restricts a turn to matching requests,
which is how a test tells a subagent's requests from the main thread's. When no turn is left, a
configurable fallback answers so that a stray request never hangs. Every request is recorded as a
:class:`RecordedRequest`.

Each CLI process plays the script from its start: the CLI sends its session id with every request
(header ``x-claude-code-session-id``, shared by its subagents), and the stand-in keeps how many uses
each turn has left per session. So in offline mode every phase gets the whole script, whatever the
phases before it used. Requests without that header (``curl``, the unit tests) share one state.

Example::

    script = Script([Reply.tool_use("Bash", {"command": "echo hi"}), Reply.text("done")])
    with ScriptedApi(script) as api:
        env = api.cli_env(home="/tmp/home")
        argv = [claude, "-p", "hi", "--output-format", "stream-json", "--verbose", "--dangerously-skip-permissions"]
        subprocess.run(argv, env=env, cwd=workdir, timeout=60)
        assert api.message_requests()[1].tool_results()[0]["content"] == "hi"

Only the standard library is used, so the module can run anywhere the runner runs.
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import hashlib
import itertools
import json
import logging
import os
import re
import signal
import socket
import threading
import time
import zlib
from collections import OrderedDict
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from types import TracebackType
from typing import Any, ClassVar, Literal, Self
from urllib.parse import urlsplit

__all__ = [
    "DEFAULT_API_KEY",
    "DEFAULT_MODEL",
    "SESSION_HEADER",
    "ApiError",
    "ContentBlock",
    "RecordedRequest",
    "Reply",
    "RequestMatcher",
    "Script",
    "ScriptError",
    "ScriptedApi",
    "TextBlock",
    "ThinkingBlock",
    "ToolUseBlock",
    "Turn",
    "Usage",
    "cli_env",
    "main",
]

_log = logging.getLogger(__name__)

DEFAULT_API_KEY = "sk-ant-scripted-offline-key"
"""The API key handed to the CLI; the stand-in accepts any key, the CLI only needs one to be set."""

DEFAULT_MODEL = "claude-scripted"
"""Model name used in replies when neither the turn nor the request names one."""

SESSION_HEADER = "x-claude-code-session-id"
"""The request header (CLI 2.1.x) naming the CLI session; turn uses are counted per session."""

MAX_SESSIONS = 4096
"""Sessions whose turn state is kept; the least recently seen one is forgotten beyond this."""

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

    _KEYS: ClassVar[tuple[str, ...]] = (
        "contains",
        "system_contains",
        "first_user_contains",
        "last_user_contains",
        "not_contains",
        "model_contains",
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
        return all(check(needle) for needle, check in checks if needle is not None)

    def to_dict(self) -> dict[str, str]:
        return _drop_none({key: getattr(self, key) for key in self._KEYS})

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> RequestMatcher:
        _check_keys(data, cls._KEYS, "match")
        return cls(**{key: str(value) for key, value in data.items()})


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

    def text(self) -> str:
        """All text in system and messages, as matched by :class:`RequestMatcher`."""
        return self.system_text + "\n" + _flatten_text(self.messages)


# --------------------------------------------------------------------------------------------------
# SSE rendering
# --------------------------------------------------------------------------------------------------


def _sse(event: str, data: Mapping[str, Any]) -> bytes:
    return f"event: {event}\ndata: {json.dumps(data, separators=(',', ':'))}\n\n".encode()


def _word_chunks(text: str) -> list[str]:
    """Split text into word-sized deltas (each keeps its trailing whitespace), like the API streams."""
    return re.findall(r"\s*\S+\s*|\s+", text) or [""]


def _fixed_chunks(text: str, size: int = 24) -> list[str]:
    return [text[i : i + size] for i in range(0, len(text), size)] or [""]


def _render_blocks(reply: Reply, new_tool_id: Callable[[], str]) -> list[dict[str, Any]]:
    """The reply's content as API content blocks, with tool ids filled in."""
    rendered: list[dict[str, Any]] = []
    for block in reply.content:
        data = block.to_dict()
        if isinstance(block, ToolUseBlock) and block.id is None:
            data = {"type": "tool_use", "id": new_tool_id(), "name": block.name, "input": dict(block.input)}
        rendered.append(data)
    return rendered


def _message_json(message_id: str, model: str, blocks: list[dict[str, Any]], reply: Reply) -> dict[str, Any]:
    return {
        "id": message_id,
        "type": "message",
        "role": "assistant",
        "model": model,
        "content": blocks,
        "stop_reason": reply.effective_stop_reason,
        "stop_sequence": None,
        "usage": reply.usage.to_dict(),
    }


def _sse_events(message_id: str, model: str, blocks: list[dict[str, Any]], reply: Reply) -> Iterator[bytes]:
    """The event sequence the Messages API streams for one message."""
    usage = reply.usage
    start_usage = {
        "input_tokens": usage.input_tokens,
        "cache_creation_input_tokens": usage.cache_creation_input_tokens,
        "cache_read_input_tokens": usage.cache_read_input_tokens,
        "output_tokens": 1,
    }
    yield _sse(
        "message_start",
        {
            "type": "message_start",
            "message": {
                "id": message_id,
                "type": "message",
                "role": "assistant",
                "model": model,
                "content": [],
                "stop_reason": None,
                "stop_sequence": None,
                "usage": start_usage,
            },
        },
    )
    yield _sse("ping", {"type": "ping"})
    for index, block in enumerate(blocks):
        kind = block["type"]
        if kind == "text":
            start: dict[str, Any] = {"type": "text", "text": ""}
            deltas = [{"type": "text_delta", "text": chunk} for chunk in _word_chunks(block["text"])]
        elif kind == "thinking":
            start = {"type": "thinking", "thinking": ""}
            deltas = [{"type": "thinking_delta", "thinking": c} for c in _word_chunks(block["thinking"])]
            deltas.append({"type": "signature_delta", "signature": block["signature"]})
        else:
            start = {"type": "tool_use", "id": block["id"], "name": block["name"], "input": {}}
            # The API opens with an empty partial_json, then sends the JSON text in arbitrary pieces.
            payload = json.dumps(block["input"], separators=(",", ":"))
            deltas = [{"type": "input_json_delta", "partial_json": ""}]
            deltas += [{"type": "input_json_delta", "partial_json": c} for c in _fixed_chunks(payload)]
        yield _sse(
            "content_block_start", {"type": "content_block_start", "index": index, "content_block": start}
        )
        for delta in deltas:
            yield _sse("content_block_delta", {"type": "content_block_delta", "index": index, "delta": delta})
        yield _sse("content_block_stop", {"type": "content_block_stop", "index": index})
    yield _sse(
        "message_delta",
        {
            "type": "message_delta",
            "delta": {"stop_reason": reply.effective_stop_reason, "stop_sequence": None},
            "usage": {**start_usage, "output_tokens": usage.output_tokens},
        },
    )
    yield _sse("message_stop", {"type": "message_stop"})


# --------------------------------------------------------------------------------------------------
# Child environment for the CLI
# --------------------------------------------------------------------------------------------------

_STRIPPED_ENV_PREFIXES = ("ANTHROPIC_", "CLAUDE_")
_STRIPPED_ENV_NAMES = frozenset({"CLAUDECODE"})


def cli_env(
    base_url: str,
    *,
    home: str | os.PathLike[str],
    api_key: str = DEFAULT_API_KEY,
    max_retries: int | None = 2,
    tmpdir: str | os.PathLike[str] | None = None,
    base_env: Mapping[str, str] | None = None,
    extra: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Environment for a ``claude`` child process that talks to the stand-in at ``base_url``.

    Starts from ``base_env`` (default: this process's environment) minus every ``ANTHROPIC_*``,
    ``CLAUDE_*`` and ``CLAUDECODE`` variable, so no real credentials, endpoints or config dirs leak
    in. ``home`` becomes ``HOME`` so ``~/.claude`` state is private to the run; ``tmpdir`` (default
    ``<home>/tmp``) becomes ``CLAUDE_CODE_TMPDIR`` for the CLI's task output files.

    Retry knobs (CLI 2.1.330, read from its bundle and checked against it): ``CLAUDE_CODE_MAX_RETRIES``
    caps the retries of every retryable error (429, 5xx, 529 and also 401; default 10, clamped to 15).
    The backoff between retries cannot be shortened: it starts at 500 ms and doubles (25 % jitter, 32 s
    cap); ``CLAUDE_CODE_OVERLOADED_RETRY_BASE_DELAY_MS`` exists but its minimum is its 500 ms default,
    and a ``retry-after`` header can only lengthen it. To fail fast instead, script the error with
    ``should_retry=False`` (header ``x-should-retry: false``), which the CLI obeys without retrying.
    ``max_retries=None`` leaves the CLI's default.
    """
    source = os.environ if base_env is None else base_env
    env = {
        key: value
        for key, value in source.items()
        if not key.startswith(_STRIPPED_ENV_PREFIXES) and key not in _STRIPPED_ENV_NAMES
    }
    home_path = Path(home)
    tmp_path = Path(tmpdir) if tmpdir is not None else home_path / "tmp"
    tmp_path.mkdir(parents=True, exist_ok=True)
    env.update(
        {
            "HOME": str(home_path),
            "ANTHROPIC_BASE_URL": base_url,
            "ANTHROPIC_API_KEY": api_key,
            "CLAUDE_CODE_DISABLE_NONESSENTIAL_TRAFFIC": "1",
            "CLAUDE_CODE_TMPDIR": str(tmp_path),
            "DISABLE_AUTOUPDATER": "1",
            # The CLI refuses --dangerously-skip-permissions as root unless it believes it is sandboxed.
            "IS_SANDBOX": "1",
        }
    )
    if max_retries is not None:
        env["CLAUDE_CODE_MAX_RETRIES"] = str(max_retries)
    env.update(extra or {})
    return env


# --------------------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------------------


class _Server(ThreadingHTTPServer):
    """ThreadingHTTPServer that knows its open connections so that stop() can cut them."""

    daemon_threads = True
    block_on_close = False
    allow_reuse_address = True

    def __init__(self, address: tuple[str, int], owner: ScriptedApi) -> None:
        self.owner = owner
        self.stopping = threading.Event()
        self._connections: set[socket.socket] = set()
        self._connections_lock = threading.Lock()
        super().__init__(address, _Handler)

    def process_request(self, request: Any, client_address: Any) -> None:
        with self._connections_lock:
            self._connections.add(request)
        super().process_request(request, client_address)

    def shutdown_request(self, request: Any) -> None:
        with self._connections_lock:
            self._connections.discard(request)
        super().shutdown_request(request)

    def cut_connections(self) -> None:
        with self._connections_lock:
            connections = list(self._connections)
        for conn in connections:
            try:
                conn.shutdown(socket.SHUT_RDWR)
            except OSError:
                pass


class _Handler(BaseHTTPRequestHandler):
    """Routes each HTTP request to the owning :class:`ScriptedApi`."""

    protocol_version = "HTTP/1.1"  # keep-alive and chunked SSE, as the real API serves them
    server_version = "helix-scripted-api"
    timeout = 120  # an idle keep-alive connection is dropped after this; stop() cuts them anyway
    server: _Server

    def do_POST(self) -> None:
        self.server.owner._handle(self)

    def do_GET(self) -> None:
        self.server.owner._handle(self)

    def do_HEAD(self) -> None:
        self.server.owner._handle(self)

    def do_PUT(self) -> None:
        self.server.owner._handle(self)

    def do_DELETE(self) -> None:
        self.server.owner._handle(self)

    def log_message(self, format: str, *args: Any) -> None:
        _log.debug("%s %s", self.address_string(), format % args)


class _TurnState:
    """A script turn and how many of its uses are left."""

    def __init__(self, index: int, turn: Turn) -> None:
        self.index = index
        self.turn = turn
        self.remaining = turn.times


class ScriptedApi:
    """The stand-in server: answers ``/v1/messages`` from a :class:`Script` and records every request.

    Runs an HTTP server on a daemon thread, so it serves sync tests, async tests and a foreground
    command alike. Use it as a context manager (``with`` or ``async with``) or call :meth:`start` /
    :meth:`stop`. ``port=0`` (default) picks a free ephemeral port; read it back from :attr:`base_url`.
    """

    def __init__(
        self,
        script: Script | Mapping[str, Any] | Sequence[Turn] | None = None,
        *,
        host: str = "127.0.0.1",
        port: int = 0,
    ) -> None:
        self._host = host
        self._port = port
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)
        self._requests: list[RecordedRequest] = []
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._ids = itertools.count(1)
        self.set_script(script)

    # ---- lifecycle ---------------------------------------------------------------------------------

    def start(self) -> Self:
        """Bind and start serving; returns once the socket accepts connections."""
        if self._server is not None:
            raise RuntimeError("ScriptedApi is already running")
        self._server = _Server((self._host, self._port), self)
        self._thread = threading.Thread(
            target=self._server.serve_forever,
            kwargs={"poll_interval": 0.05},
            name=f"scripted-api:{self._server.server_address[1]}",
            daemon=True,
        )
        self._thread.start()
        _log.info("scripted Messages API listening on %s", self.base_url)
        return self

    def stop(self, timeout: float = 5.0) -> None:
        """Stop serving: abort replies still streaming, close open connections, join the thread.

        Safe to call twice. Never blocks longer than about ``timeout`` seconds.
        """
        server, thread = self._server, self._thread
        if server is None:
            return
        server.stopping.set()
        server.shutdown()
        server.cut_connections()
        server.server_close()
        if thread is not None:
            thread.join(timeout)
        self._server = None
        self._thread = None

    def __enter__(self) -> Self:
        return self.start()

    def __exit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.stop()

    async def __aenter__(self) -> Self:
        return await asyncio.to_thread(self.start)

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await asyncio.to_thread(self.stop)

    @property
    def running(self) -> bool:
        return self._server is not None

    @property
    def port(self) -> int:
        if self._server is None:
            raise RuntimeError("ScriptedApi is not running")
        return int(self._server.server_address[1])

    @property
    def base_url(self) -> str:
        """What to put in ``ANTHROPIC_BASE_URL``, e.g. ``http://127.0.0.1:41234``."""
        return f"http://{self._host}:{self.port}"

    def cli_env(self, home: str | os.PathLike[str], **kwargs: Any) -> dict[str, str]:
        """:func:`cli_env` for this server's URL."""
        return cli_env(self.base_url, home=home, **kwargs)

    # ---- script ------------------------------------------------------------------------------------

    def set_script(self, script: Script | Mapping[str, Any] | Sequence[Turn] | None) -> None:
        """Replace the script (and forget how much of the old one every session used); recordings are kept."""
        if script is None:
            script = Script()
        elif isinstance(script, Mapping):
            script = Script.from_dict(script)
        elif not isinstance(script, Script):
            script = Script(turns=list(script))
        with self._lock:
            self._script = script
            self._sessions: OrderedDict[str, list[_TurnState]] = OrderedDict()

    @property
    def script(self) -> Script:
        return self._script

    def pending_turns(self, session_id: str = "") -> list[int]:
        """Indices of turns a session (default: requests without a session id) has uses left of.

        Empty once that session played the script completely; all turns for a session not seen yet.
        """
        with self._lock:
            states = self._sessions.get(session_id)
            if states is None:
                return list(range(len(self._script.turns)))
            return [state.index for state in states if state.remaining > 0]

    def _states_of(self, session_id: str) -> list[_TurnState]:
        """The turn state of a session, fresh from the script's start the first time (lock held)."""
        states = self._sessions.get(session_id)
        if states is None:
            states = self._sessions[session_id] = [_TurnState(i, t) for i, t in enumerate(self._script.turns)]
            if len(self._sessions) > MAX_SESSIONS:
                self._sessions.popitem(last=False)
        else:
            self._sessions.move_to_end(session_id)
        return states

    def _take_turn(self, body: Any, session_id: str = "") -> tuple[Turn, int | None]:
        with self._lock:
            for state in self._states_of(session_id):
                if state.remaining > 0 and (state.turn.match is None or state.turn.match.matches(body)):
                    state.remaining -= 1
                    return state.turn, state.index
        return self._script.fallback, None

    # ---- recording ---------------------------------------------------------------------------------

    @property
    def requests(self) -> list[RecordedRequest]:
        """Every request received so far, in arrival order."""
        with self._lock:
            return list(self._requests)

    def message_requests(self) -> list[RecordedRequest]:
        """Requests that were answered from the script or the fallback (``POST /v1/messages``)."""
        return [r for r in self.requests if r.outcome in ("reply", "error", "fallback")]

    def fallback_requests(self) -> list[RecordedRequest]:
        """Message requests that no scripted turn matched."""
        return [r for r in self.requests if r.outcome == "fallback"]

    def wait_for_requests(
        self,
        count: int,
        *,
        timeout: float,
        predicate: Callable[[RecordedRequest], bool] | None = None,
    ) -> list[RecordedRequest]:
        """Block until ``count`` message requests (or requests matching ``predicate``) were recorded.

        Returns them; raises TimeoutError after ``timeout`` seconds.
        """

        def selected() -> list[RecordedRequest]:
            if predicate is None:
                return [r for r in self._requests if r.outcome in ("reply", "error", "fallback")]
            return [r for r in self._requests if predicate(r)]

        with self._changed:
            if not self._changed.wait_for(lambda: len(selected()) >= count, timeout):
                raise TimeoutError(f"expected {count} request(s), got {len(selected())} within {timeout}s")
            return selected()

    async def wait_for_requests_async(
        self,
        count: int,
        *,
        # The wait runs in a worker thread, which cancelling the awaiting task cannot stop, so the bound
        # has to travel with the call instead of coming from asyncio.timeout().
        timeout: float,  # noqa: ASYNC109
        predicate: Callable[[RecordedRequest], bool] | None = None,
    ) -> list[RecordedRequest]:
        """:meth:`wait_for_requests` without blocking the event loop."""
        return await asyncio.to_thread(self.wait_for_requests, count, timeout=timeout, predicate=predicate)

    def _record(self, **fields: Any) -> None:
        with self._changed:
            self._requests.append(RecordedRequest(index=len(self._requests), **fields))
            self._changed.notify_all()

    # ---- request handling --------------------------------------------------------------------------

    def _next_id(self, prefix: str) -> str:
        return f"{prefix}_scripted{next(self._ids):06d}"

    def _handle(self, handler: _Handler) -> None:
        received_at = time.monotonic()
        split = urlsplit(handler.path)
        path = split.path.rstrip("/") or "/"
        raw = self._read_body(handler)
        body = self._parse_body(raw, handler.headers.get("content-encoding"))
        headers = {
            name.lower(): ("<redacted>" if name.lower() in ("x-api-key", "authorization") else value)
            for name, value in handler.headers.items()
        }
        api_key = handler.headers.get("x-api-key")
        api_key_sha256 = hashlib.sha256(api_key.encode()).hexdigest() if api_key is not None else None

        def record(
            outcome: Outcome, status: int, turn_index: int | None = None, label: str | None = None
        ) -> None:
            self._record(
                method=handler.command,
                path=path,
                query=split.query,
                headers=headers,
                body=body,
                outcome=outcome,
                status=status,
                turn_index=turn_index,
                label=label,
                received_at=received_at,
                api_key_sha256=api_key_sha256,
            )

        request_id = self._next_id("req")
        if handler.command == "POST" and path == "/v1/messages/count_tokens":
            # Rough count (about 4 characters per token); the CLI only uses it for estimates.
            tokens = max(1, len(json.dumps(body)) // 4) if body is not None else 1
            record("count_tokens", 200)
            self._send_json(handler, 200, {"input_tokens": tokens}, request_id)
            return
        if handler.command != "POST" or path != "/v1/messages":
            _log.warning("scripted API: unhandled %s %s", handler.command, handler.path)
            record("unknown_endpoint", 404)
            error = ApiError(404, message=f"scripted API does not serve {handler.command} {path}")
            self._send_json(handler, 404, error.body(request_id), request_id)
            return
        if not isinstance(body, Mapping) or not isinstance(body.get("messages"), list):
            record("bad_request", 400)
            error = ApiError(400, message="request body must be a JSON object with a messages list")
            self._send_json(handler, 400, error.body(request_id), request_id)
            return

        turn, turn_index = self._take_turn(body, handler.headers.get(SESSION_HEADER, ""))
        outcome: Outcome = (
            "fallback" if turn_index is None else ("error" if isinstance(turn, ApiError) else "reply")
        )
        if turn_index is None:
            _log.warning("scripted API: no scripted turn for request %s; serving the fallback", request_id)
        if isinstance(turn, ApiError):
            record(outcome, turn.status, turn_index, turn.label)
            extra_headers = {}
            if turn.retry_after is not None:
                extra_headers["retry-after"] = f"{turn.retry_after:g}"
            if turn.should_retry is not None:
                extra_headers["x-should-retry"] = "true" if turn.should_retry else "false"
            self._send_json(handler, turn.status, turn.body(request_id), request_id, extra_headers)
            return

        record(outcome, 200, turn_index, turn.label)
        model = turn.model or str(body.get("model") or DEFAULT_MODEL)
        blocks = _render_blocks(turn, lambda: self._next_id("toolu"))
        message_id = self._next_id("msg")
        if body.get("stream"):
            self._send_sse(
                handler, _sse_events(message_id, model, blocks, turn), turn.chunk_delay, request_id
            )
        else:
            self._send_json(handler, 200, _message_json(message_id, model, blocks, turn), request_id)

    @staticmethod
    def _read_body(handler: _Handler) -> bytes:
        if handler.headers.get("transfer-encoding", "").lower() == "chunked":
            parts = []
            while True:
                size = int(handler.rfile.readline().split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    handler.rfile.readline()  # the blank line after the last chunk (no trailers expected)
                    break
                parts.append(handler.rfile.read(size))
                handler.rfile.readline()
            return b"".join(parts)
        length = int(handler.headers.get("content-length") or 0)
        return handler.rfile.read(length) if length > 0 else b""

    @staticmethod
    def _parse_body(raw: bytes, encoding: str | None) -> Any:
        if not raw:
            return None
        try:
            if encoding and encoding.lower() == "gzip":
                raw = gzip.decompress(raw)
            elif encoding and encoding.lower() == "deflate":
                raw = zlib.decompress(raw)
        except (OSError, zlib.error):
            return raw.decode("utf-8", errors="replace")
        try:
            return json.loads(raw)
        except (json.JSONDecodeError, UnicodeDecodeError):
            return raw.decode("utf-8", errors="replace")

    @staticmethod
    def _send_json(
        handler: _Handler,
        status: int,
        payload: Any,
        request_id: str,
        extra_headers: Mapping[str, str] | None = None,
    ) -> None:
        data = json.dumps(payload).encode()
        try:
            reason = HTTPStatus(status).phrase
        except ValueError:
            reason = "Overloaded" if status == 529 else "Error"
        handler.send_response(status, reason)
        handler.send_header("content-type", "application/json")
        handler.send_header("content-length", str(len(data)))
        handler.send_header("request-id", request_id)
        for name, value in (extra_headers or {}).items():
            handler.send_header(name, value)
        handler.end_headers()
        if handler.command != "HEAD":
            handler.wfile.write(data)
        handler.wfile.flush()

    def _send_sse(self, handler: _Handler, events: Iterable[bytes], delay: float, request_id: str) -> None:
        stopping = handler.server.stopping
        handler.send_response(200)
        handler.send_header("content-type", "text/event-stream; charset=utf-8")
        handler.send_header("cache-control", "no-cache")
        handler.send_header("transfer-encoding", "chunked")
        handler.send_header("request-id", request_id)
        handler.end_headers()
        try:
            for number, event in enumerate(events):
                if number and delay and stopping.wait(delay):
                    handler.close_connection = True
                    return  # stopping: leave the stream unterminated, like a dropped connection
                handler.wfile.write(f"{len(event):x}\r\n".encode() + event + b"\r\n")
                handler.wfile.flush()
            handler.wfile.write(b"0\r\n\r\n")
            handler.wfile.flush()
        except (BrokenPipeError, ConnectionResetError):
            handler.close_connection = True  # the client went away (e.g. the CLI was interrupted)


# --------------------------------------------------------------------------------------------------
# Command line
# --------------------------------------------------------------------------------------------------


def main(argv: Sequence[str] | None = None) -> int:
    """Serve a script file in the foreground until SIGINT/SIGTERM (``python -m helix_runner.offline``)."""
    parser = argparse.ArgumentParser(description="Scripted stand-in for the Anthropic Messages API.")
    parser.add_argument("--script", type=Path, help="JSON script file (default: fallback replies only)")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=0, help="0 picks a free port")
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    script = Script.load(args.script) if args.script else Script()
    done = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: done.set())
    with ScriptedApi(script, host=args.host, port=args.port) as api:
        print(f"ANTHROPIC_BASE_URL={api.base_url}", flush=True)
        done.wait()
        requests = api.requests
    print(
        f"served {len(requests)} request(s), {sum(r.outcome == 'fallback' for r in requests)} by the fallback"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
