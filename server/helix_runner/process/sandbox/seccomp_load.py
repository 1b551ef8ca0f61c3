"""Loads a compiled seccomp filter (classic BPF bytes) into this process: ``prctl(PR_SET_SECCOMP)``.

Standard library only: the phase shim imports it. The filter is compiled once at server start
(``seccomp_filter.py``, libseccomp through pyseccomp) and read from a file here, so no phase pays
for compiling it. Used in Landlock-only mode; with bubblewrap the same bytes go to ``bwrap --seccomp``.
"""

from __future__ import annotations

import ctypes
import os

PR_SET_SECCOMP = 22
SECCOMP_MODE_FILTER = 2


class _SockFprog(ctypes.Structure):
    _fields_ = [("len", ctypes.c_ushort), ("filter", ctypes.c_void_p)]


def load(program: bytes) -> None:
    """Installs ``program`` (``struct sock_filter`` records, 8 bytes each) on this thread; needs
    ``no_new_privs`` (set by ``landlock.restrict``) or CAP_SYS_ADMIN. OSError if refused."""
    if not program or len(program) % 8:
        raise OSError(22, "a seccomp program is a non-empty multiple of 8 bytes")
    buf = ctypes.create_string_buffer(program, len(program))
    prog = _SockFprog(len(program) // 8, ctypes.cast(buf, ctypes.c_void_p))
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, ctypes.byref(prog), 0, 0) != 0:
        err = ctypes.get_errno()
        raise OSError(err, f"prctl(PR_SET_SECCOMP): {os.strerror(err)}")
