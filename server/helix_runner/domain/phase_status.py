"""The lifecycle of a phase (mirrors ``helix.runner.v1.PhaseStatus``)."""

from __future__ import annotations

import enum


class PhaseStatus(enum.Enum):
    """Where a phase is in its life; the final ones never change again."""

    PENDING = "PENDING"
    RUNNING = "RUNNING"
    PAUSING = "PAUSING"
    PAUSED = "PAUSED"
    AWAITING_APPROVAL = "AWAITING_APPROVAL"
    SUCCEEDED = "SUCCEEDED"
    FAILED = "FAILED"
    INCOMPLETE = "INCOMPLETE"
    TIMED_OUT = "TIMED_OUT"
    CANCELLED = "CANCELLED"
    INTERRUPTED = "INTERRUPTED"

    @property
    def is_final(self) -> bool:
        return self in FINAL_STATUSES


FINAL_STATUSES = frozenset(
    {
        PhaseStatus.SUCCEEDED,
        PhaseStatus.FAILED,
        PhaseStatus.INCOMPLETE,
        PhaseStatus.TIMED_OUT,
        PhaseStatus.CANCELLED,
        PhaseStatus.INTERRUPTED,
    }
)
