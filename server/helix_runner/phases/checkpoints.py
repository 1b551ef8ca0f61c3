"""One phase run's checkpoints: found in its events, its workspace kept at each, stored in order.

``PhaseCheckpoints`` is a step of the run's fan-out: the domain's ``CheckpointTracker`` names each tool
boundary, the workspace is snapshotted off the event loop (``process/checkpoint_git.py``, one at a
time, in order), and the checkpoint is written through the run's writer after the events it follows.
The next tool call waits for the snapshot (the controller asks ``settled`` before it answers the
PreToolUse hook), so a snapshot holds exactly what the tools before it wrote and nothing of the next
one. The CLI's transcript, which a fork resumes from, is kept with the phase too: on PostgreSQL the
hand-over's mirror copies it at every boundary already; alone, ``TranscriptCopy`` does. Design:
docs/fork-and-rewind.md.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path

from helix_runner.domain.checkpoints import (
    Checkpoint,
    CheckpointKind,
    CheckpointTracker,
    PendingCheckpoint,
    WorkspaceKind,
    WorkspaceSnapshot,
)
from helix_runner.domain.events import Event
from helix_runner.process.beneath import open_beneath, transcript_anchor
from helix_runner.process.checkpoint_git import WorkspaceSnapshots
from helix_runner.process.git_worktree import GitError
from helix_runner.store.protocol import AppendTranscript, InsertCheckpoint, PhaseWrite

log = logging.getLogger(__name__)

# The longest a tool call waits for the previous boundary's snapshot; past it the call runs and the
# snapshot may include what it writes (logged). A snapshot of 10,000 files takes ~15 ms.
SETTLE_BOUND_S = 10.0


# At most this much of a transcript is read per copy: the phase can write its transcript itself, and
# a read of all of it at once would hold all of it in the server's memory.
CHUNK_BYTES = 16 * 1024 * 1024


class TranscriptCopy:
    """What the CLI appended to its transcript since the last copy, as a store record (append-only
    chunks, whole lines only). A file shorter than what was copied was rewritten: copied again whole."""

    def __init__(self, job_id: str, phase_id: str):
        self.job_id, self.phase_id = job_id, phase_id
        self.session_id = ""
        self.copied = 0

    def read(self, path: Path | None, session_id: str) -> AppendTranscript | None:
        """The record of the new whole lines (None: nothing new); off the event loop."""
        if path is None or not session_id:
            return None
        if session_id != self.session_id:
            self.session_id, self.copied = session_id, 0
        try:  # no link the phase put in the way is followed (process/beneath.py)
            with open_beneath(transcript_anchor(path), path) as f:
                size = f.seek(0, 2)
                restart = size < self.copied
                if restart:
                    self.copied = 0
                f.seek(self.copied)
                data = f.read(min(size - self.copied, CHUNK_BYTES))  # the next call copies on
        except OSError:
            return None
        end = data.rfind(b"\n") + 1  # the CLI may be in the middle of its last line
        if end == 0:
            return None
        record = AppendTranscript(self.job_id, self.phase_id, session_id, self.copied, data[:end], restart)
        self.copied += end
        return record


def workspace_kind(workspace) -> tuple[WorkspaceKind, Path | None, Path | None]:
    """How a phase's ``PhaseWorkspace`` is kept at checkpoints: (kind, working tree, repository)."""
    if workspace is None or workspace.toplevel is None:
        return WorkspaceKind.NONE, None, None
    if workspace.mode == "GIT_WORKTREE" and workspace.worktree_path is not None:
        return WorkspaceKind.GIT_COMMIT, workspace.worktree_path, workspace.toplevel
    return WorkspaceKind.GIT_TREE, workspace.toplevel, workspace.toplevel


class PhaseCheckpoints:
    """A phase's checkpoints while it runs here (``existing``: those an earlier replica or run stored)."""

    def __init__(self, job_id: str, phase_id: str, snapshots: WorkspaceSnapshots, write: Callable[[PhaseWrite], None],
                 *, locate: Callable[[str], Path | None] | None = None, existing: list[Checkpoint] | None = None):
        self.job_id, self.phase_id = job_id, phase_id
        self.snapshots = snapshots
        self._write = write
        self.checkpoints: list[Checkpoint] = list(existing or [])
        last = max((c for c in self.checkpoints), key=lambda c: c.number, default=None)
        line = [c for c in self.checkpoints if not c.rewound]
        self.tracker = CheckpointTracker(last.number if last else 0, line[-1].turn if line else 0)
        if line:
            self.tracker.position = line[-1].number
        # Transcript copies into the store (None: another part keeps it, the hand-over's mirror).
        self._locate = locate
        self.transcripts = TranscriptCopy(job_id, phase_id) if locate is not None else None
        self.attempt = 0
        self._queue: asyncio.Queue[PendingCheckpoint | None] = asyncio.Queue()
        self._worker: asyncio.Task | None = None
        self._idle = asyncio.Event()
        self._idle.set()
        self._started = False
        self.closed = False

    # -- the run's side ----------------------------------------------------------------------------

    def write(self, record: PhaseWrite) -> None:
        """A record of the phase's checkpoints (a rewind's marks), queued behind its events."""
        self._write(record)

    def begin_attempt(self, number: int) -> None:
        """An attempt starts: the first one here snapshots the workspace as it starts (checkpoint 0,
        unless an earlier run stored it) before any tool runs."""
        self.attempt = number
        if self._worker is None:
            self._worker = asyncio.get_running_loop().create_task(self._work(), name=f"checkpoints:{self.phase_id}")
        if not self._started:
            self._started = True
            self._idle.clear()
            self._queue.put_nowait(PendingCheckpoint(0, CheckpointKind.START, 0, ""))

    def on_events(self, events: list[Event]) -> None:
        """The run's fan-out step: each boundary is queued for its snapshot (in order)."""
        if self.closed:
            return
        for pending in self.tracker.observe_all(events):
            self._idle.clear()
            self._queue.put_nowait(pending)

    async def settled(self) -> None:
        """Returns once every boundary seen so far has its snapshot (bounded: ``SETTLE_BOUND_S``)."""
        if self._idle.is_set():
            return
        try:
            await asyncio.wait_for(self._idle.wait(), SETTLE_BOUND_S)
        except TimeoutError:
            log.warning("a checkpoint's snapshot is late; the next tool call runs meanwhile",
                        extra={"fields": {"job_id": self.job_id, "phase_id": self.phase_id}})

    def restarted(self, at: Checkpoint) -> None:
        """A rewind in place put the workspace back to ``at``: the next boundaries follow it."""
        self.tracker.rewind_to(at.number, at.turn)
        self.checkpoints = [c if c.number <= at.number or c.rewound else _rewound(c) for c in self.checkpoints]
        self._idle.clear()
        self._queue.put_nowait(PendingCheckpoint(-1, CheckpointKind.START, 0, ""))  # re-read the workspace

    async def copy_transcript(self, session_id: str) -> None:
        """Copies the transcript's new lines now (at each checkpoint, and as an attempt ends)."""
        if self.transcripts is None or self._locate is None or not session_id:
            return
        try:
            record = await asyncio.to_thread(self.transcripts.read, self._locate(session_id), session_id)
        except Exception:  # a failed copy only makes a later fork of this phase impossible
            log.warning("copying a phase's transcript failed", exc_info=True,
                        extra={"fields": {"job_id": self.job_id, "phase_id": self.phase_id}})
            return
        if record is not None:
            self._write(record)

    async def close(self) -> None:
        """The phase ended here: the queued snapshots are taken, then the watch and the index go."""
        if self.closed:
            return
        self.closed = True
        if self._worker is not None:
            self._queue.put_nowait(None)
            try:
                await asyncio.wait_for(asyncio.shield(self._worker), 60.0)
            except (TimeoutError, asyncio.CancelledError):
                self._worker.cancel()
        await asyncio.to_thread(self.snapshots.close)

    def abandon(self) -> None:
        """The run was cancelled: no more snapshots; the watch and the index go now."""
        self.closed = True
        if self._worker is not None:
            self._worker.cancel()
        self.snapshots.close()

    # -- the snapshots -----------------------------------------------------------------------------

    async def _work(self) -> None:
        while True:
            pending = await self._queue.get()
            if pending is None:
                return
            try:
                await self._take(pending)
            except Exception:  # a phase runs on without this checkpoint
                log.warning("taking a checkpoint failed", exc_info=True, extra={"fields": {
                    "job_id": self.job_id, "phase_id": self.phase_id, "checkpoint": pending.number}})
            finally:
                if self._queue.empty():
                    self._idle.set()

    async def _take(self, pending: PendingCheckpoint) -> None:
        if pending.kind is CheckpointKind.START:
            try:
                workspace = await asyncio.to_thread(self.snapshots.start)
            except GitError as exc:
                workspace = WorkspaceSnapshot(WorkspaceKind.NONE, reason=f"the workspace could not be read: {exc}")
            if pending.number < 0 or any(c.number == 0 for c in self.checkpoints):
                return  # the index and the watch are ready again; the start is stored already
        else:
            try:
                workspace = await asyncio.to_thread(self.snapshots.take, pending.number)
            except GitError as exc:
                workspace = WorkspaceSnapshot(WorkspaceKind.NONE, reason=f"the workspace could not be read: {exc}")
            await self.copy_transcript(pending.session_id)
        checkpoint = pending.with_workspace(workspace, time.time_ns(), self.attempt)
        self.checkpoints.append(checkpoint)
        self._write(InsertCheckpoint(self.job_id, self.phase_id, checkpoint))


def _rewound(c: Checkpoint) -> Checkpoint:
    return replace(c, rewound=True)


def checkpoints_for(plan, write: Callable[[PhaseWrite], None], *, on: bool,
                    locate: Callable[[str], Path | None] | None = None,
                    existing: list[Checkpoint] | None = None) -> PhaseCheckpoints | None:
    """A planned phase's checkpoints (None when they are off): its workspace's snapshots, kept in its
    recording directory's private index. ``locate``: where its transcript is, when this part copies it
    into the store (alone; on PostgreSQL the hand-over's mirror does); ``existing``: those stored."""
    if not on:
        return None
    spec = plan.spec
    kind, work_dir, repository = workspace_kind(plan.workspace)
    snapshots = WorkspaceSnapshots(kind, work_dir, repository, Path(plan.recording_dir), spec.job_id, spec.phase_id)
    return PhaseCheckpoints(spec.job_id, spec.phase_id, snapshots, write, locate=locate, existing=existing)
