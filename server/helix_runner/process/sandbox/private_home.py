"""A phase's private HOME, CLI config and temp directory, and the session transcripts kept for resume.

Each phase gets ``<data_dir>/sandbox/homes/<run id>/{home,tmp}``, made fresh from the operator's
template directory (``sandbox_home_template``; default: empty) and removed when the phase ends,
so nothing a phase writes there (settings, hooks, credentials, caches) reaches a later phase. The
home lives for all the phase's attempts, so a retry's ``--resume`` finds the transcript.

The one thing kept is the phase's session transcripts (``<config>/projects/<dir>/<session>.jsonl``
and the ``<session>/`` directory of its subagents): at the end they are moved to
``<data_dir>/sandbox/sessions/<project key>/<session id>/``, private to the phase's project. A
later phase of the same project that asks for ``resume_session_id`` gets them copied into its
fresh config under the directory name the CLI derives from its working directory; a session of
another project is refused (``SessionStore.owner``).
"""

from __future__ import annotations

import hashlib
import logging
import os
import re
import shutil
import stat
from pathlib import Path

from helix_runner.process.beneath import (
    NotBeneath,
    entries,
    open_dir_beneath,
    open_subdir,
    remove_tree,
    tree_bytes,
)

log = logging.getLogger(__name__)
_SESSION_ID = re.compile(r"^[A-Za-z0-9._-]{1,128}$")


def project_dir_name(cwd: str) -> str:
    """The directory under ``<config>/projects`` where the CLI keeps a working directory's sessions
    (CLI 2.1.332: every character but ASCII letters and digits becomes ``-``)."""
    return re.sub(r"[^A-Za-z0-9]", "-", cwd)


class PrivateHome:
    """``root/home`` (HOME, with the CLI's config in ``.claude``) and ``root/tmp``."""

    def __init__(self, root: Path):
        self.root = root
        self.home = root / "home"
        self.tmp = root / "tmp"
        self.config = self.home / ".claude"

    def create(self, template: Path | None) -> None:
        """Makes the directories (0700), the home a copy of ``template`` (symlinks kept as links)."""
        self.root.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        self.root.mkdir(mode=0o700)
        if template is not None:
            shutil.copytree(template, self.home, symlinks=True)
            self.home.chmod(0o700)
        else:
            self.home.mkdir(mode=0o700)
        self.config.mkdir(mode=0o700, exist_ok=True)
        self.tmp.mkdir(mode=0o700)

    def env(self, tmp_inside: str) -> dict[str, str]:
        """The variables that point the CLI and its tools here (``tmp_inside``: the temp dir as the
        sandbox sees it)."""
        return {"HOME": str(self.home), "CLAUDE_CONFIG_DIR": str(self.config), "TMPDIR": tmp_inside,
                "CLAUDE_CODE_TMPDIR": tmp_inside, "XDG_CONFIG_HOME": str(self.home / ".config"),
                "XDG_CACHE_HOME": str(self.home / ".cache")}

    def transcripts(self) -> dict[str, list[Path]]:
        """Session id -> its transcript file and subagent directory, from every project directory
        (no link followed on the way: the phase may have made ``projects`` a link to elsewhere)."""
        return {sid: [self.root / rel for rel in rels] for sid, rels in self._sessions().items()}

    def _sessions(self) -> dict[str, list[str]]:
        """Session id -> its entries, as paths relative to ``root`` (each a real file or directory)."""
        out: dict[str, list[str]] = {}
        for rel, name in self._session_entries():
            out.setdefault(name.removesuffix(".jsonl"), []).append(f"{rel}/{name}")
        return out

    def _session_entries(self) -> list[tuple[str, str]]:
        """(project directory relative to ``root``, entry name) of every session entry, listed by
        directory descriptors below ``root`` (which the phase cannot replace)."""
        found: list[tuple[str, str]] = []
        projects_dir = self.config / "projects"
        try:
            projects = open_dir_beneath(self.root, projects_dir)
        except (FileNotFoundError, NotBeneath):
            return found
        try:
            for project, st in entries(projects):
                if not stat.S_ISDIR(st.st_mode):
                    continue
                try:
                    fd = open_subdir(projects, project)
                except OSError:
                    continue
                rel = str((projects_dir / project).relative_to(self.root))
                try:
                    for name, est in entries(fd):
                        regular, folder = stat.S_ISREG(est.st_mode), stat.S_ISDIR(est.st_mode)
                        if _SESSION_ID.match(name.removesuffix(".jsonl")) and \
                                ((regular and name.endswith(".jsonl")) or folder):
                            found.append((rel, name))
                finally:
                    os.close(fd)
        finally:
            os.close(projects)
        return found

    def remove(self) -> None:
        remove_tree(self.root, ignore_errors=True)


def _size(found: list[tuple[int, str]]) -> int:
    """Bytes on disk of these entries (a name in a directory descriptor each): files and directory
    trees, links counted as themselves and never followed."""
    total = 0
    for dirfd, name in found:
        try:
            st = os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except OSError:
            continue
        total += st.st_blocks * 512
        if stat.S_ISDIR(st.st_mode):
            try:
                fd = open_subdir(dirfd, name)
            except OSError:
                continue
            try:
                total += tree_bytes(fd)
            finally:
                os.close(fd)
    return total


class SessionStore:
    """Transcripts kept per project: ``<root>/<project key>/<session id>/``."""

    def __init__(self, root: Path):
        self.root = root

    @staticmethod
    def project_key(project: str) -> str:
        return hashlib.sha256(project.encode()).hexdigest()[:24]

    def _dir(self, project: str, session_id: str) -> Path:
        return self.root / self.project_key(project) / session_id

    def transcript_file(self, project: str, session_id: str) -> Path:
        """Where the project's copy of a session's transcript is kept (a phase taken over from another
        replica writes the mirrored one here, so ``restore`` finds it)."""
        if not _SESSION_ID.match(session_id):
            raise ValueError(f"not a session id: {session_id[:80]!r}")
        return self._dir(project, session_id) / f"{session_id}.jsonl"

    def save(self, project: str, home: PrivateHome, max_bytes: int = 0) -> list[str]:
        """Moves the home's transcripts into the project's store (a later save of the same session
        replaces it); returns the session ids kept. A session larger than ``max_bytes`` (0: no cap)
        is not kept: the phase can write its transcripts itself, and what is kept stays in the
        data dir for good (its session then cannot be resumed).

        Each entry is moved by ``renameat`` from a descriptor of its own project directory, reached
        below the home's root without following a link: a ``projects`` (or ``.claude``) the phase
        made a link to another directory, or swapped for one meanwhile, moves nothing of that
        directory (before, the server moved whatever it found there into the store)."""
        kept = []
        for session_id, rels in home._sessions().items():
            dirs: list[tuple[int, str]] = []
            try:
                for rel in rels:
                    parent, name = rel.rsplit("/", 1)
                    dirs.append((open_dir_beneath(home.root, home.root / parent), name))
                if max_bytes and (size := _size(dirs)) > max_bytes:
                    log.warning("a phase's session transcript is over the cap and not kept for resume",
                                extra={"fields": {"session_id": session_id, "bytes": size, "cap": max_bytes}})
                    continue
                target = self._dir(project, session_id)
                staging = target.with_name(f".{session_id}.{os.getpid()}.new")
                remove_tree(staging)
                staging.mkdir(mode=0o700, parents=True)
                into = os.open(staging, os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC)
                try:
                    for fd, name in dirs:
                        os.rename(name, name, src_dir_fd=fd, dst_dir_fd=into)
                finally:
                    os.close(into)
                remove_tree(target)
                staging.rename(target)
                kept.append(session_id)
            except OSError as exc:  # a link on the way (NotBeneath), two entries of one name: the others go on
                log.warning("a phase's session transcript could not be kept for resume",
                            extra={"fields": {"session_id": session_id, "error": str(exc)}})
            finally:
                for fd, _ in dirs:
                    os.close(fd)
        return kept

    def owner(self, session_id: str) -> str | None:
        """The key of the project that holds the session, or None."""
        if not _SESSION_ID.match(session_id) or not self.root.is_dir():
            return None
        for project in self.root.iterdir():
            if (project / session_id).is_dir():
                return project.name
        return None

    def restore(self, project: str, session_id: str, home: PrivateHome, cwd: str) -> bool:
        """Copies the project's transcript of ``session_id`` into the home, where the CLI started in
        ``cwd`` looks for it; False when this project has no such session."""
        source = self._dir(project, session_id)
        if not _SESSION_ID.match(session_id) or not source.is_dir():
            return False
        target = home.config / "projects" / project_dir_name(cwd)
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        for entry in source.iterdir():
            # The store's entries are what ``save`` moved (a real file, a real directory); a link
            # below a directory is copied as a link, never followed.
            if entry.is_dir() and not entry.is_symlink():
                shutil.copytree(entry, target / entry.name, symlinks=True, dirs_exist_ok=True)
            elif entry.is_file() and not entry.is_symlink():
                shutil.copy2(entry, target / entry.name, follow_symlinks=False)
        return True
