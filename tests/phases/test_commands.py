"""The command surface (``phases.commands``): each command finds the running phase, asks its controller
and does the rest of what it means, against a real controller on an in-memory host
(tests/support/phase_host.py) registered in a real ``PhaseService``."""

from __future__ import annotations

import asyncio

import pytest
from support.phase_host import WAIT_S, FakeRun, make_controller

from helix_runner.api.proto_records import ProtoRecordEncoder
from helix_runner.config import ServerConfig
from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.events import ControlEventKind, ControlResponse
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_spec import OnDisconnect, PermissionMode, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_decision import Decision
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.commands import PhaseCommands
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.service import LivePhase, PhaseService
from helix_runner.store.protocol import PhaseRow


class NoContainment:
    mode = 0
    limits_available = ()

    def close(self) -> None:
        pass


def make_service(store, tmp_path, **config) -> PhaseService:
    return PhaseService(ServerConfig(data_dir=tmp_path / "data", **config), store, ProtoRecordEncoder(),
                        NoContainment(), server_env={"PATH": "/usr/bin:/bin"})


def add_row(store, phase_id: str, status: PhaseStatus) -> None:
    store.get_or_create_job("job", "default", 1)
    store.insert_phase(PhaseRow(job_id="job", phase_id=phase_id, ordinal=0, project_id="default", status=status,
                                create_time_ns=1))


@pytest.fixture
def phase(store, tmp_path):
    """Phase ``phase`` of job ``job``, RUNNING in the service: (commands, its FakeRun, the service)."""
    service = make_service(store, tmp_path)
    add_row(store, "phase", PhaseStatus.RUNNING)
    host, control = make_controller()
    spec = PhaseSpec.create(job_id="job", phase_id="phase", project_id="", prompt="hi", working_dir=str(tmp_path))
    run = FakeRun(host, control, spec)
    service.live[("job", "phase")] = LivePhase(run, PhaseEventLog(store, "job", "phase"))  # type: ignore[arg-type]
    return PhaseCommands(service), run, service


def requests_sent(run: FakeRun) -> list[dict]:
    return [line["request"] for line in run.host.stdin if line["type"] == "control_request"]


async def test_pause_resume_step_and_interrupt_reach_the_phases_controller(phase):
    commands, run, _ = phase
    await commands.pause("job", "phase", hard=False)
    assert run.host.status is PhaseStatus.PAUSING and run.control.pause_requested
    commands.step("job", "phase")
    assert run.control.step_credits == 1
    await commands.resume("job", "phase")
    assert run.host.status is PhaseStatus.RUNNING and not run.control.pause_requested
    await commands.pause("job", "phase", hard=True)
    assert run.host.processes_stopped and run.control.hard_paused
    await commands.resume("job", "phase")
    await commands.interrupt("job", "phase")
    assert [r["subtype"] for r in requests_sent(run)] == ["interrupt"]
    assert run.host.control_kinds() == [
        ControlEventKind.PAUSE_REQUESTED, ControlEventKind.RESUMED, ControlEventKind.PAUSE_REQUESTED,
        ControlEventKind.PAUSED, ControlEventKind.RESUMED, ControlEventKind.INTERRUPTED]


async def test_inject_queues_a_user_turn(phase):
    commands, run, _ = phase
    message_uuid, sequence = await commands.inject("job", "phase", "and then", interrupt_first=False)
    (line,) = [line for line in run.host.stdin if line["type"] == "user"]
    assert line["message"]["content"] == "and then" and line["uuid"] == message_uuid and sequence > 0
    assert run.control.turns_expected == 2


async def test_breakpoints_are_added_listed_and_removed(phase):
    commands, run, _ = phase
    bp = Breakpoint.create(breakpoint_id="bp1", kind=BreakpointKind.TOOL_NAME, tool_name="Bash")
    assert commands.add_breakpoint("job", "phase", bp) is bp
    assert commands.list_breakpoints("job", "phase") == (bp,)
    assert commands.remove_breakpoint("job", "phase", "bp1") is bp
    assert commands.list_breakpoints("job", "phase") == ()


async def test_resolve_answers_the_held_call_and_returns_the_trackers_record(phase):
    commands, run, _ = phase
    commands.add_breakpoint("job", "phase", Breakpoint.create(breakpoint_id="bp1", kind=BreakpointKind.TOOL_NAME,
                                                              tool_name="Bash"))
    held = run.host.tool_call("t1", "Bash", {"command": "rm -rf build"})
    await run.host.until(lambda: "t1" in run.control.holds)
    record = ToolCall("t1", "Bash", '{"command": "rm -rf build"}', 26, False, "", ToolCallStatus.RUNNING, 1, 1)
    run.calls["t1"] = record
    assert commands.resolve("job", "phase", "t1", Decision.deny("not that")) is record
    answer = await run.host.answer_to(held)
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    with pytest.raises(RunnerError) as err:
        commands.resolve("job", "phase", "t1", Decision.approve())
    assert err.value.reason == "TOOL_CALL_NOT_HELD"


async def test_set_model_writes_the_row_only_once_the_cli_took_it(phase):
    commands, run, _ = phase
    await commands.set_model("job", "phase", "claude-opus-4-1")
    assert requests_sent(run)[-1] == {"subtype": "set_model", "model": "claude-opus-4-1"}
    assert run.models == ["claude-opus-4-1"]

    def refuse(request):
        asyncio.get_running_loop().call_soon(
            run.host.observe, ControlResponse(request["request_id"], False, error="no such model"))

    run.host.on_control_request = refuse
    with pytest.raises(RunnerError) as err:
        await commands.set_model("job", "phase", "claude-nope")
    assert "no such model" in err.value.message
    assert run.models == ["claude-opus-4-1"]  # the refused model is not written


async def test_set_permission_mode_returns_the_mode_the_cli_says_is_in_effect(phase):
    commands, run, _ = phase
    run.host.on_control_request = lambda request: run.host.answer_success(request, {"mode": "plan"})
    assert await commands.set_permission_mode("job", "phase", PermissionMode.PLAN) == "plan"
    assert requests_sent(run)[-1] == {"subtype": "set_permission_mode", "mode": "plan"}


async def test_bypass_permissions_is_refused_where_the_server_does_not_allow_it(phase, store, tmp_path):
    commands, run, _ = phase
    for phase_id in ("phase", "no-such-phase"):  # refused before the phase is looked up
        with pytest.raises(RunnerError) as err:
            await commands.set_permission_mode("job", phase_id, PermissionMode.BYPASS_PERMISSIONS)
        assert (err.value.kind, err.value.metadata["field"]) == (ErrorKind.INVALID_ARGUMENT, "mode")
    assert requests_sent(run) == []
    allowed = make_service(store, tmp_path, allow_bypass_permissions=True)
    allowed.live = phase[2].live
    await PhaseCommands(allowed).set_permission_mode("job", "phase", PermissionMode.BYPASS_PERMISSIONS)
    assert requests_sent(run) == [{"subtype": "set_permission_mode", "mode": "bypassPermissions"}]


async def test_stop_task_and_task_output_ask_the_cli_about_one_task(phase):
    commands, run, _ = phase
    run.host.on_control_request = lambda request: run.host.answer_success(
        request, {"output": "line\n", "total_bytes": 5} if request["request"]["subtype"] == "get_task_output" else {})
    run.control.known_tasks.add("task-1")  # its CLI reported it (an unknown id is TASK_NOT_FOUND: test_control.py)
    await commands.stop_task("job", "phase", "task-1")
    assert await commands.task_output("job", "phase", "task-1", 0) == ("line\n", 5, False)
    assert requests_sent(run) == [{"subtype": "stop_task", "task_id": "task-1"},
                                  {"subtype": "get_task_output", "task_id": "task-1"}]


@pytest.mark.parametrize("status", [PhaseStatus.SUCCEEDED, PhaseStatus.CANCELLED])
async def test_a_phase_that_does_not_run_here_is_failed_precondition_naming_its_status(phase, store, status):
    commands, _, _ = phase
    add_row(store, "ended", status)
    with pytest.raises(RunnerError) as err:
        await commands.pause("job", "ended", hard=False)
    assert (err.value.kind, err.value.reason) == (ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION")
    assert err.value.metadata == {"status": status.name, "operation": "pause"}
    with pytest.raises(RunnerError) as err:
        await commands.cancel("job", "ended")
    assert err.value.metadata["operation"] == "cancel"
    with pytest.raises(RunnerError) as err:
        commands.step("job", "nope")
    assert (err.value.kind, err.value.reason) == (ErrorKind.NOT_FOUND, "PHASE_NOT_FOUND")


async def test_a_phase_whose_task_is_done_takes_no_more_commands(phase):
    commands, run, service = phase
    service.live[("job", "phase")].done.set()
    with pytest.raises(RunnerError) as err:
        commands.add_breakpoint("job", "phase", Breakpoint.create(breakpoint_id="b", kind=BreakpointKind.TOOL_NAME,
                                                                  tool_name="Bash"))
    assert err.value.metadata["status"] == "RUNNING"  # as its row says
    assert run.control.breakpoints.list() == []


async def test_cancel_stops_the_phase_and_returns_once_it_ended(phase):
    commands, run, service = phase
    cancel = asyncio.ensure_future(commands.cancel("job", "phase", "enough"))
    await run.host.settle()
    assert run.stops == [(EndCause.CANCELLED, "enough")] and not cancel.done()
    service.live[("job", "phase")].done.set()
    await asyncio.wait_for(cancel, WAIT_S)


@pytest.mark.parametrize("on_disconnect", list(OnDisconnect))
async def test_a_callers_going_away_applies_the_phases_on_disconnect(phase, on_disconnect):
    commands, run, service = phase
    run.spec = PhaseSpec.create(**{**vars(run.spec), "on_disconnect": on_disconnect})
    commands.caller_gone("job", "phase")
    if on_disconnect is OnDisconnect.DETACH:
        assert run.stops == [] and run.host.control_kinds() == [ControlEventKind.DETACHED]
    else:
        assert run.stops == [(EndCause.CANCELLED, "the RunPhase caller disconnected")]
        assert run.host.control_kinds() == []
    service.live[("job", "phase")].done.set()
    commands.caller_gone("job", "phase")  # once the phase ended: nothing
    assert len(run.stops) + len(run.host.control_kinds()) == 1
