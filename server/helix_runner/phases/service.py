"""Starts phases and lets them be watched: the application service behind the API.

It has a request planned (``phases/launch.py``: everything a request can get wrong is refused
there), admits the phase, records the job and phase, and runs it as a task that belongs to the
server (not to any RPC, so a watcher can come and go); a watcher gets the phase's events live or
from the store. On drain it stops running phases and records them INTERRUPTED. Job control of a
running phase is ``phases/commands.py``; phases a previous server left active are
``phases/recovery.py``'s.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
import contextvars
import functools
import importlib.metadata
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field
from dataclasses import replace as dc_replace
from typing import TypeVar

from helix_runner.config import ServerConfig, retry_defaults
from helix_runner.domain.access import acting
from helix_runner.domain.breakpoints import Breakpoint, BreakpointSet
from helix_runner.domain.checkpoints import Checkpoint, ForkOrigin
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import PhaseResult
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.domain.tool_decision import Decision
from helix_runner.egress.service import Egress
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import AdmissionLimits, AsyncAdmission, QueueStatus, Ticket
from helix_runner.phases.adoption import Adopter
from helix_runner.phases.attempts import DEFAULT_CREDENTIAL, Retries
from helix_runner.phases.checkpoints import PhaseCheckpoints, checkpoints_for
from helix_runner.phases.cluster_admission import admission_for, cluster_limits
from helix_runner.phases.control import ControlState, saved_control
from helix_runner.phases.egress_vault import EgressVault
from helix_runner.phases.event_log import Delivery, EventWriter, Moved, PhaseEventLog, replay
from helix_runner.phases.fork import ForkLaunch, ForkPoint, ForkStart, check_point, choose, resolve
from helix_runner.phases.handover import (
    HANDOVER_RETRY_AFTER_S,
    HandoverCodec,
    Movability,
    PhaseDurability,
    SavedRequest,
    encode_decision,
    read_transcript,
    restore_transcript,
    transcript_locator,
    transcript_path,
    workspace_movability,
)
from helix_runner.phases.launch import Launcher, LaunchPlan, plan_launch, project_mismatch, start_warm_pool
from helix_runner.phases.placement import would_queue_here
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.quota_guard import QuotaGuard
from helix_runner.phases.replicas import Replicas
from helix_runner.phases.run import PhaseRun, Resumption
from helix_runner.phases.views import ServerStatus
from helix_runner.phases.webhooks import PhaseNotifier, Webhooks
from helix_runner.process.checkpoint_git import fork_commit, has_objects
from helix_runner.process.containment import Containment
from helix_runner.process.host_git import HOST_GIT, work_tree
from helix_runner.process.key_broker import KeyBroker
from helix_runner.process.sandbox.phase_sandbox import Sandbox, off_report
from helix_runner.process.warm_pool import WarmPool
from helix_runner.store.cluster import SINGLE_NODE, Cluster
from helix_runner.store.protocol import (
    ACTIVE_STATUSES,
    AlreadyExistsError,
    EventRow,
    PhaseRow,
    SaveRequest,
    Store,
    StoreError,
)
from helix_runner.telemetry import Telemetry

log = logging.getLogger(__name__)

# How long a fork of a running phase waits for its CLI to write a checkpoint's entry to its transcript.
FRESH_TRANSCRIPT_WAIT_S = 3.0

# (job_id, phase_id, after_sequence) -> the phase's committed events after the cursor, then live,
# ending once the phase is final (store/postgres_notify.follow_phase_events on a shared database).
Follower = Callable[[str, str, int], AsyncIterator[list[EventRow]]]
T = TypeVar("T")


@dataclass
class LivePhase:
    """A phase running in this server process."""

    run: PhaseRun
    events: PhaseEventLog
    task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class PhaseService:
    """Starts phases and lets them be watched; one per server."""

    def __init__(self, config: ServerConfig, store: Store, encoder: RecordEncoder, containment: Containment, *,
                 server_env: Mapping[str, str] | None = None, env_overrides: Mapping[str, str] | None = None,
                 env_withhold: tuple[str, ...] = (), key_broker: KeyBroker | None = None,
                 telemetry: Telemetry | None = None, cluster: Cluster = SINGLE_NODE,
                 egress: Egress | None = None, sandbox: Sandbox | None = None,
                 webhooks: Webhooks | None = None, handover_codec: HandoverCodec | None = None):
        self.config = config
        # Webhook subscriptions: each run maps its events to outbox rows (phases/webhooks.py).
        self.webhooks = webhooks
        self.containment = containment
        self.telemetry = telemetry or Telemetry()
        self.store = store
        self.encoder = encoder
        # What every phase is launched with (phases/launch.py): containment, sandbox, gateway, environment.
        self.launcher = Launcher(containment, dict(os.environ if server_env is None else server_env),
                                 dict(env_overrides or {}), env_withhold, key_broker, egress, sandbox)
        # The credential vault (phases/egress_vault.py): with the proxy, which adds its secrets.
        self.egress_vault = EgressVault(store, egress.vault) if egress is not None and egress.vault is not None \
            and egress.proxy is not None else None
        if self.egress_vault is not None:
            self.launcher.vault_secrets = self.egress_vault.sealed_for
        # Per-project spend quotas (phases/quota_guard.py), from the shared store.
        self.quotas = QuotaGuard(store, self.off_loop, lambda: self.writer.committed())
        self.live: dict[tuple[str, str], LivePhase] = {}
        self.draining = False
        self._drained = asyncio.Event()
        self.writer = EventWriter(store)
        self.writer.on_fenced = self.on_fenced
        self._store_calls: concurrent.futures.ThreadPoolExecutor | None = None  # off_loop's thread
        # One price table for all phases: lookups are cached per model.
        self.prices = PriceTable(config.price_overrides)
        # Admission (docs/retries-and-admission.md §5): phases beyond the limits wait QUEUED.
        self.retry_defaults: RetryPolicy = retry_defaults(config)
        # On a shared database with cluster limits, the cluster's ledger decides too (cluster_admission.py).
        self.admission: AsyncAdmission = admission_for(cluster, admission_limits(config), cluster_limits(config),
                                                       on_change=self._on_queue_change,
                                                       gate=loop_lag_gate(config, self.telemetry))
        # Set on a shared database: watches a phase another replica runs (docs/scale-out.md).
        self.follower: Follower | None = None
        # Hand-over (docs/scale-out.md "Hand-over"): on PostgreSQL a phase's state is kept in the shared
        # store, a drain hands running phases over, and this replica adopts those others release or lose.
        self.cluster = cluster
        self.replica_id = cluster.replica_id
        self.handover = cluster.handover()
        if self.handover is not None and handover_codec is None:
            raise ValueError("a shared database hands phases over: PhaseService needs a handover_codec")
        # How a phase's request is stored for the replica that takes it over (api.handover_codec).
        self.handover_codec = handover_codec
        self.adopter = Adopter(self, self.handover) if self.handover is not None else None
        self.sweep_now: Callable[[], None] = lambda: None  # the takeover's sweep, once more (server.py)
        self._forgetting: set[asyncio.Future] = set()  # ended phases' hand-over state being deleted
        # Where a phase runs among the replicas on the database (routing asks: api/routing.py).
        self.replicas = Replicas(cluster, store, runs_here=lambda job, phase: self.get_live(job, phase) is not None,
                                 full_here=lambda: not self.draining and would_queue_here(self.admission.queue))

    @property
    def warm_pool(self) -> WarmPool | None:
        """The prestarted CLI processes, if declared (``warm_pool``; ``start_warm_pool``)."""
        return self.launcher.warm_pool

    # -- starting --------------------------------------------------------------------------

    async def start(self, spec: PhaseSpec, breakpoints: list[Breakpoint] | None = None,
                    retry: RetryPolicy | None = None, *, request_pb: bytes = b"",
                    fork: ForkLaunch | None = None) -> LivePhase:
        """Validates, records and starts a phase; it runs until it ends, whoever watches.

        Everything a request can get wrong is checked before the phase row is written: a rejected
        request leaves nothing behind, so its phase id stays free for a corrected retry.
        """
        with self.telemetry.admission():  # telemetry: counts refusals by reason
            try:
                return await self._start(spec, breakpoints, retry or self.retry_defaults, request_pb=request_pb,
                                         fork=fork)
            except RunnerError as exc:
                if exc.reason == "QUEUE_FULL" and self.webhooks is not None:
                    self.webhooks.queue_full(spec.job_id, spec.phase_id, spec.project_id or DEFAULT_PROJECT, exc)
                if exc.reason == "QUOTA_EXCEEDED" and self.webhooks is not None:
                    self.webhooks.quota_exceeded(spec.job_id, spec.phase_id, exc.metadata.get("project_id", ""),
                                                 exc.message, {"action": "refused", **exc.metadata})
                raise

    async def _start(self, spec: PhaseSpec, breakpoints: list[Breakpoint] | None, retry: RetryPolicy, *,
                     request_pb: bytes = b"", fork: ForkLaunch | None = None) -> LivePhase:
        breakpoints = list(breakpoints or [])
        BreakpointSet.of(breakpoints)  # count and unique ids; each breakpoint is validated already
        if self.draining:
            raise RunnerError(ErrorKind.UNAVAILABLE, "DRAINING", "the server is shutting down and accepts no new phases")
        job = await self.off_loop(self.store.get_job, spec.job_id)
        # A project at its spend quota starts nothing (the job's project when the job exists).
        await self.quotas.admit(job.project_id if job is not None else spec.project_id or DEFAULT_PROJECT)
        if fork is not None and self.launcher.sandbox is not None and self.launcher.sandbox.on:
            # The sandbox restores a resumed session from this replica's store of the project's sessions.
            await asyncio.to_thread(restore_transcript, fork.start.transcript, self.launcher.sandbox.sessions
                                    .transcript_file(spec.project_id or DEFAULT_PROJECT, fork.start.session_file))
        plan = await plan_launch(spec, self.config, self.launcher, job_project=job.project_id if job else None)
        if fork is not None:
            plan = fork.planned(plan)
            if self.launcher.sandbox is None or not self.launcher.sandbox.on:
                await asyncio.to_thread(restore_transcript, fork.start.transcript,
                                        transcript_path(plan.env, plan.cwd, fork.start.session_file))
        try:
            # Admission: QUEUE_FULL refuses here, before anything is written or streamed; else the
            # phase either starts at once or waits QUEUED inside its run (the stream is open meanwhile).
            key = (spec.job_id, spec.phase_id)
            if key in self.live or self.admission.queue.get(key) is not None:
                raise RunnerError(ErrorKind.ALREADY_EXISTS, "PHASE_ALREADY_EXISTS",
                                  f"phase {spec.phase_id} already exists in job {spec.job_id}",
                                  {"job_id": spec.job_id, "phase_id": spec.phase_id})
            ticket = self.admission.submit(key, plan.project, DEFAULT_CREDENTIAL)
            try:
                return await self._record_and_launch(plan, breakpoints,
                                                     Retries(retry, self.admission, ticket, plan.project,
                                                             DEFAULT_CREDENTIAL), request_pb=request_pb, fork=fork)
            except BaseException:
                self.admission.release(ticket)
                raise
        except BaseException:
            plan.discard()
            raise

    async def _record_and_launch(self, plan: LaunchPlan, breakpoints: list[Breakpoint], retries: Retries, *,
                                 request_pb: bytes = b"", fork: ForkLaunch | None = None) -> LivePhase:
        # Persisted from here on.
        spec, project = plan.spec, plan.project
        now = time.time_ns()
        job, _ = await self.off_loop(self.store.get_or_create_job, spec.job_id, project, now)
        if job.project_id != project:  # another request created the job just now
            raise project_mismatch(spec.job_id, job.project_id)
        row = PhaseRow(
            job_id=spec.job_id, phase_id=spec.phase_id, ordinal=0, project_id=project,
            status=PhaseStatus.PENDING, create_time_ns=now, working_dir=str(plan.working_dir), prompt=spec.prompt,
            model=spec.model, on_disconnect=spec.on_disconnect, recording_dir=str(plan.recording_dir),
            fork_pb=self.encoder.encode_fork_origin(fork.origin) if fork is not None else None,
        )
        try:
            await self.off_loop(self.store.insert_phase, row)
        except asyncio.CancelledError:
            if row.ordinal:  # inserted (the ordinal is assigned) before the call went away: not left PENDING
                self._fail_unstarted(spec.job_id, spec.phase_id, now)
            raise
        except AlreadyExistsError:
            raise RunnerError(ErrorKind.ALREADY_EXISTS, "PHASE_ALREADY_EXISTS",
                              f"phase {spec.phase_id} already exists in job {spec.job_id}",
                              {"job_id": spec.job_id, "phase_id": spec.phase_id}) from None
        if request_pb:  # a fork of this phase starts from its request (docs/fork-and-rewind.md)
            self.writer.write(SaveRequest(spec.job_id, spec.phase_id, request_pb))
        try:
            await plan.workspace.create()  # after the phase row: its ids are ours, so is the branch
            run, events = self.assemble(
                plan, spec, retries, SavedRequest(spec, retries.policy, now),
                workspace_movability(plan, self.config.workspace_roots), breakpoints=breakpoints,
                control_state=fork.control(breakpoints) if fork is not None else None)
            if fork is not None:  # the calls its first line (or its cut copy) decides: announced at its start
                run.control.answered_at_start = list(fork.start.answered)
            if run.durability is not None:
                await run.durability.start(saved_control(run.control.state()))
        except BaseException:
            # E.g. the recordings directory cannot be created: the phase must not stay PENDING.
            self._fail_unstarted(spec.job_id, spec.phase_id, now)
            raise
        return self._launch(run, events, plan)

    async def fork(self, spec: PhaseSpec, source_job: str, source_phase: str, point: ForkPoint,
                   breakpoints: list[Breakpoint] | None = None, retry: RetryPolicy | None = None, *,
                   request_pb: bytes = b"") -> tuple[LivePhase, Checkpoint]:
        """Starts ``spec`` (a new phase of the job: the source phase's request with the fork's changes)
        from a checkpoint of the source phase, running or ended (docs/fork-and-rewind.md): its CLI resumes
        the source's session cut there under a new session id, in a new worktree at the checkpoint's
        files. The source phase is not touched."""
        check_point(point)
        retry = retry or self.retry_defaults
        row = await self.off_loop(self.require_phase, source_job, source_phase)
        live = self.get_live(source_job, source_phase)
        run_checkpoints = live.run.checkpoints if live is not None else None
        if run_checkpoints is not None:  # running here: its own list is the freshest
            await run_checkpoints.settled()
            checkpoints = list(run_checkpoints.checkpoints)
        else:
            checkpoints = await self.off_loop(self.store.list_checkpoints, source_job, source_phase)
        checkpoint, workspace = choose(source_job, source_phase, checkpoints, point)
        start = await self._fork_start(live, row, checkpoint, workspace, point)
        if start.workspace.kept:
            if not await asyncio.to_thread(has_objects, start.workspace):
                raise RunnerError(ErrorKind.FAILED_PRECONDITION, "WORKSPACE_NOT_KEPT",
                                  f"checkpoint {checkpoint.number}'s files are not reachable from replica "
                                  f"{self.replica_id or 'here'}: repository {start.workspace.repository} (on no shared "
                                  "root here, or its objects were pruned)",
                                  {"job_id": source_job, "phase_id": source_phase, "reason": "objects not reachable"})
            commit = await asyncio.to_thread(fork_commit, start.workspace, source_job, source_phase, checkpoint.number)
            spec = dc_replace(spec, workspace="GIT_WORKTREE", base_ref=commit)
        else:  # only the conversation (conversation_only): in the phase's working directory as it is
            spec = dc_replace(spec, workspace="IN_PLACE", worktree_retention="", base_ref="",
                              working_dir=row.working_dir or spec.working_dir)
        spec = dc_replace(spec, resume_session_id=start.session_file, fork_session=True,
                          resume_session_at=start.resume_at, session_id="")
        spec.validate()
        origin = ForkOrigin(source_job, source_phase, checkpoint.number, checkpoint.tool_use_id, checkpoint.turn,
                            point.changes())
        live_fork = await self.start(spec, breakpoints, retry, request_pb=request_pb,
                                     fork=ForkLaunch(start, origin))
        return live_fork, checkpoint

    async def fork_source(self, job_id: str, phase_id: str) -> tuple[PhaseRow, bytes | None]:
        """The phase a fork starts from, and its accepted request as stored (None: from before forks)."""
        row = await self.off_loop(self.require_phase, job_id, phase_id)
        return row, await self.off_loop(self.store.get_phase_request, job_id, phase_id)

    async def stored_transcript(self, job_id: str, phase_id: str, session_id: str) -> bytes:
        """A phase's session transcript as the store keeps it (TRANSCRIPT_UNAVAILABLE when not whole)."""
        try:
            return await self.off_loop(self.store.read_transcript, job_id, phase_id, session_id)
        except StoreError as exc:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "TRANSCRIPT_UNAVAILABLE",
                              f"phase {phase_id} of job {job_id}: its session {session_id} is not whole in the "
                              f"store ({exc})", {"job_id": job_id, "phase_id": phase_id, "session_id": session_id}
                              ) from None

    async def _fork_start(self, live: LivePhase | None, row: PhaseRow, checkpoint: Checkpoint, workspace,
                          point: ForkPoint) -> ForkStart:
        """The fork's start from the phase's transcript. A running CLI writes its transcript a moment
        after its stdout: a checkpoint just made may not be in the file yet, which is read again then
        (up to ``FRESH_TRANSCRIPT_WAIT_S``)."""
        deadline = time.monotonic() + FRESH_TRANSCRIPT_WAIT_S
        while True:
            transcript = await self._transcript_of(live, row, checkpoint.session_id)
            try:
                return resolve(row.job_id, row.phase_id, checkpoint, workspace, transcript, point)
            except RunnerError as exc:
                if exc.reason != "TRANSCRIPT_UNAVAILABLE" or live is None or live.done.is_set() \
                        or time.monotonic() > deadline:
                    raise
            await asyncio.sleep(0.1)

    async def _transcript_of(self, live: LivePhase | None, row: PhaseRow, session_id: str) -> bytes:
        """A phase's session transcript: its CLI's own file when it runs here (the freshest), else the
        copy kept in the store (any replica)."""
        if live is not None:
            path = live.run.transcript_path(session_id)
            if path is not None:
                try:  # no link the phase put in the way is followed
                    return await asyncio.to_thread(read_transcript, path)
                except OSError:
                    pass
        return await self.stored_transcript(row.job_id, row.phase_id, session_id)

    def assemble(self, plan: LaunchPlan, spec: PhaseSpec, retries: Retries, request: SavedRequest,
                 where: Movability, *, breakpoints: list[Breakpoint] | None = None, last_sequence: int = 0,
                 resumption: Resumption | None = None, control_state: ControlState | None = None,
                 existing_checkpoints: list[Checkpoint] | None = None) -> tuple[PhaseRun, PhaseEventLog]:
        """A phase's run and its event log, built the one way for a phase accepted here and one taken
        over from another replica (phases/adoption.py); ``run_phase`` (or ``launch_adopted``) runs it.

        ``spec`` is what runs (an adopted phase's resumes its session), ``request`` what is kept for a
        hand-over (on a shared database: ``where`` says whether the phase can move); ``last_sequence``
        and ``resumption``: where an adopted phase's stream and attempts go on.
        """
        job_id, phase_id = spec.job_id, spec.phase_id
        events = PhaseEventLog(self.store, job_id, phase_id, last_sequence=last_sequence, writer=self.writer,
                               frame=self.encoder.frame_events)
        observer = self.telemetry.phase(job_id, phase_id, plan.project, spec.model)  # telemetry
        holder: list[PhaseRun] = []

        def sandbox():  # the run's current sandbox (a warm start brings its own)
            return holder[0].sandbox if holder else plan.sandbox

        # The run's row writes are queued behind its events; a write refused by the fence (another
        # replica took the phase over) stops the run (the writer's on_fenced).
        durability = None
        if self.handover is not None:
            durability = PhaseDurability(self.handover, job_id, phase_id, request, where, self.replica_id,
                                         transcript_locator(plan, sandbox), self.handover_codec)
        run = PhaseRun(spec, plan, self.writer, self.encoder, events, list(breakpoints or ()), self.prices,
                       telemetry=observer, retries=retries, accepted_ns=request.accepted_ns,
                       notifier=self._notifier(job_id, phase_id, plan.project), replica_id=self.replica_id,
                       durability=durability, resumption=resumption, control_state=control_state,
                       checkpoints=self.checkpoints_for(plan, sandbox, existing_checkpoints))
        run.quota_guard = self.quotas
        run.egress_holds.timeout_s = self.config.egress_hold_timeout_seconds
        run.egress_holds.configure_project(self._project_allows, self._allow_project)
        if self.webhooks is not None:  # a running phase paused by its project's quota tells the subscribers
            webhooks = self.webhooks
            run.on_quota_pause = lambda reason, details: webhooks.quota_exceeded(
                job_id, phase_id, plan.project, reason, {"action": "paused", **details})
        holder.append(run)
        return run, events

    async def _project_allows(self, project: str, host: str) -> bool:
        """Whether a held request to ``host`` (host:port) was approved for the project before."""
        rows = await self.off_loop(self.store.list_egress_allowances, project)
        return any(row[1] == host for row in rows)

    async def _allow_project(self, project: str, host: str, by: str) -> None:
        await self.off_loop(self.store.add_egress_allowance, project, host, by, time.time_ns())

    def checkpoints_for(self, plan: LaunchPlan, sandbox, existing=None) -> PhaseCheckpoints | None:
        """A planned phase's checkpoints (``checkpoints`` in the config). Alone its transcript is copied
        into the store by them; on PostgreSQL the hand-over's mirror copies it."""
        locate = transcript_locator(plan, sandbox) if self.handover is None else None
        return checkpoints_for(plan, self.writer.write, on=self.config.checkpoints, locate=locate, existing=existing)

    def waiting_for_room_here(self) -> list[PhaseRun]:
        """Live phases queued here only for this replica's own limit (the adopter moves them where room is)."""
        return [lp.run for lp in list(self.live.values()) if not lp.done.is_set() and lp.run.waits_for_room_here()]

    def launch_adopted(self, run: PhaseRun, events: PhaseEventLog) -> LivePhase:
        """Runs a phase taken over from another replica (phases/adoption.py)."""
        # Its recording (and diff) is on this replica's disk from now on: GetPhaseDiff reads it here.
        self.writer.update_phase(run.job_id, run.phase_id, time.time_ns(), recording_dir=str(run.plan.recording_dir))
        live = self._launch(run, events, run.plan)
        if self.draining:  # adopted while this replica began to drain: it moves on at once
            run.request_handover(f"moved from replica {self.replica_id} (draining)", 0.0)
        return live

    def _launch(self, run: PhaseRun, events: PhaseEventLog, plan: LaunchPlan) -> LivePhase:
        spec = run.spec
        live = LivePhase(run, events)
        self.live[(spec.job_id, spec.phase_id)] = live
        # The phase's own task acts for nobody: what it does by itself must not carry the name of the
        # caller that started it (ControlEvent.actor, domain/access.py).
        live.task = asyncio.create_task(self._drive(live), name=f"phase:{spec.job_id}/{spec.phase_id}",
                                        context=_serverside_context())
        log.info("phase started", extra={"fields": {"job_id": spec.job_id, "phase_id": spec.phase_id,
                                                     "working_dir": str(plan.working_dir),
                                                     "containment": plan.scope.describe()}})
        return live

    async def off_loop(self, call: Callable[..., T], *args: object) -> T:
        """A store call, on a worker thread when the store's calls wait on a database server (the
        writer's store says so: ``Committer.off_loop``), else here. It is never cut short: a cancel
        while it runs waits for it to end (so the caller knows what it did), then propagates."""
        if not self.writer.off_loop:
            return call(*args)
        if self._store_calls is None:
            # One thread: a burst of phase starts queues here instead of waking many threads that
            # would all contend with the loop for the GIL (measured: benchmarks/README.md).
            self._store_calls = concurrent.futures.ThreadPoolExecutor(1, thread_name_prefix="helix-store-call")
        future = asyncio.get_running_loop().run_in_executor(self._store_calls, call, *args)
        try:
            return await asyncio.shield(future)
        except asyncio.CancelledError:
            await asyncio.wait([future])
            raise

    def _notifier(self, job_id: str, phase_id: str, project: str, cost_usd: float = 0.0) -> PhaseNotifier | None:
        """The phase's webhook notifier (None: webhooks are off)."""
        if self.webhooks is None:
            return None
        return self.webhooks.notifier(job_id, phase_id, project, functools.partial(self.job_done, job_id, phase_id),
                                      cost_usd)

    def notifier_of(self, row: PhaseRow) -> PhaseNotifier | None:
        """The webhook notifier of a phase that ended without its run (recovery, a takeover's sweep)."""
        return self._notifier(row.job_id, row.phase_id, row.project_id,
                              row.reported_usd if row.reported_usd is not None else row.computed_usd)

    def job_done(self, job_id: str, phase_id: str) -> bool:
        """Whether every phase of the job but this one is final (its end then finishes the job: job.finished).

        A status this replica handed to the writer and has not committed yet is newer than the store's.
        """
        handed = self.writer.pending_statuses(job_id)
        return all(handed.get(p.phase_id, p.status).is_final
                   for p in self.store.phases_of_jobs([job_id]) if p.phase_id != phase_id)

    def _on_queue_change(self, ticket: Ticket, status: QueueStatus) -> None:
        """What a queued phase waits for changed: its run reports it (QUEUED event and status)."""
        live = self.live.get(ticket.key)
        if live is not None and not live.done.is_set():
            live.run.on_queued(self.admission.queue.queue_state(status))

    def _fail_unstarted(self, job_id: str, phase_id: str, start_ns: int) -> None:
        """Records a phase whose row was written but whose run could not be set up as FAILED."""
        log.exception("setting up a phase failed", extra={"fields": {"job_id": job_id, "phase_id": phase_id}})
        now = time.time_ns()
        reason = "the server could not set up the phase (details are in the server log)"
        result = PhaseResult(job_id=job_id, phase_id=phase_id, status=PhaseStatus.FAILED, reason=reason,
                             start_time_ns=start_ns, end_time_ns=now)
        self.store.update_phase(job_id, phase_id, now, status=PhaseStatus.FAILED, status_reason=reason,
                                end_time_ns=now, result_pb=self.encoder.encode_result(result))

    # -- the server ------------------------------------------------------------------------

    def server_status(self) -> ServerStatus:
        """The sandbox every phase gets, the containment mode and any refusal (GetServerStatus)."""
        sandboxes = self.launcher.sandbox
        sandbox = sandboxes.report() if sandboxes is not None else off_report()
        refused = sandboxes.refusal() if sandboxes is not None else None
        try:
            version = importlib.metadata.version("helix-runner")
        except importlib.metadata.PackageNotFoundError:
            version = ""
        return ServerStatus(sandbox=sandbox, containment_mode=self.containment.mode,
                            refusal=refused.message if refused is not None else "", version=version,
                            offline=self.config.offline_script is not None)

    def start_warm_pool(self) -> None:
        """Starts the opt-in pool of prestarted CLI processes, if declared (``launch.start_warm_pool``)."""
        self.launcher.warm_pool = start_warm_pool(self.config, self.launcher)

    async def _drive(self, live: LivePhase) -> None:
        # The server's own git may write, for this phase's directory, only the git directories it
        # had before the phase ran (a .git file the phase rewrites to name another repository in
        # the roots does not redirect the server's writes; process/host_git.py).
        pinned = [live.run.plan.cwd, work_tree(live.run.plan.cwd)]
        for path in pinned:
            await asyncio.to_thread(HOST_GIT.pin, path)
        try:
            await live.run.run()
            # Stay "live" until the final events are committed: a watcher attaching now must not
            # replay from a store that does not have them yet.
            await live.events.wait_closed()
            if live.run.plan.workspace is not None and live.run.result is not None and not live.run.moved:
                await live.run.plan.workspace.release(live.run.result.status)  # the worktree's retention
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("phase task failed")
        finally:
            for path in pinned:
                HOST_GIT.unpin(path)
            live.done.set()
            # Keep finished phases out of the live table; watchers read them from the store.
            self.live.pop((live.run.job_id, live.run.phase_id), None)
            if self.handover is not None and live.run.result is not None:  # ended here: nothing to move any more
                # After the pop: reads of the ended phase come from the store at once, not after this write.
                # Its own saves first, and none after: one still queued would write the state back.
                self._forgetting.add(asyncio.ensure_future(self._forget(live)))
                self._forgetting = {f for f in self._forgetting if not f.done()}
            if self.adopter is not None:  # room freed here: a released phase may be waiting for it
                self.adopter.wake()

    async def _forget(self, live: LivePhase) -> None:
        """Forgets an ended phase's hand-over state, once its own saves are made and closed."""
        durability = getattr(live.run, "durability", None)
        if durability is not None:
            await durability.close()
        await asyncio.to_thread(_quietly, self.handover.forget, live.run.job_id, live.run.phase_id)

    def new_phase_id(self) -> str:
        return f"phase-{uuid.uuid4().hex[:12]}"

    # -- running phases ----------------------------------------------------------------------

    def get_live(self, job_id: str, phase_id: str) -> LivePhase | None:
        """The phase if it runs in this server (job control goes through ``phases/commands.py``)."""
        return self.live.get((job_id, phase_id))

    def on_fenced(self, job_id: str, phase_id: str) -> None:
        """The database refused a write for this phase: another replica took it over (docs/scale-out.md).

        Its history is the taker's now: the process is stopped, nothing more of it is written,
        and its watchers end with the result the taker recorded.
        """
        live = self.get_live(job_id, phase_id)
        if live is None or live.events.fenced:
            return
        log.warning("phase taken over by another replica; stopping its process here",
                    extra={"fields": {"job_id": job_id, "phase_id": phase_id}})
        row = self.store.get_phase(job_id, phase_id)
        live.events.fence((row.result_pb if row is not None else None) or b"")
        live.run.request_stop_with_reason(EndCause.INTERRUPTED, "another replica took this phase over")

    async def drain(self, grace: float) -> None:
        """Stops admitting phases, gives running ones ``grace`` seconds, then interrupts them."""
        self.draining = True
        self._drained.set()  # streams following phases of other replicas end: PHASE_MOVED (watch)
        moving = self.hand_over_all(f"moved from replica {self.replica_id} (draining)",
                                    min(self.config.handover_wait_seconds, grace))
        self.admission.close()  # waiting phases end INTERRUPTED now (those not moving); running ones get the grace
        if self.launcher.warm_pool is not None:  # no prestarted CLI outlives the server
            await self.launcher.warm_pool.close()
        running = [lp for lp in self.live.values() if lp.task is not None]
        if not running:
            return
        log.info("waiting for running phases", extra={"fields": {"count": len(running), "grace": grace}})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(lp.done.wait() for lp in running)), grace)
        for lp in running:
            if not lp.done.is_set():
                lp.run.request_stop_with_reason(EndCause.INTERRUPTED, self._not_moved_reason(lp.run))
        if moving:
            log.info("handed phases over", extra={"fields": {
                "moved": sum(1 for lp in running if lp.run.moved), "asked": moving}})
        await asyncio.gather(*(lp.task for lp in running if lp.task), return_exceptions=True)

    def _not_moved_reason(self, run: PhaseRun) -> str:
        """Why a phase ends INTERRUPTED at a drain instead of moving to another replica."""
        why = "the server shut down while the phase ran"
        if self.handover is None:
            return f"{why} (a single-node server has no other replica to hand it over to)"
        if run.durability is not None and not run.durability.movable:
            return f"{why} (it could not move to another replica: {run.durability.where.why_not})"
        return f"{why} (it could not be handed over within the drain's grace)"

    def keep_decision(self, job_id: str, phase_id: str, tool_use_id: str, decision: Decision) -> bool:
        """A decision on a held call of a phase that is moving (no live owner): kept for the adopter.
        True when kept (or one was kept already: the first stands); False when the phase is not
        moving (the caller answers as for any phase not running here). UNAVAILABLE when it was
        adopted just now: the call, sent again, reaches the adopter."""
        if self.handover is None:
            return False
        kept = self.handover.record_decision(job_id, phase_id, tool_use_id, encode_decision(decision))
        if kept == "owned":
            if self.get_live(job_id, phase_id) is not None:
                return False  # adopted here meanwhile: decided on the run
            raise RunnerError(ErrorKind.UNAVAILABLE, "OWNER_UNREACHABLE",
                              f"phase {phase_id} of job {job_id} was just taken over by another replica; send the "
                              "decision again", {"job_id": job_id, "phase_id": phase_id, "owner": "",
                                                 "address": "", "code": "MOVED"}, retry_after_s=0.5)
        return kept in ("recorded", "duplicate")

    def hand_over_all(self, reason: str, wait_s: float) -> int:
        """Asks every phase of this replica that can move to move (``PhaseRun.request_handover``);
        returns how many will."""
        return sum(1 for lp in list(self.live.values())
                   if not lp.done.is_set() and lp.run.request_handover(reason, wait_s))

    def close(self) -> None:
        """Removes this server's (now empty) containment directories; stops the store-call thread."""
        self.containment.close()
        if self._store_calls is not None:
            self._store_calls.shutdown(wait=True)
            self._store_calls = None

    # -- queries ---------------------------------------------------------------------------

    def require_phase(self, job_id: str, phase_id: str) -> PhaseRow:
        row = self.store.get_phase(job_id, phase_id)
        if row is None:
            raise RunnerError(ErrorKind.NOT_FOUND, "PHASE_NOT_FOUND", f"phase {phase_id} of job {job_id} does not exist",
                              {"job_id": job_id, "phase_id": phase_id})
        return row

    async def watch(self, job_id: str, phase_id: str, after_sequence: int) -> AsyncIterator[Delivery]:
        """A phase's events after the cursor, live or from the store, ending with its result."""
        if after_sequence < 0:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", "after_sequence must not be negative",
                              {"field": "after_sequence"})
        live = self.get_live(job_id, phase_id)
        if live is not None:
            return live.events.subscribe(after_sequence)
        row = self.require_phase(job_id, phase_id)
        if after_sequence > row.last_sequence:
            raise RunnerError(ErrorKind.OUT_OF_RANGE, "CURSOR_OUT_OF_RANGE",
                              f"after_sequence {after_sequence} is past the phase's last event {row.last_sequence}",
                              {"last_sequence": row.last_sequence})
        if self.follower is not None and row.status in ACTIVE_STATUSES:
            return self._follow(job_id, phase_id, after_sequence)
        return replay(self.store, job_id, phase_id, after_sequence, row.last_sequence, row.result_pb)

    async def _follow(self, job_id: str, phase_id: str, after_sequence: int) -> AsyncIterator[Delivery]:
        """A phase running on another replica: its events from the database, then its result.

        The follower ends once the phase is final and every event is read; the owner writes the
        result only after its last events are committed (its writer keeps a run's writes in order).
        """
        assert self.follower is not None
        if self.draining:  # this replica is going away: watch on another one (PHASE_MOVED)
            yield Delivery(moved=Moved(self.replica_id, HANDOVER_RETRY_AFTER_S))
            return
        follow = self.follower(job_id, phase_id, after_sequence)
        drained = asyncio.ensure_future(self._drained.wait())
        page: asyncio.Future | None = None
        try:
            while True:
                page = asyncio.ensure_future(anext(follow))
                await asyncio.wait((page, drained), return_when=asyncio.FIRST_COMPLETED)
                if not page.done():  # draining: the stream ends here, the watcher goes on elsewhere
                    yield Delivery(moved=Moved(self.replica_id, HANDOVER_RETRY_AFTER_S))
                    return
                try:
                    rows = page.result()
                except StopAsyncIteration:
                    break
                yield Delivery(tuple(row.body for row in rows), rows[0].sequence, rows[-1].sequence)
        finally:
            drained.cancel()
            if page is not None and not page.done():  # the follower is mid-page: end it there first
                page.cancel()
                with contextlib.suppress(asyncio.CancelledError, StopAsyncIteration, Exception):
                    await page
            await follow.aclose()
        row = self.store.get_phase(job_id, phase_id)
        yield Delivery(result=(row.result_pb if row is not None else None) or b"")


def _quietly(call: Callable[..., object], *args: object) -> None:
    """A clean-up write whose failure only leaves rows behind (logged)."""
    try:
        call(*args)
    except Exception:
        log.warning("cleaning up a phase's hand-over state failed", exc_info=True)


def loop_lag_gate(config: ServerConfig, telemetry: Telemetry):
    """Admission's overload check (``admission_max_loop_lag_ms``; 0: none), telemetry.loop_lag."""
    if not config.admission_max_loop_lag_ms:
        return None
    return functools.partial(telemetry.loop_lag.check, config.admission_max_loop_lag_ms / 1000)


def admission_limits(config: ServerConfig) -> AdmissionLimits:
    """The admission limits of the config (``max_running_phases`` 0: ``max_concurrent_phases``)."""
    return AdmissionLimits(
        max_running=config.max_running_phases or config.max_concurrent_phases,
        max_running_per_project=config.max_running_phases_per_project,
        max_starting=config.max_starting_phases,
        max_queued=config.max_queued_phases,
        max_queued_per_project=config.max_queued_phases_per_project,
    )


def _serverside_context() -> contextvars.Context:
    """A copy of the current context in which nobody is ``acting``."""
    context = contextvars.copy_context()
    context.run(acting.set, None)
    return context
