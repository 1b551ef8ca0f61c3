"""Admits, runs, and answers for phases: the application service behind the API.

It validates a request into a launch plan (claude binary, workspace root, composed environment,
preflight), records the job and phase, runs the phase as a task that belongs to the server (not
to any RPC, so a watcher can come and go), and answers queries from the store. At startup it
marks phases a previous server left active as INTERRUPTED; on drain it stops running phases and
records them INTERRUPTED too.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import importlib.metadata
import logging
import os
import time
import uuid
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from helix_runner.config import ServerConfig, retry_defaults
from helix_runner.domain.breakpoints import Breakpoint, BreakpointSet
from helix_runner.domain.events import Event, PhaseStatusChanged
from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_result import PhaseResult, queue_wait_ns
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PhaseSpec
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.phase_stream import PhaseStreamOptions
from helix_runner.domain.pricing import PriceTable
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.egress.service import Egress
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.admission import AdmissionLimits, AsyncAdmission, QueueStatus, Ticket
from helix_runner.phases.attempts import DEFAULT_CREDENTIAL, Retries, interrupted_attempt
from helix_runner.phases.cluster_admission import admission_for, cluster_limits
from helix_runner.phases.egress_grant import PhaseEgress, allowed_models, prestart_env, release_prestart_env
from helix_runner.phases.event_log import Delivery, EventWriter, PhaseEventLog, replay
from helix_runner.phases.fencing import FencedPhaseStore
from helix_runner.phases.placement import would_queue_here
from helix_runner.phases.ports import RecordEncoder
from helix_runner.phases.replicas import Replicas
from helix_runner.phases.run import LaunchPlan, PhaseRun
from helix_runner.phases.views import ServerStatus
from helix_runner.process.cgroups import ResourceLimits
from helix_runner.process.child_env import compose_child_env, missing_commands
from helix_runner.process.claude_command import build_argv, prompt_line
from helix_runner.process.claude_locator import ClaudeBinary, ClaudeNotFoundError, locate_claude
from helix_runner.process.containment import MODE_NAMES, Containment, LeftoverRun
from helix_runner.process.git_worktree import workspace_for
from helix_runner.process.key_broker import KeyBroker
from helix_runner.process.process_group import kill_leftover_group
from helix_runner.process.sandbox.phase_sandbox import PhaseSandbox, Sandbox, off_report, runtime_paths
from helix_runner.process.secret_files import SecretArgFiles
from helix_runner.process.supervisor import ProcessLimits
from helix_runner.process.warm_pool import SpawnSignature, WarmPool
from helix_runner.process.workspace import resolve_working_dir
from helix_runner.store.cluster import SINGLE_NODE, Cluster
from helix_runner.store.protocol import ACTIVE_STATUSES, AlreadyExistsError, EventRow, PhaseRow, Store
from helix_runner.telemetry import Telemetry

log = logging.getLogger(__name__)

# (job_id, phase_id, after_sequence) -> the phase's committed events after the cursor, then live,
# ending once the phase is final (store/postgres_notify.follow_phase_events on a shared database).
Follower = Callable[[str, str, int], AsyncIterator[list[EventRow]]]



@dataclass
class LivePhase:
    """A phase running in this server process."""

    run: PhaseRun
    events: PhaseEventLog
    task: asyncio.Task | None = None
    done: asyncio.Event = field(default_factory=asyncio.Event)


class PhaseService:
    """Starts phases and answers for them; one per server."""

    def __init__(self, config: ServerConfig, store: Store, encoder: RecordEncoder, containment: Containment, *,
                 server_env: Mapping[str, str] | None = None, env_overrides: Mapping[str, str] | None = None,
                 env_withhold: tuple[str, ...] = (), key_broker: KeyBroker | None = None,
                 telemetry: Telemetry | None = None, cluster: Cluster = SINGLE_NODE,
                 egress: Egress | None = None, sandbox: Sandbox | None = None):
        self.config = config
        self.containment = containment
        self.telemetry = telemetry or Telemetry()
        self.store = store
        self.encoder = encoder
        self.server_env = dict(os.environ if server_env is None else server_env)
        self._inherited_env: dict[str, str] | None = None  # the allowlisted part of server_env (_child_env)
        self.env_overrides = dict(env_overrides or {})
        # Server variables the child never gets (credentials; see server.child_credentials).
        self.env_withhold = env_withhold
        self.key_broker = key_broker
        # The model-API gateway and the egress proxy (helix_runner/egress); each phase gets a grant.
        self.egress = egress
        # The per-phase sandbox (process/sandbox/); None: phases run as before it existed (sandbox = off).
        self.sandbox = sandbox
        self.live: dict[tuple[str, str], LivePhase] = {}
        self.draining = False
        self._claude: ClaudeBinary | None = None
        self.writer = EventWriter(store)
        self.writer.on_fenced = self.on_fenced
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
        # Prestarted CLI processes for one declared spawn signature (opt-in; start_warm_pool).
        self.warm_pool: WarmPool | None = None
        # Where a phase runs among the replicas on the database (routing asks: api/routing.py).
        self.replicas = Replicas(cluster, store, runs_here=lambda job, phase: self.get_live(job, phase) is not None,
                                 full_here=lambda: not self.draining and would_queue_here(self.admission.queue))

    # -- admission -------------------------------------------------------------------------

    def locate_claude(self) -> ClaudeBinary:
        """The claude binary (cached); FAILED_PRECONDITION naming where it looked."""
        if self._claude is None:
            try:
                self._claude = locate_claude(self.config.claude_path, env=self.server_env)
            except ClaudeNotFoundError as exc:
                raise RunnerError(ErrorKind.FAILED_PRECONDITION, "CLAUDE_NOT_FOUND", str(exc),
                                  {"searched": str(exc)}) from None
        return self._claude

    async def start(self, spec: PhaseSpec, breakpoints: list[Breakpoint] | None = None,
                    retry: RetryPolicy | None = None) -> LivePhase:
        """Validates, records and starts a phase; it runs until it ends, whoever watches.

        Everything a request can get wrong is checked before the phase row is written: a rejected
        request leaves nothing behind, so its phase id stays free for a corrected retry.
        """
        with self.telemetry.admission():  # telemetry: counts refusals by reason
            return await self._start(spec, breakpoints, retry or self.retry_defaults)

    async def _start(self, spec: PhaseSpec, breakpoints: list[Breakpoint] | None, retry: RetryPolicy) -> LivePhase:
        breakpoints = list(breakpoints or [])
        BreakpointSet.of(breakpoints)  # count and unique ids; each breakpoint is validated already
        if self.draining:
            raise RunnerError(ErrorKind.UNAVAILABLE, "DRAINING", "the server is shutting down and accepts no new phases")
        if self.sandbox is not None and (refused := self.sandbox.refusal()) is not None:
            raise refused  # sandbox = required and a layer is missing on this host
        workdir = resolve_working_dir(spec.working_dir, self.config.workspace_roots)
        spec = self._sandboxed_spec(spec)
        if spec.permission_mode == "bypassPermissions" and not self.config.allow_bypass_permissions:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                              "options.permission_mode: bypassPermissions is disabled on this server",
                              {"field": "options.permission_mode"})
        egress = self._egress_grant(spec, spec.project_id or DEFAULT_PROJECT)  # validates options.egress_allowlist
        env = self._child_env(spec)
        missing = missing_commands(self.config.required_commands, env)
        if missing:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "PREFLIGHT_FAILED",
                              f"required commands not found on the phase's PATH: {', '.join(missing)}",
                              {"missing": ",".join(missing)})
        claude = self.locate_claude()
        limits = self._limits(spec)
        existing = self.store.get_job(spec.job_id)
        project = spec.project_id or DEFAULT_PROJECT
        if existing is not None and existing.project_id != project:
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                              f"project_id: job {spec.job_id} belongs to project {existing.project_id}",
                              {"field": "project_id", "job_id": spec.job_id, "project_id": existing.project_id})
        # The run id names the recording directory (its suffix) and the containment scope, so a
        # restarted server finds a crashed run's cgroups from the phase row (see recover()).
        run_id = uuid.uuid4().hex
        recording_dir = self.config.recordings_dir / _safe(spec.job_id) / f"{_safe(spec.phase_id)}-{run_id}"
        spec, workspace = await asyncio.to_thread(
            workspace_for, spec, workdir, roots=self.config.workspace_roots, data_dir=self.config.data_dir,
            default_retention=self.config.worktree_retention, recording_dir=recording_dir,
            resolve_dir=resolve_working_dir)
        phase_sandbox = await asyncio.to_thread(self._prepare_sandbox, run_id, spec, workspace, env, str(claude.path),
                                                project)
        try:
            return await self._plan_and_launch(spec, project, workdir, recording_dir, workspace, env, claude, limits,
                                               run_id, retry, breakpoints, phase_sandbox, egress)
        except BaseException:
            if phase_sandbox is not None:
                phase_sandbox.home.remove()
            raise

    async def _plan_and_launch(self, spec: PhaseSpec, project: str, workdir: Path, recording_dir: Path, workspace,
                               env: dict[str, str], claude: ClaudeBinary, limits: ResourceLimits, run_id: str,
                               retry: RetryPolicy, breakpoints: list[Breakpoint],
                               phase_sandbox: PhaseSandbox | None, egress: PhaseEgress | None) -> LivePhase:
        scope = self.containment.scope(run_id, limits)
        if phase_sandbox is not None:
            env = phase_sandbox.apply(env)
            scope.sandbox_args = phase_sandbox.shim_args()
        plan = LaunchPlan(
            argv=self._argv(str(claude.path), spec),
            cwd=workspace.cwd,
            env=env,
            prompt_line=prompt_line(spec.prompt),
            limits=ProcessLimits(
                timeout=spec.timeout_s or self.config.default_phase_timeout_seconds,
                idle_timeout=spec.idle_timeout_s or self.config.default_idle_timeout_seconds,
                exit_grace=self.config.exit_grace_seconds,
            ),
            claude_path=f"{claude.path} ({claude.found_via})",
            recording_dir=recording_dir,
            scope=scope,
            stream_options=PhaseStreamOptions(
                max_line_bytes=self.config.max_line_bytes,
                include_partial_messages=spec.include_partial_messages,
                include_raw_unknown=spec.include_raw_unknown,
            ),
            key_broker=self.key_broker,
            workspace=workspace,
            spawn_off_loop=self.config.spawn_off_loop,
            take_warm=self._take_warm if self.warm_pool is not None else None,
            argv_for=lambda attempt_spec: build_argv(
                str(claude.path), attempt_spec, settings=self.key_broker.cli_settings() if self.key_broker else None),
            secret_files=SecretArgFiles(self.config.data_dir, run_id),
            egress=egress,
            sandbox=phase_sandbox,
        )

        # Admission: QUEUE_FULL refuses here, before anything is written or streamed; else the
        # phase either starts at once or waits QUEUED inside its run (the stream is open meanwhile).
        key = (spec.job_id, spec.phase_id)
        if key in self.live or self.admission.queue.get(key) is not None:
            raise RunnerError(ErrorKind.ALREADY_EXISTS, "PHASE_ALREADY_EXISTS",
                              f"phase {spec.phase_id} already exists in job {spec.job_id}",
                              {"job_id": spec.job_id, "phase_id": spec.phase_id})
        ticket = self.admission.submit(key, project, DEFAULT_CREDENTIAL)
        try:
            return await self._record_and_launch(spec, project, workdir, recording_dir, workspace, plan, breakpoints,
                                                 Retries(retry, self.admission, ticket, project, DEFAULT_CREDENTIAL))
        except BaseException:
            self.admission.release(ticket)
            raise

    async def _record_and_launch(self, spec: PhaseSpec, project: str, workdir: Path, recording_dir: Path, workspace,
                                 plan: LaunchPlan, breakpoints: list[Breakpoint], retries: Retries) -> LivePhase:
        # Persisted from here on.
        now = time.time_ns()
        job, _ = self.store.get_or_create_job(spec.job_id, project, now)
        if job.project_id != project:  # another request created the job just now
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                              f"project_id: job {spec.job_id} belongs to project {job.project_id}",
                              {"field": "project_id", "job_id": spec.job_id, "project_id": job.project_id})
        try:
            self.store.insert_phase(PhaseRow(
                job_id=spec.job_id, phase_id=spec.phase_id, ordinal=0, project_id=project,
                status=PhaseStatus.PENDING, create_time_ns=now, working_dir=str(workdir), prompt=spec.prompt,
                model=spec.model, on_disconnect=spec.on_disconnect, recording_dir=str(recording_dir),
            ))
        except AlreadyExistsError:
            raise RunnerError(ErrorKind.ALREADY_EXISTS, "PHASE_ALREADY_EXISTS",
                              f"phase {spec.phase_id} already exists in job {spec.job_id}",
                              {"job_id": spec.job_id, "phase_id": spec.phase_id}) from None
        try:
            await workspace.create()  # after the phase row: its ids are ours, so is the branch
            events = PhaseEventLog(self.store, spec.job_id, spec.phase_id, writer=self.writer,
                                   frame=self.encoder.frame_events)
            observer = self.telemetry.phase(spec.job_id, spec.phase_id, project, spec.model)  # telemetry
            # A write refused by the fence (another replica took the phase over) stops the run.
            run_store = FencedPhaseStore(self.store, functools.partial(self.on_fenced, spec.job_id, spec.phase_id))
            run = PhaseRun(spec, plan, run_store, self.encoder, events, breakpoints, self.prices, telemetry=observer,
                           retries=retries, accepted_ns=now)
        except BaseException:
            # E.g. the recordings directory cannot be created: the phase must not stay PENDING.
            if plan.secret_files is not None:
                plan.secret_files.remove()
            self._fail_unstarted(spec.job_id, spec.phase_id, now)
            raise
        live = LivePhase(run, events)
        self.live[(spec.job_id, spec.phase_id)] = live
        live.task = asyncio.create_task(self._drive(live), name=f"phase:{spec.job_id}/{spec.phase_id}")
        log.info("phase started", extra={"fields": {"job_id": spec.job_id, "phase_id": spec.phase_id,
                                                     "working_dir": str(workdir),
                                                     "containment": plan.scope.describe()}})
        return live

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

    def _child_env(self, spec: PhaseSpec) -> dict[str, str]:
        """The CLI's environment for a phase (composed, never inherited wholesale)."""
        if self._inherited_env is None:
            # The server's part depends on nothing of the phase: filtered once, not per phase (matching
            # every server variable against every pattern took ~2 ms of the loop per phase start).
            self._inherited_env = compose_child_env(
                self.server_env, inherit=self.config.inherit_env, path_prefix=self.config.path_prefix,
                request_env={}, request_allowlist=(), withhold=self.env_withhold,
            )
        env = compose_child_env(
            self._inherited_env, inherit=("*",), path_prefix=(), request_env=spec.env,
            request_allowlist=self.config.request_env_allowlist, overrides=self.env_overrides,
        )
        # Every known startup failure writes a result line with `startup_failure_reason` (instead of
        # stderr alone), which tells a transient refusal from a permanent one (docs/retries-and-admission.md §1).
        env.setdefault("CLAUDE_CODE_STARTUP_FAILURE_RESULTS", "1")
        return env

    def _egress_grant(self, spec: PhaseSpec, project: str) -> PhaseEgress | None:
        """The phase's grant at the gateway and the proxy (phases/egress_grant.py); INVALID_FIELD for a
        bad ``options.egress_allowlist`` entry."""
        if self.egress is None:
            return None
        return PhaseEgress(self.egress, job_id=spec.job_id, phase_id=spec.phase_id, project=project,
                           models=allowed_models(self.config, project), request_entries=spec.egress_allowlist)

    # -- the sandbox (process/sandbox/) ---------------------------------------------------------

    def server_status(self) -> ServerStatus:
        """The sandbox every phase gets, the containment mode and any refusal (GetServerStatus)."""
        sandbox = self.sandbox.report() if self.sandbox is not None else off_report()
        refused = self.sandbox.refusal() if self.sandbox is not None else None
        try:
            version = importlib.metadata.version("helix-runner")
        except importlib.metadata.PackageNotFoundError:
            version = ""
        return ServerStatus(sandbox=sandbox, containment_mode=self.containment.mode,
                            refusal=refused.message if refused is not None else "", version=version)

    def _sandboxed_spec(self, spec: PhaseSpec) -> PhaseSpec:
        """In a sandbox, the workspace's own ``.claude/`` settings load only when the request names
        them: ``setting_sources`` unset means the private user config alone (README "Sandbox")."""
        if self.sandbox is not None and self.sandbox.on and spec.setting_sources is None:
            return replace(spec, setting_sources="user")
        return spec

    def _prepare_sandbox(self, run_id: str, spec: PhaseSpec, workspace, env: dict[str, str], claude_path: str,
                         project: str, *, secrets_dir: Path | None = None) -> PhaseSandbox | None:
        """A phase run's sandbox: private home, policy, the shim's argument (None: sandbox off and not
        offline). Restores the transcript ``resume_session_id`` names (RunnerError if not this project's)."""
        if self.sandbox is None:
            return None
        cwd = str(workspace.cwd)
        read_write = [*spec.add_dirs]
        read_only = runtime_paths(env.get("PATH", ""), claude_path=claude_path)
        read_only += [str(p) for p in self.config.path_prefix]
        # The phase's own option files (process/secret_files.py; made later, bound if they exist by
        # then) and the key helper's socket: read-only, whatever holds them.
        private = [str(secrets_dir or self.config.data_dir / "phase-secrets" / run_id)]
        if self.key_broker is not None:
            private.append(str(self.key_broker.socket_path.parent))
        if workspace.mode == "GIT_WORKTREE" and workspace.worktree_path is not None:
            read_write.append(str(workspace.worktree_path))
        if workspace.toplevel is not None:  # git needs the repository's own directory to commit
            read_only.append(str(workspace.toplevel))
            common = workspace.toplevel / ".git"
            if common.is_dir():
                read_write.append(str(common))
        phase = self.sandbox.prepare(run_id, cwd=cwd, project=project, read_write=read_write, read_only=read_only,
                                     covered=[str(r) for r in self.config.workspace_roots], private_read_only=private)
        if spec.resume_session_id:
            try:
                self.sandbox.restore_session(phase, spec.resume_session_id, cwd)
            except BaseException:
                phase.home.remove()
                raise
        return phase

    def _argv(self, claude_path: str, spec: PhaseSpec) -> tuple[str, ...]:
        return tuple(build_argv(claude_path, spec, settings=self.key_broker.cli_settings() if self.key_broker else None))

    def start_warm_pool(self) -> None:
        """Starts the opt-in pool of prestarted CLI processes (``warm_pool``; process/warm_pool.py).

        Its signature is what a RunPhase request with the declared working directory and options
        would be spawned with, computed by the same code; RunnerError when the declaration is invalid.
        """
        declared = self.config.warm_pool
        if not declared or not declared.get("size"):
            return
        try:
            spec = PhaseSpec.create(job_id="warm-pool", phase_id="warm", project_id="", prompt="(warm pool)",
                                    working_dir=str(declared["working_dir"]), **dict(declared.get("options") or {}))
        except TypeError as exc:  # an option that is no PhaseSpec field
            raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"options: {exc}") from None
        spec = self._sandboxed_spec(spec)
        cwd = resolve_working_dir(spec.working_dir, self.config.workspace_roots)
        limits = self._limits(spec)
        claude = self.locate_claude()
        signature = SpawnSignature.of(self._argv(str(claude.path), spec), cwd, self._child_env(spec), limits)
        egress = self.egress
        workspace = SimpleNamespace(cwd=cwd, mode="IN_PLACE", worktree_path=None, toplevel=None)
        env = self._child_env(spec)
        sandbox_for = None
        if self.sandbox is not None:
            def sandbox_for(run_id: str) -> PhaseSandbox | None:
                return self._prepare_sandbox(run_id, spec, workspace, env, str(claude.path), "",
                                             secrets_dir=self.config.data_dir / "phase-secrets" / "warm-pool")
        self.warm_pool = WarmPool(self.containment, signature, limits, int(declared["size"]),
                                  spawn_off_loop=self.config.spawn_off_loop,
                                  secret_files=SecretArgFiles(self.config.data_dir, "warm-pool"),
                                  extra_env=None if egress is None else functools.partial(prestart_env, egress),
                                  release_env=None if egress is None else functools.partial(release_prestart_env,
                                                                                            egress),
                                  sandbox_for=sandbox_for)
        self.warm_pool.start()
        log.info("warm pool started", extra={"fields": {"size": declared["size"], "working_dir": str(cwd)}})

    def _take_warm(self, signature: SpawnSignature):
        return self.warm_pool.take(signature) if self.warm_pool is not None else None

    def _limits(self, spec: PhaseSpec) -> ResourceLimits:
        """The phase's limits: its own (FAILED_PRECONDITION if this server cannot enforce them), else
        the server's defaults where they can be enforced (start-up logged those that cannot)."""
        requested = ResourceLimits(spec.memory_limit_bytes or None, spec.cpu_limit_millicores or None)
        available = self.containment.limits_available
        for name, value in (("memory", requested.memory_bytes), ("cpu", requested.cpu_millicores)):
            if value and name not in available:
                raise RunnerError(ErrorKind.FAILED_PRECONDITION, "LIMITS_UNAVAILABLE",
                                  f"options.{name}_limit: this server cannot enforce a {name} limit "
                                  f"({MODE_NAMES[self.containment.mode]} containment without a {name} cgroup)",
                                  {"limit": name, "containment": MODE_NAMES[self.containment.mode]})
        memory = requested.memory_bytes or (self.config.default_memory_limit_bytes or None)
        cpu = requested.cpu_millicores or (self.config.default_cpu_limit_millicores or None)
        return ResourceLimits(memory if "memory" in available else None, cpu if "cpu" in available else None)

    async def _drive(self, live: LivePhase) -> None:
        try:
            await live.run.run()
            # Stay "live" until the final events are committed: a watcher attaching now must not
            # replay from a store that does not have them yet.
            await live.events.wait_closed()
            if live.run.plan.workspace is not None and live.run.result is not None:
                await live.run.plan.workspace.release(live.run.result.status)  # the worktree's retention
        except asyncio.CancelledError:
            pass
        except Exception:
            log.exception("phase task failed")
        finally:
            live.done.set()
            # Keep finished phases out of the live table; watchers read them from the store.
            self.live.pop((live.run.job_id, live.run.phase_id), None)

    def new_phase_id(self) -> str:
        return f"phase-{uuid.uuid4().hex[:12]}"

    # -- control ---------------------------------------------------------------------------

    def get_live(self, job_id: str, phase_id: str) -> LivePhase | None:
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
        self.admission.close()  # waiting phases end INTERRUPTED now; running ones get the grace
        if self.warm_pool is not None:  # no prestarted CLI outlives the server
            await self.warm_pool.close()
        running = [lp for lp in self.live.values() if lp.task is not None]
        if not running:
            return
        log.info("waiting for running phases", extra={"fields": {"count": len(running), "grace": grace}})
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.gather(*(lp.done.wait() for lp in running)), grace)
        for lp in running:
            if not lp.done.is_set():
                lp.run.request_stop_with_reason(EndCause.INTERRUPTED, "the server shut down while the phase ran")
        await asyncio.gather(*(lp.task for lp in running if lp.task), return_exceptions=True)

    def close(self) -> None:
        """Removes this server's (now empty) containment directories."""
        self.containment.close()

    # -- recovery --------------------------------------------------------------------------

    async def recover(self) -> list[PhaseRow]:
        """Marks phases a previous server process left active as INTERRUPTED, with a reason and an
        event, after ending every process they left (their cgroups, shims and marked strays)."""
        recovered = self.store.active_phases()
        runs = [LeftoverRun(_run_id(row.recording_dir), row.pid, row.pid_start_ticks) for row in recovered]
        ended = await self.containment.recover(runs)
        now = time.time_ns()
        for row, run in zip(recovered, runs, strict=True):
            left = ended.get(run.run_id, 0)
            if not left and row.pid and row.pid_start_ticks is not None:
                # Phases recorded before the shim: the CLI's own process group.
                left = len(kill_leftover_group(row.pid, row.pid_start_ticks))
            reason = "the server stopped while the phase ran (found active at startup); " + (
                f"{left} leftover process(es) of the phase were found and ended" if left
                else "no process of the phase outlived the server")
            previous = row.status
            seq = row.last_sequence + 1
            event = Event(seq, now, row.session_id, "", "", "", PhaseStatusChanged(previous, PhaseStatus.INTERRUPTED,
                                                                                     reason))
            self.store.append_events([(row.job_id, row.phase_id, [
                EventRow(seq, now, self.encoder.event_kind(event), self.encoder.encode_event(row.job_id, row.phase_id,
                                                                                          event))
            ])])
            self.store.mark_tool_calls_unfinished(row.job_id, row.phase_id)
            result = PhaseResult(job_id=row.job_id, phase_id=row.phase_id, status=PhaseStatus.INTERRUPTED,
                                 reason=reason, session_id=row.session_id, start_time_ns=row.start_time_ns,
                                 end_time_ns=now, last_sequence=seq,
                                 queue_wait_ns=queue_wait_ns(row.create_time_ns, row.start_time_ns))
            self.store.update_phase(row.job_id, row.phase_id, now, status=PhaseStatus.INTERRUPTED,
                                    status_reason=reason, end_time_ns=now,
                                    # The cost and attempts it recorded before the server stopped.
                                    result_pb=self.encoder.encode_result(
                                        result, cost_pb=row.cost_pb, attempts_pb=row.attempts_pb,
                                        interrupted=interrupted_attempt(row.status, reason, session_id=row.session_id,
                                                                        end_time_ns=now, last_sequence=seq - 1)))
            log.warning("phase interrupted by a previous shutdown",
                        extra={"fields": {"job_id": row.job_id, "phase_id": row.phase_id, "was": row.status.name,
                                          "processes_ended": left}})
        strays = sum(n for run_id, n in ended.items() if run_id not in {r.run_id for r in runs})
        if strays:
            log.warning("ended processes of phases a previous server left", extra={"fields": {"count": strays}})
        return recovered

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
        result only after its last events are committed (``PhaseRun`` flushes the writer first).
        """
        assert self.follower is not None
        async for rows in self.follower(job_id, phase_id, after_sequence):
            yield Delivery(tuple(row.body for row in rows), rows[0].sequence, rows[-1].sequence)
        row = self.store.get_phase(job_id, phase_id)
        yield Delivery(result=(row.result_pb if row is not None else None) or b"")


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


def _run_id(recording_dir: str) -> str:
    """The run id of a phase row: the suffix of its recording directory (``<phase>-<run id>``)."""
    return Path(recording_dir).name.rsplit("-", 1)[-1]


def _safe(name: str) -> str:
    """A path component from an id (ids are already restricted to [A-Za-z0-9._:-])."""
    return name.replace(":", "_").replace("..", "__")

