"""Starts a phase's shim from a worker thread, so the event loop never waits for a fork/exec.

``asyncio.create_subprocess_exec`` runs ``subprocess.Popen`` on the loop's thread, and ``Popen``
returns only once the child has exec'd (it reads the child's error pipe until exec closes it).
When many phases start together the children compete for the CPU with the shims started just
before them, so each ``Popen`` waits for its child to be scheduled: measured here, 50 phases
started at once blocked the loop for 0.75-1 s in one stretch (about 15 ms a spawn; one spawn
alone: 4 ms), and every live stream stalled with it (benchmarks/README.md, "Spawning off the
event loop"). Here the cgroup directories are made, the status pipe is opened and ``Popen`` runs
in a small thread pool; the loop only connects the pipes once the child is there.

``spawn_in_thread`` and ``spawn_on_loop`` (the old way, kept as the benchmark's baseline,
``spawn_off_loop = false``) return objects with the same surface the supervisor uses: ``pid``,
``stdin`` (a ``StreamWriter``), ``stdout`` / ``stderr`` (``StreamReader``), ``returncode``,
``wait()`` and ``kill()``.

Cancellation: the thread finishes its fork/exec whatever the caller does, so ``spawn_*`` is run
as a task the caller awaits to its end (``finish_spawn``) and then ends the process through its
scope, like a cancellation while waiting for the shim's first status line.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import subprocess
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Protocol

from helix_runner.process.containment import PhaseScope

# Spawns run in their own pool, not the loop's default executor (which other work shares); four
# matches the default admission limit of phases starting at once (``max_starting_phases``).
# The shim's parent-death signal (PR_SET_PDEATHSIG) fires when the *thread* that forked it ends,
# not the process: a ThreadPoolExecutor's workers never exit before the executor shuts down, and
# this one is a module global that is never shut down, so they live as long as the server.
_POOL_SIZE = 4
_pool: ThreadPoolExecutor | None = None


class ChildProcess(Protocol):
    """What the supervisor needs of a started shim (``asyncio.subprocess.Process`` has it too)."""

    pid: int
    stdin: asyncio.StreamWriter | None
    stdout: asyncio.StreamReader | None
    stderr: asyncio.StreamReader | None

    @property
    def returncode(self) -> int | None: ...

    async def wait(self) -> int: ...

    def kill(self) -> None: ...


@dataclass(frozen=True)
class Spawned:
    """A started shim and the read end of its status pipe (the caller owns both)."""

    proc: ChildProcess
    status_fd: int


def _executor() -> ThreadPoolExecutor:
    global _pool
    if _pool is None:
        _pool = ThreadPoolExecutor(_POOL_SIZE, thread_name_prefix="helix-spawn")
    return _pool


def _popen(scope: PhaseScope, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> tuple[subprocess.Popen, int]:
    """In a worker thread: the scope's cgroup, the status pipe, the shim. Raises OSError / ContainmentError."""
    scope.create()
    with _status_pipe() as (read_fd, write_fd):
        popen = subprocess.Popen(
            scope.command(argv, write_fd),
            cwd=cwd,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            start_new_session=True,
            pass_fds=(write_fd,),
            bufsize=0,
        )
    scope.attach(popen.pid)
    return popen, read_fd


@contextlib.contextmanager
def _status_pipe() -> Iterator[tuple[int, int]]:
    """The shim's status pipe around its start: the write end is the child's alone afterwards (closed
    here either way); the read end is the caller's, closed here only if the start failed."""
    read_fd, write_fd = os.pipe2(os.O_CLOEXEC)
    try:
        yield read_fd, write_fd
    except BaseException:
        os.close(read_fd)
        raise
    finally:
        os.close(write_fd)


class _WriteProtocol(asyncio.streams.FlowControlMixin):
    """The stdin pipe's protocol: flow control for ``drain()`` and a waiter for ``wait_closed()``."""

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        super().__init__(loop=loop)
        self._closed = loop.create_future()

    def connection_lost(self, exc: Exception | None) -> None:
        super().connection_lost(exc)
        if not self._closed.done():
            self._closed.set_result(None)

    def _get_close_waiter(self, stream: asyncio.StreamWriter) -> asyncio.Future:
        return self._closed


class ThreadSpawnedProcess:
    """A ``Popen`` child whose pipes are connected to the loop; reaped through its pidfd."""

    def __init__(self, popen: subprocess.Popen) -> None:
        self._popen = popen
        self.pid = popen.pid
        self.stdin: asyncio.StreamWriter | None = None
        self.stdout: asyncio.StreamReader | None = None
        self.stderr: asyncio.StreamReader | None = None
        self._transports: list[asyncio.BaseTransport] = []

    async def _connect(self) -> None:
        loop = asyncio.get_running_loop()
        popen = self._popen
        transport, protocol = await loop.connect_write_pipe(lambda: _WriteProtocol(loop), popen.stdin)
        self._transports.append(transport)
        self.stdin = asyncio.StreamWriter(transport, protocol, None, loop)
        readers = []
        for pipe in (popen.stdout, popen.stderr):
            reader = asyncio.StreamReader(limit=2**16, loop=loop)
            transport, _ = await loop.connect_read_pipe(lambda r=reader: asyncio.StreamReaderProtocol(r), pipe)
            self._transports.append(transport)
            readers.append(reader)
        self.stdout, self.stderr = readers

    @property
    def returncode(self) -> int | None:
        """The exit status once reaped (negative: the signal); reaps a zombie without blocking."""
        return self._popen.poll()

    async def wait(self) -> int:
        """Waits for the exit (pidfd; polling where there is none) and reaps the process."""
        loop = asyncio.get_running_loop()
        fd = None
        with contextlib.suppress(OSError, AttributeError):
            fd = os.pidfd_open(self.pid)
        try:
            if fd is not None:
                exited = asyncio.Event()
                loop.add_reader(fd, exited.set)
                try:
                    while (code := self._popen.poll()) is None:
                        await exited.wait()
                        exited.clear()
                finally:
                    loop.remove_reader(fd)
                return code
            while (code := self._popen.poll()) is None:  # noqa: ASYNC110 - no pidfd: poll
                await asyncio.sleep(0.01)
            return code
        finally:
            if fd is not None:
                os.close(fd)

    def kill(self) -> None:
        if self._popen.returncode is None:
            self._popen.kill()

    def close_pipes(self) -> None:
        """Closes the loop's side of the pipes (a spawn abandoned before the supervisor took over)."""
        for transport in self._transports:
            transport.close()
        for pipe in (self._popen.stdin, self._popen.stdout, self._popen.stderr):
            if pipe is not None:
                with contextlib.suppress(OSError):
                    pipe.close()


async def spawn_in_thread(scope: PhaseScope, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> Spawned:
    """Makes the scope and starts the shim in a worker thread; the loop only connects the pipes.

    Raises ``ContainmentError`` (the scope) or ``OSError`` (the shim did not start).
    """
    loop = asyncio.get_running_loop()
    popen, status_fd = await loop.run_in_executor(_executor(), _popen, scope, argv, cwd, env)
    proc = ThreadSpawnedProcess(popen)
    try:
        await proc._connect()
    except BaseException:
        # Not cancellable in practice (the caller shields this task); a failed connect ends the child.
        proc.kill()
        proc.close_pipes()
        os.close(status_fd)
        raise
    return Spawned(proc, status_fd)


async def spawn_on_loop(scope: PhaseScope, argv: Sequence[str], cwd: Path, env: dict[str, str]) -> Spawned:
    """The way phases started before ``spawn_in_thread``: the fork/exec on the loop's thread."""
    scope.create()
    with _status_pipe() as (read_fd, write_fd):
        proc = await asyncio.create_subprocess_exec(
            *scope.command(argv, write_fd),
            cwd=cwd,
            env=env,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            start_new_session=True,
            pass_fds=(write_fd,),
        )
    scope.attach(proc.pid)
    return Spawned(proc, read_fd)


async def finish_spawn(task: asyncio.Task[Spawned]) -> tuple[Spawned | None, BaseException | None, bool]:
    """Awaits a spawn task to its end even if the caller is cancelled meanwhile.

    Returns (what it started or None, the error it raised or None, whether the caller was
    cancelled): a cancelled caller must still end what was started, then re-raise.
    """
    cancelled = False
    while True:
        try:
            spawned = await asyncio.shield(task)
            return spawned, None, cancelled
        except asyncio.CancelledError:
            if task.done():  # the spawn task itself was cancelled (not by us): nothing started
                return None, asyncio.CancelledError(), True
            cancelled = True  # the caller was: the fork/exec finishes in its thread, wait for it
        except Exception as exc:  # noqa: BLE001 - handed to the caller, which decides
            return None, exc, cancelled
