"""What one phase may make the server write: its recording, its events, its mirrored transcript.

A phase controls how much its CLI prints (a tool that writes into the CLI's stdout, a flood of
stderr), and every byte of it is written by the server into its data dir and its store. Without a
cap one phase fills the disk every other phase and the database share. ``OutputBudget`` counts the
bytes as they are written and says once when the cap is passed; the run then stops the phase
(``EndCause.OUTPUT_LIMIT``), so only the offender fails.
"""

from __future__ import annotations

from helix_runner.domain.bounds import human_bytes


class OutputBudget:
    """Bytes written for one phase against its cap (0: no cap)."""

    __slots__ = ("cap", "used", "_spent")

    def __init__(self, cap: int) -> None:
        self.cap = cap
        self.used = 0
        self._spent = False

    def charge(self, n: int) -> bool:
        """Counts ``n`` more bytes; True the one time the total goes past the cap."""
        self.used += n
        if self.cap and not self._spent and self.used > self.cap:
            self._spent = True
            return True
        return False

    def describe(self) -> str:
        """Why the phase was stopped, for its result's reason."""
        return (f"the phase made the server write more than its limit of {human_bytes(self.cap)} (phase_output_max_bytes: "
                "the recording of its CLI's output, its events and its mirrored transcript); it was stopped")

