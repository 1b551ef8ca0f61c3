"""Starts a phase's command inside its sandbox; the phase shim's side of ``process/sandbox``.

Standard library only: the phase shim imports it. The shim forks a child that, before it execs:

1. makes its own process group (as the shim's ``posix_spawn`` did without a sandbox);
2. with a private network (``netns.py``), enters a new user + network namespace and hands the
   listening sockets of the allowed ports back to the shim, which relays them (``relay.py``);
3. without bubblewrap, drops every capability (``capabilities.py``);
4. enters a Landlock domain (``landlock.py``): scopes always; file and TCP rules only without
   bubblewrap (a domain that handles file access may not mount, and bubblewrap must);
5. without bubblewrap, loads the seccomp filter (``seccomp_load.py``); bubblewrap loads the same
   bytes itself (``--seccomp``) right before it execs the CLI;
6. execs bubblewrap (which builds the mount, PID, IPC and UTS namespaces and execs the CLI) or
   the CLI itself.

Failures before the exec come back on a socket pair (close-on-exec, so EOF means the exec
happened). With bubblewrap, the CLI is the first child of bubblewrap's init inside the PID
namespace; its host pid is found from bubblewrap's ``--info-fd`` report and ``/proc``.
"""

from __future__ import annotations

import json
import os
import select
import signal
import socket
import time

if __name__.startswith("helix_runner."):
    from helix_runner.process.sandbox import capabilities, landlock, netns, relay, seccomp_load
else:  # imported by the shim run by path
    from sandbox import capabilities, landlock, netns, relay, seccomp_load  # type: ignore[no-redef]

# How long bubblewrap may take to build the sandbox and start the CLI.
START_LIMIT_S = 30.0


class SandboxStartError(Exception):
    """The sandbox could not be set up, or its command not started; one line for a person."""


class Started:
    """The shim's child (bubblewrap or the CLI) and the CLI's host pid."""

    def __init__(self, pid: int, cli_pid: int, bwrap: bool):
        self.pid = pid
        self.cli_pid = cli_pid
        self.bwrap = bwrap

    def exit_code(self, code: int) -> int:
        """The CLI's status from its child's: bubblewrap reports a CLI killed by signal N as 128 + N."""
        if self.bwrap and 128 < code < 160:
            return -(code - 128)
        return code


def _child(spec: dict, command: list[str], env: dict[str, str], report: socket.socket, info_w: int,
           seccomp_fd: int, program: bytes, reset: tuple[int, ...]) -> None:
    os.setpgid(0, 0)
    ports = [int(p) for p in spec.get("ports", ())]
    fds: list[int] = []
    if spec.get("netns"):
        fds = [s.detach() for s in netns.enter(ports)]
    bwrap = spec.get("bwrap") or []
    if not bwrap:
        capabilities.drop_all()
    abi = int(spec.get("landlock_abi", 0))
    if abi:
        landlock.restrict(abi, fs=None if bwrap else [(p, int(r)) for p, r in spec.get("fs", ())],
                          tcp_ports=ports if spec.get("tcp") and not bwrap else None, scoped=True)
    if program and not bwrap:
        if not abi:
            import ctypes

            if ctypes.CDLL(None, use_errno=True).prctl(landlock.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
                raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        seccomp_load.load(program)
    socket.send_fds(report, [b"ok"], fds)
    for fd in fds:
        os.close(fd)
    if bwrap:
        argv = [*bwrap, "--info-fd", str(info_w)]
        os.set_inheritable(info_w, True)
        if seccomp_fd >= 0:
            argv += ["--seccomp", str(seccomp_fd)]
            os.set_inheritable(seccomp_fd, True)
        argv += ["--", *command]
    else:
        argv = list(command)
    for sig in reset:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.execvpe(argv[0], argv, env)


def start(spec: dict, command: list[str], env: dict[str, str], reset: tuple[int, ...]) -> Started:
    """Forks, confines and execs; returns once the CLI runs. ``reset``: signals whose disposition
    the child restores to the default (Python ignores some; the shim blocks others)."""
    use_bwrap = bool(spec.get("bwrap"))
    program = b""
    if spec.get("seccomp"):
        with open(spec["seccomp"], "rb") as f:
            program = f.read()
    seccomp_fd = -1
    if use_bwrap and program:
        seccomp_fd = os.memfd_create("helix-seccomp", os.MFD_CLOEXEC)
        os.write(seccomp_fd, program)
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
    info_r, info_w = os.pipe2(os.O_CLOEXEC) if use_bwrap else (-1, -1)
    mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits
        mine.close()
        try:
            _child(spec, command, env, theirs, info_w, seccomp_fd, program, reset)
            raise OSError("exec returned")
        except BaseException as exc:  # noqa: BLE001 - reported to the shim, which reports it to the server
            text = getattr(exc, "strerror", None) or str(exc) or type(exc).__name__
            what = command[0] if isinstance(exc, FileNotFoundError) else ""
            try:
                theirs.send(f"error {what + ': ' if what else ''}{text}".encode()[:2000])
            finally:
                os._exit(127)
    theirs.close()
    for fd in (info_w, seccomp_fd):
        if fd >= 0:
            os.close(fd)
    try:
        msg, fds, _, _ = socket.recv_fds(mine, 4096, 64)
        if msg != b"ok":
            _reap(pid)
            raise SandboxStartError(msg.decode("utf-8", "replace").removeprefix("error ") or "the sandbox child died")
        listeners = [socket.socket(fileno=fd) for fd in fds]
        relay.start(listeners, [int(p) for p in spec.get("ports", ())])
        after = mine.recv(4096)  # EOF: the exec happened (the socket is close-on-exec)
        if after:
            _reap(pid)
            raise SandboxStartError(after.decode("utf-8", "replace").removeprefix("error "))
    finally:
        mine.close()
    if not use_bwrap:
        return Started(pid, pid, False)
    try:
        init = _bwrap_child_pid(info_r, pid)
        cli = _first_child(init, pid)
    except SandboxStartError:
        _reap(pid)
        raise
    finally:
        os.close(info_r)
    return Started(pid, cli, True)


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _bwrap_child_pid(info_r: int, bwrap_pid: int) -> int:
    """The pid (host) of bubblewrap's first child, its init in the new PID namespace."""
    data = b""
    deadline = time.monotonic() + START_LIMIT_S
    while time.monotonic() < deadline:
        ready, _, _ = select.select([info_r], [], [], 0.5)
        if not ready:
            continue
        chunk = os.read(info_r, 4096)
        if not chunk:
            break
        data += chunk
        try:
            return int(json.loads(data)["child-pid"])
        except (ValueError, KeyError):
            continue
    raise SandboxStartError(f"bubblewrap did not start the sandbox (its exit: {_status(bwrap_pid)})")


def _status(pid: int) -> str:
    """How bubblewrap exited, without reaping it (the shim's loop reports its status)."""
    try:
        info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
    except ChildProcessError:
        return "gone"
    if info is None:
        return "still running"
    return f"code {info.si_status}" if info.si_code == os.CLD_EXITED else f"signal {info.si_status}"


def _ppid(pid: int) -> int | None:
    try:
        with open(f"/proc/{pid}/stat", "rb") as f:
            stat = f.read()
    except OSError:
        return None
    fields = stat[stat.rfind(b")") + 2 :].split()
    return int(fields[1]) if fields[0] != b"Z" else None


def _first_child(init: int, bwrap_pid: int) -> int:
    """The CLI's host pid: the child bubblewrap's init forks once the sandbox is built. Host pids
    are handed out in order, so it is almost always just above ``init``; all of /proc is
    searched only when it is not."""
    with open("/proc/sys/kernel/pid_max") as f:
        pid_max = int(f.read())
    deadline = time.monotonic() + START_LIMIT_S
    pause = 0.0002
    rounds = 0
    while time.monotonic() < deadline:
        for offset in range(1, 65):
            candidate = (init + offset) % pid_max
            if candidate and _ppid(candidate) == init:
                return candidate
        rounds += 1
        if rounds % 50 == 0:
            for name in os.listdir("/proc"):
                if name.isdigit() and _ppid(int(name)) == init:
                    return int(name)
        if _ppid(init) is None:
            # The sandbox ended before its command was seen: the command ran and exited already, or
            # bubblewrap failed to build it (its message is on stderr); its exit status says which.
            return init
        time.sleep(pause)
        pause = min(pause * 2, 0.01)
    raise SandboxStartError(f"the sandboxed command did not start within {START_LIMIT_S:g} s")
