"""Starts programs in Landlock domains for the server: a single-threaded helper process of its own.

The server's git runs in a helper sandbox (``process/host_git.py``). Where bubblewrap cannot run,
that sandbox is a Landlock domain, entered by the program's process between fork and exec. The
server cannot do that itself: it is multi-threaded (gRPC, asyncio's workers), and a child forked
from it that runs Python before exec crashes or deadlocks on a lock another thread held (seen: a
segmentation fault in the child, gRPC's fork handlers skipped). This helper has one thread; it is
started once, with none of the server's variables, and forks each program from itself.

Protocol, over a ``SOCK_SEQPACKET`` socket pair (one message each way, boundaries kept):

- a request: ``marshal`` of ``{"argv", "cwd", "env", "abi", "fs"}`` with four descriptors attached
  (``SCM_RIGHTS``): a reply socket, then the program's stdin, stdout and stderr;
- on the reply socket the helper answers ``marshal`` of the exit status (``-N``: killed by signal
  N) when the program ends. When the server closes its end first (a timeout, or it gave up), the
  helper kills the program's process group. When the request socket closes (the server is gone),
  it kills every program it started and exits.

A program that cannot be confined never runs: its child writes why on the program's stderr and
exits with ``CONFINE_FAILED``. Standard library only (run by path as ``python -E -s -S -B``).
"""

from __future__ import annotations

import marshal
import os
import select
import signal
import socket
import sys
import warnings  # noqa: F401 - os.execvpe imports it; in the domain, Python's own files are out of reach

if __name__.startswith("helix_runner."):
    from helix_runner.process.sandbox import landlock
else:  # run by path: its own directory is on sys.path
    import landlock  # type: ignore[no-redef]

CONFINE_FAILED = 126
MAX_REQUEST = 1 << 20
FDS_PER_REQUEST = 4


def _child(request: dict, stdio: list[int]) -> None:
    """In the forked child: the program's stdio, its own session, the domain, then exec."""
    try:
        for target, fd in enumerate(stdio):
            os.dup2(fd, target)
        os.closerange(3, 65536)
        os.setsid()  # a process group of its own: killed whole on a timeout
        os.chdir(request["cwd"])
        landlock.restrict(int(request["abi"]), fs=[(str(p), int(r)) for p, r in request["fs"]], tcp_ports=[])
        os.execvpe(request["argv"][0], request["argv"], request["env"])
    except BaseException as exc:  # noqa: BLE001 - nothing may run unconfined, whatever went wrong
        try:
            os.write(2, f"cannot confine {request.get('argv', ['?'])[0]}: {exc}\n".encode())
        finally:
            os._exit(CONFINE_FAILED)


def _status(raw: int) -> int:
    return -os.WTERMSIG(raw) if os.WIFSIGNALED(raw) else os.WEXITSTATUS(raw)


def serve(control: socket.socket) -> None:
    """Answers requests on ``control`` until it closes."""
    poller = select.poll()
    poller.register(control.fileno(), select.POLLIN)
    by_pidfd: dict[int, tuple[int, socket.socket]] = {}  # pidfd -> (pid, reply socket)
    by_reply: dict[int, int] = {}  # reply socket fd -> pid
    try:
        while True:
            for fd, events in poller.poll():
                if fd == control.fileno():
                    try:
                        data, fds, _, _ = socket.recv_fds(control, MAX_REQUEST, FDS_PER_REQUEST)
                    except OSError:
                        return
                    if not data:
                        return
                    _start(data, fds, poller, by_pidfd, by_reply)
                elif fd in by_pidfd:
                    pid, reply = by_pidfd.pop(fd)
                    poller.unregister(fd)
                    os.close(fd)
                    _, raw = os.waitpid(pid, 0)
                    if by_reply.pop(reply.fileno(), None) is not None:
                        poller.unregister(reply.fileno())
                    try:
                        reply.send(marshal.dumps(_status(raw)))
                    except OSError:
                        pass
                    reply.close()
                elif fd in by_reply and events & (select.POLLHUP | select.POLLIN | select.POLLERR):
                    # The server closed its end: it no longer waits for this program.
                    pid = by_reply.pop(fd)
                    poller.unregister(fd)
                    try:
                        os.killpg(pid, signal.SIGKILL)
                    except OSError:
                        pass
    finally:
        for pid, _ in by_pidfd.values():
            try:
                os.killpg(pid, signal.SIGKILL)
            except OSError:
                pass


def _start(data: bytes, fds: list[int], poller: select.poll, by_pidfd: dict, by_reply: dict) -> None:
    """Forks one program for a request; a malformed request only closes what came with it."""
    if len(fds) != FDS_PER_REQUEST:
        for fd in fds:
            os.close(fd)
        return
    reply = socket.socket(fileno=fds[0])
    try:
        request = marshal.loads(data)
        pid = os.fork()
    except (ValueError, EOFError, TypeError, OSError):
        for fd in fds[1:]:
            os.close(fd)
        reply.close()
        return
    if pid == 0:
        _child(request, fds[1:])
    for fd in fds[1:]:
        os.close(fd)
    pidfd = os.pidfd_open(pid)
    by_pidfd[pidfd] = (pid, reply)
    by_reply[reply.fileno()] = pid
    poller.register(pidfd, select.POLLIN)
    poller.register(reply.fileno(), select.POLLIN | select.POLLHUP)


if __name__ == "__main__":
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # the server's Ctrl-C ends it through the socket
    serve(socket.socket(fileno=int(sys.argv[1])))
