"""A phase's workspace: in place or a git worktree of its own, and what the phase changed there.

We drive git directly rather than the CLI's ``-w/--worktree [name]``: that flag takes only a name
(2.1.330 ``claude --help``), always branches from the current HEAD, puts the worktree inside the
repository (``.claude/worktrees/``) and leaves its removal to an interactive exit prompt, so the
server would control neither the base ref, nor the branch, nor the location, nor the cleanup.

Artifacts compare two snapshots of the working tree taken as tree objects through a private
index file (``GIT_INDEX_FILE``): so untracked files count, ignored ones do not, uncommitted and
committed changes alike, and neither the user's index nor the branch is touched. Every git call
goes through the server's git runner (``host_git.py``): a repository's config and attributes
must not make the server run their programs.

Crash safety: a worktree gets a manifest (JSON next to it under ``<data_dir>/worktrees/``)
before it is made, whose state says how far it got; ``sweep`` at startup removes half-made ones
and applies the retention policy to those a dead server left behind.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import logging
import os
import re
import tempfile
import threading
from dataclasses import dataclass, replace
from pathlib import Path

from helix_runner.domain.artifacts import PhaseArtifacts, bounded_diff, changed_files
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.process.beneath import remove_tree
from helix_runner.process.host_git import HOST_GIT, GitError

log = logging.getLogger(__name__)

# git guards a repository's refs, config and worktree list with lock files and fails at once,
# rather than waiting, when another git command holds one; so this process runs the commands that
# change a repository's worktrees and branches (`worktree add/remove`, `branch -D`) one at a time
# per repository, and two phases of one repository starting or ending together cannot fail each other.
_repo_locks: dict[str, threading.Lock] = {}
_repo_locks_guard = threading.Lock()


def _repo_lock(repo: Path) -> threading.Lock:
    with _repo_locks_guard:
        return _repo_locks.setdefault(str(repo), threading.Lock())


# A job's directory under worktrees/ is removed with its last manifest; a phase of the same job
# starting meanwhile creates it again before writing its own manifest (both under this lock).
_JOB_DIRS_LOCK = threading.Lock()

RETENTIONS = ("KEEP", "REMOVE", "REMOVE_ON_SUCCESS")


def _no_follow(path: str, flags: int) -> int:
    """An ``open`` opener that refuses a symlink at the path (``O_NOFOLLOW``)."""
    return os.open(path, flags | os.O_NOFOLLOW)


def git(cwd: Path, *args: str, env: dict[str, str] | None = None, stdout=None, check: bool = True,
        writable: tuple[Path, ...] = ()) -> bytes:
    """Runs ``git args`` in ``cwd`` through the server's git runner (process/host_git.py: nothing
    the repository names runs); stdout bytes (or written to ``stdout``). ``env``: git variables."""
    return HOST_GIT.run(cwd, *args, env=env, stdout=stdout, check=check, writable=writable)


def may_be_in_repository(path: Path) -> bool:
    """Whether git could find a repository from ``path``: a ``.git`` entry (any kind, even a
    dangling link) or a directory that looks like a git directory (``HEAD`` and ``objects``, as
    git's own discovery checks) at it or above it, on the physical path git walks. False: git
    would find none (the server's git gets no ``GIT_DIR``, host_git.git_env)."""
    try:
        real = Path(os.path.realpath(path))
    except (OSError, ValueError):
        return True  # let git answer
    for d in (real, *real.parents):
        if os.path.lexists(d / ".git") or (os.path.isfile(d / "HEAD") and os.path.isdir(d / "objects")):
            return True
    return False


def repo_toplevel(path: Path) -> Path | None:
    """The top level of the repository holding ``path`` (resolved), or None outside any repository."""
    if not may_be_in_repository(path):
        # Nothing git could discover: no git run (a config read and a boxed rev-parse, ~9 ms of a
        # phase's start when its directory is no repository).
        return None
    try:
        out = git(path, "rev-parse", "--show-toplevel")
    except GitError:
        return None
    return Path(out.decode().strip()).resolve()


def head_commit(top: Path) -> str:
    """HEAD's commit id, or "" for an unborn branch."""
    out = git(top, "rev-parse", "--verify", "--quiet", "HEAD^{commit}", check=False)
    return out.decode().strip()


def snapshot_tree(top: Path) -> str:
    """The working tree (untracked files included, ignored ones not) as a tree object id."""
    with tempfile.TemporaryDirectory(prefix="helix-index-") as tmp:
        env = {"GIT_INDEX_FILE": str(Path(tmp) / "index")}
        if head_commit(top):
            git(top, "read-tree", "HEAD", env=env)
        else:
            git(top, "read-tree", "--empty", env=env)
        git(top, "add", "-A", "--", ".", env=env)
        return git(top, "write-tree", env=env).decode().strip()


def branch_name(job_id: str, phase_id: str) -> str:
    """``helix/<job>/<phase>`` made a legal ref name (ids allow ':' and '..', refs do not)."""

    def part(s: str) -> str:
        s = s.replace(":", "_").replace("..", "__")
        s = re.sub(r"^\.", "_", s)
        return s + "_" if s.endswith(".lock") or s.endswith(".") else s

    return f"helix/{part(job_id)}/{part(phase_id)}"


@dataclass
class PhaseWorkspace:
    """Where one phase runs and how its changes are collected; made by ``plan_workspace``."""

    mode: str  # IN_PLACE | GIT_WORKTREE
    requested_dir: Path
    toplevel: Path | None
    retention: str = "REMOVE_ON_SUCCESS"
    base_commit: str = ""
    branch: str = ""
    worktree_path: Path | None = None
    manifest_path: Path | None = None
    diff_path: Path | None = None
    start_tree: str = ""
    # The phase moved here from another replica (issue 24): its branch exists (work in progress
    # committed at the hand-over) and the worktree is made from it; the diff still starts at base_commit.
    continued: bool = False

    @property
    def cwd(self) -> Path:
        """The directory the CLI runs in."""
        if self.mode == "GIT_WORKTREE" and self.worktree_path and self.toplevel:
            return self.worktree_path / self.requested_dir.relative_to(self.toplevel)
        return self.requested_dir

    @property
    def git_dir(self) -> Path | None:
        return self.worktree_path if self.mode == "GIT_WORKTREE" else self.toplevel

    def keeps(self, status: PhaseStatus) -> bool:
        """Whether the worktree stays after a phase that ended with ``status``."""
        return self.retention == "KEEP" or (self.retention == "REMOVE_ON_SUCCESS" and status != PhaseStatus.SUCCEEDED)

    async def create(self) -> None:
        """Makes the worktree (GIT_WORKTREE) and takes the starting snapshot."""
        await asyncio.to_thread(self._create)

    def _create(self) -> None:
        if self.mode == "GIT_WORKTREE":
            assert self.worktree_path and self.manifest_path and self.toplevel
            self._write_manifest("creating")
            try:
                self.worktree_path.parent.mkdir(parents=True, exist_ok=True)
                with _repo_lock(self.toplevel):
                    if self.continued:
                        # The previous replica's worktree of the branch is gone (removed at its hand-over, or
                        # on a lost replica's disk): forget it, then check the branch out here.
                        git(self.toplevel, "worktree", "prune")
                        git(self.toplevel, "worktree", "add", "--quiet", "--force", str(self.worktree_path),
                            self.branch, writable=(self.worktree_path.parent,))
                    else:
                        git(self.toplevel, "worktree", "add", "--quiet", "-b", self.branch, str(self.worktree_path),
                            self.base_commit, writable=(self.worktree_path.parent,))
            except (GitError, OSError) as exc:
                _settle(self.manifest_path, PhaseStatus.FAILED, half_made=True)
                raise RunnerError(ErrorKind.FAILED_PRECONDITION, "PREFLIGHT_FAILED",
                                  f"cannot create the phase's git worktree: {exc}",
                                  {"missing": "worktree", "path": str(self.worktree_path), "error": str(exc)}) from None
            self._write_manifest("active")
            self.start_tree = git(self.toplevel, "rev-parse", f"{self.base_commit}^{{tree}}").decode().strip()
        elif self.toplevel is not None:
            try:
                self.base_commit = head_commit(self.toplevel)
                self.start_tree = snapshot_tree(self.toplevel)
            except GitError as exc:  # the phase still runs; its result says why there is no diff
                log.warning("no starting snapshot of the phase's repository", extra={"fields": {"error": str(exc)}})
                self.start_tree = ""

    async def hand_over(self) -> str:
        """The phase moves to another replica: its work in progress is committed to its branch and this
        replica's worktree is removed (the branch stays, in the shared repository); the commit id."""
        return await asyncio.to_thread(self._hand_over)

    def _hand_over(self) -> str:
        if self.mode != "GIT_WORKTREE" or self.worktree_path is None or self.toplevel is None:
            return ""
        author = ("-c", "user.name=helix-runner", "-c", "user.email=helix-runner@localhost")
        git(self.worktree_path, "add", "-A", "--", ".")
        git(self.worktree_path, *author, "commit", "--quiet", "--allow-empty", "--no-verify",
            "-m", "helix-runner: work in progress at a hand-over to another replica")
        commit = head_commit(self.worktree_path)
        with _repo_lock(self.toplevel):
            git(self.toplevel, "worktree", "remove", "--force", str(self.worktree_path),
                writable=(self.worktree_path.parent,))
        if self.manifest_path is not None:
            with contextlib.suppress(OSError):
                self.manifest_path.unlink()
        return commit

    async def collect(self) -> PhaseArtifacts:
        """What changed since ``create``; never raises (a git failure is the artifacts' reason)."""
        try:
            return await asyncio.to_thread(self._collect)
        except GitError as exc:
            return PhaseArtifacts.unavailable(f"collecting the changes failed: {exc}")

    def _collect(self) -> PhaseArtifacts:
        top = self.git_dir
        if top is None:
            return PhaseArtifacts.unavailable()
        if not self.start_tree:
            return PhaseArtifacts.unavailable("the repository could not be snapshotted when the phase started")
        head = head_commit(top)
        end_tree = snapshot_tree(top)
        common = ("diff", "--no-ext-diff", "--no-textconv", "--no-color", "-M")
        name_status = git(top, *common, "-z", "--name-status", self.start_tree, end_tree)
        numstat = git(top, *common, "-z", "--numstat", self.start_tree, end_tree)
        assert self.diff_path is not None
        self.diff_path.parent.mkdir(parents=True, exist_ok=True)
        # Written beside and renamed into place: a symlink planted at the path is replaced, never
        # written through (the recording directory is the server's, but defence in depth).
        fd, tmp = tempfile.mkstemp(prefix=".diff-", dir=self.diff_path.parent)
        try:
            with os.fdopen(fd, "wb") as out:
                git(top, *common, self.start_tree, end_tree, stdout=out)
            os.replace(tmp, self.diff_path)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
        size = self.diff_path.stat().st_size
        with open(self.diff_path, "rb", opener=_no_follow) as f:
            text, truncated = bounded_diff(f.read(64 * 1024 + 1))
        return PhaseArtifacts(
            git_available=True, base_commit=self.base_commit,
            final_commit=head if head and head != self.base_commit else "",
            branch=self.branch, worktree_path=str(self.worktree_path or ""),
            changed_files=changed_files(name_status, numstat), diff=text, diff_truncated=truncated or size > len(
                text.encode()), diff_bytes=size,
        )

    def with_retention(self, artifacts: PhaseArtifacts, status: PhaseStatus) -> PhaseArtifacts:
        """The artifacts saying whether the worktree outlives the phase."""
        if self.mode != "GIT_WORKTREE" or not artifacts.git_available:
            return artifacts
        return replace(artifacts, worktree_kept=self.keeps(status))

    async def release(self, status: PhaseStatus) -> None:
        """Applies the retention policy after the phase (the branch is kept either way)."""
        if self.mode != "GIT_WORKTREE" or self.manifest_path is None:
            return
        await asyncio.to_thread(_settle, self.manifest_path, status)

    def _write_manifest(self, state: str) -> None:
        assert self.manifest_path is not None
        body = {"state": state, "repo": str(self.toplevel), "path": str(self.worktree_path), "branch": self.branch,
                "base": self.base_commit, "retention": self.retention}
        tmp = self.manifest_path.with_suffix(".tmp")
        with _JOB_DIRS_LOCK:  # the job's directory is not removed between its mkdir and the write
            self.manifest_path.parent.mkdir(parents=True, exist_ok=True)
            tmp.write_text(json.dumps(body))
        os.replace(tmp, self.manifest_path)


def worktrees_dir(data_dir: Path) -> Path:
    return data_dir / "worktrees"


def _safe(name: str) -> str:
    return name.replace(":", "_").replace("..", "__")


def plan_workspace(*, mode: str, workdir: Path, job_id: str, phase_id: str, base_ref: str, retention: str,
                   roots: tuple[Path, ...], data_dir: Path, recording_dir: Path,
                   continue_from: str = "") -> PhaseWorkspace:
    """Checks everything a GIT_WORKTREE request can get wrong, without changing anything yet.

    ``continue_from``: the phase moved here; its branch exists and this is its base commit."""
    top = repo_toplevel(workdir)
    diff_path = recording_dir / "diff.patch"
    if mode != "GIT_WORKTREE":
        return PhaseWorkspace("IN_PLACE", workdir, top, diff_path=diff_path)
    if top is None:
        raise invalid_field("options.workspace", f"GIT_WORKTREE needs a git repository; {workdir} is not in one",
                            path=workdir)
    if not any(top == r or r in top.parents for r in roots):
        # The worktree copies the whole repository: its top level must be inside a root too.
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "WORKING_DIR_OUTSIDE_ROOTS",
                          f"the repository of working_dir ({top}) is outside the workspace roots",
                          {"field": "working_dir", "path": str(workdir), "resolved": str(top),
                           "roots": ":".join(str(r) for r in roots)})
    branch = branch_name(job_id, phase_id)
    where = worktrees_dir(data_dir) / _safe(job_id)
    if continue_from:
        if not _ref_exists(top, branch):
            raise RunnerError(ErrorKind.FAILED_PRECONDITION, "PREFLIGHT_FAILED",
                              f"the phase's branch {branch} is not in {top}", {"missing": "branch", "branch": branch})
        return PhaseWorkspace("GIT_WORKTREE", workdir, top, retention=retention, base_commit=continue_from,
                              branch=branch, worktree_path=where / _safe(phase_id),
                              manifest_path=where / f"{_safe(phase_id)}.json", diff_path=diff_path, continued=True)
    ref = base_ref or "HEAD"
    base = git(top, "rev-parse", "--verify", "--quiet", "--end-of-options", f"{ref}^{{commit}}",
               check=False).decode().strip()
    if not base:
        raise invalid_field("options.base_ref", f"{ref!r} is not a commit of {top}", base_ref=ref, repository=top)
    if _ref_exists(top, branch):
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "INVALID_FIELD",
                          f"branch {branch} already exists in {top}; choose another job or phase id",
                          {"field": "phase_id", "branch": branch, "repository": str(top)})
    return PhaseWorkspace("GIT_WORKTREE", workdir, top, retention=retention, base_commit=base, branch=branch,
                          worktree_path=where / _safe(phase_id), manifest_path=where / f"{_safe(phase_id)}.json",
                          diff_path=diff_path)


def _ref_exists(top: Path, branch: str) -> bool:
    try:
        HOST_GIT.run(top, "show-ref", "--verify", "--quiet", f"refs/heads/{branch}", read_only=True)
    except GitError:
        return False
    return True


def _remove(repo: Path, path: Path, root: Path) -> None:
    """Removes a worktree (tolerating one git never registered or a directory already gone)."""
    if repo.is_dir():
        with contextlib.suppress(GitError):
            git(repo, "worktree", "remove", "--force", "--force", str(path), writable=(path.parent,))
    if path.exists() and root in path.resolve().parents:
        # By directory descriptors (process/beneath.py): the phase wrote the tree, and a link in it
        # is removed, never followed out of it.
        remove_tree(path, ignore_errors=True)
    if repo.is_dir():
        with contextlib.suppress(GitError):
            git(repo, "worktree", "prune")


def _settle(manifest: Path, status: PhaseStatus, *, half_made: bool = False) -> str:
    """Keeps or removes one manifest's worktree; "kept" or "removed"."""
    body = json.loads(manifest.read_text())
    path, repo = Path(body["path"]), Path(body["repo"])
    retention = body.get("retention", "REMOVE_ON_SUCCESS")
    keep = not half_made and (retention == "KEEP" or (retention == "REMOVE_ON_SUCCESS"
                                                       and status != PhaseStatus.SUCCEEDED))
    root = manifest.parent.parent
    if keep:
        body["state"] = "kept"
        manifest.write_text(json.dumps(body))
        return "kept"
    with _repo_lock(repo):
        _remove(repo, path, root)
        if half_made and body.get("base") and repo.is_dir():
            # A branch made by an interrupted `worktree add` holds nothing of the phase's yet.
            with contextlib.suppress(GitError):
                tip = git(repo, "rev-parse", "--verify", "--quiet", f"refs/heads/{body['branch']}", check=False)
                if tip.decode().strip() == body["base"]:
                    git(repo, "branch", "-D", body["branch"])
    with _JOB_DIRS_LOCK:
        manifest.unlink(missing_ok=True)
        _remove_if_empty(manifest.parent)
    return "removed"


def _remove_if_empty(job_dir: Path) -> None:
    """Removes a job's directory under worktrees/ once nothing of it is left (another phase of the
    job may still have its worktree or manifest there; then it stays)."""
    with contextlib.suppress(OSError):  # not empty, or already gone
        job_dir.rmdir()


def sweep(data_dir: Path) -> dict[str, str]:
    """At startup (no phase runs yet): settles the worktrees a previous server left; {path: action}.

    ``creating``: half made, removed. ``active``: its phase was interrupted by the crash, so the
    policy applies as for an INTERRUPTED phase. ``kept``: left alone.
    """
    actions: dict[str, str] = {}
    root = worktrees_dir(data_dir)
    if not root.is_dir():
        return actions
    for manifest in sorted(root.glob("*/*.json")):
        try:
            body = json.loads(manifest.read_text())
            state = body.get("state")
            if state == "kept":
                continue
            actions[body["path"]] = _settle(manifest, PhaseStatus.INTERRUPTED, half_made=state != "active")
        except (OSError, ValueError, KeyError) as exc:
            log.warning("cannot settle a leftover worktree", extra={"fields": {"manifest": str(manifest),
                                                                                "error": str(exc)}})
    for tmp in root.glob("*/*.tmp"):
        tmp.unlink(missing_ok=True)
    for job_dir in root.iterdir():  # emptied by the above, or by a server that stopped before this change
        if job_dir.is_dir():
            _remove_if_empty(job_dir)
    return actions


def workspace_for(spec, workdir: Path, *, roots: tuple[Path, ...], data_dir: Path, default_retention: str,
                  recording_dir: Path, resolve_dir, continue_from: str = "") -> tuple[object, PhaseWorkspace]:
    """The spec with its ``add_dirs`` resolved (inside the roots, like working_dir) and its workspace plan."""
    add_dirs = tuple(str(resolve_dir(d, roots, "options.add_dirs")) for d in spec.add_dirs)
    workspace = plan_workspace(mode=spec.workspace, workdir=workdir, job_id=spec.job_id, phase_id=spec.phase_id,
                               base_ref=spec.base_ref, retention=spec.worktree_retention or default_retention,
                               roots=roots, data_dir=data_dir, recording_dir=recording_dir,
                               continue_from=continue_from)
    return replace(spec, add_dirs=add_dirs), workspace
