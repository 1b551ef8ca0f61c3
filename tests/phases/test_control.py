"""Job control without a CLI: ``PhaseController`` against an in-memory host (tests/support/phase_host.py).

The host plays the CLI's side of the stdin control protocol (docs/claude-cli-protocol.md §3.6):
a tool call is a PreToolUse ``hook_callback`` request that our answer releases.
"""

from __future__ import annotations

import asyncio

import pytest
from support.phase_host import WAIT_S, FakeHost, make_controller, turn_result

from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.events import (
    AssistantText,
    ControlEventKind,
    ControlRequest,
    HookEvent,
    TaskEvent,
    TaskEventKind,
)
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.skill_shell import NOT_EDITABLE, REFUSED_REASON
from helix_runner.domain.tool_decision import Decision, DecisionKind
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases import control as control_module
from helix_runner.phases.control import PhaseController
from helix_runner.process.control_protocol import INTERRUPT_CALLBACK, PRE_SKILL_SHELL_CALLBACK


async def test_inject_with_interrupt_counts_the_new_turn_before_the_interrupted_turn_ends():
    # The interrupted turn's result arrives while we wait for the interrupt's answer. Had the
    # injected turn not been counted yet, that result would be "the last expected one" and close
    # stdin before the injected line is written.
    host, control = make_controller()

    def cli_interrupts(request):
        host.observe(turn_result())  # the interrupted turn ends (its result) ...
        host.answer_success(request)  # ... and the CLI acknowledges the interrupt

    host.on_control_request = cli_interrupts
    _, sequence = await asyncio.wait_for(control.inject("next, please", interrupt_first=True), WAIT_S)
    await host.settle()
    assert not host.stdin_closed
    assert [line["message"]["content"] for line in host.stdin if line["type"] == "user"] == ["next, please"]
    assert host.control_kinds() == [ControlEventKind.INTERRUPTED, ControlEventKind.MESSAGE_INJECTED]
    assert sequence > 0
    host.observe(AssistantText("working", 7, False, "m2", "model"))
    host.turn_result()  # the injected turn's result: now every expected turn has one
    await host.settle()
    assert host.stdin_closed


async def test_an_injected_line_that_cannot_be_written_is_not_counted():
    host, control = make_controller()
    host.stdin_closed = True  # the CLI's stdin went away (the process is exiting)
    with pytest.raises(RunnerError) as err:
        await control.inject("too late", interrupt_first=False)
    assert (err.value.kind, err.value.reason) == (ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION")
    assert control.turns_expected == 1


# -- pause, resume, step ---------------------------------------------------------------------------


async def test_pause_holds_the_next_tool_call_and_resume_releases_it():
    host, control = make_controller()
    await control.pause(hard=False)
    assert host.status is PhaseStatus.PAUSING  # takes hold at the next tool call
    request = host.tool_call("t1")
    await host.settle()
    assert host.answers() == {}  # the call waits
    assert host.status is PhaseStatus.PAUSED
    assert (host.watchdog_holds, host.tool_marks) == (1, [("held", "t1", "")])
    assert list(control.holds) == ["t1"]
    await control.resume()
    assert await host.answer_to(request) == {"continue": True}
    await host.settle()
    assert host.status is PhaseStatus.RUNNING
    assert (host.watchdog_holds, host.tool_marks[-1], control.holds) == (0, ("running", "t1", ""), {})
    assert host.control_kinds() == [
        ControlEventKind.PAUSE_REQUESTED,
        ControlEventKind.PAUSED,
        ControlEventKind.RESUMED,
    ]


async def test_calls_run_freely_when_not_paused():
    host, control = make_controller()
    assert await host.answer_to(host.tool_call("t1")) == {"continue": True}
    assert host.watchdog_holds == 0 and host.tool_marks == [] and host.status is PhaseStatus.RUNNING


async def test_step_lets_exactly_one_held_call_through_then_holds_again():
    host, control = make_controller()
    await control.pause(hard=False)
    first = host.tool_call("t1")
    await host.settle()
    control.step()
    assert await host.answer_to(first) == {"continue": True}
    host.tool_done("t1")
    assert host.control_kinds()[-1] is ControlEventKind.STEP_COMPLETE
    second = host.tool_call("t2")
    await host.settle()
    assert second not in host.answers() and list(control.holds) == ["t2"]
    assert host.status is PhaseStatus.PAUSED


async def test_step_before_a_call_arrives_is_a_credit_for_one_call():
    host, control = make_controller()
    await control.pause(hard=False)
    control.step()
    assert await host.answer_to(host.tool_call("t1")) == {"continue": True}  # the credit
    second = host.tool_call("t2")
    await host.settle()
    assert second not in host.answers() and list(control.holds) == ["t2"]


# -- hard pause ------------------------------------------------------------------------------------


async def test_hard_pause_stops_the_processes_and_refuses_step_and_inject():
    host, control = make_controller()
    await control.pause(hard=True)
    assert host.processes_stopped and host.watchdog_holds == 1
    assert host.status is PhaseStatus.PAUSED
    for refused in (control.step, lambda: control.inject("hi", False), control.interrupt):
        with pytest.raises(RunnerError) as err:
            result = refused()
            if asyncio.iscoroutine(result):
                await result
        assert (err.value.kind, err.value.reason) == (ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION")
    assert host.stdin == []  # nothing was written to a stopped CLI
    await control.resume()
    assert not host.processes_stopped and host.watchdog_holds == 0
    assert host.status is PhaseStatus.RUNNING


async def test_hard_pause_needs_a_started_process():
    host, control = make_controller()
    host.process_started = False
    with pytest.raises(RunnerError) as err:
        await control.pause(hard=True)
    assert err.value.reason == "ILLEGAL_TRANSITION" and not host.processes_stopped


# -- illegal transitions ---------------------------------------------------------------------------


@pytest.mark.parametrize("operation", ["step", "resume", "pause twice", "after the end"])
async def test_illegal_transitions_are_failed_precondition(operation):
    host, control = make_controller()
    if operation == "step":
        call = control.step
    elif operation == "resume":
        call = control.resume
    elif operation == "pause twice":
        await control.pause(hard=False)
        call = lambda: control.pause(hard=False)  # noqa: E731
    else:
        host.ended = True
        host.status = PhaseStatus.SUCCEEDED
        call = lambda: control.pause(hard=False)  # noqa: E731
    before = list(host.payloads)
    with pytest.raises(RunnerError) as err:
        result = call()
        if asyncio.iscoroutine(result):
            await result
    assert (err.value.kind, err.value.reason) == (ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION")
    assert err.value.metadata["status"] == host.status.name
    assert host.payloads == before  # nothing happened


async def test_resolving_a_call_that_is_not_held():
    host, control = make_controller()
    with pytest.raises(RunnerError) as err:
        control.resolve("nope", Decision.approve())
    assert (err.value.kind, err.value.reason) == (ErrorKind.FAILED_PRECONDITION, "TOOL_CALL_NOT_HELD")


# -- breakpoints -----------------------------------------------------------------------------------

BREAKPOINTS = {
    "tool name": dict(kind=BreakpointKind.TOOL_NAME, tool_name="Bash"),
    "input pattern": dict(kind=BreakpointKind.INPUT_PATTERN, tool_name="Bash", regex=r"rm\s+-rf"),
    "cost": dict(kind=BreakpointKind.COST_THRESHOLD, cost_threshold_usd=0.5),
    "turns": dict(kind=BreakpointKind.TURN_COUNT, turn_count=3),
}


def _arm(host, name):
    """Makes the next call meet the breakpoint's condition (calls before it do not)."""
    if name == "cost":
        host.cost_usd = 0.75
    elif name == "turns":
        host.assistant_turns = 3


@pytest.mark.parametrize("name", list(BREAKPOINTS))
@pytest.mark.parametrize(
    ("decision", "kind", "answer"),
    [
        ("approve", ControlEventKind.TOOL_APPROVED, {"continue": True}),
        (
            "deny",
            ControlEventKind.TOOL_DENIED,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "deny",
                    "permissionDecisionReason": "not that",
                }
            },
        ),
        (
            "edit",
            ControlEventKind.TOOL_EDITED,
            {
                "hookSpecificOutput": {
                    "hookEventName": "PreToolUse",
                    "permissionDecision": "allow",
                    "updatedInput": {"command": "ls"},
                }
            },
        ),
    ],
)
async def test_a_breakpoint_holds_the_call_until_it_is_resolved(name, decision, kind, answer):
    bp = Breakpoint.create(breakpoint_id="bp1", **BREAKPOINTS[name])
    host, control = make_controller([bp])
    if name in ("tool name", "input pattern"):  # a call that does not match runs
        free = host.tool_call("t0", "Read" if name == "tool name" else "Bash", {"command": "ls"})
    else:  # a call below the threshold runs
        free = host.tool_call("t0", "Bash", {"command": "rm -rf build"})
    assert await host.answer_to(free) == {"continue": True}
    _arm(host, name)
    held = host.tool_call("t1", "Bash", {"command": "rm -rf build"})
    await host.until(lambda: "t1" in control.holds)  # input patterns are searched in a worker thread
    await host.settle()
    assert held not in host.answers()
    assert host.status is PhaseStatus.AWAITING_APPROVAL
    assert host.control_kinds() == [ControlEventKind.BREAKPOINT_HIT]
    assert host.tool_marks == [("held", "t1", "bp1")] and host.watchdog_holds == 1
    assert control.holds["t1"].breakpoint_id == "bp1" and bp.hit_count == 1

    control.resolve("t1", DECISIONS[decision])
    assert await host.answer_to(held) == answer
    await host.settle()
    assert host.control_kinds() == [ControlEventKind.BREAKPOINT_HIT, kind]
    assert host.status is PhaseStatus.RUNNING and host.watchdog_holds == 0 and control.holds == {}


async def test_resume_does_not_release_a_call_held_by_a_breakpoint():
    host, control = make_controller(
        [Breakpoint.create(breakpoint_id="bp1", kind=BreakpointKind.TOOL_NAME, tool_name="Bash")]
    )
    await control.pause(hard=False)
    held = host.tool_call("t1")
    await host.settle()
    await control.resume()
    await host.settle()
    assert held not in host.answers() and host.status is PhaseStatus.AWAITING_APPROVAL
    control.resolve("t1", Decision.approve())
    assert await host.answer_to(held) == {"continue": True}


DECISIONS = {"approve": Decision.approve(), "deny": Decision.deny("not that"), "edit": Decision.edit('{"command": "ls"}')}


@pytest.mark.parametrize(
    ("make", "field"),
    [
        (lambda: Decision.edit("not json"), "edit.input_json"),
        (lambda: Decision.edit("[1, 2]"), "edit.input_json"),
        # Issue 22 item 2: loads, then orjson could not write it back (255 levels) -> INTERNAL.
        (lambda: Decision.edit('{"a":' * 300 + "1" + "}" * 300), "edit.input_json"),
        (lambda: Decision.deny("x" * 5000), "deny.message"),
    ],
)
async def test_a_bad_resolution_is_refused_and_the_call_stays_held(make, field):
    host, control = make_controller(
        [Breakpoint.create(breakpoint_id="bp1", kind=BreakpointKind.TOOL_NAME, tool_name="Bash")]
    )
    held = host.tool_call("t1")
    await host.settle()
    with pytest.raises(RunnerError) as err:
        control.resolve("t1", make())
    assert (err.value.kind, err.value.metadata.get("field")) == (ErrorKind.INVALID_ARGUMENT, field)
    await host.settle()
    assert held not in host.answers() and "t1" in control.holds
    # Still held in the tracker too: a refused answer never marked it running.
    assert host.tool_marks == [("held", "t1", "bp1")]


# -- end of input ----------------------------------------------------------------------------------


async def test_stdin_closes_once_the_only_turn_has_its_result():
    host, control = make_controller()
    await host.answer_to(host.tool_call("t1"))
    await host.settle()
    assert not host.stdin_closed
    host.turn_result()
    await host.settle()
    assert host.stdin_closed


async def test_stdin_stays_open_until_every_expected_turn_has_its_result():
    host, control = make_controller()
    await control.inject("and then this", interrupt_first=False)  # a second turn is queued
    host.turn_result()
    await host.settle()
    assert not host.stdin_closed  # the settle timer (seconds) is armed, not fired
    host.observe(AssistantText("on it", 5, False, "m2", "model"))  # the queued turn starts
    host.turn_result()
    await host.settle()
    assert host.stdin_closed


async def test_a_silent_cli_after_a_result_is_taken_as_done(monkeypatch):
    # A queued message can be folded into the running turn, so fewer results than messages come.
    monkeypatch.setattr(control_module, "SETTLE_SECONDS", 0.05)
    host, control = make_controller()
    await control.inject("folded in", interrupt_first=False)
    host.turn_result()
    await asyncio.wait_for(host.closed.wait(), WAIT_S)


async def test_cli_activity_after_a_result_cancels_the_settle_timer(monkeypatch):
    monkeypatch.setattr(control_module, "SETTLE_SECONDS", 0.05)
    host, control = make_controller()
    await control.inject("next", interrupt_first=False)
    host.turn_result()
    host.observe(AssistantText("on it", 5, False, "m2", "model"))
    await asyncio.sleep(0.3)  # well past the settle time
    assert not host.stdin_closed


async def test_a_held_call_keeps_stdin_open():
    host, control = make_controller()
    await control.pause(hard=False)
    held = host.tool_call("t1")
    await host.settle()
    host.turn_result()  # e.g. a background turn's result while a call waits for a person
    await host.settle()
    assert not host.stdin_closed
    await control.resume()
    await host.answer_to(held)


async def test_a_delegated_task_in_flight_keeps_stdin_open_until_it_ends(monkeypatch):
    monkeypatch.setattr(control_module, "SETTLE_SECONDS", 0.05)
    host, control = make_controller()
    host.observe(_task(TaskEventKind.STARTED, "running"))
    host.turn_result()
    await asyncio.sleep(0.2)
    assert not host.stdin_closed  # its completion brings a follow-up turn
    host.observe(_task(TaskEventKind.NOTIFICATION, "completed"))
    await asyncio.wait_for(host.closed.wait(), WAIT_S)  # none came: the settle timer finishes input


def _task(kind, status):
    return TaskEvent(kind, "task1", "tu1", "explore", "Explore", "local_agent", status, "", False, 0, 0, None)


async def test_close_releases_every_waiter():
    host, control = make_controller()
    host.on_control_request = lambda request: None  # the CLI never answers
    await control.pause(hard=False)
    host.tool_call("t1")
    await host.settle()
    hold = control.holds["t1"]
    interrupt = asyncio.ensure_future(control.interrupt())
    await host.settle()
    control.close("the phase ended")
    assert hold.decision.result()["hookSpecificOutput"]["permissionDecision"] == "deny"
    with pytest.raises(RunnerError) as err:
        await asyncio.wait_for(interrupt, WAIT_S)
    assert err.value.reason == "PHASE_NOT_RUNNING"


# -- one controller for every attempt -----------------------------------------------------------------


async def test_the_next_attempt_keeps_the_phases_control_and_starts_afresh():
    # Attempt 1: a breakpoint is added and hit once, a pause is asked for and holds a call, then the
    # CLI dies (close). Attempt 2 is a new process (a new host) behind the same controller.
    bp = Breakpoint.create(breakpoint_id="bp1", kind=BreakpointKind.TOOL_NAME, tool_name="Write")
    first, control = make_controller()
    control.add_breakpoint(bp)
    await control.pause(hard=False)
    first.tool_call("t1")
    await first.until(lambda: "t1" in control.holds)
    await control.inject("queued", interrupt_first=False)
    control.close("the attempt ended")
    await first.settle()
    written = len(first.stdin)

    second = FakeHost()
    second.controller = control
    second.status = PhaseStatus.PAUSING  # the run's status as attempt 2 starts paused
    control.attach(second)
    assert (control.holds, control.turns_expected, control.stdin_closed, control.hard_paused) == ({}, 1, False, False)
    assert control.pause_requested and [b.breakpoint_id for b in control.breakpoints.list()] == ["bp1"]
    held = second.tool_call("t2", "Bash")
    await second.until(lambda: "t2" in control.holds)
    assert second.status is PhaseStatus.PAUSED and control.holds["t2"].reason == "paused"
    await control.resume()
    assert await second.answer_to(held) == {"continue": True}
    stopped = second.tool_call("t3", "Write")
    await second.until(lambda: "t3" in control.holds)
    assert control.holds["t3"].breakpoint_id == "bp1" and bp.hit_count == 1
    control.resolve("t3", Decision.approve())
    assert await second.answer_to(stopped) == {"continue": True}
    await control.interrupt()  # a control request goes over attempt 2's channel, none to the dead one
    assert [line["request"]["subtype"] for line in second.stdin if line["type"] == "control_request"] == ["interrupt"]
    assert len(first.stdin) == written


async def test_a_controller_made_from_anothers_state_holds_the_same_breakpoints_and_pause():
    # What another replica taking a phase over would rebuild (ControlState): breakpoints with their
    # hit counts, a pause asked for, step credits.
    once = Breakpoint.create(breakpoint_id="once", kind=BreakpointKind.TOOL_NAME, tool_name="Bash", once=True)
    host, control = make_controller([once])
    held = host.tool_call("t1")
    await host.until(lambda: "t1" in control.holds)
    control.resolve("t1", Decision.approve())
    await host.answer_to(held)
    await control.pause(hard=False)
    control.step()

    state = control.state()
    other = FakeHost()
    restored = PhaseController(other, state=state)
    other.controller = restored
    assert restored.state() == state and restored.pause_requested and restored.step_credits == 1
    # The `once` breakpoint was used up; the step credit lets one call run; the next is held (paused).
    assert await other.answer_to(other.tool_call("t2")) == {"continue": True}
    other.tool_call("t3")
    await other.until(lambda: "t3" in restored.holds)
    assert restored.holds["t3"].reason == "paused"


async def test_the_injected_event_carries_at_most_4_kib_of_the_text_cut_by_bytes():
    host, control = make_controller()
    text = "é" * 3000  # 6,000 bytes in 3,000 characters
    await control.inject(text, interrupt_first=False)
    (event,) = [p for p in host.payloads if getattr(p, "kind", None) is ControlEventKind.MESSAGE_INJECTED]
    assert len(event.message.encode()) <= control_module.MAX_INJECTED_EVENT_BYTES
    assert event.message == "é" * 2048 and text.startswith(event.message)
    (line,) = [line for line in host.stdin if line["type"] == "user"]
    assert line["message"]["content"] == text  # the CLI gets all of it


# -- after a move to another replica (issue 24; docs/claude-cli-protocol.md §3.7) -------------------


async def test_a_call_held_before_a_move_is_held_again_when_the_resumed_cli_asks_under_a_new_id():
    bp = Breakpoint.create(breakpoint_id="bash", kind=BreakpointKind.TOOL_NAME, tool_name="Bash", once=True)
    host, control = make_controller([bp])
    host.tool_call("t1", tool_input={"command": "make"})
    await host.until(lambda: "t1" in control.holds)
    state = control.state()  # what the owner saves at the boundary, with the held call
    assert [(h.tool_use_id, h.breakpoint_id) for h in state.held] == [("t1", "bash")]

    other = FakeHost()
    other.controller = adopted = PhaseController(other, state=state)
    other.tool_call("t9", tool_input={"command": "something else"})  # not the held call: runs
    await other.settle()
    again = other.tool_call("t2", tool_input={"command": "make"})  # the held call, re-issued
    await other.until(lambda: "t2" in adopted.holds)
    assert adopted.holds["t2"].breakpoint_id == "bash" and other.status is PhaseStatus.AWAITING_APPROVAL
    adopted.resolve("t1", Decision.approve())  # the id the operator knows still names it
    assert await other.answer_to(again) == {"continue": True}
    with pytest.raises(RunnerError):  # decided once
        adopted.resolve("t1", Decision.approve())


async def test_a_decision_sent_before_the_resumed_cli_asks_is_applied_once_when_it_does():
    host, control = make_controller()
    await control.pause(hard=False)
    host.tool_call("t1", tool_input={"command": "rm x"})
    await host.until(lambda: "t1" in control.holds)
    other = FakeHost()
    other.controller = adopted = PhaseController(other, state=control.state())
    adopted.resolve("t1", Decision.deny("not that"))  # kept: the call has not been asked about again
    assert adopted.state().decisions and not adopted.holds
    asked = other.tool_call("t2", tool_input={"command": "rm x"})
    answer = await other.answer_to(asked)
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert ControlEventKind.TOOL_DENIED in other.control_kinds()
    assert adopted.state().decisions == () and adopted.state().held == ()
    # Asked once more (the model tries again): no decision is left, and the phase is paused: held.
    other.tool_call("t3", tool_input={"command": "rm x"})
    await other.until(lambda: "t3" in adopted.holds)


async def test_an_approval_that_arrives_while_the_owner_stops_the_cli_goes_with_the_phase():
    """The drain took the boundary (the call held) and is stopping the CLI when the approval comes:
    answered then, the tool could start in a process about to be killed and the approval be lost
    with it. It is kept instead, and the adopter applies it once to the re-issued call."""
    bp = Breakpoint.create(breakpoint_id="bash", kind=BreakpointKind.TOOL_NAME, tool_name="Bash")
    host, control = make_controller([bp])
    held = host.tool_call("t1", tool_input={"command": "make"})
    await host.until(lambda: "t1" in control.holds)
    control.begin_handover()
    control.resolve("t1", Decision.approve())
    await host.settle()
    assert held not in host.answers()  # the stopping CLI is not told to run it
    assert ControlEventKind.TOOL_APPROVED not in host.control_kinds()
    with pytest.raises(RunnerError):  # the first decision stands
        control.resolve("t1", Decision.deny("no"))
    state = control.state()
    assert [h.tool_use_id for h in state.held] == ["t1"] and dict(state.decisions) == {"t1": Decision.approve()}

    other = FakeHost()
    other.controller = adopted = PhaseController(other, state=state)
    again = other.tool_call("t2", tool_input={"command": "make"})
    assert await other.answer_to(again) == {"continue": True}
    assert other.control_kinds().count(ControlEventKind.TOOL_APPROVED) == 1
    assert adopted.state().decisions == () and adopted.state().held == ()


async def test_stop_task_with_an_id_the_cli_never_reported_is_task_not_found_and_asks_nothing():
    # The CLI answers stop_task for an id it does not know with success and no payload (2.1.332 and
    # 2.1.336, captured), so the controller must know the ids itself.
    host, control = make_controller()
    with pytest.raises(RunnerError) as err:
        await control.stop_task("bnosuchtask")
    assert (err.value.kind, err.value.reason) == (ErrorKind.NOT_FOUND, "TASK_NOT_FOUND")
    assert not [line for line in host.stdin if line["type"] == "control_request"]
    host.observe(_task(TaskEventKind.STARTED, "running"))
    await asyncio.wait_for(control.stop_task("task1"), WAIT_S)
    assert [line["request"] for line in host.stdin if line["type"] == "control_request"] == [
        {"subtype": "stop_task", "task_id": "task1"}
    ]
    # The next attempt is a new process: the old one's tasks died with it.
    control.attach(FakeHost())
    with pytest.raises(RunnerError) as err:
        await control.stop_task("task1")
    assert err.value.reason == "TASK_NOT_FOUND"


async def test_a_call_the_startup_lines_decide_is_announced_once_when_the_attempt_starts():
    # A fork's denial is its first stdin line: the CLI never asks about the call, the event says so.
    host, control = make_controller()
    control.answered_at_start = [("toolu_2", "Bash", Decision.deny("not that file"))]
    control.announce_answered()
    control.announce_answered()
    assert host.control_kinds() == [ControlEventKind.TOOL_DENIED]


async def test_an_announced_edit_asked_about_later_gets_its_answer_without_a_second_event():
    host, control = make_controller()
    edit = Decision.edit('{"command": "ls"}')
    control.pending["t1"] = edit
    control.answered_at_start = [("t1", "Bash", edit)]
    control.announce_answered()
    answer = await host.answer_to(host.tool_call("t1"))
    assert answer["hookSpecificOutput"]["updatedInput"] == {"command": "ls"}
    assert host.control_kinds() == [ControlEventKind.TOOL_EDITED]


# -- hook events no tool call stands behind (a skill's shell command, an interrupt) ----------------


def _hook_callback(host, request_id: str, callback_id: str, hook_input: dict) -> str:
    """The CLI calls one of our hooks (the shapes captured in docs/claude-cli-protocol.md §3.9)."""
    host.observe(ControlRequest(request_id, "hook_callback", hook_input.get("tool_name", ""),
                                hook_input.get("tool_use_id", ""),
                                {"subtype": "hook_callback", "callback_id": callback_id, "input": hook_input,
                                 "tool_use_id": hook_input.get("tool_use_id", "")}))
    return request_id


SKILL_SHELL = {"hook_event_name": "PreSkillShellCommand", "tool_name": "Bash", "tool_input": {"command": "touch x"},
               "tool_use_id": "toolu_1:preamble-0", "command_name": "probe", "invoked_by": "claude"}


async def test_a_skill_shell_command_is_refused_unless_the_request_allows_bash():
    host, control = make_controller()
    answer = await host.answer_to(_hook_callback(host, "r1", PRE_SKILL_SHELL_CALLBACK, SKILL_SHELL))
    assert answer == {"hookSpecificOutput": {"hookEventName": "PreSkillShellCommand", "permissionDecision": "deny",
                                             "permissionDecisionReason": REFUSED_REASON}}
    (hook,) = [p for p in host.payloads if isinstance(p, HookEvent)]
    assert (hook.hook_event, hook.hook_name, hook.hook_id) == ("PreSkillShellCommand", "PreSkillShellCommand:Bash",
                                                               "toolu_1:preamble-0")
    assert host.control_kinds() == [ControlEventKind.TOOL_DENIED]


async def test_an_allowed_skill_shell_command_is_held_by_a_pause_and_cannot_be_edited():
    host = FakeHost()
    host.controller = control = PhaseController(host, [], skill_shell_allowed=True)
    await control.pause(hard=False)
    request = _hook_callback(host, "r1", PRE_SKILL_SHELL_CALLBACK, SKILL_SHELL)
    await host.settle()
    assert list(control.holds) == ["toolu_1:preamble-0"] and host.status is PhaseStatus.PAUSED
    with pytest.raises(RunnerError) as err:
        control.resolve("toolu_1:preamble-0", Decision(DecisionKind.EDIT, new_input={"command": "true"}))
    assert err.value.reason == "ILLEGAL_TRANSITION" and NOT_EDITABLE in str(err.value)
    control.resolve("toolu_1:preamble-0", Decision(DecisionKind.DENY, message="no"))
    assert (await host.answer_to(request))["hookSpecificOutput"] == {
        "hookEventName": "PreSkillShellCommand", "permissionDecision": "deny", "permissionDecisionReason": "no"}


async def test_the_interrupt_hook_is_passed_through_and_answered():
    host, _ = make_controller()
    interrupt = {"hook_event_name": "Interrupt", "session_id": "s", "source": "user", "reason": "stop", "via": "client"}
    assert await host.answer_to(_hook_callback(host, "r1", INTERRUPT_CALLBACK, interrupt)) == {}
    (hook,) = [p for p in host.payloads if isinstance(p, HookEvent)]
    assert (hook.hook_event, hook.hook_name) == ("Interrupt", "Interrupt:user")
    assert hook.output_preview == '{"reason":"stop","source":"user","via":"client"}'
    # A callback the server never registered is still an error answer.
    answer = await host.answer_to(_hook_callback(host, "r2", "someone_elses", interrupt))
    assert answer["subtype"] == "error"


async def test_an_edit_decided_before_a_skill_shell_command_is_asked_about_does_not_run_it():
    # A decision taken while the phase moved (``pending``) is applied when the CLI asks; for a
    # skill's command an edit cannot be applied, so the command is refused, not run unedited.
    host = FakeHost()
    host.controller = control = PhaseController(host, [], skill_shell_allowed=True)
    control.pending["toolu_1:preamble-0"] = Decision(DecisionKind.EDIT, new_input={"command": "true"})
    answer = await host.answer_to(_hook_callback(host, "r1", PRE_SKILL_SHELL_CALLBACK, SKILL_SHELL))
    assert answer["hookSpecificOutput"]["permissionDecision"] == "deny"
    assert answer["hookSpecificOutput"]["permissionDecisionReason"] == NOT_EDITABLE
