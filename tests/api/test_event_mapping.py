"""Domain events → protobuf: total (every oneof field is produced) and faithful (units, optionals)."""

from __future__ import annotations

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from support.properties import examples

from helix.runner.v1 import events_pb2, resources_pb2
from helix_runner.api import event_mapping as m
from helix_runner.domain import events as d
from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.phase_stream import PhaseStream, PhaseStreamOptions
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus, ToolStats

USAGE = d.TokenUsage(1, 2, 3, 4, 5, 6)
COST = PhaseCostSnapshot(
    reported_usd=0.5,
    computed_usd=0.75,
    difference_usd=0.25,
    computed_only=False,
    tokens=USAGE,
    models=(ModelCost("m", USAGE, None, 0.75, PricingSource.PRICE_TABLE),),
    unpriced_models=("x",),
)

SAMPLES: list[d.Payload] = [
    d.SessionInit("m", ("Bash",), "/w", "2.1.330", "default", ("gh:ok",), ("cap",), "key", 2),
    d.AssistantText("hi", 2, False, "msg", "m"),
    d.Thinking("", 0, False, True, "msg"),
    d.ToolCallStarted("t", "Bash", "{}", 2, False, "msg", True),
    d.ToolCallFinished("t", "Bash", True, "err", 3, False, '"e"', False, 1_500_000_000, 40),
    d.ApiRetry(2, 10, 1207, 429, "rate_limit"),
    d.ApiError("server_error", 500, "API Error"),
    d.RateLimit("allowed", 1795306531, "five_hour", 0.5),
    d.TaskEvent(
        d.TaskEventKind.NOTIFICATION,
        "task",
        "t",
        "desc",
        "general",
        "local_agent",
        "completed",
        "s",
        True,
        3258,
        1,
        142,
    ),
    d.Compaction(True, "manual", 1102, 2538, 37),
    d.CliStatus("requesting", "default"),
    d.HookEvent(d.HookEventKind.RESPONSE, "h", "PreToolUse:Bash", "PreToolUse", 0, "success", "ran"),
    d.PermissionDenied("Write", "t", "rule", "because", "denied"),
    d.PartialDelta(d.PartialDeltaKind.TEXT_DELTA, 1, "He", "msg"),
    d.TurnResult(
        "error_max_turns",
        True,
        400,
        "max_turns",
        3,
        "",
        False,
        152,
        46,
        0.0114576,
        USAGE,
        (d.ModelUsage("m", USAGE, 0.01),),
        (d.PermissionDenial("Write", "t", "{}"),),
        ("Reached maximum number of turns (2)",),
        1,
        "tool_use",
    ),
    d.ControlResponse("r2", False, "Unsupported", "unsupported_request"),
    d.ControlRequest("id", "can_use_tool", "Write", "t"),
    d.UserMessage("[Request interrupted by user]", False, False, False),
    d.ToolProgress("t", "Bash", 12.5),
    d.CostUpdate(COST),
    d.StderrOutput("warn", True),
    d.PhaseStatusChanged(d.PhaseStatus.RUNNING, d.PhaseStatus.PAUSED, "pause"),
    d.ControlEvent(d.ControlEventKind.TOOL_DENIED, "t", "Write", "bp", "no", "{}"),
    d.ParseError(d.ParseErrorReason.INVALID_JSON, 30, 7, 100, "at char 29"),
    d.Unknown("brand_new", "x", "", 40),
    d.SessionWritesLost("ENOSPC", ("transcript", "global_config"), ("s-1",)),
    d.GatewayEvent(d.GatewayEventKind.RATE_LIMITED, 429, "claude-x", "rate_limit_error: slow down", "",
                   7_000_000_000, "req_1"),
]


def event(payload: d.Payload) -> d.Event:
    return d.Event(9, 1_700_000_000_123_456_789, "sess", "toolu_P", "a1", "u", payload)


def test_every_oneof_field_is_produced_by_some_domain_payload():
    oneof = {f.name for f in events_pb2.StreamEvent.DESCRIPTOR.oneofs_by_name["payload"].fields}
    produced = {m.event_to_proto(event(p)).WhichOneof("payload") for p in SAMPLES}
    assert produced == oneof
    assert {name for name, _ in m.PAYLOAD_FIELDS.values()} == oneof


def test_every_payload_class_has_a_mapping_and_a_sample():
    assert {type(p) for p in SAMPLES} == set(m.PAYLOAD_FIELDS)


@pytest.mark.parametrize("payload", SAMPLES, ids=lambda p: type(p).__name__)
def test_payload_kind_names_the_oneof_field(payload):
    msg = m.event_to_proto(event(payload))
    assert msg.WhichOneof("payload") == m.payload_kind(payload)
    assert events_pb2.StreamEvent.FromString(msg.SerializeToString()) == msg


def test_envelope():
    msg = m.event_to_proto(event(SAMPLES[1]), job_id="job", phase_id="ph")
    assert (
        msg.sequence,
        msg.job_id,
        msg.phase_id,
        msg.session_id,
        msg.parent_tool_use_id,
        msg.agent_id,
        msg.uuid,
    ) == (9, "job", "ph", "sess", "toolu_P", "a1", "u")
    assert msg.receive_time.ToNanoseconds() == 1_700_000_000_123_456_789


def test_default_valued_payload_still_selects_its_field():
    msg = m.event_to_proto(event(d.CliStatus("", "")))
    assert msg.WhichOneof("payload") == "cli_status"


def test_units_and_optionals():
    finished = m.event_to_proto(event(SAMPLES[4])).tool_call_finished
    assert (
        finished.duration.ToNanoseconds() == 1_500_000_000 and finished.hook_duration.ToMilliseconds() == 40
    )
    unfinished = m.event_to_proto(event(d.ToolCallFinished("t", "", False, "", 0, False))).tool_call_finished
    assert not unfinished.HasField("duration") and not unfinished.HasField("hook_duration")

    retry = m.event_to_proto(event(SAMPLES[5])).api_retry
    assert retry.retry_delay.ToMilliseconds() == 1207 and retry.HasField("error_status")
    no_status = m.event_to_proto(event(d.ApiRetry(1, 2, 3, None, "x"))).api_retry
    assert not no_status.HasField("error_status")

    result = m.event_to_proto(event(SAMPLES[14])).turn_result
    assert (result.api_error_status, result.total_cost_usd, result.duration.ToMilliseconds()) == (
        400,
        0.0114576,
        152,
    )
    assert (
        result.usage.cache_write_1h_input_tokens == 5
        and result.model_usage[0].tokens.web_search_requests == 6
    )
    assert list(result.errors) == ["Reached maximum number of turns (2)"]
    assert result.permission_denials[0].tool_name == "Write"

    no_cost = d.TurnResult(
        "success", False, None, "", 1, "", False, None, None, None, USAGE, (), (), (), 0, ""
    )
    msg = m.event_to_proto(event(no_cost)).turn_result
    assert not msg.HasField("total_cost_usd") and not msg.HasField("api_error_status")

    assert m.event_to_proto(event(SAMPLES[7])).rate_limit.resets_at.seconds == 1795306531
    assert m.event_to_proto(event(SAMPLES[18])).tool_progress.elapsed.ToMilliseconds() == 12500
    status = m.event_to_proto(event(SAMPLES[21])).status_changed
    assert (status.from_status, status.to_status) == (
        resources_pb2.PHASE_STATUS_RUNNING,
        resources_pb2.PHASE_STATUS_PAUSED,
    )
    assert m.event_to_proto(event(SAMPLES[8])).task.kind == events_pb2.TASK_EVENT_KIND_NOTIFICATION
    assert (
        m.event_to_proto(event(SAMPLES[23])).parse_error.reason == events_pb2.PARSE_ERROR_REASON_INVALID_JSON
    )


def test_phase_cost():
    msg = m.phase_cost_to_proto(COST)
    assert (msg.reported_usd, msg.computed_usd, msg.difference_usd, msg.computed_only) == (
        0.5,
        0.75,
        0.25,
        False,
    )
    assert msg.models[0].pricing_source == resources_pb2.PRICING_SOURCE_PRICE_TABLE
    assert not msg.models[0].HasField("reported_usd") and list(msg.unpriced_models) == ["x"]
    computed_only = PhaseCostSnapshot(None, 1.0, None, True, USAGE, (), ())
    msg = m.phase_cost_to_proto(computed_only)
    assert not msg.HasField("reported_usd") and not msg.HasField("difference_usd") and msg.computed_only


def test_tool_call_and_stats():
    running = ToolCall("t", "Bash", "{}", 2, False, "toolu_P", ToolCallStatus.RUNNING, 1_000, 4)
    msg = m.tool_call_to_proto(running, job_id="j", phase_id="p")
    assert (msg.job_id, msg.status, msg.start_sequence, msg.parent_tool_use_id) == (
        "j",
        resources_pb2.TOOL_CALL_STATUS_RUNNING,
        4,
        "toolu_P",
    )
    assert not msg.HasField("end_time") and not msg.HasField("duration")
    done = ToolCall(
        "t",
        "Bash",
        "{}",
        2,
        False,
        "",
        ToolCallStatus.FAILED,
        1_000,
        4,
        end_time_ns=5_000,
        end_sequence=6,
        result_preview="Exit code 3",
        result_bytes=11,
    )
    msg = m.tool_call_to_proto(done)
    assert msg.duration.ToNanoseconds() == 4_000 and msg.status == resources_pb2.TOOL_CALL_STATUS_FAILED
    stats = m.tool_stats_to_proto(ToolStats("Bash", 3, 1, 1, 9_000_000, 4_500_000, 8_000_000))
    assert (stats.count, stats.failures, stats.unfinished, stats.p95_duration.ToMilliseconds()) == (
        3,
        1,
        1,
        8,
    )


# ------------------------------------------------------------------------------------------------
# Property: whatever JSON the CLI writes, every event it yields maps to a valid StreamEvent.

_json = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False)
    | st.text(max_size=8),
    lambda children: (
        st.lists(children, max_size=3) | st.dictionaries(st.text(max_size=6), children, max_size=3)
    ),
    max_leaves=10,
)
_KEYS = [
    "session_id",
    "uuid",
    "parent_tool_use_id",
    "agent_id",
    "message",
    "content",
    "id",
    "model",
    "usage",
    "event",
    "tool_use_result",
    "is_error",
    "modelUsage",
    "total_cost_usd",
    "errors",
    "permission_denials",
    "result",
    "request",
    "response",
    "rate_limit_info",
    "tools",
    "mcp_servers",
    "compact_metadata",
    "patch",
    "status",
]


@st.composite
def cli_lines(draw):
    obj = draw(st.dictionaries(st.sampled_from(_KEYS), _json, max_size=6))
    obj["type"] = draw(
        st.sampled_from(
            [
                "assistant",
                "user",
                "system",
                "result",
                "stream_event",
                "rate_limit_event",
                "control_request",
                "control_response",
                "control_cancel_request",
                "tool_progress",
                "keep_alive",
                "novel",
            ]
        )
    )
    obj["subtype"] = draw(
        st.sampled_from(
            [
                "init",
                "api_retry",
                "status",
                "compact_boundary",
                "hook_response",
                "permission_denied",
                "task_updated",
                "success",
                "error_max_turns",
                "novel",
            ]
        )
    )
    if obj["type"] in ("assistant", "user") and draw(st.booleans()):
        block = draw(
            st.dictionaries(
                st.sampled_from(["id", "name", "input", "text", "tool_use_id", "content"]), _json, max_size=4
            )
        )
        block["type"] = draw(st.sampled_from(["text", "tool_use", "tool_result", "thinking", "image"]))
        obj["message"] = {"id": "m", "model": "x", "content": [block], "usage": draw(_json)}
    return orjson.dumps(obj) + b"\n"


@settings(max_examples=examples(200), deadline=None)
@given(st.lists(cli_lines(), max_size=6))
def test_any_cli_json_maps_to_a_valid_stream_event(lines):
    stream = PhaseStream(PhaseStreamOptions(include_partial_messages=True, include_raw_unknown=True))
    events = stream.feed(b"".join(lines)) + stream.finish()
    for e in events:
        msg = m.event_to_proto(e, job_id="j", phase_id="p")
        assert events_pb2.StreamEvent.FromString(msg.SerializeToString()) == msg
    for call in stream.tools.calls:
        m.tool_call_to_proto(call).SerializeToString()
    m.phase_cost_to_proto(stream.cost).SerializeToString()


def test_numbers_out_of_the_protos_range_are_clamped_not_fatal():
    lines = [
        {
            "type": "result",
            "subtype": "success",
            "num_turns": 2**40,
            "result_index": 2**63,
            "duration_ms": 2**64 - 1,
            "api_error_status": 2**33,
            "usage": {"input_tokens": 2**64 - 1},
        },
        {
            "type": "system",
            "subtype": "api_retry",
            "attempt": 2**40,
            "max_retries": -(2**40),
            "retry_delay_ms": 2**64 - 1,
        },
        {"type": "tool_progress", "tool_use_id": "t", "elapsed_time_seconds": 1e300},
        {"type": "rate_limit_event", "rate_limit_info": {"resetsAt": 10**18}},
        {
            "type": "stream_event",
            "event": {
                "type": "content_block_delta",
                "index": 2**40,
                "delta": {"type": "text_delta", "text": "x"},
            },
        },
    ]
    stream = PhaseStream(PhaseStreamOptions(include_partial_messages=True))
    events = stream.feed(b"".join(orjson.dumps(obj) + b"\n" for obj in lines))
    protos = {m.payload_kind(e.payload): m.event_to_proto(e) for e in events}
    result = protos["turn_result"].turn_result
    assert (result.num_turns, result.result_index, result.api_error_status) == (
        2**31 - 1,
        2**31 - 1,
        2**31 - 1,
    )
    assert result.usage.input_tokens == 2**63 - 1
    assert result.duration.seconds == 315_576_000_000
    assert protos["api_retry"].api_retry.max_retries == -(2**31)
    assert protos["rate_limit"].rate_limit.resets_at.seconds == 253_402_300_799
    for msg in protos.values():
        msg.SerializeToString()


# ------------------------------------------------------------------------------------------------
# Attempts, retries and the admission queue.


@pytest.mark.parametrize(
    ("domain_enum", "proto_enum", "prefix"),
    [
        (d.PhaseStatus, resources_pb2.PhaseStatus, "PHASE_STATUS_"),
        (d.ControlEventKind, events_pb2.ControlEventKind, "CONTROL_EVENT_KIND_"),
        (d.AttemptEndKind, resources_pb2.AttemptEndKind, "ATTEMPT_END_KIND_"),
        (d.QueueReason, resources_pb2.QueueReason, "QUEUE_REASON_"),
    ],
    ids=["PhaseStatus", "ControlEventKind", "AttemptEndKind", "QueueReason"],
)
def test_domain_enums_mirror_the_contract(domain_enum, proto_enum, prefix):
    # The mapping copies numbers (int(enum)); a value added on one side only would be mislabelled.
    contract = {name.removeprefix(prefix): number for name, number in proto_enum.items()}
    assert {member.name: member.value for member in domain_enum} == contract


def test_retry_and_attempt_control_events():
    retry = d.ControlEvent(
        d.ControlEventKind.RETRY_SCHEDULED,
        message="the API was overloaded (HTTP 529); attempt 2 of 3 starts in 1.5 s",
        attempt=1,
        max_attempts=3,
        end_kind=d.AttemptEndKind.API_OVERLOADED,
        retry_delay_ns=1_500_000_000,
    )
    msg = m.event_to_proto(event(retry)).control
    assert (msg.kind, msg.attempt, msg.max_attempts, msg.end_kind) == (
        events_pb2.CONTROL_EVENT_KIND_RETRY_SCHEDULED,
        1,
        3,
        resources_pb2.ATTEMPT_END_KIND_API_OVERLOADED,
    )
    assert msg.retry_delay.ToMilliseconds() == 1500 and msg.message.startswith("the API was overloaded")
    assert not msg.HasField("queue")

    started = m.event_to_proto(
        event(
            d.ControlEvent(
                d.ControlEventKind.ATTEMPT_STARTED, attempt=2, max_attempts=3, resumed_session_id="s1"
            )
        )
    ).control
    assert (started.kind, started.attempt, started.resumed_session_id) == (
        events_pb2.CONTROL_EVENT_KIND_ATTEMPT_STARTED,
        2,
        "s1",
    )
    assert not started.HasField("retry_delay")


def test_queued_control_event_carries_the_queue_state():
    held = d.QueueState(
        d.QueueReason.RATE_LIMITED,
        "rate-limited until 2026-11-23T14:05:00Z",
        position=0,
        queued_count=7,
        not_before_ns=1_795_306_531_000_000_000,
        enqueue_time_ns=1_795_306_000_000_000_000,
        next_attempt=2,
    )
    msg = m.event_to_proto(
        event(d.ControlEvent(d.ControlEventKind.QUEUED, message=held.detail, queue=held))
    ).control
    assert (msg.queue.reason, msg.queue.position, msg.queue.queued_count, msg.queue.next_attempt) == (
        resources_pb2.QUEUE_REASON_RATE_LIMITED,
        0,
        7,
        2,
    )
    assert msg.queue.not_before.seconds == 1_795_306_531 and msg.queue.enqueue_time.seconds == 1_795_306_000
    waiting = m.queue_state_to_proto(d.QueueState(d.QueueReason.SERVER_LIMIT, position=3, queued_count=3))
    assert not waiting.HasField("not_before") and not waiting.HasField("enqueue_time")


def test_turn_result_startup_failure_reason():
    result = d.TurnResult(
        "error_during_execution",
        True,
        None,
        "",
        0,
        "",
        False,
        None,
        None,
        0.0,
        USAGE,
        (),
        (),
        ("Configuration error",),
        0,
        "",
        startup_failure_reason="config_file_invalid",
    )
    assert m.event_to_proto(event(result)).turn_result.startup_failure_reason == "config_file_invalid"


def test_phase_result_lists_its_attempts():
    from helix_runner.api.proto_records import result_to_proto
    from helix_runner.domain.phase_result import Attempt, PhaseResult

    first = Attempt(
        1,
        d.PhaseStatus.FAILED,
        "the API was overloaded (HTTP 529)",
        d.AttemptEndKind.API_OVERLOADED,
        True,
        exit_code=1,
        api_error_status=529,
        session_id="s1",
        start_time_ns=1_000_000_000,
        end_time_ns=3_000_000_000,
        cost=COST,
        first_sequence=1,
        last_sequence=9,
        retry_delay_ns=750_000_000,
    )
    second = Attempt(
        2,
        d.PhaseStatus.SUCCEEDED,
        "completed",
        d.AttemptEndKind.COMPLETED,
        session_id="s1",
        resumed_session_id="s1",
        first_sequence=10,
        last_sequence=14,
        exit_code=0,
    )
    result = PhaseResult("j", "p", d.PhaseStatus.SUCCEEDED, "completed", attempts=(first, second))
    a1, a2 = result_to_proto(result).attempts
    assert (a1.number, a1.status, a1.end_kind, a1.retryable, a1.api_error_status, a1.exit_code) == (
        1,
        resources_pb2.PHASE_STATUS_FAILED,
        resources_pb2.ATTEMPT_END_KIND_API_OVERLOADED,
        True,
        529,
        1,
    )
    assert a1.retry_delay.ToMilliseconds() == 750 and a1.cost.reported_usd == 0.5
    assert (a1.start_time.seconds, a1.end_time.seconds, a1.first_sequence, a1.last_sequence) == (1, 3, 1, 9)
    assert (a2.resumed_session_id, a2.first_sequence, a2.exit_code) == ("s1", 10, 0)
    assert not a2.HasField("api_error_status") and not a2.HasField("end_time") and not a2.HasField("cost")


@settings(max_examples=examples(300), deadline=None)
@given(st.one_of(st.integers(min_value=-(2**62), max_value=2**62),
                 st.sampled_from([0, 1, -1, 999_999_999, 1_000_000_000, -1_000_000_001])))
def test_receive_time_is_the_timestamp_from_nanoseconds_would_give(ns):
    # Events build their timestamps with the constructor (faster); the value must not change.
    from google.protobuf import timestamp_pb2

    expected = timestamp_pb2.Timestamp()
    expected.FromNanoseconds(ns)
    assert m._timestamp_ns(ns) == expected


def test_an_attempt_names_the_replica_that_ran_it_and_a_moved_end():
    from helix_runner.domain.phase_result import Attempt
    from helix_runner.domain.phase_status import PhaseStatus

    moved = Attempt(number=1, status=PhaseStatus.INTERRUPTED, reason="moved to another replica (draining)",
                    end_kind=d.AttemptEndKind.MOVED, retryable=True, replica_id="replica-a")
    msg = m.attempt_to_proto(moved)
    assert (msg.replica_id, msg.end_kind) == ("replica-a", resources_pb2.ATTEMPT_END_KIND_MOVED)
