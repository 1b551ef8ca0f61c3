"""Usage read from an answer as it passes, however its bytes are cut."""

from __future__ import annotations

import json

from hypothesis import given
from hypothesis import strategies as st

from helix_runner.domain.usage import TokenUsage
from helix_runner.egress.usage_meter import MAX_LINE_BYTES, UsageMeter
from helix_runner.offline.script import Reply, Usage
from helix_runner.offline.sse import message_json, render_blocks, sse_events

REPLY = Reply.text("Counting the tokens of this answer.", usage=Usage(input_tokens=1234, output_tokens=56,
                                                                      cache_read_input_tokens=700,
                                                                      cache_creation_input_tokens=300))
BLOCKS = render_blocks(REPLY, lambda: "toolu_1")
STREAM = b"".join(sse_events("msg_1", "claude-test-model", BLOCKS, REPLY))
EXPECTED = TokenUsage(input_tokens=1234, output_tokens=56, cache_read_input_tokens=700,
                      cache_write_5m_input_tokens=300)


def metered(chunks) -> UsageMeter:
    meter = UsageMeter(streaming=True)
    for chunk in chunks:
        meter.feed(chunk)
    meter.finish()
    return meter


def test_a_streamed_answer_s_usage_is_the_message_delta_s_totals() -> None:
    meter = metered([STREAM])
    assert meter.model == "claude-test-model"
    assert meter.usage == EXPECTED


@given(st.lists(st.integers(min_value=1, max_value=len(STREAM) - 1), max_size=40))
def test_however_the_stream_is_cut_the_usage_is_the_same(cuts) -> None:
    points = [0, *sorted(set(cuts)), len(STREAM)]
    meter = metered([STREAM[a:b] for a, b in zip(points, points[1:], strict=False)])
    assert meter.usage == EXPECTED and meter.model == "claude-test-model"


def test_cache_writes_are_split_by_lifetime_when_the_api_says_so() -> None:
    start = {"type": "message_start", "message": {"model": "m", "usage": {
        "input_tokens": 10, "cache_creation_input_tokens": 30, "output_tokens": 1,
        "cache_creation": {"ephemeral_5m_input_tokens": 10, "ephemeral_1h_input_tokens": 20}}}}
    delta = {"type": "message_delta", "usage": {"output_tokens": 7, "server_tool_use": {"web_search_requests": 2}}}
    body = b"".join(f"event: {e['type']}\ndata: {json.dumps(e)}\n\n".encode() for e in (start, delta))
    assert metered([body]).usage == TokenUsage(input_tokens=10, output_tokens=7, cache_write_5m_input_tokens=10,
                                               cache_write_1h_input_tokens=20, web_search_requests=2)


def test_an_error_event_mid_stream_is_seen() -> None:
    error = b'event: error\ndata: {"type":"error","error":{"type":"overloaded_error","message":"Overloaded"}}\n\n'
    meter = metered([STREAM[:200], error])
    assert meter.error_type == "overloaded_error" and meter.error_message == "Overloaded"


def test_a_json_answer_is_metered_from_its_body() -> None:
    body = json.dumps(message_json("msg_1", "claude-json", BLOCKS, REPLY)).encode()
    meter = UsageMeter(streaming=False)
    for i in range(0, len(body), 7):
        meter.feed(body[i:i + 7])
    meter.finish()
    assert meter.model == "claude-json" and meter.usage == EXPECTED


def test_an_overlong_line_is_skipped_not_buffered() -> None:
    huge = b"data: " + b"x" * (MAX_LINE_BYTES + 10)
    meter = metered([huge[: len(huge) // 2], huge[len(huge) // 2:], b"\n", STREAM])
    assert meter.usage == EXPECTED and len(meter._tail) == 0


def test_an_answer_without_usage_reports_none() -> None:
    assert metered([b"event: ping\ndata: {\"type\":\"ping\"}\n\n"]).usage is None
