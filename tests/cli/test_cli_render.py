"""The shared rendering: one line for every event kind, `--filter`, the phase view model, and
recordings read back (a `watch --json` capture, raw CLI output)."""

from __future__ import annotations

import json
from datetime import UTC, datetime, timedelta

import pytest
from helix_runner_client import pb

from helix_runner.cli.common import CliError
from helix_runner.cli.render import EVENT_KINDS, PhaseModel, event_line, parse_filter
from helix_runner.cli.sources import read_recording


def _event(seq: int, **payload) -> pb.StreamEvent:
    return pb.StreamEvent(
        sequence=seq,
        receive_time=datetime(2026, 3, 1, 12, 0, seq, tzinfo=UTC),
        job_id="j",
        phase_id="p",
        **payload,
    )


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(part.title() for part in rest)


@pytest.mark.parametrize("kind", sorted(EVENT_KINDS))
def test_every_kind_has_a_one_line_rendering(kind):
    event = pb.StreamEvent.from_dict({"sequence": "7", _camel(kind): {}})
    line = event_line(event).plain
    assert "\n" not in line and f"#7     {kind}" in line


def test_lines_say_what_happened():
    started = event_line(
        _event(1, tool_call_started=pb.ToolCallStarted(name="Bash", input_json='{"command":"ls"}'))
    )
    assert started.plain.endswith('tool_call_started  → Bash  {"command":"ls"}')
    finished = event_line(
        _event(
            2,
            tool_call_finished=pb.ToolCallFinished(
                name="Bash",
                is_error=True,
                duration=timedelta(milliseconds=1250),
                content_preview="boom\nline 2",
            ),
        )
    )
    assert finished.plain.endswith("tool_call_finished ✗ Bash  1.2s  boom ⏎ line 2")
    retry = event_line(
        _event(
            3,
            api_retry=pb.ApiRetry(
                attempt=2,
                max_retries=10,
                error="overloaded",
                error_status=529,
                retry_delay=timedelta(seconds=2),
            ),
        )
    )
    assert retry.plain.endswith("retry 2/10 in 2.0s: overloaded HTTP 529")
    cost = event_line(
        _event(
            4,
            cost_update=pb.CostUpdate(
                cost=pb.PhaseCost(
                    reported_usd=0.5,
                    computed_usd=0.25,
                    tokens=pb.TokenUsage(input_tokens=1200, output_tokens=30),
                )
            ),
        )
    )
    assert cost.plain.endswith("$0.5000 (reported $0.5000, computed $0.2500)  tokens 1200 in / 30 out")


def test_filter_takes_kinds_and_groups_and_refuses_typos():
    assert parse_filter(None) is None
    assert parse_filter("cost_update, tool-call-started") == {"cost_update", "tool_call_started"}
    assert {"tool_call_started", "tool_call_finished"} <= parse_filter("tools")
    with pytest.raises(ValueError, match="unknown event kind 'tool_calls'"):
        parse_filter("tool_calls")


def _control(
    seq: int, kind: pb.ControlEventKind, tool_use_id: str = "", breakpoint_id: str = ""
) -> pb.StreamEvent:
    return _event(
        seq,
        control=pb.ControlEvent(
            kind=kind, tool_use_id=tool_use_id, tool_name="Bash", breakpoint_id=breakpoint_id, input_json="{}"
        ),
    )


def test_the_view_tracks_held_calls_as_the_server_releases_them():
    k = pb.ControlEventKind
    view = PhaseModel()
    for event in (
        _control(1, k.BREAKPOINT_HIT, "t-bp", "bp1"),
        _control(2, k.PAUSE_REQUESTED),
        _control(3, k.PAUSED, "t-pause"),
    ):
        view.apply(event)
    assert list(view.held) == ["t-bp", "t-pause"] and view.pause_requested
    view.apply(_control(4, k.RESUMED))  # a resume releases pause holds, never breakpoint holds
    assert list(view.held) == ["t-bp"] and not view.pause_requested
    view.apply(_control(5, k.TOOL_DENIED, "t-bp", "bp1"))
    assert not view.held
    view.apply(_control(6, k.PAUSED))  # a hard pause holds no call
    assert view.hard_paused and not view.held
    view.apply(
        _event(
            7,
            status_changed=pb.PhaseStatusChanged(
                from_status=pb.PhaseStatus.PAUSED, to_status=pb.PhaseStatus.CANCELLED
            ),
        )
    )
    assert view.status == pb.PhaseStatus.CANCELLED and not view.hard_paused


def test_the_view_counts_tools_and_keeps_the_recent_calls():
    view = PhaseModel(recent_limit=2)
    seq = 0
    for name, error in (("Bash", False), ("Read", True), ("Bash", True)):
        seq += 1
        view.apply(_event(seq, tool_call_started=pb.ToolCallStarted(tool_use_id=f"t{seq}", name=name)))
        assert view.current_tool.name == name
        seq += 1
        view.apply(
            _event(
                seq,
                tool_call_finished=pb.ToolCallFinished(
                    tool_use_id=f"t{seq - 1}", is_error=error, duration=timedelta(seconds=1)
                ),
            )
        )
    assert view.current_tool is None
    assert [(c.name, c.ok) for c in view.recent] == [("Read", False), ("Bash", False)]
    assert {n: (t.count, t.failures) for n, t in view.tools.items()} == {"Bash": (2, 1), "Read": (1, 1)}
    assert view.elapsed() == 5.0  # first to last event of a recording


def test_a_capture_reads_back_and_bad_files_are_one_line_errors(tmp_path):
    events = [
        _event(2, assistant_text=pb.AssistantText(text="b")),
        _event(1, assistant_text=pb.AssistantText(text="a")),
    ]
    capture = tmp_path / "capture.jsonl"
    capture.write_text(
        "\n".join(json.dumps(e.to_dict()) for e in events)
        + "\n"
        + json.dumps({"result": pb.PhaseResult(status=pb.PhaseStatus.FAILED).to_dict()})
        + "\n"
    )
    recording = read_recording(capture)
    assert [e.sequence for e in recording.events] == [1, 2] and not recording.raw
    assert recording.result.status == pb.PhaseStatus.FAILED

    capture.write_text(json.dumps(events[0].to_dict()) + "\n[1, 2]\n")
    with pytest.raises(CliError, match=r"capture.jsonl:2: not an event"):
        read_recording(capture)
    (tmp_path / "notes.txt").write_text("hello\n")
    with pytest.raises(CliError, match="neither a `watch --json` capture nor raw CLI output"):
        read_recording(tmp_path / "notes.txt")
    with pytest.raises(CliError, match="cannot read the recording"):
        read_recording(tmp_path / "missing.jsonl")


def test_raw_cli_output_becomes_the_servers_events(tmp_path):
    lines = [
        {
            "type": "system",
            "subtype": "init",
            "session_id": "s1",
            "model": "claude-x",
            "tools": ["Bash"],
            "cwd": "/w",
            "claude_code_version": "2.1.0",
        },
        {
            "type": "assistant",
            "session_id": "s1",
            "message": {
                "id": "m1",
                "model": "claude-x",
                "content": [
                    {"type": "tool_use", "id": "toolu_1", "name": "Bash", "input": {"command": "ls"}}
                ],
                "usage": {"input_tokens": 10, "output_tokens": 2},
            },
        },
        {
            "type": "user",
            "session_id": "s1",
            "message": {"content": [{"type": "tool_result", "tool_use_id": "toolu_1", "content": "a.txt"}]},
        },
        {
            "type": "result",
            "subtype": "success",
            "is_error": False,
            "session_id": "s1",
            "num_turns": 1,
            "result": "done",
            "total_cost_usd": 0.01,
            "usage": {"input_tokens": 10, "output_tokens": 2},
        },
    ]
    recording_dir = tmp_path / "p1-0001"
    recording_dir.mkdir()
    (recording_dir / "stdout.jsonl").write_text("\n".join(json.dumps(line) for line in lines) + "\n")
    recording = read_recording(recording_dir)
    assert recording.raw and recording.result is None
    rendered = [event_line(e).plain.strip().split(None, 1)[1] for e in recording.events]  # no time: blanks
    assert rendered[0].startswith("session_init       model claude-x  CLI 2.1.0")
    assert 'tool_call_started  → Bash  {"command":"ls"}' in rendered
    assert any(r.startswith("tool_call_finished ✓ Bash") and r.endswith("a.txt") for r in rendered)
    # Raw output has no times: a tool call's duration is unknown ("-"), never "0ms" (issue 35.3).
    assert any(r.startswith("tool_call_finished ✓ Bash  -  ") for r in rendered), rendered
    assert any(r.startswith("turn_result        success  1 turn  ") for r in rendered)


# -- numbers that agree between views (issue 22, item 14) ------------------------------------------


def test_counts_agree_in_number():
    """Summaries said "1 tool calls" and "1 phases"."""
    from helix_runner.cli.render import result_line

    result = pb.PhaseResult(job_id="j", phase_id="p", status=pb.PhaseStatus.SUCCEEDED, reason="completed",
                            exit_code=0, num_turns=1, tool_stats=[pb.ToolStats(name="Bash", count=1)])
    assert "1 turn, 1 event, 1 tool call (0 failed)" in result_line(result, events=1).plain
    result.num_turns, result.tool_stats = 2, [pb.ToolStats(name="Bash", count=2, failures=1)]
    assert "2 turns, 3 events, 2 tool calls (1 failed)" in result_line(result, events=3).plain
    turn = event_line(_event(4, turn_result=pb.TurnResult(subtype="success", num_turns=1)))
    assert "  1 turn  " in turn.plain


def test_attach_counts_turns_as_the_cli_does():
    """`attach` showed "turns 1" next to a turn_result that said "2 turns": it counted turn results."""
    view = PhaseModel()
    view.apply(_event(1, assistant_text=pb.AssistantText(text="looking", message_id="m1")))
    view.apply(_event(2, tool_call_started=pb.ToolCallStarted(tool_use_id="t1", name="Bash", message_id="m1")))
    assert view.turns == 1
    view.apply(_event(3, tool_call_started=pb.ToolCallStarted(tool_use_id="t2", name="Read", message_id="sub"),
                      parent_tool_use_id="t0"))  # a subagent's message is not a turn of the phase's
    view.apply(_event(4, assistant_text=pb.AssistantText(text="done", message_id="m2")))
    assert view.turns == 2
    view.apply(_event(5, turn_result=pb.TurnResult(subtype="success", num_turns=2)))
    assert view.turns == 2 and "2 turns" in event_line(_event(5, turn_result=pb.TurnResult(num_turns=2))).plain


def test_a_finished_phases_inspection_says_what_it_kept_not_zero_counters():
    """`inspect` on a finished phase said "0 assistant messages ... 0 turn results"."""
    from helix_runner.cli.read import inspection_renderables

    phase = pb.Phase(job_id="j", phase_id="p", status=pb.PhaseStatus.SUCCEEDED, status_reason="completed",
                     last_sequence=12, result=pb.PhaseResult(num_turns=2, result_count=1),
                     tool_stats=[pb.ToolStats(name="Bash", count=1)])
    lines = [str(r) for r in inspection_renderables(pb.PhaseInspection(phase=phase, turn_count=1), "status")]
    assert lines[1] == "  ended; 2 turns, 1 turn result, 1 tool call, last event #12"
    running = pb.Phase(job_id="j", phase_id="p", status=pb.PhaseStatus.RUNNING, last_sequence=5)
    inspection = pb.PhaseInspection(phase=running, assistant_message_count=1, user_message_count=2, turn_count=0)
    assert str(inspection_renderables(inspection, "status")[1]) == (
        "  not paused; 1 assistant message, 2 user lines, 0 turn results, last event #5")


def test_a_cost_the_cli_did_not_report_is_a_dash_for_jobs_and_projects_too():
    """The jobs table showed a job's computed cost as if reported, `costs` said "reported $0.0000"."""
    from helix_runner.cli.read import _totals_cost
    from helix_runner.cli.render import reported_total

    computed_only = pb.CostTotals(reported_usd=0.0, computed_usd=0.0008, phase_count=1,
                                  models=[pb.ModelCost(model="m", computed_usd=0.0008)])
    assert reported_total(computed_only) is None and _totals_cost(computed_only) == "$0.0008*"
    reported = pb.CostTotals(reported_usd=0.0024, computed_usd=0.0023, phase_count=1,
                             models=[pb.ModelCost(model="m", computed_usd=0.0023, reported_usd=0.0024)])
    assert reported_total(reported) == 0.0024 and _totals_cost(reported) == "$0.0024"
