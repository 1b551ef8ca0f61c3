"""What a phase may not change in its repository: the files that make git (or Claude Code) run a
program later, for the user or for another phase.

A phase works in a repository, and git reads more from it than the files it tracks: ``.git/config``
names filters, diff drivers, an fsmonitor, a pager, aliases and hooks paths; ``.git/hooks/`` holds
programs git runs on commit, checkout and merge; ``.git/info/attributes`` picks filters and
drivers for paths; ``.gitmodules`` names submodule URLs. Whatever a phase writes there runs later
with the authority of whoever next runs git in that repository: the user, a later phase, the
server. The same goes for Claude Code's project settings (``.claude/settings.json``,
``.claude/settings.local.json``) and ``.mcp.json``, which can name hooks and servers. So, as
sandbox-runtime's "mandatory deny paths" do (anthropic-experimental/sandbox-runtime, README), these
are read-only inside a phase while commits, refs, objects and the index stay writable
(``protected``). A request that must change them says so (``allow_repository_config_writes``).

Both repository layouts are covered: a main worktree whose ``.git`` is its git directory, and a
linked worktree whose ``.git`` is a file (``gitdir: <common>/worktrees/<name>``), where the
per-worktree directory's ``commondir`` and ``gitdir`` and the ``.git`` file itself redirect git
and so are protected too; the common directory's ``worktrees/`` (every other worktree's redirects)
is read-only but for the phase's own. Submodules' git directories (``modules/<name>``, two levels)
get the same as the repository's.

bubblewrap binds each protected path read-only over the writable tree (``bwrap.py``); a bound path
cannot be renamed or removed either. Landlock cannot deny a path inside an allowed directory, so
without bubblewrap a worktree's common directory (not the phase's working tree) is split around the
protected paths (``policy.landlock_rules``), and for the rest the server puts back what the phase
changed when it ends (``RepoGuard``): read-only there means "undone and reported", and a phase
could use what it planted while it still ran. Paths that do not exist are not protected (a bind
needs something to bind), except ``hooks/`` and ``info/``, which the server creates empty first
(git itself does on ``init``), and ``config``.
"""

from __future__ import annotations

import hashlib
import logging
import os
import shutil
import stat
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

log = logging.getLogger(__name__)

# Beneath a git directory (the common one, or a submodule's): what names or holds programs.
GIT_DIR_ENTRIES = ("config", "config.worktree", "hooks", "info")
# Beneath a linked worktree's own git directory: what redirects git elsewhere.
WORKTREE_ADMIN_ENTRIES = ("commondir", "gitdir", "config.worktree")
# Beneath the working tree (and the phase's directory): files another program loads and runs.
WORK_TREE_FILES = (".gitmodules", ".claude/settings.json", ".claude/settings.local.json", ".mcp.json")
# How deep submodules' git directories are followed (modules/<a>/modules/<b>).
MODULE_DEPTH = 2
# What a snapshot keeps to put a protected path back: beyond these, a change is reported, not undone.
SNAPSHOT_MAX_BYTES = 4 * 1024 * 1024
SNAPSHOT_MAX_ENTRIES = 2000


@dataclass(frozen=True)
class RepoLayout:
    """Where a working tree's git data lives."""

    top: Path  # the working tree's top level
    git_dir: Path  # its own git directory (the common one for a main worktree)
    common_dir: Path
    gitfile: Path | None  # ``top/.git`` when it is a ``gitdir:`` file (a linked worktree, a submodule)


def layout(top: Path, *, common_dir: Path | None = None) -> RepoLayout | None:
    """The layout of the working tree at ``top``, read as git reads it (no git run); None when it
    is not one the server can trust.

    What a ``.git`` file or a ``commondir`` says was written by whoever wrote the repository, an
    earlier phase perhaps: followed blindly, it would have the sandbox bind (or guard) another
    workspace's git directory into this phase's view. So ``top/.git`` is trusted as a real
    directory (not a link), and a ``gitdir:`` file only when it leads to a worktree administration
    directory of ``common_dir``, the repository the server itself made the worktree of.
    """
    dot = top / ".git"
    try:
        if dot.is_dir() and not dot.is_symlink():
            git_dir, gitfile = dot.resolve(), None
            if common_dir is not None and git_dir != common_dir:
                return None
        elif dot.is_file() and not dot.is_symlink() and common_dir is not None:
            text = dot.read_text(encoding="utf-8", errors="replace").strip()
            if not text.startswith("gitdir:"):
                return None
            git_dir, gitfile = (top / text.removeprefix("gitdir:").strip()).resolve(), dot
            if git_dir.parent != common_dir / "worktrees":
                return None
        else:
            return None
        if not (git_dir / "HEAD").exists():
            return None
        common = git_dir
        if gitfile is not None:
            common = (git_dir / (git_dir / "commondir").read_text(encoding="utf-8").strip()).resolve()
            if common != common_dir:
                return None
    except (OSError, RuntimeError, ValueError):
        return None
    return RepoLayout(top=top, git_dir=git_dir, common_dir=common, gitfile=gitfile)


def _module_dirs(common: Path) -> list[Path]:
    """Submodules' git directories under ``common/modules`` (``MODULE_DEPTH`` levels)."""
    found: list[Path] = []
    level = [common]
    for _ in range(MODULE_DEPTH):
        nxt = []
        for base in level:
            modules = base / "modules"
            try:
                names = sorted(os.listdir(modules)) if modules.is_dir() and not modules.is_symlink() else []
            except OSError:
                names = []
            for name in names:
                candidate = modules / name
                if candidate.is_dir() and not candidate.is_symlink() and (candidate / "HEAD").exists():
                    nxt.append(candidate)
        found += nxt
        level = nxt
    return found


@dataclass(frozen=True)
class Protection:
    """The protected paths of one phase: what the sandbox keeps read-only (``paths``: real files or
    directories, never a symbolic link), what must stay writable inside them (``writable``: the
    phase's own worktree administration), and what the guard snapshots (``guarded``)."""

    paths: tuple[str, ...] = ()
    writable: tuple[str, ...] = ()
    guarded: tuple[str, ...] = ()


def protection(repos: Iterable[RepoLayout], workdirs: Iterable[Path]) -> Protection:
    """The protected paths of phases working in ``repos`` from the directories ``workdirs``.

    Existing paths only, with ``hooks``, ``info`` and ``config`` created first in each git
    directory (``prepare_git_dir``). A protected entry that is a symbolic link is not bound (a bind
    would follow it, perhaps to a path the phase must not see): the guard puts the link back, and
    the link's target is protected when it lies in the phase's tree.
    """
    paths: list[Path] = []
    writable: list[Path] = []
    guarded: list[Path] = []
    tops: list[Path] = []
    for repo in repos:
        tops.append(repo.top)
        for git_dir in (repo.common_dir, *_module_dirs(repo.common_dir)):
            prepare_git_dir(git_dir)
            for name in GIT_DIR_ENTRIES:
                guarded.append(git_dir / name)
        worktrees = repo.common_dir / "worktrees"
        if worktrees.is_dir() and not worktrees.is_symlink():
            paths.append(worktrees)
            for admin in sorted(worktrees.iterdir()):
                guarded += [admin / name for name in WORKTREE_ADMIN_ENTRIES]
        if repo.git_dir != repo.common_dir:
            writable.append(repo.git_dir)  # the phase's own: index, HEAD, logs
            guarded += [repo.git_dir / name for name in WORKTREE_ADMIN_ENTRIES]
        if repo.gitfile is not None:
            guarded.append(repo.gitfile)
    for base in dict.fromkeys([*tops, *workdirs]):
        guarded += [base / name for name in WORK_TREE_FILES]
        dot = base / ".git"
        if dot.is_file() and not dot.is_symlink():  # a gitfile redirects git: read-only, whoever wrote it
            guarded.append(dot)
    guarded = list(dict.fromkeys(guarded))
    for path in guarded:
        try:
            mode = path.lstat().st_mode
        except OSError:
            continue
        if stat.S_ISLNK(mode):
            target = Path(os.path.realpath(path))
            if target.exists():
                paths.append(target)  # kept only if it lies in a writable path (policy.make_policy)
        else:
            paths.append(path)
    return Protection(tuple(dict.fromkeys(str(p) for p in paths)), tuple(str(p) for p in writable),
                      tuple(str(p) for p in guarded))


def prepare_git_dir(git_dir: Path) -> None:
    """Creates ``hooks/`` and ``info/`` (empty) and ``config`` (empty) where they are missing, so
    that a phase cannot create them either (a bind needs something to bind). With
    ``extensions.worktreeConfig`` set, ``config.worktree`` too."""
    try:
        for name in ("hooks", "info"):
            (git_dir / name).mkdir(mode=0o755, exist_ok=True)
        config = git_dir / "config"
        if not os.path.lexists(config):
            config.touch(mode=0o644)
        if not os.path.lexists(git_dir / "config.worktree") and "worktreeconfig" in \
                config.read_text(encoding="utf-8", errors="replace").lower():
            (git_dir / "config.worktree").touch(mode=0o644)
    except OSError as exc:
        log.warning("could not prepare a repository's git directory for protection",
                    extra={"fields": {"git_dir": str(git_dir), "error": exc.strerror or str(exc)}})


# -- the guard: what the phase changed, put back ------------------------------------------------

@dataclass
class _Entry:
    kind: str  # "file", "dir", "link", "missing", "opaque" (too large to keep: a digest only)
    mode: int = 0
    data: bytes = b""
    children: dict[str, _Entry] = field(default_factory=dict)


class _Budget:
    def __init__(self) -> None:
        self.bytes = SNAPSHOT_MAX_BYTES
        self.entries = SNAPSHOT_MAX_ENTRIES

    def take(self, size: int) -> bool:
        self.entries -= 1
        self.bytes -= size
        return self.entries >= 0 and self.bytes >= 0


def _open_parent(path: Path) -> int:
    """A descriptor of ``path``'s parent, reached without following a symbolic link below ``/``'s
    first component that the phase could have planted: OSError if one of them is a link now."""
    fd = os.open("/", os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        for part in path.parent.parts[1:]:
            nxt = os.open(part, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
    except BaseException:
        os.close(fd)
        raise
    return fd


def _read(dir_fd: int, name: str, budget: _Budget) -> _Entry:
    """The entry ``name`` in ``dir_fd`` as it is now (a link is read, never followed); past the
    budget, an ``opaque`` entry holding only the fingerprint of what it stands for."""
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return _Entry("missing")
    if stat.S_ISLNK(st.st_mode):
        return _Entry("link", data=os.readlink(name, dir_fd=dir_fd).encode())
    if stat.S_ISREG(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        with os.fdopen(fd, "rb") as f:
            entry = _Entry("file", st.st_mode & 0o7777, f.read(SNAPSHOT_MAX_BYTES + 1))
        return entry if budget.take(len(entry.data)) else _Entry("opaque", data=_fingerprint(entry))
    if stat.S_ISDIR(st.st_mode):
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            entry = _Entry("dir", st.st_mode & 0o7777)
            for child in sorted(os.listdir(fd)):
                entry.children[child] = _read(fd, child, budget)
        finally:
            os.close(fd)
        return entry if budget.take(0) else _Entry("opaque", data=_fingerprint(entry))
    return _Entry("opaque", data=hashlib.sha256(b"special:%d" % st.st_mode).digest())


def _fingerprint(entry: _Entry) -> bytes:
    """A digest of an entry and all it holds (an opaque entry is its fingerprint already)."""
    if entry.kind == "opaque":
        return entry.data
    h = hashlib.sha256(f"{entry.kind}:{entry.mode}:".encode() + entry.data)
    for name, child in sorted(entry.children.items()):
        h.update(name.encode() + b"\0" + _fingerprint(child))
    return h.digest()


def _remove(dir_fd: int, name: str) -> None:
    try:
        st = os.stat(name, dir_fd=dir_fd, follow_symlinks=False)
    except FileNotFoundError:
        return
    if stat.S_ISDIR(st.st_mode):
        shutil.rmtree(name, dir_fd=dir_fd)  # does not follow links (avoids_symlink_attacks on Linux)
    else:
        os.unlink(name, dir_fd=dir_fd)


def _write(dir_fd: int, name: str, entry: _Entry) -> None:
    if entry.kind == "missing":
        return
    if entry.kind == "link":
        os.symlink(entry.data.decode(), name, dir_fd=dir_fd)
    elif entry.kind == "file":
        fd = os.open(name, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, entry.mode,
                     dir_fd=dir_fd)
        with os.fdopen(fd, "wb") as f:
            f.write(entry.data)
            os.fchmod(f.fileno(), entry.mode)  # exactly as it was, whatever the umask
    elif entry.kind == "dir":
        os.mkdir(name, entry.mode, dir_fd=dir_fd)
        fd = os.open(name, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=dir_fd)
        try:
            os.fchmod(fd, entry.mode)
            for child, sub in entry.children.items():
                _write(fd, child, sub)
        finally:
            os.close(fd)


class RepoGuard:
    """Snapshots the guarded paths before a phase and puts back what it changed after it (every
    process of the phase is gone by then, so nothing races the repair). Symbolic links are never
    followed: each path is reached from ``/`` one component at a time."""

    def __init__(self, paths: Iterable[str]):
        self.before: dict[str, _Entry] = {}
        budget = _Budget()
        for path in dict.fromkeys(paths):
            try:
                fd = _open_parent(Path(path))
            except FileNotFoundError:  # its directory is missing: so is it, and so it must stay
                self.before[path] = _Entry("missing")
                continue
            except OSError:
                continue  # a directory on the way is a link (or not a directory): nothing to protect there
            try:
                self.before[path] = _read(fd, Path(path).name, budget)
            except OSError:
                continue
            finally:
                os.close(fd)

    def restore(self) -> tuple[list[str], list[str]]:
        """Puts back every guarded path the phase changed; (paths put back, paths changed that
        could not be: too large to have been kept, or a directory on the way replaced)."""
        restored: list[str] = []
        failed: list[str] = []
        for path, before in self.before.items():
            try:
                fd = _open_parent(Path(path))
            except FileNotFoundError:
                if before.kind != "missing":
                    failed.append(path)
                continue
            except OSError:
                failed.append(path)
                continue
            name = Path(path).name
            try:
                now = _read(fd, name, _Budget())
                if _fingerprint(before) == _fingerprint(now):
                    continue
                if before.kind == "opaque" or (before.kind == "dir" and _has_opaque(before)):
                    failed.append(path)
                    continue
                _remove(fd, name)
                _write(fd, name, before)
                restored.append(path)
            except OSError as exc:
                log.warning("could not put back a protected repository path",
                            extra={"fields": {"path": path, "error": exc.strerror or str(exc)}})
                failed.append(path)
            finally:
                os.close(fd)
        return restored, failed


def _has_opaque(entry: _Entry) -> bool:
    return entry.kind == "opaque" or any(_has_opaque(c) for c in entry.children.values())
