"""Phase artifacts (``domain.artifacts``) as ``helix.runner.v1.PhaseArtifacts``."""

from __future__ import annotations

from helix.runner.v1 import resources_pb2
from helix_runner.domain.artifacts import PhaseArtifacts


def artifacts_to_proto(a: PhaseArtifacts) -> resources_pb2.PhaseArtifacts:
    return resources_pb2.PhaseArtifacts(
        git_available=a.git_available, unavailable_reason=a.unavailable_reason, base_commit=a.base_commit,
        final_commit=a.final_commit, branch=a.branch, worktree_path=a.worktree_path, worktree_kept=a.worktree_kept,
        changed_files=[resources_pb2.ChangedFile(path=f.path, old_path=f.old_path, status=f.status,
                                                 lines_added=f.lines_added, lines_deleted=f.lines_deleted,
                                                 binary=f.binary) for f in a.changed_files],
        diff=a.diff, diff_truncated=a.diff_truncated, diff_bytes=a.diff_bytes,
    )
