"""The server's own git: every git command it runs on a phase's repository, run so that nothing the
repository names is executed with the server's authority.

A phase can write its repository's configuration and attributes (it is its workspace; inside a
phase they are read-only, but not in every mode, and not before this release). Git runs programs
named there in many ways: filters (clean, smudge, process), diff drivers and textconv, an external
diff, fsmonitor, hooks, pager, editor, ssh command, gpg programs with ``commit.gpgSign``, credential
helpers, askpass, merge drivers, protocol helpers, and ``include``/``includeIf`` can bring any of
them from another file (git-config(1), gitattributes(5); checked against git 2.39). Two layers:

1. **What git is told** (``command``): no system or global config, no global attributes, every
   program-valued key this git knows set to nothing or to a harmless value on the command line
   (which outranks the repository's config), and each filter, diff and merge driver the
   repository's config defines (``drivers``: read from ``git config --list``, which runs nothing)
   emptied by name; an environment with none of the server's variables (its API key, tokens).
2. **Where git runs** (``GitBox``): under bubblewrap with no network, the host read-only except
   what the command must write (the repository's git directory, a private index, a worktree being
   made or removed), the data dir, the server's home and secret files hidden, no capabilities, its
   processes gone with it. A key git grows after 2.39, or one missed above, then still runs
   nothing with the server's authority. Without bubblewrap (most Kubernetes pods) only the first
   layer holds, and the server says so at start.

Costs (``benchmarks/bench_host_git.py``): one ``git config`` call (unboxed: it runs nothing) and,
boxed, one bubblewrap start per command: about +2 ms a call with the overrides, +6 ms boxed.
"""

from __future__ import annotations

import logging
import os
import shutil
import subprocess
import threading
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

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


def command(args: Sequence[str], driver_pairs: Iterable[tuple[str, str]] = ()) -> list[str]:
    """git's argv with every override on the command line."""
    argv = ["git", "--no-pager"]
    for key, value in (*SAFE_CONFIG, *driver_pairs):
        argv += ["-c", f"{key}={value}"]
    return [*argv, *args]


def work_tree(cwd: Path) -> Path:
    """The top of the working tree holding ``cwd`` (``cwd`` itself outside any)."""
    for top in (cwd, *cwd.parents):
        if (top / ".git").exists():
            return top
    return cwd


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


class GitError(Exception):
    """A git command failed or timed out (its stderr, shortened)."""


class HostGit:
    """Runs the server's git commands; ``configure`` at start says what the box hides."""

    def __init__(self) -> None:
        self.box: GitBox | None = None
        self.box_note = "not configured"
        self._lock = threading.Lock()

    def configure(self, *, hidden: Iterable[Path], visible: Iterable[Path] = (), use_box: bool = True,
                  bwrap: str | None = None) -> str:
        """Decides the helper sandbox once (start-up); returns "" when git runs boxed, else why not."""
        with self._lock:
            self.box, self.box_note = None, ""
            path = bwrap or shutil.which("bwrap")
            if not use_box:
                self.box_note = "turned off"
            elif path is None:
                self.box_note = "bubblewrap is not installed"
            else:
                box = GitBox(path, tuple(dict.fromkeys(Path(h).absolute() for h in hidden)),
                             tuple(dict.fromkeys(Path(v).absolute() for v in visible)))
                why = box.works()
                if why:
                    self.box_note = f"bubblewrap cannot run here: {why}"
                else:
                    self.box = box
            return self.box_note

    def run(self, cwd: Path, *args: str, env: dict[str, str] | None = None, stdout=None, check: bool = True,
            writable: Iterable[Path] = (), read_only: bool = False, timeout: float = GIT_TIMEOUT,
            input: bytes | None = None) -> bytes:
        """``git args`` in ``cwd`` with every override and, when configured, in the box; stdout bytes
        (or written to ``stdout``). ``env`` adds git variables (``GIT_INDEX_FILE``); the command may
        write the repository's git directories (not with ``read_only``), the index's directory and
        ``writable``."""
        extra = dict(env or {})
        pairs = drivers(self._config_names(cwd, extra))
        argv = command(args, pairs)
        if self.box is not None:
            rw = [] if read_only else [*git_dirs(cwd), *writable]
            if "GIT_INDEX_FILE" in extra:
                rw.append(Path(extra["GIT_INDEX_FILE"]).parent)
            argv = self.box.wrap(argv, cwd, rw, readable=[work_tree(cwd)])
        return self._exec(argv, cwd, git_env(extra), stdout, check, args[0], timeout, input)

    def _config_names(self, cwd: Path, extra: dict[str, str]) -> list[str]:
        """The key names of the config git would read in ``cwd`` (includes followed). Not boxed: reading
        config runs no program, and only names come back (a bubblewrap start would add ~3.5 ms)."""
        argv = ["git", "config", "--null", "--name-only", "--list"]
        try:
            out = self._exec(argv, cwd, git_env(extra), None, False, "config", 30.0)
        except GitError:
            return []
        return [name for name in out.decode("utf-8", "replace").split("\0") if name]

    @staticmethod
    def _exec(argv: list[str], cwd: Path, env: dict[str, str], stdout, check: bool, name: str,
              timeout: float, input: bytes | None = None) -> bytes:
        stdin = {"input": input} if input is not None else {"stdin": subprocess.DEVNULL}
        try:
            proc = subprocess.run(argv, cwd=cwd, env=env, stdout=stdout or subprocess.PIPE, stderr=subprocess.PIPE,
                                  timeout=timeout, **stdin)
        except subprocess.TimeoutExpired:
            raise GitError(f"git {name} took longer than {timeout:.0f}s") from None
        except OSError as exc:
            raise GitError(f"cannot run git: {exc.strerror or exc}") from None
        if check and proc.returncode != 0:
            raise GitError(f"git {name} failed: {proc.stderr.decode('utf-8', 'replace').strip()[:500]}")
        return proc.stdout or b""


# The one runner of this process: the server configures it at start (server/isolation.py).
HOST_GIT = HostGit()
