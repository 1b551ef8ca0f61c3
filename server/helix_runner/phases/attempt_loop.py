"""The attempt loop of a running phase: admission, its CLI, how the attempt ended, retry or result.

``AttemptLoop`` drives one phase's attempts to its one result (ADR-0010, docs/decisions/ADR-0010.md):
it waits for each attempt's admission, starts its CLI, classifies how it ended
(``phases/attempts.py``), retries after a backoff, lets a rewind or a move take over between
attempts, and at the end closes what the phase held and publishes the result only after the
stream is final. It is given the run's parts (its record, recorder, controller, process,
admission ticket, checkpoints, hand-over and rewind), each for what it does; the controller's
host (``phases.ports.PhaseHost``) is passed to attach the controller to each new process.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from dataclasses import dataclass
from dataclasses import replace as dc_replace

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.events import AttemptEndKind, ControlEvent, ControlEventKind, Event, TurnResult
from helix_runner.domain.phase_outcome import EndCause, LastResult, ProcessExit, decide_outcome
from helix_runner.domain.phase_result import Attempt, PhaseDiagnostics, PhaseResult
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStream
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
from helix_runner.phases.control import PhaseController
from helix_runner.phases.egress_holds import EgressHolds
from helix_runner.phases.launch import LaunchPlan
from helix_runner.phases.ports import PhaseHost
from helix_runner.phases.recorder import PhaseRecorder
from helix_runner.phases.result import build_result, final_outcome
from helix_runner.phases.run_handover import RunHandover
from helix_runner.phases.run_record import RunRecord
from helix_runner.phases.run_rewind import RunRewind
from helix_runner.phases.workspace_cap import WorkspaceCap
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


class AttemptLoop:
    """Runs one phase's attempts to its result; ``result`` is set once it is final (None before).

    ``stop``: why the phase ends now (``request_stop``: a cancel, a drain, a limit crossed), which
    also ends a wait for admission or a backoff. A phase moving to another replica (``handover``)
    or rewinding (``rewinds``) is carried out between attempts.
    """

    def __init__(self, spec: PhaseSpec, plan: LaunchPlan, retries: Retries, attempts: list[Attempt], *,
                 stream: PhaseStream, record: RunRecord, recorder: PhaseRecorder, control: PhaseController,
                 host: PhaseHost, telemetry: PhaseTelemetry, process: AttemptProcess, admission: AttemptAdmission,
                 egress_holds: EgressHolds, workspace_cap: WorkspaceCap, checkpoints: PhaseCheckpoints | None,
                 handover: RunHandover | None,
                 rewinds: RunRewind | None, accepted_ns: int, replica_id: str, resumption: Resumption | None):
        self.spec, self.plan, self.retries, self.attempts = spec, plan, retries, attempts
        self.job_id, self.phase_id = spec.job_id, spec.phase_id
        self.stream, self.record, self.recorder, self.control, self.host = stream, record, recorder, control, host
        self.telemetry, self.process, self.admission, self.egress_holds = telemetry, process, admission, egress_holds
        self.workspace_cap = workspace_cap
        self.checkpoints, self.handover, self.rewinds = checkpoints, handover, rewinds
        self.accepted_ns, self.replica_id, self._resumption = accepted_ns, replica_id, resumption
        self.result: PhaseResult | None = None
        self.stop: tuple[EndCause, str] | None = None
        self._stopped = asyncio.Event()
        self._watch = AttemptWatch()
        self.ran_here = False
        self._attempt_first_sequence = 1

    @property
    def moving(self) -> str | None:
        """Why the phase moves to another replica (None: it does not)."""
        return self.handover.moving if self.handover is not None else None

    def _log_fields(self) -> dict[str, str]:
        return {"job_id": self.job_id, "phase_id": self.phase_id}

    def request_stop(self, cause: EndCause, reason: str) -> None:
        """Ends the phase now (cancel, drain), also while it waits for admission or a backoff."""
        if self.stop is None:
            self.stop = (cause, reason)
        self._stopped.set()
        self.process.supervisor.request_stop(cause, reason)

    def wake(self) -> None:
        """A phase waiting for admission or a backoff stops waiting (it moves)."""
        self._stopped.set()

    def requeued(self, plan: AttemptPlan, why: str) -> AttemptPlan:
        """The next attempt (after a rewind) waits for admission: QUEUED, with the ended attempts."""
        self.record.set_status(PhaseStatus.QUEUED, why, attempts_pb=self.record.encoder.encode_attempts(self.attempts))
        self._watch = AttemptWatch()
        self.admission.requeue(plan.number)
        return plan

    def let_go(self) -> None:
        """Leaving for another replica: the phase's key is revoked, a queued phase leaves this replica's queue."""
        self.process.revoke_key()
        self.admission.release()

    async def release_here(self) -> None:
        """Released to another replica: what the phase held here goes (the transcript is in the shared store)."""
        if self.plan.egress is not None:
            self.plan.egress.revoke()
        if self.plan.secret_files is not None:
            self.plan.secret_files.remove()
        self.record.close_files()
        if self.process.sandbox is not None:  # the private home goes
            await asyncio.to_thread(self.process.sandbox.restore)
            await asyncio.to_thread(self.process.sandbox.close)

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
                self.record.emit(ControlEvent(ControlEventKind.RETRY_SCHEDULED, message=self._resumption.reason[:4096],
                                       attempt=plan.number - 1, max_attempts=policy.max_attempts,
                                       end_kind=self._resumption.end_kind))
            else:
                self.record.set_status(PhaseStatus.QUEUED, self._resumption.reason)
        try:
            while True:
                if self.moving is not None:
                    exit_, end = ended_while_queued(EndCause.INTERRUPTED, self.moving, time.time_ns()), None
                    break
                if not await self._admitted():
                    exit_, end = ended_while_queued(*self._stop_or_interrupted(), time.time_ns()), None
                    break
                exit_ = await self._run_attempt(plan, timeout - (time.monotonic() - started))
                end = self._end_attempt(plan, exit_, deadline_s=start_ns / 1e9 + timeout)
                if self.checkpoints is not None:  # the transcript as the attempt left it: forks resume from it
                    await self.checkpoints.copy_transcript(self.stream.session_id or "")
                if self.rewinds is not None and self.rewinds.pending and self.stop is None and self.moving is None:
                    plan = await self.rewinds.rewound(plan)  # the next attempt resumes at the checkpoint
                    continue
                if self.moving is not None:  # stopped at a tool boundary to move: this attempt moved
                    self.attempts[-1] = dc_replace(self.attempts[-1], status=PhaseStatus.INTERRUPTED,
                                                   reason=self.moving, end_kind=AttemptEndKind.MOVED,
                                                   retryable=True)
                    break
                if self.handover is not None:  # the attempt ended here: its transcript and attempts, mirrored
                    self.handover.progress()
                if not end.decision.retry or self.stop is not None:
                    break
                self.stream.begin_attempt([a.cost for a in self.attempts if a.cost is not None],
                                          resumed=bool(self._watch.init_session_id))
                self.record.emit(retry_scheduled_event(end.attempt, end.decision, policy))
                # With the ended attempts: a recovered or swept phase still lists them (PhaseRow.attempts_pb).
                self.record.set_status(PhaseStatus.QUEUED, end.decision.reason, attempts_pb=self.record.encoder.encode_attempts(self.attempts))
                plan = next_plan(self.spec, self.plan.prompt_line, policy, end.decision, self._watch.init_session_id)
                self._watch = AttemptWatch()
                if not self.admission.requeue(plan.number, end.decision.delay_s):
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(self._stopped.wait(), end.decision.delay_s)
        except asyncio.CancelledError:
            exit_ = ProcessExit(EndCause.INTERRUPTED, None, None, False, "the server task was cancelled",
                                start_ns, time.time_ns())
            self.result = self._finish(exit_, None, None)
            if self.process.sandbox is not None:
                self.process.sandbox.restore()
                self.process.sandbox.close()
            if self.checkpoints is not None:
                self.checkpoints.abandon()
            raise
        if self.checkpoints is not None:  # the last boundaries' snapshots, before the worktree may go
            await self.checkpoints.close()
        if self.handover is not None and self.moving is not None and await self.handover.hand_over():
            return None
        if self.process.sandbox is not None:  # what it changed of its repository's git config and hooks, put back
            await asyncio.to_thread(self.process.sandbox.restore)
        artifacts = None
        if self.plan.workspace is not None:  # the process group is gone: the tree is final
            artifacts = await self.plan.workspace.collect()
        if self.process.sandbox is not None:  # keeps the transcripts for resume, removes the private home
            await asyncio.to_thread(self.process.sandbox.close)
        self.result = self._finish(exit_, end, artifacts)
        return self.result

    async def _admitted(self) -> bool:
        """Waits for the attempt's admission (QUEUED meanwhile); False when the phase was stopped."""
        if await self.admission.admitted(lambda: self.stop is not None, self._stopped):
            return True
        if self.admission.closed and self.stop is None:
            self.stop = (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")
        return False

    async def _run_attempt(self, plan: AttemptPlan, time_left: float) -> ProcessExit:
        """One CLI process: a new supervisor and control channel, the phase's breakpoints and pause."""
        attempt_ns = time.time_ns()
        if self.checkpoints is not None:  # the first one here snapshots the workspace as it starts
            self.checkpoints.begin_attempt(plan.number)
        if plan.number > 1:
            # A hard pause taken during the backoff holds the next attempt until it is resumed.
            while self.control.hard_paused and self.stop is None:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(self._stopped.wait(), 0.1)
            self.process.open_next(plan.spec, time_left)
            self.control.attach(self.host)  # its breakpoints, a pause asked for and step credits carry over
            self.process.supervisor.set_stdin_lines(self.control.startup_lines(plan.prompt_line))
            # A phase taken over starts here at a later attempt: its first one here opens its telemetry.
            (self.telemetry.start_attempt if self.ran_here else self.telemetry.on_start)(attempt_ns)
        else:
            self.telemetry.on_start(attempt_ns)  # telemetry: attempt span; then the CLI joins its trace
            self.process.take_warm()
        if not self.process.supervisor.warm:  # a warm process's environment was fixed when it started
            self.process.supervisor.env.update(self.telemetry.child_env(self.process.supervisor.env))
        if self.plan.egress is not None and not self.process.supervisor.warm:  # its capability, kept across attempts
            self.process.supervisor.env.update(self.plan.egress.child_env())
        self.ran_here = True
        if self.process.sandbox is not None:  # the workspace exists now: its protected paths, and their snapshot
            await asyncio.to_thread(self.process.sandbox.arm)
        self._attempt_first_sequence = self.stream.last_sequence + 1
        self.record.emit(attempt_started_event(plan, self.retries.policy))
        self.control.announce_answered()
        self.admission.attempt_starting()
        cli_ns = time.time_ns()  # the attempt's start, and for the first one the phase's
        try:
            # The phase starts with its first CLI, not at its acceptance: a queued phase waited in between.
            columns = {"start_time_ns": cli_ns} if plan.number == 1 else {}
            self.record.set_status(PhaseStatus.RUNNING, "a prestarted claude process takes the phase (warm start)"
                            if self.process.supervisor.warm else "the claude process is starting", **columns)
            if self.control.pause_requested:
                self.control.settle_status()
            if self.stop is not None:
                self.process.supervisor.request_stop(*self.stop)
            elif self.moving is not None:  # asked to move while this attempt was being set up
                self.process.supervisor.request_stop(EndCause.INTERRUPTED, self.moving)
            async with self.workspace_cap.watching():
                exit_ = await self.process.supervisor.run()
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
        return self.stop or (EndCause.INTERRUPTED, "the server shut down while the phase waited to start")

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
                                waiting=self.record.status is PhaseStatus.QUEUED)
        self.record.close_files()
        self.recorder.write_tools(self.stream.tools.calls)
        self.recorder.write_cost(force=True)
        status, reason = outcome.status, outcome.reason
        self.record.set_status(status, reason, end_time_ns=exit_.end_ns)
        result = build_result(
            job_id=self.job_id, phase_id=self.phase_id, outcome=outcome,
            last=self.stream.results[-1] if end is not None and self.stream.results else None, exit_=exit_,
            stream=self.stream, attempts=self.attempts, accepted_ns=self.accepted_ns, auth_source=self.record.auth_source,
            where=PhaseDiagnostics(
                argv=self.process.argv_record, claude_path=self.plan.claude_path, recording_path=str(self.plan.recording_dir),
                containment=self.process.supervisor.scope.report(),
                gateway=self.plan.egress.report() if self.plan.egress is not None else None,
                sandbox=self.process.sandbox.report if self.process.sandbox is not None else None),
            artifacts=self.plan.workspace.with_retention(artifacts, status) if artifacts else None,
        )
        self.telemetry.on_end(result)  # telemetry
        self.record.write_result(result)
        log.info("phase ended", extra={"fields": {**self._log_fields(), "status": status.name, "reason": reason,
                                                  "attempts": len(self.attempts)}})
        return result

    def at_limit(self, cause: EndCause, reason: str) -> None:
        """The phase went past one of its limits: it ends now, FAILED with the limit as its reason."""
        if self.stop is None:
            log.warning("phase stopped at a limit", extra={"fields": {**self._log_fields(), "limit": cause.value}})
            self.request_stop(cause, reason)

    def watch_attempt(self, events: list[Event]) -> None:
        """Collects the facts that classify how the running attempt ends (phases.attempts)."""
        watch = self._watch
        for e in events:
            watch.observe_event(e)


def _last_result(result: TurnResult | None, spec: PhaseSpec) -> LastResult | None:
    if result is None:
        return None
    return LastResult(
        subtype=result.subtype, is_error=result.is_error, api_error_status=result.api_error_status,
        terminal_reason=result.terminal_reason, errors=tuple(result.errors), result_text=result.result_text,
        structured_output_expected=bool(spec.json_schema), has_structured_output=bool(result.structured_output),
    )
