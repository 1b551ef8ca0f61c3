"""The lifecycle of a phase (mirrors ``helix.runner.v1.PhaseStatus``)."""

from __future__ import annotations

import enum


class PhaseStatus(enum.IntEnum):
    """Where a phase is in its life; the final ones never change again. Values are the proto numbers."""

    UNSPECIFIED = 0
    PENDING = 1
    RUNNING = 2
    PAUSING = 3
    PAUSED = 4
    AWAITING_APPROVAL = 5
    SUCCEEDED = 6
    FAILED = 7
    INCOMPLETE = 8
    TIMED_OUT = 9
    CANCELLED = 10
    INTERRUPTED = 11
    QUEUED = 12  # waiting for admission before an attempt (a slot, a rate-limit hold, a backoff)

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
