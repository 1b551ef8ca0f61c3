"""The per-phase shim: the server's direct child and the parent of the CLI, for the phase's lifetime.

The CLI runs every Bash tool command in a new session (``setsid``), so a process group cannot
hold a phase; what a tool double-forks or ``nohup``s re-parents to init. The shim makes the
phase's processes a tree again: it is a child subreaper (``PR_SET_CHILD_SUBREAPER``), so
orphans of the CLI re-parent to it and stay enumerable as its descendants, and it reaps them.
It also:

- joins the phase's cgroups (``--join``, a ``cgroup.procs`` file per hierarchy) before it starts
  the CLI, so the CLI and everything it starts are in them from their first instruction;
- starts the CLI with the shim's stdin/stdout/stderr (the server's pipes), in its own process
  group, then lets go of those pipes so EOF on them means what it meant without a shim;
- reports on ``--status-fd``: ``spawned <pid>``, then ``exited <code>`` (negative: killed by
  that signal) when the CLI exits, or ``error <text>`` if it could not start it;
- with ``--sandbox <spec file>``, starts the CLI inside the phase's sandbox instead
  (``sandbox/launch.py``: namespaces through bubblewrap, Landlock, seccomp, a private network
  whose allowed ports it relays once it has reported the CLI's host pid);
- with ``--fsize N``, sets ``RLIMIT_FSIZE`` to N bytes for itself and so for every process of the
  phase (the workspace cap's per-file part, ``phases/workspace_cap.py``);
- forwards SIGTERM / SIGINT / SIGHUP to the CLI's process group (sandboxed: to the CLI);
- on SIGUSR1, which is also its parent-death signal (``PR_SET_PDEATHSIG``, so a server killed
  with ``kill -9`` still ends its phases), SIGKILLs every descendant until none is left;
- exits once the CLI has exited and it has no child left, with the CLI's exit status.

It imports only the standard library, ``procfs`` and, when sandboxed, ``sandbox/`` (run as ``python -E -s -S -B phase_shim.py``,
which keeps its start-up to a few tens of milliseconds, see benchmarks/bench_phase_shim.py; the
sandbox's share is in benchmarks/bench_sandbox.py, whose ``--profile`` reads the marks this
module records when ``HELIX_SHIM_PROFILE`` names a file).
"""

from __future__ import annotations

import time

_T0 = time.time_ns()

import _signal as signal  # noqa: E402 - the C module: `signal` imports enum, ~3 ms of every phase start
import ctypes  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402

_MARKS: list[tuple[str, int]] = [("start", _T0), ("imports", time.time_ns())]


def mark(name: str, at: int | None = None) -> None:
    """Notes when start-up reached ``name`` (kept only for HELIX_SHIM_PROFILE, see bench_sandbox)."""
    _MARKS.append((name, time.time_ns() if at is None else at))

if __package__:
    from helix_runner.process import procfs
else:  # run by path: its own directory is sys.path[0]
    import procfs  # type: ignore[no-redef]

SANDBOX_ERROR_PREFIX = "cannot start the sandbox: "

PR_SET_PDEATHSIG = 1
RLIMIT_FSIZE = 1
PR_SET_CHILD_SUBREAPER = 36
# "End everything": the server's request and the signal the kernel sends when the server dies.
END_SIGNAL = signal.SIGUSR1
FORWARDED = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
WATCHED = {signal.SIGCHLD, END_SIGNAL, *FORWARDED}
# Exit codes of the shim itself (the CLI's own status is relayed on the status pipe).
EXIT_USAGE = 2
EXIT_SETUP_FAILED = 125
EXIT_SPAWN_FAILED = 127
EXIT_ORPHANED = 126
END_DEADLINE_S = 10.0


class _Status:
    """The status pipe to the server; writes never fail the shim (the server may be gone)."""

    def __init__(self, fd: int):
        self.fd = fd

    def send(self, line: str) -> None:
        if self.fd < 0:
            return
        try:
            os.write(self.fd, line.encode("utf-8", "replace")[:4000] + b"\n")
        except OSError:
            self.fd = -1


def _prctl(libc: ctypes.CDLL, option: int, value: int) -> None:
    if libc.prctl(option, value, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl({option}): {os.strerror(err)}")


def _parse(argv: list[str]) -> tuple[int, int, list[str], list[str], list[str], str | None, int]:
    status_fd, parent, joins, markers, sandbox, fsize = -1, 0, [], [], None, 0
    i = 0
    while i < len(argv) and argv[i] != "--":
        flag, value = argv[i], argv[i + 1] if i + 1 < len(argv) else None
        if value is None:
            raise ValueError(f"{flag} needs a value")
        if flag == "--status-fd":
            status_fd = int(value)
        elif flag == "--parent":
            parent = int(value)
        elif flag == "--join":
            joins.append(value)
        elif flag == "--marker":
            markers.append(value)
        elif flag == "--sandbox":
            sandbox = value
        elif flag == "--fsize":
            fsize = int(value)
        else:
            raise ValueError(f"unknown option {flag}")
        i += 2
    command = argv[i + 1 :]
    if not command:
        raise ValueError("no command after --")
    return status_fd, parent, joins, markers, command, sandbox, fsize


def _reap(child: int, status: _Status, state: dict) -> bool:
    """Reaps every exited child; returns False once the shim has no child at all."""
    while True:
        try:
            pid, raw = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return False
        if pid == 0:
            return True
        if pid == child:
            code = os.waitstatus_to_exitcode(raw)
            decode = state.get("decode")
            if decode is not None:
                code = decode(code)
            state["code"] = code
            status.send(f"exited {code}")


def _end_everything(child: int, status: _Status, state: dict) -> None:
    """SIGKILLs every descendant until none is left (a killed parent forks no more)."""
    me = os.getpid()
    deadline = time.monotonic() + END_DEADLINE_S
    while time.monotonic() < deadline:
        victims = procfs.descendants(me)
        if not victims:
            break
        for pid in victims:
            try:
                os.kill(pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
        _reap(child, status, state)
        time.sleep(0.005)


def main(argv: list[str]) -> int:
    try:
        status_fd, parent, joins, markers, command, sandbox, fsize = _parse(argv)
    except ValueError as exc:
        print(f"phase_shim: {exc}", file=sys.stderr)
        return EXIT_USAGE
    status = _Status(status_fd)
    if status_fd >= 0:
        os.set_inheritable(status_fd, False)  # the CLI must not hold the server's status pipe
    # Signals are taken with sigtimedwait, never by handlers; block them before anything can arrive.
    signal.pthread_sigmask(signal.SIG_BLOCK, WATCHED)
    try:
        libc = ctypes.CDLL(None, use_errno=True)
        _prctl(libc, PR_SET_CHILD_SUBREAPER, 1)
        _prctl(libc, PR_SET_PDEATHSIG, int(END_SIGNAL))
    except OSError as exc:
        status.send(f"error cannot contain the phase: {exc.strerror or exc}")
        return EXIT_SETUP_FAILED
    if parent and os.getppid() != parent:
        return EXIT_ORPHANED  # the server died before the death signal was armed
    for path in joins:
        try:
            with open(path, "w") as f:
                f.write(str(os.getpid()))
        except OSError as exc:
            status.send(f"error cannot join cgroup {path}: {exc.strerror or exc}")
            return EXIT_SETUP_FAILED
    if fsize > 0:  # inherited by every process of the phase; cur and max, so none can raise it
        if libc.setrlimit(RLIMIT_FSIZE, (ctypes.c_ulong * 2)(fsize, fsize)) != 0:
            status.send(f"error cannot limit the phase's file size: {os.strerror(ctypes.get_errno())}")
            return EXIT_SETUP_FAILED
    env = dict(os.environ)
    trace = env.pop("HELIX_SHIM_PROFILE", None)
    for marker in markers:
        name, _, value = marker.partition("=")
        env[name] = value
    reset = (signal.SIGPIPE, signal.SIGXFSZ, *WATCHED)
    started = None
    if sandbox is not None:
        if __package__:
            from helix_runner.process.sandbox import launch
        else:
            from sandbox import launch  # type: ignore[no-redef]
        mark("import launch")
        launch.MARK = mark
        try:
            started = launch.start(launch.load_spec(sandbox), command, env, reset)
        except (OSError, ValueError, EOFError, launch.SandboxStartError) as exc:
            status.send(f"error {SANDBOX_ERROR_PREFIX}{launch.describe(exc)}")
            return EXIT_SPAWN_FAILED
        child, reported = started.pid, started.cli_pid
    else:
        try:
            # Own process group, default signal mask and dispositions (Python ignores SIGPIPE / SIGXFSZ).
            child = os.posix_spawnp(command[0], command, env, setpgroup=0, setsigmask=(), setsigdef=reset)
        except OSError as exc:
            status.send(f"error cannot start {command[0]}: {exc.strerror or exc}")
            return EXIT_SPAWN_FAILED
        reported = child
    status.send(f"spawned {reported}")
    mark("spawned")
    if trace:
        with open(trace, "w") as f:
            f.write("".join(f"{n}={t}\n" for n, t in _MARKS))
    if started is not None:
        started.relay()  # the phase's connections queue on the listeners until now
    # Let go of the server's pipes: stdout EOF must come when the CLI (and its tools) close them.
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        os.dup2(null, fd)
    os.close(null)

    # The CLI's exit code once known, and how to read it from the child's (bubblewrap's) status.
    state: dict = {"code": None, "decode": started.exit_code if started is not None else None}
    ending = False
    while True:
        if not _reap(child, status, state):
            break  # the CLI and every orphan have exited
        if ending:
            _end_everything(child, status, state)
            if not _reap(child, status, state):
                break
        info = signal.sigtimedwait(WATCHED, 1.0)
        if info is None or info.si_signo == signal.SIGCHLD:
            continue
        if info.si_signo == END_SIGNAL:
            ending = True
        elif state["code"] is None:
            try:
                if started is not None:
                    started.signal(info.si_signo)  # sandboxed: the CLI, not bubblewrap's monitor
                else:
                    os.killpg(child, info.si_signo)
            except ProcessLookupError:
                pass
    code = state["code"]
    if code is None:
        return EXIT_SETUP_FAILED
    return code if code >= 0 else 128 - code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
