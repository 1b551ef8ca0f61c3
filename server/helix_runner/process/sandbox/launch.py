"""Starts a phase's command inside its sandbox; the phase shim's side of ``process/sandbox``.

Standard library only, and only modules that cost the shim nothing or next to nothing to import
(``marshal``, ``_socket``; ``ctypes`` is loaded already): the shim's start is part of every
phase's (benchmarks/bench_sandbox.py). The shim forks a child that, before it execs:

1. makes its own process group (as the shim's ``posix_spawn`` did without a sandbox);
2. with a private network (``netns.py``), enters a new user + network namespace and hands the
   listening sockets of the allowed ports back to the shim, with a socket through which the shim
   brings the namespace's loopback up while bubblewrap works; the shim relays them (``relay.py``);
3. without bubblewrap, drops every capability (``capabilities.py``); with a process limit the
   server's cgroups cannot enforce (``nproc``), sets RLIMIT_NPROC, which the kernel counts per user
   namespace (since 5.14), so in the phase's own namespace it bounds the phase's tasks alone;
4. enters a Landlock domain (``landlock.py``): scopes always; file and TCP rules only without
   bubblewrap (a domain that handles file access may not mount, and bubblewrap must);
5. without bubblewrap, loads the seccomp filter (``seccomp_load.py``); bubblewrap loads the same
   bytes itself (``--seccomp``) right before it execs the command;
6. execs bubblewrap (which builds the mount, PID, IPC and UTS namespaces) or the command itself.

Failures before the exec come back on a socket pair (close-on-exec, so EOF means the exec
happened). Under bubblewrap the command is started by a one-line ``/bin/sh`` (``WRAPPER``) which:

- gives the command the server's stdin and stdout, which bubblewrap never held: they reach it
  as fds 3 and 4, bubblewrap's own are ``/dev/null`` (its monitor and PID 1 keep their stdio for
  the sandbox's life, so the server would never see the CLI close stdout);
- reports its pid before it execs the command: it writes a byte on a unix socket whose shim end
  has ``SO_PASSCRED``, so the kernel attaches the writer's pid, translated into the shim's PID
  namespace: the CLI's host pid, with no ``/proc`` search and no polling. EOF on that socket
  without the byte means bubblewrap failed (its message is on stderr, which it shares).
"""

from __future__ import annotations

import _signal as signal  # the C module: `signal` imports enum, ~3 ms of every phase start
import _socket
import ctypes
import marshal
import os
import sys
import time

if __name__.startswith("helix_runner."):
    from helix_runner.process.sandbox import landlock, netns
else:  # imported by the shim run by path
    from sandbox import landlock, netns  # type: ignore[no-redef]

# How long bubblewrap may take to build the sandbox and start the command.
START_LIMIT_S = 30.0
# The fds the wrapper finds the server's stdin and stdout on, and the pid report socket on
# (POSIX sh takes single-digit fds only).
STDIN_FD, STDOUT_FD, REPORT_FD = 3, 4, 5
WRAPPER = 'printf . >&5 && exec "$@" <&3 >&4 3<&- 4>&- 5>&-'
SO_PASSCRED = 16
SCM_CREDENTIALS = 2
MSG_CMSG_CLOEXEC = 0x40000000
F_DUPFD_CLOEXEC = 1030
RLIMIT_NPROC = 6
# Set by the phase shim when it records its start-up marks (HELIX_SHIM_PROFILE).
MARK = None


def _mark(name: str, at: int | None = None) -> None:
    if MARK is not None:
        MARK(name, at)


class SandboxStartError(Exception):
    """The sandbox could not be set up, or its command not started; one line for a person."""


class Started:
    """The shim's child (bubblewrap or the command), the command's host pid and process group,
    and the network to relay once the shim has reported the pid (``relay``)."""

    def __init__(self, pid: int, cli_pid: int, bwrap: bool, listeners: list[int], ports: list[int]):
        self.pid = pid
        self.cli_pid = cli_pid
        self.bwrap = bwrap
        self.listeners = listeners
        self.ports = ports

    def signal(self, sig: int) -> None:
        """Forwards ``sig`` to the command: its process group without bubblewrap (the child made
        it), the command alone under it (its group is bubblewrap's, whose monitor must live on:
        the sandbox dies with it). ProcessLookupError if it is gone."""
        if self.bwrap:
            os.kill(self.cli_pid, sig)
        else:
            os.killpg(self.pid, sig)

    def exit_code(self, code: int) -> int:
        """The command's status from its child's: bubblewrap reports a command killed by signal N
        as 128 + N."""
        if self.bwrap and 128 < code < 160:
            return -(code - 128)
        return code

    def relay(self) -> None:
        """Starts relaying the phase's allowed ports to the host's (threads; ``relay.py``)."""
        if self.listeners:
            if __name__.startswith("helix_runner."):
                from helix_runner.process.sandbox import relay
            else:
                from sandbox import relay  # type: ignore[no-redef]
            relay.start(self.listeners, self.ports)


def describe(exc: BaseException) -> str:
    """One line for a person: an OSError's text with the file it names (an exec's command, a
    missing spec), else the exception's own text."""
    if isinstance(exc, OSError) and exc.strerror:
        return f"{exc.filename}: {exc.strerror}" if exc.filename else exc.strerror
    return str(exc) or type(exc).__name__


def load_spec(path: str) -> dict:
    """The spec ``phase_sandbox.PhaseSandbox`` wrote (marshal: no import, and the same interpreter
    writes and reads it)."""
    with open(path, "rb") as f:
        spec = marshal.loads(f.read())
    if not isinstance(spec, dict):
        raise ValueError(f"{path} holds no sandbox spec")
    return spec


def _libc() -> ctypes.CDLL:
    return ctypes.CDLL(None, use_errno=True)


def _high(fd: int) -> int:
    """``fd`` moved to a number of 10 or above (clear of the wrapper's 3, 4, 5), close-on-exec."""
    copy = _libc().fcntl(fd, F_DUPFD_CLOEXEC, 10)
    err = ctypes.get_errno()
    os.close(fd)
    if copy < 0:
        raise OSError(err, "fcntl(F_DUPFD_CLOEXEC)")
    return copy


def _child(spec: dict, command: list[str], env: dict[str, str], report: _socket.socket, creds: int,
           seccomp_fd: int, program: bytes, reset: tuple[int, ...]) -> None:
    marks = [b"child=%d" % time.time_ns()] if MARK is not None else None
    os.setpgid(0, 0)
    ports = [int(p) for p in spec.get("ports", ())]
    fds: list[int] = []
    if spec.get("netns"):
        control, listeners = netns.enter(ports)
        fds = [control, *listeners]
        if marks is not None:
            marks.append(b"child netns=%d" % time.time_ns())
    nproc = int(spec.get("nproc", 0))
    if nproc:  # cur and max: the phase can lower it, never raise it
        limit = (ctypes.c_ulong * 2)(nproc, nproc)
        if _libc().setrlimit(RLIMIT_NPROC, limit) != 0:
            raise OSError(ctypes.get_errno(), "setrlimit(RLIMIT_NPROC)")
    bwrap = spec.get("bwrap") or []
    if not bwrap:  # imported before Landlock may hide this package
        if __name__.startswith("helix_runner."):
            from helix_runner.process.sandbox import capabilities, seccomp_load
        else:
            from sandbox import capabilities, seccomp_load  # type: ignore[no-redef]
        capabilities.drop_all()
    abi = int(spec.get("landlock_abi", 0))
    if abi:
        landlock.restrict(abi, fs=None if bwrap else [(p, int(r)) for p, r in spec.get("fs", ())],
                          tcp_ports=ports if spec.get("tcp") and not bwrap else None, scoped=True)
    if program and not bwrap:
        if not abi and _libc().prctl(landlock.PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
            raise OSError(ctypes.get_errno(), "prctl(PR_SET_NO_NEW_PRIVS) failed")
        seccomp_load.load(program)
    if marks is not None:
        marks.append(b"child confined=%d" % time.time_ns())
    said = b"\n".join([b"ok", *marks]) if marks is not None else b"ok"
    report.sendmsg([said], [(_socket.SOL_SOCKET, _socket.SCM_RIGHTS, _ints(fds))] if fds else [])
    for fd in fds:
        os.close(fd)
    if bwrap:
        # The server's stdin and stdout go to the wrapper only (see the module's docstring).
        os.dup2(0, STDIN_FD)
        os.dup2(1, STDOUT_FD)
        os.dup2(creds, REPORT_FD)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        argv = [*bwrap]
        if seccomp_fd >= 0:
            argv += ["--seccomp", str(seccomp_fd)]
            os.set_inheritable(seccomp_fd, True)
        argv += ["--", "/bin/sh", "-c", WRAPPER, "sh", *command]
    else:
        argv = list(command)
    for sig in reset:
        signal.signal(sig, signal.SIG_DFL)
    signal.pthread_sigmask(signal.SIG_SETMASK, ())
    os.execvpe(argv[0], argv, env)


def _ints(fds: list[int]) -> bytes:
    return b"".join(fd.to_bytes(4, sys.byteorder, signed=True) for fd in fds)


def _fds(ancillary: list) -> list[int]:
    out: list[int] = []
    for level, kind, data in ancillary:
        if level == _socket.SOL_SOCKET and kind == _socket.SCM_RIGHTS:
            usable = len(data) - len(data) % 4
            out += [int.from_bytes(data[i:i + 4], sys.byteorder, signed=True) for i in range(0, usable, 4)]
    return out


def start(spec: dict, command: list[str], env: dict[str, str], reset: tuple[int, ...]) -> Started:
    """Forks, confines and execs; returns once the command is about to run (under bubblewrap) or
    runs. ``reset``: signals whose disposition the child restores to the default (Python ignores
    some; the shim blocks others). Raises SandboxStartError or OSError."""
    use_bwrap = bool(spec.get("bwrap"))
    program = b""
    if spec.get("seccomp"):
        with open(spec["seccomp"], "rb") as f:
            program = f.read()
    seccomp_fd = -1
    if use_bwrap and program:
        seccomp_fd = _high(os.memfd_create("helix-seccomp", os.MFD_CLOEXEC))
        os.write(seccomp_fd, program)
        os.lseek(seccomp_fd, 0, os.SEEK_SET)
    mine, theirs = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
    creds_mine, creds_theirs = None, -1
    if use_bwrap:
        creds_mine, creds_child = _socket.socketpair(_socket.AF_UNIX, _socket.SOCK_SEQPACKET)
        creds_mine.setsockopt(_socket.SOL_SOCKET, SO_PASSCRED, 1)
        creds_theirs = _high(creds_child.detach())
    theirs_fd = _high(theirs.detach())
    theirs = _socket.socket(fileno=theirs_fd)
    _mark("prepared")
    pid = os.fork()
    if pid == 0:  # pragma: no cover - the child execs or exits
        mine.close()
        if creds_mine is not None:
            creds_mine.close()
        try:
            _child(spec, command, env, theirs, creds_theirs, seccomp_fd, program, reset)
            raise OSError("exec returned")
        except BaseException as exc:  # noqa: BLE001 - reported to the shim, which reports it to the server
            try:
                theirs.send(f"error {describe(exc)}".encode()[:2000])
            finally:
                os._exit(127)
    _mark("forked")
    theirs.close()
    for fd in (creds_theirs, seccomp_fd):
        if fd >= 0:
            os.close(fd)
    listeners: list[int] = []
    try:
        msg, ancillary, _, _ = mine.recvmsg(4096, 4096, MSG_CMSG_CLOEXEC)
        fds = _fds(ancillary)
        if msg.startswith(b"ok\n"):  # with the child's own marks (HELIX_SHIM_PROFILE)
            msg, *child_marks = msg.split(b"\n")
            for line in child_marks:
                name, _, at = line.decode().rpartition("=")
                _mark(name, int(at))
        if msg != b"ok":
            for fd in fds:
                os.close(fd)
            _reap(pid)
            raise SandboxStartError(msg.decode("utf-8", "replace").removeprefix("error ") or "the sandbox child died")
        _mark("child ready")
        if spec.get("netns") and fds:
            control, listeners = fds[0], fds[1:]
            try:
                netns.loopback_up(control)
            finally:
                os.close(control)
            _mark("loopback up")
        if not use_bwrap:
            after = mine.recv(4096)  # EOF: the exec happened (the socket is close-on-exec)
            if after:
                _reap(pid)
                raise SandboxStartError(after.decode("utf-8", "replace").removeprefix("error "))
            return Started(pid, pid, False, listeners, [int(p) for p in spec.get("ports", ())])
        assert creds_mine is not None
        cli = _reported_pid(creds_mine, mine, pid)
        _mark("pid reported")
        return Started(pid, cli, True, listeners, [int(p) for p in spec.get("ports", ())])
    except BaseException:
        for fd in listeners:
            os.close(fd)
        raise
    finally:
        mine.close()
        if creds_mine is not None:
            creds_mine.close()


def _reported_pid(creds: _socket.socket, report: _socket.socket, bwrap_pid: int) -> int:
    """The host pid the wrapper reported (see the module's docstring); SandboxStartError if
    bubblewrap or the child failed first."""
    creds.settimeout(START_LIMIT_S)
    try:
        msg, ancillary, _, _ = creds.recvmsg(16, 256)
    except TimeoutError:
        raise SandboxStartError(f"the sandboxed command did not start within {START_LIMIT_S:g} s") from None
    for level, kind, data in ancillary:
        if msg and level == _socket.SOL_SOCKET and kind == SCM_CREDENTIALS and len(data) >= 4:
            return int.from_bytes(data[:4], sys.byteorder, signed=True)  # struct ucred: pid, uid, gid
    # No report: the child failed before bubblewrap ran (its error is on the other socket), or
    # bubblewrap failed to build the sandbox (its message went to stderr).
    report.setblocking(False)
    try:
        said = report.recv(4096)
    except (BlockingIOError, OSError):
        said = b""
    if said:
        _reap(bwrap_pid)
        raise SandboxStartError(said.decode("utf-8", "replace").removeprefix("error "))
    raise SandboxStartError(f"bubblewrap could not build the sandbox (its exit: {_status(bwrap_pid)}; "
                            "its message is on the phase's stderr)")


def _reap(pid: int) -> None:
    try:
        os.waitpid(pid, 0)
    except ChildProcessError:
        pass


def _status(pid: int) -> str:
    """How bubblewrap exited (waiting up to a second for it), without reaping it (the shim's loop
    reports its status)."""
    deadline = time.monotonic() + 1.0
    while True:
        try:
            info = os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT)
        except ChildProcessError:
            return "gone"
        if info is not None:
            return f"code {info.si_status}" if info.si_code == os.CLD_EXITED else f"signal {info.si_status}"
        if time.monotonic() > deadline:
            return "still running"
        time.sleep(0.01)
