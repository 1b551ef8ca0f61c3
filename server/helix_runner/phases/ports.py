"""How domain records become bytes for the store and for the wire.

The application layer persists and fans out opaque bytes; the API layer provides the codec (it
encodes with the protobuf contract, so stored events are sent to watchers without re-encoding).
"""

from __future__ import annotations

from typing import Protocol

from helix_runner.domain.cost_ledger import PhaseCostSnapshot
from helix_runner.domain.events import Event
from helix_runner.domain.phase_result import PhaseResult
from helix_runner.domain.tool_tracker import ToolCall, ToolStats


class RecordEncoder(Protocol):
    """Encodes domain records; implemented by ``api.proto_records.ProtoRecordEncoder``."""

    def event_kind(self, event: Event) -> str:
        """The payload kind of an event (the contract's oneof field name)."""

    def encode_event(self, job_id: str, phase_id: str, event: Event) -> bytes: ...

    def encode_result(self, result: PhaseResult) -> bytes: ...

    def encode_cost(self, cost: PhaseCostSnapshot) -> bytes: ...

    def encode_tool_call(self, job_id: str, phase_id: str, call: ToolCall) -> bytes: ...

    def encode_tool_stats(self, stats: list[ToolStats]) -> bytes: ...
