"""``PhaseStream.feed`` inlines ``StreamParser.parse`` and ``envelope`` for speed; this checks the
inlined path against the reference path on arbitrary lines: the same payloads with the same
envelopes, in the same order.

Only what the facade adds is set aside: ``CostUpdate`` events (from the cost ledger), the session
id carried onto lines without one, and the tool tracker's name and durations on tool results.
"""

from __future__ import annotations

from pathlib import Path

import msgspec
import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix_runner.domain.events import CostUpdate, SessionInit, ToolCallFinished
from helix_runner.domain.line_framer import LineFramer
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.stream_parser import StreamParser

MAX_LINE = 1 << 20
CORPUS = Path(__file__).resolve().parents[1] / "fixtures" / "corpus" / "real"
# Real lines of the CLI (the vendored corpus), the raw material for mutations.
REAL_LINES = sorted(
    {
        line
        for path in sorted(CORPUS.glob("*.jsonl"))
        for line in path.read_bytes().splitlines()
        if line.strip()
    }
)[:2000]
TYPES = [
    "assistant",
    "user",
    "system",
    "result",
    "stream_event",
    "rate_limit_event",
    "control_response",
    "control_request",
    "control_cancel_request",
    "tool_progress",
    "keep_alive",
    "brand_new",
]
SUBTYPES = [
    "init",
    "api_retry",
    "status",
    "compact_boundary",
    "hook_started",
    "hook_response",
    "permission_denied",
    "task_started",
    "task_notification",
    "session_writes_lost",
    "success",
    "error_during_execution",
    "hook_callback",
    "can_use_tool",
    None,
]

json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**53), 2**53)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda children: (
        st.lists(children, max_size=4) | st.dictionaries(st.text(max_size=10), children, max_size=4)
    ),
    max_leaves=12,
)
envelope_values = st.none() | st.text(max_size=8) | st.integers(-(2**53), 2**53)


@st.composite
def typed_objects(draw) -> bytes:
    """A line of a known (or unknown) type with arbitrary fields: exercises handlers and their shape errors."""
    obj = draw(
        st.dictionaries(
            st.sampled_from(
                [
                    "message",
                    "request",
                    "response",
                    "event",
                    "usage",
                    "content",
                    "tool_use_id",
                    "model",
                    "is_error",
                    "modelUsage",
                    "data",
                ]
            ),
            json_values,
            max_size=5,
        )
    )
    obj["type"] = draw(st.sampled_from(TYPES))
    subtype = draw(st.sampled_from(SUBTYPES))
    if subtype is not None:
        obj["subtype"] = subtype
    for key in ("session_id", "parent_tool_use_id", "agent_id", "uuid"):
        if draw(st.booleans()):
            obj[key] = draw(envelope_values)
    return orjson.dumps(obj)


@st.composite
def mutated_real_lines(draw) -> bytes:
    """A real line, sometimes with a field replaced, cut short or a byte flipped."""
    line = draw(st.sampled_from(REAL_LINES))
    how = draw(st.sampled_from(["as is", "field", "cut", "flip"]))
    if how == "field":
        obj = orjson.loads(line)
        if isinstance(obj, dict) and obj:
            obj[draw(st.sampled_from(sorted(obj)))] = draw(json_values)
        return orjson.dumps(obj)
    if how == "cut":
        return line[: draw(st.integers(0, len(line)))]
    if how == "flip":
        i = draw(st.integers(0, len(line) - 1))
        return line[:i] + bytes([draw(st.integers(0, 255))]) + line[i + 1 :]
    return line


lines_strategy = st.lists(
    st.one_of(mutated_real_lines(), typed_objects(), st.binary(max_size=60), st.just(b""), st.just(b" \t")),
    max_size=25,
).map(lambda lines: [line.replace(b"\n", b" ") for line in lines])


def _normal(payload):
    """A payload without what the tool tracker fills in (name and durations of a tool result)."""
    if isinstance(payload, ToolCallFinished):
        return msgspec.structs.replace(payload, name="", duration_ns=None, hook_duration_ms=None)
    return payload


def reference(data: bytes, options: PhaseStreamOptions) -> list[tuple]:
    """Framer, then ``StreamParser.parse`` (which applies ``envelope``) line by line."""
    parser = StreamParser(
        include_partial_messages=options.include_partial_messages,
        include_raw_unknown=options.include_raw_unknown,
    )
    lines, first, offsets = LineFramer(MAX_LINE).push_lines(data)
    session = None
    out = []
    for i, line in enumerate(lines):
        line = bytes(line)
        if not line.strip():
            continue  # blank lines are counted, never reported
        sid, parent, agent, uid, payloads, _ = parser.parse(line, first + i, offsets[i])
        if not payloads:
            continue
        if sid:
            session = session or sid
        else:
            sid = session or ""
        for payload in payloads:
            if isinstance(payload, SessionInit):
                session = sid  # the latest init wins (PhaseStream.session_id)
            out.append((sid, parent, agent, uid, _normal(payload)))
    return out


@settings(
    max_examples=examples(300), deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large]
)
@given(lines_strategy, st.booleans(), st.booleans())
def test_feed_gives_what_parse_and_envelope_give(lines, partial, raw):
    options = PhaseStreamOptions(
        max_line_bytes=MAX_LINE, include_partial_messages=partial, include_raw_unknown=raw
    )
    data = b"".join(line + b"\n" for line in lines)
    events = PhaseStream(options, lambda: 1).feed(data)
    fed = [
        (e.session_id, e.parent_tool_use_id, e.agent_id, e.uuid, _normal(e.payload))
        for e in events
        if not isinstance(e.payload, CostUpdate)
    ]
    assert fed == reference(data, options)
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
