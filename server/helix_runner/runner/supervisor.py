"""Runs one CLI child process and ends it in bounded time, whatever it does.

The supervisor knows processes, not events: stdout chunks and stderr lines go to a sink as they
arrive, and the run ends with the exit facts (``ProcessExit``) from which the phase status is
decided (``domain.phase_outcome``). Hang-proofing, each with its own bounded wait:

- overall timeout and an idle watchdog (no output while the process lives);
- stdout at EOF but the process does not exit (e.g. after its final result, claude-code#25629);
- the process exited but a grandchild (a Bash tool's background job) still holds the pipes;
- an external stop (cancel, server drain).

The child runs in its own session / process group, which is always killed at the end so no tool
process outlives its phase (notes/grpc-python-service.md §3.9). A grandchild that calls
``setsid`` itself escapes the group; that is a documented limit.
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

log = logging.getLogger(__name__)

STDOUT_CHUNK = 64 * 1024
STDERR_LINE_MAX = 4 * 1024
STDERR_TAIL_MAX = 16 * 1024


class ProcessSink(Protocol):
    """Receives the child's output as it arrives. Must not block (it runs on the event loop)."""

    def on_stdout(self, chunk: bytes) -> None: ...

    def on_stderr_line(self, line: bytes, truncated: bool) -> None: ...


@dataclass(frozen=True)
class ProcessLimits:
    """Time bounds for one run (seconds)."""

    timeout: float = 3600.0
    idle_timeout: float = 600.0
    # After stdout EOF, how long the process may take to exit (and vice versa for the pipes).
    exit_grace: float = 10.0
    # Between SIGTERM and SIGKILL when we stop the process group.
    kill_grace: float = 3.0


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
    ):
        self.argv = list(argv)
        self.cwd = cwd
        self.env = env
        self.sink = sink
        self.limits = limits
        self._stdin_lines = list(stdin_lines)
        self._keep_stdin_open = keep_stdin_open
        self._on_spawn = on_spawn
        self._proc: asyncio.subprocess.Process | None = None
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
    def pid(self) -> int | None:
        return self._proc.pid if self._proc else None

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
        """Closes stdin so the CLI finishes its queued turns and exits (notes §3.5)."""
        proc = self._proc
        if proc is None or proc.stdin is None or proc.stdin.is_closing():
            return
        async with self._stdin_lock:
            with contextlib.suppress(BrokenPipeError, ConnectionResetError):
                proc.stdin.close()
                await proc.stdin.wait_closed()

    async def run(self) -> ProcessExit:
        """Runs the child to its end; never raises for child behaviour, always reaps the group."""
        start_ns = time.time_ns()
        try:
            self._proc = await asyncio.create_subprocess_exec(
                *self.argv,
                cwd=self.cwd,
                env=self.env,
                stdin=asyncio.subprocess.PIPE,
                stdout=asyncio.subprocess.PIPE,
                stderr=asyncio.subprocess.PIPE,
                start_new_session=True,
            )
        except OSError as exc:
            return ProcessExit(
                cause=EndCause.SPAWN_FAILED, exit_code=None, exit_signal=None, stdout_eof=False,
                detail=f"cannot start {self.argv[0]}: {exc.strerror or exc}", start_ns=start_ns,
                end_ns=time.time_ns(),
            )
        self._clock = _Clock()
        if self._on_spawn is not None:
            self._on_spawn(self._proc.pid)
        proc = self._proc
        out_task = asyncio.create_task(self._read_stdout(proc), name="stdout")
        err_task = asyncio.create_task(self._read_stderr(proc), name="stderr")
        wait_task = asyncio.create_task(_wait_exit(proc), name="wait")
        in_task = asyncio.create_task(self._feed_stdin(), name="stdin")
        cause = EndCause.EXITED
        detail = ""
        try:
            cause, detail = await self._watch(out_task, wait_task)
        except asyncio.CancelledError:
            cause, detail = EndCause.CANCELLED, "the supervising task was cancelled"
            raise
        finally:
            await self._terminate_group(proc, wait_task, graceful=cause is not EndCause.EXITED)
            stdout_eof = await self._drain(out_task)
            await self._drain(err_task)
            in_task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await in_task
            # Let asyncio finish the transport now that the pipes are closed or abandoned.
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(proc.wait(), 1.0)
        code = proc.returncode
        return ProcessExit(
            cause=cause,
            exit_code=code if code is not None and code >= 0 else None,
            exit_signal=signal.Signals(-code).name if code is not None and code < 0 else None,
            stdout_eof=stdout_eof,
            detail=detail,
            start_ns=start_ns,
            end_ns=time.time_ns(),
            pid=proc.pid,
            stdout_bytes=self._stdout_bytes,
            stderr_bytes=self._stderr_bytes,
            stderr_tail=bytes(self._stderr_tail).decode("utf-8", "replace"),
        )

    async def _watch(self, out_task: asyncio.Task, wait_task: asyncio.Task) -> tuple[EndCause, str]:
        lim, clk = self.limits, self._clock
        stop_wait = asyncio.create_task(self._stop_event.wait())
        try:
            while True:
                now = time.monotonic()
                if self._stop_cause is not None:
                    return self._stop_cause, self._stop_detail
                if out_task.done() and wait_task.done():
                    return EndCause.EXITED, ""
                if out_task.done() and clk.stdout_eof is None:
                    clk.stdout_eof = now
                if wait_task.done() and clk.exited is None:
                    clk.exited = now
                if now - clk.started >= lim.timeout:
                    return EndCause.TIMEOUT, f"the phase ran longer than its {lim.timeout:g} s timeout"
                if clk.stdout_eof is not None and not wait_task.done() and now - clk.stdout_eof >= lim.exit_grace:
                    return EndCause.NO_EXIT_AFTER_EOF, (
                        f"stdout closed but the process did not exit within {lim.exit_grace:g} s"
                    )
                if clk.exited is not None and not out_task.done() and now - clk.exited >= lim.exit_grace:
                    return EndCause.PIPES_HELD_AFTER_EXIT, (
                        f"the process exited but a leftover child held stdout open for {lim.exit_grace:g} s"
                    )
                idle_for = now - clk.last_activity
                if not self._watchdog_held and not wait_task.done() and idle_for >= lim.idle_timeout:
                    return EndCause.IDLE_TIMEOUT, f"no output for {lim.idle_timeout:g} s while the process lived"
                deadlines = [clk.started + lim.timeout]
                if not self._watchdog_held:
                    deadlines.append(clk.last_activity + lim.idle_timeout)
                if clk.stdout_eof is not None:
                    deadlines.append(clk.stdout_eof + lim.exit_grace)
                if clk.exited is not None:
                    deadlines.append(clk.exited + lim.exit_grace)
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

    async def _read_stdout(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stdout is not None
        while chunk := await proc.stdout.read(STDOUT_CHUNK):
            self._clock.last_activity = time.monotonic()
            self._stdout_bytes += len(chunk)
            self.sink.on_stdout(chunk)

    async def _read_stderr(self, proc: asyncio.subprocess.Process) -> None:
        assert proc.stderr is not None
        pending = bytearray()
        dropping = False
        while chunk := await proc.stderr.read(STDOUT_CHUNK):
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

    async def _terminate_group(self, proc: asyncio.subprocess.Process, wait_task: asyncio.Task, graceful: bool) -> None:
        """Ends every process of the child's group: SIGTERM, then SIGKILL after kill_grace."""
        pgid = proc.pid  # start_new_session makes the child the leader of its own group
        if graceful and not wait_task.done():
            _signal_group(pgid, signal.SIGTERM)
            with contextlib.suppress(asyncio.TimeoutError):
                await asyncio.wait_for(asyncio.shield(wait_task), self.limits.kill_grace)
        # Whatever is left in the group (the child, or grandchildren after a normal exit) goes.
        _signal_group(pgid, signal.SIGKILL)
        with contextlib.suppress(asyncio.TimeoutError):
            await asyncio.wait_for(asyncio.shield(wait_task), 5.0)

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


async def _wait_exit(proc: asyncio.subprocess.Process) -> int:
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


def _signal_group(pgid: int, sig: signal.Signals) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, sig)
