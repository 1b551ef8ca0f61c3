"""What a phase needs to continue on another replica, as bytes for the store (issue 24).

The owner keeps the *request* (spec, retry policy, the ended attempts), not its ``LaunchPlan``: a
plan is local to one replica (paths, containment scope, sandbox home), so the adopter plans the
request again and enters the attempt loop at the next attempt with the resumed session, the path a
retry takes (docs/retries-and-admission.md). The job control state is kept as it changes (the
breakpoints with hit counts, a pause asked for, step credits, held calls); a hard pause is kept as
a soft one, since it stops processes that do not outlive the move. The CLI's transcript is mirrored
by ``TranscriptMirror``. The design, with what a move cannot keep: docs/scale-out.md "Hand-over".
The request is stored by a ``HandoverCodec`` (the API layer's: a declared, versioned protobuf
message, since replicas of two releases exchange it in a rolling deploy); the job control state and
the workspace, which only this release's replicas read back within one move, with msgspec (typed
decoding into the domain's own dataclasses, no hand-written parsing).
"""

from __future__ import annotations

import asyncio
import functools
import logging
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import msgspec
import msgspec.structs

from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.domain.tool_decision import Decision, DecisionKind
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.process.beneath import (
    NotBeneath,
    open_beneath,
    read_beneath,
    transcript_anchor,
    write_beneath,
)
from helix_runner.process.sandbox.private_home import project_dir_name

log = logging.getLogger(__name__)

HANDOVER_RETRY_AFTER_S = 2.0
"""The RetryInfo of PHASE_MOVED: a live replica with room claims a released phase at once (woken by
NOTIFY), so the rest of the stream is there to watch about this soon."""

SHARED_MARKER = ".helix-runner-shared"
"""A file at a workspace root saying "this root is a volume every replica mounts at the same path"."""


# -- the stream of a phase that moved ----------------------------------------------------------------


def phase_moved_error(job_id: str, phase_id: str, after_sequence: int, from_replica: str,
                      retry_after_s: float) -> RunnerError:
    """How a RunPhase or WatchPhase stream on a draining replica ends once its phase moved: UNAVAILABLE,
    reason PHASE_MOVED, with what WatchPhase needs to continue elsewhere (runner_service.proto)."""
    return RunnerError(
        ErrorKind.UNAVAILABLE, "PHASE_MOVED",
        f"phase {phase_id} of job {job_id} moved from replica {from_replica} (draining) to another replica; "
        f"every event up to {after_sequence} was sent: continue with WatchPhase from there on any replica",
        {"job_id": job_id, "phase_id": phase_id, "after_sequence": str(after_sequence),
         "from_replica": from_replica},
        retry_after_s=retry_after_s)


# -- the request ----------------------------------------------------------------------------------


class SavedRequest(msgspec.Struct, frozen=True):
    """The request as accepted, and what the phase has done so far."""

    spec: PhaseSpec
    retry: RetryPolicy
    accepted_ns: int
    attempts: tuple[Attempt, ...] = ()


class HandoverCodec(Protocol):
    """How the stored request is written and read; implemented by ``api.handover_codec.ProtoHandoverCodec``."""

    def encode_request(self, request: SavedRequest) -> bytes: ...

    def decode_request(self, data: bytes) -> SavedRequest:
        """The stored request, checked again as any request is (RunnerError when it cannot be read)."""


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, types.MappingProxyType):  # PhaseSpec.env
        return dict(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def encode_legacy_request(request: SavedRequest) -> bytes:
    """The request as releases before the declared form stored it (msgspec JSON of these dataclasses,
    no version): what an old replica writes. Only tests write it now."""
    return msgspec.json.encode(request, enc_hook=_enc_hook)


def decode_legacy_request(data: bytes) -> SavedRequest:
    """Reads a request stored by a release before the declared form (``encode_legacy_request``)."""
    request = msgspec.json.decode(data, type=SavedRequest)
    request.spec.validate()  # the stored request is checked again as any request is
    return request


# -- the job control state --------------------------------------------------------------------------


class SavedBreakpoint(msgspec.Struct, frozen=True):
    breakpoint_id: str
    kind: str
    tool_name: str = ""
    regex: str = ""
    cost_threshold_usd: float = 0.0
    turn_count: int = 0
    once: bool = False
    hit_count: int = 0
    egress_host: str = ""  # a network breakpoint's (added later: older state reads as none)
    egress_unlisted: bool = False


class HeldCallRecord(msgspec.Struct, frozen=True):
    """A call held at a breakpoint (or a pause) when the phase moved. The resumed CLI closes the
    call itself as interrupted and never asks about it again (docs/claude-cli-protocol.md §3.7); a
    call it is asked about with the same tool and input is this one, held again under its new id."""

    tool_use_id: str
    tool_name: str
    input_json: str
    breakpoint_id: str = ""
    reason: str = ""
    since_ns: int = 0


class SavedControl(msgspec.Struct, frozen=True):
    breakpoints: tuple[SavedBreakpoint, ...] = ()
    pause_requested: bool = False
    step_credits: int = 0
    held: tuple[HeldCallRecord, ...] = ()
    decisions: tuple[tuple[str, Decision], ...] = ()  # decisions on held calls not asked about again yet


def saved_breakpoint(bp: Breakpoint) -> SavedBreakpoint:
    return SavedBreakpoint(bp.breakpoint_id, bp.kind.value, bp.tool_name, bp.regex, bp.cost_threshold_usd,
                           bp.turn_count, bp.once, bp.hit_count, bp.egress_host, bp.egress_unlisted)


def restored_breakpoint(saved: SavedBreakpoint) -> Breakpoint:
    """The breakpoint, validated and compiled again, with its hit count."""
    bp = Breakpoint.create(kind=BreakpointKind(saved.kind), breakpoint_id=saved.breakpoint_id,
                           tool_name=saved.tool_name, regex=saved.regex,
                           cost_threshold_usd=saved.cost_threshold_usd, turn_count=saved.turn_count,
                           once=saved.once, egress_host=saved.egress_host, egress_unlisted=saved.egress_unlisted)
    bp.hit_count = saved.hit_count
    return bp


def encode_control(control: SavedControl) -> bytes:
    return msgspec.json.encode(control)


def decode_control(data: bytes) -> SavedControl:
    return msgspec.json.decode(data, type=SavedControl) if data else SavedControl()


def decisions_of(data: dict[str, bytes]) -> dict[str, Decision]:
    """Decisions kept in the store during a move (``phase_decisions``), decoded and checked again."""
    out = {}
    for tool_use_id, raw in data.items():
        d = msgspec.json.decode(raw, type=Decision)
        if d.kind is DecisionKind.EDIT:
            d = Decision.edit(msgspec.json.encode(d.new_input or {}).decode())
        elif d.kind is DecisionKind.DENY:
            d = Decision.deny(d.message)
        out[tool_use_id] = d
    return out


def encode_decision(decision: Decision) -> bytes:
    return msgspec.json.encode(decision)


# -- the workspace ----------------------------------------------------------------------------------


class SavedWorkspace(msgspec.Struct, frozen=True):
    mode: str  # IN_PLACE or GIT_WORKTREE
    working_dir: str
    branch: str = ""
    shared_root: str = ""
    base_commit: str = ""  # a worktree's base: the adopter's diff still starts there


@dataclass(frozen=True)
class Movability:
    workspace: SavedWorkspace
    movable: bool
    why_not: str = ""


def shared_root(path: Path, roots: tuple[Path, ...]) -> Path | None:
    """The workspace root holding ``path`` if it carries the shared-volume marker, else None."""
    for root in roots:
        try:
            path.resolve().relative_to(root.resolve())
        except ValueError:
            continue
        if (root / SHARED_MARKER).is_file():
            return root
    return None


def movability(mode: str, working_dir: Path, repository: Path | None, branch: str,
               roots: tuple[Path, ...], base_commit: str = "") -> Movability:
    """Whether the phase's work is where another replica can reach it.

    In place: the working directory must be on a root marked shared. In a worktree: the repository
    (which keeps the phase's branch, where work in progress is committed at the hand-over) must be.
    Otherwise the phase cannot move and ends as before a hand-over existed, with this reason.
    """
    where = repository if mode == "GIT_WORKTREE" and repository is not None else working_dir
    root = shared_root(where, roots)
    saved = SavedWorkspace(mode, str(working_dir), branch, str(root) if root is not None else "", base_commit)
    if root is not None:
        return Movability(saved, True)
    what = "repository" if mode == "GIT_WORKTREE" else "working directory"
    return Movability(saved, False, f"its {what} {where} is on no workspace root marked shared "
                                    f"({SHARED_MARKER}), so no other replica reaches its work")


def workspace_movability(plan, roots: tuple[Path, ...]) -> Movability:
    """Whether a planned phase's work can move (``movability``): a worktree phase with its repository,
    where its branch takes the work in progress at the hand-over (``PhaseWorkspace.hand_over``)."""
    ws = plan.workspace
    if ws is not None and ws.mode == "GIT_WORKTREE":
        return movability("GIT_WORKTREE", Path(plan.working_dir), ws.toplevel, ws.branch, roots, ws.base_commit)
    return movability("IN_PLACE", Path(plan.working_dir), None, "", roots)


# -- the transcript ---------------------------------------------------------------------------------


def transcript_path(env: dict[str, str], cwd: Path, session_id: str) -> Path:
    """Where the CLI started with ``env`` in ``cwd`` keeps the session's transcript (CLI 2.1.332:
    ``<config dir>/projects/<cwd with every non-alphanumeric as ->/<session>.jsonl``)."""
    config = env.get("CLAUDE_CONFIG_DIR") or str(Path(env.get("HOME", "~")).expanduser() / ".claude")
    return Path(config) / "projects" / project_dir_name(str(cwd)) / f"{session_id}.jsonl"


def transcript_locator(plan, sandbox):
    """``locate(session_id)`` for a phase's run: in a sandbox the transcript is in its private home
    (``sandbox()``: the run's current one; a warm start brings its own), else where the CLI's
    environment points (``transcript_path``)."""

    def locate(session_id: str) -> Path | None:
        phase_sandbox = sandbox()
        if phase_sandbox is not None:
            entries = phase_sandbox.home.transcripts().get(session_id, [])
            return next((e for e in entries if e.suffix == ".jsonl"), None)
        return transcript_path(plan.env, plan.cwd, session_id)

    return locate


class TranscriptMirror:
    """Copies what the CLI appended to its transcript since the last copy into the shared store.

    The CLI appends to the file; a file shorter than what was copied was rewritten, and is copied
    again whole. Called at turn boundaries and at the hand-over, off the event loop. At most
    ``CHUNK_BYTES`` a call (the next call copies on): the phase can write its transcript itself, and
    a read of all of it at once would hold all of it in the server's memory.
    """

    CHUNK_BYTES = 16 * 1024 * 1024

    def __init__(self, handover, job_id: str, phase_id: str):
        self._handover = handover
        self.job_id, self.phase_id = job_id, phase_id
        self.session_id = ""
        self.copied = 0

    def mirror(self, path: Path, session_id: str) -> int:
        """Copies the new bytes of ``path``; returns how many were copied."""
        if session_id != self.session_id:
            self.session_id, self.copied = session_id, 0
        try:  # no link the phase put in the way is followed (process/beneath.py)
            with open_beneath(transcript_anchor(path), path) as f:
                size = f.seek(0, 2)
                if size < self.copied:  # rewritten, not appended to
                    self._handover.drop_transcript(self.job_id, self.phase_id, session_id)
                    self.copied = 0
                f.seek(self.copied)
                data = f.read(min(size - self.copied, self.CHUNK_BYTES))
        except FileNotFoundError:
            return 0
        except NotBeneath as exc:
            log.warning("a phase's transcript is not a plain file of its own: not mirrored",
                        extra={"fields": {"job_id": self.job_id, "phase_id": self.phase_id, "error": exc.strerror}})
            return 0
        # Only whole lines: the CLI may be in the middle of writing the last one.
        end = data.rfind(b"\n") + 1
        if end == 0:
            return 0
        self._handover.mirror_transcript(self.job_id, self.phase_id, session_id, self.copied, data[:end])
        self.copied += end
        return end


# A whole transcript read for a fork, a rewind or an attempt's cost: the phase writes the file itself,
# so a larger one is not read (the reader falls back to the store's copy, or to no cost).
TRANSCRIPT_READ_MAX_BYTES = 256 * 1024 * 1024


def read_transcript(path: Path) -> bytes:
    """The whole transcript at ``path``, opened below the directory holding the CLI's config with no
    link followed on the way (the phase can swap the file, or a directory on the way, for a link to
    a file only the server may read); an OSError when it is not there, not a plain file of the
    phase's own, or over ``TRANSCRIPT_READ_MAX_BYTES``."""
    return read_beneath(transcript_anchor(path), path, TRANSCRIPT_READ_MAX_BYTES)


def restore_transcript(data: bytes, target: Path) -> None:
    """Writes a transcript where a CLI will look for it (0600, directories made 0700): the adopter's,
    a fork's or a rewound phase's. Below the directory holding the CLI's config, no link followed
    on the way (a rewound phase wrote its home itself; process/beneath.py)."""
    anchor = transcript_anchor(target)
    anchor.mkdir(mode=0o700, parents=True, exist_ok=True)
    write_beneath(anchor, target, data)


# -- one phase's durable state, written as it changes ---------------------------------------------------


class PhaseDurability:
    """Keeps one running phase's state in the shared store, off the event loop and in order.

    ``handover`` is the store's ``PhaseHandover``; ``locate(session_id)`` finds the CLI's transcript
    on this replica's disk (the sandbox's private home, or the CLI's config directory); ``codec``
    writes the request. A write that
    fails is logged: the phase runs on, and a move then starts from the last state that was saved.
    """

    def __init__(self, handover, job_id: str, phase_id: str, request: SavedRequest, where: Movability,
                 replica_id: str, locate, codec: HandoverCodec):
        self.handover = handover
        self.codec = codec
        self.job_id, self.phase_id = job_id, phase_id
        self.request = request
        self.where = where
        self.replica_id = replica_id
        self._locate = locate
        self.mirror = TranscriptMirror(handover, job_id, phase_id)
        self.session_id = ""
        self._control = SavedControl()
        self._control_dirty = False
        self._progress_pending = False
        self._lock = asyncio.Lock()
        self._tasks: set[asyncio.Task] = set()
        self.closed = False

    @property
    def movable(self) -> bool:
        return self.where.movable

    async def close(self) -> None:
        """The phase ended here: the saves scheduled so far are made, and none after (a late save
        would insert the state again after it was forgotten, as a movable phase's)."""
        await self.settle()
        async with self._lock:
            self.closed = True

    async def _run(self, what: str, call, *args) -> bool:
        async with self._lock:
            if self.closed:
                return False
            try:
                await asyncio.to_thread(call, *args)
                return True
            except Exception as exc:  # noqa: BLE001 - the store's error: the phase runs on; the next save may succeed
                log.warning("saving a phase's state for hand-over failed", extra={"fields": {
                    "job_id": self.job_id, "phase_id": self.phase_id, "what": what, "error": type(exc).__name__}})
                return False

    def _spawn(self, coro) -> None:
        task = asyncio.get_running_loop().create_task(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def start(self, control: SavedControl) -> None:
        """The first save, once the phase row exists: request, control, workspace, whether it can move."""
        self._control = control
        await self._run("start", functools.partial(
            self.handover.save, self.job_id, self.phase_id, request=self.codec.encode_request(self.request),
            control=encode_control(control), workspace=msgspec.json.encode(self.where.workspace),
            movable=self.where.movable, not_movable_reason=self.where.why_not))

    def control_changed(self, control: SavedControl) -> None:
        """Job control changed: saved soon (changes meanwhile are saved together)."""
        self._control = control
        if not self._control_dirty:
            self._control_dirty = True
            self._spawn(self._save_control())

    async def _save_control(self) -> None:
        async with self._lock:
            self._control_dirty = False
            control = self._control
        await self._run("control", functools.partial(self.handover.save, self.job_id, self.phase_id,
                                                     control=encode_control(control)))

    def _mirror_and_save(self, session_id: str, request: SavedRequest) -> None:
        if session_id and (path := self._locate(session_id)) is not None:
            self.mirror.mirror(path, session_id)
        self.handover.save(self.job_id, self.phase_id, request=self.codec.encode_request(request),
                           session_id=session_id)

    def progress(self, session_id: str, attempts: tuple[Attempt, ...]) -> None:
        """A tool call or a turn ended, or an attempt did: the transcript so far and the ended attempts.

        Saves asked for while one waits are made together (the latest state, once): a phase's tool
        calls can end faster than the store takes them.
        """
        self.session_id = session_id or self.session_id
        self.request = msgspec.structs.replace(self.request, attempts=attempts)
        if not self._progress_pending:
            self._progress_pending = True
            self._spawn(self._save_progress())

    async def _save_progress(self) -> None:
        async with self._lock:
            self._progress_pending = False
            session_id, request = self.session_id, self.request
        await self._run("progress", self._mirror_and_save, session_id, request)

    async def settle(self) -> None:
        """Waits for the saves scheduled so far."""
        while self._tasks:
            await asyncio.gather(*list(self._tasks), return_exceptions=True)

    async def hand_over(self, session_id: str, attempts: tuple[Attempt, ...], control: SavedControl) -> bool:
        """The last copy before the release: transcript, attempts (the moved one included), control."""
        await self.settle()
        self.session_id = session_id or self.session_id
        self.request = msgspec.structs.replace(self.request, attempts=attempts)
        self._control = control
        ok = await self._run("hand-over", self._mirror_and_save, self.session_id, self.request)
        return ok and await self._run("hand-over", functools.partial(
            self.handover.save, self.job_id, self.phase_id, control=encode_control(control)))

    def release(self, reason: str) -> bool:
        """Gives the phase up for another replica to claim (on the writer's thread, after its last events)."""
        return self.handover.release(self.job_id, self.phase_id, reason)
