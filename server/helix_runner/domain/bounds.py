"""Every size bound of the contract in one place, and the helpers that cut text to a bound.

The values mirror the header comment of ``proto/helix/runner/v1/resources.proto`` and the field
comments of ``events.proto`` and ``runner_service.proto`` (``tests/domain/test_bounds.py`` checks
the header). Sizes are bytes of UTF-8; text is cut at a character boundary at or below the bound,
and the full size and a ``*_truncated`` flag are reported next to it. Counts are plain numbers.
"""

from __future__ import annotations

KiB = 1024
MiB = 1024 * KiB

# --------------------------------------------------------------------------------------------------
# What the server reports (events and records): cut to the bound, never refused.

TOOL_INPUT_MAX_BYTES = 64 * KiB  # ToolCallStarted.input_json, ToolCall.input_json, denials' input
TOOL_RESULT_PREVIEW_MAX_BYTES = 4 * KiB  # ToolCallFinished.content_preview, ToolCall.result_preview
STRUCTURED_RESULT_MAX_BYTES = 16 * KiB  # the CLI's structured tool_use_result as compact JSON
ASSISTANT_TEXT_MAX_BYTES = 256 * KiB  # per AssistantText / Thinking event
RESULT_TEXT_MAX_BYTES = 64 * KiB  # TurnResult.result_text, PhaseResult.result_text
STRUCTURED_OUTPUT_MAX_BYTES = 64 * KiB  # PhaseResult.structured_output (compact JSON)
USER_TEXT_MAX_BYTES = 64 * KiB  # UserMessage.text
PARTIAL_TEXT_MAX_BYTES = 64 * KiB  # PartialDelta.text
RAW_UNKNOWN_MAX_BYTES = 64 * KiB  # Unknown.raw_json (only when the run asked for it)
STDERR_LINE_MAX_BYTES = 4 * KiB  # per StderrOutput event
STDERR_TAIL_MAX_BYTES = 16 * KiB  # PhaseDiagnostics.stderr_tail
SHORT_TEXT_MAX_BYTES = 4 * KiB  # hook output, task summary, API error text, control message
CONTEXT_USAGE_RAW_MAX_BYTES = 64 * KiB  # ContextUsage.raw_json (InspectPhase)
RECENT_EVENTS_MAX = 50  # PhaseInspection.recent_events

# --------------------------------------------------------------------------------------------------
# What a caller may send: larger is INVALID_ARGUMENT naming the field.

PROMPT_MAX_BYTES = 1 * MiB  # RunPhase prompt (1 byte to 1 MiB)
# The largest request message the server reads (gRPC's max_receive_message_length): room for every
# field at its own limit, and for an over-long prompt to be refused by name (INVALID_ARGUMENT).
MAX_REQUEST_BYTES = 8 * MiB
SYSTEM_PROMPT_MAX_BYTES = 64 * KiB  # options.append_system_prompt
ENV_VALUE_MAX_BYTES = 32 * KiB  # each value of options.env (the server's own bound)
MAX_TURNS = 10_000  # options.max_turns (0: no limit)
INJECT_MESSAGE_MAX_BYTES = 256 * KiB  # InjectMessage text (1 byte to 256 KiB)
DENY_MESSAGE_MAX_BYTES = 4 * KiB  # ResolveToolCall deny.message; also ControlEvent.message
EDIT_INPUT_MAX_BYTES = 64 * KiB  # ResolveToolCall edit.input_json; also ControlEvent.input_json
CANCEL_REASON_MAX_BYTES = 1 * KiB  # CancelPhase reason
BREAKPOINT_REGEX_MAX_BYTES = 4 * KiB  # Breakpoint input_pattern
BREAKPOINT_SEARCH_MAX_BYTES = 64 * KiB  # patterns search the first 64 KiB of the input (as input_json)
MAX_BREAKPOINTS = 256  # per phase
# Nesting of caller JSON (options.json_schema / settings / mcp_config / agents, edit.input_json):
# deeper is INVALID_ARGUMENT (domain/json_depth.py). Real configurations and schemas nest a dozen
# levels; the recursive parsers behind these fields fail from a few hundred (orjson writes 255).
MAX_JSON_DEPTH = 64

# Page sizes: (default for 0, maximum; larger requests are lowered).
JOBS_PAGE_SIZE = (50, 500)  # ListJobs
TOOL_CALLS_PAGE_SIZE = (100, 1000)  # ListToolCalls


# --------------------------------------------------------------------------------------------------
# Cutting text to a bound.


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


def human_bytes(n: int) -> str:
    """``n`` bytes for a person: ``64 MiB`` when exact, ``11.8 MiB`` otherwise, ``512 bytes`` below 1 KiB."""
    for unit, scale in (("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)):
        if n >= scale:
            return f"{n // scale} {unit}" if n % scale == 0 else f"{n / scale:.1f} {unit}"
    return f"{n} bytes"
