"""A stand-in for the phase a ``PhaseController`` controls (``phases.ports.PhaseHost``), and a scripted CLI.

``FakeHost`` records what the controller does to the phase (events, statuses, stdin lines, watchdog
holds, process signals) and lets a test play the CLI's side: its control requests (a tool call's
PreToolUse hook) and its stdout (results, responses to our requests), fed through ``observe``
exactly as ``PhaseRun`` would. ``FakeRun`` is what the command surface (``phases.commands``) uses
of a ``PhaseRun``, around a real controller on a ``FakeHost``.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Callable
from typing import Any

import orjson

from helix_runner.domain.events import (
    ControlEvent,
    ControlEventKind,
    ControlRequest,
    ControlResponse,
    Event,
    PhaseStatusChanged,
    TokenUsage,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.phases.control import PhaseController
from helix_runner.process.control_protocol import PRE_TOOL_USE_CALLBACK

WAIT_S = 5.0  # bound on every wait for the controller to act


class FakeHost:
    """Implements ``PhaseHost`` in memory; ``controller`` is attached by ``make_controller``."""

    def __init__(self) -> None:
        self.job_id = "job"
        self.phase_id = "phase"
        self.status = PhaseStatus.RUNNING
        self.ended = False
        self.process_started = True
        self.cost_usd = 0.0
        self.assistant_turns = 0
        self.quota_reason: str | None = None  # quota_crossed answers this (phases/quota_guard.py)
        self.payloads: list[Any] = []  # everything emitted or set, in order
        self.stdin: list[dict[str, Any]] = []  # lines written, decoded
        self.stdin_closed = False
        self.watchdog_holds = 0
        self.processes_stopped = False
        self.tool_marks: list[tuple[str, str, str]] = []  # (mark, tool_use_id, breakpoint_id)
        self.controller: PhaseController | None = None
        # Plays the CLI's answer to a control request we send (interrupt, get_context_usage).
        self.on_control_request: Callable[[dict[str, Any]], None] = self.answer_success
        self._seq = itertools.count(1)
        self._written = asyncio.Event()
        self._changed = asyncio.Event()  # set on every emit and status change
        self.closed = asyncio.Event()  # set when the controller closes stdin
        self.boundaries = 0  # how often the controller waited for a checkpoint before deciding a call

    # -- PhaseHost --------------------------------------------------------------------------

    def emit(self, payload: Any) -> Event | None:
        if self.ended:
            return None
        self.payloads.append(payload)
        self._changed.set()
        return Event(next(self._seq), time.time_ns(), "", "", "", "", payload)

    def set_status(self, status: PhaseStatus, reason: str) -> None:
        self.payloads.append(PhaseStatusChanged(self.status, status, reason))
        self.status = status
        self._changed.set()

    async def write_stdin(self, line: bytes) -> bool:
        await asyncio.sleep(0)  # a real write drains; other tasks may run meanwhile
        if self.stdin_closed:
            return False
        obj = orjson.loads(line)
        self.stdin.append(obj)
        self._written.set()
        if obj.get("type") == "control_request":
            self.on_control_request(obj)
        return True

    async def at_boundary(self) -> None:
        self.boundaries += 1

    async def quota_crossed(self) -> str | None:
        return self.quota_reason

    async def close_stdin(self) -> None:
        self.stdin_closed = True
        self.closed.set()
        self._written.set()

    def hold_watchdog(self, held: bool) -> None:
        self.watchdog_holds += 1 if held else -1

    async def pause_processes(self) -> None:
        self.processes_stopped = True

    async def resume_processes(self) -> None:
        self.processes_stopped = False

    def mark_tool_held(self, tool_use_id: str, breakpoint_id: str) -> None:
        self.tool_marks.append(("held", tool_use_id, breakpoint_id))

    def mark_tool_running(self, tool_use_id: str) -> None:
        self.tool_marks.append(("running", tool_use_id, ""))

    # -- the CLI's side ---------------------------------------------------------------------

    def observe(self, payload: Any) -> None:
        """The CLI's event reaches the controller as the run hands it over: in a batch."""
        assert self.controller is not None
        self.controller.on_events([Event(0, 0, "", "", "", "", payload)])

    def answer_success(self, request: dict[str, Any], response: dict[str, Any] | None = None) -> None:
        """The CLI accepts a request we sent (answered on the next loop turn, as from stdout)."""
        asyncio.get_running_loop().call_soon(
            self.observe, ControlResponse(request["request_id"], True, response=response or {})
        )

    def tool_call(
        self, tool_use_id: str, name: str = "Bash", tool_input: dict[str, Any] | None = None
    ) -> str:
        """The CLI asks our PreToolUse hook about a call; returns the request id to wait on."""
        request_id = f"cli_{tool_use_id}"
        self.observe(
            ToolCallStarted(tool_use_id, name, orjson.dumps(tool_input or {}).decode(), 0, False, "msg")
        )
        self.observe(
            ControlRequest(
                request_id,
                "hook_callback",
                name,
                tool_use_id,
                {
                    "callback_id": PRE_TOOL_USE_CALLBACK,
                    "input": {"tool_name": name, "tool_input": tool_input or {}, "tool_use_id": tool_use_id},
                },
            )
        )
        return request_id

    def tool_done(self, tool_use_id: str, name: str = "Bash") -> None:
        self.observe(ToolCallFinished(tool_use_id, name, False, "ok", 2, False))

    def turn_result(self) -> None:
        self.observe(turn_result())

    def answers(self) -> dict[str, dict[str, Any]]:
        """Our answers to the CLI's requests so far, by request id (the whole ``response`` object)."""
        return {
            line["response"]["request_id"]: line["response"]
            for line in self.stdin
            if line.get("type") == "control_response"
        }

    async def answer_to(self, request_id: str) -> dict[str, Any]:
        """Waits (bounded) for our answer to a CLI request; returns the hook output (or the error)."""
        async with asyncio.timeout(WAIT_S):
            while request_id not in self.answers():
                self._written.clear()
                await self._written.wait()
        answer = self.answers()[request_id]
        return answer.get("response", answer)

    async def settle(self) -> None:
        """Lets the controller's tasks run until nothing is ready (a few loop turns)."""
        for _ in range(20):
            await asyncio.sleep(0)

    async def until(self, condition: Callable[[], bool]) -> None:
        """Waits (bounded) until ``condition`` holds after an event or status change (e.g. a hold
        decided in a worker thread)."""
        async with asyncio.timeout(WAIT_S):
            while not condition():
                self._changed.clear()
                await self._changed.wait()

    def control_kinds(self) -> list[ControlEventKind]:
        return [p.kind for p in self.payloads if isinstance(p, ControlEvent)]


def turn_result() -> TurnResult:
    return TurnResult(
        "success",
        False,
        None,
        "completed",
        1,
        "done",
        False,
        10,
        10,
        0.0,
        TokenUsage(),
        (),
        (),
        (),
        1,
        "end_turn",
    )


def make_controller(breakpoints=()) -> tuple[FakeHost, PhaseController]:
    host = FakeHost()
    host.controller = PhaseController(host, list(breakpoints))
    return host, host.controller


class FakeRun:
    """The members of ``PhaseRun`` the command surface uses: its controller, spec, the tracker's record
    of a call (``calls``), and the model row writes and stop requests it gets (recorded)."""

    def __init__(self, host: FakeHost, control: PhaseController, spec: PhaseSpec) -> None:
        self.host = host
        self.control = control
        self.spec = spec
        self.calls: dict[str, ToolCall] = {}
        self.models: list[str] = []  # model_switched
        self.stops: list[tuple[EndCause, str]] = []  # request_stop_with_reason

    def tool_call(self, tool_use_id: str) -> ToolCall | None:
        return self.calls.get(tool_use_id)

    def model_switched(self, model: str) -> None:
        self.models.append(model)

    def request_stop_with_reason(self, cause: EndCause, reason: str) -> None:
        self.stops.append((cause, reason))

    def emit(self, payload: Any) -> Event | None:
        return self.host.emit(payload)
