"""Reaching what a phase wrote, from the server, without following anything the phase put in the way.

The server reads, copies, moves and deletes files in directories a phase can write: its session
transcripts in its private home (mirrored for the hand-over, copied for forks and rewinds, kept for
resume), its git worktree and its home when they are removed. A phase can swap such a file, or a
directory on the way to it, for a symbolic link to a file only the server may read (the API key
file, the database, another phase's files); a plain ``open`` (or ``shutil.move``) would follow it and
the server would copy, move or delete what it found. So every such path is reached from a directory
the phase cannot replace (its ``anchor``, e.g. the private home, which the phase can write into but
not rename), never by a path string:

- a file or directory below the anchor is opened with ``openat2`` and ``RESOLVE_BENEATH |
  RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS``: a link anywhere below the anchor, a ``..`` out of it,
  or a rename racing the open fails the open instead (the kernel resolves the whole path once).
  Where ``openat2`` is refused (a kernel before 5.6, a seccomp profile that does not know it), the
  same is done one component at a time with ``O_NOFOLLOW`` on directory descriptors: a directory
  renamed after the walk passed it is still the one the walk holds, and a link put in its place is
  refused at the next step;
- a file is returned only when it is a regular one (a FIFO would block the reader), opened
  ``O_NONBLOCK`` so that opening one cannot block either, and read up to a cap;
- directories are listed, entries moved (``renameat``, which follows no final link) and created
  relative to descriptors already held;
- a tree is removed by ``shutil.rmtree`` on a descriptor of its parent: on Linux it works on
  directory descriptors and never follows a link out of the tree (``avoids_symlink_attacks``,
  checked below), and refuses a top that is a link (which ``remove_tree`` then unlinks itself).
"""

from __future__ import annotations

import ctypes
import errno
import os
import shutil
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

_SYS_OPENAT2 = 437  # the generic syscall table (x86_64, aarch64 and the others since 5.6)
RESOLVE_NO_MAGICLINKS = 0x02
RESOLVE_NO_SYMLINKS = 0x04
RESOLVE_BENEATH = 0x08
_DIR = os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC  # a directory descriptor that can list and be walked from
_FILE = os.O_RDONLY | os.O_CLOEXEC | os.O_NOCTTY | os.O_NONBLOCK

# shutil.rmtree walks by descriptors where the platform has openat/unlinkat/fdopendir (Linux); a
# platform without them would follow a link planted in the tree, so the server refuses to start there.
if not shutil.rmtree.avoids_symlink_attacks:  # pragma: no cover - Linux has it
    raise ImportError("shutil.rmtree cannot remove a tree without following its links on this platform")


class _OpenHow(ctypes.Structure):
    _fields_ = [("flags", ctypes.c_uint64), ("mode", ctypes.c_uint64), ("resolve", ctypes.c_uint64)]


_libc = ctypes.CDLL(None, use_errno=True)
_syscall = _libc.syscall
_syscall.restype = ctypes.c_long
# None: not tried yet; False: refused here (ENOSYS, EPERM from seccomp), so the walk is used.
_openat2_works: bool | None = None


class NotBeneath(OSError):
    """The path leaves its anchor, crosses a link, or is not a regular file (or directory)."""


class TooLarge(OSError):
    """A file is larger than the reader's cap (it is not read at all)."""


def _openat2(dirfd: int, rel: str, flags: int) -> int:
    how = _OpenHow(flags, 0, RESOLVE_BENEATH | RESOLVE_NO_SYMLINKS | RESOLVE_NO_MAGICLINKS)
    fd = _syscall(_SYS_OPENAT2, dirfd, os.fsencode(rel), ctypes.byref(how), ctypes.sizeof(how))
    if fd < 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), rel)
    return fd


def _parts(rel: str) -> list[str]:
    parts = [p for p in rel.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise NotBeneath(errno.EXDEV, "the path leaves its anchor", rel)
    return parts


def _walk(dirfd: int, rel: str, flags: int) -> int:
    parts = _parts(rel)
    if not parts:
        return os.open(".", flags, dir_fd=dirfd)
    fd = os.dup(dirfd)
    try:
        for part in parts[:-1]:
            nxt = os.open(part, os.O_PATH | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC, dir_fd=fd)
            os.close(fd)
            fd = nxt
        return os.open(parts[-1], flags | os.O_NOFOLLOW, dir_fd=fd)
    finally:
        os.close(fd)


def _relative(anchor: Path, path: Path) -> str:
    try:
        return str(path.relative_to(anchor))
    except ValueError:
        raise NotBeneath(errno.EXDEV, f"{path} is not below {anchor}", str(path)) from None


def open_at(dirfd: int, rel: str, flags: int, *, use_openat2: bool | None = None, shown: str = "") -> int:
    """``rel`` opened with ``flags`` below the directory descriptor ``dirfd``, no link followed on
    the way or at the end, no ``..``; NotBeneath (an OSError) otherwise. ``use_openat2`` forces one
    way (tests); by default ``openat2``, and the walk once it was refused."""
    global _openat2_works
    shown = shown or rel
    _parts(rel)
    tried = _openat2_works if use_openat2 is None else use_openat2
    if tried is not False:
        try:
            fd = _openat2(dirfd, rel or ".", flags)
        except OSError as exc:
            if exc.errno in (errno.ENOSYS, errno.EPERM) and use_openat2 is None:
                _openat2_works = False
            elif exc.errno in (errno.ELOOP, errno.EXDEV):
                raise NotBeneath(exc.errno, "a link or a way out of the phase's directory", shown) from None
            else:
                raise
        else:
            if use_openat2 is None:
                _openat2_works = True
            return fd
    try:
        return _walk(dirfd, rel, flags)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):  # O_NOFOLLOW | O_DIRECTORY on a link: ENOTDIR
            raise NotBeneath(exc.errno, "a link on the way (or not a directory)", shown) from None
        raise


def open_fd_beneath(anchor: Path, path: Path, *, use_openat2: bool | None = None) -> int:
    """A read-only descriptor of the regular file ``path``, resolved below ``anchor`` without
    following any link; NotBeneath (an OSError) otherwise."""
    rel = _relative(anchor, path)
    if not _parts(rel):
        raise NotBeneath(errno.EISDIR, "the anchor itself is not a file", str(path))
    root = os.open(anchor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        fd = open_at(root, rel, _FILE, use_openat2=use_openat2, shown=str(path))
    finally:
        os.close(root)
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise NotBeneath(errno.EINVAL, "not a regular file", str(path))
    return fd


def open_beneath(anchor: Path, path: Path) -> BinaryIO:
    """``open_fd_beneath`` as a binary file object."""
    return os.fdopen(open_fd_beneath(anchor, path), "rb")


def read_beneath(anchor: Path, path: Path, max_bytes: int) -> bytes:
    """The whole regular file ``path`` below ``anchor`` (no link followed); TooLarge when it holds
    more than ``max_bytes`` (nothing is read then: the phase writes the file, and a read of all of it
    would hold all of it in the server's memory)."""
    with open_beneath(anchor, path) as f:
        size = os.fstat(f.fileno()).st_size
        if size > max_bytes:
            raise TooLarge(errno.EFBIG, f"{size} bytes, over the cap of {max_bytes}", str(path))
        # What is there now, then what the phase appends meanwhile, never more than the cap (a read of
        # the cap at once would allocate all of it up front).
        parts = [f.read(size)]
        got = len(parts[0])
        while got <= max_bytes and (more := f.read(min(1 << 20, max_bytes + 1 - got))):
            parts.append(more)
            got += len(more)
        data = b"".join(parts) if len(parts) > 1 else parts[0]
    if len(data) > max_bytes:
        raise TooLarge(errno.EFBIG, f"over the cap of {max_bytes} bytes", str(path))
    return data


def open_dir_beneath(anchor: Path, path: Path, *, use_openat2: bool | None = None) -> int:
    """A descriptor of the directory ``path`` (``anchor`` itself included), resolved below ``anchor``
    without following any link, for listing (``entries``) and ``*_at`` calls; NotBeneath otherwise."""
    rel = _relative(anchor, path)
    root = os.open(anchor, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    try:
        return open_at(root, rel, _DIR, use_openat2=use_openat2, shown=str(path))
    finally:
        os.close(root)


def open_subdir(dirfd: int, name: str) -> int:
    """The directory ``name`` directly in ``dirfd``, not through a link; NotBeneath otherwise."""
    if "/" in name or name in ("", ".", ".."):
        raise NotBeneath(errno.EXDEV, "not a name in this directory", name)
    try:
        return os.open(name, _DIR | os.O_NOFOLLOW, dir_fd=dirfd)
    except OSError as exc:
        if exc.errno in (errno.ELOOP, errno.ENOTDIR):
            raise NotBeneath(exc.errno, "a link or not a directory", name) from None
        raise


def entries(dirfd: int) -> Iterator[tuple[str, os.stat_result]]:
    """Each entry of the directory ``dirfd`` with its own status (a link as a link), sorted by name;
    an entry removed meanwhile is left out."""
    for name in sorted(os.listdir(dirfd)):
        try:
            yield name, os.stat(name, dir_fd=dirfd, follow_symlinks=False)
        except FileNotFoundError:
            continue


def tree_bytes(dirfd: int) -> int:
    """Bytes on disk below the directory ``dirfd`` (links counted as themselves, never followed)."""
    total = 0
    for _, dirs, files, fd in os.fwalk(".", dir_fd=dirfd, follow_symlinks=False):
        for name in (*dirs, *files):
            try:
                total += os.stat(name, dir_fd=fd, follow_symlinks=False).st_blocks * 512
            except OSError:
                pass
    return total


def write_beneath(anchor: Path, path: Path, data: bytes, *, mode: int = 0o600) -> None:
    """Writes ``data`` to ``path`` below ``anchor``, making the missing directories on the way (0700),
    following no link: a link or a non-regular file anywhere on the way fails with NotBeneath."""
    parts = _parts(_relative(anchor, path))
    if not parts:
        raise NotBeneath(errno.EISDIR, "the anchor itself is not a file", str(path))
    fd = os.open(anchor, _DIR)
    try:
        for part in parts[:-1]:
            try:
                os.mkdir(part, 0o700, dir_fd=fd)
            except FileExistsError:
                pass
            nxt = open_subdir(fd, part)
            os.close(fd)
            fd = nxt
        try:
            out = os.open(parts[-1], os.O_WRONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
                          | os.O_NOCTTY, mode, dir_fd=fd)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENXIO):  # a link; a FIFO without a reader
                raise NotBeneath(exc.errno, "a link or not a regular file", str(path)) from None
            raise
    finally:
        os.close(fd)
    with os.fdopen(out, "wb") as f:
        if not stat.S_ISREG(os.fstat(out).st_mode):
            raise NotBeneath(errno.EINVAL, "not a regular file", str(path))
        os.ftruncate(out, 0)
        f.write(data)


def remove_tree(path: Path, *, ignore_errors: bool = False) -> None:
    """Removes the directory tree ``path`` (gone already: nothing to do) without following a link
    in it; a ``path`` that is itself a link is unlinked, its target untouched. ``path``'s parent must
    be a directory the phase cannot replace (the data dir). ``ignore_errors``: what cannot be
    removed (a directory the phase made unreadable to an unprivileged server) is left, the rest goes."""
    try:
        parent = os.open(path.parent, os.O_PATH | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return
    try:
        try:
            st = os.stat(path.name, dir_fd=parent, follow_symlinks=False)
        except FileNotFoundError:
            return
        if not stat.S_ISDIR(st.st_mode):
            os.unlink(path.name, dir_fd=parent)
            return
        # Descriptor-based: lstat, open, compare the two (a swap between them is refused), then
        # fdopendir/unlinkat below, never a path string through the tree.
        shutil.rmtree(path.name, ignore_errors=ignore_errors, dir_fd=parent)
    except OSError:
        if not ignore_errors:
            raise
    finally:
        os.close(parent)


def transcript_anchor(path: Path) -> Path:
    """The directory a phase cannot replace above its transcript ``<config>/projects/<dir>/<id>.jsonl``:
    the one holding its config directory (its private home's root, or its HOME)."""
    return path.parents[3]
