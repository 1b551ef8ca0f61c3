"""Views to resource messages: stored figures parsed as they were written, live ones mapped, nothing lost."""

from __future__ import annotations

from helix.runner.v1 import events_pb2, resources_pb2
from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.api.resource_mapping import (
    cost_totals_to_proto,
    inspection_to_proto,
    job_to_proto,
    phase_to_proto,
    tool_call_to_proto,
)
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import TokenUsage
from helix_runner.domain.phase_result import Attempt, PhaseResult
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PricingSource
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus, ToolStats
from helix_runner.phases.attempts import interrupted_attempt
from helix_runner.phases.views import (
    ContextUsage,
    CostTotals,
    HeldCall,
    Inspection,
    JobView,
    PhaseView,
    RecentEvent,
    RunSnapshot,
    StoredToolCall,
)

ENCODER = ProtoRecordEncoder()
TOKENS = TokenUsage(input_tokens=10, output_tokens=5)
COST = PhaseCostSnapshot(
    0.5, 0.25, -0.25, False, TOKENS, (ModelCost("m", TOKENS, 0.5, 0.25, PricingSource.OVERRIDE),), ()
)
STATS = (ToolStats("Bash", 3, 1, 0, 30, 10, 20), ToolStats("Read", 1, 0, 1, 0, 0, 0))


def view(**changes) -> PhaseView:
    values = dict(
        job_id="j",
        phase_id="p",
        project_id="proj",
        status=PhaseStatus.SUCCEEDED,
        status_reason="done",
        session_id="s",
        model="m",
        working_dir="/w",
        prompt="hi",
        on_disconnect="DETACH",
        create_time_ns=1_000,
        start_time_ns=2_000,
        end_time_ns=None,
        last_sequence=9,
        result_pb=None,
        cost_pb=None,
        tool_stats_pb=None,
    )
    values.update(changes)
    return PhaseView(**values)


def test_a_stored_phase_shows_its_encoded_cost_statistics_and_result():
    result = PhaseResult(
        job_id="j", phase_id="p", status=PhaseStatus.SUCCEEDED, reason="done"
    )  # no cost in it
    msg = phase_to_proto(
        view(
            result_pb=ENCODER.encode_result(result),
            cost_pb=ENCODER.encode_cost(COST),
            tool_stats_pb=ENCODER.encode_tool_stats(list(STATS)),
        )
    )
    assert (msg.status, msg.on_disconnect, msg.last_sequence) == (
        resources_pb2.PHASE_STATUS_SUCCEEDED,
        resources_pb2.ON_DISCONNECT_DETACH,
        9,
    )
    assert msg.start_time.ToNanoseconds() == 2_000 and not msg.HasField("end_time")
    assert (
        msg.cost.reported_usd == 0.5
        and msg.cost.models[0].pricing_source == resources_pb2.PRICING_SOURCE_OVERRIDE
    )
    assert [(s.name, s.count, s.p95_duration.ToNanoseconds()) for s in msg.tool_stats] == [
        ("Bash", 3, 20),
        ("Read", 1, 0),
    ]
    assert (
        msg.result.reason == "done" and msg.result.cost == msg.cost
    )  # the phase's cost fills a result without one
    assert not msg.HasField("current_tool")


ATTEMPT = Attempt(number=1, status=PhaseStatus.FAILED, retryable=True, exit_code=1, cost=COST)


def test_a_phase_running_elsewhere_shows_its_stored_attempts_and_so_does_its_inspection():
    # Not live here, no result yet (another replica runs it): the attempts column answers.
    stored = view(status=PhaseStatus.QUEUED, attempts_pb=ENCODER.encode_attempts([ATTEMPT]))
    msg = phase_to_proto(stored)
    assert [(a.number, a.exit_code, a.cost.reported_usd) for a in msg.attempts] == [(1, 1, 0.5)]
    inspection = inspection_to_proto(Inspection(stored, (), None))
    assert list(inspection.attempts) == list(msg.attempts)


def test_a_result_built_from_a_phase_row_takes_the_stored_cost_and_attempts():
    # Recovery and takeover build the result from the row: the process and its figures are gone.
    bare = PhaseResult(job_id="j", phase_id="p", status=PhaseStatus.INTERRUPTED, reason="gone")
    encoded = ENCODER.encode_result(
        bare, cost_pb=ENCODER.encode_cost(COST), attempts_pb=ENCODER.encode_attempts([ATTEMPT])
    )
    result = resources_pb2.PhaseResult.FromString(encoded)
    assert result.cost.reported_usd == 0.5 and [a.number for a in result.attempts] == [1]
    msg = phase_to_proto(view(result_pb=encoded, attempts_pb=ENCODER.encode_attempts([ATTEMPT, ATTEMPT])))
    assert len(msg.attempts) == 1  # the result's list wins over the column once the phase ended
    assert ENCODER.encode_result(bare) == ENCODER.encode_result(bare, cost_pb=None, attempts_pb=b"")


def test_the_attempt_running_at_a_crash_is_listed_after_the_stored_ones_and_a_waiting_phase_has_none():
    bare = PhaseResult(job_id="j", phase_id="p", status=PhaseStatus.INTERRUPTED, reason="gone")
    for status in (PhaseStatus.PENDING, PhaseStatus.QUEUED):  # waiting: no process ran
        assert interrupted_attempt(status, "gone", session_id="s", end_time_ns=9, last_sequence=4) is None
    for status in (PhaseStatus.RUNNING, PhaseStatus.PAUSED, PhaseStatus.AWAITING_APPROVAL):
        running = interrupted_attempt(status, "gone", session_id="s", end_time_ns=9, last_sequence=4)
        result = resources_pb2.PhaseResult.FromString(
            ENCODER.encode_result(bare, attempts_pb=ENCODER.encode_attempts([ATTEMPT]), interrupted=running)
        )
        assert [(a.number, a.status, a.end_kind, a.session_id, a.last_sequence) for a in result.attempts] == [
            (1, resources_pb2.PHASE_STATUS_FAILED, resources_pb2.ATTEMPT_END_KIND_UNSPECIFIED, "", 0),
            (
                2,
                resources_pb2.PHASE_STATUS_INTERRUPTED,
                resources_pb2.ATTEMPT_END_KIND_SERVER_SHUTDOWN,
                "s",
                4,
            ),
        ]
        alone = resources_pb2.PhaseResult.FromString(ENCODER.encode_result(bare, interrupted=running))
        assert [a.number for a in alone.attempts] == [1]  # the first attempt ran when it died


def test_a_running_phase_shows_its_live_figures():
    current = ToolCall("toolu_1", "Bash", "{}", 2, False, "", ToolCallStatus.HELD, 5_000, 4)
    live = RunSnapshot(PhaseStatus.RUNNING, 12, COST, STATS, current, True, False, (), (), 1, 0, 0)
    msg = phase_to_proto(view(status=PhaseStatus.RUNNING, last_sequence=12, live=live, cost_pb=b"\xff"))
    assert msg.cost.computed_usd == 0.25 and [s.name for s in msg.tool_stats] == ["Bash", "Read"]
    assert (msg.current_tool.tool_use_id, msg.current_tool.status, msg.current_tool.job_id) == (
        "toolu_1",
        resources_pb2.TOOL_CALL_STATUS_HELD,
        "j",
    )
    assert not msg.HasField("result")



def test_an_ended_phase_still_live_shows_its_stored_result():
    """Between its end and its worktree's removal a phase is still live here: GetJob showed it with
    no result (its branch "", CI saw it once in test_two_worktree_phases_on_one_repository)."""
    live = RunSnapshot(PhaseStatus.SUCCEEDED, 12, COST, STATS, None, True, False, (), (), 1, 0, 0)
    result = PhaseResult(job_id="j", phase_id="p", status=PhaseStatus.SUCCEEDED, reason="done")
    msg = phase_to_proto(view(status=PhaseStatus.SUCCEEDED, live=live, result_pb=ENCODER.encode_result(result)))
    assert msg.result.reason == "done" and msg.cost.computed_usd == 0.25

def test_jobs_totals_and_tool_calls():
    totals = CostTotals(2, 1.5, 1.25, 1, TOKENS, COST.models, ("mystery",))
    job = job_to_proto(JobView("j", "proj", PhaseStatus.FAILED, 1_000, 3_000, (view(),), totals))
    assert (job.status, job.update_time.ToNanoseconds(), [p.phase_id for p in job.phases]) == (
        resources_pb2.PHASE_STATUS_FAILED,
        3_000,
        ["p"],
    )
    assert job.cost == cost_totals_to_proto(totals)
    assert (job.cost.phase_count, job.cost.computed_only_phase_count, list(job.cost.unpriced_models)) == (
        2,
        1,
        ["mystery"],
    )
    assert job.cost.tokens.output_tokens == 5 and job.cost.models[0].reported_usd == 0.5

    body = resources_pb2.ToolCall(
        tool_use_id="t", status=resources_pb2.TOOL_CALL_STATUS_RUNNING
    ).SerializeToString()
    call = tool_call_to_proto(StoredToolCall(ToolCallStatus.UNFINISHED, body))
    assert (call.tool_use_id, call.status) == (
        "t",
        resources_pb2.TOOL_CALL_STATUS_UNFINISHED,
    )  # the column wins


def test_an_inspection_maps_events_holds_breakpoints_and_context_usage():
    event = events_pb2.StreamEvent(sequence=7)
    event.receive_time.FromNanoseconds(123)
    event.api_retry.error = "x" * 1000  # its summary quotes the whole error
    bp = Breakpoint.create(
        kind=BreakpointKind.INPUT_PATTERN, breakpoint_id="bp", tool_name="Bash", regex="rm"
    )
    held = (
        HeldCall(
            "toolu_gone", "Write", '{"a":1}', "bp", "breakpoint", 55, None
        ),  # the tracker dropped its record
        HeldCall(
            "toolu_1",
            "Bash",
            "{}",
            "",
            "paused",
            66,
            ToolCall("toolu_1", "Bash", '{"command":"rm"}', 16, False, "", ToolCallStatus.HELD, 5, 4),
        ),
    )
    live = RunSnapshot(PhaseStatus.AWAITING_APPROVAL, 7, COST, (), None, True, True, held, (bp,), 3, 2, 1)
    usage = ContextUsage(100, 1000, 10.0, '{"totalTokens":100}')
    msg = inspection_to_proto(
        Inspection(view(live=live), (RecentEvent("api_retry", event.SerializeToString()),), usage)
    )

    (ref,) = msg.recent_events
    assert (ref.sequence, ref.kind, ref.receive_time.ToNanoseconds(), len(ref.summary)) == (
        7,
        "api_retry",
        123,
        500,
    )
    assert (
        msg.paused,
        msg.hard_paused,
        msg.assistant_message_count,
        msg.user_message_count,
        msg.turn_count,
    ) == (True, True, 3, 2, 1)
    assert [
        (
            p.call.tool_use_id,
            p.call.name,
            p.call.input_json,
            p.breakpoint_id,
            p.hold_reason,
            p.hold_time.ToNanoseconds(),
        )
        for p in msg.pending_calls
    ] == [
        ("toolu_gone", "Write", '{"a":1}', "bp", "breakpoint", 55),
        ("toolu_1", "Bash", '{"command":"rm"}', "", "paused", 66),
    ]
    assert msg.breakpoints[0].input_pattern.regex == "rm"
    assert (msg.context_usage.total_tokens, msg.context_usage.percentage, msg.context_usage.raw_json) == (
        100,
        10.0,
        '{"totalTokens":100}',
    )

    ended = inspection_to_proto(Inspection(view(), ()))
    assert not ended.paused and not ended.pending_calls and not ended.HasField("context_usage")


def test_token_sums_past_int64_are_clamped_not_an_error():
    huge = TokenUsage(input_tokens=2**70, output_tokens=-(2**70), web_search_requests=3)
    msg = cost_totals_to_proto(CostTotals(1, 0.0, 0.0, 0, huge, (), ()))
    assert (msg.tokens.input_tokens, msg.tokens.output_tokens, msg.tokens.web_search_requests) == (
        2**63 - 1,
        -(2**63),
        3,
    )


def test_an_ended_phases_inspection_counts_the_turn_results_its_result_kept():
    """Issue 22 item 14: `inspect` on a finished phase said "0 turn results"."""
    result = PhaseResult(job_id="j", phase_id="p", status=PhaseStatus.SUCCEEDED, reason="done", num_turns=3,
                         result_count=2)
    ended = inspection_to_proto(Inspection(view(result_pb=ENCODER.encode_result(result)), ()))
    assert ended.turn_count == 2 and ended.phase.result.num_turns == 3
