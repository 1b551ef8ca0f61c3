"""The server's own git: every git command it runs on a phase's repository, run so that nothing the
repository names is executed with the server's authority.

A phase can write its repository's configuration and attributes (it is its workspace; inside a
phase they are read-only, but not in every mode, and not before this release). Git runs programs
named there in many ways: filters (clean, smudge, process), diff drivers and textconv, an external
diff, fsmonitor, hooks, pager, editor, ssh command, gpg programs with ``commit.gpgSign``, credential
helpers, askpass, merge drivers, protocol helpers, and ``include``/``includeIf`` can bring any of
them from another file (git-config(1), gitattributes(5); checked against git 2.39). Two layers:

1. **What git is told** (``command``, ``git_env``): no system or global config, no global
   attributes, every program-valued key this git knows set to nothing or to a harmless value in
   the command scope (which outranks the repository's config), and each filter, diff and merge
   driver the repository's config defines (``drivers``: read from ``git config --list``, which runs
   nothing) emptied by name. The overrides travel in ``GIT_CONFIG_COUNT``/``KEY_n``/``VALUE_n``
   (git 2.31+), not ``-c``: ``-c`` splits at the first ``=``, and a driver named ``x=y`` then
   escapes its override. The working tree is pinned (``GIT_WORK_TREE``) to the one the server
   found by its ``.git``: a repository's ``core.worktree`` would point the server's ``add -A``,
   ``reset --hard`` and ``clean`` at any directory of the host. Only the builtin commands the
   server uses run (``COMMANDS``), so no alias is ever looked up. An environment with none of the
   server's variables (its API key, tokens).
2. **Where git runs** (``GitBox``, else ``LandlockBox``): under bubblewrap with no network, the
   host read-only except what the command must write (the repository's git directory, a private
   index, a worktree being made or removed), the data dir, the server's home and secret files
   hidden, no capabilities, its processes gone with it. Without bubblewrap (most Kubernetes pods)
   git enters a Landlock domain instead: only the system's directories, the workspace roots, the
   phases' worktrees and the command's repository readable, only what the command must write
   writable, no TCP connect, no signal or abstract socket outside it. A key git grows after 2.39,
   or one missed above, then still runs nothing with the server's authority. With neither, only
   the first layer holds, and the server says so at start.

Costs (``benchmarks/bench_host_git.py``): one ``git config`` call (unboxed: it runs nothing) and,
boxed, one bubblewrap start per command (or, with Landlock, a fork instead of a vfork and two
system calls): about +2 ms a call with the overrides, +6 ms boxed.
"""

from __future__ import annotations

import logging
import marshal
import os
import selectors
import shlex
import shutil
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from helix_runner.process.sandbox import landlock

log = logging.getLogger(__name__)

GIT_TIMEOUT = 120.0

# Config keys whose value git runs (or that make it run one), set on the command line, which
# outranks every config file. An empty value unsets a program for git ("" = none); the booleans
# turn the feature off.
SAFE_CONFIG: tuple[tuple[str, str], ...] = (
    ("core.hooksPath", "/dev/null"),
    ("core.fsmonitor", "false"),
    ("core.untrackedCache", "false"),
    ("core.pager", "cat"),
    ("core.editor", "false"),
    ("sequence.editor", "false"),
    ("core.sshCommand", "false"),
    ("core.askPass", ""),
    ("core.gitProxy", ""),
    ("core.attributesFile", "/dev/null"),
    ("core.alternateRefsCommand", ""),
    ("core.quotePath", "false"),
    ("diff.external", ""),
    ("credential.helper", ""),
    ("gpg.program", "false"),
    ("gpg.openpgp.program", "false"),
    ("gpg.x509.program", "false"),
    ("gpg.ssh.program", "false"),
    ("gpg.ssh.defaultKeyCommand", ""),
    ("gpg.ssh.allowedSignersFile", "/dev/null"),
    ("commit.gpgSign", "false"),
    ("tag.gpgSign", "false"),
    ("push.gpgSign", "false"),
    ("tag.forceSignAnnotated", "false"),
    ("uploadpack.packObjectsHook", ""),
    ("protocol.allow", "never"),
    ("protocol.file.allow", "never"),
    ("protocol.ext.allow", "never"),
    ("submodule.recurse", "false"),
    ("fetch.recurseSubmodules", "false"),
    ("http.proxy", ""),
    ("maintenance.auto", "false"),
    ("gc.auto", "0"),
)

# The driver families a repository's config can define by name and its attributes select.
DRIVER_KEYS = {
    "filter": ("clean", "smudge", "process"),
    "diff": ("command", "textconv"),
    "merge": ("driver",),
}

# The git commands the server runs: builtins only (an alias never shadows a builtin, so none is
# looked up), each checked against the installed git by the tests.
COMMANDS = frozenset({
    "add", "branch", "cat-file", "clean", "commit", "commit-tree", "config", "diff", "for-each-ref", "hash-object",
    "ls-files", "read-tree", "reset", "rev-parse", "show-ref", "update-index", "update-ref", "worktree", "write-tree",
})

# The server's environment never reaches its git: only these, and git's own switches below.
PASSED_ENV = ("PATH", "LANG", "TZ")


def git_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """What git runs with: no variable of the server's (keys, tokens, GIT_* redirections), no
    system or global config or attributes, no prompt, no program to ask for anything."""
    env = {k: os.environ[k] for k in PASSED_ENV if k in os.environ}
    env.update(
        HOME="/nonexistent", XDG_CONFIG_HOME="/nonexistent", LC_ALL="C",
        GIT_CONFIG_NOSYSTEM="1", GIT_CONFIG_GLOBAL="/dev/null", GIT_ATTR_NOSYSTEM="1",
        GIT_TERMINAL_PROMPT="0", GIT_ASKPASS="false", SSH_ASKPASS="false", GIT_SSH_COMMAND="false",
        GIT_EDITOR="false", GIT_PAGER="cat", PAGER="cat", GIT_NO_REPLACE_OBJECTS="1",
        GIT_PROTOCOL_FROM_USER="0", GIT_ALLOW_PROTOCOL="",
    )
    env.update(extra or {})
    return env


def drivers(config_names: Iterable[str]) -> list[tuple[str, str]]:
    """``-c`` pairs emptying every filter, diff and merge driver the given config key names define.

    A key is ``family.<name>.key``; ``<name>`` may hold dots, so the family is the first part and
    the key the last."""
    pairs: dict[str, str] = {}
    for key in config_names:
        family, _, rest = key.partition(".")
        name, _, leaf = rest.rpartition(".")
        if family in DRIVER_KEYS and name:
            for program in DRIVER_KEYS[family]:
                pairs[f"{family}.{name}.{program}"] = ""
            if family == "filter":
                pairs[f"filter.{name}.required"] = "false"
    return sorted(pairs.items())


def command(args: Sequence[str], driver_pairs: Iterable[tuple[str, str]] = (), *, in_env: bool = True
            ) -> list[str]:
    """git's argv: the overrides are in the environment (``config_env``), or, for a git older than
    2.31, on the command line."""
    argv = ["git", "--no-pager"]
    if not in_env:
        for key, value in (*SAFE_CONFIG, *driver_pairs):
            argv += ["-c", f"{key}={value}"]
    return [*argv, *args]


def config_env(driver_pairs: Iterable[tuple[str, str]] = ()) -> dict[str, str]:
    """Every override as ``GIT_CONFIG_COUNT``/``GIT_CONFIG_KEY_n``/``GIT_CONFIG_VALUE_n``: the
    command scope like ``-c``, with the key and value apart (a subsection may hold ``=``)."""
    env: dict[str, str] = {}
    pairs = (*SAFE_CONFIG, *driver_pairs)
    for i, (key, value) in enumerate(pairs):
        env[f"GIT_CONFIG_KEY_{i}"], env[f"GIT_CONFIG_VALUE_{i}"] = key, value
    env["GIT_CONFIG_COUNT"] = str(len(pairs))
    return env


def subcommand(args: Sequence[str]) -> str:
    """The git command ``args`` run: the first word after the global options (``-c k=v`` pairs and
    ``--`` switches)."""
    i = 0
    while i < len(args):
        if args[i] == "-c":
            i += 2
        elif args[i].startswith("-"):
            i += 1
        else:
            return args[i]
    return ""


def found_work_tree(cwd: Path) -> Path | None:
    """The top of the working tree git would find from ``cwd`` by its ``.git`` (None outside any),
    found without running git."""
    for top in (cwd, *cwd.parents):
        if (top / ".git").exists():  # as git: a dangling symlink is no repository
            return top
    return None


def work_tree(cwd: Path) -> Path:
    """The top of the working tree holding ``cwd`` (``cwd`` itself outside any)."""
    return found_work_tree(cwd) or cwd


def _enclosing_git_dir(path: Path) -> Path | None:
    """The ``.git`` directory (a real one, no link) of the repository ``path`` lies in, if any."""
    for top in (path, *path.parents):
        dot = top / ".git"
        if dot.is_dir() and not dot.is_symlink():
            return dot.resolve()
        if dot.exists() or dot.is_symlink():
            return None
    return None


def git_dirs(cwd: Path) -> list[Path]:
    """The git directories a command in ``cwd`` writes: the repository's (its common directory),
    and a linked worktree's own; found from ``.git`` without running git (which would read config)."""
    for top in (cwd, *cwd.parents):
        dot = top / ".git"
        if dot.is_dir() and not dot.is_symlink():
            return [dot.resolve()]
        if dot.is_file() and not dot.is_symlink():
            try:
                text = dot.read_text(errors="replace").strip()
            except OSError:
                return []
            if not text.startswith("gitdir:"):
                return []
            own = (top / text.removeprefix("gitdir:").strip()).resolve()
            try:
                common = (own / (own / "commondir").read_text().strip()).resolve()
            except OSError:
                return [own]
            return [common] if own.is_relative_to(common) else [common, own]
    return []


@dataclass
class GitBox:
    """bubblewrap around the server's git: the host read-only, ``hidden`` paths (the data dir, the
    server's home and secret files) gone but for the ``visible`` ones inside them (the workspace
    roots: a repository may live in the server's home), no network, no capabilities."""

    bwrap: str
    hidden: tuple[Path, ...] = ()
    visible: tuple[Path, ...] = ()
    root: bool = field(default_factory=lambda: os.geteuid() == 0)

    def wrap(self, argv: Sequence[str], cwd: Path, writable: Iterable[Path], readable: Iterable[Path] = ()) -> list[str]:
        out = [self.bwrap, "--die-with-parent", "--new-session", "--unshare-all", "--ro-bind", "/", "/",
               "--dev", "/dev", "--proc", "/proc"]
        if self.root:  # root in the box must not remount what it was given read-only
            out += ["--cap-drop", "ALL"]
        out += self._hide(self.hidden)
        shown = [v for v in self.visible if v.is_dir() and any(v.is_relative_to(h) for h in self.hidden)]
        for path in shown:
            out += ["--ro-bind", str(path), str(path)]
        out += self._hide([h for h in self.hidden if any(h.is_relative_to(v) and h != v for v in shown)])
        for path in dict.fromkeys(Path(r) for r in readable):  # the working tree, where it lies in a hidden one
            if path.is_dir() and any(path.is_relative_to(h) for h in self.hidden):
                out += ["--ro-bind", str(path), str(path)]
        for path in dict.fromkeys(Path(w) for w in writable):
            if path.exists():
                out += ["--bind", str(path), str(path)]
        return [*out, "--chdir", str(cwd), "--", *argv]

    @staticmethod
    def _hide(paths: Iterable[Path]) -> list[str]:
        out: list[str] = []
        for path in paths:
            if path.is_dir():
                out += ["--tmpfs", str(path)]
            elif path.exists():
                out += ["--ro-bind", "/dev/null", str(path)]
        return out

    def works(self) -> str:
        """"" when a boxed ``true`` runs here, else why not (one line)."""
        try:
            proc = subprocess.run(self.wrap(["true"], Path("/"), ()), stdin=subprocess.DEVNULL,
                                  capture_output=True, timeout=10, check=False)
        except (OSError, subprocess.TimeoutExpired) as exc:
            return str(exc)
        if proc.returncode != 0:
            return proc.stderr.decode("utf-8", "replace").strip()[:300] or f"exit status {proc.returncode}"
        return ""


# What git needs of the system in a Landlock domain: its programs and libraries, the loader's cache,
# the user database and the time zone; /dev's harmless devices. Nothing else of /etc (a secret file
# may live there), no /proc (other processes' command lines), no home.
_SYSTEM_DIRS = ("/usr", "/bin", "/sbin", "/lib", "/lib32", "/lib64", "/libx32")
_SYSTEM_FILES = ("/etc/ld.so.cache", "/etc/passwd", "/etc/group", "/etc/nsswitch.conf", "/etc/localtime")
_DEVICES = ("/dev/null", "/dev/zero", "/dev/urandom", "/dev/random")


@dataclass
class LandlockBox:
    """A Landlock domain around the server's git, where bubblewrap cannot run: an allowlist, so
    what is not named (the data dir but its worktrees, the home, /etc's other files, /proc) is
    unreachable; no TCP connect; signals and abstract unix sockets stay inside (ABI 6). It hides
    nothing inside what it shows (a secret file in a workspace root stays readable), and UDP and
    named unix sockets are outside Landlock's reach: the log says so at start.

    The domain is entered between fork and exec, which the multi-threaded server cannot do safely:
    a single-threaded helper process (``sandbox/landlock_spawner.py``), started once, forks each
    git for it; stdin, stdout and stderr are the server's own pipes, passed with the request."""

    abi: int
    visible: tuple[Path, ...] = ()
    programs: tuple[Path, ...] = ()
    _spawner: subprocess.Popen | None = field(default=None, repr=False)
    _control: socket.socket | None = field(default=None, repr=False)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def rules(self, cwd: Path, writable: Iterable[Path], readable: Iterable[Path] = ()) -> list[tuple[str, int]]:
        read = landlock.READ
        fs: list[tuple[str, int]] = [(d, read) for d in (*_SYSTEM_DIRS, *map(str, self.programs))]
        fs += [(f, landlock.FS_READ_FILE) for f in _SYSTEM_FILES]
        fs += [(d, landlock.DEVICE) for d in _DEVICES]
        fs += [(str(p), read) for p in (*self.visible, *readable, cwd)]
        fs += [(str(p), read | landlock.WRITE) for p in writable]
        return fs

    def run(self, argv: Sequence[str], cwd: Path, env: dict[str, str], fs: list[tuple[str, int]], *,
            stdout=None, input: bytes | None = None, timeout: float = GIT_TIMEOUT) -> tuple[int, bytes, bytes]:
        """Runs ``argv`` in the domain ``fs``; (exit status, stdout, stderr). Raises OSError when the
        spawner cannot be reached, TimeoutError after ``timeout`` (the program is then killed)."""
        request = marshal.dumps({"argv": list(argv), "cwd": str(cwd), "env": env, "abi": self.abi, "fs": fs})
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        out_r, out_w = os.pipe() if stdout is None else (-1, os.dup(stdout.fileno()))
        err_r, err_w = os.pipe()
        in_r, in_w = os.pipe() if input is not None else (os.open(os.devnull, os.O_RDONLY), -1)
        try:
            self._send(request, [theirs.fileno(), in_r, out_w, err_w])
        finally:
            theirs.close()
            for fd in (in_r, out_w, err_w):
                os.close(fd)
        try:
            out, err = _communicate(in_w, input or b"", out_r, err_r, timeout)
            mine.settimeout(max(0.1, timeout))
            answer = mine.recv(64)
        finally:
            mine.close()  # before an answer: the spawner kills the program
        if not answer:
            raise OSError("the Landlock spawner ended")
        return int(marshal.loads(answer)), out, err

    def _send(self, request: bytes, fds: list[int]) -> None:
        with self._lock:
            for attempt in (1, 2):
                if self._control is None:
                    self._start()
                assert self._control is not None
                try:
                    socket.send_fds(self._control, [request], fds)
                    return
                except OSError:
                    self.close()
                    if attempt == 2:
                        raise

    def _start(self) -> None:
        """The spawner: a child with none of the server's variables, its request socket on an fd."""
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        script = Path(landlock.__file__).with_name("landlock_spawner.py")
        try:
            self._spawner = subprocess.Popen(
                [sys.executable, "-E", "-s", "-S", "-B", str(script), str(theirs.fileno())],
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
                env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}, cwd="/")
        finally:
            theirs.close()
        self._control = mine

    def close(self) -> None:
        """Stops the spawner (closing its socket ends it and every program it started)."""
        if self._control is not None:
            self._control.close()
            self._control = None
        if self._spawner is not None:
            try:
                self._spawner.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self._spawner.kill()
                self._spawner.wait()
            self._spawner = None

    def works(self) -> str:
        """"" when a ``true`` in the domain runs here, else why not (one line)."""
        try:
            status, _, err = self.run(["true"], Path("/"), {"PATH": "/usr/bin:/bin"}, self.rules(Path("/"), ()),
                                      timeout=20)
        except (OSError, TimeoutError) as exc:
            return f"landlock: {exc}"
        if status != 0:
            return f"landlock: {err.decode('utf-8', 'replace').strip()[:300] or f'exit status {status}'}"
        return ""


def _communicate(in_w: int, data: bytes, out_r: int, err_r: int, timeout: float) -> tuple[bytes, bytes]:
    """Writes ``data`` to ``in_w`` and reads ``out_r`` and ``err_r`` to their ends (-1: none), within
    ``timeout``; closes them all."""
    deadline = time.monotonic() + timeout
    chunks: dict[int, list[bytes]] = {out_r: [], err_r: []}
    sel = selectors.DefaultSelector()
    try:
        for fd in (out_r, err_r):
            if fd >= 0:
                sel.register(fd, selectors.EVENT_READ)
        if in_w >= 0:
            os.set_blocking(in_w, False)
            sel.register(in_w, selectors.EVENT_WRITE)
        view = memoryview(data)
        while sel.get_map():
            left = deadline - time.monotonic()
            if left <= 0:
                raise TimeoutError
            for key, _ in sel.select(left):
                fd = key.fd
                if fd == in_w:
                    try:
                        view = view[os.write(fd, view[:65536]):]
                    except BrokenPipeError:
                        view = view[:0]
                    if not view:
                        sel.unregister(fd)
                        os.close(fd)
                        in_w = -1
                    continue
                block = os.read(fd, 65536)
                if block:
                    chunks[fd].append(block)
                else:
                    sel.unregister(fd)
    finally:
        sel.close()
        for fd in (in_w, out_r, err_r):
            if fd >= 0:
                os.close(fd)
    return b"".join(chunks.get(out_r, [])), b"".join(chunks[err_r])


class GitError(Exception):
    """A git command failed or timed out (its stderr, shortened)."""


@dataclass(frozen=True)
class _Prepared:
    """One git command as the runner will start it (``HostGit._prepare``)."""

    name: str
    argv: list[str]
    env: dict[str, str]
    writable: list[Path]  # what the box lets it write
    own: list[Path]  # the repository's git directories it may write
    pairs: list[tuple[str, str]]  # the repository's drivers, emptied
    in_env: bool  # the overrides travel in GIT_CONFIG_COUNT (git 2.31+)


class HostGit:
    """Runs the server's git commands; ``configure`` at start says what the box hides."""

    def __init__(self) -> None:
        self.box: GitBox | LandlockBox | None = None
        self.box_note = "not configured"
        self._lock = threading.Lock()
        self._env_config: bool | None = None  # whether this git reads GIT_CONFIG_COUNT (2.31+)
        # Where the git directories a command may write can lie (``configure``'s visible paths and the
        # repositories they belong to); empty: anywhere (not configured).
        self.git_roots: tuple[Path, ...] = ()
        # A phase's working directory -> the git directories it had before the phase ran, and how
        # many phases hold that pin (``pin``): a ``.git`` file the phase rewrites to name another
        # repository inside the roots does not make that repository writable for the server's git.
        self._pins: dict[Path, tuple[tuple[Path, ...], int]] = {}

    def pin(self, cwd: Path) -> None:
        """Records ``cwd``'s git directories as they are now (before a phase runs there); until
        ``unpin``, the server's git may write only those of them for ``cwd``."""
        key = Path(cwd).resolve()
        with self._lock:
            dirs, count = self._pins.get(key, (tuple(git_dirs(key)), 0))
            self._pins[key] = (dirs, count + 1)

    def unpin(self, cwd: Path) -> None:
        key = Path(cwd).resolve()
        with self._lock:
            dirs, count = self._pins.get(key, ((), 1))
            if count <= 1:
                self._pins.pop(key, None)
            else:
                self._pins[key] = (dirs, count - 1)

    @property
    def kind(self) -> str:
        """Which helper sandbox git runs in: "bubblewrap", "landlock" or ""."""
        return {GitBox: "bubblewrap", LandlockBox: "landlock"}.get(type(self.box), "")

    def configure(self, *, hidden: Iterable[Path], visible: Iterable[Path] = (), use_box: bool = True,
                  bwrap: str | None = None, use_landlock: bool = True) -> str:
        """Decides the helper sandbox once (start-up): bubblewrap, else Landlock; returns "" when git
        runs boxed, else why not."""
        with self._lock:
            if isinstance(self.box, LandlockBox):
                self.box.close()
            self.box, self.box_note = None, ""
            path = bwrap or shutil.which("bwrap")
            shown = tuple(dict.fromkeys(Path(v).absolute() for v in visible))
            # A root may lie inside a repository (serve started in a subdirectory): that repository's
            # ``.git`` directory is the server's to write too (never a ``.git`` file's target: a phase
            # may have written that file in a root before this start).
            # Added to what an earlier configure allowed: servers sharing a process (the tests'
            # replicas) each keep their own roots.
            self.git_roots = tuple(dict.fromkeys([*self.git_roots, *(v.resolve() for v in shown),
                                                  *(d for v in shown if (d := _enclosing_git_dir(v)))]))
            if not use_box:
                self.box_note = "turned off"
                return self.box_note
            if path is None:
                why = "bubblewrap is not installed"
            else:
                box = GitBox(path, tuple(dict.fromkeys(Path(h).absolute() for h in hidden)), shown)
                why = box.works()
                if not why:
                    self.box = box
                    return ""
                why = f"bubblewrap cannot run here: {why}"
            abi = landlock.abi() if use_landlock else 0
            if abi:
                lbox = LandlockBox(abi, shown, _git_programs())
                lwhy = lbox.works()
                if not lwhy:
                    self.box = lbox
                    return ""
                lbox.close()
                why = f"{why}; {lwhy}"
            else:
                why = f"{why}; Landlock is {'not used' if not use_landlock else 'not available'}"
            self.box_note = why
            return self.box_note

    def run(self, cwd: Path, *args: str, env: dict[str, str] | None = None, stdout=None, check: bool = True,
            writable: Iterable[Path] = (), read_only: bool = False, timeout: float = GIT_TIMEOUT,
            input: bytes | None = None) -> bytes:
        """``git args`` in ``cwd`` with every override and, when configured, in the box; stdout bytes
        (or written to ``stdout``). ``env`` adds git variables (``GIT_INDEX_FILE``); the command may
        write the repository's git directories (not with ``read_only``), the index's directory and
        ``writable``."""
        prep = self._prepare(cwd, args, env=env, writable=writable, read_only=read_only)
        status, out, err = self._start(prep.argv, cwd, prep, prep.name, stdout=stdout, input=input, timeout=timeout)
        if check and status != 0:
            raise GitError(f"git {prep.name} failed: {err.decode('utf-8', 'replace').strip()[:500]}")
        return out

    def run_then(self, cwd: Path, first: Sequence[str], then: Sequence[str], *, env: dict[str, str] | None = None,
                 input: bytes | None = None, timeout: float = GIT_TIMEOUT) -> tuple[int, bytes, bytes]:
        """``git first`` (its stdout dropped) and, when it exits 0 or 1, ``git then``, in one start of
        the box, with the config read once: a checkpoint's ``add`` and ``write-tree`` (each box start
        costs a bubblewrap start, benchmarks/bench_checkpoints.py). Returns (``first``'s exit status,
        ``then``'s stdout, both commands' stderr); GitError when ``first`` exits 2 or more or ``then``
        fails. ``input`` is ``first``'s stdin; ``then`` reads none."""
        prep = self._prepare(cwd, first, env=env, writable=(), read_only=False)
        second = subcommand(then)
        if second not in COMMANDS:
            raise GitError(f"git {second or '(no command)'} is not a command the server runs")
        # Both argvs quoted for sh (driver names come from the repository's config); 125 says
        # ``then`` failed. The shell is the system's, started with git's own clean environment.
        script = (f"{shlex.join(prep.argv)} >/dev/null; s=$?; [ \"$s\" -le 1 ] || exit \"$s\"; "
                  f"{shlex.join(command(then, prep.pairs, in_env=prep.in_env))} </dev/null || exit 125; exit \"$s\"")
        status, out, err = self._start(["/bin/sh", "-c", script], cwd, prep, f"{prep.name} and {second}",
                                       input=input, timeout=timeout)
        text = err.decode("utf-8", "replace").strip()[:500]
        if status == 125:
            raise GitError(f"git {second} failed: {text}")
        if status > 1:
            raise GitError(f"git {prep.name} failed: {text}")
        return status, out, err

    def _start(self, argv: list[str], cwd: Path, prep: _Prepared, what: str, *, stdout=None,
               input: bytes | None = None, timeout: float = GIT_TIMEOUT) -> tuple[int, bytes, bytes]:
        """Runs ``argv`` (git, or the shell of ``run_then``) with ``prep``'s environment, in the box when
        there is one, letting it write ``prep.writable``; (exit status, stdout, stderr)."""
        box = self.box
        if isinstance(box, LandlockBox):
            fs = box.rules(cwd, prep.writable, readable=[work_tree(cwd), *prep.own])
            try:
                return box.run(argv, cwd, prep.env, fs, stdout=stdout, input=input, timeout=timeout)
            except TimeoutError:
                raise GitError(f"git {what} took longer than {timeout:.0f}s") from None
            except OSError as exc:
                raise GitError(f"cannot run git in its sandbox: {exc.strerror or exc}") from None
        if isinstance(box, GitBox):
            argv = box.wrap(argv, cwd, prep.writable, readable=[work_tree(cwd)])
        return self._process(argv, cwd, prep.env, stdout, what, timeout, input)

    def _prepare(self, cwd: Path, args: Sequence[str], *, env: dict[str, str] | None, writable: Iterable[Path],
                 read_only: bool) -> _Prepared:
        """The command's name, its argv with every override, its environment and what it may write."""
        name = subcommand(args)
        if name not in COMMANDS:
            raise GitError(f"git {name or '(no command)'} is not a command the server runs")
        extra = dict(env or {})
        top = found_work_tree(cwd)
        if top is not None:  # the repository's core.worktree never moves the server's git elsewhere
            extra["GIT_WORK_TREE"] = str(top)
        names = self._config_names(cwd, extra)
        pairs = drivers(names)
        in_env = self._reads_env_config()
        if not in_env and any("=" in key for key, _ in pairs):
            raise GitError("the repository's config names a driver with '=' in its name, which this git "
                           "(older than 2.31) cannot be told to leave unrun")
        argv = command(args, pairs, in_env=in_env)
        full_env = git_env(extra)
        if in_env:
            full_env.update(config_env(pairs))
        own = self.git_dirs_of(cwd)
        rw = [] if read_only else [*own, *writable]
        if "GIT_INDEX_FILE" in extra and not read_only:
            rw.append(Path(extra["GIT_INDEX_FILE"]).parent)
        return _Prepared(name, argv, full_env, rw, own, pairs, in_env)

    def git_dirs_of(self, cwd: Path) -> list[Path]:
        """The git directories of ``cwd`` the box lets a command write: those inside ``git_roots``. A
        ``.git`` file or ``commondir`` is written by whoever writes the working tree (a phase), and one
        pointing elsewhere (another repository, the data dir) must not become a writable bind."""
        found = git_dirs(cwd)
        with self._lock:
            pinned = self._pins.get(Path(cwd).resolve())
        if pinned is not None and any(d not in pinned[0] for d in found):
            log.warning("host git: %s names git directories it did not have when its phase started (%s); the "
                        "server's git does not write them", cwd, ", ".join(str(d) for d in found if d not in pinned[0]))
            found = [d for d in found if d in pinned[0]]
        if not self.git_roots:
            return found
        kept = [d for d in found if any(d.is_relative_to(root) for root in self.git_roots)]
        if len(kept) != len(found):
            log.warning("host git: %s names git directories outside the workspace roots (%s); the "
                        "server's git does not write them", cwd, ", ".join(str(d) for d in found if d not in kept))
        return kept

    def _reads_env_config(self) -> bool:
        """Whether this git reads its config from ``GIT_CONFIG_COUNT`` (git 2.31+); asked once."""
        if self._env_config is None:
            probe = {"GIT_CONFIG_COUNT": "1", "GIT_CONFIG_KEY_0": "helix.probe", "GIT_CONFIG_VALUE_0": "yes"}
            try:
                _, out, _ = self._process(["git", "config", "--get", "helix.probe"], Path("/"), git_env(probe),
                                          None, "config", 30.0)
            except GitError:
                return False  # asked again next time: git may not be there yet
            self._env_config = out.strip() == b"yes"
            if not self._env_config:
                log.warning("host git: this git is older than 2.31; its overrides go on the command line")
        return self._env_config

    def _config_names(self, cwd: Path, extra: dict[str, str]) -> list[str]:
        """The key names of the config git would read in ``cwd`` (includes followed). Not boxed: reading
        config runs no program, and only names come back (a bubblewrap start would add ~3.5 ms)."""
        argv = ["git", "config", "--null", "--name-only", "--list"]
        try:
            _, out, _ = self._process(argv, cwd, git_env(extra), None, "config", 30.0)
        except GitError:
            return []
        return [name for name in out.decode("utf-8", "replace").split("\0") if name]

    @staticmethod
    def _process(argv: list[str], cwd: Path, env: dict[str, str], stdout, name: str, timeout: float,
                 input: bytes | None = None) -> tuple[int, bytes, bytes]:
        """``argv`` as a child process, unboxed; (exit status, stdout, stderr)."""
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                                  timeout=timeout, **stdin)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {name} took longer than {timeout:.0f}s") from None
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror or exc}") from None
        return proc.returncode, proc.stdout or b"", proc.stderr


def _git_programs() -> tuple[Path, ...]:
    """Where git's own programs lie when not under /usr (a git built into /opt): its directory and
    its exec path, for a Landlock domain to let it run."""
    found = shutil.which("git")
    if found is None:
        return ()
    where = [Path(os.path.realpath(found)).parent]
    try:
        out = subprocess.run(["git", "--exec-path"], capture_output=True, timeout=10, check=False,
                             env={"PATH": os.environ.get("PATH", "/usr/bin:/bin")}).stdout
        if out.strip():
            where.append(Path(out.decode("utf-8", "replace").strip()))
    except (OSError, subprocess.SubprocessError):
        pass
    return tuple(p for p in dict.fromkeys(where) if not any(p.is_relative_to(d) for d in _SYSTEM_DIRS))


# The one runner of this process: the server configures it at start (server/isolation.py).
HOST_GIT = HostGit()
