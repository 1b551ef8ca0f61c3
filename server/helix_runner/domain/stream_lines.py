"""The common stdout lines of the CLI as typed ``msgspec`` structs, decoded straight from the bytes.

Most of a phase's stdout is three kinds of line: ``assistant`` (one content block each),
``user`` (tool results) and, with partial messages, ``stream_event`` (docs/claude-cli-protocol.md
§2.3, §2.4, §2.6). ``decode_line`` reads such a line into the structs below in one C call:
fields the server does not use are skipped without building anything, the envelope and the
fields it does use come out already typed.

The schema is *strict*: it only describes the regular shape of each line. Anything else — an
unknown type or content block, a field of another type (``null`` where a string belongs, a float
token count), a missing required key, a synthetic API-error message — makes ``decode_line`` raise,
and the caller parses the line the exact, dict-based way (``stream_parser``), which handles every
shape and passes unknown types through. So this schema never decides *what* a line means, only
which lines can skip the generic path; the two paths agree on every line both accept
(``tests/domain/test_stream_lines.py``).

One thing msgspec does not check in what it skips: UTF-8. A line with non-ASCII bytes must be
validated before its typed result is used (``PhaseStream.feed`` does it per line), so that a line
with invalid UTF-8 still takes the repairing path (``line_repair``). And a number beyond the
double range in a field nobody reads no longer makes the line unreadable (orjson rejects the whole
line; msgspec only rejects what it decodes).

Field names are the CLI's JSON keys; ``Any`` marks values that are kept as parsed JSON (tool input,
structured results, flags compared with ``is True``), exactly as ``orjson.loads`` would give them.
"""

from __future__ import annotations

from typing import Annotated, Any

import msgspec

from helix_runner.domain.pricing import split_cache_writes

# A 64-bit integer. msgspec reads any integer exactly; orjson gives a float beyond -2**63..2**64-1,
# which the generic path treats differently (a count of 0, an index cut by int()), so larger
# values must take that path (msgspec bounds must fit in an int64: 2**63.. goes there too).
JsonInt = Annotated[int, msgspec.Meta(ge=-(2**63), le=2**63 - 1)]


# --------------------------------------------------------------------------------------------------
# Messages-API usage (assistant ``message.usage``, ``stream_event`` message_start / message_delta).


class CacheCreation(msgspec.Struct, gc=False):
    """``usage.cache_creation``: cache writes split by lifetime (docs/claude-cli-protocol.md §0.3)."""

    ephemeral_5m_input_tokens: JsonInt | None = None
    ephemeral_1h_input_tokens: JsonInt | None = None


class ServerToolUse(msgspec.Struct, gc=False):
    """``usage.server_tool_use``."""

    web_search_requests: JsonInt | None = None


class ApiUsage(msgspec.Struct, gc=False):
    """A message's ``usage``, every count an integer (the cost ledger counts it, see ``counts``)."""

    input_tokens: JsonInt = 0
    # UNSET when absent: a later line's missing count must not look like a count of 0 (cost_ledger).
    output_tokens: JsonInt | msgspec.UnsetType = msgspec.UNSET
    cache_read_input_tokens: JsonInt = 0
    cache_creation_input_tokens: JsonInt = 0
    cache_creation: CacheCreation | None = None
    server_tool_use: ServerToolUse | None = None

    def counts(self) -> list[int]:
        """[input, output, cache read, 5m writes, 1h writes, web searches], as the ledger counts a
        usage object (``cost_ledger.usage_counts``: with integer counts, taken as they are)."""
        write = self.cache_creation_input_tokens
        split = self.cache_creation
        if write and split is not None:
            five = split.ephemeral_5m_input_tokens
            hour = split.ephemeral_1h_input_tokens
            write_5m, write_1h = split_cache_writes(
                write,
                five if five is not None and five > 0 else 0,
                hour if hour is not None and hour > 0 else 0,
            )
        else:
            write_5m, write_1h = write, 0
        server = self.server_tool_use
        searches = server.web_search_requests if server is not None else None
        return [
            self.input_tokens,
            self.output_tokens if self.output_tokens is not msgspec.UNSET else 0,
            self.cache_read_input_tokens,
            write_5m,
            write_1h,
            searches if searches is not None and searches > 0 else 0,
        ]


# A message's usage as the parser hands it to the cost ledger: the raw JSON object (generic path),
# or its typed form.
Usage = dict[str, Any] | ApiUsage


# --------------------------------------------------------------------------------------------------
# Content blocks.


class TextBlock(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: str


class ToolUseBlock(msgspec.Struct, tag="tool_use", tag_field="type", gc=False):
    id: str
    name: str = ""
    input: Any = None


class ServerToolUseBlock(msgspec.Struct, tag="server_tool_use", tag_field="type", gc=False):
    id: str
    name: str = ""
    input: Any = None


class ThinkingBlock(msgspec.Struct, tag="thinking", tag_field="type", gc=False):
    thinking: str = ""


class RedactedThinkingBlock(msgspec.Struct, tag="redacted_thinking", tag_field="type", gc=False):
    pass


class UserTextBlock(msgspec.Struct, tag="text", tag_field="type", gc=False):
    text: str = ""


class ToolResultBlock(msgspec.Struct, tag="tool_result", tag_field="type", gc=False):
    tool_use_id: str
    content: Any = None  # a string, a list of blocks, or anything (stream_parser._content_preview)
    is_error: Any = None


AssistantBlock = TextBlock | ToolUseBlock | ServerToolUseBlock | ThinkingBlock | RedactedThinkingBlock


class AssistantMessage(msgspec.Struct, gc=False):
    content: list[AssistantBlock]
    id: str = ""
    model: str = ""
    usage: ApiUsage | None = None


class UserMessageBody(msgspec.Struct, gc=False):
    content: list[UserTextBlock | ToolResultBlock]


# --------------------------------------------------------------------------------------------------
# stream_event (docs/claude-cli-protocol.md §2.6): the Messages-API streaming events.


class StartMessage(msgspec.Struct, gc=False):
    id: str = ""
    model: str = ""
    usage: ApiUsage | None = None


class MessageStart(msgspec.Struct, tag="message_start", tag_field="type", gc=False):
    message: StartMessage | None = None
    index: JsonInt = 0


class BlockType(msgspec.Struct, gc=False):
    type: str = ""


class ContentBlockStart(msgspec.Struct, tag="content_block_start", tag_field="type", gc=False):
    index: JsonInt = 0
    content_block: BlockType | None = None


class TextDelta(msgspec.Struct, tag="text_delta", tag_field="type", gc=False):
    text: str = ""


class ThinkingDelta(msgspec.Struct, tag="thinking_delta", tag_field="type", gc=False):
    thinking: str = ""


class InputJsonDelta(msgspec.Struct, tag="input_json_delta", tag_field="type", gc=False):
    partial_json: str = ""


class SignatureDelta(msgspec.Struct, tag="signature_delta", tag_field="type", gc=False):
    signature: str = ""


class ContentBlockDelta(msgspec.Struct, tag="content_block_delta", tag_field="type", gc=False):
    delta: TextDelta | ThinkingDelta | InputJsonDelta | SignatureDelta
    index: JsonInt = 0


class ContentBlockStop(msgspec.Struct, tag="content_block_stop", tag_field="type", gc=False):
    index: JsonInt = 0


class StopDelta(msgspec.Struct, gc=False):
    stop_reason: str | None = None


class MessageDelta(msgspec.Struct, tag="message_delta", tag_field="type", gc=False):
    delta: StopDelta | None = None
    usage: ApiUsage | None = None
    index: JsonInt = 0


class MessageStop(msgspec.Struct, tag="message_stop", tag_field="type", gc=False):
    index: JsonInt = 0


StreamEvent = (
    MessageStart | ContentBlockStart | ContentBlockDelta | ContentBlockStop | MessageDelta | MessageStop
)


# --------------------------------------------------------------------------------------------------
# Lines. Each carries the CLI's envelope fields (``null`` or absent: None).


class AssistantLine(msgspec.Struct, tag="assistant", tag_field="type", gc=False):
    message: AssistantMessage
    session_id: str | None = None
    parent_tool_use_id: str | None = None
    agent_id: str | None = None
    uuid: str | None = None
    # A synthetic API-error message carries these (CAP 10); the line then takes the generic path.
    error: Any = None
    is_api_error_message: Any = None


class UserLine(msgspec.Struct, tag="user", tag_field="type", gc=False):
    message: UserMessageBody
    session_id: str | None = None
    parent_tool_use_id: str | None = None
    agent_id: str | None = None
    uuid: str | None = None
    tool_use_result: Any = None
    is_replay: Any = msgspec.field(default=None, name="isReplay")
    is_synthetic: Any = msgspec.field(default=None, name="isSynthetic")


class StreamEventLine(msgspec.Struct, tag="stream_event", tag_field="type", gc=False):
    event: StreamEvent
    api_message_id: str | None = None
    session_id: str | None = None
    parent_tool_use_id: str | None = None
    agent_id: str | None = None
    uuid: str | None = None


Line = AssistantLine | UserLine | StreamEventLine

# Raises msgspec.DecodeError (ValidationError included) for anything off the schema.
decode_line = msgspec.json.Decoder(Line).decode
