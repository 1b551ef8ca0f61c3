"""Taking over phases another replica released (a drain) or lost (a crash), to continue them here.

Every replica with room claims such phases (``PhaseHandover.claim``: a new fence, this replica the
owner) when woken by a release and every third of a lease, and continues each as a new attempt: its
request is planned again here (``plan_launch``), its mirrored transcript is put where this replica's
CLI looks for it, and the attempt loop starts at the next attempt with ``--resume``, the path a
retry takes; its stream goes on after the history written there. A phase that cannot go on (its
retry policy allows no further attempt after a crash, its request cannot be planned here) is given
up: the sweep ends it INTERRUPTED with the reason. Design: docs/scale-out.md "Hand-over".
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from typing import Protocol, TypeVar

import msgspec
import msgspec.structs

from helix_runner.config import ServerConfig
from helix_runner.domain.attempt_cost import budget_for_next_attempt, spent_usd
from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.checkpoints import Checkpoint
from helix_runner.domain.events import AttemptEndKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.errors import RunnerError
from helix_runner.phases.admission import AsyncAdmission
from helix_runner.phases.attempts import DEFAULT_CREDENTIAL, AttemptPlan, Retries
from helix_runner.phases.control import ControlState, control_state, saved_control
from helix_runner.phases.event_log import PhaseEventLog
from helix_runner.phases.handover import (
    HandoverCodec,
    Movability,
    SavedRequest,
    SavedWorkspace,
    decisions_of,
    decode_control,
    restore_transcript,
    transcript_path,
)
from helix_runner.phases.launch import Launcher, LaunchPlan, plan_launch
from helix_runner.phases.run import PhaseRun, Resumption
from helix_runner.process.claude_command import prompt_line
from helix_runner.store.cluster import Cluster, HandoverClaim, PhaseHandover
from helix_runner.store.protocol import Store

log = logging.getLogger(__name__)
T = TypeVar("T")


def moved_reason(from_replica: str) -> str:
    return f"moved from replica {from_replica} (draining)"


def lost_reason(from_replica: str) -> str:
    return f"resumed after replica {from_replica} was lost"


class AdoptionHost(Protocol):
    """What the adopter needs of the replica it continues phases on: its room, the parts a request is
    planned with, the phase records, and the one assembly of a run (``PhaseService`` is it; the
    service hands itself over, so this port keeps the imports one way and names every member used)."""

    replica_id: str
    draining: bool
    config: ServerConfig
    launcher: Launcher
    admission: AsyncAdmission
    cluster: Cluster
    store: Store
    handover_codec: HandoverCodec | None

    async def off_loop(self, call: Callable[..., T], *args: object) -> T: ...

    def waiting_for_room_here(self) -> list[PhaseRun]:
        """Live phases queued here only for this replica's own limit."""

    def assemble(self, plan: LaunchPlan, spec: PhaseSpec, retries: Retries, request: SavedRequest,
                 where: Movability, *, breakpoints: list[Breakpoint] | None = None, last_sequence: int = 0,
                 resumption: Resumption | None = None, control_state: ControlState | None = None,
                 existing_checkpoints: list[Checkpoint] | None = None) -> tuple[PhaseRun, PhaseEventLog]: ...

    def launch_adopted(self, run: PhaseRun, events: PhaseEventLog) -> object: ...

    def sweep_now(self) -> None: ...


class Adopter:
    """Claims and continues phases released or lost by other replicas; one per server on PostgreSQL."""

    def __init__(self, service: AdoptionHost, handover: PhaseHandover):
        self.service = service
        self.handover = handover
        self._wake = asyncio.Event()
        self._pass = asyncio.Lock()

    def wake(self, *_: object) -> None:
        """A phase was released (NOTIFY) or room freed here: claim now."""
        self._wake.set()

    def room(self) -> int:
        """How many more phases this replica may run now (its own limit; nothing while draining)."""
        if self.service.draining:
            return 0
        queue = self.service.admission.queue
        return max(0, queue.limits.max_running - queue.running - queue.queued)

    async def run(self, interval_s: float) -> None:
        """Claims every ``interval_s`` and whenever woken, until cancelled."""
        while True:
            try:
                await self.claim_pass()
                await self.rebalance()
            except Exception:  # the database's error must not end the loop
                log.exception("claiming released phases failed")
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), interval_s)
            self._wake.clear()

    async def rebalance(self) -> int:
        """The queue follows the room: phases queued here for this replica's own limit move to the other
        live replicas' free slots (released for them to claim); returns how many were asked to move."""
        svc = self.service
        if svc.draining:
            return 0
        waiting = svc.waiting_for_room_here()
        if not waiting:
            return 0
        capacity = await asyncio.to_thread(svc.cluster.replica_capacity)
        free = sum(max(0, c.free) for c in capacity
                   if c.live and c.max_running > 0 and c.replica_id != svc.replica_id)
        moved = 0
        for run in waiting[:free]:
            if run.request_handover(f"moved from replica {svc.replica_id} (queued; another replica has room)", 0.0):
                moved += 1
        return moved

    async def claim_pass(self) -> int:
        """One pass: claims up to this replica's room and adopts each claim; returns how many."""
        async with self._pass:
            room = self.room()
            if room <= 0:
                return 0
            claims = await asyncio.to_thread(self.handover.claim, room)
            for claim in claims:
                try:
                    await self.adopt(claim)
                except Exception:  # it is ours now: it must not stay claimed by nobody running it
                    log.exception("continuing a phase taken over failed", extra={"fields": {
                        "job_id": claim.state.job_id, "phase_id": claim.state.phase_id}})
                    await self._give_up(claim, f"replica {self.service.replica_id} failed to continue it "
                                               "(details are in its log)")
            return len(claims)

    async def _give_up(self, claim: HandoverClaim, why: str) -> None:
        log.warning("a phase taken over cannot continue here", extra={"fields": {
            "job_id": claim.state.job_id, "phase_id": claim.state.phase_id, "why": why}})
        await asyncio.to_thread(self.handover.give_up, claim.state.job_id, claim.state.phase_id, why)
        self.service.sweep_now()

    async def adopt(self, claim: HandoverClaim) -> None:
        """Continues one claimed phase here (or gives it up, saying why)."""
        svc, state = self.service, claim.state
        job_id, phase_id = state.job_id, state.phase_id
        try:
            request = svc.handover_codec.decode_request(state.request)
            saved = decode_control(state.control)
            workspace = msgspec.json.decode(state.workspace, type=SavedWorkspace) if state.workspace else None
        except (msgspec.DecodeError, msgspec.ValidationError, RunnerError):
            await self._give_up(claim, "its saved state cannot be read")
            return
        row = await svc.off_loop(svc.store.get_phase, job_id, phase_id)
        if row is None:
            return
        spec, policy = request.spec, request.retry
        attempts = list(request.attempts)
        ran = row.start_time_ns is not None  # a process ran (or was starting) when its replica stopped
        if claim.drained:  # released: by a draining replica, or from a full queue to this one's room
            reason, end_kind = claim.reason or moved_reason(claim.from_replica), AttemptEndKind.MOVED
        else:
            reason, end_kind = lost_reason(claim.from_replica), AttemptEndKind.CRASHED
            if ran and claim.status not in (PhaseStatus.QUEUED.name,):  # its attempt died with the replica
                attempts.append(Attempt(
                    number=len(attempts) + 1, status=PhaseStatus.INTERRUPTED, reason=reason,
                    end_kind=AttemptEndKind.CRASHED, retryable=True, session_id=state.session_id,
                    start_time_ns=row.start_time_ns if not attempts else None, end_time_ns=time.time_ns(),
                    last_sequence=row.last_sequence, replica_id=claim.from_replica))
        moves = sum(1 for a in attempts if a.end_kind is AttemptEndKind.MOVED)
        # A move is not a failure: it does not use up the retry policy's attempts.
        policy = replace(policy, max_attempts=policy.max_attempts + moves)
        if len(attempts) >= policy.max_attempts:
            await self._give_up(claim, f"its retry policy allows no further attempt (max_attempts "
                                       f"{request.retry.max_attempts}, {len(attempts) - moves} used)")
            return
        number = len(attempts) + 1
        session = state.session_id if not spec.no_session_persistence else ""
        transcript = b""
        if session:
            try:
                transcript = await asyncio.to_thread(self.handover.transcript, job_id, phase_id, session)
            except Exception:  # a gap: resume is not safe; the prompt runs again
                log.warning("a mirrored transcript is incomplete", exc_info=True,
                            extra={"fields": {"job_id": job_id, "phase_id": phase_id}})
        if not transcript:
            session = ""
        budget = budget_for_next_attempt(spec.max_budget_usd, spent_usd([a.cost for a in attempts if a.cost]))
        if session:
            first = replace(spec, resume_session_id=session, session_id="", fork_session=False,
                            max_budget_usd=budget.max_budget_usd)
            line = prompt_line(policy.continuation_prompt)
        else:
            first = replace(spec, max_budget_usd=budget.max_budget_usd)
            line = prompt_line(spec.prompt)
        launcher = svc.launcher
        project = row.project_id
        try:
            if session and launcher.sandbox is not None and launcher.sandbox.on:
                # The sandbox restores a resumed session from this replica's store of the project's sessions.
                target = launcher.sandbox.sessions.transcript_file(project, session)
                await asyncio.to_thread(restore_transcript, transcript, target)
            worktree = workspace.base_commit if workspace is not None and workspace.mode == "GIT_WORKTREE" else ""
            plan = await plan_launch(first, svc.config, launcher, job_project=project,
                                     continue_worktree_from=worktree)
            try:
                await plan.workspace.create()  # a worktree from the phase's branch; the starting snapshot
            except BaseException:
                plan.discard()
                raise
        except RunnerError as exc:
            await self._give_up(claim, f"its request cannot run on replica {svc.replica_id}: {exc.message}")
            return
        if session and (launcher.sandbox is None or not launcher.sandbox.on):
            await asyncio.to_thread(restore_transcript, transcript, transcript_path(plan.env, plan.cwd, session))
        if not claim.drained:  # the lost replica's running and held calls never finish
            await svc.off_loop(svc.store.mark_tool_calls_unfinished, job_id, phase_id)
        decisions = dict(saved.decisions)
        decisions.update(decisions_of(await asyncio.to_thread(self.handover.take_decisions, job_id, phase_id)))
        control = control_state(msgspec.structs.replace(saved, decisions=tuple(decisions.items())))
        run_spec = replace(plan.spec, resume_session_id=spec.resume_session_id, session_id=spec.session_id,
                           fork_session=spec.fork_session, max_budget_usd=spec.max_budget_usd)
        key = (job_id, phase_id)
        ticket = svc.admission.submit(key, plan.project, DEFAULT_CREDENTIAL, attempt=number, retry=True)
        retries = Retries(policy, svc.admission, ticket, plan.project, DEFAULT_CREDENTIAL)
        where = Movability(workspace or SavedWorkspace("IN_PLACE", str(plan.working_dir)), True)
        resumption = Resumption(AttemptPlan(number, first, line, session), tuple(attempts), row.last_sequence,
                                session, reason, end_kind)
        # Checkpoints go on where the previous replica's stopped (their commits are in the shared repository).
        existing = await svc.off_loop(svc.store.list_checkpoints, job_id, phase_id)
        run, events = svc.assemble(
            plan, run_spec, retries, SavedRequest(request.spec, request.retry, request.accepted_ns, tuple(attempts)),
            where, last_sequence=row.last_sequence, resumption=resumption, control_state=control,
            existing_checkpoints=existing)
        durability = run.durability
        assert durability is not None  # a shared database: the adopter exists only there
        durability.mirror.session_id = session
        durability.mirror.copied = len(transcript)  # what the store has already
        durability.control_changed(saved_control(control))
        svc.launch_adopted(run, events)
        log.info("took a phase over", extra={"fields": {"job_id": job_id, "phase_id": phase_id, "reason": reason,
                                                        "attempt": number, "resumed_session": session}})


