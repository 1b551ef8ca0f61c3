"""Warm starts (opt-in, ``warm_pool`` in the config): CLI processes started ahead for one declared
spawn signature, so a matching phase starts without the CLI's start-up (about 0.5-1 s here).

In stream-json input mode the CLI starts, then waits for its first stdin line before it writes
anything or touches the network. Checked against the bundled CLI 2.1.330 with the scripted API:
4 s without input made no ``connect()`` call (``strace -f -e trace=connect``), wrote nothing to
stdout and sent the stand-in no request; given the prompt then, it wrote ``system/init`` 65 ms
later instead of 0.5-1 s after a cold spawn (benchmarks/README.md, "Time to first event").

* A process serves exactly one phase: ``take`` removes it from the pool, and a replacement is
  started in the background (from the spawner's worker thread, so the loop does not stall).
* Only an exact match is served: the same argv (binary and options), working directory,
  environment and resource limits as the phase would be spawned with (``SpawnSignature``); any
  other phase spawns cold. What is fixed at exec cannot be changed afterwards: a warm process has
  no per-phase ``TRACEPARENT`` (its spans do not join the RPC's trace).
* Every pool process runs in its own containment scope (shim, cgroup, marker) like a phase; the
  phase adopts that scope. ``close`` (drain, shutdown) ends every process still waiting, and a
  crashed server's recovery finds them as any phase's (the instance's cgroups and marker).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import uuid
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

from helix_runner.process.cgroups import ResourceLimits
from helix_runner.process.containment import Containment
from helix_runner.process.sandbox.phase_sandbox import PhaseSandbox
from helix_runner.process.secret_files import SecretArgFiles
from helix_runner.process.supervisor import ProcessLimits, ProcessSupervisor

log = logging.getLogger(__name__)

# How long to wait before starting again after a pool process failed to start.
RETRY_AFTER_FAILURE_S = 5.0


@dataclass(frozen=True)
class SpawnSignature:
    """Everything fixed when the CLI is exec'd; a phase may use a warm process only on equality."""

    argv: tuple[str, ...]
    cwd: str
    env: frozenset[tuple[str, str]]
    memory_bytes: int | None
    cpu_millicores: int | None

    @classmethod
    def of(cls, argv: Sequence[str], cwd: Path, env: Mapping[str, str], limits: ResourceLimits) -> SpawnSignature:
        return cls(tuple(argv), str(cwd), frozenset(env.items()), limits.memory_bytes, limits.cpu_millicores)


class _NoSink:
    """Where a pool process's output would go before a phase adopts it (it writes none)."""

    def on_stdout(self, chunk: bytes) -> None:  # pragma: no cover - the CLI writes nothing before input
        pass

    def on_stderr_line(self, line: bytes, truncated: bool) -> None:  # pragma: no cover
        pass

    async def room(self) -> None:  # pragma: no cover
        pass


class WarmPool:
    """Keeps up to ``size`` CLI processes of one signature started and waiting for a phase."""

    def __init__(self, containment: Containment, signature: SpawnSignature, limits: ResourceLimits, size: int, *,
                 spawn_off_loop: bool = True, secret_files: SecretArgFiles | None = None,
                 extra_env: Callable[[], Mapping[str, str]] | None = None,
                 release_env: Callable[[Mapping[str, str]], None] | None = None,
                 sandbox_for: Callable[[str], PhaseSandbox | None] | None = None) -> None:
        self.containment = containment
        # The signature holds the inline argv (what a request is matched on); the processes get the
        # secret-bearing JSON options as files, as a cold phase does (process.secret_files).
        self.secret_files = secret_files
        self.signature = signature
        self.limits = limits
        self.size = size
        self._spawn_off_loop = spawn_off_loop
        # Variables each process gets on top of the signature's, not part of it (a capability issued
        # per process, phases/egress_grant.py), and what undoes them when a process is discarded untaken.
        self._extra_env = extra_env
        self._release_env = release_env
        # Each process gets a sandbox and private home of its own (by run id), which the phase
        # that takes it adopts (phases/run.py).
        self._sandbox_for = sandbox_for
        self._ready: list[ProcessSupervisor] = []
        self._starting: set[asyncio.Task] = set()
        self._closed = False
        self.taken = 0  # how many phases started warm (telemetry, tests)

    def start(self) -> None:
        """Fills the pool in the background."""
        self._fill()

    @property
    def ready_pids(self) -> list[int]:
        """The shim pids of the processes waiting now."""
        return [s.scope.shim_pid for s in self._ready if s.scope.shim_pid is not None]

    def take(self, signature: SpawnSignature) -> ProcessSupervisor | None:
        """A started process for a phase of this signature, never handed out twice; None: spawn cold."""
        if self._closed or signature != self.signature:
            return None
        while self._ready:
            sup = self._ready.pop(0)
            if sup.prestarted_alive:
                self.taken += 1
                self._fill()
                return sup
            self._release(sup)
            self._reap(sup)  # it died while it waited: end what is left, try the next
        self._fill()
        return None

    async def close(self) -> None:
        """Ends every waiting process and stops refilling (drain, shutdown)."""
        self._closed = True
        for task in list(self._starting):
            task.cancel()
        await asyncio.gather(*self._starting, return_exceptions=True)
        ready, self._ready = self._ready, []
        for sup in ready:
            self._release(sup)
        await asyncio.gather(*(s.discard() for s in ready), return_exceptions=True)
        if self.secret_files is not None:  # the phases that took a process have ended by now (drain)
            self.secret_files.remove()

    def _fill(self) -> None:
        if self._closed:
            return
        for _ in range(self.size - len(self._ready) - len(self._starting)):
            task = asyncio.create_task(self._start_one(), name="warm-pool:start")
            self._starting.add(task)
            task.add_done_callback(self._starting.discard)

    def _reap(self, sup: ProcessSupervisor) -> None:
        task = asyncio.create_task(sup.discard(), name="warm-pool:discard")
        self._starting.add(task)
        task.add_done_callback(self._starting.discard)

    async def _start_one(self) -> None:
        sig = self.signature
        run_id = f"warm-{uuid.uuid4().hex}"
        scope = self.containment.scope(run_id, self.limits)
        argv = self.secret_files.externalize(sig.argv) if self.secret_files else list(sig.argv)
        env = dict(sig.env)
        sandbox = None
        if self._sandbox_for is not None:
            sandbox = await asyncio.to_thread(self._sandbox_for, run_id)
        if sandbox is not None:
            env = sandbox.apply(env)
            scope.sandbox_args = sandbox.shim_args()
        if self._extra_env is not None:
            env.update(self._extra_env())
        sup = ProcessSupervisor(argv, cwd=Path(sig.cwd), env=env, sink=_NoSink(), limits=ProcessLimits(),
                                keep_stdin_open=True, scope=scope, spawn_off_loop=self._spawn_off_loop)
        sup.sandbox = sandbox
        try:
            failed = await sup.prestart()
        except asyncio.CancelledError:
            self._release(sup)
            if sandbox is not None:
                sandbox.home.remove()
            return  # prestart ended what it had started
        if failed is not None:
            self._release(sup)
            if sandbox is not None:
                sandbox.home.remove()
            log.warning("warm pool: a CLI process did not start", extra={"fields": {"error": failed}})
            with contextlib.suppress(asyncio.CancelledError):
                await asyncio.sleep(RETRY_AFTER_FAILURE_S)
            if not self._closed:
                self._starting.discard(asyncio.current_task())  # type: ignore[arg-type]
                self._fill()
            return
        if self._closed:
            self._release(sup)
            await sup.discard()
            return
        self._ready.append(sup)

    def _release(self, sup: ProcessSupervisor) -> None:
        if self._release_env is not None:
            self._release_env(sup.env)
