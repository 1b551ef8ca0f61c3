"""What a phase changed in its git working directory (mirrors ``helix.runner.v1.PhaseArtifacts``).

Pure parsing of ``git diff -z --numstat`` and ``git diff -z --name-status`` output, and the bound
on the diff a result carries inline; running git is ``process/git_worktree.py``'s job.
"""

from __future__ import annotations

from dataclasses import dataclass

# The inline diff in a PhaseResult; GetPhaseDiff serves the whole of it.
INLINE_DIFF_MAX_BYTES = 64 * 1024

NOT_A_REPOSITORY = "the phase's directory is not inside a git repository; no diff is available"


@dataclass(frozen=True)
class ChangedFile:
    """One changed path; line counts are 0 for binary files."""

    path: str
    status: str
    old_path: str = ""
    lines_added: int = 0
    lines_deleted: int = 0
    binary: bool = False


@dataclass(frozen=True)
class PhaseArtifacts:
    """Commits, changed files and the (bounded) diff of one phase."""

    git_available: bool
    unavailable_reason: str = ""
    base_commit: str = ""
    final_commit: str = ""
    branch: str = ""
    worktree_path: str = ""
    worktree_kept: bool = False
    changed_files: tuple[ChangedFile, ...] = ()
    diff: str = ""
    diff_truncated: bool = False
    diff_bytes: int = 0

    @classmethod
    def unavailable(cls, reason: str = NOT_A_REPOSITORY) -> PhaseArtifacts:
        return cls(git_available=False, unavailable_reason=reason)


def parse_name_status(output: bytes) -> list[tuple[str, str, str]]:
    """``git diff -z --name-status -M`` → [(status letter, path, old path or "")], in git's order.

    With ``-z`` each record is ``STATUS\\0PATH\\0`` or, for renames and copies (``R100``, ``C75``),
    ``STATUS\\0OLD\\0NEW\\0``; paths are verbatim (no quoting).
    """
    fields = output.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    entries: list[tuple[str, str, str]] = []
    i = 0
    while i < len(fields):
        status = fields[i].decode("ascii", "replace")
        letter = status[:1]
        if letter in ("R", "C"):
            if i + 2 >= len(fields):
                raise ValueError(f"truncated rename record at field {i}")
            old, new = _path(fields[i + 1]), _path(fields[i + 2])
            entries.append((letter, new, old))
            i += 3
        else:
            if i + 1 >= len(fields):
                raise ValueError(f"truncated record at field {i}")
            entries.append((letter, _path(fields[i + 1]), ""))
            i += 2
    return entries


def parse_numstat(output: bytes) -> dict[str, tuple[int, int, bool]]:
    """``git diff -z --numstat -M`` → {path: (added, deleted, binary)}, keyed by the new path.

    A record is ``ADDED\\tDELETED\\tPATH\\0``, or for a rename ``ADDED\\tDELETED\\t\\0OLD\\0NEW\\0``;
    binary files count ``-`` for both numbers.
    """
    fields = output.split(b"\0")
    if fields and fields[-1] == b"":
        fields.pop()
    stats: dict[str, tuple[int, int, bool]] = {}
    i = 0
    while i < len(fields):
        added, deleted, path = fields[i].split(b"\t", 2)
        if path == b"":  # a rename: the old and new paths follow as fields of their own
            if i + 2 >= len(fields):
                raise ValueError(f"truncated rename record at field {i}")
            path = fields[i + 2]
            i += 3
        else:
            i += 1
        binary = added == b"-" and deleted == b"-"
        stats[_path(path)] = (0 if binary else int(added), 0 if binary else int(deleted), binary)
    return stats


def changed_files(name_status: bytes, numstat: bytes) -> tuple[ChangedFile, ...]:
    """Both listings joined by path, sorted by path."""
    counts = parse_numstat(numstat)
    files = []
    for status, path, old in parse_name_status(name_status):
        added, deleted, binary = counts.get(path, (0, 0, False))
        files.append(ChangedFile(path=path, status=status, old_path=old, lines_added=added, lines_deleted=deleted,
                                 binary=binary))
    return tuple(sorted(files, key=lambda f: f.path))


def bounded_diff(diff: bytes, limit: int = INLINE_DIFF_MAX_BYTES) -> tuple[str, bool]:
    """The diff as text of at most ``limit`` bytes, cut after the last whole line; (text, truncated)."""
    if len(diff) <= limit:
        return diff.decode("utf-8", "replace"), False
    head = diff[:limit]
    cut = head.rfind(b"\n")
    if cut >= 0:
        head = head[: cut + 1]
    return head.decode("utf-8", "ignore"), True


def _path(raw: bytes) -> str:
    # Git paths are bytes; a non-UTF-8 name keeps its undecodable bytes as escapes rather than failing.
    return raw.decode("utf-8", "surrogateescape").encode("utf-8", "backslashreplace").decode("utf-8")
