"""Job control of one running phase at the boundaries the CLI really offers.

We wrap a CLI rather than own the agent loop, so control happens where the stdin control
protocol allows it (docs/claude-cli-protocol.md §3.6):

- before every tool call: a PreToolUse hook callback registered in ``initialize`` with no
  matcher fires for every call and blocks it until we answer. Pause, step and breakpoints hold
  the call there; approve / deny / edit answer it.
- between turns: injected messages are user lines the CLI queues as the next turn (QUEUE is
  not mid-turn steering); ``interrupt`` ends the current turn.
- a hard pause stops every process of the phase (SIGSTOP through its containment scope, see
  ``process/containment.py``, so tools in sessions of their own stop too): it also freezes model
  streaming and the CLI's own timers, and an API request in flight may time out. Resume sends
  SIGCONT.

Every CLI request is answered from its own task, so a held call never blocks the stdout reader.
stdin is closed when the run should end — every expected turn has its result and no background
task is in flight — so the CLI finishes its queued turns and exits (docs/claude-cli-protocol.md §3.5).

A phase has one controller for its whole life: each attempt's CLI is a new process, and
``attach(host)`` gives the controller that attempt's channel while the phase's own state (its
breakpoints, a pause requested and step credits) carries over (``ControlState``).
"""

from __future__ import annotations

import asyncio
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from helix_runner.domain.access import actor
from helix_runner.domain.breakpoints import Breakpoint, BreakpointSet, first_match
from helix_runner.domain.events import (
    AssistantText,
    CliStatus,
    ControlEvent,
    ControlEventKind,
    ControlRequest,
    ControlResponse,
    Event,
    HookEvent,
    HookEventKind,
    SessionInit,
    TaskEvent,
    TaskEventKind,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)
from helix_runner.domain.phase_spec import ID_PATTERN, PERMISSION_MODES, TOKEN_PATTERN, PermissionMode
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.skill_shell import (
    INTERRUPT,
    NOT_EDITABLE,
    PRE_SKILL_SHELL_COMMAND,
    REFUSED_REASON,
    hook_input_preview,
    hook_name,
)
from helix_runner.domain.tool_decision import Decision, DecisionKind
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.handover import HeldCallRecord, SavedControl, restored_breakpoint, saved_breakpoint
from helix_runner.phases.ports import PhaseHost
from helix_runner.process.control_protocol import (
    INTERRUPT_CALLBACK,
    PRE_SKILL_SHELL_CALLBACK,
    PRE_TOOL_USE_CALLBACK,
    ControlChannel,
    allow_hook,
    deny_hook,
    edit_hook,
    permission_answer,
    skill_shell_answer,
    user_line,
)

log = logging.getLogger(__name__)

# Lines that show the CLI is working on a turn (service events such as cost updates do not count).
_CLI_ACTIVITY = (SessionInit, AssistantText, Thinking, ToolCallStarted, CliStatus)
# The payloads ``observe`` acts on whether or not a settle timer runs (payload classes have no subclasses).
_OBSERVED = frozenset({ControlRequest, ControlResponse, ToolCallFinished, TaskEvent, TurnResult})

MAX_INJECT_BYTES = 256 * 1024
# The MESSAGE_INJECTED event carries the injected text up to this many bytes (the CLI gets all of it).
MAX_INJECTED_EVENT_BYTES = 4 * 1024
# After a result, how long the CLI may stay silent before we take it that no queued turn follows
# (a queued message can be folded into a running turn, so results may be fewer than messages).
SETTLE_SECONDS = 3.0
# How long interrupt, set_model, set_permission_mode, stop_task and get_task_output may take to be answered.
CONTROL_WAIT_SECONDS = 10.0
DEFAULT_TASK_OUTPUT_BYTES = 64 * 1024
MAX_TASK_OUTPUT_BYTES = 1024 * 1024
# Task types whose completion triggers a follow-up turn (claude-agent-sdk query.py tracks these).
_DELEGATED_TASK_TYPES = ("local_agent", "local_workflow")
_TERMINAL_TASK_STATES = ("completed", "failed", "killed", "stopped", "error", "cancelled")


@dataclass
class Hold:
    """A tool call held before it runs."""

    tool_use_id: str
    tool_name: str
    input_json: str
    breakpoint_id: str
    reason: str
    since_ns: int
    decision: asyncio.Future[dict[str, Any]] = field(default_factory=lambda: asyncio.get_running_loop().create_future())


def _illegal(operation: str, status: PhaseStatus, why: str) -> RunnerError:
    return RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION", f"cannot {operation}: {why}",
                       {"status": status.name, "operation": operation})


@dataclass(frozen=True)
class ControlState:
    """What job control keeps of a phase across its attempts (and what another replica would need
    to take its control over): the breakpoints with their hit counts, a pause asked for, step credits.

    A hard pause belongs to one CLI process and ends with it (kept as a pause asked for). Held calls
    are kept as records (``held``): after a move to another replica, the resumed CLI asks about such
    a call again under a new id (docs/claude-cli-protocol.md §3.7), and ``decisions`` sent for them
    meanwhile are applied then.
    """

    breakpoints: tuple[Breakpoint, ...] = ()
    pause_requested: bool = False
    step_credits: int = 0
    held: tuple[HeldCallRecord, ...] = ()
    decisions: tuple[tuple[str, Decision], ...] = ()


def saved_control(state: ControlState) -> SavedControl:
    """The control state as kept in the shared store (phases/handover.py)."""
    return SavedControl(tuple(saved_breakpoint(bp) for bp in state.breakpoints), state.pause_requested,
                        state.step_credits, state.held, state.decisions)


def control_state(saved: SavedControl) -> ControlState:
    """The control state another replica kept: breakpoints compiled again with their hit counts."""
    return ControlState(tuple(restored_breakpoint(b) for b in saved.breakpoints), saved.pause_requested,
                        saved.step_credits, saved.held, saved.decisions)


class PhaseController:
    """Pause / step / breakpoints / inject / interrupt for one phase, over its control channel.

    One per phase, for all its attempts: made with the first attempt's host, ``attach``ed to each
    later one. It sees the phase only through ``host`` (``phases.ports.PhaseHost``).
    """

    def __init__(self, host: PhaseHost, breakpoints: list[Breakpoint] | BreakpointSet = (), *,
                 gate_every_call: bool = False, skill_shell_allowed: bool = False,
                 state: ControlState | None = None):
        # The phase's own state, kept across attempts (ControlState).
        if state is not None:
            breakpoints = list(state.breakpoints)
        self.breakpoints = breakpoints if isinstance(breakpoints, BreakpointSet) else BreakpointSet.of(breakpoints)
        self.pause_requested = state.pause_requested if state is not None else False
        self.step_credits = state.step_credits if state is not None else 0
        # Calls held when the phase moved here, not asked about again yet (by tool and input), the
        # decisions sent for them, and their ids -> the ids the resumed CLI asked about them under.
        self.carried: list[HeldCallRecord] = list(state.held) if state is not None else []
        self.pending: dict[str, Decision] = dict(state.decisions) if state is not None else {}
        self.aliases: dict[str, str] = {}
        # Calls the next attempt's startup lines decide themselves (a fork's denial is its first
        # line): their events are emitted when that attempt starts, once.
        self.answered_at_start: list[tuple[str, str, Decision]] = []
        self._announced: set[str] = set()
        # The replica is handing the phase over: new calls wait (never answered; the CLI is stopped).
        self.handing_over = False
        # Called whenever the state above changes (the owner saves it for another replica).
        self.on_change: Callable[[], None] = lambda: None
        # The phase's held network requests (phases/egress_holds.py), which settle_status counts.
        self.egress_holds: Any = None
        # One call at a time is checked against the breakpoints, so a `once` or threshold
        # breakpoint holds exactly one of several parallel calls.
        self._breakpoint_check = asyncio.Lock()
        # Under --bare no PreToolUse hook fires: every call comes as `can_use_tool` (the server's ask
        # rule, claude_command.BARE_ASK_RULES, under bypassPermissions) and is decided here.
        self.gate_every_call = gate_every_call
        # Whether the phase's request lets a skill's shell commands run (domain/skill_shell.py);
        # if not, each is refused with a reason the model reads.
        self.skill_shell_allowed = skill_shell_allowed
        # The held calls that are a skill's shell commands (no tool call; not editable).
        self._skill_shell_ids: set[str] = set()
        self.attach(host)

    def attach(self, host: PhaseHost) -> None:
        """The phase's next attempt (a new CLI process) is ``host``: a fresh channel, no holds, no hard
        pause, one expected turn; the breakpoints, a pause requested and step credits stay. The
        previous attempt was ``close``d when its process ended."""
        self.host = host
        self.channel = ControlChannel(host.write_stdin)
        self.hard_paused = False
        self.holds: OrderedDict[str, Hold] = OrderedDict()
        self._stepping: set[str] = set()
        self._released: set[str] = set()
        self._tasks: set[asyncio.Task] = set()
        self._cancelled_requests: set[str] = set()
        self.turns_expected = 1
        self.results_seen = 0
        self._delegated_in_flight: set[str] = set()
        # Every task this process reported (system/task_*): the CLI answers stop_task for an id it
        # does not know with success and an empty payload (2.1.332 and 2.1.336, captured), so the
        # server tells an unknown id itself. Background tasks die with their process.
        self.known_tasks: set[str] = set()
        self._settle: asyncio.TimerHandle | None = None
        self.stdin_closed = False

    def state(self) -> ControlState:
        """The phase's control state now, as a value (``ControlState``); a hard pause counts as a pause
        asked for, held calls as records."""
        held = tuple(HeldCallRecord(h.tool_use_id, h.tool_name, h.input_json, h.breakpoint_id, h.reason, h.since_ns)
                     for h in self.holds.values() if not h.decision.done())
        return ControlState(tuple(self.breakpoints.list()), self.pause_requested or self.hard_paused,
                            self.step_credits, held + tuple(self.carried), tuple(self.pending.items()))

    def changed(self) -> None:
        """Something the phase's held state depends on changed (a held network request came or went)."""
        self._changed()

    def _changed(self) -> None:
        try:
            self.on_change()
        except Exception:
            log.exception("saving the phase's control state failed")

    def begin_handover(self) -> None:
        """The replica is handing the phase over: every call from now on waits (not a hold anyone
        sees or decides; the CLI is stopped at this boundary)."""
        self.handing_over = True

    # -- wiring ----------------------------------------------------------------------------

    def startup_lines(self, prompt_line: bytes) -> list[bytes]:
        """``initialize`` (registers the hook) then the prompt; written before anything else."""
        _, init = self.channel.initialize_line()
        return [init, prompt_line] if prompt_line else [init]  # none: a resumed turn goes on by itself

    def announce_answered(self) -> None:
        """The events of the calls this attempt's start decided (``answered_at_start``), once: a fork's
        denial is its first stdin line, its edit is in the resumed copy (asked about or not)."""
        answered, self.answered_at_start = self.answered_at_start, []
        for tool_use_id, tool_name, decision in answered:
            self._apply(tool_use_id, tool_name, "", decision)
            self._announced.add(tool_use_id)

    def observe(self, payload: object) -> None:
        """Called for every event of the phase, in order, on the event loop."""
        if isinstance(payload, ControlRequest):
            self._spawn(self._on_cli_request(payload))
        elif isinstance(payload, ControlResponse):
            self.channel.on_response(payload.request_id, payload.success, payload.response, payload.error)
        elif isinstance(payload, ToolCallFinished):
            if payload.tool_use_id in self._stepping:
                self._stepping.discard(payload.tool_use_id)
                self.host.emit(ControlEvent(ControlEventKind.STEP_COMPLETE, payload.tool_use_id, payload.name))
        elif isinstance(payload, TaskEvent):
            self.known_tasks.add(payload.task_id)
            self._track_task(payload)
        elif isinstance(payload, TurnResult):
            self.results_seen += 1
            self._maybe_finish_input()
        if self._settle is not None and isinstance(payload, _CLI_ACTIVITY):
            # The CLI is active again after a result: a queued turn started.
            self._settle.cancel()
            self._settle = None

    def on_events(self, events: list[Event]) -> None:
        """The run's fan-out step: ``observe`` for each event of a batch, in order.

        An event ``observe`` would do nothing with (most: text, thinking, tool starts while no
        settle timer runs) is skipped without the call, which the run pays for every event.
        """
        for event in events:
            payload = event.payload
            if payload.__class__ in _OBSERVED or self._settle is not None:
                self.observe(payload)

    def _spawn(self, coro) -> None:
        task = asyncio.create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    def close(self, reason: str) -> None:
        """The attempt's process is gone: release every waiter (safe to call twice)."""
        if self._settle is not None:
            self._settle.cancel()
            self._settle = None
        for hold in self.holds.values():
            if not hold.decision.done():
                hold.decision.set_result(deny_hook(reason))
        self.channel.fail_all(reason)
        for task in self._tasks:
            task.cancel()

    # -- end of input ----------------------------------------------------------------------

    def _track_task(self, task: TaskEvent) -> None:
        if task.kind is TaskEventKind.STARTED and task.task_type in _DELEGATED_TASK_TYPES:
            self._delegated_in_flight.add(task.task_id)
        elif task.kind is TaskEventKind.NOTIFICATION or task.status in _TERMINAL_TASK_STATES:
            if task.task_id in self._delegated_in_flight:
                self._delegated_in_flight.discard(task.task_id)
                # A follow-up turn normally comes; if none does, the settle timer finishes input.
                if self.results_seen and not self._delegated_in_flight and self._settle is None \
                        and not self.stdin_closed:
                    self._settle = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._settled)

    def _maybe_finish_input(self) -> None:
        if self.stdin_closed or self._delegated_in_flight or self.holds:
            return
        if self.results_seen >= self.turns_expected:
            self._spawn(self._close_stdin())
        elif self._settle is None:
            self._settle = asyncio.get_running_loop().call_later(SETTLE_SECONDS, self._settled)

    def _settled(self) -> None:
        self._settle = None
        if not self.stdin_closed and not self._delegated_in_flight and not self.holds:
            log.info("no queued turn followed the last result; finishing input",
                     extra={"fields": {"job_id": self.host.job_id, "phase_id": self.host.phase_id,
                                       "expected": self.turns_expected, "seen": self.results_seen}})
            self._spawn(self._close_stdin())

    async def _close_stdin(self) -> None:
        self.stdin_closed = True
        await self.host.close_stdin()

    # -- CLI requests ----------------------------------------------------------------------

    async def _on_cli_request(self, req: ControlRequest) -> None:
        if req.subtype == "control_cancel_request":
            self._cancelled_requests.add(req.request_id)
            return
        try:
            callback = req.request.get("callback_id") if req.subtype == "hook_callback" else None
            if callback == PRE_TOOL_USE_CALLBACK:
                response = await self._decide_tool_call(req)
            elif callback == PRE_SKILL_SHELL_CALLBACK:
                response = await self._decide_skill_shell(req)
            elif callback == INTERRUPT_CALLBACK:
                self._pass_hook(req, INTERRUPT)
                response = {}  # the CLI ignores an Interrupt hook's output
            elif req.subtype == "can_use_tool" and self.gate_every_call:
                tool_input = req.request.get("input")
                tool_input = tool_input if isinstance(tool_input, dict) else {}
                response = permission_answer(await self._decide_tool_call(req, tool_input), tool_input)
            elif req.subtype == "can_use_tool":
                # Same policy as plain `-p`: what the phase's permissions do not allow is denied.
                response = {"behavior": "deny",
                            "message": f"{req.tool_name} is not permitted in this phase (see allowed_tools)"}
                self.host.emit(ControlEvent(ControlEventKind.TOOL_DENIED, req.tool_use_id, req.tool_name,
                                           message="permission prompt: not permitted by the phase's options"))
            else:
                if req.request_id not in self._cancelled_requests:
                    await self.channel.answer_error(req.request_id, f"unsupported request {req.subtype}")
                return
            if req.request_id not in self._cancelled_requests:
                await self.channel.answer(req.request_id, response)
            self._after_release(req.tool_use_id)
        except asyncio.CancelledError:
            raise
        except Exception:
            log.exception("answering a CLI control request failed")
            await self.channel.answer_error(req.request_id, "the runner failed to decide")

    async def _decide_tool_call(self, req: ControlRequest, tool_input: Any = None) -> dict[str, Any]:
        """The PreToolUse answer for a call: hold it (breakpoint, pause) or let it run."""
        if tool_input is None:
            tool_input = (req.request.get("input") or {}).get("tool_input", {})
        input_json = orjson.dumps(tool_input).decode() if isinstance(tool_input, dict) else "{}"
        # The workspace snapshot of the previous boundary first: it must not see this call's writes.
        await self.host.at_boundary()
        crossed = await self.host.quota_crossed()
        if crossed is not None and not self.pause_requested:  # the project reached a spend quota
            self.pause_requested = True
            self.step_credits = 0
            self.host.emit(ControlEvent(ControlEventKind.PAUSE_REQUESTED, message=crossed[:4096]))
            self._changed()
        decided = self.pending.pop(req.tool_use_id, None)
        if decided is not None:  # decided before the CLI asked (a fork that decides its call differently)
            self._changed()
            return self._apply(req.tool_use_id, req.tool_name, "", decided)
        if self.handing_over:  # parked (the tracker shows it held) until the CLI is stopped; close cancels this
            self.host.mark_tool_held(req.tool_use_id, "")
            await asyncio.Event().wait()
        carried = self._carried_call(req.tool_name, tool_input)
        if carried is not None:  # held before the move: the same call, asked about under a new id
            self.aliases[carried.tool_use_id] = req.tool_use_id
            decision = self.pending.pop(carried.tool_use_id, None)
            self._changed()
            if decision is not None:  # decided during the move: applied now, once
                return self._apply(req.tool_use_id, req.tool_name, carried.breakpoint_id, decision)
            kind, status = ((ControlEventKind.BREAKPOINT_HIT, PhaseStatus.AWAITING_APPROVAL) if carried.breakpoint_id
                            else (ControlEventKind.PAUSED, PhaseStatus.PAUSED))
            return await self._hold(req, input_json, carried.breakpoint_id, carried.reason or "held before the move",
                                    status, kind)
        bp = await self._breakpoint_hit(req.tool_name, input_json, self.host.cost_usd)
        if bp is not None:
            return await self._hold(req, input_json, bp.breakpoint_id, f"breakpoint {bp.breakpoint_id}",
                                    PhaseStatus.AWAITING_APPROVAL, ControlEventKind.BREAKPOINT_HIT)
        if self.pause_requested:
            if self.step_credits > 0:
                self.step_credits -= 1
                self._stepping.add(req.tool_use_id)
                return allow_hook()
            return await self._hold(req, input_json, "", "paused", PhaseStatus.PAUSED, ControlEventKind.PAUSED)
        return allow_hook()

    async def _decide_skill_shell(self, req: ControlRequest) -> dict[str, Any]:
        """The answer for a skill's shell command: refused unless the request allows it, else held
        and decided as a Bash call with that command would be (breakpoints, pause, step)."""
        self._pass_hook(req, PRE_SKILL_SHELL_COMMAND)
        if not self.skill_shell_allowed:
            self.host.emit(ControlEvent(ControlEventKind.TOOL_DENIED, req.tool_use_id, req.tool_name,
                                        message=REFUSED_REASON))
            return skill_shell_answer(deny_hook(REFUSED_REASON))
        self._skill_shell_ids.add(req.tool_use_id)
        try:
            answer = await self._decide_tool_call(req)
        finally:
            self._skill_shell_ids.discard(req.tool_use_id)
        if "updatedInput" in (answer.get("hookSpecificOutput") or {}):
            # An edit decided where it could not be refused (during a move to another replica):
            # the command never runs as anything but itself, so it does not run.
            return skill_shell_answer(deny_hook(NOT_EDITABLE))
        return skill_shell_answer(answer)

    def _pass_hook(self, req: ControlRequest, event: str) -> None:
        """The CLI called one of the server's hooks: the event goes to the phase's stream as a
        hook event, its input's own fields in ``output_preview`` (domain/skill_shell.py)."""
        hook_input = req.request.get("input")
        self.host.emit(HookEvent(HookEventKind.STARTED, req.tool_use_id, hook_name(event, hook_input), event,
                                 None, "", hook_input_preview(hook_input)))

    def _carried_call(self, tool_name: str, tool_input: Any) -> HeldCallRecord | None:
        """The call held before the move that this one is (same tool, same input), taken off the list."""
        for i, record in enumerate(self.carried):
            if record.tool_name == tool_name:
                try:
                    same = orjson.loads(record.input_json) == tool_input
                except orjson.JSONDecodeError:
                    same = False
                if same:
                    return self.carried.pop(i)
        return None

    async def _breakpoint_hit(self, tool_name: str, input_json: str, cost_usd: float) -> Breakpoint | None:
        """The breakpoint this call triggers (hit counted), or None.

        Input patterns are searched in a worker thread: RE2 is linear in the (bounded) input, but
        up to 256 patterns over 64 KiB can still take a while, and the event loop must keep
        answering health checks and signals meanwhile (RE2 releases the GIL while it searches).
        """
        async with self._breakpoint_check:
            while True:
                snapshot = self.breakpoints.list()
                args = (snapshot, tool_name, input_json, cost_usd, self.host.assistant_turns)
                if any(bp.searches(tool_name) for bp in snapshot):
                    bp = await asyncio.to_thread(first_match, *args)
                else:
                    bp = first_match(*args)
                # A breakpoint removed during the search does not count; look again without it.
                if bp is None or self.breakpoints.record_hit(bp):
                    return bp

    async def _hold(self, req: ControlRequest, input_json: str, breakpoint_id: str, reason: str,
                    status: PhaseStatus, kind: ControlEventKind) -> dict[str, Any]:
        hold = Hold(req.tool_use_id, req.tool_name, input_json, breakpoint_id, reason, time.time_ns())
        self.holds[req.tool_use_id] = hold
        self.host.hold_watchdog(True)
        self.host.mark_tool_held(req.tool_use_id, breakpoint_id)
        self.host.set_status(status, f"tool call {req.tool_name} ({req.tool_use_id}) held: {reason}")
        self.host.emit(ControlEvent(kind, req.tool_use_id, req.tool_name, breakpoint_id, input_json=input_json))
        self._changed()
        try:
            return await hold.decision
        finally:
            self.holds.pop(req.tool_use_id, None)
            self.host.hold_watchdog(False)
            self.host.mark_tool_running(req.tool_use_id)
            self._released.add(req.tool_use_id)

    def _after_release(self, tool_use_id: str) -> None:
        """Status bookkeeping for a released call, done after the CLI has its answer (not before)."""
        if tool_use_id in self._released:
            self._released.discard(tool_use_id)
            if not self.host.ended:
                self.settle_status()

    def settle_status(self) -> None:
        """Sets the status that follows from the holds and the pause request (if it is not that already)."""
        egress = self.egress_holds
        if any(h.breakpoint_id for h in self.holds.values()):
            status, why = PhaseStatus.AWAITING_APPROVAL, "a tool call waits for approval"
        elif egress is not None and egress.waiting:
            status, why = PhaseStatus.AWAITING_APPROVAL, egress.reason()
        elif self.hard_paused or (self.pause_requested and self.holds):
            status, why = PhaseStatus.PAUSED, "paused"
        elif self.pause_requested:
            status, why = PhaseStatus.PAUSING, "a pause takes hold before the next tool call"
        else:
            status, why = PhaseStatus.RUNNING, "running"
        if status is not self.host.status:
            self.host.set_status(status, why)

    def _require_running(self, operation: str) -> None:
        if self.host.ended or self.host.status.is_final:
            raise _illegal(operation, self.host.status, "the phase has ended")

    # -- operations ------------------------------------------------------------------------

    async def pause(self, hard: bool) -> None:
        self._require_running("pause")
        if self.hard_paused or (self.pause_requested and not hard):
            raise _illegal("pause", self.host.status, "the phase is already paused")
        self.pause_requested = True
        self.step_credits = 0
        self.host.emit(ControlEvent(ControlEventKind.PAUSE_REQUESTED, message="hard" if hard else "before next tool",
                                    actor=actor()))
        if hard:
            if not self.host.process_started:
                raise _illegal("pause", self.host.status, "the process has not started")
            # Report PAUSED only once every process of the phase shows as stopped.
            await self.host.pause_processes()
            self.hard_paused = True
            self.host.hold_watchdog(True)
            self.host.emit(ControlEvent(ControlEventKind.PAUSED, message="every process of the phase stopped (SIGSTOP)",
                                        actor=actor()))
        self.settle_status()
        self._changed()

    async def resume(self) -> None:
        self._require_running("resume")
        if not (self.pause_requested or self.hard_paused):
            raise _illegal("resume", self.host.status, "the phase is not paused")
        if self.hard_paused:
            await self.host.resume_processes()
            self.hard_paused = False
            self.host.hold_watchdog(False)
        self.pause_requested = False
        self.step_credits = 0
        for hold in list(self.holds.values()):
            if not hold.breakpoint_id and not hold.decision.done():
                hold.decision.set_result(allow_hook())
        self.host.emit(ControlEvent(ControlEventKind.RESUMED, actor=actor()))
        self.settle_status()
        self._changed()

    def step(self) -> None:
        self._require_running("step")
        if self.hard_paused:
            raise _illegal("step", self.host.status, "a hard pause stops the whole process; resume it instead")
        if not self.pause_requested:
            raise _illegal("step", self.host.status, "the phase is not paused")
        held = next((h for h in self.holds.values() if not h.breakpoint_id and not h.decision.done()), None)
        if held is not None:
            self._stepping.add(held.tool_use_id)
            held.decision.set_result(allow_hook())
        else:
            self.step_credits += 1
            self._changed()

    def resolve(self, tool_use_id: str, decision: Decision) -> Hold:
        """Answers a held call (``Decision`` is valid once made, so nothing here can refuse it half-way).

        After a move, ``tool_use_id`` may name the call as it was held before the move: the call the
        resumed CLI asked about again under a new id, or, while it has not asked yet, the kept record
        (the decision is applied when it asks)."""
        self._require_running("resolve")
        tool_use_id = self.aliases.get(tool_use_id, tool_use_id)
        hold = self.holds.get(tool_use_id)
        if hold is None:
            record = next((r for r in self.carried if r.tool_use_id == tool_use_id), None)
            if record is not None and tool_use_id not in self.pending:
                self.pending[tool_use_id] = decision
                self._changed()
                kept = Hold(record.tool_use_id, record.tool_name, record.input_json, record.breakpoint_id,
                            record.reason, record.since_ns)
                kept.decision.set_result({})
                return kept
        if hold is None or hold.decision.done() or (self.handing_over and tool_use_id in self.pending):
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "TOOL_CALL_NOT_HELD",
                              f"tool call {tool_use_id} is not held", {"tool_use_id": tool_use_id})
        if self.handing_over:
            # The CLI is being stopped to move the phase: answered now, the tool could start in a
            # process about to be killed (lost, or run again after the move). The decision goes with
            # the phase; the adopter applies it, once, to the call its resumed CLI asks about again.
            self.pending[tool_use_id] = decision
            self._changed()
            return hold
        if decision.kind is DecisionKind.EDIT and tool_use_id in self._skill_shell_ids:
            raise _illegal("edit the call", self.host.status, NOT_EDITABLE)
        # The call leaves HELD now, not when the hook's task resumes (the answer says RUNNING).
        self.host.mark_tool_running(tool_use_id)
        hold.decision.set_result(self._apply(tool_use_id, hold.tool_name, hold.breakpoint_id, decision))
        return hold

    def _apply(self, tool_use_id: str, tool_name: str, breakpoint_id: str, decision: Decision) -> dict[str, Any]:
        """The hook answer for a decision, with its event (none when it was announced already)."""
        if tool_use_id in self._announced:
            self._announced.discard(tool_use_id)
            return deny_hook(decision.message) if decision.kind is DecisionKind.DENY else (
                edit_hook(decision.new_input or {}) if decision.kind is DecisionKind.EDIT else allow_hook())
        if decision.kind is DecisionKind.APPROVE:
            self.host.emit(ControlEvent(ControlEventKind.TOOL_APPROVED, tool_use_id, tool_name, breakpoint_id,
                                        actor=actor()))
            return allow_hook()
        if decision.kind is DecisionKind.DENY:
            self.host.emit(ControlEvent(ControlEventKind.TOOL_DENIED, tool_use_id, tool_name, breakpoint_id,
                                        message=decision.message, actor=actor()))
            return deny_hook(decision.message)
        new_input = decision.new_input or {}
        self.host.emit(ControlEvent(ControlEventKind.TOOL_EDITED, tool_use_id, tool_name, breakpoint_id,
                                    input_json=orjson.dumps(new_input).decode(), actor=actor()))
        return edit_hook(new_input)

    def add_breakpoint(self, bp: Breakpoint) -> Breakpoint:
        self._require_running("add a breakpoint")
        self.breakpoints.add(bp)
        self.host.emit(ControlEvent(ControlEventKind.BREAKPOINT_ADDED, breakpoint_id=bp.breakpoint_id, actor=actor()))
        self._changed()
        return bp

    def remove_breakpoint(self, breakpoint_id: str) -> Breakpoint:
        bp = self.breakpoints.remove(breakpoint_id)
        self.host.emit(ControlEvent(ControlEventKind.BREAKPOINT_REMOVED, breakpoint_id=breakpoint_id, actor=actor()))
        self._changed()
        return bp

    async def inject(self, text: str, interrupt_first: bool) -> tuple[str, int]:
        self._require_running("inject a message")
        if not text.strip() or len(text.encode()) > MAX_INJECT_BYTES:
            raise invalid_field("text", f"must be 1 byte to {MAX_INJECT_BYTES} bytes")
        if self.stdin_closed:
            raise _illegal("inject a message", self.host.status, "the phase is finishing and takes no more input")
        if self.hard_paused:
            raise _illegal("inject a message", self.host.status, "the phase's processes are stopped; resume it first")
        message_uuid = str(uuid.uuid4())
        # Count the injected turn before anything is awaited: the interrupted turn's result can
        # arrive during the interrupt, and must not be taken for the last expected one (which
        # would close stdin before the injected line is written).
        self.turns_expected += 1
        self._cancel_settle()
        try:
            if interrupt_first:
                await self.interrupt()
                self._cancel_settle()  # armed by the interrupted turn's result; the injected turn follows
            written = await self.host.write_stdin(user_line(text, message_uuid))
        except BaseException:
            self._uncount_turn()
            raise
        if not written:
            self._uncount_turn()
            raise _illegal("inject a message", self.host.status, "the CLI's stdin is closed")
        event = self.host.emit(ControlEvent(ControlEventKind.MESSAGE_INJECTED,
                                            message=_utf8_prefix(text, MAX_INJECTED_EVENT_BYTES), actor=actor()))
        return message_uuid, event.sequence if event else 0

    def _cancel_settle(self) -> None:
        if self._settle is not None:
            self._settle.cancel()
            self._settle = None

    def _uncount_turn(self) -> None:
        """An injected turn that will not come: input may now be complete (or its settle timer due)."""
        self.turns_expected -= 1
        if self.results_seen:
            self._maybe_finish_input()

    async def interrupt(self) -> None:
        self._require_running("interrupt")
        if self.hard_paused:
            raise _illegal("interrupt", self.host.status, "the phase's processes are stopped; resume it first")
        if self.stdin_closed:
            raise _illegal("interrupt", self.host.status, "the phase is finishing and takes no more input")
        await self.channel.request("interrupt", wait_s=CONTROL_WAIT_SECONDS)
        self.host.emit(ControlEvent(ControlEventKind.INTERRUPTED, actor=actor()))

    # -- session settings and background tasks (CLI 2.1.330 control requests) ---------------

    def _require_input(self, operation: str) -> None:
        """The CLI can take a control request now: running, started, not SIGSTOPped, stdin open."""
        self._require_running(operation)
        if not self.host.process_started:
            raise _illegal(operation, self.host.status, "the process has not started")
        if self.hard_paused:
            raise _illegal(operation, self.host.status, "the phase's processes are stopped; resume it first")
        if self.stdin_closed:
            raise _illegal(operation, self.host.status, "the phase is finishing and takes no more input")

    async def set_model(self, model: str) -> None:
        """``set_model``: later turns use ``model`` ("" : the session's default, which the CLI calls 'default')."""
        if model and not TOKEN_PATTERN.match(model):
            raise invalid_field("model", f"{model[:80]!r} is not a valid model name", value=model[:80])
        self._require_input("set the model")
        await self.channel.request("set_model", {"model": model or "default"}, wait_s=CONTROL_WAIT_SECONDS)

    async def set_permission_mode(self, mode: PermissionMode) -> str:
        """``set_permission_mode``; returns the mode the CLI says is in effect (headless CLIs echo it)."""
        if mode not in PERMISSION_MODES:
            raise invalid_field("mode", f"unknown permission mode {mode!r}", value=str(mode))
        if self.gate_every_call and mode != PermissionMode.BYPASS_PERMISSIONS:
            # The controller allows every call it does not hold, which only bypassPermissions means.
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "INVALID_FIELD",
                              "mode: a bare phase runs under bypassPermissions only", {"field": "mode"})
        self._require_input("set the permission mode")
        answer = await self.channel.request("set_permission_mode", {"mode": str(mode)}, wait_s=CONTROL_WAIT_SECONDS)
        effective = answer.get("mode") if isinstance(answer, dict) else None
        return effective if isinstance(effective, str) and effective else mode

    async def stop_task(self, task_id: str) -> None:
        """``stop_task``: stops one background task (a shell, an agent) and leaves the turn alone."""
        _check_task_id(task_id)
        self._require_input("stop a task")
        if task_id not in self.known_tasks:
            raise _task_not_found(task_id)
        await self._task_request("stop_task", task_id)

    async def task_output(self, task_id: str, max_bytes: int) -> tuple[str, int, bool]:
        """``get_task_output``: (the last ``max_bytes`` of the output, its total bytes, whether cut)."""
        _check_task_id(task_id)
        if not 0 <= max_bytes <= MAX_TASK_OUTPUT_BYTES:
            raise invalid_field("max_bytes", f"must be 0 (64 KiB) to {MAX_TASK_OUTPUT_BYTES}")
        self._require_input("read a task's output")
        answer = await self._task_request("get_task_output", task_id)
        output = answer.get("output") if isinstance(answer.get("output"), str) else ""
        total = answer.get("total_bytes")
        encoded = output.encode()
        total = total if isinstance(total, int) and total >= 0 else len(encoded)
        truncated = answer.get("truncated") is True
        limit = max_bytes or DEFAULT_TASK_OUTPUT_BYTES
        if len(encoded) > limit:
            output = encoded[-limit:].decode(errors="ignore")  # drops a split character at the cut
            truncated = True
        return output, total, truncated

    async def _task_request(self, subtype: str, task_id: str) -> dict[str, Any]:
        try:
            return await self.channel.request(subtype, {"task_id": task_id}, wait_s=CONTROL_WAIT_SECONDS)
        except RunnerError as exc:
            # The CLI's refusals for an unknown id (CLI 2.1.330): "get_task_output: no shell or Monitor
            # task with that task_id in this session"; stop_task: "No task found with ID: ...".
            text = str(exc).lower()
            if "no shell or monitor task" in text or "no task found" in text or "not found" in text:
                raise _task_not_found(task_id) from None
            raise

    async def context_usage(self) -> dict[str, Any] | None:
        """The CLI's ``get_context_usage`` answer, or None if it cannot answer within 2 s."""
        if self.hard_paused or self.stdin_closed or self.host.ended:
            return None
        try:
            return await self.channel.request("get_context_usage", wait_s=2.0)
        except RunnerError:
            return None


def _utf8_prefix(text: str, max_bytes: int) -> str:
    """``text`` cut to at most ``max_bytes`` of UTF-8 (a character split by the cut is dropped)."""
    encoded = text.encode()
    return text if len(encoded) <= max_bytes else encoded[:max_bytes].decode(errors="ignore")


def _task_not_found(task_id: str) -> RunnerError:
    return RunnerError(ErrorKind.NOT_FOUND, "TASK_NOT_FOUND", f"the phase has no background task {task_id!r}",
                       {"task_id": task_id})


def _check_task_id(task_id: str) -> None:
    if not ID_PATTERN.match(task_id):
        raise invalid_field("task_id", "must be 1-128 characters of letters, digits, '.', '_', ':' or '-'")
