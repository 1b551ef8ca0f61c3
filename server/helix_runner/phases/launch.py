"""What a phase is launched with, decided before anything of it is recorded: ``plan_launch`` -> ``LaunchPlan``.

``plan_launch`` checks a request against this server (the sandbox's refusal, the working directory
inside the roots, bypassPermissions allowed, the egress entries, the required commands, the claude
binary, limits it can enforce, the job's project) and decides the phase's workspace, the CLI's
environment, argv and limits, its sandbox and its egress grant. Everything a request can get wrong
is refused here, before the phase row is written; the one thing planning leaves on disk (the
sandbox's private home) goes again with ``LaunchPlan.discard`` if the phase is not started after all.

``Launcher`` is what every phase of a server is launched with (containment, sandbox, gateway, key
broker, the server's environment, the warm pool), with what it caches across phases. The warm pool
is planned by the same code (``start_warm_pool``), so a request and the pool's declaration that
describe the same phase have the same spawn signature.
"""

from __future__ import annotations

import asyncio
import functools
import logging
import uuid
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import SimpleNamespace

from helix_runner.config import ServerConfig
from helix_runner.domain.phase_spec import DEFAULT_PROJECT, PermissionMode, PhaseSpec
from helix_runner.domain.phase_stream import PhaseStreamOptions
from helix_runner.egress.service import Egress
from helix_runner.egress.vault import SealedSecret
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.egress_grant import PhaseEgress, allowed_models, prestart_env, release_prestart_env
from helix_runner.process.cgroups import ResourceLimits
from helix_runner.process.child_env import compose_child_env, missing_commands
from helix_runner.process.claude_command import build_argv, prompt_line
from helix_runner.process.claude_locator import ClaudeBinary, ClaudeNotFoundError, locate_claude
from helix_runner.process.containment import MODE_NAMES, Containment, PhaseScope
from helix_runner.process.git_worktree import PhaseWorkspace, workspace_for
from helix_runner.process.key_broker import KeyBroker
from helix_runner.process.sandbox import repo_guard
from helix_runner.process.sandbox.phase_sandbox import PhaseSandbox, Sandbox, runtime_paths
from helix_runner.process.secret_files import SecretArgFiles
from helix_runner.process.supervisor import ProcessLimits
from helix_runner.process.warm_pool import SpawnSignature, WarmPool
from helix_runner.process.workspace import resolve_working_dir

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class LaunchPlan:
    """Everything decided before the phase's first process starts."""

    # The phase as it runs: add_dirs resolved inside the roots, setting_sources "user" in a sandbox.
    spec: PhaseSpec
    project: str  # spec.project_id, or the default project's name
    working_dir: Path  # the request's working directory, resolved inside the roots
    argv: tuple[str, ...]  # the first attempt's; argv[0] is the claude binary
    cwd: Path
    env: dict[str, str]
    prompt_line: bytes
    limits: ProcessLimits
    claude_path: str  # the binary and how it was found, for the result's diagnostics
    recording_dir: Path
    stream_options: PhaseStreamOptions
    # The phase's containment (cgroup or shim) with its limits; stateful, used by one run.
    scope: PhaseScope
    # Key-helper mode: the broker that hands this phase's CLI session the API key.
    key_broker: KeyBroker | None = None
    # Where the phase runs and how its changes are collected (process/git_worktree.py).
    workspace: PhaseWorkspace | None = None
    # Where the secret-bearing JSON options go as files instead of argv (process.secret_files).
    secret_files: SecretArgFiles | None = None
    # Start the shim from a worker thread (process/spawner.py); False: on the event loop (a baseline).
    spawn_off_loop: bool = True
    # Prestarted CLIs; the first attempt takes one of its exact spawn signature if there is one.
    warm_pool: WarmPool | None = None
    # The phase's grant at the model-API gateway and the egress proxy (phases/egress_grant.py).
    egress: PhaseEgress | None = None
    # The phase's sandbox and private home (process/sandbox/); None: sandbox off.
    sandbox: PhaseSandbox | None = None
    # What counts against the workspace cap (scope.limits.file_bytes; phases/workspace_cap.py).
    workspace_roots: tuple[Path, ...] = ()

    def argv_for(self, spec: PhaseSpec) -> tuple[str, ...]:
        """The argv of a later attempt: its spec resumes the session, with what is left of the budget."""
        settings = self.key_broker.cli_settings() if self.key_broker is not None else None
        return tuple(build_argv(self.argv[0], spec, settings=settings))

    def discard(self) -> None:
        """The phase is not started after all: what planning left on disk goes (its option files, its home)."""
        if self.secret_files is not None:
            self.secret_files.remove()
        if self.sandbox is not None:
            self.sandbox.home.remove()


@dataclass
class Launcher:
    """What every phase of this server is launched with, and what is computed once for all of them."""

    containment: Containment
    server_env: dict[str, str]
    env_overrides: dict[str, str] = field(default_factory=dict)
    # Server variables the child never gets (credentials; see server.child_credentials).
    env_withhold: tuple[str, ...] = ()
    key_broker: KeyBroker | None = None
    # The model-API gateway and the egress proxy (helix_runner/egress); each phase gets a grant.
    egress: Egress | None = None
    # The per-phase sandbox (process/sandbox/); None: phases run as before it existed (sandbox = off).
    sandbox: Sandbox | None = None
    # Prestarted CLI processes for one declared spawn signature (opt-in; start_warm_pool).
    warm_pool: WarmPool | None = None
    # A project's vault secrets, sealed, for a phase starting now (phases/egress_vault.py; None: no vault).
    vault_secrets: Callable[[str], tuple[SealedSecret, ...]] | None = None
    _claude: ClaudeBinary | None = None
    _inherited_env: dict[str, str] | None = None  # the allowlisted part of server_env (child_env)

    def locate_claude(self, config: ServerConfig) -> ClaudeBinary:
        """The claude binary (cached); FAILED_PRECONDITION naming where it looked."""
        if self._claude is None:
            try:
                self._claude = locate_claude(config.claude_path, env=self.server_env)
            except ClaudeNotFoundError as exc:
                raise RunnerError(ErrorKind.FAILED_PRECONDITION, "CLAUDE_NOT_FOUND", str(exc),
                                  {"searched": str(exc)}) from None
        return self._claude

    def child_env(self, spec: PhaseSpec, config: ServerConfig) -> dict[str, str]:
        """The CLI's environment for a phase (composed, never inherited wholesale)."""
        if self._inherited_env is None:
            # The server's part depends on nothing of the phase: filtered once, not per phase (matching
            # every server variable against every pattern took ~2 ms of the loop per phase start).
            self._inherited_env = compose_child_env(
                self.server_env, inherit=config.inherit_env, path_prefix=config.path_prefix,
                request_env={}, request_allowlist=(), withhold=self.env_withhold,
            )
        env = compose_child_env(
            self._inherited_env, inherit=("*",), path_prefix=(), request_env=spec.env,
            request_allowlist=config.request_env_allowlist, overrides=self.env_overrides,
        )
        # Every known startup failure writes a result line with `startup_failure_reason` (instead of
        # stderr alone), which tells a transient refusal from a permanent one (docs/retries-and-admission.md §1).
        env.setdefault("CLAUDE_CODE_STARTUP_FAILURE_RESULTS", "1")
        return env

    def limits(self, spec: PhaseSpec, config: ServerConfig) -> ResourceLimits:
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
        if spec.pids_limit and "pids" not in available and not self._sandbox_nproc:
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "LIMITS_UNAVAILABLE",
                              "options.pids_limit: this server cannot enforce a process limit (no pids cgroup, "
                              "and no user namespace of the phase's own for RLIMIT_NPROC)",
                              {"limit": "pids", "containment": MODE_NAMES[self.containment.mode]})
        memory = requested.memory_bytes or (config.default_memory_limit_bytes or None)
        cpu = requested.cpu_millicores or (config.default_cpu_limit_millicores or None)
        pids = spec.pids_limit or (config.default_pids_limit or None)
        return ResourceLimits(memory if "memory" in available else None, cpu if "cpu" in available else None,
                              pids if "pids" in available else None, file_bytes=workspace_cap(spec, config) or None)

    @property
    def _sandbox_nproc(self) -> bool:
        """Whether the sandbox can hold a process limit itself (RLIMIT_NPROC in a user namespace)."""
        return self.sandbox is not None and self.sandbox.enforces_nproc

    def sandbox_nproc(self, spec: PhaseSpec, config: ServerConfig) -> int | None:
        """The process limit the sandbox enforces where no pids cgroup does (None: none there)."""
        if "pids" in self.containment.limits_available or not self._sandbox_nproc:
            return None
        return spec.pids_limit or config.default_pids_limit or None

    def argv(self, claude_path: str, spec: PhaseSpec) -> tuple[str, ...]:
        return tuple(build_argv(claude_path, spec, settings=self.key_broker.cli_settings() if self.key_broker else None))

    def sandboxed_spec(self, spec: PhaseSpec) -> PhaseSpec:
        """In a sandbox, the workspace's own ``.claude/`` settings load only when the request names
        them: ``setting_sources`` unset means the private user config alone (README "Sandbox")."""
        if self.sandbox is not None and self.sandbox.on and spec.setting_sources is None:
            return replace(spec, setting_sources="user")
        return spec

    def egress_grant(self, spec: PhaseSpec, project: str, config: ServerConfig,
                     secrets: tuple[SealedSecret, ...] = ()) -> PhaseEgress | None:
        """The phase's grant at the gateway and the proxy (phases/egress_grant.py); INVALID_FIELD for a
        bad ``options.egress_allowlist`` entry. ``secrets``: its project's vault secrets."""
        if self.egress is None:
            return None
        return PhaseEgress(self.egress, job_id=spec.job_id, phase_id=spec.phase_id, project=project,
                           models=allowed_models(config, project), request_entries=spec.egress_allowlist,
                           features=(*config.api_features_allow, *spec.api_features), secrets=secrets)

    def prepare_sandbox(self, run_id: str, spec: PhaseSpec, workspace, env: dict[str, str], claude_path: str,
                        project: str, config: ServerConfig, *, secrets_dir: Path | None = None) -> PhaseSandbox | None:
        """A phase run's sandbox: private home, policy, the shim's argument (None: sandbox off and not
        offline). Restores the transcript ``resume_session_id`` names (RunnerError if not this project's)."""
        if self.sandbox is None:
            return None
        cwd = str(workspace.cwd)
        read_write = [*spec.add_dirs]
        read_only = runtime_paths(env.get("PATH", ""), claude_path=claude_path)
        read_only += [str(p) for p in config.path_prefix]
        # The phase's own option files (process/secret_files.py; made later, bound if they exist by
        # then) and the key helper's socket: read-only, whatever holds them.
        private = [str(secrets_dir or config.data_dir / "phase-secrets" / run_id)]
        if self.key_broker is not None:
            private.append(str(self.key_broker.socket_path.parent))
        if self.egress is not None and self.egress.trust_dir is not None:  # the CA bundle SSL_CERT_FILE names
            private.append(str(self.egress.trust_dir))
        worktree = None
        if workspace.mode == "GIT_WORKTREE" and workspace.worktree_path is not None:
            worktree = workspace.worktree_path
            read_write.append(str(worktree))
        if workspace.toplevel is not None:  # git needs the repository's own directory to commit
            read_only.append(str(workspace.toplevel))
            if (repo := repo_guard.layout(workspace.toplevel)) is not None:  # its .git, a real directory
                read_write.append(str(repo.common_dir))
        phase = self.sandbox.prepare(run_id, cwd=cwd, project=project, read_write=read_write, read_only=read_only,
                                     covered=[str(r) for r in config.workspace_roots], private_read_only=private,
                                     repos=[] if worktree is not None or workspace.toplevel is None
                                     else [workspace.toplevel],
                                     worktree=worktree, worktree_of=workspace.toplevel,
                                     protect=not spec.allow_repository_config_writes,
                                     nproc=self.sandbox_nproc(spec, config))
        if spec.resume_session_id:
            try:
                self.sandbox.restore_session(phase, spec.resume_session_id, cwd)
            except BaseException:
                phase.home.remove()
                raise
        return phase


def workspace_cap(spec: PhaseSpec, config: ServerConfig) -> int:
    """The phase's workspace cap in bytes (0: none): its own, at most the server's when it has one."""
    if config.workspace_max_bytes and spec.workspace_max_bytes > config.workspace_max_bytes:
        raise invalid_field("options.workspace_max_bytes",
                            f"is above this server's cap of {config.workspace_max_bytes} bytes (workspace_max_bytes)")
    return spec.workspace_max_bytes or config.workspace_max_bytes


def workspace_roots(workspace: PhaseWorkspace, spec: PhaseSpec, sandbox: PhaseSandbox | None) -> tuple[Path, ...]:
    """The directories whose disk use counts against the workspace cap: what the phase may write."""
    roots = [workspace.worktree_path or workspace.cwd, *(Path(d) for d in spec.add_dirs)]
    if workspace.toplevel is not None and (repo := repo_guard.layout(workspace.toplevel)) is not None:
        roots.append(Path(repo.common_dir))
    if sandbox is not None:
        roots.append(sandbox.home.root)
    return tuple(roots)


async def plan_launch(spec: PhaseSpec, config: ServerConfig, launcher: Launcher, *,
                      job_project: str | None, continue_worktree_from: str = "") -> LaunchPlan:
    """The phase's launch plan; RunnerError for anything of the request this server cannot run.

    ``job_project`` is the project of the phase's job if the job exists (a job's phases share one).
    ``continue_worktree_from``: a worktree phase moved here from another replica (phases/adoption.py):
    its branch holds the work so far, this is its base commit.
    """
    if launcher.sandbox is not None and (refused := launcher.sandbox.refusal()) is not None:
        raise refused  # sandbox = required and a layer is missing on this host
    workdir = resolve_working_dir(spec.working_dir, config.workspace_roots)
    spec = launcher.sandboxed_spec(spec)
    if spec.permission_mode == PermissionMode.BYPASS_PERMISSIONS and not config.allow_bypass_permissions:
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                          "options.permission_mode: bypassPermissions is disabled on this server",
                          {"field": "options.permission_mode"})
    project = spec.project_id or DEFAULT_PROJECT
    secrets = await asyncio.to_thread(launcher.vault_secrets, project) if launcher.vault_secrets else ()
    egress = launcher.egress_grant(spec, project, config, secrets)  # validates options.egress_allowlist
    env = launcher.child_env(spec, config)
    missing = missing_commands(config.required_commands, env)
    if missing:
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "PREFLIGHT_FAILED",
                          f"required commands not found on the phase's PATH: {', '.join(missing)}",
                          {"missing": ",".join(missing)})
    claude = launcher.locate_claude(config)
    limits = launcher.limits(spec, config)
    if job_project is not None and job_project != project:
        raise project_mismatch(spec.job_id, job_project)
    # The run id names the recording directory (its suffix) and the containment scope, so a
    # restarted server finds a crashed run's cgroups from the phase row (phases/recovery.py).
    run_id = uuid.uuid4().hex
    recording_dir = config.recordings_dir / _safe(spec.job_id) / f"{_safe(spec.phase_id)}-{run_id}"
    spec, workspace = await asyncio.to_thread(
        workspace_for, spec, workdir, roots=config.workspace_roots, data_dir=config.data_dir,
        default_retention=config.worktree_retention, recording_dir=recording_dir, resolve_dir=resolve_working_dir,
        continue_from=continue_worktree_from)
    phase_sandbox = await asyncio.to_thread(launcher.prepare_sandbox, run_id, spec, workspace, env, str(claude.path),
                                            project, config)
    try:
        scope = launcher.containment.scope(run_id, limits)
        if phase_sandbox is not None:
            env = phase_sandbox.apply(env)
            scope.sandbox_args = phase_sandbox.shim_args()
        return LaunchPlan(
            spec=spec,
            project=project,
            working_dir=workdir,
            argv=launcher.argv(str(claude.path), spec),
            cwd=workspace.cwd,
            env=env,
            prompt_line=prompt_line(spec.prompt),
            limits=ProcessLimits(
                timeout=spec.timeout_s or config.default_phase_timeout_seconds,
                idle_timeout=spec.idle_timeout_s or config.default_idle_timeout_seconds,
                exit_grace=config.exit_grace_seconds,
                output_max_bytes=config.phase_output_max_bytes,
            ),
            workspace_roots=workspace_roots(workspace, spec, phase_sandbox),
            claude_path=f"{claude.path} ({claude.found_via})",
            recording_dir=recording_dir,
            scope=scope,
            stream_options=PhaseStreamOptions(
                max_line_bytes=config.max_line_bytes,
                include_partial_messages=spec.include_partial_messages,
                include_raw_unknown=spec.include_raw_unknown,
            ),
            key_broker=launcher.key_broker,
            workspace=workspace,
            spawn_off_loop=config.spawn_off_loop,
            warm_pool=launcher.warm_pool,
            secret_files=SecretArgFiles(config.data_dir, run_id),
            egress=egress,
            sandbox=phase_sandbox,
        )
    except BaseException:
        if phase_sandbox is not None:
            phase_sandbox.home.remove()
        raise


def project_mismatch(job_id: str, project: str) -> RunnerError:
    """A phase asked for another project than its job's."""
    return RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD",
                       f"project_id: job {job_id} belongs to project {project}",
                       {"field": "project_id", "job_id": job_id, "project_id": project})


def start_warm_pool(config: ServerConfig, launcher: Launcher) -> WarmPool | None:
    """Starts the opt-in pool of prestarted CLI processes (``warm_pool``; process/warm_pool.py), if declared.

    Its signature is what a RunPhase request with the declared working directory and options
    would be spawned with, computed by the same code; RunnerError when the declaration is invalid.
    """
    declared = config.warm_pool
    if not declared or not declared.get("size"):
        return None
    try:
        spec = PhaseSpec.create(job_id="warm-pool", phase_id="warm", project_id="", prompt="(warm pool)",
                                working_dir=str(declared["working_dir"]), **dict(declared.get("options") or {}))
    except TypeError as exc:  # an option that is no PhaseSpec field
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_FIELD", f"options: {exc}") from None
    spec = launcher.sandboxed_spec(spec)
    cwd = resolve_working_dir(spec.working_dir, config.workspace_roots)
    limits = launcher.limits(spec, config)
    claude = launcher.locate_claude(config)
    signature = SpawnSignature.of(launcher.argv(str(claude.path), spec), cwd, launcher.child_env(spec, config),
                                  limits)
    egress = launcher.egress
    workspace = SimpleNamespace(cwd=cwd, mode="IN_PLACE", worktree_path=None, toplevel=None)
    env = launcher.child_env(spec, config)
    sandbox_for = None
    if launcher.sandbox is not None:
        def sandbox_for(run_id: str) -> PhaseSandbox | None:
            return launcher.prepare_sandbox(run_id, spec, workspace, env, str(claude.path), "", config,
                                            secrets_dir=config.data_dir / "phase-secrets" / "warm-pool")
    pool = WarmPool(launcher.containment, signature, limits, int(declared["size"]),
                    spawn_off_loop=config.spawn_off_loop,
                    secret_files=SecretArgFiles(config.data_dir, "warm-pool"),
                    extra_env=None if egress is None else functools.partial(prestart_env, egress),
                    release_env=None if egress is None else functools.partial(release_prestart_env, egress),
                    sandbox_for=sandbox_for)
    pool.start()
    log.info("warm pool started", extra={"fields": {"size": declared["size"], "working_dir": str(cwd)}})
    return pool


def _safe(name: str) -> str:
    """A path component from an id (ids are already restricted to [A-Za-z0-9._:-])."""
    return name.replace(":", "_").replace("..", "__")
