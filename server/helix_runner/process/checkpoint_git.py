"""The git side of checkpoints: a phase's workspace kept at each tool boundary, cheaply.

Every git call of checkpoints is in this module (they read and write a repository the phase wrote, so
they go through the server's git runner, ``host_git.py``: nothing the repository names runs, and
where bubblewrap runs, git runs in its helper sandbox).

How a snapshot is taken (``WorkspaceSnapshots.take``): the working tree is staged into a *private*
index of the phase's own (``GIT_INDEX_FILE``, kept for the whole phase, so git's stat cache stays
warm; split, so a write rewrites only what changed), then written as a tree object. Neither the
user's index nor a branch is touched; untracked files count, ignored ones do not (the rule the
artifacts' snapshots follow). A worktree phase's tree is also committed on its HEAD, and the commit
kept by a hidden ref of its own, ``refs/helix/checkpoints/<job>/<phase>/<number>`` (not a branch: no
``git branch`` lists it; deleted with the phase by retention). An in-place phase keeps the tree
object only: the user's repository gets no ref.

What is staged: an inotify watch of the working tree (``ChangeWatch``) names the paths that changed
since the last snapshot, and only those are staged (10,000 files: ~9 ms instead of ~35 ms for a
whole ``git add -A``). Anything the watch cannot vouch for (its queue overflowed, a directory was
removed or moved, a watch could not be added, git refused a path) falls back to staging everything.
A snapshot whose tree and HEAD equal the previous one's is that one (deduplicated).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import logging
import os
import shutil
import tempfile
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path

from helix_runner.domain.checkpoints import NO_WORKSPACE_REASON, WorkspaceKind, WorkspaceSnapshot
from helix_runner.process import git_worktree
from helix_runner.process.git_worktree import GitError, branch_name, git
from helix_runner.process.host_git import HOST_GIT

log = logging.getLogger(__name__)

REF_ROOT = "refs/helix/checkpoints"
# A checkpoint's commit message and identity (the phase's own git identity is not ours to use).
_IDENTITY = ("-c", "user.name=helix-runner", "-c", "user.email=helix-runner@localhost")
# The private index is split: a snapshot rewrites the small part that changed, not the whole index.
# ``git add -A`` of literal paths, NUL-separated on stdin (no pathspec magic).
_ADD = ("--literal-pathspecs", "add", "-A", "--pathspec-from-file=-", "--pathspec-file-nul")
_SPLIT = ("-c", "core.splitIndex=true", "-c", "splitIndex.maxPercentChange=50", "-c", "advice.addIgnoredFile=false")
# More directories than this and the working tree is not watched (each is one inotify watch; the
# kernel's per-user limit is shared with every other watcher): every snapshot then stages everything.
MAX_WATCHED_DIRS = 20_000
# More changed paths than this and staging them one by one is no cheaper than staging everything.
MAX_CHANGED_PATHS = 2_000
# Checkpoint refs are written in batches of this many (one `update-ref --stdin`), and when the phase's
# snapshots close: a commit is safe from gc for weeks without one (gc.pruneExpire), the rows name it.
REF_BATCH = 8


def checkpoint_ref(job_id: str, phase_id: str, number: int) -> str:
    """The hidden ref of a worktree phase's checkpoint ``number``."""
    return f"{refs_prefix(job_id, phase_id)}/{number}"


def refs_prefix(job_id: str, phase_id: str) -> str:
    # branch_name makes each id a legal ref component: helix/<job>/<phase>.
    return f"{REF_ROOT}/{branch_name(job_id, phase_id).removeprefix('helix/')}"


def _env(index: Path | None = None) -> dict[str, str]:
    """The git variables of a call (the runner adds its safe environment): the private index, if any."""
    return {"GIT_INDEX_FILE": str(index)} if index is not None else {}


# -- which paths changed -------------------------------------------------------------------------------


@dataclass
class Changes:
    """What changed in the working tree since the last drain: paths relative to its top (``paths``),
    or ``everything`` when the watch cannot tell."""

    paths: set[str]
    everything: bool


class ChangeWatch:
    """An inotify watch of a working tree (every directory but ``.git`` ones), drained at each snapshot.

    Events are queued by the kernel as the writes happen, so by the time a tool call's result is read
    every change it made is in the queue: ``drain`` reads it without waiting.
    """

    def __init__(self, top: Path, max_dirs: int = MAX_WATCHED_DIRS):
        from inotify_simple import INotify, flags

        self._flags = flags
        self.top = top
        self._mask = (flags.CREATE | flags.DELETE | flags.MODIFY | flags.CLOSE_WRITE | flags.MOVED_FROM
                      | flags.MOVED_TO | flags.ATTRIB | flags.DELETE_SELF | flags.MOVE_SELF | flags.DONT_FOLLOW
                      | flags.EXCL_UNLINK)
        self._max_dirs = max_dirs
        self._dirs: dict[int, str] = {}
        self._inotify = INotify()
        self.broken = ""  # why the watch gave up (then every snapshot stages everything)
        self._everything = False
        self._watch_tree("")

    def _watch_tree(self, rel: str) -> None:
        """Watches ``rel`` and every directory under it (not ``.git``, not through symlinks)."""
        stack = [rel]
        while stack and not self.broken:
            d = stack.pop()
            path = self.top / d if d else self.top
            try:
                wd = self._inotify.add_watch(str(path), self._mask)
            except OSError as exc:
                if exc.errno in (errno.ENOENT, errno.ENOTDIR):
                    continue  # gone already: its parent's event says so
                self._give_up(f"cannot watch {path}: {exc.strerror}")
                return
            self._dirs[wd] = d
            if len(self._dirs) > self._max_dirs:
                self._give_up(f"more than {self._max_dirs} directories")
                return
            try:
                with os.scandir(path) as entries:
                    for entry in entries:
                        if entry.name != ".git" and entry.is_dir(follow_symlinks=False):
                            stack.append(f"{d}/{entry.name}" if d else entry.name)
            except OSError:
                continue

    def _give_up(self, why: str) -> None:
        self.broken = why
        log.info("checkpoints stage the whole working tree", extra={"fields": {"top": str(self.top), "why": why}})
        self.close()

    def drain(self) -> Changes:
        """The paths changed since the last drain (and new directories watched from now on)."""
        if self.broken:
            return Changes(set(), True)
        f = self._flags
        paths: set[str] = set()
        everything, self._everything = self._everything, False
        new_dirs: list[str] = []
        while True:
            events = self._inotify.read(timeout=0)
            if not events:
                break
            for e in events:
                if e.mask & f.Q_OVERFLOW:
                    everything = True
                    continue
                d = self._dirs.get(e.wd)
                if e.mask & f.IGNORED:
                    self._dirs.pop(e.wd, None)
                    continue
                if d is None or e.mask & (f.DELETE_SELF | f.MOVE_SELF):
                    continue
                if e.name == ".git" or not e.name:
                    continue
                rel = f"{d}/{e.name}" if d else e.name
                if e.mask & f.ISDIR:
                    if e.mask & (f.CREATE | f.MOVED_TO):
                        new_dirs.append(rel)
                        paths.add(rel)
                    elif e.mask & (f.DELETE | f.MOVED_FROM):
                        everything = True  # the index's entries under it must go: staged whole
                    continue
                paths.add(rel)
        for rel in new_dirs:
            self._watch_tree(rel)  # before git reads it: a file written after git's scan raises an event
        if self.broken:
            return Changes(set(), True)
        return Changes(paths, everything or len(paths) > MAX_CHANGED_PATHS)

    def close(self) -> None:
        with contextlib.suppress(OSError):
            self._inotify.close()


# -- snapshots -----------------------------------------------------------------------------------------


class WorkspaceSnapshots:
    """Takes one phase's workspace snapshots (``start``, then ``take`` at each checkpoint); off the event
    loop, one at a time (``take`` holds a lock).

    ``kind`` GIT_COMMIT for a worktree phase (``work_dir`` its worktree), GIT_TREE in place (``work_dir``
    the repository's top level), NONE without a repository. ``state_dir``: a private directory of the
    phase's (its recording directory's) for the index.
    """

    def __init__(self, kind: WorkspaceKind, work_dir: Path | None, repository: Path | None, state_dir: Path,
                 job_id: str, phase_id: str, *, watch: bool = True):
        self.kind = kind if work_dir is not None and repository is not None else WorkspaceKind.NONE
        self.work_dir = work_dir
        self.repository = repository
        self.job_id, self.phase_id = job_id, phase_id
        self._dir = state_dir / "checkpoint-index"
        self._index = self._dir / "index"
        self._watching = watch
        self._watch: ChangeWatch | None = None
        self._known: set[str] = set()  # paths in the private index (a deleted one is staged by its path)
        self._last: WorkspaceSnapshot | None = None
        self._last_number = 0
        self._lock = threading.Lock()
        self._refs: list[tuple[str, str, bytes]] = []  # (ref, commit id, commit object) not written yet
        self._object_format = "sha1"
        self._head_files: tuple[Path, ...] = ()  # HEAD, what it points to, packed-refs
        self._head_seen: tuple[tuple[float, int, int] | None, ...] | None = None
        self._head = ""
        self.staged_everything = 0  # snapshots that staged the whole working tree (benchmarks, tests)

    def _git(self, *args: str, check: bool = True, stdin: bytes | None = None) -> bytes:
        assert self.work_dir is not None
        if stdin is None:
            return git(self.work_dir, *_SPLIT, *args, env=_env(self._index), check=check)
        return _git_input(self.work_dir, (*_SPLIT, *args), _env(self._index), stdin, check=check)

    def start(self) -> WorkspaceSnapshot:
        """The workspace as the phase starts (checkpoint 0); the watch starts before the first scan."""
        if self.kind is WorkspaceKind.NONE:
            return WorkspaceSnapshot(WorkspaceKind.NONE, reason=NO_WORKSPACE_REASON)
        with self._lock:
            self._dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            if self._watching:
                try:
                    self._watch = ChangeWatch(self.work_dir)  # type: ignore[arg-type]
                except OSError as exc:  # no inotify here (a container without it): stage everything
                    log.info("no inotify watch for checkpoints", extra={"fields": {"error": str(exc)}})
            self._head_files = self._head_paths()
            self._object_format = git(self.work_dir, "rev-parse", "--show-object-format", env=_env(),  # type: ignore[arg-type]
                                      check=False).decode().strip() or "sha1"
            head = self._head_now()
            if head:
                self._git("read-tree", head)
            else:
                self._git("read-tree", "--empty")
            return self._snapshot(0, everything=True)

    def take(self, number: int) -> WorkspaceSnapshot:
        """The workspace now, as checkpoint ``number``."""
        if self.kind is WorkspaceKind.NONE:
            return WorkspaceSnapshot(WorkspaceKind.NONE, reason=NO_WORKSPACE_REASON)
        with self._lock:
            changes = self._watch.drain() if self._watch is not None else Changes(set(), True)
            return self._snapshot(number, everything=changes.everything, paths=changes.paths)

    def _snapshot(self, number: int, *, everything: bool, paths: set[str] = frozenset()) -> WorkspaceSnapshot:  # type: ignore[assignment]
        tree: str | None = None
        if everything or self._last is None:
            self._stage_everything()
        elif paths:
            tree = self._stage(paths)
        head = self._head_now()
        last = self._last
        if last is not None and not everything and not paths and head == last.head:
            tree = last.tree  # nothing changed: not even the index is read
        elif tree is None:
            tree = self._git("write-tree").decode().strip()
        if last is not None and tree == last.tree and head == last.head:
            snap = replace(last, same_as=last.same_as if last.same_as is not None else self._last_number)
            return snap
        snap = WorkspaceSnapshot(self.kind, tree=tree, head=head, repository=str(self.repository))
        if self.kind is WorkspaceKind.GIT_COMMIT:
            # The commit's id is computed here and the object written with its ref in the next batch
            # (_write_refs): a snapshot costs two git calls, not four (benchmarks/bench_checkpoints.py).
            body = commit_body(tree, head, f"helix-runner checkpoint {number} of {self.job_id}/{self.phase_id}",
                               int(time.time()))
            commit = object_id(self._object_format, "commit", body)
            ref = checkpoint_ref(self.job_id, self.phase_id, number)
            self._refs.append((ref, commit, body))
            if len(self._refs) >= REF_BATCH:
                self._write_refs()
            snap = replace(snap, commit=commit, ref=ref)
        self._last, self._last_number = snap, number
        return snap

    def _head_paths(self) -> tuple[Path, ...]:
        """The files HEAD's commit is read from: HEAD, the branch's loose ref, packed-refs (their stat
        data says whether HEAD can have moved since the last snapshot)."""
        out = git(self.work_dir, "rev-parse", "--git-dir", "--git-common-dir", "--symbolic-full-name", "HEAD",  # type: ignore[arg-type]
                  env=_env(), check=False).decode().splitlines()
        if len(out) < 2:
            return ()
        git_dir, common = (Path(p) if Path(p).is_absolute() else self.work_dir / p for p in out[:2])  # type: ignore[operator]
        files = [git_dir / "HEAD", common / "packed-refs"]
        if len(out) > 2 and out[2].startswith("refs/"):
            files.append(common / out[2])
        return tuple(files)

    def _head_now(self) -> str:
        """HEAD's commit: asked of git only when HEAD, its ref or packed-refs changed on disk."""
        seen = tuple(_stat(p) for p in self._head_files) if self._head_files else None
        if seen is None or seen != self._head_seen:
            self._head = git_worktree.head_commit(self.work_dir)  # type: ignore[arg-type]
            self._head_seen = seen
        return self._head

    def _write_refs(self) -> None:
        """The commits made since the last batch, and their hidden refs: two git calls for the batch."""
        refs, self._refs = self._refs, []
        if not refs or self.work_dir is None:
            return
        with tempfile.TemporaryDirectory(prefix="helix-commits-") as tmp:
            paths = []
            for i, (_, _, body) in enumerate(refs):
                path = Path(tmp) / str(i)
                path.write_bytes(body)
                paths.append(str(path))
            written = _git_input(self.work_dir, ("hash-object", "-t", "commit", "-w", "--stdin-paths"), _env(),
                                 "\n".join(paths).encode() + b"\n", check=True).decode().split()
        if written != [commit for _, commit, _ in refs]:  # the ids promised: git must agree, or we stop here
            raise GitError(f"checkpoint commits were written as {written}, not {[c for _, c, _ in refs]}")
        data = b"".join(b"update " + r.encode() + b"\0" + c.encode() + b"\0\0" for r, c, _ in refs)
        _git_input(self.work_dir, ("update-ref", "--stdin", "-z"), _env(), data, check=True)

    def _stage_everything(self) -> None:
        self.staged_everything += 1
        self._run_add(["."])
        listed = self._git("ls-files", "-z")
        self._known = {p for p in listed.decode("utf-8", "surrogateescape").split("\0") if p}

    def _stage(self, paths: set[str]) -> str | None:
        """Stages the changed ``paths``; the index's tree when it was written in the same git run
        (the usual case), else None (the whole working tree was staged instead)."""
        assert self.work_dir is not None
        specs: set[str] = set()
        for rel in paths:
            if os.path.lexists(self.work_dir / rel) or rel in self._known:
                specs.add(rel)
            else:  # created and removed again, or under a directory staged whole: its nearest existing parent
                parent = os.path.dirname(rel)
                while parent and not os.path.isdir(self.work_dir / parent):
                    parent = os.path.dirname(parent)
                if not parent:
                    self._stage_everything()
                    return None
                specs.add(parent)
        tree = self._add_then_write_tree(sorted(specs))
        if tree is None:
            self._stage_everything()
            return None
        for rel in specs:
            if os.path.lexists(self.work_dir / rel):
                self._known.add(rel)
        return tree

    def _add_then_write_tree(self, specs: list[str]) -> str | None:
        """``_run_add`` of these paths and ``write-tree``, in one run of the server's git (one box
        start, one config read: most of a checkpoint's cost); the tree, or None when the add failed."""
        try:
            status, out, err = HOST_GIT.run_then(
                self.work_dir, (*_SPLIT, *_ADD), (*_SPLIT, "write-tree"), env=_env(self._index),  # type: ignore[arg-type]
                input=_pathspecs(specs))
        except GitError:
            return None
        if status == 1 and not _only_ignored(err.decode("utf-8", "replace")):
            return None
        return out.decode().strip() or None

    def _run_add(self, specs: list[str]) -> None:
        """``git add -A`` of these literal paths; an explicitly named ignored path is left out (git
        says so and exits 1), which is fine. GitError for any other failure."""
        try:
            self._git(*_ADD, stdin=_pathspecs(specs))
        except GitError as exc:
            if not _only_ignored(str(exc)):
                raise

    def close(self) -> None:
        """Stops the watch and removes the private index (the snapshots' objects stay)."""
        with self._lock:
            if self._watch is not None:
                self._watch.close()
                self._watch = None
            try:
                self._write_refs()
            except GitError as exc:  # the commits stay; only their refs are missing (gc keeps them for weeks)
                log.warning("writing checkpoint refs failed", extra={"fields": {"error": str(exc)}})
            shutil.rmtree(self._dir, ignore_errors=True)

    def flush(self) -> None:
        """Writes the pending hidden refs now (a fork of a checkpoint takes its commit: it must be kept)."""
        with self._lock:
            self._write_refs()


def _pathspecs(specs: list[str]) -> bytes:
    """Paths for ``_ADD``'s stdin: NUL-separated, as they are on disk."""
    return b"".join(s.encode("utf-8", "surrogateescape") + b"\0" for s in specs)


def _only_ignored(stderr: str) -> bool:
    """Whether ``git add``'s exit 1 only says an explicitly named path is ignored (then left out)."""
    return "paths are ignored" in stderr and "fatal" not in stderr


def commit_body(tree: str, parent: str, message: str, when: int) -> bytes:
    """A commit object's content as git writes it (helix-runner's identity, UTC)."""
    stamp = f"{when} +0000"
    lines = [f"tree {tree}", *([f"parent {parent}"] if parent else []),
             f"author helix-runner <helix-runner@localhost> {stamp}",
             f"committer helix-runner <helix-runner@localhost> {stamp}", "", message, ""]
    return "\n".join(lines).encode()


def object_id(object_format: str, kind: str, body: bytes) -> str:
    """The id git gives an object (its header and content hashed with the repository's hash)."""
    h = hashlib.new("sha256" if object_format == "sha256" else "sha1")
    h.update(f"{kind} {len(body)}\0".encode() + body)
    return h.hexdigest()


def _stat(path: Path) -> tuple[float, int, int] | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return (st.st_mtime_ns, st.st_size, st.st_ino)


def _git_input(cwd: Path, args: tuple[str, ...], env: dict[str, str], data: bytes, *, check: bool) -> bytes:
    """``git args`` with ``data`` on stdin, through the server's git runner."""
    return HOST_GIT.run(cwd, *args, env=env, input=data, check=check)


# -- using a snapshot ----------------------------------------------------------------------------------


def fork_commit(snapshot: WorkspaceSnapshot, job_id: str, phase_id: str, number: int) -> str:
    """A commit holding ``snapshot``'s working tree, for a fork's worktree to start from: a worktree
    checkpoint's own commit (once its batch is written: a running phase's newest may not be yet), or
    the tree committed on the HEAD it had, made now."""
    repo = Path(snapshot.repository)
    if snapshot.commit and _object_type(repo, snapshot.commit) == "commit":
        return snapshot.commit
    parents = ("-p", snapshot.head) if snapshot.head else ()
    return git(repo, *_IDENTITY, "commit-tree", snapshot.tree, *parents, "-m",
               f"helix-runner checkpoint {number} of {job_id}/{phase_id} (in place)", env=_env()).decode().strip()


def has_objects(snapshot: WorkspaceSnapshot) -> bool:
    """Whether this replica reaches the snapshot's repository and its objects are still there."""
    repo = Path(snapshot.repository) if snapshot.repository else None
    if repo is None or not repo.is_dir():
        return False
    return bool(snapshot.tree) and _object_type(repo, snapshot.tree) == "tree"


def _object_type(repo: Path, object_id: str) -> str:
    return git(repo, "cat-file", "-t", object_id, env=_env(), check=False).decode().strip()


def restore(snapshot: WorkspaceSnapshot, work_dir: Path) -> None:
    """Puts ``work_dir`` back as it was at ``snapshot`` (a rewind in place): HEAD, the index and the
    tracked files to the checkpoint's HEAD, untracked files removed (ignored ones stay), then the
    checkpoint's uncommitted and untracked changes written back (unstaged, as they were)."""
    env = _env()
    rw = (work_dir,)  # a rewind writes the working tree back
    if snapshot.head:
        git(work_dir, "reset", "--quiet", "--hard", snapshot.head, env=env, writable=rw)
    git(work_dir, "clean", "--quiet", "-d", "--force", env=env, writable=rw)
    empty = git(work_dir, "hash-object", "-t", "tree", "/dev/null", env=env).decode().strip()
    base = git(work_dir, "rev-parse", f"{snapshot.head}^{{tree}}", env=env).decode().strip() if snapshot.head \
        else empty
    if base == snapshot.tree:
        return
    with tempfile.TemporaryDirectory(prefix="helix-restore-") as tmp:
        ienv = _env(Path(tmp) / "index")
        git(work_dir, "read-tree", base, env=ienv)
        git(work_dir, "update-index", "-q", "--refresh", env=ienv, check=False)  # the stat data of the files
        # A two-tree merge from the HEAD's tree to the checkpoint's: writes the files that differ.
        git(work_dir, "read-tree", "-m", "-u", base, snapshot.tree, env=ienv, writable=rw)


def delete_refs(repository: Path, job_id: str, phase_id: str) -> int:
    """Deletes a phase's checkpoint refs (retention); returns how many."""
    if not repository.is_dir():
        return 0
    prefix = refs_prefix(job_id, phase_id) + "/"
    out = git(repository, "for-each-ref", "--format=%(refname)", prefix, env=_env(), check=False)
    refs = [r for r in out.decode().splitlines() if r.startswith(prefix)]
    if refs:
        _git_input(repository, ("update-ref", "--stdin", "-z"), _env(),
                   b"".join(b"delete " + r.encode() + b"\0\0" for r in refs), check=True)
    return len(refs)
