"""What ``/proc`` says about processes: state, start time, parent, descendants, scope markers.

Standard library only and cheap to import: the phase shim (``phase_shim``) runs it with
``python -S`` before it starts the CLI. Descendants are found from the parent pid in
``/proc/<pid>/stat`` rather than ``/proc/<pid>/task/<tid>/children``, which needs
``CONFIG_PROC_CHILDREN`` (not set on every kernel, e.g. the one this project is tested on).
"""

from __future__ import annotations

import os

PROC = "/proc"


def stat_fields(pid: int, proc: str = PROC) -> list[str] | None:
    """Fields 3.. of ``/proc/<pid>/stat`` (state first), or None if the process is gone."""
    try:
        with open(f"{proc}/{pid}/stat", "rb") as f:
            text = f.read().decode("ascii", "replace")
    except OSError:  # gone (ENOENT / ESRCH) or not ours to read
        return None
    # The command name (field 2) may contain spaces and parentheses; fields resume after the last ')'.
    return text[text.rindex(")") + 2 :].split()


def process_state(pid: int) -> str | None:
    """The process's state letter (``R``, ``S``, ``T`` for stopped, ``Z``), or None if it is gone."""
    fields = stat_fields(pid)
    return fields[0] if fields else None


def start_ticks(pid: int) -> int | None:
    """When the process started (clock ticks since boot, ``stat`` field 22), or None if it is gone."""
    fields = stat_fields(pid)
    return int(fields[19]) if fields else None


def pids(proc: str = PROC) -> list[int]:
    """Every process (thread group) visible in ``/proc``."""
    return [int(name) for name in os.listdir(proc) if name.isdigit()]


def descendants(root: int, proc: str = PROC) -> list[int]:
    """Every live (non-zombie) descendant of ``root``, parents before their children.

    One snapshot of ``/proc``: a process forked after it is not listed, so callers that must
    reach everything repeat until a snapshot finds nothing new (a stopped or killed parent
    forks no more).
    """
    children: dict[int, list[int]] = {}
    for pid in pids(proc):
        fields = stat_fields(pid, proc)
        if fields and fields[0] != "Z":
            children.setdefault(int(fields[1]), []).append(pid)
    out: list[int] = []
    queue = list(children.get(root, ()))
    while queue:
        pid = queue.pop(0)
        out.append(pid)
        queue.extend(children.get(pid, ()))
    return out


def has_marker(pid: int, marker: bytes, proc: str = PROC) -> bool:
    """Whether the environment the process started with contains the entry ``marker`` (``NAME=VALUE``
    or a ``NAME=VALUE`` prefix). Only the match is kept; the environment itself is not."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return False
    return env.startswith(marker) or b"\0" + marker in env


def marked(marker: bytes, proc: str = PROC) -> list[int]:
    """Live processes whose environment carries ``marker`` (see ``has_marker``)."""
    me = os.getpid()
    out = []
    for pid in pids(proc):
        if pid != me and has_marker(pid, marker, proc) and process_state(pid) not in (None, "Z"):
            out.append(pid)
    return out


def marker_value(pid: int, prefix: bytes, proc: str = PROC) -> str | None:
    """The rest of the environment entry that starts with ``prefix`` (e.g. a run id), or None."""
    try:
        with open(f"{proc}/{pid}/environ", "rb") as f:
            env = f.read()
    except OSError:
        return None
    for entry in env.split(b"\0"):
        if entry.startswith(prefix):
            return entry[len(prefix) :].decode("utf-8", "replace")
    return None
