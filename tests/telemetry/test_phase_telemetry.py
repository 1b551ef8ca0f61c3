"""PhaseTelemetry driven by the domain events of real CLI transcripts (``tests/fixtures/telemetry``).

The transcripts are copies of the shared corpus (CLI 2.1.330 against the scripted API); every
expected value below can be read off the file: the tool_use / tool_result lines, the message ids,
the ``result`` usage. The replay clock puts line k at ``line_time(k)``, so span durations are exact.
"""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.trace import NonRecordingSpan, SpanContext, StatusCode, TraceFlags, set_span_in_context
from support.telemetry import T0, Spans, line_time, replay, sample, transcript

from helix_runner.domain.events import (
    ControlEvent,
    ControlEventKind,
    ParseError,
    PhaseStatusChanged,
    ToolCallFinished,
)
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.telemetry import PhaseTelemetry, Telemetry, TelemetrySettings
from helix_runner.telemetry.metrics import OVERFLOW_LABEL

TOOLS = "localcli-02-tools.jsonl"  # Bash (line 3 -> 4), Read (line 5 -> 6), 3 API messages, 1 result
ERRORS = "localcli-04-toolerror.jsonl"  # Read and Bash, both results is_error
SUBAGENT = "localcli-09-subagent.jsonl"  # Agent (line 3 -> 6); its Glob (8 -> 10); 2 turns, 2 results
RETRIES = "localcli-28-ratelimit429-recovered.jsonl"  # two api_retry 429 lines, then success
MODEL = "claude-opus-5-5"
BASH_ID = "toolu_012c65ce741dc747fa9a239174"

ORCHESTRATOR = SpanContext(
    trace_id=0x0AF7651916CD43DD8448EB211C80319C,
    span_id=0xB7AD6B7169203331,
    is_remote=True,
    trace_flags=TraceFlags(TraceFlags.SAMPLED),
)


def phase(
    telemetry: Telemetry, project: str = "proj-a", *, parent: SpanContext | None = ORCHESTRATOR
) -> PhaseTelemetry:
    context = set_span_in_context(NonRecordingSpan(parent)) if parent is not None else None
    return PhaseTelemetry(
        telemetry.metrics, telemetry.tracer, job_id="job-1", phase_id="p1", project_id=project, parent=context
    )


def ms(span) -> float:
    return (span.end_time - span.start_time) / 1e6


def test_span_tree_of_a_phase_with_tools(telemetry: Telemetry, spans: Spans) -> None:
    replay(TOOLS, phase(telemetry))

    attempt = spans.one("helix.attempt")
    assert attempt.parent.span_id == ORCHESTRATOR.span_id
    assert attempt.context.trace_id == ORCHESTRATOR.trace_id
    assert (
        attempt.attributes["helix.job.id"] == "job-1" and attempt.attributes["helix.project.id"] == "proj-a"
    )
    assert attempt.attributes["helix.attempt.number"] == 1
    assert attempt.status.status_code is StatusCode.OK
    (turn,) = spans.children(attempt)
    assert turn.name == "invoke_agent claude-code"
    assert turn.attributes["gen_ai.operation.name"] == "invoke_agent"
    assert turn.attributes["gen_ai.response.finish_reasons"] == ("end_turn",)
    # From the system/init line (1) to the result line (8).
    assert (turn.start_time, turn.end_time) == (line_time(1), line_time(8))
    children = spans.children(turn)
    assert [s.name for s in children] == [
        f"chat {MODEL}",
        "execute_tool Bash",
        f"chat {MODEL}",
        "execute_tool Read",
        f"chat {MODEL}",
    ]
    chats = [s for s in children if s.name.startswith("chat")]
    assert [c.attributes["gen_ai.response.id"] for c in chats] == [
        "msg_0133333d1ba6444bf9ba7a27bb",
        "msg_0146571e60649a400597afdcde",
        "msg_0104599370fa854c30b485bc65",
    ]
    assert all(c.attributes["gen_ai.operation.name"] == "chat" for c in chats)
    # The first message spans two lines (text, then tool_use): 2 and 3.
    assert (chats[0].start_time, chats[0].end_time) == (line_time(2), line_time(3))
    bash, read = (s for s in children if s.name.startswith("execute_tool"))
    assert bash.attributes["gen_ai.tool.name"] == "Bash" and bash.attributes["gen_ai.tool.call.id"] == BASH_ID
    assert bash.attributes["gen_ai.operation.name"] == "execute_tool"
    assert bash.attributes["gen_ai.tool.type"] == "function"
    assert (bash.start_time, bash.end_time) == (line_time(3), line_time(4))
    assert (read.start_time, read.end_time) == (line_time(5), line_time(6))
    assert (
        bash.attributes["helix.tool.run_ms"] == ms(bash) == 4.0 and bash.attributes["helix.tool.held_ms"] == 0
    )
    assert bash.status.status_code is StatusCode.UNSET and read.status.status_code is StatusCode.UNSET


def test_token_usage_converts_to_otel_input_tokens(telemetry: Telemetry, spans: Spans) -> None:
    replay(TOOLS, phase(telemetry))
    usage = orjson.loads(transcript(TOOLS)[-1])["usage"]  # the result line
    turn = spans.one("invoke_agent")
    # OpenTelemetry's input tokens include the cache; Anthropic's do not.
    assert (
        turn.attributes["gen_ai.usage.input_tokens"]
        == usage["input_tokens"] + usage["cache_read_input_tokens"] + usage["cache_creation_input_tokens"]
        == 3444 + 4096
    )
    assert turn.attributes["gen_ai.usage.cache_read.input_tokens"] == 4096
    assert turn.attributes["gen_ai.usage.cache_creation.input_tokens"] == 0
    assert turn.attributes["gen_ai.usage.output_tokens"] == usage["output_tokens"] == 143
    attempt = spans.one("helix.attempt")
    assert attempt.attributes["helix.cost.reported_usd"] == pytest.approx(0.0174552)
    assert attempt.attributes["gen_ai.usage.input_tokens"] == 3444 + 4096


def test_tool_errors_mark_their_spans_and_count_as_errors(telemetry: Telemetry, spans: Spans) -> None:
    replay(ERRORS, phase(telemetry))

    tools = spans.named("execute_tool")
    assert [s.name for s in tools] == ["execute_tool Read", "execute_tool Bash"]
    for span in tools:
        assert span.status.status_code is StatusCode.ERROR
        assert span.attributes["error.type"] == "tool_error"
    for tool in ("Read", "Bash"):
        assert sample(telemetry, "helix_tool_calls_total", tool=tool, outcome="error") == 1
        assert sample(telemetry, "helix_tool_calls_total", tool=tool, outcome="success") == 0


def test_subagent_calls_nest_under_their_agent_call(telemetry: Telemetry, spans: Spans) -> None:
    replay(SUBAGENT, phase(telemetry))

    agent = spans.one("execute_tool Agent")
    glob = spans.one("execute_tool Glob")
    assert glob.parent.span_id == agent.context.span_id
    assert glob.attributes["helix.tool.parent_call_id"] == agent.attributes["gen_ai.tool.call.id"]
    assert (glob.start_time, glob.end_time) == (line_time(8), line_time(10))
    # The subagent's two API messages (lines 8 and 11) nest under the call too, after it returned
    # (a background agent: its tool_result, line 6, only says it was launched).
    sub_chats = [s for s in spans.children(agent) if s.name.startswith("chat")]
    assert [c.attributes["gen_ai.response.id"] for c in sub_chats] == [
        "msg_0160e6c7e9d9ab4121a6b11888",
        "msg_01ce00da28f8b4485ba1decfa8",
    ]
    # Two turns: the second system/init (line 15) starts the follow-up turn; the results (17, 18)
    # close them in order.
    turns = spans.named("invoke_agent")
    assert [(s.start_time, s.end_time) for s in turns] == [
        (line_time(1), line_time(17)),
        (line_time(15), line_time(18)),
    ]
    assert [s.attributes["helix.turn.index"] for s in turns] == [1, 2]
    assert spans.parent_of(agent) == turns[0]
    (last_chat,) = [s for s in spans.children(turns[1]) if s.name.startswith("chat")]
    assert last_chat.attributes["gen_ai.response.id"] == "msg_010b09cc62b0e742a28f5befb0"


def test_held_time_is_split_from_run_time(telemetry: Telemetry, spans: Spans) -> None:
    # A breakpoint holds Bash right after its tool_use line (3) for 3 ms, then it is approved;
    # its result is line 4, 4 ms after line 3.
    def inject(k: int):
        if k != 3:
            return []
        return [
            (0, PhaseStatusChanged(PhaseStatus.RUNNING, PhaseStatus.AWAITING_APPROVAL, "held")),
            (0, ControlEvent(ControlEventKind.BREAKPOINT_HIT, BASH_ID, "Bash", "bp-1")),
            (3_000_000, ControlEvent(ControlEventKind.TOOL_APPROVED, BASH_ID, "Bash", "bp-1")),
            (3_000_000, PhaseStatusChanged(PhaseStatus.AWAITING_APPROVAL, PhaseStatus.RUNNING, "running")),
        ]

    seen = replay(TOOLS, phase(telemetry), inject=inject)

    (finished,) = [
        e.payload
        for e in seen.events
        if isinstance(e.payload, ToolCallFinished) and e.payload.tool_use_id == BASH_ID
    ]
    assert finished.duration_ns == 4_000_000
    bash = spans.one("execute_tool Bash")
    assert (bash.attributes["helix.tool.held_ms"], bash.attributes["helix.tool.run_ms"]) == (3.0, 1.0)
    hold = spans.one("helix.hold")
    assert hold.parent.span_id == bash.context.span_id and ms(hold) == 3.0
    assert (
        hold.attributes["helix.hold.reason"] == "breakpoint"
        and hold.attributes["helix.breakpoint.id"] == "bp-1"
    )
    assert sample(telemetry, "helix_tool_call_held_seconds_count", tool="Bash") == 1
    assert sample(telemetry, "helix_tool_call_held_seconds_sum", tool="Bash") == pytest.approx(0.003)
    assert sample(telemetry, "helix_tool_call_duration_seconds_sum", tool="Bash") == pytest.approx(0.001)
    assert sample(telemetry, "helix_phases_held") == 0


def test_a_pause_hold_ends_when_the_phase_resumes() -> None:
    telemetry = Telemetry()
    held_gauge: list[float] = []

    def inject(k: int):
        if k == 3:  # Bash is held by a pause, and resumed 2 ms later; its result is line 4
            return [
                (0, PhaseStatusChanged(PhaseStatus.PAUSING, PhaseStatus.PAUSED, "held")),
                (0, ControlEvent(ControlEventKind.PAUSED, BASH_ID, "Bash")),
                (2_000_000, ControlEvent(ControlEventKind.RESUMED)),
            ]
        if k == 4:
            held_gauge.append(sample(telemetry, "helix_phases_held"))
            return [(0, PhaseStatusChanged(PhaseStatus.PAUSED, PhaseStatus.RUNNING, "running"))]
        return []

    replay(TOOLS, phase(telemetry, parent=None), inject=inject)
    assert held_gauge == [1]
    assert sample(telemetry, "helix_phases_held") == 0
    assert sample(telemetry, "helix_tool_call_held_seconds_sum", tool="Bash") == pytest.approx(0.002)
    assert sample(telemetry, "helix_tool_call_duration_seconds_sum", tool="Bash") == pytest.approx(0.002)


def test_retries_are_counted_and_marked_on_the_turn(telemetry: Telemetry, spans: Spans) -> None:
    replay(RETRIES, phase(telemetry))

    assert sample(telemetry, "helix_api_retries_total", error_status="429") == 2
    turn = spans.one("invoke_agent")
    retries = [ev for ev in turn.events if ev.name == "helix.api_retry"]
    assert [
        (ev.attributes["helix.retry.attempt"], ev.attributes["http.response.status_code"]) for ev in retries
    ] == [(1, 429), (2, 429)]
    assert [ev.timestamp for ev in retries] == [line_time(2), line_time(3)]


def test_unfinished_call_is_an_error_and_counted(telemetry: Telemetry, spans: Spans) -> None:
    cut = transcript(TOOLS)[:3]  # ends right after Bash's tool_use line
    replay(cut, phase(telemetry), status=PhaseStatus.INCOMPLETE)

    bash = spans.one("execute_tool Bash")
    assert bash.status.status_code is StatusCode.ERROR and bash.attributes["error.type"] == "unfinished"
    assert bash.end_time == line_time(4)  # the phase's end
    turn = spans.one("invoke_agent")
    assert turn.status.status_code is StatusCode.ERROR and turn.attributes["error.type"] == "incomplete"
    attempt = spans.one("helix.attempt")
    assert attempt.status.status_code is StatusCode.ERROR
    assert attempt.attributes["helix.phase.status"] == "INCOMPLETE"
    assert sample(telemetry, "helix_tool_calls_total", tool="Bash", outcome="unfinished") == 1
    assert sample(telemetry, "helix_phases_finished_total", status="INCOMPLETE") == 1


def test_phase_metrics_move_by_the_right_amounts(telemetry: Telemetry) -> None:
    first = replay(TOOLS, phase(telemetry, "proj-a"))
    assert sample(telemetry, "helix_phases_started_total") == 1
    assert sample(telemetry, "helix_phases_running") == 0
    assert sample(telemetry, "helix_phases_finished_total", status="SUCCEEDED") == 1
    assert sample(telemetry, "helix_phase_duration_seconds_count", status="SUCCEEDED") == 1
    assert sample(telemetry, "helix_phase_duration_seconds_sum", status="SUCCEEDED") == pytest.approx(
        (first.result.end_time_ns - T0) / 1e9
    )
    assert sample(telemetry, "helix_events_published_total") == len(first.events)
    for tool, seconds in (("Bash", 0.004), ("Read", 0.006)):
        assert sample(telemetry, "helix_tool_calls_total", tool=tool, outcome="success") == 1
        assert sample(telemetry, "helix_tool_call_duration_seconds_count", tool=tool) == 1
        assert sample(telemetry, "helix_tool_call_duration_seconds_sum", tool=tool) == pytest.approx(seconds)
    # Tokens and cost are the latest running totals, never summed per result or per update.
    assert sample(telemetry, "helix_tokens_total", model=MODEL, kind="input") == 3444
    assert sample(telemetry, "helix_tokens_total", model=MODEL, kind="cache_read") == 4096
    assert sample(telemetry, "helix_tokens_total", model=MODEL, kind="output") == 143
    cost = first.result.cost
    assert sample(
        telemetry, "helix_cost_usd_total", model=MODEL, project="proj-a", source="reported"
    ) == pytest.approx(0.0174552)
    assert sample(
        telemetry, "helix_cost_usd_total", model=MODEL, project="proj-a", source="computed"
    ) == pytest.approx(cost.computed_usd)

    replay(TOOLS, phase(telemetry, "proj-a"))
    assert sample(telemetry, "helix_phases_started_total") == 2
    assert sample(telemetry, "helix_tool_calls_total", tool="Bash", outcome="success") == 2
    assert sample(telemetry, "helix_tokens_total", model=MODEL, kind="input") == 2 * 3444
    assert sample(
        telemetry, "helix_cost_usd_total", model=MODEL, project="proj-a", source="reported"
    ) == pytest.approx(2 * 0.0174552)


def test_two_results_of_one_process_count_once(telemetry: Telemetry) -> None:
    # Both results of the subagent transcript carry the same running totals (modelUsage).
    replay(SUBAGENT, phase(telemetry))
    assert sample(telemetry, "helix_tokens_total", model=MODEL, kind="input") == 5703
    assert sample(
        telemetry, "helix_cost_usd_total", model=MODEL, project="proj-a", source="reported"
    ) == pytest.approx(0.0278608)


def test_project_labels_are_bounded() -> None:
    telemetry = Telemetry(TelemetrySettings(max_project_labels=1))
    replay(TOOLS, phase(telemetry, "first", parent=None))
    replay(TOOLS, phase(telemetry, "second", parent=None))
    replay(TOOLS, phase(telemetry, "first", parent=None))
    reported = {
        p: sample(telemetry, "helix_cost_usd_total", model=MODEL, project=p, source="reported")
        for p in ("first", "second", OVERFLOW_LABEL)
    }
    assert reported == pytest.approx({"first": 2 * 0.0174552, "second": 0, OVERFLOW_LABEL: 0.0174552})


def test_parse_errors_are_counted_by_reason() -> None:
    telemetry = Telemetry()
    observer = phase(telemetry, parent=None)
    observer.on_start(T0)
    events = PhaseStream().feed(b"this is not json\n")
    assert [type(e.payload) for e in events] == [ParseError]
    observer.on_events(events)
    assert sample(telemetry, "helix_parse_errors_total", reason="not_json") == 1


def test_without_a_tracer_there_are_metrics_but_no_trace_context(spans: Spans) -> None:
    telemetry = Telemetry()  # no tracer provider: tracing off
    observer = phase(telemetry)
    replay(TOOLS, observer)
    assert observer.child_env({}) == {}
    assert sample(telemetry, "helix_tool_calls_total", tool="Bash", outcome="success") == 1
    assert spans.all() == []


def test_a_fully_disabled_observer_does_nothing() -> None:
    observer = PhaseTelemetry(None, None, job_id="j", phase_id="p", project_id="x")
    seen = replay(TOOLS, observer)
    assert seen.events and observer.child_env({}) == {}


def test_a_telemetry_failure_never_reaches_the_phase(telemetry: Telemetry, caplog) -> None:
    observer = phase(telemetry)

    def broken(event) -> None:
        raise RuntimeError("bug")

    observer._traced[ToolCallFinished] = broken  # a bug in a handler
    replay(TOOLS, observer)  # would raise if the failure escaped
    assert "phase telemetry failed" in caplog.text


def test_a_result_without_lines_of_its_turn_is_one_ended_turn(
    telemetry: Telemetry, spans: Spans, caplog
) -> None:
    replay(transcript(TOOLS)[-1:], phase(telemetry))  # only the result line
    (turn,) = spans.named("invoke_agent")
    assert turn.start_time == turn.end_time == line_time(1)
    assert spans.one("helix.attempt").status.status_code is StatusCode.OK
    assert "ended span" not in caplog.text
