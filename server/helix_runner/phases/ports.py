"""The application layer's ports: how domain records become bytes, and what job control needs.

The application layer persists and fans out opaque bytes; the API layer provides the encoder (it
encodes with the protobuf contract, so stored events are sent to watchers without re-encoding).
``PhaseHost`` is the narrow view of a running phase that the controller depends on; ``RunStore`` the
writes a run makes besides its events.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Protocol

from helix_runner.domain.checkpoints import ForkOrigin
from helix_runner.domain.cost_ledger import PhaseCostSnapshot
from helix_runner.domain.events import Event, Payload
from helix_runner.domain.phase_result import Attempt, PhaseResult
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCall, ToolStats
from helix_runner.store.protocol import ModelCostRow, ToolCallRow


class RunStore(Protocol):
    """The writes a running phase makes besides its events: ``event_log.EventWriter`` in a server
    (queued behind the phase's events, committed in order), any ``Store`` in a test."""

    def update_phase(self, job_id: str, phase_id: str, now_ns: int, **values: object) -> None: ...

    def upsert_tool_calls(self, job_id: str, phase_id: str, calls: Iterable[ToolCallRow]) -> None: ...

    def replace_model_costs(self, job_id: str, phase_id: str, project_id: str, rows: Sequence[ModelCostRow]) -> None: ...


class RecordEncoder(Protocol):
    """Encodes domain records; implemented by ``api.proto_records.ProtoRecordEncoder``."""

    def event_kind(self, event: Event) -> str:
        """The payload kind of an event (the contract's oneof field name)."""

    def encode_event(self, job_id: str, phase_id: str, event: Event) -> bytes: ...

    def frame_events(self, bodies: Sequence[bytes]) -> bytes:
        """One stream message carrying these encoded events, in order.

        Must be concatenable (framing ``a + b`` gives framing ``a`` followed by framing ``b``), so
        the event log frames each published batch once and joins batches for a watcher behind.
        """

    def encode_result(
        self,
        result: PhaseResult,
        *,
        cost_pb: bytes | None = None,
        attempts_pb: bytes | None = None,
        interrupted: Attempt | None = None,
    ) -> bytes:
        """The encoded result; ``cost_pb`` / ``attempts_pb`` (a phase row's stored cost and ended
        attempts) fill a result that has none of its own: one built from the row by recovery or a
        takeover, whose process is gone with its figures (phases/recovery.py, phases/takeover.py).
        ``interrupted``: the attempt that process was running, listed (and numbered) after them."""

    def encode_attempts(self, attempts: Sequence[Attempt]) -> bytes:
        """A phase's ended attempts as stored in ``PhaseRow.attempts_pb``."""

    def encode_cost(self, cost: PhaseCostSnapshot) -> bytes: ...

    def encode_tool_call(self, job_id: str, phase_id: str, call: ToolCall) -> bytes: ...

    def encode_tool_stats(self, stats: list[ToolStats]) -> bytes: ...

    def encode_fork_origin(self, origin: ForkOrigin) -> bytes:
        """Where a forked phase came from, as stored in ``PhaseRow.fork_pb``."""


class PhaseHost(Protocol):
    """What job control needs from the phase it controls; implemented by ``phases.run.PhaseRun``.

    The controller (``phases.control``) sees the phase through this port only, so it can be
    built and tested without a process, and ``control`` does not import ``run``. A phase has one
    controller; it is attached to the host of each attempt in turn (``PhaseController.attach``).
    """

    @property
    def job_id(self) -> str: ...

    @property
    def phase_id(self) -> str: ...

    @property
    def status(self) -> PhaseStatus:
        """The phase's current status."""

    @property
    def ended(self) -> bool:
        """Whether the run has its final result (no more control is possible)."""

    @property
    def process_started(self) -> bool:
        """Whether the CLI process has started (a hard pause needs one)."""

    @property
    def cost_usd(self) -> float:
        """The phase's cost so far: what the CLI reported where it did, else the computed figure."""

    @property
    def assistant_turns(self) -> int:
        """Assistant messages (distinct API message ids) seen so far."""

    def emit(self, payload: Payload) -> Event | None:
        """Publishes a service event into the phase's stream; None once the phase has ended."""

    def set_status(self, status: PhaseStatus, reason: str) -> None:
        """Records a status transition."""

    async def write_stdin(self, line: bytes) -> bool:
        """Writes one line to the CLI's stdin; False if stdin is closed."""

    async def at_boundary(self) -> None:
        """Returns once the checkpoint of the last tool boundary is taken (the next call may run)."""

    async def quota_crossed(self) -> str | None:
        """Why the phase's project has reached a spend quota (phases/quota_guard.py), or None."""

    async def close_stdin(self) -> None:
        """Closes the CLI's stdin so it finishes its queued turns and exits."""

    def hold_watchdog(self, held: bool) -> None:
        """Suspends (True) or resumes (False) the idle watchdog; calls nest."""

    async def pause_processes(self) -> None:
        """Stops every process of the phase (hard pause); returns once they are stopped."""

    async def resume_processes(self) -> None:
        """Continues every process of the phase after a hard pause."""

    def mark_tool_held(self, tool_use_id: str, breakpoint_id: str) -> None:
        """Marks a tool call as held before it runs."""

    def mark_tool_running(self, tool_use_id: str) -> None:
        """Marks a held tool call as running again."""
