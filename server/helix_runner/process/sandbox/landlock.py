"""Landlock through its three system calls (ctypes; no library wraps ABI 6+ scoping yet).

Standard library only, and no module the shim would not load anyway (no ``struct``, no ``stat``):
the phase shim imports it (``python -E -s -S -B``, a few ms to start).

A Landlock domain is an allowlist the kernel enforces on a process and everything it starts,
which cannot be lifted from inside. What this module offers (``restrict``):

- file access (``handled_fs``): only beneath the given directories, with the given rights;
- TCP connect (``handled_net``): only to the given ports;
- scopes (ABI 6): no signal to a process outside the domain, no connect to an abstract unix
  socket made outside it. Ptrace (and so ``/proc/<pid>/environ`` and ``mem``) of a process
  outside the domain is always denied to a process inside one.

A domain that handles file access forbids ``mount``; bubblewrap must mount after it, so the shim
applies file rules only where bubblewrap is not used (``process/sandbox/__init__.py``).
"""

from __future__ import annotations

import ctypes
import os
import sys

SYS_CREATE_RULESET = 444
SYS_ADD_RULE = 445
SYS_RESTRICT_SELF = 446
CREATE_RULESET_VERSION = 1
RULE_PATH_BENEATH = 1
RULE_NET_PORT = 2
PR_SET_NO_NEW_PRIVS = 38

# File access rights by the ABI that introduced them (include/uapi/linux/landlock.h).
FS_EXECUTE = 1 << 0
FS_WRITE_FILE = 1 << 1
FS_READ_FILE = 1 << 2
FS_READ_DIR = 1 << 3
FS_REMOVE_DIR = 1 << 4
FS_REMOVE_FILE = 1 << 5
FS_MAKE_CHAR = 1 << 6
FS_MAKE_DIR = 1 << 7
FS_MAKE_REG = 1 << 8
FS_MAKE_SOCK = 1 << 9
FS_MAKE_FIFO = 1 << 10
FS_MAKE_BLOCK = 1 << 11
FS_MAKE_SYM = 1 << 12
FS_REFER = 1 << 13  # ABI 2
FS_TRUNCATE = 1 << 14  # ABI 3
FS_IOCTL_DEV = 1 << 15  # ABI 5
NET_BIND_TCP = 1 << 0  # ABI 4
NET_CONNECT_TCP = 1 << 1  # ABI 4
SCOPE_ABSTRACT_UNIX_SOCKET = 1 << 0  # ABI 6
SCOPE_SIGNAL = 1 << 1  # ABI 6

_FS_BY_ABI = {1: (1 << 13) - 1, 2: (1 << 14) - 1, 3: (1 << 15) - 1, 4: (1 << 15) - 1, 5: (1 << 16) - 1}
READ = FS_EXECUTE | FS_READ_FILE | FS_READ_DIR
# Writing a file needs no right on its directory; these are the directory's rights to change it.
WRITE = FS_WRITE_FILE | FS_REMOVE_DIR | FS_REMOVE_FILE | FS_MAKE_DIR | FS_MAKE_REG | FS_MAKE_SOCK | \
    FS_MAKE_FIFO | FS_MAKE_SYM | FS_REFER | FS_TRUNCATE
# Devices (/dev/null, /dev/tty, ...): read, write and ioctl, no new device nodes.
DEVICE = READ | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV

_libc = None


class LandlockError(OSError):
    """A Landlock call failed; ``strerror`` says which."""


def _syscall():
    global _libc
    if _libc is None:
        _libc = ctypes.CDLL(None, use_errno=True)
        _libc.syscall.restype = ctypes.c_long
    return _libc


def abi() -> int:
    """The kernel's Landlock ABI version; 0 when Landlock is absent or disabled."""
    libc = _syscall()
    version = libc.syscall(SYS_CREATE_RULESET, None, ctypes.c_size_t(0), ctypes.c_uint32(CREATE_RULESET_VERSION))
    return int(version) if version > 0 else 0


def fs_rights(abi_version: int) -> int:
    """Every file right the kernel of ``abi_version`` knows."""
    return _FS_BY_ABI.get(min(abi_version, 5), 0)


def _u64(value: int) -> bytes:
    return value.to_bytes(8, sys.byteorder)


def _call(number: int, *args) -> int:
    result = _syscall().syscall(number, *args)
    if result < 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"landlock syscall {number}: {os.strerror(err)}")
    return int(result)


def restrict(abi_version: int, *, fs: list[tuple[str, int]] | None = None, tcp_ports: list[int] | None = None,
             scoped: bool = True) -> None:
    """Puts this process (and what it execs) in a new Landlock domain; raises LandlockError.

    ``fs``: None leaves file access unhandled; else (path, rights) rules, every other path denied.
    ``tcp_ports``: None leaves TCP unhandled; else connect is allowed to these ports only (ABI 4+).
    ``scoped``: signals and abstract unix sockets stay inside the domain (ABI 6+).
    Rules on paths that do not exist are skipped. Sets ``no_new_privs`` (Landlock requires it).
    """
    ruleset = make_ruleset(abi_version, fs=fs, tcp_ports=tcp_ports, scoped=scoped)
    if ruleset < 0:
        return
    try:
        enter(ruleset)
    finally:
        os.close(ruleset)


def make_ruleset(abi_version: int, *, fs: list[tuple[str, int]] | None = None, tcp_ports: list[int] | None = None,
                 scoped: bool = True) -> int:
    """The ruleset ``restrict`` would enter, as a file descriptor (-1 when it would handle nothing),
    built without restricting this process: a parent builds it, its child ``enter``s it."""
    all_fs = fs_rights(abi_version)
    handled_fs = all_fs if fs is not None else 0
    handled_net = NET_CONNECT_TCP if tcp_ports is not None and abi_version >= 4 else 0
    scope = SCOPE_ABSTRACT_UNIX_SOCKET | SCOPE_SIGNAL if scoped and abi_version >= 6 else 0
    attr = _u64(handled_fs) + (_u64(handled_net) if abi_version >= 4 else b"") + (_u64(scope) if abi_version >= 6 else b"")
    if not (handled_fs or handled_net or scope):
        return -1
    buf = ctypes.create_string_buffer(attr, len(attr))
    ruleset = _call(SYS_CREATE_RULESET, buf, ctypes.c_size_t(len(attr)), ctypes.c_uint32(0))
    try:
        for path, rights in fs or ():
            try:
                fd = os.open(path, os.O_PATH | os.O_CLOEXEC)
            except OSError:
                continue
            try:
                allowed = rights & all_fs
                if os.fstat(fd).st_mode & 0o170000 != 0o040000:  # not a directory
                    # A rule on a file may hold only the rights that apply to files.
                    allowed &= FS_EXECUTE | FS_READ_FILE | FS_WRITE_FILE | FS_TRUNCATE | FS_IOCTL_DEV
                # struct landlock_path_beneath_attr is packed: u64 allowed_access, s32 parent_fd.
                rule = _u64(allowed) + fd.to_bytes(4, sys.byteorder, signed=True)
                _call(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_PATH_BENEATH),
                      ctypes.create_string_buffer(rule, len(rule)), ctypes.c_uint32(0))
            finally:
                os.close(fd)
        if handled_net:
            for port in tcp_ports or ():
                rule = _u64(NET_CONNECT_TCP) + _u64(port)  # struct landlock_net_port_attr
                _call(SYS_ADD_RULE, ctypes.c_int(ruleset), ctypes.c_int(RULE_NET_PORT),
                      ctypes.create_string_buffer(rule, len(rule)), ctypes.c_uint32(0))
    except BaseException:
        os.close(ruleset)
        raise
    return ruleset


def enter(ruleset: int) -> None:
    """Sets ``no_new_privs`` and enters the domain of ``ruleset`` (from ``make_ruleset``); raises
    LandlockError. Two system calls and nothing else: safe in a child between fork and exec."""
    if _syscall().prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0:
        err = ctypes.get_errno()
        raise LandlockError(err, f"prctl(PR_SET_NO_NEW_PRIVS): {os.strerror(err)}")
    _call(SYS_RESTRICT_SELF, ctypes.c_int(ruleset), ctypes.c_uint32(0))
