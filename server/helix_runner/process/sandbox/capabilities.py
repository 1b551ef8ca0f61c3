"""Drops every capability for good, for a phase of a root server that runs without bubblewrap.

Standard library only: the phase shim imports it. bubblewrap drops capabilities itself
(``--cap-drop ALL``); in Landlock-only mode the shim's child does it before it execs the CLI:
it empties the bounding and ambient sets and locks ``SECBIT_NOROOT`` and ``SECBIT_NO_SETUID_FIXUP``
(capabilities(7)), so an ``exec`` as uid 0 gives back no capability and no set can be raised again.
"""

from __future__ import annotations

import ctypes
import os

PR_CAPBSET_DROP = 24
PR_SET_SECUREBITS = 28
PR_CAP_AMBIENT = 47
PR_CAP_AMBIENT_CLEAR_ALL = 4
# NOROOT, NO_SETUID_FIXUP, NO_CAP_AMBIENT_RAISE, each with its lock, and KEEP_CAPS locked off.
SECUREBITS = (1 << 0) | (1 << 1) | (1 << 2) | (1 << 3) | (1 << 5) | (1 << 6) | (1 << 7)


def drop_all() -> None:
    """Empties the bounding and ambient sets and locks the securebits; OSError if the kernel refuses."""
    libc = ctypes.CDLL(None, use_errno=True)

    def prctl(*args: int) -> None:
        if libc.prctl(*[ctypes.c_ulong(a) for a in args], ctypes.c_ulong(0)) != 0:
            err = ctypes.get_errno()
            raise OSError(err, f"prctl{args}: {os.strerror(err)}")

    with open("/proc/sys/kernel/cap_last_cap") as f:
        last = int(f.read())
    prctl(PR_CAP_AMBIENT, PR_CAP_AMBIENT_CLEAR_ALL, 0, 0)
    if os.geteuid() != 0 and not _effective():
        return  # nothing to drop; the bounding set matters only to setuid files, which no_new_privs disarms
    prctl(PR_SET_SECUREBITS, SECUREBITS, 0, 0)
    for cap in range(last + 1):
        prctl(PR_CAPBSET_DROP, cap, 0, 0)


def _effective() -> int:
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("CapEff:"):
                return int(line.split()[1], 16)
    return 0
