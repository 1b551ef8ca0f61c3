"""Runs one phase: the CLI process, its stream of events, and their persistence, to an honest end.

Data flows one way: process bytes -> ``PhaseStream`` (typed, sequenced events, tool tracking,
costs) -> store and subscribers (``PhaseEventLog``). The final result is published only after
stdout reached EOF (or was abandoned after the group was killed), the process exited, and every
event was persisted and offered to subscribers (ADR-0010, docs/decisions/ADR-0010.md).
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable

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
)
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import Attempt, PhaseResult
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.skill_shell import skill_shell_allowed
from helix_runner.domain.tool_tracker import ToolCall
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.attempt_admission import AttemptAdmission
from helix_runner.phases.attempt_loop import AttemptLoop, Resumption
from helix_runner.phases.attempt_process import AttemptProcess
from helix_runner.phases.attempts import Retries
from helix_runner.phases.checkpoints import PhaseCheckpoints
from helix_runner.phases.control import ControlState, PhaseController, saved_control
from helix_runner.phases.egress_holds import EgressHolds
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.fork import ForkPoint, check_point
from helix_runner.phases.handover import PhaseDurability
from helix_runner.phases.launch import LaunchPlan
from helix_runner.phases.ports import RecordEncoder, RunStore
from helix_runner.phases.quota_guard import QuotaGuard
from helix_runner.phases.recorder import PhaseRecorder
from helix_runner.phases.run_handover import RunHandover
from helix_runner.phases.run_record import RunRecord
from helix_runner.phases.run_rewind import RunRewind
from helix_runner.phases.views import HeldCall, RunSnapshot
from helix_runner.phases.webhooks import PhaseNotifier
from helix_runner.phases.workspace_cap import WorkspaceCap
from helix_runner.process.control_protocol import ContextUsage, context_usage
from helix_runner.telemetry import PhaseTelemetry

__all__ = ["PhaseRun", "Resumption"]


class PhaseRun:
    """One phase in flight, assembled from its parts; ``run()`` drives its attempts to its one result.

    It is the façade the service, the commands and the read model use, and the controller's host
    (``phases.ports.PhaseHost``: the controller reaches the process, the stream and the status only
    through the members listed there). Its parts each own one concern and are handed what they act
    on: ``RunRecord`` (status, events, output), ``AttemptProcess`` (each attempt's CLI, sandbox and
    key), ``AttemptAdmission`` (its queue ticket), ``AttemptLoop`` (the attempts to the result),
    ``RunHandover`` (moving to another replica) and ``RunRewind`` (rewind in place). What it is
    launched with was decided before it (``phases/launch.py``).
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
        # Webhooks: the deliveries each batch of events causes, written with it (phases/webhooks.py).
        self.notifier = notifier
        # When the phase was accepted (its row's create_time): the queue wait ends at its first CLI start.
        self.accepted_ns = time.time_ns() if accepted_ns is None else accepted_ns
        # Retry policy and admission (phases.attempts); the attempts so far, oldest first.
        self.retries = retries or Retries()
        self.attempts: list[Attempt] = []
        # The current attempt's admission ticket (phases/admission.py).
        self.admission = AttemptAdmission(self.retries, (spec.job_id, spec.phase_id), on_queued=self.on_queued,
                                          status=lambda: self.status)
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
                                max_line_bytes=plan.stream_options.max_line_bytes,
                                at_limit=lambda cause, reason: self.loop.at_limit(cause, reason),
                                on_output=self.admission.cli_is_up, ended=lambda: self.ended)
        # The phase row's session, model and cost, and its tool-call rows, as the events come.
        self.recorder = PhaseRecorder(store, encoder, spec.job_id, spec.phase_id, spec.project_id or DEFAULT_PROJECT,
                                      self.stream)
        # What the phase writes to disk itself, against its workspace cap (phases/workspace_cap.py).
        # The cap is the phase's file-size limit too (ResourceLimits.file_bytes, RLIMIT_FSIZE in the shim).
        self.workspace_cap = WorkspaceCap(plan.workspace_roots, plan.scope.limits.file_bytes or 0,
                                          lambda reason: self.loop.at_limit(EndCause.WORKSPACE_LIMIT, reason))
        # Each attempt's CLI process, its sandbox and its key (a warm start brings its own sandbox).
        self.process = AttemptProcess(spec, plan, self.record, self.record.record_pid)
        # Job control: one controller for all the phase's attempts (attached to each attempt's process).
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
            workspace=plan.workspace, stop_cli=self.process.stop, let_go=lambda: self.loop.let_go(),
            release_here=lambda: self.loop.release_here(), reconcile=_moved_attempt(resumption))
        # Rewind in place to a checkpoint (docs/fork-and-rewind.md), when checkpoints are kept.
        self.rewinds = None if checkpoints is None else RunRewind(
            spec.job_id, spec.phase_id, checkpoints, control=self.control, stream=self.stream, attempts=self.attempts,
            retries=self.retries, spec=spec, first_line=plan.prompt_line, emit=self.emit, stop_cli=self.process.stop,
            requeue=lambda plan, why: self.loop.requeued(plan, why), transcript_path=self.transcript_path,
            session_file=self.process.session_file, ended=lambda: self.ended, status=lambda: self.status)
        # Network breakpoints (phases/egress_holds.py): requests the proxy holds until decided.
        self.egress_holds = EgressHolds(
            project=spec.project_id or DEFAULT_PROJECT, breakpoints=self.control.breakpoints.list,
            # Through the grant when there is one: its events are counted by kind (helix_gateway_events).
            emit=plan.egress.on_event if plan.egress is not None else self.emit, changed=self._egress_changed,
            hold_watchdog=self.hold_watchdog)
        self.control.egress_holds = self.egress_holds
        if plan.egress is not None:  # the gateway's and the proxy's reports: its stream and its metrics
            plan.egress.attach(self.emit, self.telemetry,
                               at_limit=lambda reason: self.loop.at_limit(EndCause.EGRESS_LIMIT, reason),
                               gate=self.egress_holds.gate)
        self.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
        # The attempts, from admission to the one result.
        self.loop = AttemptLoop(
            spec, plan, self.retries, self.attempts, stream=self.stream, record=self.record, recorder=self.recorder,
            control=self.control, host=self, telemetry=self.telemetry, process=self.process,
            admission=self.admission, egress_holds=self.egress_holds, workspace_cap=self.workspace_cap,
            checkpoints=checkpoints,
            handover=self.handover, rewinds=self.rewinds, accepted_ns=self.accepted_ns, replica_id=replica_id,
            resumption=resumption)
        # Every batch of events, in this order: persisted and offered to subscribers first
        # (phases.event_log), the controller last, so what it emits follows the batch it observed.
        self.record.observed_by([
            self.telemetry.on_events,  # telemetry
            self.record.note_facts,
            *([self.handover.on_events] if self.handover is not None else []),
            self.recorder.on_events,
            *([checkpoints.on_events] if checkpoints is not None else []),
            self.loop.watch_attempt,
            self.control.on_events,
        ])

    @property
    def result(self) -> PhaseResult | None:
        """The phase's one result, once it is final (None before, and after it moved)."""
        return self.loop.result

    async def run(self) -> PhaseResult | None:
        """Runs the phase's attempts (admission, CLI, classification, backoff) to its one result."""
        return await self.loop.run()

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
        if self.handover is None or self.result is not None or self.loop.stop is not None \
                or not self.handover.request(reason, wait_s):
            return False
        self.loop.wake()  # a phase waiting for admission or a backoff stops waiting
        return True

    @property
    def moved(self) -> bool:
        """The phase was handed over: it ends on another replica, not here."""
        return self.handover is not None and self.handover.moved

    def waits_for_room_here(self) -> bool:
        """Queued for this replica's own running limit, before any process of it started here."""
        state = self.queue_state()
        return (self.status is PhaseStatus.QUEUED and not self.loop.ran_here and self.loop.moving is None
                and state is not None and state.reason is QueueReason.SERVER_LIMIT)

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
                or self.rewinds.pending or self.loop.moving is not None or self.loop.stop is not None:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "ILLEGAL_TRANSITION",
                              "cannot rewind: the phase must be paused or hold a tool call (then no tool runs)",
                              {"status": self.status.name, "operation": "rewind"})
        return await self.rewinds.request(point, read_stored)

    def request_stop_with_reason(self, cause: EndCause, reason: str) -> None:
        """Ends the phase now (cancel, drain), also while it waits for admission or a backoff."""
        self.loop.request_stop(cause, reason)

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far; turn-count breakpoints use it."""
        return self.record.assistant_turns

    @property
    def status(self) -> PhaseStatus:
        return self.record.status

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

    def set_status(self, status: PhaseStatus, reason: str, **columns: object) -> None:
        """Records a status transition (store and event stream)."""
        self.record.set_status(status, reason, **columns)

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
            assistant_message_count=self.assistant_turns, user_message_count=self.record.user_messages,
            turn_count=stream.result_count, containment=self.supervisor.scope.report(),
            sandbox=self.sandbox.report if self.sandbox is not None else None,
            attempts=tuple(self.attempts), queue=self.queue_state(), auth_source=self.record.auth_source,
            gateway=self.plan.egress.report() if self.plan.egress is not None else None,
        )

    def tool_call(self, tool_use_id: str) -> ToolCall | None:
        """The tracker's record of one call of this phase, if it still retains it."""
        return self.stream.tools.get(tool_use_id)

    async def context_usage(self) -> ContextUsage | None:
        """The CLI's context-window usage, or None when it cannot answer now (paused, ending, silent)."""
        answer = await self.control.context_usage()
        return None if answer is None else context_usage(answer)


def _moved_attempt(resumption: Resumption | None) -> int | None:
    """The moved attempt (its index) whose figures a phase resumed after a move corrects, if any."""
    if resumption is not None and resumption.attempts and resumption.end_kind is AttemptEndKind.MOVED \
            and resumption.plan.spec.resume_session_id and resumption.attempts[-1].end_kind is AttemptEndKind.MOVED:
        return len(resumption.attempts) - 1
    return None
