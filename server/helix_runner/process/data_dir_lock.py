"""The data directory's lock: one live server per data directory.

The data directory names a server's containment scope (its cgroups and process markers), its
recordings, worktrees and private option files; a second server on the same one would take the
first one's running phases for leftovers of a crash and end them (issue 22, item 1). So a server
holds an exclusive ``flock`` on ``<data-dir>/server.lock`` for its whole life, with its pid written
in the file for the refusal message. The kernel drops the lock when the process dies, ``kill -9``
included, so a crashed server never leaves a stale lock behind. The file descriptor is not
inherited (Python's default), so no phase can keep the lock alive after its server.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
from pathlib import Path

LOCK_NAME = "server.lock"


class DataDirInUse(Exception):
    """Another live process holds the data directory's lock; ``pid`` is its pid when it wrote one."""

    def __init__(self, data_dir: Path, pid: int | None):
        self.data_dir = data_dir
        self.pid = pid
        holder = f"pid {pid}" if pid else "pid unknown"
        super().__init__(f"the data directory {data_dir} is in use by another helix-runner server ({holder}); "
                         "give this one its own --data-dir")


class DataDirLock:
    """The held lock; ``release`` (or the process's end) frees it."""

    def __init__(self, path: Path, fd: int):
        self.path = path
        self._fd: int | None = fd

    @classmethod
    def acquire(cls, data_dir: Path) -> DataDirLock:
        """Takes the lock without waiting; DataDirInUse naming the holder's pid if it is taken.

        OSError when the file cannot be opened (the caller checked the directory is writable).
        """
        path = data_dir / LOCK_NAME
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            pid = _read_pid(fd)
            os.close(fd)
            raise DataDirInUse(data_dir, pid) from None
        except BaseException:
            os.close(fd)
            raise
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"{os.getpid()}\n".encode(), 0)
        return cls(path, fd)

    @property
    def held(self) -> bool:
        return self._fd is not None

    def release(self) -> None:
        """Frees the lock (idempotent). The file stays: unlinking it would let two servers lock two files."""
        if self._fd is not None:
            fd, self._fd = self._fd, None
            with contextlib.suppress(OSError):
                os.ftruncate(fd, 0)
            os.close(fd)


def _read_pid(fd: int) -> int | None:
    """The holder's pid from the file; None while it has not written it yet (a start a moment ago)."""
    try:
        text = os.pread(fd, 32, 0).decode("ascii", "replace").strip()
    except OSError:
        return None
    return int(text) if text.isdigit() else None
