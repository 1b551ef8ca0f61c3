"""Disk use of the directories a phase may write, measured from the server without following its links.

The workspace cap (``phases/workspace_cap.py``) samples this while a phase runs. The walk holds a
directory descriptor at each step and opens the next one with ``O_NOFOLLOW`` relative to it, so a
directory the phase swaps for a link to ``/`` mid-walk is refused, never walked (the same rule as
``process/beneath.py``). A file with several links is counted once; a root lying inside another
root is counted with the outer one. The walk stops after ``max_entries`` entries: a phase that
makes millions of empty files cannot make each sample cost the server more than that.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC | os.O_NONBLOCK
DEFAULT_MAX_ENTRIES = 2_000_000


@dataclass(frozen=True)
class DiskUsage:
    """Bytes allocated on disk (``st_blocks``) below the roots, and how many entries were seen."""

    bytes: int
    entries: int
    complete: bool  # False: the walk stopped at max_entries (``bytes`` is then a lower bound)


def outermost_roots(roots: Iterable[Path]) -> list[Path]:
    """``roots`` made absolute, without duplicates and without those inside another one."""
    norm = sorted({Path(os.path.normpath(os.path.abspath(r))) for r in roots}, key=lambda p: len(p.parts))
    out: list[Path] = []
    for root in norm:
        if not any(root == o or root.is_relative_to(o) for o in out):
            out.append(root)
    return out


def disk_usage(roots: Iterable[Path], *, max_entries: int = DEFAULT_MAX_ENTRIES) -> DiskUsage:
    """The disk use below ``roots`` (a missing root counts 0; a root that is a link is not followed)."""
    total, seen = 0, 0
    linked: set[tuple[int, int]] = set()
    for root in outermost_roots(roots):
        try:
            top = os.open(root, _DIR)
        except OSError:
            continue
        stack = [top]
        try:
            while stack:
                fd = stack.pop()
                try:
                    with os.scandir(fd) as listing:
                        for entry in listing:
                            seen += 1
                            if seen > max_entries:
                                return DiskUsage(total, seen - 1, False)
                            try:
                                st = entry.stat(follow_symlinks=False)
                            except OSError:
                                continue  # gone since the listing
                            if st.st_nlink > 1 and not stat.S_ISDIR(st.st_mode):
                                if (st.st_dev, st.st_ino) in linked:
                                    continue
                                linked.add((st.st_dev, st.st_ino))
                            total += st.st_blocks * 512
                            if stat.S_ISDIR(st.st_mode):
                                try:
                                    stack.append(os.open(entry.name, _DIR, dir_fd=fd))
                                except OSError:
                                    pass  # replaced by a link or removed since the listing: not followed
                except OSError:
                    pass
                finally:
                    os.close(fd)
        finally:
            for fd in stack:
                os.close(fd)
    return DiskUsage(total, seen, True)
