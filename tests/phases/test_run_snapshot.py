"""PhaseRun.snapshot, the read model's only view into a running phase, and what the run records
for the statistics: a real PhaseRun fed CLI lines as its supervisor would, without a process."""

from __future__ import annotations

from pathlib import Path

import pytest
from support.cli_lines import init, tool_result, tool_use

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStreamOptions
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.launch import LaunchPlan
from helix_runner.phases.run import PhaseRun
from helix_runner.process.containment import subreaper_scope
from helix_runner.process.supervisor import ProcessLimits
from helix_runner.store.sqlite_store import SqliteStore

pytestmark = pytest.mark.usefixtures("running_phase")


def make_run(store: SqliteStore, tmp_path: Path, breakpoints: list[Breakpoint]) -> PhaseRun:
    spec = PhaseSpec.create(
        job_id="j", phase_id="p", project_id="proj", prompt="hi", working_dir=str(tmp_path)
    )
    plan = LaunchPlan(
        spec=spec,
        project="proj",
        working_dir=tmp_path,
        argv=("claude",),
        cwd=tmp_path,
        env={},
        prompt_line=b"{}\n",
        limits=ProcessLimits(),
        claude_path="claude",
        recording_dir=tmp_path / "rec",
        stream_options=PhaseStreamOptions(),
        scope=subreaper_scope(),
    )
    return PhaseRun(spec, plan, store, ProtoRecordEncoder(), PhaseEventLog(store, "j", "p"), breakpoints)


async def test_a_snapshot_holds_the_live_figures_and_the_store_gets_durations(store, tmp_path):
    stop = Breakpoint.create(kind=BreakpointKind.TOOL_NAME, breakpoint_id="bp", tool_name="Write")
    run = make_run(store, tmp_path, [stop])
    run.set_status(PhaseStatus.RUNNING, "started")
    run.record.on_stdout(init())
    run.record.on_stdout(tool_use("t1", message_id="msg_1") + tool_result("t1", is_error=True)
                  + tool_use("t2", message_id="msg_2"))

    snap = run.snapshot()

    assert snap.status is PhaseStatus.RUNNING and snap.last_sequence == run.events.last_sequence > 0
    assert snap.current_tool is not None and snap.current_tool.tool_use_id == "t2"
    assert [(s.name, s.count, s.failures, s.unfinished) for s in snap.tool_stats] == [("Bash", 2, 1, 1)]
    assert (snap.assistant_message_count, snap.user_message_count, snap.turn_count) == (2, 1, 0)
    assert snap.cost.tokens.input_tokens == 20 and snap.cost.computed_only
    assert [b.breakpoint_id for b in snap.breakpoints] == ["bp"]
    assert (snap.paused, snap.hard_paused, snap.held_calls) == (False, False, ())
    assert run.tool_call("t1").status is ToolCallStatus.FAILED and run.tool_call("nope") is None

    # Each call's row carries its duration (the SQL statistics' input); a running call has none.
    rows = {r.tool_use_id: r for r in store.list_tool_calls("j", "p", None, [], 10)}
    assert rows["t1"].duration_ns == run.tool_call("t1").duration_ns >= 0
    assert (rows["t2"].status, rows["t2"].duration_ns) == (ToolCallStatus.RUNNING, None)
    # The process never started, so the run never finished: close its recording files here.
    run.record.close_files()
