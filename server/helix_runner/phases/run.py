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
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.checkpoints import Checkpoint
from helix_runner.domain.events import (
    AttemptEndKind,
    ControlEvent,
    ControlEventKind,
    Event,
    Payload,
    QueueReason,
    QueueState,
    TurnResult,
)
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, decide_outcome
from helix_runner.domain.phase_result import Attempt, PhaseDiagnostics, PhaseResult
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.skill_shell import skill_shell_allowed
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.attempt_admission import AttemptAdmission
from helix_runner.phases.attempt_process import AttemptProcess
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
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.fork import ForkPoint, check_point
from helix_runner.phases.handover import (
    PhaseDurability,
)
from helix_runner.phases.launch import LaunchPlan
from helix_runner.phases.ports import RecordEncoder, RunStore
from helix_runner.phases.quota_guard import QuotaGuard
from helix_runner.phases.recorder import PhaseRecorder
from helix_runner.phases.result import build_result, final_outcome
from helix_runner.phases.run_handover import RunHandover
from helix_runner.phases.run_record import RunRecord
from helix_runner.phases.run_rewind import RunRewind
from helix_runner.phases.views import HeldCall, RunSnapshot
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.process.control_protocol import ContextUsage, context_usage
from helix_runner.telemetry import PhaseTelemetry

log = logging.getLogger(__name__)


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
        self._ran_here = False
        # Webhooks: the deliveries each batch of events causes, written with it (phases/webhooks.py).
        self.notifier = notifier
        # When the phase was accepted (its row's create_time): the queue wait ends at its first CLI start.
        self.accepted_ns = time.time_ns() if accepted_ns is None else accepted_ns
        # Retry policy and admission (phases.attempts); the attempts so far, oldest first.
        self.retries = retries or Retries()
        self.attempts: list[Attempt] = []
        self._watch = AttemptWatch()
        # The current attempt's admission ticket (phases/admission.py).
        self.admission = AttemptAdmission(self.retries, (spec.job_id, spec.phase_id), on_queued=self.on_queued,
                                          status=lambda: self.status)
        self._stop: tuple[EndCause, str] | None = None
        self._stopped = asyncio.Event()
        # telemetry: metrics and spans of this phase, fed from its events (helix_runner.telemetry).
        self.telemetry = telemetry or PhaseTelemetry(None, None, job_id=spec.job_id, phase_id=spec.phase_id,
                                                     project_id=spec.project_id)
        self.plan = plan
        self.store = store
        self.encoder = encoder
        self.events = events
        self.stream = PhaseStream(plan.stream_options, price_table=prices)
        # The status, the events in order, the CLI's output and what the server writes for the phase.
        self.record = RunRecord(spec.job_id, spec.phase_id, store, encoder, events, self.stream, notifier=notifier,
                                recording_dir=plan.recording_dir, output_max_bytes=plan.limits.output_max_bytes,
                                max_line_bytes=plan.stream_options.max_line_bytes, at_limit=self._at_limit,
                                on_output=self.admission.cli_is_up, ended=lambda: self.result is not None)
        # The phase row's session, model and cost, and its tool-call rows, as the events come.
        self.recorder = PhaseRecorder(store, encoder, spec.job_id, spec.phase_id, spec.project_id or DEFAULT_PROJECT,
                                      self.stream)
        self.result: PhaseResult | None = None
        # Each attempt's CLI process, its sandbox and its key (a warm start brings its own sandbox).
        self.process = AttemptProcess(spec, plan, self.record, self.record.record_pid)
        # Job control: one controller for all the phase's attempts (attached to each in _run_attempt).
        self.control = PhaseController(self, list(breakpoints), gate_every_call=spec.bare,
                                       skill_shell_allowed=skill_shell_allowed(spec.allowed_tools, spec.disallowed_tools,
                                                                               spec.permission_mode),
                                       state=control_state)
        if durability is not None:
            self.control.on_change = lambda: durability.control_changed(saved_control(self.control.state()))
        if resumption is not None:  # continues the history and the attempts written on another replica
            self.attempts[:] = resumption.attempts
            self.stream.continue_from(resumption.last_sequence, resumption.session_id)
        # Hand-over (docs/scale-out.md "Hand-over"), when the phase's state is kept in the shared store.
        self.handover = None if durability is None else RunHandover(
            durability, replica_id=replica_id, control=self.control, stream=self.stream, record=self.record,
            recorder=self.recorder, encoder=encoder, events=events, telemetry=self.telemetry, attempts=self.attempts,
            workspace=plan.workspace, stop_cli=self._stop_cli, let_go=self._let_go, release_here=self._release_here,
            reconcile=_moved_attempt(resumption))
        # Rewind in place to a checkpoint (docs/fork-and-rewind.md), when checkpoints are kept.
        self.rewinds = None if checkpoints is None else RunRewind(
            spec.job_id, spec.phase_id, checkpoints, control=self.control, stream=self.stream, attempts=self.attempts,
            retries=self.retries, spec=spec, first_line=plan.prompt_line, emit=self.emit, stop_cli=self._stop_cli,
            requeue=self._requeued, transcript_path=self.transcript_path, session_file=self.process.session_file,
            ended=lambda: self.result is not None, status=lambda: self.status)
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
        # Every batch of events, in this order: persisted and offered to subscribers first
        # (phases.event_log), the controller last, so what it emits follows the batch it observed.
        self.record.observed_by([
            self.telemetry.on_events,  # telemetry
            self.record.note_facts,
            *([self.handover.on_events] if self.handover is not None else []),
            self.recorder.on_events,
            *([checkpoints.on_events] if checkpoints is not None else []),
            self._watch_attempt,
            self.control.on_events,
        ])
        self._attempt_first_sequence = 1

    @property
    def job_id(self) -> str:
        return self.spec.job_id

    @property
    def phase_id(self) -> str:
        return self.spec.phase_id

    @property
    def supervisor(self):
        """The current attempt's process supervisor."""
        return self.process.supervisor

    @property
    def sandbox(self):
        """The sandbox the phase's processes run in (None: none)."""
        return self.process.sandbox

    def request_handover(self, reason: str, wait_s: float) -> bool:
        """Hands the phase over to another replica (a drain): at its next tool boundary, or after
        ``wait_s`` seconds, the CLI is stopped; the run then saves its state and releases it instead of
        ending. False when it cannot move (no shared state, its workspace on this disk, ended)."""
        if self.handover is None or self.result is not None or self._stop is not None \
                or not self.handover.request(reason, wait_s):
            return False
        self._stopped.set()  # a phase waiting for admission or a backoff stops waiting
        return True

    @property
    def _moving(self) -> str | None:
        """Why the phase moves to another replica (None: it does not)."""
        return self.handover.moving if self.handover is not None else None

    @property
    def moved(self) -> bool:
        """The phase was handed over: it ends on another replica, not here."""
        return self.handover is not None and self.handover.moved

    def waits_for_room_here(self) -> bool:
        """Queued for this replica's own running limit, before any process of it started here."""
        state = self.queue_state()
        return (self.status is PhaseStatus.QUEUED and not self._ran_here and self._moving is None
                and state is not None and state.reason is QueueReason.SERVER_LIMIT)

    def _stop_cli(self, cause: EndCause, reason: str) -> None:
        self.supervisor.request_stop(cause, reason)

    def _let_go(self) -> None:
        """Leaving for another replica: the phase's key is revoked, a queued phase leaves this replica's queue."""
        self.process.revoke_key()
        self.admission.release()

    async def _release_here(self) -> None:
        """Released to another replica: what the phase held here goes (the transcript is in the shared store)."""
        if self.plan.egress is not None:
            self.plan.egress.revoke()
        if self.plan.secret_files is not None:
            self.plan.secret_files.remove()
        self.record.close_files()
        if self.sandbox is not None:  # the private home goes
            await asyncio.to_thread(self.sandbox.restore)
            await asyncio.to_thread(self.sandbox.close)

    # -- rewind in place (docs/fork-and-rewind.md) -------------------------------------------

    async def request_rewind(self, point: ForkPoint, read_stored: Callable[[str], Awaitable[bytes]]) -> tuple[Checkpoint, int]:
        """Takes the phase back to a checkpoint in place: stops its CLI, restores its workspace, resumes
        its session cut there. Only while it is paused or holds a call (its CLI is at a tool boundary:
        no tool runs). Returns the checkpoint and the REWOUND event's sequence once the next attempt is
        set up. ``read_stored(session_id)``: the session's transcript as the store keeps it."""
        check_point(point)
        if self.rewinds is None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "CHECKPOINT_NOT_FOUND",
                              "checkpoints are off on this server (checkpoints = false)",
                              {"job_id": self.job_id, "phase_id": self.phase_id})
        if self.result is not None or self.status not in (PhaseStatus.PAUSED, PhaseStatus.AWAITING_APPROVAL) \
                or self.rewinds.pending or self._moving is not None or self._stop is not None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION",
                              "cannot rewind: the phase must be paused or hold a tool call (then no tool runs)",
                              {"status": self.status.name, "operation": "rewind"})
        return await self.rewinds.request(point, read_stored)

    def _requeued(self, plan: AttemptPlan, why: str) -> AttemptPlan:
        self.set_status(PhaseStatus.QUEUED, why, attempts_pb=self.encoder.encode_attempts(self.attempts))
        self._watch = AttemptWatch()
        self.admission.requeue(plan.number)
        return plan

    def request_stop_with_reason(self, cause: EndCause, reason: str) -> None:
        """Ends the phase now (cancel, drain), also while it waits for admission or a backoff."""
        if self._stop is None:
            self._stop = (cause, reason)
        self._stopped.set()
        self.supervisor.request_stop(cause, reason)

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far; turn-count breakpoints use it."""
        return self.record.assistant_turns

    @property
    def status(self) -> PhaseStatus:
        return self.record.status

    @property
    def auth_source(self) -> str:
        """How the CLI was billed (the latest init line's ``apiKeySource``)."""
        return self.record.auth_source

    @property
    def user_messages(self) -> int:
        return self.record.user_messages

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
            self.record.publish(self.stream.cost_now())
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
        if self.handover is not None:  # a parked call is a boundary too
            self.handover.tool_held()

    def mark_tool_running(self, tool_use_id: str) -> None:
        self.stream.tools.mark_running(tool_use_id)

    def emit(self, payload: Payload) -> Event | None:
        """Publishes a service event (a control action) into the phase's stream."""
        return self.record.emit(payload)

    def _at_limit(self, cause: EndCause, reason: str) -> None:
        """The phase went past one of its limits: it ends now, FAILED with the limit as its reason."""
        if self._stop is None:
            log.warning("phase stopped at a limit", extra={"fields": {**self._log_fields(), "limit": cause.value}})
            self.request_stop_with_reason(cause, reason)

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
                if not await self._admitted():
                    exit_, end = ended_while_queued(*self._stop_or_interrupted(), time.time_ns()), None
                    break
                exit_ = await self._run_attempt(plan, timeout - (time.monotonic() - started))
                end = self._end_attempt(plan, exit_, deadline_s=start_ns / 1e9 + timeout)
                if self.checkpoints is not None:  # the transcript as the attempt left it: forks resume from it
                    await self.checkpoints.copy_transcript(self.stream.session_id or "")
                if self.rewinds is not None and self.rewinds.pending and self._stop is None and self._moving is None:
                    plan = await self.rewinds.rewound(plan)  # the next attempt resumes at the checkpoint
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
                if not self.admission.requeue(plan.number, end.decision.delay_s):
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
        if self.handover is not None and self._moving is not None and await self.handover.hand_over():
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

    async def _admitted(self) -> bool:
        """Waits for the attempt's admission (QUEUED meanwhile); False when the phase was stopped."""
        if await self.admission.admitted(lambda: self._stop is not None, self._stopped):
            return True
        if self.admission.closed and self._stop is None:
            self._stop = (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")
        return False

    def on_queued(self, state: QueueState) -> None:
        """The phase waits for admission, or what it waits for changed: a QUEUED event (and status)."""
        if self.result is not None:
            return
        self.emit(ControlEvent(ControlEventKind.QUEUED, message=state.detail[:4096], queue=state))
        if self.status in (PhaseStatus.PENDING, PhaseStatus.RUNNING):
            self.set_status(PhaseStatus.QUEUED, state.detail)

    def queue_state(self) -> QueueState | None:
        """Where the phase stands in the admission queue now (None: not waiting)."""
        return self.admission.queue_state()

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
            self.process.open_next(plan.spec, time_left)
            self.control.attach(self)  # its breakpoints, a pause asked for and step credits carry over
            self.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
            # A phase taken over starts here at a later attempt: its first one here opens its telemetry.
            (self.telemetry.start_attempt if self._ran_here else self.telemetry.on_start)(attempt_ns)
        else:
            self.telemetry.on_start(attempt_ns)  # telemetry: attempt span; then the CLI joins its trace
            self.process.take_warm()
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
        self.admission.attempt_starting()
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

    def _end_attempt(self, plan: AttemptPlan, exit_: ProcessExit, deadline_s: float | None) -> AttemptEnd:
        """The attempt's process is gone: close its control, classify it, record it, free its slot."""
        self.process.revoke_key()
        self.control.close("the attempt ended")
        self.record.publish(self.stream.finish())
        last = self.stream.results[-1] if self.stream.results else None
        outcome = decide_outcome(exit_, _last_result(last, self.spec), len(self.stream.results), self.record.writes_lost)
        self.recorder.write_tools(self.stream.tools.calls)
        end = end_attempt(plan, exit_, outcome, self._watch, retries=self.retries, earlier=self.attempts,
                          cost=self.stream.attempt_cost, session_id=self.stream.session_id or "",
                          first_sequence=self._attempt_first_sequence, last_sequence=self.stream.last_sequence,
                          phase_max_budget_usd=self.spec.max_budget_usd, deadline_s=deadline_s)
        self.attempts.append(dc_replace(end.attempt, replica_id=self.replica_id))
        self.admission.attempt_ended(end)
        return end

    def _stop_or_interrupted(self) -> tuple[EndCause, str]:
        return self._stop or (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")

    def _finish(self, exit_: ProcessExit, end: AttemptEnd | None, artifacts: PhaseArtifacts | None) -> PhaseResult:
        self.process.revoke_key()
        if self.plan.egress is not None:  # nothing of the phase reaches the API or the proxy any more
            self.plan.egress.revoke()
        if self.plan.secret_files is not None:  # the process is gone; nothing reads them any more
            self.plan.secret_files.remove()
        self.control.close("the phase ended")
        self.egress_holds.release("the phase ended")
        self.record.publish(self.stream.finish())
        outcome = final_outcome(end, exit_, self.record.writes_lost, ended_attempts=len(self.attempts),
                                waiting=self.status is PhaseStatus.QUEUED)
        self.record.close_files()
        self.recorder.write_tools(self.stream.tools.calls)
        self.recorder.write_cost(force=True)
        status, reason = outcome.status, outcome.reason
        self.set_status(status, reason, end_time_ns=exit_.end_ns)
        result = build_result(
            job_id=self.job_id, phase_id=self.phase_id, outcome=outcome,
            last=self.stream.results[-1] if end is not None and self.stream.results else None, exit_=exit_,
            stream=self.stream, attempts=self.attempts, accepted_ns=self.accepted_ns, auth_source=self.auth_source,
            where=PhaseDiagnostics(
                argv=self.process.argv_record, claude_path=self.plan.claude_path, recording_path=str(self.plan.recording_dir),
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

    # -- helpers ---------------------------------------------------------------------------

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        """Records a status transition (store and event stream)."""
        self.record.set_status(status, reason, **columns)

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


def _last_result(result: TurnResult | None, spec: PhaseSpec) -> LastResult | None:
    if result is None:
        return None
    return LastResult(
        subtype=result.subtype, is_error=result.is_error, api_error_status=result.api_error_status,
        terminal_reason=result.terminal_reason, errors=tuple(result.errors), result_text=result.result_text,
        structured_output_expected=bool(spec.json_schema), has_structured_output=bool(result.structured_output),
    )


def _moved_attempt(resumption: Resumption | None) -> int | None:
    """The moved attempt (its index) whose figures a phase resumed after a move corrects, if any."""
    if resumption is not None and resumption.attempts and resumption.end_kind is AttemptEndKind.MOVED \
            and resumption.plan.spec.resume_session_id and resumption.attempts[-1].end_kind is AttemptEndKind.MOVED:
        return len(resumption.attempts) - 1
    return None
