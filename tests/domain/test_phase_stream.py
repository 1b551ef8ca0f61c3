"""PhaseStream, the facade: bytes in, sequenced events out, as soon as each line is complete."""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from support.cli_lines import SID, init, line, result, text, tool_result, tool_use
from support.properties import examples

from helix_runner.domain.events import (
    AssistantText,
    ControlEvent,
    ControlEventKind,
    CostUpdate,
    Event,
    ParseError,
    ParseErrorReason,
    PartialDelta,
    PhaseStatus,
    PhaseStatusChanged,
    SessionInit,
    StderrOutput,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)
from helix_runner.domain.phase_stream import COST_UPDATE_INTERVAL_NS, PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import ModelPrice, PriceTable, PricingSource
from helix_runner.domain.tool_tracker import ToolCallStatus

PRICES = PriceTable({"m": ModelPrice(1.0, 10.0)}, use_genai_prices=False)
INIT = init()


class Clock:
    def __init__(self, now: int = 1_000_000_000) -> None:
        self.now = now

    def __call__(self) -> int:
        return self.now


def make(clock: Clock | None = None, **options) -> PhaseStream:
    return PhaseStream(PhaseStreamOptions(**options), clock or Clock(), price_table=PRICES)


def kinds(events: list[Event]) -> list[str]:
    return [type(e.payload).__name__ for e in events]


def test_events_come_out_as_soon_as_their_line_is_complete():
    stream = make()
    assert stream.feed(INIT[:10]) == []
    (init,) = stream.feed(INIT[10:])
    assert isinstance(init.payload, SessionInit) and init.sequence == 1
    assert stream.feed(text()[:-1]) == []  # everything but the newline
    assert kinds(stream.feed(b"\n")) == ["AssistantText", "CostUpdate"]
    assert stream.session_id == SID and stream.stdout_bytes == len(INIT) + len(text())


def test_sequence_is_gap_free_across_feed_emit_and_finish():
    stream = make()
    events = stream.feed(INIT + text())
    events.append(stream.emit(StderrOutput("warning: x")))
    events.append(stream.emit(PhaseStatusChanged(PhaseStatus.RUNNING, PhaseStatus.PAUSED, "paused")))
    events += stream.feed(tool_use("t1") + b"{truncated")
    events += stream.finish()
    assert [e.sequence for e in events] == list(range(1, len(events) + 1))
    assert stream.last_sequence == len(events)
    assert kinds(events)[-2:] == ["ParseError", "CostUpdate"]
    # Service events carry the phase's session id but no line fields.
    stderr = events[3]
    assert (stderr.session_id, stderr.uuid, stderr.parent_tool_use_id) == (SID, "", "")


def test_envelope_and_receive_time():
    clock = Clock(5)
    stream = make(clock)
    (init,) = stream.feed(INIT)
    clock.now = 9
    first, _cost = stream.feed(text())
    assert (init.receive_time_ns, first.receive_time_ns) == (5, 9)
    assert (first.session_id, first.uuid) == (SID, "u-msg_1")


def test_tool_calls_get_names_and_durations_and_the_tracker_follows():
    clock = Clock(0)
    stream = make(clock)
    started = stream.feed(tool_use("t1"))[0]
    assert isinstance(started.payload, ToolCallStarted)
    assert stream.tools.current.tool_use_id == "t1"
    clock.now = 250_000_000
    (done,) = stream.feed(tool_result("t1", is_error=True))
    assert done.payload.name == "Bash" and done.payload.is_error and done.payload.duration_ns == 250_000_000
    call = stream.tools.get("t1")
    assert (call.status, call.start_sequence, call.end_sequence) == (ToolCallStatus.FAILED, 1, done.sequence)
    assert stream.tools.stats()[0].failures == 1


def test_calls_still_open_at_the_end_are_unfinished():
    stream = make()
    stream.feed(INIT + tool_use("t1") + tool_use("t2", "Read", "msg_3") + tool_result("t1"))
    stream.finish()
    assert [c.status for c in stream.tools.calls] == [ToolCallStatus.SUCCEEDED, ToolCallStatus.UNFINISHED]
    assert stream.tools.unfinished_count == 1


def test_results_are_kept_in_order_and_followed_by_a_cost_update():
    stream = make()
    events = stream.feed(INIT + result(0.5) + result(0.5) + result(0.75, 3000))
    assert kinds(events) == [
        "SessionInit",
        "TurnResult",
        "CostUpdate",
        "TurnResult",
        "CostUpdate",
        "TurnResult",
        "CostUpdate",
    ]
    assert [r.total_cost_usd for r in stream.results] == [0.5, 0.5, 0.75]
    assert stream.result_count == 3
    cost = events[-1].payload.cost
    assert cost.reported_usd == 0.75  # the latest, not 1.75
    assert cost.computed_usd == pytest.approx(0.003)
    assert stream.cost is stream.cost  # cached


def test_a_run_without_result_ends_computed_only():
    stream = make()
    stream.feed(INIT + text("msg_1") + text("msg_1", "more") + text("msg_2"))
    final = stream.finish()
    (update,) = [e.payload for e in final if isinstance(e.payload, CostUpdate)]
    assert update.cost.computed_only and update.cost.reported_usd is None
    assert update.cost.tokens.input_tokens == 2000  # msg_1 counted once
    assert update.cost.computed_usd == pytest.approx(2000 / 1e6 + 2 * 10 / 1e6)


def test_cost_updates_between_results_are_throttled():
    clock = Clock(0)
    stream = make(clock)
    assert kinds(stream.feed(text("a"))) == ["AssistantText", "CostUpdate"]
    assert kinds(stream.feed(text("b"))) == ["AssistantText"]  # same instant: no second update
    clock.now = COST_UPDATE_INTERVAL_NS
    assert kinds(stream.feed(text("c"))) == ["AssistantText", "CostUpdate"]
    assert kinds(stream.feed(text("c", "again"))) == ["AssistantText"]  # not a new message


def test_finish_reports_nothing_new_when_nothing_changed():
    stream = make()
    stream.feed(INIT + result(0.1))
    assert stream.finish() == []
    assert stream.finish() == []  # idempotent
    with pytest.raises(RuntimeError):
        stream.feed(text())


def test_stream_events_are_dropped_unless_asked_for():
    delta = line(
        {
            "type": "stream_event",
            "session_id": SID,
            "api_message_id": "msg_1",
            "event": {
                "type": "content_block_delta",
                "index": 0,
                "delta": {"type": "text_delta", "text": "He"},
            },
        }
    )
    assert make().feed(delta) == []
    (event,) = make(include_partial_messages=True).feed(delta)
    assert isinstance(event.payload, PartialDelta) and event.payload.text == "He"


def test_message_delta_usage_counts_even_when_partial_messages_are_off():
    delta = line(
        {
            "type": "stream_event",
            "api_message_id": "msg_1",
            "event": {"type": "message_delta", "usage": {"output_tokens": 70}},
        }
    )
    stream = make()
    stream.feed(text("msg_1") + delta)
    assert stream.cost.tokens.output_tokens == 70


def test_noise_crlf_invalid_utf8_and_long_lines_do_not_stop_parsing():
    stream = make(max_line_bytes=300)
    data = (
        b"[SandboxDebug] starting\n"
        + INIT.replace(b"\n", b"\r\n")
        + b"\n\n"
        + b'{"type":"user","x":"\xff"\n'  # invalid UTF-8 and cut short: beyond repair
        + b'{"type":"assistant","message":'
        + b"x" * 500
        + b"}\n"
        + text()
    )
    events = stream.feed(data) + stream.finish()
    assert kinds(events) == [
        "ParseError",
        "SessionInit",
        "ParseError",
        "ParseError",
        "AssistantText",
        "CostUpdate",
    ]
    errors = [e.payload for e in events if isinstance(e.payload, ParseError)]
    assert [(p.reason, p.line_number) for p in errors] == [
        (ParseErrorReason.NOT_JSON, 1),
        (ParseErrorReason.INVALID_UTF8, 5),
        (ParseErrorReason.LINE_TOO_LONG, 6),
    ]
    assert errors[2].line_bytes == len(b'{"type":"assistant","message":') + 501
    assert stream.parse_error_count == 3


def test_unknown_models_are_priced_from_the_overrides_given_in_the_options():
    stream = PhaseStream(PhaseStreamOptions(price_overrides={"gateway-x": ModelPrice(3.0, 3.0)}), Clock())
    stream.feed(
        text(usage={"input_tokens": 1_000_000, "output_tokens": 0}).replace(
            b'"model":"m"', b'"model":"gateway-x"'
        )
    )
    (model,) = stream.cost.models
    assert (model.pricing_source, model.computed_usd) == (PricingSource.OVERRIDE, pytest.approx(3.0))


def test_emit_sequences_service_events():
    stream = make()
    event = stream.emit(ControlEvent(ControlEventKind.BREAKPOINT_HIT, tool_use_id="t1", breakpoint_id="bp"))
    assert event.sequence == 1 and stream.last_sequence == 1


def test_session_id_follows_the_latest_init():
    stream = make()
    stream.feed(INIT + INIT.replace(SID.encode(), b"s-2"))
    assert stream.session_id == "s-2"


# ------------------------------------------------------------------------------------------------
# Property: the events do not depend on how the bytes were cut into reads.

_LINES = [
    INIT,
    text("msg_1", "héllo → 世界 🎉"),
    text("msg_1", "second block"),
    tool_use("t1"),
    tool_use("t2", "Read", "msg_3"),
    tool_result("t2", is_error=True),
    tool_result("t1"),
    result(0.5),
    b"[SandboxDebug] noise line\n",
    b"\r\n",
    b'{"type":"user","broken":"\xc3"}\n',
    b'{"type":"brand_new_type","subtype":"x"}\r\n',
    b'{"type":"assistant","message":{"id":"m","content":[{"type":"text","text":"' + b"z" * 300 + b'"}]}}\n',
]


@st.composite
def chunked_streams(draw):
    lines = draw(st.lists(st.sampled_from(_LINES), max_size=30))
    data = b"".join(lines) + draw(st.sampled_from([b"", b'{"type":"res']))
    cuts = sorted(draw(st.lists(st.integers(0, len(data)), max_size=20)))
    return data, cuts


def _run(data: bytes, cuts: list[int]) -> tuple[list[Event], PhaseStream]:
    stream = make(max_line_bytes=256)  # the z-line is over the cap
    events: list[Event] = []
    start = 0
    for cut in [*cuts, len(data)]:
        events += stream.feed(data[start:cut])
        start = cut
    return events + stream.finish(), stream


@settings(max_examples=examples(150), deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(chunked_streams())
def test_any_chunking_gives_identical_events(stream_and_cuts):
    data, cuts = stream_and_cuts
    chunked, stream = _run(data, cuts)
    whole, reference = _run(data, [])
    assert chunked == whole  # a constant clock: sequence, times, payloads all identical
    assert stream.tools.calls == reference.tools.calls and stream.cost == reference.cost
    assert [e.sequence for e in chunked] == list(range(1, len(chunked) + 1))
    assert stream.stdout_bytes == len(data)


@settings(max_examples=examples(100), deadline=None)
@given(st.binary(max_size=400), st.lists(st.integers(0, 400), max_size=10))
def test_arbitrary_bytes_never_raise_and_errors_stay_redacted(data, cuts):
    events, stream = _run(data, sorted(c for c in cuts if c <= len(data)))
    dropped = [e for e in events if isinstance(e.payload, ParseError) and not e.payload.repaired]
    assert stream.parse_error_count == len(dropped)
    for event in events:
        if isinstance(event.payload, ParseError):
            assert set(vars_of(event.payload)) == {
                "reason",
                "line_bytes",
                "line_number",
                "byte_offset",
                "detail",
                "repaired",
            }


def vars_of(payload) -> dict:
    return {name: getattr(payload, name) for name in payload.__slots__}


def test_turn_result_is_the_last_result_the_supervisor_reads():
    stream = make()
    stream.feed(INIT + result(0.5))
    assert isinstance(stream.results[-1], TurnResult)
    assert isinstance(stream.feed(text())[0].payload, AssistantText)
    assert isinstance(stream.feed(tool_result("nobody"))[0].payload, ToolCallFinished)
    assert stream.tools.orphan_results == 1


def test_lines_broken_only_in_their_encoding_are_repaired_and_delivered():
    # Node cuts strings inside an emoji and writes the lone half as an escape; a tool may pass
    # raw non-UTF-8 bytes through. Neither may cost the tool call or the final result.
    started = tool_use("t1").replace(b'"ls"', b'"echo \\ud83d"')
    finished = tool_result("t1").replace(b'"out"', b'"caf\xe9 \\ude00"')
    final = result(0.5).replace(b'"done"', b'"done \\ud83d"')
    stream = make()
    events = stream.feed(INIT + started + finished + final) + stream.finish()
    assert kinds(events) == [
        "SessionInit",
        "ParseError",
        "ToolCallStarted",
        "CostUpdate",
        "ParseError",
        "ToolCallFinished",
        "ParseError",
        "TurnResult",
        "CostUpdate",
    ]
    warnings = [e.payload for e in events if isinstance(e.payload, ParseError)]
    assert [(w.reason, w.line_number, w.repaired) for w in warnings] == [
        (ParseErrorReason.UNPAIRED_SURROGATE, 2, True),
        (ParseErrorReason.INVALID_UTF8, 3, True),
        (ParseErrorReason.UNPAIRED_SURROGATE, 4, True),
    ]
    assert [w.line_bytes for w in warnings] == [len(started) - 1, len(finished) - 1, len(final) - 1]
    assert stream.tools.get("t1").status == ToolCallStatus.SUCCEEDED
    assert stream.tools.get("t1").input_json == '{"command":"echo \ufffd"}'
    assert events[5].payload.content_preview == "caf\ufffd \ufffd"
    assert stream.results[0].result_text == "done \ufffd"
    assert stream.parse_error_count == 0  # nothing was lost


def test_a_line_nested_past_every_decoder_is_a_parse_error_and_the_stream_goes_on():
    """A hostile model's tool input nested 2,000 levels: msgspec's RecursionError escaped feed()."""
    deep = b'{"a":' * 2000 + b"1" + b"}" * 2000
    line = (b'{"type":"assistant","message":{"id":"m","role":"assistant","model":"x","content":[{"type":'
            b'"tool_use","id":"t1","name":"Bash","input":' + deep + b'}]},"session_id":"' + SID.encode()
            + b'","uuid":"u","parent_tool_use_id":null}\n')
    stream = make()
    events = stream.feed(INIT + line + text())
    assert kinds(events)[:2] == ["SessionInit", "ParseError"]
    assert "AssistantText" in kinds(events)


def test_a_stream_taken_over_continues_the_sequence_of_the_history_before_it():
    from helix_runner.domain.events import StderrOutput
    from helix_runner.domain.phase_stream import PhaseStream

    stream = PhaseStream()
    stream.continue_from(41, "s-1")
    event = stream.emit(StderrOutput("x", False))
    assert (event.sequence, event.session_id, stream.last_sequence) == (42, "s-1", 42)
    with pytest.raises(ValueError):
        stream.continue_from(7)


def test_line_over_cap_is_known_before_the_line_ends_and_stays_known():
    stream = make(max_line_bytes=256)
    stream.feed(b'{"type":"system","subtype":"x"}\n')
    assert not stream.line_over_cap
    stream.feed(b"y" * 300)  # no newline yet: the framer drops it as it comes
    assert stream.line_over_cap
    stream.feed(b"\n")
    assert stream.line_over_cap  # a dropped line was seen


def test_no_payload_class_has_a_subclass() -> None:
    # The run's per-event steps (recorder, controller, checkpoints) test ``payload.__class__`` against
    # sets of classes, which equals isinstance only while no payload class is subclassed.
    import typing

    from helix_runner.domain.events import Payload

    classes = typing.get_args(Payload)
    assert len(classes) > 20
    assert {c.__name__: c.__subclasses__() for c in classes if c.__subclasses__()} == {}
