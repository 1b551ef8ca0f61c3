"""What becomes of a network request a breakpoint holds (docs/network.md, "Network breakpoints")."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from helix_runner.errors import invalid_field

MAX_DENY_REASON_BYTES = 1024


class EgressScope(enum.Enum):
    """How far an approval reaches."""

    ONCE = "once"  # this request
    PHASE = "phase"  # every later request of the phase to the same host:port
    PROJECT = "project"  # and every phase of the project: a stored allowance


@dataclass(frozen=True, slots=True)
class EgressDecision:
    """Let the held request through (``scope``), or refuse it with ``reason``."""

    approve: bool
    scope: EgressScope = EgressScope.ONCE
    reason: str = ""

    @classmethod
    def deny(cls, reason: str) -> EgressDecision:
        if len(reason.encode()) > MAX_DENY_REASON_BYTES:
            raise invalid_field("reason", f"exceeds {MAX_DENY_REASON_BYTES} bytes")
        return cls(False, EgressScope.ONCE, reason or "denied by the operator")

    def describe(self) -> str:
        if not self.approve:
            return self.reason
        return {EgressScope.ONCE: "approved once", EgressScope.PHASE: "approved for the rest of the phase",
                EgressScope.PROJECT: "approved for the project"}[self.scope]
