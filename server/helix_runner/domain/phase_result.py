"""The final word on a phase (mirrors ``helix.runner.v1.PhaseResult``)."""

from __future__ import annotations

from dataclasses import dataclass

from helix_runner.domain.cost import PhaseCostSnapshot
from helix_runner.domain.events import PermissionDenial
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolStats


@dataclass(frozen=True)
class PhaseDiagnostics:
    """What helps explain how a phase ended."""

    stderr_tail: str = ""
    stderr_bytes: int = 0
    parse_error_count: int = 0
    unfinished_tool_calls: int = 0
    stdout_bytes: int = 0
    argv: tuple[str, ...] = ()
    claude_path: str = ""
    recording_path: str = ""


@dataclass(frozen=True)
class PhaseResult:
    """How a phase ended, with the facts behind it."""

    job_id: str
    phase_id: str
    status: PhaseStatus
    reason: str
    result_subtype: str = ""
    is_error: bool = False
    api_error_status: int | None = None
    terminal_reason: str = ""
    num_turns: int = 0
    result_text: str = ""
    errors: tuple[str, ...] = ()
    exit_code: int | None = None
    exit_signal: str | None = None
    result_count: int = 0
    session_id: str = ""
    cost: PhaseCostSnapshot | None = None
    tool_stats: tuple[ToolStats, ...] = ()
    permission_denials: tuple[PermissionDenial, ...] = ()
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    last_sequence: int = 0
    diagnostics: PhaseDiagnostics = PhaseDiagnostics()
