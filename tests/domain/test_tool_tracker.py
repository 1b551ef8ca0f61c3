"""Tool tracking: pairing across lines, durations, statistics, unfinished calls, bounded memory."""

from __future__ import annotations

import math

import pytest

from helix_runner.domain.events import ToolCallFinished, ToolCallStarted
from helix_runner.domain.tool_tracker import ToolCallStatus, ToolStats, ToolTracker

MS = 1_000_000


def started(tool_use_id: str, name: str = "Bash", input_json: str = "{}") -> ToolCallStarted:
    return ToolCallStarted(tool_use_id, name, input_json, len(input_json), False, "msg_1")


def finished(tool_use_id: str, is_error: bool = False, preview: str = "ok") -> ToolCallFinished:
    return ToolCallFinished(tool_use_id, "", is_error, preview, len(preview), False, '{"stdout":"ok"}', False)


def test_pairs_a_call_with_its_result_and_measures_the_duration():
    tracker = ToolTracker()
    tracker.start(started("t1"), time_ns=1_000 * MS, sequence=3, parent_tool_use_id="", agent_id="")
    assert tracker.current.status is ToolCallStatus.RUNNING
    assert tracker.finish(finished("t1"), time_ns=1_250 * MS, sequence=5) == ("Bash", 250 * MS, None)
    (call,) = tracker.calls
    assert (call.status, call.start_sequence, call.end_sequence, call.duration_ns) == (
        ToolCallStatus.SUCCEEDED,
        3,
        5,
        250 * MS,
    )
    assert (call.result_preview, call.structured_result_json) == ("ok", '{"stdout":"ok"}')
    assert tracker.current is None


def test_parallel_calls_finish_in_any_order():
    tracker = ToolTracker()
    tracker.start(started("read", "Read"), time_ns=0, sequence=1)
    tracker.start(started("glob", "Glob"), time_ns=10 * MS, sequence=2)
    assert tracker.current.tool_use_id == "glob"  # the most recent open call
    tracker.finish(finished("glob", is_error=True), time_ns=30 * MS, sequence=3)
    assert tracker.current.tool_use_id == "read"
    tracker.finish(finished("read"), time_ns=50 * MS, sequence=4)
    by_id = {c.tool_use_id: c for c in tracker.calls}
    assert by_id["read"].status is ToolCallStatus.SUCCEEDED and by_id["read"].duration_ns == 50 * MS
    assert by_id["glob"].status is ToolCallStatus.FAILED and by_id["glob"].duration_ns == 20 * MS
    assert [c.tool_use_id for c in tracker.calls] == ["read", "glob"]  # start order


def test_subagent_calls_keep_their_parent_and_agent():
    tracker = ToolTracker()
    tracker.start(started("agent", "Agent"), time_ns=0, sequence=1)
    tracker.start(started("sub", "Glob"), time_ns=1, sequence=2, parent_tool_use_id="agent", agent_id="a1")
    sub = tracker.get("sub")
    assert (sub.parent_tool_use_id, sub.agent_id) == ("agent", "a1")


def test_statistics_count_failures_and_use_nearest_rank_p95():
    tracker = ToolTracker()
    durations = [10, 20, 30, 40, 50, 60, 70, 80, 90, 100, 110, 120, 130, 140, 150, 160, 170, 180, 190, 1000]
    for i, ms in enumerate(durations):
        tracker.start(started(f"b{i}"), time_ns=0, sequence=i)
        tracker.finish(finished(f"b{i}", is_error=i % 5 == 0), time_ns=ms * MS, sequence=i)
    tracker.start(started("r0", "Read"), time_ns=0, sequence=99)
    bash, read = tracker.stats()
    total = sum(durations) * MS
    assert bash == ToolStats("Bash", 20, 4, 0, total, total // 20, 190 * MS)  # ceil(0.95*20)=19th smallest
    assert read == ToolStats("Read", 1, 0, 1, 0, 0, 0)  # still running: counted as unfinished


def test_open_calls_become_unfinished_never_succeeded():
    tracker = ToolTracker()
    tracker.start(started("done"), time_ns=0, sequence=1)
    tracker.finish(finished("done"), time_ns=5, sequence=2)
    tracker.start(started("lost", "Read"), time_ns=6, sequence=3)
    (unfinished,) = tracker.finish_phase()
    assert unfinished.tool_use_id == "lost" and unfinished.status is ToolCallStatus.UNFINISHED
    assert unfinished.end_time_ns is None and unfinished.duration_ns is None
    assert [c.status for c in tracker.calls] == [ToolCallStatus.SUCCEEDED, ToolCallStatus.UNFINISHED]
    assert tracker.unfinished_count == 1 and tracker.current is None
    assert {s.name: s.unfinished for s in tracker.stats()} == {"Bash": 0, "Read": 1}


def test_a_result_without_its_call_is_an_orphan():
    tracker = ToolTracker()
    assert tracker.finish(finished("never-started"), time_ns=1, sequence=1) is None
    assert tracker.orphan_results == 1 and tracker.calls == [] and tracker.stats() == []


def test_a_repeated_tool_use_id_is_counted_once():
    tracker = ToolTracker()
    tracker.start(started("t"), time_ns=0, sequence=1)
    tracker.start(started("t"), time_ns=7 * MS, sequence=2)
    tracker.finish(finished("t"), time_ns=10 * MS, sequence=3)
    (call,) = tracker.calls
    assert (call.start_sequence, call.duration_ns) == (1, 10 * MS)
    assert tracker.stats()[0].count == 1


def test_hook_durations_attach_by_id_or_by_tool_name():
    tracker = ToolTracker()
    tracker.start(started("b1", "Bash"), time_ns=0, sequence=1)
    tracker.start(started("r1", "Read"), time_ns=0, sequence=2)
    tracker.add_hook_duration(40, hook_name="PreToolUse:Bash")  # no id on the hook line (localcli-14)
    tracker.add_hook_duration(2, tool_use_id="b1", hook_name="PostToolUse:Bash")
    tracker.add_hook_duration(9, hook_name="PreToolUse:Write")  # no such open call: ignored
    assert tracker.finish(finished("b1"), time_ns=MS, sequence=3) == ("Bash", MS, 42)
    assert tracker.get("r1").hook_duration_ms is None


def test_held_calls_for_breakpoints():
    tracker = ToolTracker()
    tracker.start(started("t"), time_ns=0, sequence=1)
    held = tracker.mark_held("t", "bp-1")
    assert (held.status, held.held_by_breakpoint_id) == (ToolCallStatus.HELD, "bp-1")
    assert tracker.current.status is ToolCallStatus.HELD
    assert tracker.mark_running("t").status is ToolCallStatus.RUNNING
    assert tracker.mark_held("unknown") is None


def test_retained_records_are_bounded_but_statistics_count_everything():
    tracker = ToolTracker(max_calls=100)
    for i in range(1000):
        tracker.start(started(f"t{i}"), time_ns=i, sequence=i)
        if i % 2:
            tracker.finish(finished(f"t{i}"), time_ns=i + 1, sequence=i)
    calls = tracker.calls
    assert len(calls) == 100 and calls[0].tool_use_id == "t900" and calls[-1].tool_use_id == "t999"
    (bash,) = tracker.stats()
    assert (bash.count, bash.unfinished) == (1000, 500)
    # An open call pushed out of the window: its late result is an orphan, it stays unfinished.
    assert tracker.finish(finished("t0"), time_ns=5000, sequence=5000) is None
    assert tracker.orphan_results == 1 and tracker.stats()[0].unfinished == 500


def test_p95_stays_within_two_percent_past_the_exact_limit():
    tracker = ToolTracker(exact_durations=50)
    values = [(i * 7919) % 10_007 + 1 for i in range(2000)]  # spread over 1..10007 ms
    for i, ms in enumerate(values):
        tracker.start(started(f"t{i}"), time_ns=0, sequence=i)
        tracker.finish(finished(f"t{i}"), time_ns=ms * MS, sequence=i)
    (stats,) = tracker.stats()
    exact = sorted(values)[math.ceil(0.95 * len(values)) - 1] * MS
    assert stats.p95_duration_ns == pytest.approx(exact, rel=0.02)
    assert stats.total_duration_ns == sum(values) * MS  # totals and means stay exact
    assert stats.mean_duration_ns == sum(values) * MS // len(values)


def test_summarize_calls_uses_the_trackers_rules():
    from helix_runner.domain.tool_tracker import ToolCallStatus as S
    from helix_runner.domain.tool_tracker import summarize_calls

    ms = 1_000_000
    calls = [("Bash", S.SUCCEEDED, d * ms) for d in range(1, 21)] + [
        ("Bash", S.FAILED, 100 * ms), ("Bash", S.UNFINISHED, None), ("Read", S.RUNNING, None),
        ("Read", S.HELD, None), ("Read", S.SUCCEEDED, 5 * ms)]
    bash, read = summarize_calls(calls)
    assert (bash.name, bash.count, bash.failures, bash.unfinished) == ("Bash", 22, 1, 1)
    assert bash.total_duration_ns == (sum(range(1, 21)) + 100) * ms
    assert bash.mean_duration_ns == bash.total_duration_ns // 21
    assert bash.p95_duration_ns == 20 * ms  # nearest rank: ceil(0.95 * 21) = 20th smallest
    assert (read.count, read.failures, read.unfinished, read.p95_duration_ns) == (3, 0, 2, 5 * ms)
