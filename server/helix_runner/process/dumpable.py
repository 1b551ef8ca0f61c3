"""The server process made non-dumpable, so the phases it runs as the same user cannot read its
environment (the API key, the database URL), memory or open files through ``/proc``.

Linux guards ``/proc/<pid>/environ``, ``mem``, ``maps`` and ``fd/`` with ptrace's access rules
(proc(5), ptrace(2) "Ptrace access mode checking"): another process of the same user may read
them unless the target is non-dumpable (``prctl(PR_SET_DUMPABLE, 0)``, prctl(2)); then only a
process with ``CAP_SYS_PTRACE`` may, and the process gets no core dump. A process can always read
its own. ``execve`` makes a process dumpable again, so the CLI and its tools stay readable to the
server (their containment markers, process_group and procfs).
"""

from __future__ import annotations

import ctypes

PR_SET_DUMPABLE = 4


def make_undumpable() -> bool:
    """Makes this process non-dumpable; False where the kernel refused or has no prctl."""
    try:
        return ctypes.CDLL(None, use_errno=True).prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) == 0
    except (OSError, AttributeError):  # no libc prctl (not Linux)
        return False
