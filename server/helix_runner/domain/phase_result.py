"""The final word on a phase (mirrors ``helix.runner.v1.PhaseResult``)."""

from __future__ import annotations

import enum
from dataclasses import dataclass

from helix_runner.domain.artifacts import PhaseArtifacts
from helix_runner.domain.cost import PhaseCostSnapshot
from helix_runner.domain.events import AttemptEndKind, PermissionDenial
from helix_runner.domain.gateway_report import GatewayReport
from helix_runner.domain.phase_outcome import ResourceFault
from helix_runner.domain.phase_status import PhaseStatus
from helix_runner.domain.tool_tracker import ToolStats


class ContainmentMode(enum.IntEnum):
    """How a phase's processes are contained (values as in ``helix.runner.v1.ContainmentMode``)."""

    UNSPECIFIED = 0
    CGROUP_V2 = 1  # a cgroup v2 per phase (limits from v2, or v1 on a hybrid host)
    CGROUP_V1 = 2  # a cgroup per phase in the v1 freezer (limits from v1 memory / cpu)
    SUBREAPER = 3  # a child-subreaper shim per phase; no cgroup, no limits


@dataclass(frozen=True)
class ContainmentReport:
    """How a phase's processes are contained, and what they use (live, or at the end)."""

    mode: ContainmentMode = ContainmentMode.UNSPECIFIED
    cgroup_paths: tuple[str, ...] = ()
    memory_limit_bytes: int | None = None
    cpu_limit_millicores: int | None = None
    process_count: int = 0
    memory_current_bytes: int | None = None
    memory_peak_bytes: int | None = None
    oom_kills: int = 0


@dataclass(frozen=True)
class SandboxLayer:
    """One layer of a phase's sandbox (``namespaces``, ``network``, ``landlock``, ``seccomp``): on or
    off, and what it does here or why it is missing."""

    name: str
    active: bool
    detail: str = ""


@dataclass(frozen=True)
class SandboxReport:
    """The sandbox a phase runs in: the server's setting (``auto``, ``required``, ``off``), each
    layer, its private home and the host loopback ports it may reach."""

    setting: str = ""
    layers: tuple[SandboxLayer, ...] = ()
    home: str = ""
    egress_ports: tuple[int, ...] = ()
    # The repository paths the phase could not change (its git config, hooks, attributes...), and
    # those it changed anyway (without bubblewrap) that the server put back when it ended.
    protected: tuple[str, ...] = ()
    restored: tuple[str, ...] = ()

    def layer(self, name: str) -> SandboxLayer | None:
        return next((layer for layer in self.layers if layer.name == name), None)

    def describe(self) -> str:
        """One line: the setting and each layer's state."""
        parts = [f"{layer.name} {'on' if layer.active else 'off'}" for layer in self.layers]
        return f"{self.setting}: " + (", ".join(parts) if parts else "no layer")


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
    containment: ContainmentReport | None = None
    gateway: GatewayReport | None = None  # what the model-API gateway and the egress proxy measured
    sandbox: SandboxReport | None = None


@dataclass(frozen=True)
class Attempt:
    """One run of the CLI process within a phase (mirrors ``helix.runner.v1.Attempt``).

    ``cost`` is the attempt's own cost (see ``attempt_cost.own_cost``); the phase's cost is the sum.
    """

    number: int
    status: PhaseStatus
    reason: str = ""
    end_kind: AttemptEndKind = AttemptEndKind.UNSPECIFIED
    retryable: bool = False
    exit_code: int | None = None
    exit_signal: str | None = None
    api_error_status: int | None = None
    session_id: str = ""
    resumed_session_id: str = ""
    start_time_ns: int | None = None
    end_time_ns: int | None = None
    cost: PhaseCostSnapshot | None = None
    first_sequence: int = 0
    last_sequence: int = 0
    retry_delay_ns: int | None = None
    startup_failure_reason: str = ""
    replica_id: str = ""  # the replica that ran it ("" on a single-node server)


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
    attempts: tuple[Attempt, ...] = ()
    resource_fault: ResourceFault | None = None
    # What the phase changed in its git working directory (None: not collected).
    artifacts: PhaseArtifacts | None = None
    # How the CLI authenticated (its init line's `apiKeySource`, last one seen); "" when no init line came.
    auth_source: str = ""
    # The object produced for ``PhaseSpec.json_schema`` (compact JSON, bounded); "" when none.
    structured_output: str = ""
    structured_output_truncated: bool = False
    # From acceptance to the first attempt's CLI start (the admission queue); None when none started.
    queue_wait_ns: int | None = None


def queue_wait_ns(create_time_ns: int, start_time_ns: int | None) -> int | None:
    """How long a phase waited between its acceptance and its first CLI start; None before it started."""
    return None if not start_time_ns else max(start_time_ns - create_time_ns, 0)
