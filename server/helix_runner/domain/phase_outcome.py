"""How a phase ended, decided from facts only (ADR-045: never report "done" by inference;
docs/decisions/ADR-045.md).

The inputs are the exit facts of the process (``ProcessExit``) and the last turn result the
CLI wrote, if any. ``SUCCEEDED`` needs all of: the process exited by itself with code 0, stdout
reached EOF, and the last result is a success without ``is_error``. Everything else says what
really happened.
"""

from __future__ import annotations

import enum
from dataclasses import dataclass

from helix_runner.domain.events import SessionWritesLost
from helix_runner.domain.phase_status import PhaseStatus


class EndCause(enum.Enum):
    """Why supervision of the process ended."""

    EXITED = "exited"  # stdout at EOF and the process exited by itself
    TIMEOUT = "timeout"
    IDLE_TIMEOUT = "idle_timeout"
    NO_EXIT_AFTER_EOF = "no_exit_after_eof"
    PIPES_HELD_AFTER_EXIT = "pipes_held_after_exit"
    CANCELLED = "cancelled"
    INTERRUPTED = "interrupted"  # the server is shutting down
    SPAWN_FAILED = "spawn_failed"
    OUT_OF_MEMORY = "out_of_memory"  # the kernel's OOM killer killed a process of the phase (memory limit)
    # The server stopped the phase at one of its limits (``detail`` names it and its value):
    PROCESS_LIMIT = "process_limit"  # the kernel refused a fork at the phase's process limit (pids.max)
    OUTPUT_LIMIT = "output_limit"  # what the phase made the server write passed phase_output_max_bytes
    LINE_LIMIT = "line_limit"  # a line of the CLI's stdout passed max_line_bytes
    EGRESS_LIMIT = "egress_limit"  # its traffic through the egress proxy passed egress_max_bytes_per_phase
    WORKSPACE_LIMIT = "workspace_limit"  # it grew the disk use of its writable directories past workspace_max_bytes


class ResourceFault(enum.Enum):
    """A resource problem that decided how a phase ended."""

    OUT_OF_MEMORY = "out_of_memory"  # a process of the phase was OOM-killed (its memory limit)
    DISK_FULL = "disk_full"  # the CLI could not save its session (``system/session_writes_lost``)
    PROCESS_LIMIT = "process_limit"  # its processes reached the phase's process limit
    OUTPUT_LIMIT = "output_limit"  # its recording, events and transcripts reached their cap in the data dir
    LINE_LIMIT = "line_limit"  # its CLI's stdout carried a line longer than max_line_bytes
    EGRESS_LIMIT = "egress_limit"  # it moved more through the egress proxy than egress_max_bytes_per_phase
    WORKSPACE_LIMIT = "workspace_limit"  # it grew its workspace's disk use past workspace_max_bytes


# The causes that are a limit of the server's, and the fault each one is.
LIMIT_FAULTS = {
    EndCause.OUT_OF_MEMORY: ResourceFault.OUT_OF_MEMORY,
    EndCause.PROCESS_LIMIT: ResourceFault.PROCESS_LIMIT,
    EndCause.OUTPUT_LIMIT: ResourceFault.OUTPUT_LIMIT,
    EndCause.LINE_LIMIT: ResourceFault.LINE_LIMIT,
    EndCause.EGRESS_LIMIT: ResourceFault.EGRESS_LIMIT,
    EndCause.WORKSPACE_LIMIT: ResourceFault.WORKSPACE_LIMIT,
}


@dataclass(frozen=True)
class ProcessExit:
    """What the supervisor observed about the child's end."""

    cause: EndCause
    exit_code: int | None
    exit_signal: str | None
    stdout_eof: bool
    detail: str = ""
    start_ns: int = 0
    end_ns: int = 0
    pid: int | None = None
    stdout_bytes: int = 0
    stderr_bytes: int = 0
    stderr_tail: str = ""


@dataclass(frozen=True)
class LastResult:
    """The fields of the CLI's last ``result`` line that decide the outcome."""

    subtype: str
    is_error: bool
    api_error_status: int | None = None
    terminal_reason: str = ""
    errors: tuple[str, ...] = ()
    result_text: str = ""
    # With --json-schema: the phase asked for a structured object, and whether the line carries one.
    structured_output_expected: bool = False
    has_structured_output: bool = False


@dataclass(frozen=True)
class Outcome:
    """The final status, its one-sentence reason, and the resource fault behind it, if any."""

    status: PhaseStatus
    reason: str
    fault: ResourceFault | None = None


def decide_outcome(
    process: ProcessExit,
    last_result: LastResult | None,
    result_count: int = 0,
    writes_lost: SessionWritesLost | None = None,
) -> Outcome:
    """The honest final status of a phase.

    An OOM kill anywhere in the phase fails it (its memory limit was reached, whatever the CLI
    made of it). A session the CLI could not save (``writes_lost``, the disk full) fails a phase
    that would otherwise have succeeded: its work is done but a resume would miss part of it,
    which is why the CLI itself exits 1 for it outside stream-json mode.
    """
    outcome = _decide(process, last_result, result_count)
    if process.cause in LIMIT_FAULTS:
        return outcome
    if writes_lost is not None:
        if outcome.status is PhaseStatus.SUCCEEDED:
            return Outcome(PhaseStatus.FAILED, _writes_lost_text(writes_lost), ResourceFault.DISK_FULL)
        return Outcome(outcome.status, outcome.reason, ResourceFault.DISK_FULL)
    return outcome


def _decide(process: ProcessExit, last_result: LastResult | None, result_count: int) -> Outcome:
    cause = process.cause
    if cause is EndCause.SPAWN_FAILED:
        return Outcome(PhaseStatus.FAILED, process.detail or "the claude process could not be started")
    if cause is EndCause.OUT_OF_MEMORY:
        return Outcome(
            PhaseStatus.FAILED,
            f"out of memory: {process.detail or 'a process of the phase was OOM-killed'}",
            ResourceFault.OUT_OF_MEMORY,
        )
    if cause in LIMIT_FAULTS:  # the server stopped the phase at a limit; its detail names it
        return Outcome(PhaseStatus.FAILED, process.detail or f"the phase reached a limit ({cause.value})",
                       LIMIT_FAULTS[cause])
    if cause is EndCause.CANCELLED:
        return Outcome(PhaseStatus.CANCELLED, process.detail or "cancelled")
    if cause is EndCause.INTERRUPTED:
        return Outcome(PhaseStatus.INTERRUPTED, process.detail or "the server stopped while the phase ran")
    if cause in (EndCause.TIMEOUT, EndCause.IDLE_TIMEOUT):
        return Outcome(PhaseStatus.TIMED_OUT, process.detail)

    exit_text = _exit_text(process)
    if last_result is None:
        return Outcome(PhaseStatus.INCOMPLETE, f"the output ended without a final result ({exit_text})")
    if last_result.is_error or last_result.subtype != "success":
        return Outcome(PhaseStatus.FAILED, _result_failure(last_result, exit_text))
    if last_result.structured_output_expected and not last_result.has_structured_output:
        # CLI 2.1.330 nudges the model once to call StructuredOutput, then ends with a plain
        # `success` without `structured_output` (docs/claude-cli-protocol.md §2.5).
        return Outcome(PhaseStatus.FAILED, f"{STRUCTURED_OUTPUT_MISSING}; the CLI {exit_text}")
    if cause is EndCause.NO_EXIT_AFTER_EOF:
        return Outcome(
            PhaseStatus.FAILED,
            f"the CLI wrote a successful result but did not exit by itself ({process.detail}); it was killed",
        )
    if process.exit_code != 0:
        return Outcome(PhaseStatus.FAILED, f"the last result was a success but the CLI {exit_text}")
    if cause is EndCause.PIPES_HELD_AFTER_EXIT:
        # The CLI itself finished cleanly; a leftover background process was killed.
        return Outcome(PhaseStatus.SUCCEEDED, f"completed; {process.detail}, and it was killed")
    if result_count > 1:
        return Outcome(PhaseStatus.SUCCEEDED, f"completed after {result_count} turn results")
    return Outcome(PhaseStatus.SUCCEEDED, "completed")


def _writes_lost_text(lost: SessionWritesLost) -> str:
    why = "the disk quota is used up" if lost.error_code == "EDQUOT" else "the disk is full"
    what = " and ".join(name.replace("_", " ") for name in lost.lost) or "its session"
    return (
        f"{why} ({lost.error_code or 'ENOSPC'}): the CLI finished but could not save {what}; "
        "resuming the session may miss part of the conversation"
    )


def _exit_text(process: ProcessExit) -> str:
    if process.exit_signal:
        return f"killed by {process.exit_signal}"
    if process.exit_code is not None:
        return f"exited with code {process.exit_code}"
    return "exit status unknown"


# The CLI's own words for missing or rejected credentials are meant for its interactive user
# ("Not logged in · Please run /login", "Invalid API key · Please run /login"); the operator of
# this server has no /login to run, so the reason says what to set instead.
CREDENTIALS_HINT = (
    "the Claude CLI has no valid credentials: set ANTHROPIC_API_KEY (or CLAUDE_CODE_OAUTH_TOKEN) in "
    "the server's environment, or start the server in offline mode (--offline-script)"
)


# The reason of a phase that asked for structured output and got none (attempt_classification
# files it as STRUCTURED_OUTPUT by this prefix).
STRUCTURED_OUTPUT_MISSING = (
    "structured output failed: the phase asked for an object matching options.json_schema but the model "
    "never called the StructuredOutput tool"
)

# The CLI's result subtype when the model's StructuredOutput calls kept failing the schema (its
# retry limit, 5 calls in CLI 2.1.330; docs/claude-cli-protocol.md §2.5).
STRUCTURED_OUTPUT_FAILED = "error_max_structured_output_retries"


def _result_failure(result: LastResult, exit_text: str) -> str:
    what = f"the last turn ended with {result.subtype}"
    if result.subtype == STRUCTURED_OUTPUT_FAILED:
        what = f"structured output failed: no object matching options.json_schema ({result.subtype})"
    if result.is_error:
        what += " and is_error"
    if result.api_error_status is not None:
        what += f" (API error {result.api_error_status})"
    if result.terminal_reason:
        what += f", terminal reason {result.terminal_reason}"
    detail = "; ".join(result.errors) or result.result_text
    if detail:
        what += f": {detail[:300]}"
    reason = f"{what}; the CLI {exit_text}"
    if result.is_error and (result.api_error_status == 401 or "/login" in detail):
        reason += f" ({CREDENTIALS_HINT})"
    return reason
