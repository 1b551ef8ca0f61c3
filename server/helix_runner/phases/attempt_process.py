"""The CLI process of a phase's current attempt: its supervisor, its sandbox, its key while it lives.

Each attempt gets a supervisor of its own (the first one may take a prestarted CLI from the warm
pool instead, with that process's sandbox home); the later ones run in the same sandbox with the
time the phase has left. When the process spawns, its pid is recorded (a restarted server finds
and ends what it leaves) and the key broker admits it; the admission is revoked when the attempt
ends. ``AttemptProcess`` owns that, and knows the launch plan and where output goes, not the run.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Sequence
from dataclasses import replace as dc_replace
from pathlib import Path

from helix_runner.domain.phase_outcome import EndCause
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.phases.handover import transcript_path
from helix_runner.phases.launch import LaunchPlan
from helix_runner.process.claude_command import redact_argv
from helix_runner.process.containment import PhaseScope
from helix_runner.process.sandbox.private_home import project_dir_name
from helix_runner.process.supervisor import ProcessLimits, ProcessSink, ProcessSupervisor
from helix_runner.process.warm_pool import SpawnSignature

log = logging.getLogger(__name__)


class AttemptProcess:
    """The current attempt's supervisor and sandbox (a warm start brings its own, see ``take_warm``).

    ``sink`` receives the process's output; ``record_pid(pid)`` records the phase shim's pid.
    """

    def __init__(self, spec: PhaseSpec, plan: LaunchPlan, sink: ProcessSink, record_pid: Callable[[int], None]):
        self.spec, self.plan = spec, plan
        self._sink, self._record_pid = sink, record_pid
        self.sandbox = plan.sandbox
        self._revoke_key: Callable[[], None] = lambda: None
        self.open(plan.argv, plan.env, plan.limits, plan.scope)

    def open(self, argv: Sequence[str], env: dict[str, str], limits: ProcessLimits, scope: PhaseScope) -> None:
        """An attempt's supervisor (its CLI not started yet)."""
        self.argv_record = redact_argv(argv)  # the inline form: names, never the values
        self.supervisor = ProcessSupervisor(
            self._exec_argv(argv), cwd=self.plan.cwd, env=env, sink=self._sink, limits=limits, keep_stdin_open=True,
            on_spawn=self._spawned, scope=scope, spawn_off_loop=self.plan.spawn_off_loop,
        )

    def open_next(self, spec: PhaseSpec, time_left: float) -> None:
        """A later attempt's supervisor: in the same sandbox and home, bounded by the time the phase has left."""
        limits = dc_replace(self.plan.limits, timeout=max(1.0, time_left))
        argv = self.plan.argv_for(spec)
        scope = PhaseScope(self.plan.scope.containment, self.plan.scope.run_id, self.plan.scope.limits)
        scope.sandbox_args = self.supervisor.scope.sandbox_args  # the same sandbox and home
        self.open(argv, dict(self.plan.env), limits, scope)

    def _exec_argv(self, argv: Sequence[str]) -> list[str]:
        """``argv`` with the secret-bearing JSON values moved into the run's private files."""
        return self.plan.secret_files.externalize(argv) if self.plan.secret_files else list(argv)

    def _spawned(self, pid: int) -> None:
        self._record_pid(pid)
        if self.plan.key_broker is not None:
            # Before the event loop runs again, so before the CLI's first key request can be answered.
            self._revoke_key = self.plan.key_broker.admit(pid, self.spec.job_id, self.spec.phase_id)

    def stop(self, cause: EndCause, reason: str) -> None:
        """Stops the current attempt's CLI (SIGTERM, then the whole group)."""
        self.supervisor.request_stop(cause, reason)

    def revoke_key(self) -> None:
        """No process of the attempt gets the API key any more (idempotent)."""
        revoke, self._revoke_key = self._revoke_key, lambda: None
        revoke()

    def take_warm(self) -> None:
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
        warm.adopt(sink=self._sink, limits=cold.limits, on_spawn=self._spawned)
        if self.plan.egress is not None:  # the capability it was started with becomes this phase's
            self.plan.egress.adopt(warm.env)
        warm.set_stdin_lines(cold.stdin_lines)  # initialize (with the hook) and the prompt
        self.supervisor = warm
        log.info("phase starts warm", extra={"fields": {"job_id": self.spec.job_id, "phase_id": self.spec.phase_id,
                                                        "shim_pid": warm.scope.shim_pid}})

    def session_file(self, name: str) -> Path:
        """Where this phase's CLI finds a session file ``name`` (in its sandbox's home, or its config)."""
        if self.sandbox is not None:
            return self.sandbox.home.config / "projects" / project_dir_name(str(self.plan.cwd)) / f"{name}.jsonl"
        return transcript_path(self.plan.env, self.plan.cwd, name)
