"""Reads the usage out of a Messages API answer as its bytes pass through the gateway.

A streamed answer (SSE) reports usage twice: ``message_start`` carries the input side (input,
cache read and cache write tokens) and a first output count, and ``message_delta`` the running
totals (the API's figures are cumulative, so a later value replaces an earlier one). An
``error`` event mid-stream (``overloaded_error``, ``api_error``) ends a stream that began with
200. A non-streamed answer carries ``usage`` in its JSON body. Only the lines that can carry these
are decoded (msgspec, typed: unknown fields skipped); the text and tool deltas in between are
passed over with a substring test, so metering costs the stream almost nothing.
"""

from __future__ import annotations

import msgspec

from helix_runner.domain.usage import TokenUsage

MAX_LINE_BYTES = 1024 * 1024  # a longer SSE line is not one that carries usage; it is skipped
MAX_JSON_BODY_BYTES = 8 * 1024 * 1024  # a larger non-streamed body is passed on unmetered


class _CacheCreation(msgspec.Struct):
    ephemeral_5m_input_tokens: int = 0
    ephemeral_1h_input_tokens: int = 0


class _ServerToolUse(msgspec.Struct):
    web_search_requests: int = 0


class _Usage(msgspec.Struct):
    input_tokens: int | None = None
    output_tokens: int | None = None
    cache_read_input_tokens: int | None = None
    cache_creation_input_tokens: int | None = None
    cache_creation: _CacheCreation | None = None
    server_tool_use: _ServerToolUse | None = None


class _Message(msgspec.Struct):
    model: str = ""
    usage: _Usage | None = None


class _Error(msgspec.Struct):
    type: str = ""
    message: str = ""


class _Event(msgspec.Struct):
    type: str = ""
    message: _Message | None = None
    usage: _Usage | None = None
    error: _Error | None = None
    model: str = ""  # a non-streamed message carries model and usage at the top level


_decode = msgspec.json.Decoder(_Event).decode
_FIELDS = ("input_tokens", "output_tokens", "cache_read_input_tokens", "cache_creation_input_tokens")


class UsageMeter:
    """Accumulates one answer's model, usage and in-stream error from its body as it passes."""

    def __init__(self, streaming: bool) -> None:
        self.streaming = streaming
        self.model = ""
        self.error_type = ""
        self.error_message = ""
        self._usage: dict[str, int] = {}
        self._cache_5m: int | None = None
        self._cache_1h: int | None = None
        self._web_searches = 0
        self._seen = False
        self._tail = b""
        self._skipping = False
        self._body: list[bytes] | None = None if streaming else []
        self._body_bytes = 0

    def feed(self, chunk: bytes) -> None:
        """The next bytes of the answer's body (as the client gets them)."""
        if not self.streaming:
            if self._body is not None:
                self._body_bytes += len(chunk)
                if self._body_bytes > MAX_JSON_BODY_BYTES:
                    self._body = None
                else:
                    self._body.append(chunk)
            return
        end = chunk.rfind(b"\n")
        if end < 0:
            self._hold(chunk)
            return
        if not self._tail and not self._skipping and b'"message_' not in chunk and b'"error"' not in chunk:
            if end + 1 < len(chunk):  # the usual delta: nothing to decode, nothing to copy
                self._hold(chunk[end + 1 :])
            return
        lines, rest = self._tail + chunk[: end + 1], chunk[end + 1 :]
        skipping, self._tail, self._skipping = self._skipping, b"", False
        if b'"message_' in lines or b'"error"' in lines:
            for line in lines.split(b"\n"):
                if skipping:  # the rest of a line too long to be one of ours
                    skipping = False
                    continue
                if line.startswith(b"data:"):
                    self._event(line[5:])
        self._hold(rest)

    def _hold(self, part: bytes) -> None:
        if self._skipping or not part:
            return
        if len(self._tail) + len(part) > MAX_LINE_BYTES:
            self._tail, self._skipping = b"", True
        else:
            self._tail += part

    def finish(self) -> None:
        """The body ended: decode a non-streamed answer."""
        if self.streaming:
            if self._tail.startswith(b"data:"):
                self._event(self._tail[5:])
            self._tail = b""
        elif self._body:
            self._event(b"".join(self._body))
            self._body = None

    def _event(self, data: bytes) -> None:
        try:
            event = _decode(data)
        except (msgspec.DecodeError, msgspec.ValidationError):
            return
        if event.type == "message_start" and event.message is not None:
            self.model = event.message.model or self.model
            self._add(event.message.usage)
        elif event.type == "message_delta":
            self._add(event.usage)
        elif event.type == "message":  # a non-streamed answer
            self.model = event.model or self.model
            self._add(event.usage)
        elif event.type == "error" and event.error is not None:
            self.error_type, self.error_message = event.error.type, event.error.message

    def _add(self, usage: _Usage | None) -> None:
        if usage is None:
            return
        self._seen = True
        for name in _FIELDS:  # cumulative: the latest figure stands
            value = getattr(usage, name)
            if value is not None:
                self._usage[name] = value
        if usage.cache_creation is not None:
            self._cache_5m = usage.cache_creation.ephemeral_5m_input_tokens
            self._cache_1h = usage.cache_creation.ephemeral_1h_input_tokens
        if usage.server_tool_use is not None:
            self._web_searches = usage.server_tool_use.web_search_requests

    @property
    def usage(self) -> TokenUsage | None:
        """The answer's usage (None when it reported none): cache writes split by lifetime when the
        API said so, else counted as 5-minute writes."""
        if not self._seen:
            return None
        u = self._usage
        written = u.get("cache_creation_input_tokens", 0)
        five, hour = (written, 0) if self._cache_5m is None else (self._cache_5m, self._cache_1h or 0)
        return TokenUsage(input_tokens=u.get("input_tokens", 0), output_tokens=u.get("output_tokens", 0),
                          cache_read_input_tokens=u.get("cache_read_input_tokens", 0),
                          cache_write_5m_input_tokens=five, cache_write_1h_input_tokens=hour,
                          web_search_requests=self._web_searches)
