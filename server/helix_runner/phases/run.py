"""Runs one phase: the CLI process, its stream of events, and their persistence, to an honest end.

Data flows one way: process bytes -> ``PhaseStream`` (typed, sequenced events, tool tracking,
costs) -> store and subscribers (``PhaseEventLog``). The final result is published only after
stdout reached EOF (or was abandoned after the group was killed), the process exited, and every
event was persisted and offered to subscribers (ADR-0010, docs/decisions/ADR-0010.md).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.attempt_cost import restored_cost
from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.checkpoints import Checkpoint, WorkspaceSnapshot
from helix_runner.domain.events import (
    AssistantText,
    AttemptEndKind,
    ControlEvent,
    ControlEventKind,
    Event,
    Payload,
    PhaseStatusChanged,
    QueueReason,
    QueueState,
    SessionInit,
    SessionWritesLost,
    StderrOutput,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
    UserMessage,
)
from helix_runner.domain.output_budget import OutputBudget
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, decide_outcome
from helix_runner.domain.phase_result import Attempt, PhaseDiagnostics, PhaseResult
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.session_cut import last_cost_state
from helix_runner.domain.skill_shell import skill_shell_allowed
from helix_runner.domain.stream_parser import model_usage_of
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import AdmissionClosedError, Ticket, TicketState
from helix_runner.phases.attempts import (
    AttemptEnd,
    AttemptPlan,
    AttemptWatch,
    Retries,
    attempt_started_event,
    end_attempt,
    ended_while_queued,
    first_plan,
    next_plan,
    retry_scheduled_event,
)
from helix_runner.phases.checkpoints import PhaseCheckpoints
from helix_runner.phases.control import ControlState, PhaseController, saved_control
from helix_runner.phases.egress_holds import EgressHolds
from helix_runner.phases.event_log import Moved, PhaseEventLog
from helix_runner.phases.fanout import Fanout
from helix_runner.phases.fork import ForkPoint, check_point, choose, require_workspace, resolve
from helix_runner.phases.handover import (
    HANDOVER_RETRY_AFTER_S,
    PhaseDurability,
    read_transcript,
    restore_transcript,
    transcript_path,
)
from helix_runner.phases.launch import LaunchPlan
from helix_runner.phases.ports import RecordEncoder, RunStore
from helix_runner.phases.quota_guard import QuotaGuard
from helix_runner.phases.recorder import PhaseRecorder
from helix_runner.phases.result import build_result, final_outcome
from helix_runner.phases.views import HeldCall, RunSnapshot
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.phases.workspace_cap import WorkspaceCap
from helix_runner.process.checkpoint_git import restore
from helix_runner.process.claude_command import prompt_line, redact_argv
from helix_runner.process.containment import PhaseScope
from helix_runner.process.control_protocol import ContextUsage, context_usage
from helix_runner.process.git_worktree import GitError
from helix_runner.process.procfs import start_ticks
from helix_runner.process.sandbox.private_home import project_dir_name
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor
from helix_runner.process.warm_pool import SpawnSignature
from helix_runner.store.protocol import EventRow, MarkRewound
from helix_runner.telemetry import PhaseTelemetry

log = logging.getLogger(__name__)


@dataclass
class _Rewind:
    """A rewind asked for, carried out once the CLI is gone (``PhaseRun._rewound``)."""

    point: ForkPoint
    checkpoint: Checkpoint
    workspace: WorkspaceSnapshot
    read_stored: Callable[[str], Awaitable[bytes]]
    done: asyncio.Future


@dataclass(frozen=True)
class Resumption:
    """A phase taken over from another replica: the attempt it continues with and where it stands."""

    plan: AttemptPlan  # the first attempt here: the next number, resuming the session when there is one
    attempts: tuple[Attempt, ...]  # the attempts before it (the moved or lost one included)
    last_sequence: int  # the history written before: the stream continues after it
    session_id: str
    reason: str  # "moved from replica X (draining)", "resumed after replica X was lost"
    end_kind: AttemptEndKind  # how the attempt before it ended (MOVED, or CRASHED for a lost replica)


class PhaseRun:
    """One phase in flight; ``run()`` drives its attempts to its one result.

    It keeps the attempt loop, is the controller's host (``phases.ports.PhaseHost``: the controller
    reaches the process, the stream and the status only through the members listed there) and
    gives the read model its snapshot. What it is launched with was decided before it
    (``phases/launch.py``); its rows are written by its ``PhaseRecorder``, its result is built by
    ``phases/result.py``.
    """

    def __init__(self, spec: PhaseSpec, plan: LaunchPlan, store: RunStore, encoder: RecordEncoder,
                 events: PhaseEventLog, breakpoints: list[Breakpoint] = (), prices: PriceTable | None = None,
                 telemetry: PhaseTelemetry | None = None, retries: Retries | None = None,
                 accepted_ns: int | None = None, notifier: PhaseNotifier | None = None, *,
                 replica_id: str = "", durability: PhaseDurability | None = None,
                 resumption: Resumption | None = None, control_state: ControlState | None = None,
                 checkpoints: PhaseCheckpoints | None = None):
        self.spec = spec
        # Per-project spend quotas, checked at each tool boundary (phases/quota_guard.py; None: none).
        self.quota_guard: QuotaGuard | None = None
        self.on_quota_pause: Callable[[str, dict[str, object]], None] | None = None
        # Checkpoints at every tool boundary (phases/checkpoints.py; None: off).
        self.checkpoints = checkpoints
        # Hand-over (docs/scale-out.md "Hand-over"): this replica's id (on each attempt it runs), the
        # phase's state kept in the shared store, where a phase taken over from another replica stands.
        self.replica_id = replica_id
        self.durability = durability
        self._resumption = resumption
        self._moving: str | None = None  # handed over to another replica: why
        self._at_boundary = asyncio.Event()  # moving: no tool call runs any more
        self._moving_control: ControlState | None = None  # taken at the boundary (ending the attempt answers holds)
        # The moved attempt (its index) whose figures the resumed attempt's first result corrects.
        self._reconcile: int | None = None
        if resumption is not None and resumption.attempts and resumption.end_kind is AttemptEndKind.MOVED \
                and resumption.plan.spec.resume_session_id:
            if resumption.attempts[-1].end_kind is AttemptEndKind.MOVED:
                self._reconcile = len(resumption.attempts) - 1
        self.moved = False
        self._ran_here = False
        # A rewind in place asked for (phases/fork.py ForkStart, its checkpoint, its answer's future).
        self._rewind: _Rewind | None = None
        # Webhooks: the deliveries each batch of events causes, written with it (phases/webhooks.py).
        self.notifier = notifier
        # When the phase was accepted (its row's create_time): the queue wait ends at its first CLI start.
        self.accepted_ns = time.time_ns() if accepted_ns is None else accepted_ns
        # Retry policy and admission (phases.attempts); the attempts so far, oldest first.
        self.retries = retries or Retries()
        self.attempts: list[Attempt] = []
        self._watch = AttemptWatch()
        self._ticket: Ticket | None = self.retries.ticket
        self._ticket_starting = False
        self._stop: tuple[EndCause, str] | None = None
        self._stopped = asyncio.Event()
        # telemetry: metrics and spans of this phase, fed from its events (helix_runner.telemetry).
        self.telemetry = telemetry or PhaseTelemetry(None, None, job_id=spec.job_id, phase_id=spec.phase_id,
                                                     project_id=spec.project_id)
        self.plan = plan
        # The sandbox the phase's processes run in (a warm start brings its own, see _take_warm).
        self.sandbox = plan.sandbox
        self.store = store
        self.encoder = encoder
        self.events = events
        self.stream = PhaseStream(plan.stream_options, price_table=prices)
        # The phase row's session, model and cost, and its tool-call rows, as the events come.
        self.recorder = PhaseRecorder(store, encoder, spec.job_id, spec.phase_id, spec.project_id or DEFAULT_PROJECT,
                                      self.stream)
        self.status = PhaseStatus.PENDING
        self.result: PhaseResult | None = None
        self._open_attempt(plan.argv, plan.env, plan.limits, plan.scope)
        # Job control: one controller for all the phase's attempts (attached to each in _run_attempt).
        self.control = PhaseController(self, list(breakpoints), gate_every_call=spec.bare,
                                       skill_shell_allowed=skill_shell_allowed(spec.allowed_tools, spec.disallowed_tools,
                                                                               spec.permission_mode),
                                       state=control_state)
        if durability is not None:
            self.control.on_change = lambda: durability.control_changed(saved_control(self.control.state()))
        if resumption is not None:  # continues the history and the attempts written on another replica
            self.attempts = list(resumption.attempts)
            self.stream.continue_from(resumption.last_sequence, resumption.session_id)
        # Network breakpoints (phases/egress_holds.py): requests the proxy holds until decided.
        self.egress_holds = EgressHolds(
            project=spec.project_id or DEFAULT_PROJECT, breakpoints=self.control.breakpoints.list,
            # Through the grant when there is one: its events are counted by kind (helix_gateway_events).
            emit=plan.egress.on_event if plan.egress is not None else self.emit, changed=self._egress_changed,
            hold_watchdog=self.hold_watchdog)
        self.control.egress_holds = self.egress_holds
        if plan.egress is not None:  # the gateway's and the proxy's reports: its stream and its metrics
            plan.egress.attach(self.emit, self.telemetry,
                               at_limit=lambda reason: self._at_limit(EndCause.EGRESS_LIMIT, reason),
                               gate=self.egress_holds.gate)
        self.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
        self._message_ids: set[str] = set()
        self.user_messages = 0
        # Every batch of events, in this order: persisted and offered to subscribers first
        # (phases.event_log), the controller last, so what it emits follows the batch it observed.
        self._fanout = Fanout([
            self._persist_and_offer,
            self.telemetry.on_events,  # telemetry
            self._note_stream_facts,
            self.recorder.on_events,
            *([checkpoints.on_events] if checkpoints is not None else []),
            self._watch_attempt,
            self.control.on_events,
        ])
        plan.recording_dir.mkdir(parents=True, exist_ok=True)
        # O_NOFOLLOW: a symlink planted in the recording directory is refused, never written through.
        self._stdout_file = open(plan.recording_dir / "stdout.jsonl", "ab", opener=_no_follow)
        self._stderr_file = open(plan.recording_dir / "stderr.log", "ab", opener=_no_follow)
        # What the phase makes the server write, against phase_output_max_bytes (domain/output_budget.py).
        self._output = OutputBudget(plan.limits.output_max_bytes)
        # What the phase writes to disk itself, against its workspace cap (phases/workspace_cap.py).
        self.workspace_cap = WorkspaceCap(plan.workspace_roots, plan.limits.workspace_max_bytes,
                                          lambda reason: self._at_limit(EndCause.WORKSPACE_LIMIT, reason))
        self.auth_source = ""  # the latest init line's `apiKeySource`
        self._revoke_key = lambda: None
        self._writes_lost: SessionWritesLost | None = None
        self._attempt_first_sequence = 1

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def phase_id(self) -> str:
        return self.spec.phase_id

    def request_handover(self, reason: str, wait_s: float) -> bool:
        """Hands the phase over to another replica (a drain): at its next tool boundary, or after
        ``wait_s`` seconds, the CLI is stopped; the run then saves its state and releases it instead of
        ending. False when it cannot move (no shared state, its workspace on this disk, ended)."""
        if self.durability is None or not self.durability.movable or self.result is not None \
                or self._moving is not None or self._stop is not None:
            return False
        self._moving = reason
        self.control.begin_handover()
        self._stopped.set()  # a phase waiting for admission or a backoff stops waiting
        self._boundary = asyncio.ensure_future(self._stop_at_boundary(wait_s))
        return True

    async def _stop_at_boundary(self, wait_s: float) -> None:
        """Stops the CLI once no tool call runs (held and parked calls have not started), or at ``wait_s``."""
        if self._tool_running():
            with contextlib.suppress(TimeoutError):  # every batch of events checks again (_note_stream_facts)
                await asyncio.wait_for(self._at_boundary.wait(), wait_s)
        # The control state at the boundary, held calls included (ending the attempt answers them).
        self._moving_control = self.control.state()
        # SIGTERM: the CLI writes its transcript out before it exits (docs/claude-cli-protocol.md §3.7).
        self.supervisor.request_stop(EndCause.INTERRUPTED, self._moving or "moved")

    def waits_for_room_here(self) -> bool:
        """Queued for this replica's own running limit, before any process of it started here."""
        state = self.queue_state()
        return (self.status is PhaseStatus.QUEUED and not self._ran_here and self._moving is None
                and state is not None and state.reason is QueueReason.SERVER_LIMIT)

    def _reconcile_moved_attempt(self) -> None:
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

    def _tool_running(self) -> bool:
        return any(c.status is ToolCallStatus.RUNNING for c in self.stream.tools.open_calls)

    async def _hand_over(self) -> bool:
        """The CLI is gone: saves the phase's state, commits its events, releases it. False (the phase
        then ends INTERRUPTED here, as before) when the state could not be saved or released."""
        assert self.durability is not None and self._moving is not None
        reason = self._moving
        state = self._moving_control or self.control.state()
        # Decisions sent after the boundary went with the phase, not to the stopping CLI (control.resolve).
        control = saved_control(dc_replace(state, decisions=tuple(self.control.pending.items())))
        self._revoke_key()
        admission, ticket = self.retries.admission, self._ticket
        if admission is not None and ticket is not None:  # a queued phase leaves this replica's queue
            admission.release(ticket)
        self.control.close(reason)
        self._publish(self.stream.finish())
        self.recorder.write_tools(self.stream.tools.calls)
        self.recorder.write_cost(force=True)
        self.set_status(PhaseStatus.QUEUED, f"{reason}: waiting for another replica to continue it",
                        attempts_pb=self.encoder.encode_attempts(self.attempts))
        workspace = self.plan.workspace
        if workspace is not None and workspace.mode == "GIT_WORKTREE":  # the work so far, on the phase's branch
            try:
                await workspace.hand_over()
            except GitError as exc:
                log.warning("committing a worktree for hand-over failed; the phase ends here",
                            extra={"fields": {**self._log_fields(), "error": str(exc)}})
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
            log.warning("handing the phase over failed; it ends here", extra={"fields": self._log_fields()})
            return False
        if self.plan.egress is not None:
            self.plan.egress.revoke()
        if self.plan.secret_files is not None:
            self.plan.secret_files.remove()
        self._stdout_file.close()
        self._stderr_file.close()
        if self.sandbox is not None:  # the transcript is in the shared store; the private home goes
            await asyncio.to_thread(self.sandbox.restore)
            await asyncio.to_thread(self.sandbox.close)
        self.moved = True
        self.telemetry.on_moved()
        self.events.end_moved(Moved(self.replica_id, HANDOVER_RETRY_AFTER_S))
        log.info("phase handed over", extra={"fields": {**self._log_fields(), "reason": reason,
                                                        "attempts": len(self.attempts)}})
        return True

    # -- rewind in place (docs/fork-and-rewind.md) -------------------------------------------

    async def request_rewind(self, point: ForkPoint, read_stored: Callable[[str], Awaitable[bytes]]) -> tuple[Checkpoint, int]:
        """Takes the phase back to a checkpoint in place: stops its CLI, restores its workspace, resumes
        its session cut there. Only while it is paused or holds a call (its CLI is at a tool boundary:
        no tool runs). Returns the checkpoint and the REWOUND event's sequence once the next attempt is
        set up. ``read_stored(session_id)``: the session's transcript as the store keeps it."""
        check_point(point)
        if self.checkpoints is None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "CHECKPOINT_NOT_FOUND",
                              "checkpoints are off on this server (checkpoints = false)",
                              {"job_id": self.job_id, "phase_id": self.phase_id})
        if self.result is not None or self.status not in (PhaseStatus.PAUSED, PhaseStatus.AWAITING_APPROVAL) \
                or self._rewind is not None or self._moving is not None or self._stop is not None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION",
                              "cannot rewind: the phase must be paused or hold a tool call (then no tool runs)",
                              {"status": self.status.name, "operation": "rewind"})
        await self.checkpoints.settled()
        checkpoint, workspace = choose(self.job_id, self.phase_id, self.checkpoints.checkpoints, point)
        require_workspace(self.job_id, self.phase_id, checkpoint, workspace, point)
        if self._rewind is not None or self.result is not None:  # another rewind won meanwhile
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION", "cannot rewind: the phase is "
                              "rewinding or ending already", {"status": self.status.name, "operation": "rewind"})
        done: asyncio.Future = asyncio.get_running_loop().create_future()
        self._rewind = _Rewind(point, checkpoint, workspace, read_stored, done)
        # SIGTERM: the CLI writes its transcript out before it exits (docs/claude-cli-protocol.md §3.7);
        # the session is cut from that file once the process is gone (_rewound).
        self.supervisor.request_stop(EndCause.INTERRUPTED, f"rewound to checkpoint {checkpoint.number}")
        sequence = await asyncio.wait_for(asyncio.shield(done), 60.0)
        return checkpoint, sequence

    async def _rewound(self, plan: AttemptPlan) -> AttemptPlan:
        """The CLI is gone after a rewind was asked for: the workspace goes back, the history is marked,
        and the next attempt resumes the session cut at the checkpoint (it uses up no attempt). If the
        session cannot be cut there after all, the phase resumes where it was and the caller is told."""
        assert self._rewind is not None and self.checkpoints is not None
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
                log.exception("a rewind failed", extra={"fields": self._log_fields()})
            if not done.done():
                done.set_exception(error)
            return self._resumed_where_it_was(plan, f"the rewind to checkpoint {checkpoint.number} failed: "
                                                    f"{error.message}")
        self.attempts[-1] = dc_replace(self.attempts[-1], status=PhaseStatus.INTERRUPTED,
                                       reason=f"rewound to checkpoint {checkpoint.number}",
                                       end_kind=AttemptEndKind.REWOUND, retryable=True,
                                       cost=await self._stopped_attempt_cost() or self.attempts[-1].cost)
        snapshots = self.checkpoints.snapshots
        try:
            if start.workspace.kept and snapshots.work_dir is not None:
                await asyncio.to_thread(restore, start.workspace, snapshots.work_dir)
            await asyncio.to_thread(restore_transcript, start.transcript, self._session_file(start.session_file))
        except Exception as exc:
            log.exception("restoring a checkpoint failed", extra={"fields": self._log_fields()})
            if not done.done():
                done.set_exception(RunnerError(ErrorKind.INTERNAL, "INTERNAL", "restoring the checkpoint failed; the "
                                               "server log has the details", {"operation": "rewind"}))
            return self._resumed_where_it_was(plan, f"restoring checkpoint {checkpoint.number} failed ({exc})")
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
        nxt = self._requeued(AttemptPlan(plan.number + 1, spec, start.first_line, checkpoint.session_id),
                             f"rewound to checkpoint {checkpoint.number}")
        if not done.done():
            done.set_result(event.sequence if event is not None else last)
        return nxt

    async def _stopped_attempt_cost(self):
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

    def _resumed_where_it_was(self, plan: AttemptPlan, why: str) -> AttemptPlan:
        """After a rewind that could not be made: the next attempt resumes the session as it was."""
        session = self.stream.session_id or ""
        spec = dc_replace(self.spec, resume_session_id=session, fork_session=False, session_id="",
                          resume_session_at="") if session else self.spec
        line = prompt_line(self.retries.policy.continuation_prompt) if session else self.plan.prompt_line
        self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None], resumed=bool(session))
        return self._requeued(AttemptPlan(plan.number + 1, spec, line, session), why)

    def _requeued(self, plan: AttemptPlan, why: str) -> AttemptPlan:
        self.set_status(PhaseStatus.QUEUED, why, attempts_pb=self.encoder.encode_attempts(self.attempts))
        self._watch = AttemptWatch()
        if self.retries.admission is not None:
            self._ticket = self.retries.admission.submit(
                (self.job_id, self.phase_id), self.retries.project, self.retries.credential,
                attempt=plan.number, retry=True)
        return plan

    def _session_file(self, name: str):
        """Where this phase's CLI finds a session file ``name`` (in its sandbox's home, or its config)."""
        if self.sandbox is not None:
            return self.sandbox.home.config / "projects" / project_dir_name(str(self.plan.cwd)) / f"{name}.jsonl"
        return transcript_path(self.plan.env, self.plan.cwd, name)

    def request_stop_with_reason(self, cause: EndCause, reason: str) -> None:
        """Ends the phase now (cancel, drain), also while it waits for admission or a backoff."""
        if self._stop is None:
            self._stop = (cause, reason)
        self._stopped.set()
        self.supervisor.request_stop(cause, reason)

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far; turn-count breakpoints use it."""
        return len(self._message_ids)

    # -- PhaseHost: what the controller may use ------------------------------------------------

    @property
    def ended(self) -> bool:
        return self.result is not None

    @property
    def process_started(self) -> bool:
        return self.supervisor.pid is not None

    @property
    def cost_usd(self) -> float:
        cost = self.stream.cost
        return cost.reported_usd if cost.reported_usd is not None else cost.computed_usd

    async def write_stdin(self, line: bytes) -> bool:
        return await self.supervisor.write_stdin(line)

    def transcript_path(self, session_id: str):
        """Where this run's CLI keeps the session's transcript on this replica's disk (None: unknown)."""
        locate = (self.checkpoints._locate if self.checkpoints is not None else None) or \
            (self.durability._locate if self.durability is not None else None)
        return locate(session_id) if locate is not None and session_id else None

    def _egress_changed(self) -> None:
        if self.result is None and not self.status.is_final:
            self.control.settle_status()
            self.control.changed()

    async def quota_crossed(self) -> str | None:
        guard = self.quota_guard
        if guard is None:
            return None
        project = self.spec.project_id or DEFAULT_PROJECT
        if not await guard.limited(project):
            return None
        self.recorder.write_cost()  # this phase's spend so far counts (the guard waits for it to commit)
        found = await guard.violation(project, after_writes=True)
        if found is None:
            return None
        reason = found.describe(project)
        if self.on_quota_pause is not None and not self.control.pause_requested:  # it pauses now: once told
            self.on_quota_pause(reason, {"quota": found.quota, "limit_usd": f"{found.limit_usd:.4f}",
                                         "spent_usd": f"{found.spent_usd:.4f}"})
        return reason

    async def at_boundary(self) -> None:
        if self.result is None:  # the cost of the message that made the call, before it may be held
            self._publish(self.stream.cost_now())
        if self.checkpoints is not None:
            await self.checkpoints.settled()

    async def close_stdin(self) -> None:
        await self.supervisor.close_stdin()

    def hold_watchdog(self, held: bool) -> None:
        self.supervisor.hold_watchdog(held)

    async def pause_processes(self) -> None:
        await self.supervisor.stop_processes()

    async def resume_processes(self) -> None:
        await self.supervisor.continue_processes()

    def mark_tool_held(self, tool_use_id: str, breakpoint_id: str) -> None:
        self.stream.tools.mark_held(tool_use_id, breakpoint_id)
        if self._moving is not None and not self._tool_running():  # a parked call is a boundary too
            self._at_boundary.set()

    def mark_tool_running(self, tool_use_id: str) -> None:
        self.stream.tools.mark_running(tool_use_id)

    def emit(self, payload: Payload) -> Event | None:
        """Publishes a service event (a control action) into the phase's stream."""
        if self.result is not None or self.stream.finished:
            return None
        event = self.stream.emit(payload)
        self._publish([event])
        return event

    # -- ProcessSink -----------------------------------------------------------------------

    def on_stdout(self, chunk: bytes) -> None:
        if self._ticket_starting:  # the CLI is up: its start slot is free for the next phase
            self._ticket_starting = False
            self.retries.admission.started(self._ticket)  # type: ignore[union-attr,arg-type]
        self._stdout_file.write(chunk)
        self._publish(self.stream.feed(chunk))
        self._charge(len(chunk))
        if self.stream.line_over_cap:  # memory stays at the cap (the framer drops the rest), the phase stops
            self._at_limit(EndCause.LINE_LIMIT, f"the CLI's stdout carried a line longer than the limit of "
                           f"{self.plan.stream_options.max_line_bytes} bytes (max_line_bytes), which the CLI never "
                           "writes; a process of the phase wrote into it; it was stopped")

    def _charge(self, n: int) -> None:
        """Counts bytes the server writes for the phase; stops it past phase_output_max_bytes."""
        if self._output.charge(n):
            self._at_limit(EndCause.OUTPUT_LIMIT, self._output.describe())

    def _at_limit(self, cause: EndCause, reason: str) -> None:
        """The phase went past one of its limits: it ends now, FAILED with the limit as its reason."""
        if self._stop is None:
            log.warning("phase stopped at a limit", extra={"fields": {**self._log_fields(), "limit": cause.value}})
            self.request_stop_with_reason(cause, reason)

    async def room(self) -> None:
        """Returns once the writer's backlog has room for more output (back-pressure on the CLI)."""
        await self.events.room()

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:
        self._stderr_file.write(line + b"\n")
        self._charge(len(line) + 1)
        text = StderrOutput.from_bytes(line)
        self._publish([self.stream.emit(StderrOutput(text.text, text.truncated or truncated))])

    # -- the run ---------------------------------------------------------------------------

    async def run(self) -> PhaseResult | None:
        """Runs the phase's attempts (admission, CLI, classification, backoff) to its one result."""
        start_ns = time.time_ns()
        started = time.monotonic()
        timeout = self.plan.limits.timeout
        policy = self.retries.policy
        plan = first_plan(self.spec, self.plan.prompt_line)
        end: AttemptEnd | None = None
        if self._resumption is None and self.spec.resume_session_id:
            # It resumes a session (a fork, or a caller's resume): what that session's earlier processes
            # spent is carried into its CLI's totals and is not this phase's (domain/attempt_cost.py).
            self.stream.begin_attempt([], resumed=True)
        if self._resumption is not None:
            plan = self._resumption.plan
            self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None],
                                      resumed=bool(plan.spec.resume_session_id))
            if plan.number > 1:  # (a phase moved before it ever ran says so in its status reason)
                self.emit(ControlEvent(ControlEventKind.RETRY_SCHEDULED, message=self._resumption.reason[:4096],
                                       attempt=plan.number - 1, max_attempts=policy.max_attempts,
                                       end_kind=self._resumption.end_kind))
            else:
                self.set_status(PhaseStatus.QUEUED, self._resumption.reason)
        try:
            while True:
                if self._moving is not None:
                    exit_, end = ended_while_queued(EndCause.INTERRUPTED, self._moving, time.time_ns()), None
                    break
                if not await self._admitted(plan):
                    exit_, end = ended_while_queued(*self._stop_or_interrupted(), time.time_ns()), None
                    break
                exit_ = await self._run_attempt(plan, timeout - (time.monotonic() - started))
                end = self._end_attempt(plan, exit_, deadline_s=start_ns / 1e9 + timeout)
                if self.checkpoints is not None:  # the transcript as the attempt left it: forks resume from it
                    await self.checkpoints.copy_transcript(self.stream.session_id or "")
                if self._rewind is not None and self._stop is None and self._moving is None:
                    plan = await self._rewound(plan)  # the next attempt resumes at the checkpoint
                    continue
                if self._moving is not None:  # stopped at a tool boundary to move: this attempt moved
                    self.attempts[-1] = dc_replace(self.attempts[-1], status=PhaseStatus.INTERRUPTED,
                                                   reason=self._moving, end_kind=AttemptEndKind.MOVED,
                                                   retryable=True)
                    break
                if self.durability is not None:
                    self.durability.progress(self.stream.session_id or "", tuple(self.attempts))
                if not end.decision.retry or self._stop is not None:
                    break
                self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None],
                                          resumed=bool(self._watch.init_session_id))
                self.emit(retry_scheduled_event(end.attempt, end.decision, policy))
                # With the ended attempts: a recovered or swept phase still lists them (PhaseRow.attempts_pb).
                self.set_status(PhaseStatus.QUEUED, end.decision.reason, attempts_pb=self.encoder.encode_attempts(self.attempts))
                plan = next_plan(self.spec, self.plan.prompt_line, policy, end.decision, self._watch.init_session_id)
                self._watch = AttemptWatch()
                if self.retries.admission is not None:
                    self._ticket = self.retries.admission.submit(
                        (self.job_id, self.phase_id), self.retries.project, self.retries.credential,
                        attempt=plan.number, not_before=time.monotonic() + end.decision.delay_s, retry=True)
                else:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), end.decision.delay_s)
        except asyncio.CancelledError:
            exit_ = ProcessExit(EndCause.INTERRUPTED, None, None, False, "the server task was cancelled",
                                start_ns, time.time_ns())
            self.result = self._finish(exit_, None, None)
            if self.sandbox is not None:
                self.sandbox.restore()
                self.sandbox.close()
            if self.checkpoints is not None:
                self.checkpoints.abandon()
            raise
        if self.checkpoints is not None:  # the last boundaries' snapshots, before the worktree may go
            await self.checkpoints.close()
        if self._moving is not None and await self._hand_over():
            return None
        if self.sandbox is not None:  # what it changed of its repository's git config and hooks, put back
            await asyncio.to_thread(self.sandbox.restore)
        artifacts = None
        if self.plan.workspace is not None:  # the process group is gone: the tree is final
            artifacts = await self.plan.workspace.collect()
        if self.sandbox is not None:  # keeps the transcripts for resume, removes the private home
            await asyncio.to_thread(self.sandbox.close)
        self.result = self._finish(exit_, end, artifacts)
        return self.result

    async def _admitted(self, plan: AttemptPlan) -> bool:
        """Waits for the attempt's admission (QUEUED meanwhile); False when the phase was stopped."""
        admission, ticket = self.retries.admission, self._ticket
        if self._stop is not None:
            if admission is not None and ticket is not None:
                admission.release(ticket)
            return False
        if admission is None or ticket is None or ticket.state is not TicketState.QUEUED:
            return True
        status = admission.queue.status(ticket.key)
        if status is not None and self.status is not PhaseStatus.QUEUED:
            self.on_queued(admission.queue.queue_state(status))
        wait = asyncio.ensure_future(admission.wait(ticket))
        stop = asyncio.ensure_future(self._stopped.wait())
        try:
            await asyncio.wait((wait, stop), return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not wait.done():
                wait.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await wait
        if wait.cancelled() or wait.exception() is not None:
            if isinstance(wait.exception() if not wait.cancelled() else None, AdmissionClosedError) \
                    and self._stop is None:
                self._stop = (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")
            return False
        if self._stop is not None:  # admitted in the same moment it was stopped
            admission.release(ticket)
            return False
        return True

    def on_queued(self, state: QueueState) -> None:
        """The phase waits for admission, or what it waits for changed: a QUEUED event (and status)."""
        if self.result is not None:
            return
        self.emit(ControlEvent(ControlEventKind.QUEUED, message=state.detail[:4096], queue=state))
        if self.status in (PhaseStatus.PENDING, PhaseStatus.RUNNING):
            self.set_status(PhaseStatus.QUEUED, state.detail)

    def queue_state(self) -> QueueState | None:
        """Where the phase stands in the admission queue now (None: not waiting)."""
        admission, ticket = self.retries.admission, self._ticket
        if admission is None or ticket is None:
            return None
        status = admission.queue.status(ticket.key)
        return None if status is None else admission.queue.queue_state(status)

    async def _run_attempt(self, plan: AttemptPlan, time_left: float) -> ProcessExit:
        """One CLI process: a new supervisor and control channel, the phase's breakpoints and pause."""
        attempt_ns = time.time_ns()
        if self.checkpoints is not None:  # the first one here snapshots the workspace as it starts
            self.checkpoints.begin_attempt(plan.number)
        if plan.number > 1:
            # A hard pause taken during the backoff holds the next attempt until it is resumed.
            while self.control.hard_paused and self._stop is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), 0.1)
            limits = dc_replace(self.plan.limits, timeout=max(1.0, time_left))
            argv = self.plan.argv_for(plan.spec)
            scope = PhaseScope(self.plan.scope.containment, self.plan.scope.run_id, self.plan.scope.limits)
            scope.sandbox_args = self.supervisor.scope.sandbox_args  # the same sandbox and home
            self._open_attempt(argv, dict(self.plan.env), limits, scope)
            self.control.attach(self)  # its breakpoints, a pause asked for and step credits carry over
            self.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
            # A phase taken over starts here at a later attempt: its first one here opens its telemetry.
            (self.telemetry.start_attempt if self._ran_here else self.telemetry.on_start)(attempt_ns)
        else:
            self.telemetry.on_start(attempt_ns)  # telemetry: attempt span; then the CLI joins its trace
            self._take_warm()
        if not self.supervisor.warm:  # a warm process's environment was fixed when it started
            self.supervisor.env.update(self.telemetry.child_env(self.supervisor.env))
        if self.plan.egress is not None and not self.supervisor.warm:  # its capability, kept across attempts
            self.supervisor.env.update(self.plan.egress.child_env())
        self._ran_here = True
        if self.sandbox is not None:  # the workspace exists now: its protected paths, and their snapshot
            await asyncio.to_thread(self.sandbox.arm)
        self._attempt_first_sequence = self.stream.last_sequence + 1
        self.emit(attempt_started_event(plan, self.retries.policy))
        self.control.announce_answered()
        self._ticket_starting = self._ticket is not None
        cli_ns = time.time_ns()  # the attempt's start, and for the first one the phase's
        try:
            # The phase starts with its first CLI, not at its acceptance: a queued phase waited in between.
            columns = {"start_time_ns": cli_ns} if plan.number == 1 else {}
            self.set_status(PhaseStatus.RUNNING, "a prestarted claude process takes the phase (warm start)"
                            if self.supervisor.warm else "the claude process is starting", **columns)
            if self.control.pause_requested:
                self.control.settle_status()
            if self._stop is not None:
                self.supervisor.request_stop(*self._stop)
            elif self._moving is not None:  # asked to move while this attempt was being set up
                self.supervisor.request_stop(EndCause.INTERRUPTED, self._moving)
            async with self.workspace_cap.watching():
                exit_ = await self.supervisor.run()
            # One instant for the attempt's start, the phase's start_time and the result's (the
            # supervisor takes its own a moment later, after the status above).
            return dc_replace(exit_, start_ns=cli_ns)
        except asyncio.CancelledError:
            exit_ = ProcessExit(EndCause.INTERRUPTED, None, None, False, "the server task was cancelled",
                                cli_ns, time.time_ns())
            self._end_attempt(plan, exit_, deadline_s=None)
            raise
        except Exception as exc:
            log.exception("phase supervision failed", extra={"fields": self._log_fields()})
            return ProcessExit(EndCause.SPAWN_FAILED, None, None, False, f"internal error: {exc}", cli_ns,
                               time.time_ns())

    def _take_warm(self) -> None:
        """The first attempt runs on a prestarted CLI when the warm pool has one of its exact signature."""
        pool, cold = self.plan.warm_pool, self.supervisor
        if pool is None:
            return
        if self.spec.resume_session_id:
            return  # its transcript was restored into this run's own home
        # Matched on the inline argv (the cold one carries this run's own secret-file paths) and
        # without the sandbox's per-run variables (each warm process has its own home).
        env = self.sandbox.unapply(cold.env) if self.sandbox is not None else cold.env
        warm = pool.take(SpawnSignature.of(self.plan.argv, cold.cwd, env, self.plan.scope.limits))
        if warm is None:
            return
        if self.sandbox is not None:  # the warm process's home is the phase's from now on
            self.sandbox.home.remove()
        self.sandbox = warm.sandbox
        if self.sandbox is not None:
            self.sandbox.project = self.spec.project_id or "default"
        warm.adopt(sink=self, limits=cold.limits, on_spawn=self._record_pid)
        if self.plan.egress is not None:  # the capability it was started with becomes this phase's
            self.plan.egress.adopt(warm.env)
        warm.set_stdin_lines(cold.stdin_lines)  # initialize (with the hook) and the prompt
        self.supervisor = warm
        log.info("phase starts warm", extra={"fields": {**self._log_fields(), "shim_pid": warm.scope.shim_pid}})

    def _end_attempt(self, plan: AttemptPlan, exit_: ProcessExit, deadline_s: float | None) -> AttemptEnd:
        """The attempt's process is gone: close its control, classify it, record it, free its slot."""
        self._revoke_key()
        self._revoke_key = lambda: None
        self.control.close("the attempt ended")
        self._publish(self.stream.finish())
        last = self.stream.results[-1] if self.stream.results else None
        outcome = decide_outcome(exit_, _last_result(last, self.spec), len(self.stream.results), self._writes_lost)
        self.recorder.write_tools(self.stream.tools.calls)
        end = end_attempt(plan, exit_, outcome, self._watch, retries=self.retries, earlier=self.attempts,
                          cost=self.stream.attempt_cost, session_id=self.stream.session_id or "",
                          first_sequence=self._attempt_first_sequence, last_sequence=self.stream.last_sequence,
                          phase_max_budget_usd=self.spec.max_budget_usd, deadline_s=deadline_s)
        self.attempts.append(dc_replace(end.attempt, replica_id=self.replica_id))
        admission, ticket = self.retries.admission, self._ticket
        if admission is not None and ticket is not None:
            self._ticket_starting = False
            admission.release(ticket)
            if end.verdict.hold_credential:
                wait = end.decision.delay_s if end.decision.retry else self.retries.policy.initial_backoff_s
                if end.verdict.retry_not_before_s is not None:
                    wait = max(wait, end.verdict.retry_not_before_s - time.time())
                admission.hold(self.retries.credential, time.monotonic() + wait, end.verdict.reason)
        return end

    def _stop_or_interrupted(self) -> tuple[EndCause, str]:
        return self._stop or (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")

    def _open_attempt(self, argv: Sequence[str], env: dict[str, str], limits: ProcessLimits, scope: PhaseScope) -> None:
        """An attempt's supervisor (its CLI not started yet)."""
        self._argv_record = redact_argv(argv)  # the inline form: names, never the values
        self.supervisor = ProcessSupervisor(
            self._exec_argv(argv), cwd=self.plan.cwd, env=env, sink=self, limits=limits, keep_stdin_open=True,
            on_spawn=self._record_pid, scope=scope, spawn_off_loop=self.plan.spawn_off_loop,
        )

    def _exec_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with the secret-bearing JSON values moved into the run's private files."""
        return self.plan.secret_files.externalize(argv) if self.plan.secret_files else list(argv)

    def _finish(self, exit_: ProcessExit, end: AttemptEnd | None, artifacts: PhaseArtifacts | None) -> PhaseResult:
        self._revoke_key()
        if self.plan.egress is not None:  # nothing of the phase reaches the API or the proxy any more
            self.plan.egress.revoke()
        if self.plan.secret_files is not None:  # the process is gone; nothing reads them any more
            self.plan.secret_files.remove()
        self.control.close("the phase ended")
        self.egress_holds.release("the phase ended")
        self._publish(self.stream.finish())
        outcome = final_outcome(end, exit_, self._writes_lost, ended_attempts=len(self.attempts),
                                waiting=self.status is PhaseStatus.QUEUED)
        self._stdout_file.close()
        self._stderr_file.close()
        self.recorder.write_tools(self.stream.tools.calls)
        self.recorder.write_cost(force=True)
        status, reason = outcome.status, outcome.reason
        self.set_status(status, reason, end_time_ns=exit_.end_ns)
        result = build_result(
            job_id=self.job_id, phase_id=self.phase_id, outcome=outcome,
            last=self.stream.results[-1] if end is not None and self.stream.results else None, exit_=exit_,
            stream=self.stream, attempts=self.attempts, accepted_ns=self.accepted_ns, auth_source=self.auth_source,
            where=PhaseDiagnostics(
                argv=self._argv_record, claude_path=self.plan.claude_path, recording_path=str(self.plan.recording_dir),
                containment=self.supervisor.scope.report(),
                gateway=self.plan.egress.report() if self.plan.egress is not None else None,
                sandbox=self.sandbox.report if self.sandbox is not None else None),
            artifacts=self.plan.workspace.with_retention(artifacts, status) if artifacts else None,
        )
        self.telemetry.on_end(result)  # telemetry
        encoded = self.encoder.encode_result(result)
        # The result marks the phase final for watchers on other replicas (postgres_notify's follow
        # loop): it is committed after every event (the writer keeps a run's writes in order).
        self.store.update_phase(
            self.job_id, self.phase_id, time.time_ns(),
            result_pb=encoded, tool_stats_pb=self.encoder.encode_tool_stats(list(result.tool_stats)),
        )
        self.events.close(encoded)
        log.info("phase ended", extra={"fields": {**self._log_fields(), "status": status.name, "reason": reason,
                                                  "attempts": len(self.attempts)}})
        return result

    def _record_pid(self, pid: int) -> None:
        # The phase shim's pid: lets a restarted server find and end what it leaves (process/containment.py).
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), pid=pid, pid_start_ticks=start_ticks(pid))
        if self.plan.key_broker is not None:
            # Before the event loop runs again, so before the CLI's first key request can be answered.
            self._revoke_key = self.plan.key_broker.admit(pid, self.job_id, self.phase_id)

    # -- helpers ---------------------------------------------------------------------------

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        """Records a status transition (store and event stream)."""
        previous, self.status = self.status, status
        self.store.update_phase(self.job_id, self.phase_id, time.time_ns(), status=status,
                                status_reason=reason, **columns)
        self._publish([self.stream.emit(PhaseStatusChanged(previous, status, reason))])

    def _publish(self, events: list[Event]) -> None:
        """Fans a batch out to the run's observers (a batch emitted meanwhile waits its turn)."""
        self._fanout.publish(events)

    def _persist_and_offer(self, events: list[Event]) -> None:
        encoder, job, phase = self.encoder, self.job_id, self.phase_id
        rows = [EventRow(e.sequence, e.receive_time_ns, encoder.event_kind(e), encoder.encode_event(job, phase, e))
                for e in events]
        self.events.publish(rows, self.notifier.outbox(events) if self.notifier is not None else ())
        self._charge(sum(len(row.body) for row in rows))

    def _note_stream_facts(self, events: list[Event]) -> None:
        """Message counts, how the CLI was billed, lost session writes."""
        for e in events:
            p = e.payload
            if isinstance(p, AssistantText | Thinking | ToolCallStarted) and p.message_id:
                self._message_ids.add(p.message_id)
            elif isinstance(p, UserMessage | ToolCallFinished):
                self.user_messages += 1
            if self._moving is not None and not self._at_boundary.is_set() and not self._tool_running():
                self._at_boundary.set()
            if p.__class__ is TurnResult and self._reconcile is not None:
                self._reconcile_moved_attempt()
            if (p.__class__ is TurnResult or p.__class__ is ToolCallFinished) and self.durability is not None:
                # A tool or turn boundary: mirror the transcript, so that after a crash the adopter
                # resumes after the last finished tool call, not from the prompt (one phase's prompt is
                # one turn: its only turn boundary is its end).
                self.durability.progress(self.stream.session_id or "", tuple(self.attempts))
            if isinstance(p, SessionInit):
                # How the CLI was billed; the parser already reads `apiKeySource` into SessionInit.
                self.auth_source = p.api_key_source or self.auth_source
            elif isinstance(p, SessionWritesLost):
                self._writes_lost = p

    def _watch_attempt(self, events: list[Event]) -> None:
        """Collects the facts that classify how the running attempt ends (phases.attempts)."""
        watch = self._watch
        for e in events:
            watch.observe_event(e)

    def model_switched(self, model: str) -> None:
        """A SetPhaseModel took effect: the phase row shows the new model ("" = the session's default, unnamed)."""
        self.recorder.model_switched(model)

    # -- queries (the read model's view of a running phase) ---------------------------------

    def snapshot(self) -> RunSnapshot:
        """The phase as it is now: status, live cost and tool figures, holds, breakpoints, counts."""
        control, stream = self.control, self.stream
        tools = stream.tools
        held = tuple(
            HeldCall(h.tool_use_id, h.tool_name, h.input_json, h.breakpoint_id, h.reason, h.since_ns,
                     tools.get(h.tool_use_id))
            for h in list(control.holds.values())
        )
        return RunSnapshot(
            status=self.status, last_sequence=self.events.last_sequence, cost=stream.cost,
            tool_stats=tuple(tools.stats()), current_tool=tools.current,
            paused=control.pause_requested or control.hard_paused, hard_paused=control.hard_paused,
            held_calls=held, breakpoints=tuple(control.breakpoints.list()),
            assistant_message_count=self.assistant_turns, user_message_count=self.user_messages,
            turn_count=stream.result_count, containment=self.supervisor.scope.report(),
            sandbox=self.sandbox.report if self.sandbox is not None else None,
            attempts=tuple(self.attempts), queue=self.queue_state(), auth_source=self.auth_source,
            gateway=self.plan.egress.report() if self.plan.egress is not None else None,
        )

    def tool_call(self, tool_use_id: str) -> ToolCall | None:
        """The tracker's record of one call of this phase, if it still retains it."""
        return self.stream.tools.get(tool_use_id)

    async def context_usage(self) -> ContextUsage | None:
        """The CLI's context-window usage, or None when it cannot answer now (paused, ending, silent)."""
        answer = await self.control.context_usage()
        return None if answer is None else context_usage(answer)

    def _log_fields(self) -> dict[str, str]:
        return {"job_id": self.job_id, "phase_id": self.phase_id}


def _no_follow(path: str, flags: int) -> int:
    """An ``open`` opener that refuses a symlink at the path (``O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_NOFOLLOW)


def _last_result(result: TurnResult | None, spec: PhaseSpec) -> LastResult | None:
    if result is None:
        return None
    return LastResult(
        subtype=result.subtype, is_error=result.is_error, api_error_status=result.api_error_status,
        terminal_reason=result.terminal_reason, errors=tuple(result.errors), result_text=result.result_text,
        structured_output_expected=bool(spec.json_schema), has_structured_output=bool(result.structured_output),
    )
