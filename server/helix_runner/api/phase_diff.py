"""GetPhaseDiff: pages of the full diff a finished phase left in its recording directory."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Protocol

from helix.runner.v1 import runner_service_pb2
from helix_runner.api.pagination import make_token, page_size, read_token
from helix_runner.errors import ErrorKind, RunnerError

DIFF_FILE = "diff.patch"  # written by process.git_worktree (PhaseWorkspace.diff_path)
DEFAULT_PAGE = 256 * 1024
MAX_PAGE = 4 * 1024 * 1024


class PhaseRow(Protocol):
    """The phase facts a diff page needs: a stored phase row has them (the API does not import the store)."""

    @property
    def job_id(self) -> str: ...
    @property
    def phase_id(self) -> str: ...
    @property
    def recording_dir(self) -> str: ...
    @property
    def end_time_ns(self) -> int | None: ...


def diff_path(row: PhaseRow) -> Path | None:
    """Where the phase's diff file is (or would be) on this replica's disk; None without a recording."""
    return Path(row.recording_dir) / DIFF_FILE if row.recording_dir else None


def read_diff_page(row: PhaseRow, request: runner_service_pb2.GetPhaseDiffRequest
                   ) -> runner_service_pb2.GetPhaseDiffResponse:
    """One page of bytes; DIFF_NOT_AVAILABLE while the phase runs or when it has no diff."""
    size = page_size(request.page_size, DEFAULT_PAGE, MAX_PAGE)
    query = {"job": row.job_id, "phase": row.phase_id}
    position = read_token(request.page_token, query)
    offset = position[0] if position else 0
    if not isinstance(offset, int) or offset < 0:
        raise RunnerError(ErrorKind.INVALID_ARGUMENT, "INVALID_PAGE_TOKEN", "page_token is malformed",
                          {"field": "page_token"})
    path = diff_path(row)
    if not row.end_time_ns or path is None or path.is_symlink() or not path.is_file():
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "DIFF_NOT_AVAILABLE",
                          f"phase {row.phase_id} has no diff (still running, not in a git repository, "
                          "or its recording was deleted)", {"job_id": row.job_id, "phase_id": row.phase_id})
    # Never through a symlink: the server replaces one at collect time, and reads none either.
    with open(path, "rb", opener=lambda p, flags: os.open(p, flags | os.O_NOFOLLOW)) as f:
        total = f.seek(0, 2)
        f.seek(min(offset, total))
        chunk = f.read(size)
    end = offset + len(chunk)
    token = make_token(query, [end]) if end < total else ""
    return runner_service_pb2.GetPhaseDiffResponse(chunk=chunk, next_page_token=token, total_bytes=total)
