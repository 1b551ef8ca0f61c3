"""The API's one way to act on a phase: a method per job-control command, by job and phase id.

Each command finds the phase running in this server (NOT_FOUND for an unknown phase,
FAILED_PRECONDITION naming its status for one that does not run here), asks the phase's
controller (``phases.control``, one for the phase's whole life) and does the rest of what the
command means, so a handler translates its request and calls one command: ``set_model`` also
writes the model to the phase row once the CLI took it, ``set_permission_mode`` refuses
bypassPermissions where the server does not allow it, ``cancel`` returns once the phase ended.
The import contract ``api-through-commands`` (pyproject.toml) keeps the API from reaching the
controller or the run itself.
"""

from __future__ import annotations

from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.checkpoints import Checkpoint
from helix_runner.domain.egress_hold import EgressDecision
from helix_runner.domain.events import ControlEvent, ControlEventKind
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_spec import OnDisconnect, PermissionMode
from helix_runner.domain.quotas import ProjectQuota, Spend
from helix_runner.domain.tool_decision import Decision
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.fork import ForkPoint
from helix_runner.phases.service import LivePhase, PhaseService


class PhaseCommands:
    """Job control of the phases running in this server (``PhaseService.live``); one per server."""

    def __init__(self, service: PhaseService):
        self._service = service

    def _running(self, job_id: str, phase_id: str, operation: str) -> LivePhase:
        """The running phase; NOT_FOUND if unknown, FAILED_PRECONDITION if it is not running here."""
        live = self._service.get_live(job_id, phase_id)
        if live is None or live.done.is_set():
            row = self._service.require_phase(job_id, phase_id)
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION",
                              f"cannot {operation}: phase {phase_id} is {row.status.name}, not running",
                              {"status": row.status.name, "operation": operation})
        return live

    # -- pause, step, interrupt, inject ----------------------------------------------------------

    async def pause(self, job_id: str, phase_id: str, *, hard: bool) -> None:
        """Holds the next tool call (``hard``: stops every process of the phase now)."""
        await self._running(job_id, phase_id, "pause").run.control.pause(hard=hard)

    async def resume(self, job_id: str, phase_id: str) -> None:
        await self._running(job_id, phase_id, "resume").run.control.resume()

    def step(self, job_id: str, phase_id: str) -> None:
        """Lets one tool call of a paused phase run."""
        self._running(job_id, phase_id, "step").run.control.step()

    async def interrupt(self, job_id: str, phase_id: str) -> None:
        """Ends the CLI's current turn."""
        await self._running(job_id, phase_id, "interrupt").run.control.interrupt()

    async def inject(self, job_id: str, phase_id: str, text: str, *, interrupt_first: bool) -> tuple[str, int]:
        """Queues ``text`` as the next user turn; (its message uuid, the MESSAGE_INJECTED event's sequence)."""
        control = self._running(job_id, phase_id, "inject a message").run.control
        return await control.inject(text, interrupt_first=interrupt_first)

    async def rewind(self, job_id: str, phase_id: str, point: ForkPoint) -> tuple[Checkpoint, int]:
        """Takes a paused or held phase back to a checkpoint in place (docs/fork-and-rewind.md); the
        checkpoint and the REWOUND event's sequence."""
        run = self._running(job_id, phase_id, "rewind").run
        return await run.request_rewind(point, lambda session_id: self._service.stored_transcript(
            job_id, phase_id, session_id))

    # -- held calls and breakpoints -------------------------------------------------------------

    async def resolve_egress(self, job_id: str, phase_id: str, hold_id: str, decision: EgressDecision) -> str:
        """Decides a network request the phase holds (phases/egress_holds.py); its destination."""
        run = self._running(job_id, phase_id, "resolve a held network request").run
        return (await run.egress_holds.resolve(hold_id, decision)).destination

    async def egress_allowances(self, project_id: str) -> list[tuple[str, str, str, int]]:
        return await self._service.off_loop(self._service.store.list_egress_allowances, project_id)

    async def delete_egress_allowance(self, project_id: str, host: str) -> None:
        if not await self._service.off_loop(self._service.store.delete_egress_allowance, project_id, host):
            raise RunnerError(ErrorKind.NOT_FOUND, "NOT_FOUND", f"project {project_id} has no egress allowance for "
                              f"{host}", {"project_id": project_id, "host": host})

    def resolve(self, job_id: str, phase_id: str, tool_use_id: str, decision: Decision) -> ToolCall | None:
        """Answers a held call; the tracker's record of it (None: no longer retained).

        A phase moving between replicas (no live owner) keeps the decision for its adopter, which
        applies it once (docs/scale-out.md "Hand-over"); the answer then carries no record."""
        if self._service.get_live(job_id, phase_id) is None and self._service.keep_decision(
                job_id, phase_id, tool_use_id, decision):
            return None
        run = self._running(job_id, phase_id, "resolve a tool call").run
        run.control.resolve(tool_use_id, decision)
        return run.tool_call(tool_use_id)

    def add_breakpoint(self, job_id: str, phase_id: str, breakpoint: Breakpoint) -> Breakpoint:
        return self._running(job_id, phase_id, "add a breakpoint").run.control.add_breakpoint(breakpoint)

    def remove_breakpoint(self, job_id: str, phase_id: str, breakpoint_id: str) -> Breakpoint:
        return self._running(job_id, phase_id, "remove a breakpoint").run.control.remove_breakpoint(breakpoint_id)

    def list_breakpoints(self, job_id: str, phase_id: str) -> tuple[Breakpoint, ...]:
        return tuple(self._running(job_id, phase_id, "list breakpoints").run.control.breakpoints.list())

    # -- session settings and background tasks ------------------------------------------------------

    async def set_model(self, job_id: str, phase_id: str, model: str) -> None:
        """Later turns use ``model`` ("": the session's default); the phase row shows it once the CLI took it."""
        run = self._running(job_id, phase_id, "set the model").run
        await run.control.set_model(model)
        run.model_switched(model)

    async def set_permission_mode(self, job_id: str, phase_id: str, mode: PermissionMode) -> str:
        """Switches the CLI's permission mode; the mode it says is in effect.

        bypassPermissions is refused (INVALID_ARGUMENT) on a server that does not allow it, as at start.
        """
        if mode == PermissionMode.BYPASS_PERMISSIONS and not self._service.config.allow_bypass_permissions:
            raise invalid_field("mode", "bypassPermissions is disabled on this server")
        control = self._running(job_id, phase_id, "set the permission mode").run.control
        return await control.set_permission_mode(mode)

    async def stop_task(self, job_id: str, phase_id: str, task_id: str) -> None:
        """Stops one background task (a shell, an agent) and leaves the turn alone."""
        await self._running(job_id, phase_id, "stop a task").run.control.stop_task(task_id)

    async def task_output(self, job_id: str, phase_id: str, task_id: str, max_bytes: int) -> tuple[str, int, bool]:
        """(The last ``max_bytes`` of a background task's output, its total bytes, whether it was cut)."""
        control = self._running(job_id, phase_id, "read a task's output").run.control
        return await control.task_output(task_id, max_bytes)

    # -- ending --------------------------------------------------------------------------------

    async def cancel(self, job_id: str, phase_id: str, reason: str = "") -> None:
        """Ends the phase CANCELLED (also while it waits to start) and returns once it has ended."""
        live = self._service.get_live(job_id, phase_id)
        if live is None:
            row = self._service.require_phase(job_id, phase_id)
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION",
                              f"phase {phase_id} is {row.status.name}, not running; it cannot be cancelled",
                              {"status": row.status.name, "operation": "cancel", "job_id": job_id,
                               "phase_id": phase_id})
        live.run.request_stop_with_reason(EndCause.CANCELLED, reason or "cancelled by a client")
        await live.done.wait()

    def caller_gone(self, job_id: str, phase_id: str) -> None:
        """The RunPhase caller went away: the phase's ``on_disconnect`` applies (nothing once it ended)."""
        live = self._service.get_live(job_id, phase_id)
        if live is None or live.done.is_set():
            return
        if live.run.spec.on_disconnect == OnDisconnect.DETACH:
            live.run.emit(ControlEvent(ControlEventKind.DETACHED, message="the RunPhase caller went away"))
        else:
            live.run.request_stop_with_reason(EndCause.CANCELLED, "the RunPhase caller disconnected")

    # -- per-project quotas (phases/quota_guard.py) ---------------------------------------------

    async def set_quota(self, quota: ProjectQuota) -> None:
        """Stores a project's quota; this replica applies it at once, the others within seconds."""
        await self._service.quotas.set(quota)

    async def quota(self, project_id: str) -> tuple[ProjectQuota, Spend]:
        return await self._service.quotas.spend(project_id)
