"""Runs one CLI child process and ends it in bounded time, whatever it does.

The supervisor knows processes, not events: stdout chunks and stderr lines go to a sink as they
arrive, and the run ends with the exit facts (``ProcessExit``) from which the phase status is
decided (``domain.phase_outcome``). Hang-proofing, each with its own bounded wait:

- overall timeout and an idle watchdog (no output while the process lives);
- stdout at EOF but the process does not exit (e.g. after its final result, claude-code#25629);
- the process exited but a grandchild (a Bash tool's background job) still holds the pipes;
- an external stop (cancel, server drain).

The CLI runs under the phase shim in the phase's containment scope (``process/containment.py``): a
cgroup, or the shim as a child subreaper. Whatever the CLI's tools do (``setsid``, double forks,
``nohup``), every process of the phase is in that scope, and the scope is always emptied at the
end, so no tool process outlives its phase. A hard pause stops the whole scope.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import signal
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from helix_runner.domain.phase_outcome import EndCause, ProcessExit
from helix_runner.process.containment import ContainmentError, PhaseScope, ScopeStats, subreaper_scope
from helix_runner.process.spawner import ChildProcess, finish_spawn, spawn_in_thread, spawn_on_loop

log = logging.getLogger(__name__)

STDOUT_CHUNK = 64 * 1024
STDERR_LINE_MAX = 4 * 1024
STDERR_TAIL_MAX = 16 * 1024
# How long the shim may take to start the CLI (a Python start-up; generous for a loaded machine).
SHIM_START_LIMIT_S = 30.0
# How often the memory cgroup is checked for OOM kills while a memory limit is set.
OOM_CHECK_S = 0.25


class ProcessSink(Protocol):
    """Receives the child's output as it arrives. Must not block (it runs on the event loop).

    Before each read of either pipe the supervisor awaits ``room()``: a sink that cannot take
    more yet (its writes to the store are behind) makes the reads wait, the pipe fills, and the
    child's writes block: back-pressure instead of output piling up in memory.
    """

    def on_stdout(self, chunk: bytes) -> None: ...

    def on_stderr_line(self, line: bytes, truncated: bool) -> None: ...

    async def room(self) -> None: ...


@dataclass(frozen=True)
class ProcessLimits:
    """Time bounds for one run (seconds)."""

    timeout: float = 3600.0
    idle_timeout: float = 600.0
    # After stdout EOF, how long the process may take to exit (and vice versa for the pipes).
    exit_grace: float = 10.0
    # Between SIGTERM to the CLI and SIGKILL to every process of the phase when we stop it.
    kill_grace: float = 3.0
    # What the phase may make the server write (its output, its events), in bytes (0: no cap;
    # counted by the run, domain/output_budget.py).
    output_max_bytes: int = 0


@dataclass
class _Clock:
    started: float = field(default_factory=time.monotonic)
    last_activity: float = field(default_factory=time.monotonic)
    stdout_eof: float | None = None
    exited: float | None = None


class ProcessSupervisor:
    """Spawns and supervises one child; ``run()`` returns when it is over and its group is gone."""

    def __init__(
        self,
        argv: Sequence[str],
        *,
        cwd: Path,
        env: dict[str, str],
        sink: ProcessSink,
        limits: ProcessLimits,
        stdin_lines: Sequence[bytes] = (),
        keep_stdin_open: bool = False,
        on_spawn: Callable[[int], None] | None = None,
        scope: PhaseScope | None = None,
        spawn_off_loop: bool = True,
    ):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.sink = sink
        self.limits = limits
        self._stdin_lines = list(stdin_lines)
        self._keep_stdin_open = keep_stdin_open
        self._on_spawn = on_spawn
        self.scope = scope if scope is not None else subreaper_scope()
        # How the shim starts: from a worker thread (the default), or on the loop (the old way,
        # the benchmarks' baseline); process/spawner.py.
        self._spawn = spawn_in_thread if spawn_off_loop else spawn_on_loop
        self._proc: ChildProcess | None = None
        # The started shim, its status pipe and its exit task, between the start and run()'s loop.
        self._started: tuple[ChildProcess, _ShimStatus, asyncio.Task] | None = None
        # Whether the process was started ahead and adopted by a phase (a warm start).
        self.warm = False
        # A prestarted process's own sandbox and private home (process/sandbox/), which the phase
        # that adopts it takes over; removed with the process if no phase does.
        self.sandbox = None
        self._child_pid: int | None = None
        self.final_stats: ScopeStats | None = None
        self._stop_cause: EndCause | None = None
        self._stop_detail = ""
        self._stop_event = asyncio.Event()
        self._watchdog_held = 0
        self._clock = _Clock()
        self._stderr_tail = bytearray()
        self._stderr_bytes = 0
        self._stdout_bytes = 0
        self._stdin_lock = asyncio.Lock()

    def set_stdin_lines(self, lines: Sequence[bytes]) -> None:
        """The lines written to stdin right after the spawn (before ``run()``)."""
        self._stdin_lines = list(lines)

    @property
    def stdin_lines(self) -> list[bytes]:
        return list(self._stdin_lines)

    @property
    def pid(self) -> int | None:
        """The CLI's pid (not the shim's), once it started."""
        return self._child_pid

    async def stop_processes(self) -> None:
        """Hard pause: stops every process of the phase (SIGSTOP), returning once they are stopped."""
        await self.scope.stop_all()

    async def continue_processes(self) -> None:
        """Ends a hard pause (SIGCONT to every process of the phase)."""
        await self.scope.continue_all()

    def request_stop(self, cause: EndCause, detail: str = "") -> None:
        """Asks the run to end now with this cause and reason (the first request wins)."""
        if self._stop_cause is None:
            self._stop_cause = cause
            self._stop_detail = detail or "stop requested"
        self._stop_event.set()

    def hold_watchdog(self, held: bool) -> None:
        """Suspends the idle watchdog while the phase waits for a person (a pause or approval)."""
        self._watchdog_held += 1 if held else -1
        self._clock.last_activity = time.monotonic()

    async def write_stdin(self, line: bytes) -> bool:
        """Writes one line to the child's stdin; False if stdin is closed."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return False
        async with self._stdin_lock:
            try:
                proc.stdin.write(line if line.endswith(b"\n") else line + b"\n")
                await proc.stdin.drain()
            except (BrokenPipeError, ConnectionResetError):
                return False
        return True

    async def close_stdin(self) -> None:
        """Closes stdin so the CLI finishes its queued turns and exits (docs/claude-cli-protocol.md §3.5)."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return
        async with self._stdin_lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.close()
                await proc.stdin.wait_closed()

    async def prestart(self) -> str | None:
        """Starts the shim and the CLI ahead of ``run()`` (a warm start, process/warm_pool.py): None once
        the CLI is up and waits for its stdin, else why it did not start (the scope is then empty).

        ``on_spawn`` is not called here but when ``run()`` adopts the process.
        """
        return await self._start(notify=False)

    def adopt(self, *, sink: ProcessSink, limits: ProcessLimits, on_spawn: Callable[[int], None] | None) -> None:
        """Hands a prestarted process to a phase: where its output goes, its bounds, its spawn hook."""
        self.sink, self.limits, self._on_spawn = sink, limits, on_spawn
        self.warm = True

    async def discard(self) -> None:
        """Ends a prestarted process that will not run (pool drain): everything in its scope."""
        started, self._started = self._started, None
        if started is None:
            return
        proc, status, shim_exit = started
        await self._end_scope(proc, shim_exit)
        status.close()
        self.scope.close()
        if self.sandbox is not None:
            self.sandbox.home.remove()

    @property
    def prestarted_alive(self) -> bool:
        """Whether a prestarted CLI still waits (neither it nor its shim has exited)."""
        return self._started is not None and self._proc is not None and self._proc.returncode is None \
            and not self._started[2].done() and self.scope.shim_pid is not None

    async def _start(self, *, notify: bool) -> str | None:
        """Spawns the shim (off the loop) and waits for the CLI's start; None on success (state kept
        in ``_started``), else why not, with the scope emptied. Raises CancelledError having ended
        whatever it started."""
        scope = self.scope
        spawn = self._spawn(scope, self.argv, self.cwd, self.env)
        spawned, error, cancelled = await finish_spawn(asyncio.ensure_future(spawn))
        if spawned is None:
            scope.close()
            if cancelled:
                raise asyncio.CancelledError
            if isinstance(error, ContainmentError):
                return f"cannot contain the phase: {error}"
            if isinstance(error, OSError):
                return f"cannot start the phase shim: {error.strerror or error}"
            raise error  # type: ignore[misc]
        proc, read_fd = spawned.proc, spawned.status_fd
        self._proc = proc
        if cancelled:  # cancelled while the shim was being started: end it, leave nothing behind
            shim_exit = asyncio.create_task(_wait_exit(proc), name="shim-exit")
            await self._end_scope(proc, shim_exit)
            os.close(read_fd)
            scope.close()
            raise asyncio.CancelledError
        if notify and self._on_spawn is not None:
            self._on_spawn(proc.pid)
        shim_exit = asyncio.create_task(_wait_exit(proc), name="shim-exit")
        status = await _ShimStatus.open(read_fd)
        try:
            started = await self._await_start(status, shim_exit)
        except BaseException:
            await self._end_scope(proc, shim_exit)
            status.close()
            scope.close()
            raise
        if isinstance(started, str):
            await self._end_scope(proc, shim_exit)
            status.close()
            scope.close()
            return started
        self._child_pid = started
        self._started = (proc, status, shim_exit)
        return None

    async def run(self) -> ProcessExit:
        """Runs the child to its end; never raises for child behaviour, always empties its scope.

        A prestarted child (``prestart``) is adopted as it is; else the shim is spawned now.
        """
        start_ns = time.time_ns()
        scope = self.scope
        if self._started is None:
            failed = await self._start(notify=True)
            if failed is not None:
                return ProcessExit(
                    cause=EndCause.SPAWN_FAILED,
                    exit_code=None,
                    exit_signal=None,
                    stdout_eof=False,
                    detail=failed,
                    start_ns=start_ns,
                    end_ns=time.time_ns(),
                )
        elif self._on_spawn is not None:
            try:
                self._on_spawn(self._started[0].pid)
            except BaseException:
                await self.discard()  # the adopted process must not outlive a phase that failed here
                raise
        proc, status, shim_exit = self._started  # type: ignore[misc]
        self._started = None
        self._clock = _Clock()
        out_task = asyncio.create_task(self._read_stdout(proc), name="stdout")
        err_task = asyncio.create_task(self._read_stderr(proc), name="stderr")
        wait_task = asyncio.create_task(status.child_exit(shim_exit), name="wait")
        in_task = asyncio.create_task(self._feed_stdin(), name="stdin")
        cause = EndCause.EXITED
        detail = ""
        try:
            cause, detail = await self._watch(out_task, wait_task)
            if cause is not EndCause.OUT_OF_MEMORY and (oom := scope.oom_kills()):
                cause, detail = EndCause.OUT_OF_MEMORY, self._oom_detail(oom)
        except asyncio.CancelledError:
            cause, detail = EndCause.CANCELLED, "the supervising task was cancelled"
            raise
        finally:
            graceful = cause not in (EndCause.EXITED, EndCause.OUT_OF_MEMORY, EndCause.PROCESS_LIMIT)
            await self._terminate(proc, wait_task, shim_exit, graceful=graceful)
            stdout_eof = await self._drain(out_task)
            await self._drain(err_task)
            in_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await in_task
            status.close()
            self.final_stats = scope.close()
            # Let asyncio finish the transport now that the pipes are closed or abandoned.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
        code = wait_task.result() if wait_task.done() and not wait_task.cancelled() else None
        return ProcessExit(
            cause=cause,
            exit_code=code if code is not None and code >= 0 else None,
            exit_signal=_signal_name(-code) if code is not None and code < 0 else None,
            stdout_eof=stdout_eof,
            detail=detail,
            start_ns=start_ns,
            end_ns=time.time_ns(),
            pid=self._child_pid,
            stdout_bytes=self._stdout_bytes,
            stderr_bytes=self._stderr_bytes,
            stderr_tail=bytes(self._stderr_tail).decode("utf-8", "replace"),
        )

    async def _await_start(self, status: _ShimStatus, shim_exit: asyncio.Task) -> int | str:
        """The CLI's pid once the shim started it, or why it did not."""
        try:
            line = await asyncio.wait_for(status.readline(), SHIM_START_LIMIT_S)
        except TimeoutError:
            return f"the phase shim did not start {self.argv[0]} within {SHIM_START_LIMIT_S:g} s"
        word, _, rest = line.partition(" ")
        if word == "spawned" and rest.isdigit():
            return int(rest)
        if word == "error":
            return rest
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(asyncio.shield(shim_exit), 5.0)
        code = shim_exit.result() if shim_exit.done() else None
        return f"the phase shim exited (code {code}) before it started {self.argv[0]}"

    def _oom_detail(self, kills: int) -> str:
        limit = self.scope.limits.memory_bytes
        what = f"its memory limit of {limit // (1024 * 1024)} MiB" if limit else "the memory available to it"
        return f"the kernel's OOM killer killed {kills} process(es) of the phase at {what}"

    def _limit_hit(self, watch_oom: bool, watch_pids: bool) -> tuple[EndCause, str] | None:
        """An OOM kill or a fork refused at the process limit in the phase's cgroup, else None."""
        if watch_oom and (oom := self.scope.oom_kills()):
            return EndCause.OUT_OF_MEMORY, self._oom_detail(oom)
        if watch_pids and (refused := self.scope.pids_refused()):
            return EndCause.PROCESS_LIMIT, (
                f"the phase reached its limit of {self.scope.limits.pids} processes (pids_limit): the "
                f"kernel refused {refused} fork(s); it was stopped")
        return None

    async def _watch(self, out_task: asyncio.Task, wait_task: asyncio.Task) -> tuple[EndCause, str]:
        lim, clk = self.limits, self._clock
        stop_wait = asyncio.create_task(self._stop_event.wait())
        watch_oom = self.scope.limits.memory_bytes is not None and self.scope.cgroup is not None
        # The same check, as often, for forks refused at the process limit (a fork bomb runs on,
        # each fork failing, until it is stopped).
        watch_pids = self.scope.limits.pids is not None and self.scope.cgroup is not None
        next_oom_check = time.monotonic() + OOM_CHECK_S
        try:
            while True:
                now = time.monotonic()
                if self._stop_cause is not None:
                    return self._stop_cause, self._stop_detail
                if (watch_oom or watch_pids) and now >= next_oom_check:
                    next_oom_check = now + OOM_CHECK_S
                    if (hit := self._limit_hit(watch_oom, watch_pids)) is not None:
                        return hit
                if out_task.done() and wait_task.done():
                    # A last look: a fork refused (or an OOM kill) since the previous check still
                    # says how the phase ended, however late this loop ran (a loaded host).
                    return self._limit_hit(watch_oom, watch_pids) or (EndCause.EXITED, "")
                if out_task.done() and clk.stdout_eof is None:
                    clk.stdout_eof = now
                if wait_task.done() and clk.exited is None:
                    clk.exited = now
                if now - clk.started >= lim.timeout:
                    return EndCause.TIMEOUT, f"the phase ran longer than its {lim.timeout:g} s timeout"
                if (
                    clk.stdout_eof is not None
                    and not wait_task.done()
                    and now - clk.stdout_eof >= lim.exit_grace
                ):
                    return EndCause.NO_EXIT_AFTER_EOF, (
                        f"stdout closed but the process did not exit within {lim.exit_grace:g} s"
                    )
                if clk.exited is not None and not out_task.done() and now - clk.exited >= lim.exit_grace:
                    return EndCause.PIPES_HELD_AFTER_EXIT, (
                        f"the process exited but a leftover child held stdout open for {lim.exit_grace:g} s"
                    )
                idle_for = now - clk.last_activity
                if not self._watchdog_held and not wait_task.done() and idle_for >= lim.idle_timeout:
                    return (
                        EndCause.IDLE_TIMEOUT,
                        f"no output for {lim.idle_timeout:g} s while the process lived",
                    )
                deadlines = [clk.started + lim.timeout]
                if not self._watchdog_held:
                    deadlines.append(clk.last_activity + lim.idle_timeout)
                if clk.stdout_eof is not None:
                    deadlines.append(clk.stdout_eof + lim.exit_grace)
                if clk.exited is not None:
                    deadlines.append(clk.exited + lim.exit_grace)
                if watch_oom or watch_pids:
                    deadlines.append(next_oom_check)
                pending = {t for t in (out_task, wait_task, stop_wait) if not t.done()}
                timeout = max(0.0, min(deadlines) - now) + 0.005
                await asyncio.wait(pending, timeout=timeout, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop_wait.cancel()

    async def _feed_stdin(self) -> None:
        for line in self._stdin_lines:
            if not await self.write_stdin(line):
                return
        if not self._keep_stdin_open:
            await self.close_stdin()

    async def _read_stdout(self, proc: ChildProcess) -> None:
        assert proc.stdout is not None
        while True:
            await self.sink.room()
            chunk = await proc.stdout.read(STDOUT_CHUNK)
            if not chunk:
                break
            self._clock.last_activity = time.monotonic()
            self._stdout_bytes += len(chunk)
            self.sink.on_stdout(chunk)

    async def _read_stderr(self, proc: ChildProcess) -> None:
        assert proc.stderr is not None
        pending = bytearray()
        dropping = False
        while True:
            await self.sink.room()
            chunk = await proc.stderr.read(STDOUT_CHUNK)
            if not chunk:
                break
            self._clock.last_activity = time.monotonic()
            self._stderr_bytes += len(chunk)
            self._stderr_tail += chunk
            if len(self._stderr_tail) > STDERR_TAIL_MAX:
                del self._stderr_tail[: len(self._stderr_tail) - STDERR_TAIL_MAX]
            start = 0
            while (nl := chunk.find(b"\n", start)) != -1:
                if not dropping:
                    pending += chunk[start:nl]
                    self._emit_stderr(pending)
                pending.clear()
                dropping = False
                start = nl + 1
            if not dropping:
                pending += chunk[start:]
                if len(pending) > STDERR_LINE_MAX:
                    # A very long stderr line: report its head once, skip the rest of it.
                    self.sink.on_stderr_line(bytes(pending[:STDERR_LINE_MAX]), True)
                    pending.clear()
                    dropping = True
        if pending and not dropping:
            self._emit_stderr(pending)

    def _emit_stderr(self, line: bytearray) -> None:
        text = bytes(line).rstrip(b"\r")
        if text.strip():
            self.sink.on_stderr_line(text[:STDERR_LINE_MAX], len(text) > STDERR_LINE_MAX)

    async def _terminate(
        self,
        proc: ChildProcess,
        wait_task: asyncio.Task,
        shim_exit: asyncio.Task,
        graceful: bool,
    ) -> None:
        """Ends every process of the phase: SIGTERM to the CLI's group (if graceful and it is not
        stopped by a hard pause), then, after kill_grace, the whole scope."""
        child = self._child_pid
        if graceful and child is not None and not wait_task.done() and not self.scope.stopped:
            _signal_cli(child, signal.SIGTERM)  # the CLI ends its own tools on SIGTERM
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(wait_task), self.limits.kill_grace)
        await self._end_scope(proc, shim_exit)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(wait_task), 5.0)

    async def _end_scope(self, proc: ChildProcess, shim_exit: asyncio.Task) -> None:
        """Kills whatever is left in the scope; the shim then exits (or is killed)."""
        killed = await self.scope.kill()
        if killed:
            log.debug("killed leftover processes", extra={"fields": {"count": killed, "pid": proc.pid}})
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(shim_exit), 5.0)
        if not shim_exit.done():
            with contextlib.suppress(ProcessLookupError):
                proc.kill()
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(shim_exit), 5.0)

    async def _drain(self, task: asyncio.Task) -> bool:
        """Waits briefly for a reader to reach EOF after the group is gone; True if it did."""
        try:
            await asyncio.wait_for(asyncio.shield(task), 2.0)
            return True
        except TimeoutError:
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
            return False
        except Exception:
            log.exception("pipe reader failed")
            return False


async def _wait_exit(proc: ChildProcess) -> int:
    """Resolves when the child exits, even while a grandchild still holds its pipes.

    ``Process.wait()`` only returns once every pipe is closed (CPython 3.11), which would hide
    the exit behind a leftover background job; a pidfd becomes readable at exit without reaping.
    """
    loop = asyncio.get_running_loop()
    try:
        fd = os.pidfd_open(proc.pid)
    except (OSError, AttributeError):  # already reaped, or no pidfd support: poll instead
        fd = None
    try:
        if fd is not None:
            exited = asyncio.Event()
            loop.add_reader(fd, exited.set)
            try:
                await exited.wait()
            finally:
                loop.remove_reader(fd)
        # The child watcher reaps the process and sets returncode moments after the pidfd fires.
        while proc.returncode is None:  # noqa: ASYNC110 - asyncio offers no event for this
            await asyncio.sleep(0.01)
        return proc.returncode
    finally:
        if fd is not None:
            os.close(fd)


def _signal_cli(pid: int, sig: signal.Signals) -> None:
    """Signals the CLI's process group, which the shim made for it (``pid`` leads it); in the
    sandbox the CLI alone (process/sandbox/launch.py): its group is bubblewrap's, whose monitor
    must not die first (the whole sandbox is killed with it)."""
    with contextlib.suppress(ProcessLookupError, PermissionError):
        if os.getpgid(pid) == pid:
            os.killpg(pid, sig)
        else:
            os.kill(pid, sig)


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


class _ShimStatus:
    """The shim's status pipe: ``spawned <pid>``, ``exited <code>`` or ``error <text>`` lines."""

    def __init__(self, reader: asyncio.StreamReader, transport: asyncio.BaseTransport):
        self._reader = reader
        self._transport = transport

    @classmethod
    async def open(cls, fd: int) -> _ShimStatus:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader()
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), os.fdopen(fd, "rb", buffering=0)
        )
        return cls(reader, transport)

    async def readline(self) -> str:
        """The next line, or "" once the shim is gone."""
        try:
            return (await self._reader.readline()).decode("utf-8", "replace").strip()
        except (ValueError, asyncio.LimitOverrunError):
            return ""

    async def child_exit(self, shim_exit: asyncio.Task) -> int:
        """The CLI's exit status (negative: the signal that killed it).

        If the shim dies without reporting it (it was killed with the CLI), the shim's own status
        stands in.
        """
        while line := await self.readline():
            word, _, rest = line.partition(" ")
            if word == "exited":
                with contextlib.suppress(ValueError):
                    return int(rest)
        return await asyncio.shield(shim_exit)

    def close(self) -> None:
        self._transport.close()
