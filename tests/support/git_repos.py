"""Real git repositories for workspace tests, and reading a phase's whole diff page by page."""

from __future__ import annotations

import subprocess
from pathlib import Path

from helix.runner.v1 import runner_service_pb2 as pb

GIT_ENV = {"GIT_AUTHOR_NAME": "t", "GIT_AUTHOR_EMAIL": "t@example.invalid", "GIT_COMMITTER_NAME": "t",
           "GIT_COMMITTER_EMAIL": "t@example.invalid", "PATH": "/usr/bin:/bin"}


def sh(cwd: Path, *args: str) -> str:
    """``git *args`` in ``cwd`` with a fixed identity; its stdout."""
    return subprocess.run(["git", *args], cwd=cwd, env=GIT_ENV, check=True, capture_output=True, text=True).stdout


def make_repo(path: Path) -> Path:
    """A repository on branch ``main`` with one commit holding ``shared.txt`` ("original")."""
    path.mkdir(exist_ok=True)
    sh(path, "init", "-q", "-b", "main")
    (path / "shared.txt").write_text("original\n")
    sh(path, "add", "-A")
    sh(path, "commit", "-q", "-m", "base")
    return path


async def full_diff(stub, job_id: str, phase_id: str, page_size: int, metadata=()) -> bytes:
    """Every page of GetPhaseDiff joined (bounded at 1000 pages)."""
    chunks, token, pages = [], "", 0
    while True:
        page = await stub.GetPhaseDiff(pb.GetPhaseDiffRequest(job_id=job_id, phase_id=phase_id, page_size=page_size,
                                                              page_token=token), timeout=10, metadata=metadata)
        chunks.append(page.chunk)
        pages += 1
        token = page.next_page_token
        if not token:
            assert len(b"".join(chunks)) == page.total_bytes
            return b"".join(chunks)
        assert pages < 1000
