"""A running phase's side of the hand-over: stopping at a tool boundary, and leaving for another replica.

``RunHandover`` owns the move of one running phase (docs/scale-out.md "Hand-over"): asked to
move, it waits for a tool boundary (no tool call runs; held and parked calls have not started),
stops the CLI there, and once the attempt loop has seen the CLI go, saves the phase's state,
commits its events and releases it to the shared store. While the phase runs it mirrors the
transcript at each tool or turn boundary (so a replica that adopts it after a crash resumes after
the last finished call), and on a phase resumed after a move it gives the moved attempt the true
figures. The store side of the state is ``phases/handover.py`` (``PhaseDurability``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import replace as dc_replace

from helix_runner.domain.attempt_cost import restored_cost
from helix_runner.domain.events import Event, ToolCallFinished, TurnResult
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.tool_tracker import ToolCallStatus
from helix_runner.phases.control import ControlState, PhaseController, saved_control
from helix_runner.phases.event_log import Moved, PhaseEventLog
from helix_runner.phases.handover import HANDOVER_RETRY_AFTER_S, PhaseDurability
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.recorder import PhaseRecorder
from helix_runner.phases.run_record import RunRecord
from helix_runner.process.git_worktree import GitError
from helix_runner.telemetry import PhaseTelemetry

log = logging.getLogger(__name__)


def tool_running(stream: PhaseStream) -> bool:
    """Whether a tool call of the phase runs now (a held or parked call has not started)."""
    return any(c.status is ToolCallStatus.RUNNING for c in stream.tools.open_calls)


class RunHandover:
    """Moves one running phase to another replica, and keeps it movable while it runs.

    It is given what it acts on: the phase's durable state, its controller, stream, record and
    attempts (the run's own list, updated in place), and three callables for what the run owns:
    ``stop_cli(cause, reason)`` stops the attempt's CLI; ``let_go()`` revokes the phase's key and
    gives up its admission slot; ``release_here()`` frees what the phase holds on this replica once
    it is released (gateway capability, secret files, recording files, the sandbox's home).
    """

    def __init__(self, durability: PhaseDurability, *, replica_id: str, control: PhaseController,
                 stream: PhaseStream, record: RunRecord, recorder: PhaseRecorder, encoder: RecordEncoder,
                 events: PhaseEventLog, telemetry: PhaseTelemetry, attempts: list[Attempt], workspace,
                 stop_cli: Callable[[EndCause, str], None], let_go: Callable[[], None],
                 release_here: Callable[[], Awaitable[None]], reconcile: int | None = None):
        self.durability = durability
        self.replica_id = replica_id
        self.control, self.stream, self.record, self.recorder = control, stream, record, recorder
        self.encoder, self.events, self.telemetry = encoder, events, telemetry
        self.attempts = attempts
        self.workspace = workspace
        self._stop_cli, self._let_go, self._release_here = stop_cli, let_go, release_here
        self.moving: str | None = None  # handed over to another replica: why
        self.moved = False
        self._at_boundary = asyncio.Event()  # moving: no tool call runs any more
        self._moving_control: ControlState | None = None  # taken at the boundary (ending the attempt answers holds)
        # The moved attempt (its index) whose figures the resumed attempt's first result corrects.
        self._reconcile = reconcile
        self._boundary: asyncio.Future | None = None

    def request(self, reason: str, wait_s: float) -> bool:
        """Starts the move: at the next tool boundary, or after ``wait_s`` seconds, the CLI is stopped.
        False when the phase cannot move (its workspace is on this disk) or already moves."""
        if not self.durability.movable or self.moving is not None:
            return False
        self.moving = reason
        self.control.begin_handover()
        self._boundary = asyncio.ensure_future(self._stop_at_boundary(wait_s))
        return True

    async def _stop_at_boundary(self, wait_s: float) -> None:
        """Stops the CLI once no tool call runs (held and parked calls have not started), or at ``wait_s``."""
        if tool_running(self.stream):
            with contextlib.suppress(TimeoutError):  # every batch of events checks again (on_events)
                await asyncio.wait_for(self._at_boundary.wait(), wait_s)
        # The control state at the boundary, held calls included (ending the attempt answers them).
        self._moving_control = self.control.state()
        # SIGTERM: the CLI writes its transcript out before it exits (docs/claude-cli-protocol.md §3.7).
        self._stop_cli(EndCause.INTERRUPTED, self.moving or "moved")

    def tool_held(self) -> None:
        """A call was parked or held: when none runs any more, that is a boundary too."""
        if self.moving is not None and not tool_running(self.stream):
            self._at_boundary.set()

    def on_events(self, events: list[Event]) -> None:
        """Each batch: a boundary reached while moving, the moved attempt's figures, the transcript mirrored."""
        for e in events:
            p = e.payload
            if self.moving is not None and not self._at_boundary.is_set() and not tool_running(self.stream):
                self._at_boundary.set()
            if p.__class__ is TurnResult and self._reconcile is not None:
                self.reconcile_moved_attempt()
            if p.__class__ is TurnResult or p.__class__ is ToolCallFinished:
                # A tool or turn boundary: mirror the transcript, so that after a crash the adopter
                # resumes after the last finished tool call, not from the prompt (one phase's prompt is
                # one turn: its only turn boundary is its end).
                self.progress()

    def progress(self) -> None:
        """Mirrors the transcript and the attempts so far to the shared store (a boundary, an attempt's end)."""
        self.durability.progress(self.stream.session_id or "", tuple(self.attempts))

    def reconcile_moved_attempt(self) -> None:
        """The first result of an attempt resumed after a move: the moved attempt, stopped before its
        turn's result, gets the figures its process saved and this one restored (numbers stay true)."""
        index, self._reconcile = self._reconcile, None
        if not self.stream.carried or index is None or index >= len(self.attempts):
            return
        moved = self.attempts[index]
        session = moved.session_id
        others = [a.cost for i, a in enumerate(self.attempts)
                  if i != index and a.cost is not None and a.session_id == session and a.cost.reported_usd is not None]
        cost = restored_cost(self.stream.carried, others, self.stream.prices)
        if cost is None:
            return
        self.attempts[index] = dc_replace(moved, cost=cost)
        self.stream.replace_prior_costs([a.cost for a in self.attempts if a.cost is not None])

    async def hand_over(self) -> bool:
        """The CLI is gone: saves the phase's state, commits its events, releases it. False (the phase
        then ends INTERRUPTED here, as before) when the state could not be saved or released."""
        assert self.moving is not None
        reason = self.moving
        fields = {"job_id": self.record.job_id, "phase_id": self.record.phase_id}
        state = self._moving_control or self.control.state()
        # Decisions sent after the boundary went with the phase, not to the stopping CLI (control.resolve).
        control = saved_control(dc_replace(state, decisions=tuple(self.control.pending.items())))
        self._let_go()
        self.control.close(reason)
        self.record.publish(self.stream.finish())
        self.recorder.write_tools(self.stream.tools.calls)
        self.recorder.write_cost(force=True)
        self.record.set_status(PhaseStatus.QUEUED, f"{reason}: waiting for another replica to continue it",
                               attempts_pb=self.encoder.encode_attempts(self.attempts))
        workspace = self.workspace
        if workspace is not None and workspace.mode == "GIT_WORKTREE":  # the work so far, on the phase's branch
            try:
                await workspace.hand_over()
            except GitError as exc:
                log.warning("committing a worktree for hand-over failed; the phase ends here",
                            extra={"fields": {**fields, "error": str(exc)}})
                return False
        if not await self.durability.hand_over(self.stream.session_id or "", tuple(self.attempts), control):
            return False
        committed = asyncio.Event()
        self.events.flushed(committed.set)  # every event and row write of the run is committed
        try:
            await asyncio.wait_for(committed.wait(), 30.0)
        except TimeoutError:
            return False
        if not await asyncio.to_thread(self.durability.release, reason):
            log.warning("handing the phase over failed; it ends here", extra={"fields": fields})
            return False
        await self._release_here()
        self.moved = True
        self.telemetry.on_moved()
        self.events.end_moved(Moved(self.replica_id, HANDOVER_RETRY_AFTER_S))
        log.info("phase handed over", extra={"fields": {**fields, "reason": reason, "attempts": len(self.attempts)}})
        return True
