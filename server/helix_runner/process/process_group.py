"""Killing the CLI process group a server from before the phase shim left behind.

Phases recorded before ``process/containment.py`` stored the CLI's own pid (the leader of its
session and process group) and start time (``/proc/<pid>/stat`` field 22); now the stored pid is
the shim's, which leads a group of its own. Either way a restarted server kills that group
without hitting an unrelated process that reused the pid: only members that started no earlier
than the leader are signalled. Everything else a phase left is found by ``Containment.recover``.
"""

from __future__ import annotations

import contextlib
import os
import signal

from helix_runner.process.procfs import pids, stat_fields


def kill_leftover_group(pgid: int, leader_start: int) -> list[int]:
    """SIGKILLs the members of group ``pgid`` that started at or after ``leader_start``; returns their pids."""
    killed = []
    for pid in pids():
        fields = stat_fields(pid)
        if not fields or fields[0] == "Z":
            continue
        if int(fields[2]) == pgid and int(fields[19]) >= leader_start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(pid, signal.SIGKILL)
                killed.append(pid)
    return killed
