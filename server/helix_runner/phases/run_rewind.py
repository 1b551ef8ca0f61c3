"""Rewind in place: a running phase taken back to one of its checkpoints (docs/fork-and-rewind.md).

``RunRewind`` owns one rewind from its request to the attempt that resumes at the checkpoint:
asked while the phase is at a tool boundary, it stops the CLI (which writes its transcript out),
and once the attempt loop has seen the process go, it puts the workspace back, cuts the session
there, marks the history after it superseded and plans the next attempt. If the session cannot be
cut there after all, the phase resumes where it was and the caller is told why. It is given the
parts it acts on and callables for what the run owns (its CLI, its queue ticket), not the run.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from dataclasses import replace as dc_replace
from pathlib import Path

from helix_runner.domain.attempt_cost import restored_cost
from helix_runner.domain.checkpoints import Checkpoint, WorkspaceSnapshot
from helix_runner.domain.events import AttemptEndKind, ControlEvent, ControlEventKind, Event, Payload
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.session_cut import last_cost_state
from helix_runner.domain.stream_parser import model_usage_of
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.attempts import AttemptPlan, Retries
from helix_runner.phases.checkpoints import PhaseCheckpoints
from helix_runner.phases.control import PhaseController
from helix_runner.phases.fork import ForkPoint, choose, require_workspace, resolve
from helix_runner.phases.handover import read_transcript, restore_transcript
from helix_runner.process.checkpoint_git import restore
from helix_runner.process.claude_command import prompt_line
from helix_runner.store.protocol import MarkRewound

log = logging.getLogger(__name__)


@dataclass
class _Rewind:
    """A rewind asked for, carried out once the CLI is gone (``RunRewind.rewound``)."""

    point: ForkPoint
    checkpoint: Checkpoint
    workspace: WorkspaceSnapshot
    read_stored: Callable[[str], Awaitable[bytes]]
    done: asyncio.Future


class RunRewind:
    """Rewinds one running phase in place, at most one rewind at a time.

    ``stop_cli(cause, reason)`` stops the attempt's CLI; ``requeue(plan, why)`` queues the next
    attempt (status, admission) and returns it; ``transcript_path(session_id)`` and
    ``session_file(name)`` say where the CLI keeps a session's transcript and where it finds one to
    resume; ``emit`` publishes into the phase's stream; ``ended()``: the run has its result;
    ``status()``: the phase's status now.
    """

    def __init__(self, job_id: str, phase_id: str, checkpoints: PhaseCheckpoints, *, control: PhaseController,
                 stream: PhaseStream, attempts: list[Attempt], retries: Retries, spec: PhaseSpec, first_line: bytes,
                 emit: Callable[[Payload], Event | None], stop_cli: Callable[[EndCause, str], None],
                 requeue: Callable[[AttemptPlan, str], AttemptPlan],
                 transcript_path: Callable[[str], Path | None], session_file: Callable[[str], Path],
                 ended: Callable[[], bool], status: Callable[[], PhaseStatus]):
        self.job_id, self.phase_id = job_id, phase_id
        self.checkpoints = checkpoints
        self.control, self.stream, self.attempts, self.retries = control, stream, attempts, retries
        self.spec, self.first_line = spec, first_line
        self.emit, self.transcript_path, self.session_file = emit, transcript_path, session_file
        self._stop_cli, self._requeue, self._ended, self._status = stop_cli, requeue, ended, status
        self._rewind: _Rewind | None = None

    @property
    def pending(self) -> bool:
        """A rewind was asked for and not carried out yet."""
        return self._rewind is not None

    def _fields(self) -> dict[str, str]:
        return {"job_id": self.job_id, "phase_id": self.phase_id}

    async def request(self, point: ForkPoint, read_stored: Callable[[str], Awaitable[bytes]]) -> tuple[Checkpoint, int]:
        """Stops the CLI to rewind at ``point`` (the caller checked the phase is at a tool boundary);
        returns the checkpoint and the REWOUND event's sequence once the next attempt is set up."""
        await self.checkpoints.settled()
        checkpoint, workspace = choose(self.job_id, self.phase_id, self.checkpoints.checkpoints, point)
        require_workspace(self.job_id, self.phase_id, checkpoint, workspace, point)
        if self._rewind is not None or self._ended():  # another rewind won meanwhile
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION", "cannot rewind: the phase is "
                              "rewinding or ending already", {"status": self._status().name, "operation": "rewind"})
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._rewind = _Rewind(point, checkpoint, workspace, read_stored, done)
        # SIGTERM: the CLI writes its transcript out before it exits (docs/claude-cli-protocol.md §3.7);
        # the session is cut from that file once the process is gone (rewound).
        self._stop_cli(EndCause.INTERRUPTED, f"rewound to checkpoint {checkpoint.number}")
        sequence = await asyncio.wait_for(asyncio.shield(done), 60.0)
        return checkpoint, sequence

    async def rewound(self, plan: AttemptPlan) -> AttemptPlan:
        """The CLI is gone after a rewind was asked for: the workspace goes back, the history is marked,
        and the next attempt resumes the session cut at the checkpoint (it uses up no attempt). If the
        session cannot be cut there after all, the phase resumes where it was and the caller is told."""
        assert self._rewind is not None
        rewind, self._rewind = self._rewind, None
        checkpoint, done = rewind.checkpoint, rewind.done
        self.retries.policy = dc_replace(self.retries.policy, max_attempts=self.retries.policy.max_attempts + 1)
        if self.control.hard_paused:  # its processes are gone: the pause goes on as a soft one
            self.control.hard_paused = False
            self.control.pause_requested = True
        try:
            transcript = b""
            path = self.transcript_path(checkpoint.session_id)
            if path is not None:
                with contextlib.suppress(OSError):  # no link the phase put in the way is followed
                    transcript = await asyncio.to_thread(read_transcript, path)
            if not transcript:
                transcript = await rewind.read_stored(checkpoint.session_id)
            start = resolve(self.job_id, self.phase_id, checkpoint, rewind.workspace, transcript, rewind.point)
        except Exception as exc:
            error = exc if isinstance(exc, RunnerError) else RunnerError(
                ErrorKind.INTERNAL, "INTERNAL", "the rewind failed; the server log has the details", {"operation": "rewind"})
            if not isinstance(exc, RunnerError):
                log.exception("a rewind failed", extra={"fields": self._fields()})
            if not done.done():
                done.set_exception(error)
            return self.resumed_where_it_was(plan, f"the rewind to checkpoint {checkpoint.number} failed: "
                                                   f"{error.message}")
        self.attempts[-1] = dc_replace(self.attempts[-1], status=PhaseStatus.INTERRUPTED,
                                       reason=f"rewound to checkpoint {checkpoint.number}",
                                       end_kind=AttemptEndKind.REWOUND, retryable=True,
                                       cost=await self.stopped_attempt_cost() or self.attempts[-1].cost)
        snapshots = self.checkpoints.snapshots
        try:
            if start.workspace.kept and snapshots.work_dir is not None:
                await asyncio.to_thread(restore, start.workspace, snapshots.work_dir)
            await asyncio.to_thread(restore_transcript, start.transcript, self.session_file(start.session_file))
        except Exception as exc:
            log.exception("restoring a checkpoint failed", extra={"fields": self._fields()})
            if not done.done():
                done.set_exception(RunnerError(ErrorKind.INTERNAL, "INTERNAL", "restoring the checkpoint failed; the "
                                               "server log has the details", {"operation": "rewind"}))
            return self.resumed_where_it_was(plan, f"restoring checkpoint {checkpoint.number} failed ({exc})")
        last = self.stream.last_sequence
        self.checkpoints.restarted(checkpoint)
        self.checkpoints.write(MarkRewound(self.job_id, self.phase_id, checkpoint.number))
        for tool_use_id, decision in start.decisions:
            self.control.pending[tool_use_id] = decision
        self.control.answered_at_start = list(start.answered)
        self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None], resumed=True)
        event = self.emit(ControlEvent(
            ControlEventKind.REWOUND, checkpoint.tool_use_id, checkpoint.tool_name,
            message=f"rewound to checkpoint {checkpoint.number} (turn {checkpoint.turn}); the events after "
                    f"{checkpoint.sequence} up to {last} are superseded",
            checkpoint=checkpoint.number, rewound_after_sequence=checkpoint.sequence, rewound_to_sequence=last))
        spec = dc_replace(self.spec, resume_session_id=start.session_file, fork_session=True,
                          resume_session_at=start.resume_at, session_id="")
        nxt = self._requeue(AttemptPlan(plan.number + 1, spec, start.first_line, checkpoint.session_id),
                            f"rewound to checkpoint {checkpoint.number}")
        if not done.done():
            done.set_result(event.sequence if event is not None else last)
        return nxt

    async def stopped_attempt_cost(self):
        """The true cost of the attempt just stopped without a result: the session totals its CLI saved
        at SIGTERM (its transcript's last ``cost-state``), minus what earlier attempts of that session
        reported (the stream showed only the start of its last message's usage)."""
        session = self.stream.session_id or ""
        path = self.transcript_path(session)
        if path is None:
            return None
        try:
            data = await asyncio.to_thread(read_transcript, path)  # no link the phase put in the way
        except OSError:
            return None
        usage = last_cost_state(data)
        if usage is None:
            return None
        others = [a.cost for a in self.attempts[:-1]
                  if a.cost is not None and a.session_id == session and a.cost.reported_usd is not None]
        return restored_cost(model_usage_of(usage), others, self.stream.prices)

    def resumed_where_it_was(self, plan: AttemptPlan, why: str) -> AttemptPlan:
        """After a rewind that could not be made: the next attempt resumes the session as it was."""
        session = self.stream.session_id or ""
        spec = dc_replace(self.spec, resume_session_id=session, fork_session=False, session_id="",
                          resume_session_at="") if session else self.spec
        line = prompt_line(self.retries.policy.continuation_prompt) if session else self.first_line
        self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None], resumed=bool(session))
        return self._requeue(AttemptPlan(plan.number + 1, spec, line, session), why)
