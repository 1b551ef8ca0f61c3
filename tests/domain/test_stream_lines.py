"""The typed path (``stream_lines`` + the parser's typed handlers) against the generic one.

The typed schema only decides which lines may skip the generic path: on every line it accepts, it
must give exactly what the generic path gives (payloads, envelope, what the cost ledger counts),
and a line it does not accept must still come out right. Checked on generated lines of every
shape the schema touches, on the vendored corpus, and on the encoding defects ``line_repair``
exists for.
"""

from __future__ import annotations

import json
from unittest import mock

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from msgspec import UNSET
from support.properties import examples

from helix_runner.domain.cost_ledger import usage_counts
from helix_runner.domain.events import AssistantText, ParseError, ParseErrorReason, ToolCallFinished
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.stream_lines import decode_line
from helix_runner.domain.stream_parser import TYPED_MISSES, StreamParser

TYPED_TYPES = ("assistant", "user", "stream_event")


def typed(parser: StreamParser, line: bytes):
    """The typed path alone: (envelope, payloads, usage), or None when it passes the line on."""
    try:
        if not line.isascii():
            str(line, "utf-8")
        msg = decode_line(line)
        payloads, usage = parser.typed_handlers[msg.__class__](msg)
    except TYPED_MISSES:
        return None
    envelope = (msg.session_id or "", msg.parent_tool_use_id or "", msg.agent_id or "", msg.uuid or "")
    return envelope, payloads, usage


def generic(parser: StreamParser, line: bytes):
    sid, parent, agent, uid, payloads, usage = parser.parse_generic(line, 1, 0)
    return ((sid, parent, agent, uid), payloads, usage)


def comparable(result):
    """Usage objects (raw dict or typed) as what the ledger takes from them: counts and output."""
    envelope, payloads, usage = result
    if usage is not None:
        message_id, model, raw, final = usage
        output = raw.get("output_tokens") if isinstance(raw, dict) else raw.output_tokens
        usage = (message_id, model, usage_counts(raw), None if output is UNSET else output, final)
    return envelope, payloads, usage


# --------------------------------------------------------------------------------------------------
# Generated lines: the shapes the schema describes, with the variations the generic path tolerates.

ODD = st.sampled_from([None, "", 0, -3, 2.5, True, [], {}, 2**64 + 5, -(2**63) - 1, 2**63 + 2, "x"])
TEXT = st.text(alphabet=st.characters(blacklist_categories=("Cs",)), max_size=40) | st.sampled_from(
    ["naïve 😀", "x" * 5000, "é" * 3000]
)
INT = st.integers(min_value=-5, max_value=10**6) | st.sampled_from([2**63 - 1, 2**63, 2**64 + 1, -(2**63)])
JSON = st.recursive(
    st.none() | st.booleans() | INT | st.floats(allow_nan=False, allow_infinity=False) | TEXT,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(TEXT, inner, max_size=3),
    max_leaves=8,
)


def maybe(value_strategy, odd=ODD):
    """A key's value: usually well-formed, sometimes odd; ``...`` means the key is absent."""
    return st.one_of(value_strategy, value_strategy, value_strategy, odd, st.just(...))


def obj(**fields):
    return st.fixed_dictionaries({}, optional=fields).map(
        lambda d: {k: v for k, v in d.items() if v is not ...}
    )


def tagged(kind, **fields):
    return obj(**fields).map(lambda d: {"type": kind, **d})


USAGE = obj(
    input_tokens=maybe(INT),
    output_tokens=maybe(INT),
    cache_read_input_tokens=maybe(INT),
    cache_creation_input_tokens=maybe(INT),
    cache_creation=maybe(obj(ephemeral_5m_input_tokens=maybe(INT), ephemeral_1h_input_tokens=maybe(INT))),
    server_tool_use=maybe(obj(web_search_requests=maybe(INT))),
    service_tier=maybe(TEXT),
)
ASSISTANT_BLOCK = st.one_of(
    tagged("text", text=maybe(TEXT), citations=maybe(JSON)),
    tagged(
        "tool_use", id=maybe(st.sampled_from(["toolu_1", "toolu_2"])), name=maybe(TEXT), input=maybe(JSON)
    ),
    tagged("server_tool_use", id=maybe(st.just("srv_1")), name=maybe(TEXT), input=maybe(JSON)),
    tagged("thinking", thinking=maybe(TEXT), signature=maybe(TEXT)),
    tagged("redacted_thinking", data=maybe(TEXT)),
    tagged("web_search_tool_result", tool_use_id=maybe(st.just("srv_1")), content=maybe(JSON)),
    tagged("image", source=maybe(JSON)),
)
ENVELOPE = {
    "session_id": maybe(TEXT),
    "parent_tool_use_id": maybe(st.sampled_from(["toolu_0", None])),
    "agent_id": maybe(TEXT),
    "uuid": maybe(TEXT),
}
ASSISTANT = tagged(
    "assistant",
    message=maybe(
        obj(
            id=maybe(st.sampled_from(["msg_1", "msg_2", ""])),
            model=maybe(st.sampled_from(["claude-opus-5-5", "<synthetic>"])),
            content=maybe(st.lists(ASSISTANT_BLOCK, max_size=3) | TEXT),
            usage=maybe(USAGE),
        )
    ),
    error=maybe(st.just("server_error"), odd=st.none()),
    is_api_error_message=maybe(st.booleans()),
    **ENVELOPE,
)
USER_BLOCK = st.one_of(
    tagged(
        "tool_result",
        tool_use_id=maybe(st.sampled_from(["toolu_1", "toolu_2"])),
        content=maybe(TEXT | st.lists(tagged("text", text=maybe(TEXT)) | tagged("image", source=JSON))),
        is_error=maybe(st.booleans()),
    ),
    tagged("text", text=maybe(TEXT)),
    tagged("image", source=maybe(JSON)),
)
USER = tagged(
    "user",
    message=maybe(obj(role=st.just("user"), content=maybe(st.lists(USER_BLOCK, max_size=3) | TEXT))),
    tool_use_result=maybe(JSON),
    isReplay=maybe(st.booleans()),
    isSynthetic=maybe(st.booleans()),
    **ENVELOPE,
)
DELTA = st.one_of(
    tagged("text_delta", text=maybe(TEXT)),
    tagged("thinking_delta", thinking=maybe(TEXT)),
    tagged("input_json_delta", partial_json=maybe(TEXT)),
    tagged("signature_delta", signature=maybe(TEXT)),
    tagged("citations_delta", citation=maybe(JSON)),
)
EVENT = st.one_of(
    tagged(
        "message_start",
        message=maybe(obj(id=maybe(st.just("msg_1")), model=maybe(TEXT), usage=maybe(USAGE))),
    ),
    tagged("content_block_start", index=maybe(INT), content_block=maybe(obj(type=maybe(TEXT)))),
    tagged("content_block_delta", index=maybe(INT), delta=maybe(DELTA)),
    tagged("content_block_stop", index=maybe(INT)),
    tagged("message_delta", delta=maybe(obj(stop_reason=maybe(TEXT))), usage=maybe(USAGE)),
    tagged("message_stop"),
    tagged("ping"),
)
STREAM_EVENT = tagged("stream_event", event=maybe(EVENT), api_message_id=maybe(TEXT), **ENVELOPE)
LINE = st.one_of(ASSISTANT, USER, STREAM_EVENT)


def dumps(value, style: int) -> bytes:
    if style == 0:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode()
    return json.dumps(value, ensure_ascii=style == 1).encode()  # escaped non-ASCII, or spaces


SETTINGS = settings(max_examples=examples(400), deadline=None, suppress_health_check=[HealthCheck.too_slow])


@SETTINGS
@given(st.lists(st.tuples(LINE, st.integers(0, 2)), min_size=1, max_size=6), st.booleans())
def test_the_typed_path_gives_what_the_generic_path_gives(lines, partial):
    # One parser per path over the same sequence (the parser remembers the last message's usage).
    fast, slow, both = (StreamParser(include_partial_messages=partial) for _ in range(3))
    for value, style in lines:
        line = dumps(value, style)
        expected = comparable(generic(slow, line))
        got = typed(fast, line)
        if got is None:
            got = generic(fast, line)  # what parse() does with a line the typed path passes on
        assert comparable(got) == expected, line
        sid, parent, agent, uid, payloads, usage = both.parse(line, 1, 0)  # the two, as shipped
        assert comparable(((sid, parent, agent, uid), payloads, usage)) == expected, line


@SETTINGS
@given(st.lists(st.tuples(LINE, st.integers(0, 2)), min_size=1, max_size=8), st.booleans())
def test_a_phase_stream_gives_the_same_events_with_and_without_the_typed_path(lines, partial):
    data = b"\n".join(dumps(value, style) for value, style in lines) + b"\n"
    prices = PriceTable(use_genai_prices=False)

    def events() -> list:
        stream = PhaseStream(
            PhaseStreamOptions(include_partial_messages=partial),
            iter(range(1, 10**6)).__next__,
            price_table=prices,
        )
        return [*stream.feed(data), *stream.finish()]

    fast = events()
    # Every line misses the typed path (as if the schema matched nothing).
    with mock.patch("helix_runner.domain.phase_stream._decode_line", _never):
        slow = events()
    assert fast == slow


def _never(line):
    raise TypeError("typed path off")


# --------------------------------------------------------------------------------------------------
# The corpus: the common lines really take the typed path (else it would only cost time).


def _why_generic(obj: dict) -> str | None:
    """Why a corpus line of a typed type is expected to take the generic path (None: it must not)."""
    message = obj.get("message") or {}
    content = message.get("content")
    if obj.get("error") is not None or obj.get("is_api_error_message") is True:
        return "synthetic API error"
    if isinstance(content, str):
        return "string content"
    blocks = {b.get("type") for b in content or ()}
    if blocks - {"text", "tool_use", "server_tool_use", "thinking", "redacted_thinking", "tool_result"}:
        return f"content block {sorted(blocks)}"
    if any(isinstance(b.get("content"), dict) for b in content or ()):
        return "tool result content of another type"
    return None


def test_every_regular_corpus_line_takes_the_typed_path(vendored_transcripts):
    checked = 0
    for path in vendored_transcripts.values():
        parser = StreamParser(include_partial_messages=True)
        for line in path.read_bytes().splitlines():
            obj = orjson.loads(line) if line.strip() else {}
            if obj.get("type") not in TYPED_TYPES:
                assert typed(parser, line) is None, line[:80]
                continue
            result = typed(parser, line)
            reason = _why_generic(obj)
            assert (result is None) == (reason is not None), (path.name, reason, line[:120])
            checked += result is not None
    assert checked > 500


# --------------------------------------------------------------------------------------------------
# Encoding defects: repaired whether they are in a field the typed path reads or skips.


ASSISTANT_LINE = (
    b'{"type":"assistant","message":{"id":"msg_1","model":"m","role":"assistant",'
    b'"content":[{"type":"text","text":"T"}]},"session_id":"s","uuid":"u"}'
)


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        (ASSISTANT_LINE.replace(b'"T"', b'"a\xffb"'), ParseErrorReason.INVALID_UTF8),  # read
        (
            ASSISTANT_LINE.replace(b'"assistant","content"', b'"\xff","content"'),
            ParseErrorReason.INVALID_UTF8,
        ),
        (ASSISTANT_LINE.replace(b'"T"', b'"a\\ud83db"'), ParseErrorReason.UNPAIRED_SURROGATE),
        (
            ASSISTANT_LINE.replace(b'"role":"assistant"', b'"role":"\\udc00"'),
            ParseErrorReason.UNPAIRED_SURROGATE,
        ),
    ],
)
def test_broken_encoding_is_repaired_wherever_it_is(line, reason):
    stream = PhaseStream(price_table=PriceTable(use_genai_prices=False))
    events = stream.feed(b'{"type":"keep_alive"}\n' + line + b"\n") + stream.finish()
    warning, text = (e.payload for e in events[:2])
    assert isinstance(warning, ParseError) and warning.repaired and warning.reason is reason
    assert isinstance(text, AssistantText) and text.text in ("T", "a\ufffdb")
    assert stream.parse_error_count == 0


def test_a_number_beyond_double_range_in_a_field_nobody_reads_no_longer_loses_the_line():
    # orjson rejects the whole line; the typed path only decodes what it uses (stream_lines).
    line = (
        b'{"type":"user","message":{"role":"user","content":[{"type":"tool_result",'
        b'"tool_use_id":"toolu_1","content":"ok"}]},"meta":{"score":1e400}}'
    )
    with pytest.raises(orjson.JSONDecodeError):
        orjson.loads(line)
    (finished,) = StreamParser().parse(line, 1, 0)[4]
    assert isinstance(finished, ToolCallFinished) and finished.content_preview == "ok"
