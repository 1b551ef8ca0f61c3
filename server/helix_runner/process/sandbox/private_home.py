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
from pathlib import Path

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
        """Session id -> its transcript file and subagent directory, from every project directory."""
        out: dict[str, list[Path]] = {}
        projects = self.config / "projects"
        if not projects.is_dir():
            return out
        for project in projects.iterdir():
            if not project.is_dir() or project.is_symlink():
                continue
            for entry in project.iterdir():
                name = entry.name.removesuffix(".jsonl")
                if _SESSION_ID.match(name) and not entry.is_symlink() and (entry.suffix == ".jsonl" or entry.is_dir()):
                    out.setdefault(name, []).append(entry)
        return out

    def remove(self) -> None:
        shutil.rmtree(self.root, ignore_errors=True)


def _size(entries: list[Path]) -> int:
    """Bytes on disk of files and directory trees (links not followed, counted as themselves)."""
    total = 0
    for entry in entries:
        for dirpath, dirnames, filenames in os.walk(entry) if entry.is_dir() and not entry.is_symlink() else \
                [(str(entry.parent), [], [entry.name])]:
            for name in (*dirnames, *filenames):
                try:
                    total += os.lstat(os.path.join(dirpath, name)).st_blocks * 512
                except OSError:
                    pass
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
        data dir for good (its session then cannot be resumed)."""
        kept = []
        for session_id, entries in home.transcripts().items():
            if max_bytes and (size := _size(entries)) > max_bytes:
                log.warning("a phase's session transcript is over the cap and not kept for resume",
                            extra={"fields": {"session_id": session_id, "bytes": size, "cap": max_bytes}})
                continue
            target = self._dir(project, session_id)
            staging = target.with_name(f".{session_id}.{os.getpid()}.new")
            shutil.rmtree(staging, ignore_errors=True)
            staging.mkdir(mode=0o700, parents=True)
            for entry in entries:
                shutil.move(str(entry), staging / entry.name)
            shutil.rmtree(target, ignore_errors=True)
            staging.rename(target)
            kept.append(session_id)
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
            if entry.is_dir():
                shutil.copytree(entry, target / entry.name, symlinks=True, dirs_exist_ok=True)
            else:
                shutil.copy2(entry, target / entry.name)
        return True
