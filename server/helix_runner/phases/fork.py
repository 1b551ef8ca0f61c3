"""Where a fork or a rewind starts from: a phase's checkpoint, its session cut there, its workspace.

``resolve`` turns what a caller named (a tool call, a turn, a number; a decision for the call; a
message) into a ``ForkStart``: the checkpoint, the cut copy of the session transcript and the entry to
resume at, the workspace snapshot to start from, the first stdin line, and a decision the controller
applies when the CLI asks about the call again. It reads nothing itself: the service hands it the
checkpoints and the transcript. Design: docs/fork-and-rewind.md.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, replace

from helix_runner.domain.checkpoints import (
    Checkpoint,
    CheckpointKind,
    CheckpointNotFound,
    ForkOrigin,
    WorkspaceSnapshot,
    select_checkpoint,
    workspace_before,
)
from helix_runner.domain.session_cut import (
    SessionCutError,
    call_result_line,
    cut_after,
    cut_at_call,
    cut_before_result,
    renamed,
)
from helix_runner.domain.tool_decision import Decision, DecisionKind
from helix_runner.errors import ErrorKind, RunnerError, invalid_field
from helix_runner.phases.control import ControlState
from helix_runner.process.claude_command import prompt_line

MAX_INJECT_BYTES = 256 * 1024
# What a fork's model is told at the point when the caller injects nothing: the words the CLI itself
# uses when it continues a resumed turn (CLI 2.1.332, a deferred call resumed).
FORK_CONTINUATION = "Continue from where you left off."


@dataclass(frozen=True)
class ForkPoint:
    """What a caller named: the checkpoint (a call, a turn or a number), and what differs there."""

    tool_use_id: str = ""
    turn: int = 0
    number: int | None = None
    decision: Decision | None = None  # DENY or EDIT of the call at the point
    inject: str = ""
    conversation_only: bool = False

    def changes(self) -> tuple[str, ...]:
        """What the fork changes, in words (ForkOrigin.changes)."""
        out = []
        if self.decision is not None and self.decision.kind is DecisionKind.DENY:
            out.append(f"deny {self.tool_use_id}: {self.decision.message[:200]}")
        elif self.decision is not None:
            out.append(f"edit {self.tool_use_id}")
        if self.inject:
            out.append(f"inject: {self.inject[:200]}")
        return tuple(out)


@dataclass(frozen=True)
class ForkStart:
    """A fork's (or a rewind's) start: resume ``session_file`` at ``resume_at``; the workspace as
    ``workspace`` (not kept: only the conversation); ``first_line`` on stdin (b"": none, the CLI goes
    on by itself); ``decisions`` applied when the CLI asks about those calls; ``answered``: the calls
    ``first_line`` decides (their control events are emitted when it is written)."""

    checkpoint: Checkpoint
    workspace: WorkspaceSnapshot
    transcript: bytes
    session_file: str  # the cut copy's name (a fresh UUID: the phase forked keeps its own file)
    resume_at: str
    first_line: bytes
    decisions: tuple[tuple[str, Decision], ...] = ()
    answered: tuple[tuple[str, str, Decision], ...] = ()  # (id, tool, decision) decided by ``first_line``


@dataclass(frozen=True)
class ForkLaunch:
    """What a fork adds to a phase's start: its session start and its origin."""

    start: ForkStart
    origin: ForkOrigin

    def planned(self, plan):
        """The launch plan with the fork's first stdin line instead of the prompt."""
        return replace(plan, prompt_line=self.start.first_line)

    def control(self, breakpoints) -> ControlState:
        """The fork's job control from its start: its breakpoints, and the decision for its call."""
        return ControlState(breakpoints=tuple(breakpoints or ()), decisions=self.start.decisions)


def checkpoint_not_found(job_id: str, phase_id: str, point: ForkPoint, why: str) -> RunnerError:
    metadata = {"job_id": job_id, "phase_id": phase_id}
    if point.tool_use_id:
        metadata["tool_use_id"] = point.tool_use_id
    elif point.turn:
        metadata["turn"] = str(point.turn)
    elif point.number is not None:
        metadata["checkpoint"] = str(point.number)
    return RunnerError(ErrorKind.NOT_FOUND, "CHECKPOINT_NOT_FOUND", f"phase {phase_id} of job {job_id}: {why}",
                       metadata)


def check_point(point: ForkPoint) -> None:
    """INVALID_ARGUMENT for what no phase could satisfy."""
    named = sum((bool(point.tool_use_id), bool(point.turn), point.number is not None))
    if named != 1:
        raise invalid_field("point", "name exactly one checkpoint: a tool_use_id, a turn or a checkpoint number")
    if point.turn < 0 or (point.number is not None and point.number < 1):
        raise invalid_field("point", "turn and checkpoint are 1 or more")
    if point.decision is not None:
        if point.decision.kind not in (DecisionKind.DENY, DecisionKind.EDIT):
            raise invalid_field("point.decision", "a fork decides its call by deny or edit")
        if not point.tool_use_id:
            raise invalid_field("point.decision", "a decision is for the call named by point.tool_use_id")
        if point.inject:
            raise invalid_field("point.inject", "inject a message or decide the call, not both (the decided call's "
                                                "turn goes on by itself)")
    if len(point.inject.encode()) > MAX_INJECT_BYTES:
        raise invalid_field("point.inject", f"at most {MAX_INJECT_BYTES} bytes")


def choose(job_id: str, phase_id: str, checkpoints: list[Checkpoint], point: ForkPoint) -> tuple[Checkpoint, WorkspaceSnapshot]:
    """The checkpoint named, and the workspace the fork starts from (before the call for a decision)."""
    try:
        checkpoint = select_checkpoint(checkpoints, tool_use_id=point.tool_use_id, turn=point.turn, number=point.number)
    except CheckpointNotFound as exc:
        raise checkpoint_not_found(job_id, phase_id, point, str(exc)) from None
    if point.decision is not None:
        if checkpoint.kind is not CheckpointKind.TOOL_CALL or not checkpoint.call_at:
            raise checkpoint_not_found(job_id, phase_id, point, "the call's own entry is not known")
        return checkpoint, workspace_before(checkpoints, checkpoint)
    return checkpoint, checkpoint.workspace


def require_workspace(job_id: str, phase_id: str, checkpoint: Checkpoint, workspace: WorkspaceSnapshot,
                      point: ForkPoint) -> None:
    """WORKSPACE_NOT_KEPT when the checkpoint kept no files and the caller did not settle for the conversation."""
    if not workspace.kept and not point.conversation_only:
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "WORKSPACE_NOT_KEPT",
                          f"checkpoint {checkpoint.number} kept no files ({workspace.reason}); set conversation_only "
                          "to go on from its conversation in the working directory as it is now",
                          {"job_id": job_id, "phase_id": phase_id, "reason": workspace.reason})


def resolve(job_id: str, phase_id: str, checkpoint: Checkpoint, workspace: WorkspaceSnapshot, transcript: bytes,
            point: ForkPoint, continuation_prompt: str = FORK_CONTINUATION) -> ForkStart:
    """The fork's start at ``checkpoint`` from the phase's ``transcript`` (its session's whole file)."""
    if not transcript:
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "TRANSCRIPT_UNAVAILABLE",
                          f"phase {phase_id} of job {job_id}: its session {checkpoint.session_id} was not kept "
                          "(a phase from before checkpoints, or its transcript never reached the store)",
                          {"job_id": job_id, "phase_id": phase_id, "session_id": checkpoint.session_id})
    decision = point.decision
    try:
        if decision is not None and decision.kind is DecisionKind.DENY:
            cut = cut_at_call(transcript, checkpoint.call_at, checkpoint.tool_use_id)
        elif decision is not None:
            cut = cut_before_result(transcript, checkpoint.call_at, checkpoint.tool_use_id, decision.new_input or {})
        else:
            cut = cut_after(transcript, checkpoint.resume_at)
    except SessionCutError as exc:
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "TRANSCRIPT_UNAVAILABLE",
                          f"phase {phase_id} of job {job_id}: {exc}",
                          {"job_id": job_id, "phase_id": phase_id, "session_id": checkpoint.session_id}) from None
    require_workspace(job_id, phase_id, checkpoint, workspace, point)
    decisions: tuple[tuple[str, Decision], ...] = ()
    answered: tuple[tuple[str, str, Decision], ...] = ()
    if decision is not None and decision.kind is DecisionKind.DENY:
        first = call_result_line(checkpoint.tool_use_id, decision.message)  # the denial is the call's result
        answered = ((checkpoint.tool_use_id, checkpoint.tool_name, decision),)
    elif decision is not None:
        first = b""  # the CLI runs the edited call again (asking the hook if it registered it by then)
        decisions = ((checkpoint.tool_use_id, decision),)
        answered = ((checkpoint.tool_use_id, checkpoint.tool_name, decision),)
    else:
        first = prompt_line(point.inject or continuation_prompt)
    session_file = str(uuid.uuid4())
    return ForkStart(checkpoint, workspace, renamed(cut.transcript, session_file), session_file, cut.resume_at,
                     first, decisions, answered)
