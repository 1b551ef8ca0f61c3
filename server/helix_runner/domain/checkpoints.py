"""Checkpoints: where a phase stood at each tool boundary, so it can be forked or rewound from there.

At the end of every main-thread tool call (and of every turn) a phase has a checkpoint: the point of
its CLI session to resume at (the transcript entry that carries the call's result), the entry that
carries the call itself (a fork that decides the call differently resumes there), and what its
workspace held then (a git tree or commit, or nothing when the workspace is not in a repository).
``CheckpointTracker`` finds these points in the phase's events; the phases layer takes the
workspace snapshot and stores the ``Checkpoint``. The design, with what the CLI does with a cut
session: docs/fork-and-rewind.md and docs/claude-cli-protocol.md §3.8.
"""

from __future__ import annotations

import enum
from collections.abc import Sequence
from dataclasses import dataclass

from helix_runner.domain.events import (
    AssistantText,
    Event,
    SessionInit,
    Thinking,
    ToolCallFinished,
    ToolCallStarted,
    TurnResult,
)


class CheckpointKind(enum.IntEnum):
    """What a checkpoint follows (``resources.proto`` CheckpointKind)."""

    UNSPECIFIED = 0
    START = 1  # the phase's workspace before its first call (number 0; no conversation to resume)
    TOOL_CALL = 2  # a main-thread tool call ended
    TURN_END = 3  # a turn ended (a result line)


class WorkspaceKind(enum.IntEnum):
    """How a checkpoint keeps the workspace (``resources.proto`` CheckpointWorkspaceKind)."""

    UNSPECIFIED = 0
    NONE = 1  # not in a git repository: only the conversation can be forked
    GIT_TREE = 2  # in place in a repository: a tree object (uncommitted and untracked files included)
    GIT_COMMIT = 3  # a worktree phase: a commit of that tree on HEAD, kept by a hidden ref


@dataclass(frozen=True)
class WorkspaceSnapshot:
    """The workspace at a checkpoint. ``tree`` is the working tree (untracked files included, ignored
    ones not), ``head`` the commit checked out then; a worktree phase also has ``commit`` (``tree`` on
    ``head``) under the hidden ``ref``. ``repository`` is the top level whose objects hold them.
    ``same_as``: the checkpoint number whose snapshot this one repeats (nothing changed in between)."""

    kind: WorkspaceKind
    tree: str = ""
    head: str = ""
    commit: str = ""
    ref: str = ""
    repository: str = ""
    reason: str = ""  # NONE: why the workspace is not kept
    same_as: int | None = None

    @property
    def kept(self) -> bool:
        return self.kind in (WorkspaceKind.GIT_TREE, WorkspaceKind.GIT_COMMIT) and bool(self.tree)


NO_WORKSPACE_REASON = ("the working directory is not in a git repository: only the conversation can be "
                       "forked or rewound, its files are not kept")


@dataclass(frozen=True)
class Checkpoint:
    """One checkpoint of a phase (``number`` from 0, the start, in the phase's order).

    ``resume_at``: the session's transcript entry a fork resumes at to continue *after* the call (the
    entry carrying its result; for a turn end, the turn's last entry). ``call_at``: the entry carrying
    the call, where a fork that decides the call differently resumes. ``before``: the checkpoint whose
    workspace is the state before the call ran (the previous boundary; 0 for the phase's start).
    """

    number: int
    kind: CheckpointKind
    sequence: int
    session_id: str
    workspace: WorkspaceSnapshot
    time_ns: int
    tool_use_id: str = ""
    tool_name: str = ""
    turn: int = 0
    resume_at: str = ""
    call_at: str = ""
    before: int = 0
    attempt: int = 0
    rewound: bool = False


@dataclass(frozen=True)
class PendingCheckpoint:
    """A boundary the tracker found; the phases layer adds the workspace and stores it."""

    number: int
    kind: CheckpointKind
    sequence: int
    session_id: str
    tool_use_id: str = ""
    tool_name: str = ""
    turn: int = 0
    resume_at: str = ""
    call_at: str = ""
    before: int = 0

    def with_workspace(self, workspace: WorkspaceSnapshot, time_ns: int, attempt: int) -> Checkpoint:
        return Checkpoint(self.number, self.kind, self.sequence, self.session_id, workspace, time_ns,
                          self.tool_use_id, self.tool_name, self.turn, self.resume_at, self.call_at, self.before,
                          attempt)


# The payloads ``observe`` does anything with (payload classes have no subclasses).
_MARKS = frozenset({SessionInit, AssistantText, Thinking, ToolCallStarted, ToolCallFinished, TurnResult})


@dataclass
class _OpenCall:
    call_at: str
    turn: int
    before: int


class CheckpointTracker:
    """Finds a phase's checkpoints in its events (pure; one per phase run, fed every event in order).

    Only the main thread counts: a subagent's calls (``parent_tool_use_id`` set) run inside the call
    that started it, and its session entries are not the main session's. A turn is one assistant
    message (an API round trip, what the CLI's ``num_turns`` counts); ``turn`` is its number.
    ``last_number`` / ``last_turn``: where a phase taken over from another replica (or rewound) stands.
    """

    def __init__(self, last_number: int = 0, last_turn: int = 0):
        self.last_number = last_number  # the highest number given (numbers are never reused)
        self.position = last_number  # the checkpoint the phase stands at (a rewind moves it back)
        self.turn = last_turn
        self._message_ids: set[str] = set()
        self._calls: dict[str, _OpenCall] = {}
        self._last_entry = ""  # the main thread's latest conversation entry (a turn end resumes there)
        self._session_id = ""

    def observe(self, event: Event) -> PendingCheckpoint | None:
        """The checkpoint this event makes, if any."""
        p = event.payload
        if event.parent_tool_use_id or event.agent_id:
            return None
        cls = p.__class__
        if cls is SessionInit:
            self._session_id = event.session_id or self._session_id
            return None
        if cls is AssistantText or cls is Thinking or cls is ToolCallStarted:
            message_id = p.message_id  # type: ignore[union-attr]
            if message_id and message_id not in self._message_ids:
                self._message_ids.add(message_id)
                self.turn += 1
            if event.uuid:
                self._last_entry = event.uuid
            if cls is ToolCallStarted and not p.server_tool:  # type: ignore[union-attr]
                self._calls[p.tool_use_id] = _OpenCall(event.uuid, self.turn, self.position)  # type: ignore[union-attr]
            return None
        if cls is ToolCallFinished:
            call = self._calls.pop(p.tool_use_id, None)  # type: ignore[union-attr]
            if event.uuid:
                self._last_entry = event.uuid
            if call is None or not event.uuid:
                return None  # a result for a call never seen started here (or without an entry id)
            return self._next(CheckpointKind.TOOL_CALL, event, tool_use_id=p.tool_use_id,  # type: ignore[union-attr]
                              tool_name=p.name, turn=call.turn, resume_at=event.uuid,  # type: ignore[union-attr]
                              call_at=call.call_at, before=call.before)
        if cls is TurnResult:
            if not self._last_entry:
                return None
            return self._next(CheckpointKind.TURN_END, event, turn=self.turn, resume_at=self._last_entry,
                              before=self.position)
        return None

    def observe_all(self, events: Sequence[Event]) -> list[PendingCheckpoint]:
        """``observe`` for each event of a batch, in order: the checkpoints the batch makes.

        The same as calling ``observe`` per event; a text or thinking block of the main thread (most
        of a phase's events) is handled here without the call, which the run pays for every event.
        """
        made: list[PendingCheckpoint] = []
        message_ids = self._message_ids
        for event in events:
            cls = event.payload.__class__
            if (cls is AssistantText or cls is Thinking) and not (event.parent_tool_use_id or event.agent_id):
                message_id = event.payload.message_id  # type: ignore[union-attr]
                if message_id and message_id not in message_ids:
                    message_ids.add(message_id)
                    self.turn += 1
                if event.uuid:
                    self._last_entry = event.uuid
            elif cls in _MARKS:
                pending = self.observe(event)
                if pending is not None:
                    made.append(pending)
        return made

    def rewind_to(self, number: int, turn: int) -> None:
        """The phase went back to checkpoint ``number`` (a rewind in place): what follows builds on it."""
        self.position, self.turn = number, turn
        self._calls.clear()
        self._last_entry = ""

    def _next(self, kind: CheckpointKind, event: Event, **fields: object) -> PendingCheckpoint:
        self.last_number += 1
        self.position = self.last_number
        return PendingCheckpoint(self.last_number, kind, event.sequence, event.session_id or self._session_id,
                                 **fields)  # type: ignore[arg-type]


@dataclass(frozen=True)
class ForkOrigin:
    """Where a forked phase came from (``resources.proto`` ForkOrigin)."""

    job_id: str
    phase_id: str
    checkpoint: int
    tool_use_id: str = ""
    turn: int = 0
    changes: tuple[str, ...] = ()


class CheckpointNotFound(LookupError):
    """No checkpoint of the phase matches what was asked (the message says why)."""


def select_checkpoint(checkpoints: Sequence[Checkpoint], *, tool_use_id: str = "", turn: int = 0,
                      number: int | None = None) -> Checkpoint:
    """The checkpoint a fork or a rewind names: after the call ``tool_use_id``, at the end of model turn
    ``turn`` (its last checkpoint), or by ``number``. Rewound checkpoints are not offered."""
    live = [c for c in checkpoints if not c.rewound and c.kind is not CheckpointKind.START]
    if tool_use_id:
        found = [c for c in live if c.tool_use_id == tool_use_id and c.kind is CheckpointKind.TOOL_CALL]
        if not found:
            raise CheckpointNotFound(f"the phase has no checkpoint after tool call {tool_use_id}")
        return found[-1]
    if turn:
        found = [c for c in live if c.turn == turn]
        if not found:
            turns = sorted({c.turn for c in live})
            raise CheckpointNotFound(f"the phase has no checkpoint at turn {turn} (turns with one: "
                                     f"{_ranges(turns) or 'none'})")
        return found[-1]
    if number is not None:
        found = [c for c in live if c.number == number]
        if not found:
            raise CheckpointNotFound(f"the phase has no checkpoint {number}")
        return found[0]
    raise CheckpointNotFound("name a checkpoint: a tool_use id, a turn or a number")


def workspace_before(checkpoints: Sequence[Checkpoint], checkpoint: Checkpoint) -> WorkspaceSnapshot:
    """The workspace before ``checkpoint``'s call ran (the checkpoint its ``before`` names)."""
    for c in checkpoints:
        if c.number == checkpoint.before:
            return c.workspace
    return WorkspaceSnapshot(WorkspaceKind.NONE, reason="the workspace before this call was not kept")


def _ranges(values: Sequence[int]) -> str:
    out: list[str] = []
    for v in values:
        if out and out[-1].split("-")[-1] == str(v - 1):
            out[-1] = f"{out[-1].split('-')[0]}-{v}"
        else:
            out.append(str(v))
    return ", ".join(out)
