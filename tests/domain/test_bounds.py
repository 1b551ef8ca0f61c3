"""``domain/bounds.py`` against the contract: the header of resources.proto and the field comments.

Every size bound the proto states must have its constant in ``bounds`` with the same value, and
every constant there must be stated by the proto (or be marked as the server's own), so that a
bound changed on one side only fails here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from helix_runner.domain import bounds

PROTO = Path(__file__).resolve().parents[2] / "proto" / "helix" / "runner" / "v1"

# The header of resources.proto: label → constant.
HEADER = {
    "tool input JSON": "TOOL_INPUT_MAX_BYTES",
    "tool result preview": "TOOL_RESULT_PREVIEW_MAX_BYTES",
    "structured tool result JSON": "STRUCTURED_RESULT_MAX_BYTES",
    "assistant text / thinking": "ASSISTANT_TEXT_MAX_BYTES",
    "turn result text": "RESULT_TEXT_MAX_BYTES",
    "structured output JSON": "STRUCTURED_OUTPUT_MAX_BYTES",
    "stderr": "STDERR_LINE_MAX_BYTES",
    "tail": "STDERR_TAIL_MAX_BYTES",
    "raw JSON of unknown lines": "RAW_UNKNOWN_MAX_BYTES",
    "prompt": "PROMPT_MAX_BYTES",
    "injected message": "INJECT_MESSAGE_MAX_BYTES",
    "breakpoint regex": "BREAKPOINT_REGEX_MAX_BYTES",
}

# Constants stated in a field comment: constant → (file, message, field, the words that state it).
FIELD_COMMENTS = {
    "USER_TEXT_MAX_BYTES": ("events", "UserMessage", "text", "at most {}"),
    "PARTIAL_TEXT_MAX_BYTES": ("events", "PartialDelta", "text", "at most {}"),
    "SHORT_TEXT_MAX_BYTES": ("events", "HookEvent", "output_preview", "at most {}"),
    "DENY_MESSAGE_MAX_BYTES": ("runner_service", "DenyDecision", "message", "at most {}"),
    "EDIT_INPUT_MAX_BYTES": ("runner_service", "EditDecision", "input_json", "at most {}"),
    "SYSTEM_PROMPT_MAX_BYTES": ("runner_service", "PhaseOptions", "append_system_prompt", "at most {}"),
    "CANCEL_REASON_MAX_BYTES": ("runner_service", "CancelPhaseRequest", "reason", "at most {}"),
    "CONTEXT_USAGE_RAW_MAX_BYTES": ("resources", "ContextUsage", "raw_json", "at most {}"),
    "BREAKPOINT_SEARCH_MAX_BYTES": ("resources", "InputPatternCondition", "regex", "its first {}"),
    "RECENT_EVENTS_MAX": ("resources", "PhaseInspection", "recent_events", "at most {}"),
    "MAX_JSON_DEPTH": ("runner_service", "PhaseOptions", "json_schema", "nested at most {} levels"),
}
# The other caller JSON fields bound by MAX_JSON_DEPTH (domain/json_depth.py): (message, field).
JSON_DEPTH_FIELDS = [("PhaseOptions", "mcp_config"), ("PhaseOptions", "agents"), ("PhaseOptions", "settings"),
                     ("EditDecision", "input_json")]
# (default, maximum) pairs stated in a page_size comment.
PAGE_SIZES = {
    "JOBS_PAGE_SIZE": ("ListJobsRequest", "0: {}; at most {}"),
    "TOOL_CALLS_PAGE_SIZE": ("ListToolCallsRequest", "0: {}; at most {}"),
}
# The server's own limits, not part of the contract's text.
SERVER_OWN = {"ENV_VALUE_MAX_BYTES", "MAX_TURNS", "MAX_BREAKPOINTS", "MAX_REQUEST_BYTES"}


def size(value: int) -> str:
    """A bound as the proto writes it: "64 KiB", "1 MiB", or a plain count."""
    if value % bounds.MiB == 0:
        return f"{value // bounds.MiB} MiB"
    if value % bounds.KiB == 0:
        return f"{value // bounds.KiB} KiB"
    return str(value)


def header() -> dict[str, str]:
    """``label: size`` pairs of the header comment of resources.proto."""
    text = (PROTO / "resources.proto").read_text()
    lines = text[: text.index("enum ")].splitlines()
    body = " ".join(line.removeprefix("//").strip() for line in lines if line.startswith("//   -"))
    pairs = {m[0].strip(" -;"): m[1] for m in re.findall(r"([A-Za-z /]+):\s+(\d+ [KM]iB)", body)}
    tail = re.search(r"(\d+ [KM]iB) tail", body)
    if tail:
        pairs["tail"] = tail[1]
    return pairs


def field_comment(file: str, message: str, field: str) -> str:
    """The comment lines right above ``field`` in ``message`` of ``<file>.proto``, joined."""
    text = (PROTO / f"{file}.proto").read_text()
    body = text[text.index(f"message {message} {{") :]
    body = body[: body.index("\n}")]
    match = re.search(rf"((?:\n\s*//[^\n]*)+)\n\s*[\w.<>, ]+ {field} = \d+;", body)
    assert match, (file, message, field)
    return " ".join(line.strip().removeprefix("//").strip() for line in match[1].strip().splitlines())


def test_the_header_of_resources_proto_is_mirrored():
    stated = header()
    assert set(stated) == set(HEADER), f"header labels changed: {sorted(set(stated) ^ set(HEADER))}"
    for label, constant in HEADER.items():
        assert size(getattr(bounds, constant)) == stated[label], (label, constant)


@pytest.mark.parametrize("constant", sorted(FIELD_COMMENTS))
def test_field_comments_state_the_same_bound(constant):
    file, message, field, words = FIELD_COMMENTS[constant]
    assert words.format(size(getattr(bounds, constant))) in field_comment(file, message, field)


@pytest.mark.parametrize(("message", "field"), JSON_DEPTH_FIELDS)
def test_every_caller_json_field_states_the_depth_bound(message, field):
    assert f"nested at most {bounds.MAX_JSON_DEPTH} levels" in field_comment("runner_service", message, field)


@pytest.mark.parametrize("constant", sorted(PAGE_SIZES))
def test_page_sizes_are_the_ones_documented(constant):
    message, words = PAGE_SIZES[constant]
    default, maximum = getattr(bounds, constant)
    assert words.format(default, maximum) in field_comment("runner_service", message, "page_size")


def test_every_bound_is_accounted_for():
    constants = {name for name in vars(bounds) if name.isupper()}  # KiB, MiB are units
    covered = set(HEADER.values()) | set(FIELD_COMMENTS) | set(PAGE_SIZES) | SERVER_OWN
    assert constants == covered, (
        f"unchecked: {sorted(constants - covered)}; gone: {sorted(covered - constants)}"
    )


@pytest.mark.parametrize(
    ("text", "limit", "expected"),
    [
        ("abc", 3, ("abc", 3, False)),
        ("abcd", 3, ("abc", 4, True)),
        ("éé", 3, ("é", 4, True)),  # never half a character
        ("😀x", 4, ("😀", 5, True)),
        ("\ud83d", 3, ("\ud83d", 3, False)),  # a lone surrogate counts 3 bytes, as the CLI writes it
    ],
)
def test_bound_text_cuts_at_a_character_boundary(text, limit, expected):
    assert bounds.bound_text(text, limit) == expected
