"""The values the read model answers with: jobs, phases, tool calls, cost totals, a running phase.

Plain frozen dataclasses of domain values, so the API maps them to messages without touching
the store or a running phase's internals. What the store keeps encoded stays encoded
(``*_pb``: contract messages as bytes, decoded only by the API; see ``api/proto_records.py``).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from helix_runner.domain.breakpoints import Breakpoint
from helix_runner.domain.cost_ledger import ModelCost, PhaseCostSnapshot
from helix_runner.domain.events import TokenUsage
from helix_runner.domain.gateway_report import GatewayReport
from helix_runner.domain.phase_result import ContainmentMode, SandboxReport
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolCall, ToolCallStatus, ToolStats
from helix_runner.process.containment import ContainmentReport
from helix_runner.process.control_protocol import ContextUsage

__all__ = [
    "ContextUsage",
    "CostTotals",
    "HeldCall",
    "Inspection",
    "JobPage",
    "JobView",
    "PhaseView",
    "RecentEvent",
    "RunSnapshot",
    "StoredToolCall",
    "ToolCallPage",
]


@dataclass(frozen=True, slots=True)
class HeldCall:
    """A tool call a running phase holds before it runs (pause, step, breakpoint)."""

    tool_use_id: str
    tool_name: str
    input_json: str
    breakpoint_id: str
    reason: str
    since_ns: int
    # The tracker's record of the call, when it still retains one.
    call: ToolCall | None


@dataclass(frozen=True, slots=True)
class RunSnapshot:
    """A running phase at one instant, taken by ``PhaseRun.snapshot``; fresher than its stored row."""

    status: PhaseStatus
    last_sequence: int  # the last event committed and offered to watchers
    cost: PhaseCostSnapshot
    tool_stats: tuple[ToolStats, ...]
    current_tool: ToolCall | None  # the most recently started call still running or held
    paused: bool  # a pause is requested or in force
    hard_paused: bool  # the process group is stopped
    held_calls: tuple[HeldCall, ...]
    breakpoints: tuple[Breakpoint, ...]
    assistant_message_count: int
    user_message_count: int
    turn_count: int  # turn results seen
    containment: ContainmentReport | None = None  # the phase's processes, cgroup and limits now
    sandbox: SandboxReport | None = None  # the phase's sandbox layers, private home and egress ports
    attempts: tuple = ()  # phases.attempts Attempt records, oldest first (the running one last)
    queue: object | None = None  # the admission QueueState while the phase waits (QUEUED)
    auth_source: str = ""  # the latest init line's `apiKeySource` ("" before one came)
    gateway: GatewayReport | None = None  # what the gateway and the egress proxy measured so far


@dataclass(frozen=True, slots=True)
class PhaseView:
    """A phase as the API shows it: its stored row, with the live figures while it runs here."""

    job_id: str
    phase_id: str
    project_id: str
    status: PhaseStatus
    status_reason: str
    session_id: str
    model: str
    working_dir: str
    prompt: str
    on_disconnect: str
    create_time_ns: int
    start_time_ns: int | None
    end_time_ns: int | None
    last_sequence: int
    # Encoded helix.runner.v1.PhaseResult / PhaseCost / Phase (tool_stats only), as stored.
    result_pb: bytes | None
    cost_pb: bytes | None
    tool_stats_pb: bytes | None
    # Set while the phase runs in this server: then its cost, statistics and current tool come from here.
    live: RunSnapshot | None = None
    # Encoded Phase holding only the ended attempts (PhaseRow.attempts_pb): what a phase running on
    # another replica, or waiting for its next attempt there, has recorded so far.
    attempts_pb: bytes | None = None
    # Encoded ForkOrigin (PhaseRow.fork_pb): the phase and checkpoint a forked phase started from.
    fork_pb: bytes | None = None


@dataclass(frozen=True, slots=True)
class CostTotals:
    """Costs summed over a phase, a job or a project (``resources.proto`` CostTotals)."""

    phase_count: int
    reported_usd: float
    computed_usd: float
    computed_only_phase_count: int
    tokens: TokenUsage
    models: tuple[ModelCost, ...]  # by model name
    unpriced_models: tuple[str, ...]  # sorted


@dataclass(frozen=True, slots=True)
class JobView:
    """A job with its phases (by ordinal) and its cost totals."""

    job_id: str
    project_id: str
    status: PhaseStatus
    create_time_ns: int
    update_time_ns: int
    phases: tuple[PhaseView, ...]
    cost: CostTotals
    # Scratch for the API layer: it keeps the view's wire encoding here, so a view the read model
    # serves from its cache (phases/queries.py JobViewCache) is encoded once, not on every request.
    # A view never changes, so neither does its encoding. Not part of the value.
    memo: dict = field(default_factory=dict, compare=False, repr=False)


@dataclass(frozen=True, slots=True)
class JobPage:
    """One page of jobs, newest first; ``next_after`` is the paging key when more follow."""

    jobs: tuple[JobView, ...]
    next_after: tuple[int, str] | None


@dataclass(frozen=True, slots=True)
class StoredToolCall:
    """A recorded tool call: its encoded helix.runner.v1.ToolCall and its authoritative status.

    The status column wins over the body's: recovery marks calls UNFINISHED without re-encoding them.
    """

    status: ToolCallStatus
    body: bytes


@dataclass(frozen=True, slots=True)
class ToolCallPage:
    """One page of a job's tool calls and the statistics of every matching call (not just this page)."""

    calls: tuple[StoredToolCall, ...]
    next_after: tuple[int, int, str] | None
    stats: tuple[ToolStats, ...]


@dataclass(frozen=True, slots=True)
class RecentEvent:
    """One of a phase's latest events, encoded (helix.runner.v1.StreamEvent)."""

    kind: str
    body: bytes


@dataclass(frozen=True, slots=True)
class Inspection:
    """InspectPhase's answer: the phase (with ``live`` while it runs here), its latest events, context usage."""

    phase: PhaseView
    recent_events: tuple[RecentEvent, ...]
    context_usage: ContextUsage | None = None
    checkpoints: tuple = ()  # domain.checkpoints.Checkpoint, oldest first (docs/fork-and-rewind.md)


@dataclass(frozen=True)
class ServerStatus:
    """How this server runs phases (GetServerStatus, ``helix-runner status``)."""

    sandbox: SandboxReport  # the setting and each layer as found at start; no home
    containment_mode: ContainmentMode
    refusal: str = ""  # the message every phase is refused with (sandbox = required, a layer missing)
    version: str = ""
    offline: bool = False  # the scripted Messages API answers: costs are what the tokens would cost
