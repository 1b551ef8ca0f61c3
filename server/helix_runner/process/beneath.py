"""Opening a file a phase wrote, from the server, without following anything the phase put in the way.

The server reads files from directories a phase can write while it runs: its session transcript in
its private home (mirrored for the hand-over, copied for forks). A phase can swap such a file, or a
directory on the way to it, for a symbolic link to a file only the server may read (the API key
file, the database, another phase's files); a plain ``open`` would follow it and the server would
copy what it found into a place a later phase reads. So such a path is opened relative to a
directory the phase cannot replace (``anchor``), with ``openat2`` and ``RESOLVE_BENEATH |
RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: a link anywhere below the anchor, a ``..`` out of it,
or a rename racing the open fails the open instead (the kernel resolves the whole path once).
Where ``openat2`` is refused (a kernel before 5.6, a seccomp profile that does not know it), the
same is done one component at a time with ``O_NOFOLLOW`` and directory descriptors. Only a regular
file is returned (a FIFO would block the reader), opened ``O_NONBLOCK`` so that opening one cannot.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
from pathlib import Path
from typing import BinaryIO

_SYS_OPENAT2 = 437  # the generic syscall table (x86_64, aarch64 and the others since 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# None: not tried yet; False: refused here (ENOSYS, EPERM from seccomp), so the walk is used.
_openat2_works: bool | None = None


class NotBeneath(OSError):
    """The path leaves its anchor, crosses a link, or is not a regular file."""


def _openat2(dirfd: int, rel: str, flags: int) -> int:
    how = _OpenHow(flags, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    fd = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return fd


def _walk(dirfd: int, rel: str, flags: int) -> int:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if not parts or ".." in parts:
        raise NotBeneath(errno.EXDEV, "the path leaves its anchor", rel)
    fd = os.dup(dirfd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def open_fd_beneath(anchor: Path, path: Path, *, use_openat2: bool | None = None) -> int:
    """A read-only descriptor of the regular file ``path``, resolved below ``anchor`` without
    following any link; NotBeneath (an OSError) otherwise."""
    global _openat2_works
    try:
        rel = str(path.relative_to(anchor))
    except ValueError:
        raise NotBeneath(errno.EXDEV, f"{path} is not below {anchor}", str(path)) from None
    flags = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK
    root = os.open(anchor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        tried = _openat2_works if use_openat2 is None else use_openat2
        fd = -1
        if tried is not False:
            try:
                fd = _openat2(root, rel, flags)
                _openat2_works = True if use_openat2 is None else _openat2_works
            except OSError as exc:
                if exc.errno in (errno.ENOSYS, errno.EPERM) and use_openat2 is None:
                    _openat2_works = False
                elif exc.errno in (errno.ELOOP, errno.EXDEV):
                    raise NotBeneath(exc.errno, "a link or a way out of the phase's directory", str(path)) from None
                else:
                    raise
        if fd < 0:
            try:
                fd = _walk(root, rel, flags)
            except OSError as exc:
                if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                    raise NotBeneath(exc.errno, "a link on the way", str(path)) from None
                raise
    finally:
        os.close(root)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotBeneath(errno.EINVAL, "not a regular file", str(path))
    return fd


def open_beneath(anchor: Path, path: Path) -> BinaryIO:
    """``open_fd_beneath`` as a binary file object."""
    return os.fdopen(open_fd_beneath(anchor, path), "rb")


def transcript_anchor(path: Path) -> Path:
    """The directory a phase cannot replace above its transcript ``<config>/projects/<dir>/<id>.jsonl``:
    the one holding its config directory (its private home's root, or its HOME)."""
    return path.parents[3]
