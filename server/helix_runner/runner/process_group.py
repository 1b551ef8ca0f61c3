"""Finding and killing a phase's process group again after the server itself died.

A phase's child is the leader of its own session and process group. The store keeps its pid and
start time (``/proc/<pid>/stat`` field 22, clock ticks since boot), so a restarted server can
kill what a crashed one left behind without hitting an unrelated process that reused the pid:
only members of that group that started no earlier than the leader are signalled.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import time
from pathlib import Path

_PROC = Path("/proc")


def _stat_fields(pid: int) -> list[str] | None:
    try:
        text = (_PROC / str(pid) / "stat").read_text()
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return None
    # The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot), or None if it is gone."""
    fields = _stat_fields(pid)
    return int(fields[19]) if fields else None


def kill_leftover_group(pgid: int, leader_start: int) -> list[int]:
    """SIGKILLs the members of group ``pgid`` that started at or after ``leader_start``; returns their pids."""
    killed = []
    for entry in _PROC.iterdir():
        if not entry.name.isdigit():
            continue
        fields = _stat_fields(int(entry.name))
        if not fields or fields[0] == "Z":
            continue
        if int(fields[2]) == pgid and int(fields[19]) >= leader_start:
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(int(entry.name), signal.SIGKILL)
                killed.append(int(entry.name))
    return killed


def process_state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``T`` for stopped, ``Z``), or None if it is gone."""
    fields = _stat_fields(pid)
    return fields[0] if fields else None


async def wait_stopped(pid: int, limit_s: float = 2.0) -> bool:
    """Waits until the process shows as stopped after SIGSTOP (delivery is asynchronous)."""
    deadline = time.monotonic() + limit_s
    while time.monotonic() < deadline:
        if process_state(pid) in ("T", "t", None):
            return True
        await asyncio.sleep(0.005)
    return False
