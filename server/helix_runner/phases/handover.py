"""What a phase needs to continue on another replica, as bytes for the store (issue 24).

The owner keeps the *request* (spec, retry policy, the ended attempts), not its ``LaunchPlan``: a
plan is local to one replica (paths, containment scope, sandbox home), so the adopter plans the
request again and enters the attempt loop at the next attempt with the resumed session, the path a
retry takes (docs/retries-and-admission.md). The job control state is kept as it changes (the
breakpoints with hit counts, a pause asked for, step credits, held calls); a hard pause is kept as
a soft one, since it stops processes that do not outlive the move. The CLI's transcript is mirrored
by ``TranscriptMirror``. The design, with what a move cannot keep: docs/scale-out.md "Hand-over".
Encoded with msgspec (typed decoding into the domain's own dataclasses, no hand-written parsing).
"""

from __future__ import annotations

import logging
import os
import types
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import msgspec

from helix_runner.domain.breakpoints import Breakpoint, BreakpointKind
from helix_runner.domain.phase_result import Attempt
from helix_runner.domain.phase_spec import PhaseSpec
from helix_runner.domain.retry_policy import RetryPolicy
from helix_runner.process.sandbox.private_home import project_dir_name

log = logging.getLogger(__name__)

SHARED_MARKER = ".helix-runner-shared"
"""A file at a workspace root saying "this root is a volume every replica mounts at the same path"."""


# -- the request ----------------------------------------------------------------------------------


class SavedRequest(msgspec.Struct, frozen=True):
    """The request as accepted, and what the phase has done so far."""

    spec: PhaseSpec
    retry: RetryPolicy
    accepted_ns: int
    attempts: tuple[Attempt, ...] = ()


def _enc_hook(obj: Any) -> Any:
    if isinstance(obj, types.MappingProxyType):  # PhaseSpec.env
        return dict(obj)
    raise NotImplementedError(f"cannot encode {type(obj).__name__}")


def encode_request(request: SavedRequest) -> bytes:
    return msgspec.json.encode(request, enc_hook=_enc_hook)


def decode_request(data: bytes) -> SavedRequest:
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


def saved_breakpoint(bp: Breakpoint) -> SavedBreakpoint:
    return SavedBreakpoint(bp.breakpoint_id, bp.kind.value, bp.tool_name, bp.regex, bp.cost_threshold_usd,
                           bp.turn_count, bp.once, bp.hit_count)


def restored_breakpoint(saved: SavedBreakpoint) -> Breakpoint:
    """The breakpoint, validated and compiled again, with its hit count."""
    bp = Breakpoint.create(kind=BreakpointKind(saved.kind), breakpoint_id=saved.breakpoint_id,
                           tool_name=saved.tool_name, regex=saved.regex,
                           cost_threshold_usd=saved.cost_threshold_usd, turn_count=saved.turn_count,
                           once=saved.once)
    bp.hit_count = saved.hit_count
    return bp


def encode_control(control: SavedControl) -> bytes:
    return msgspec.json.encode(control)


def decode_control(data: bytes) -> SavedControl:
    return msgspec.json.decode(data, type=SavedControl) if data else SavedControl()


# -- decisions sent during a move -------------------------------------------------------------------


class SavedDecision(msgspec.Struct, frozen=True):
    """An approval, denial or edit of a held call, sent while the phase had no live owner."""

    action: str  # "approve", "deny" or "edit"
    reason: str = ""
    updated_input_json: str = ""


def encode_decision(decision: SavedDecision) -> bytes:
    return msgspec.json.encode(decision)


def decode_decision(data: bytes) -> SavedDecision:
    return msgspec.json.decode(data, type=SavedDecision)


# -- the workspace ----------------------------------------------------------------------------------


class SavedWorkspace(msgspec.Struct, frozen=True):
    mode: str  # IN_PLACE or GIT_WORKTREE
    working_dir: str
    branch: str = ""
    shared_root: str = ""


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
               roots: tuple[Path, ...]) -> Movability:
    """Whether the phase's work is where another replica can reach it.

    In place: the working directory must be on a root marked shared. In a worktree: the repository
    (which keeps the phase's branch, where work in progress is committed at the hand-over) must be.
    Otherwise the phase cannot move and ends as before a hand-over existed, with this reason.
    """
    where = repository if mode == "GIT_WORKTREE" and repository is not None else working_dir
    root = shared_root(where, roots)
    saved = SavedWorkspace(mode, str(working_dir), branch, str(root) if root is not None else "")
    if root is not None:
        return Movability(saved, True)
    what = "repository" if mode == "GIT_WORKTREE" else "working directory"
    return Movability(saved, False, f"its {what} {where} is on no workspace root marked shared "
                                    f"({SHARED_MARKER}), so no other replica reaches its work")


# -- the transcript ---------------------------------------------------------------------------------


def transcript_path(env: dict[str, str], cwd: Path, session_id: str) -> Path:
    """Where the CLI started with ``env`` in ``cwd`` keeps the session's transcript (CLI 2.1.332:
    ``<config dir>/projects/<cwd with every non-alphanumeric as ->/<session>.jsonl``)."""
    config = env.get("CLAUDE_CONFIG_DIR") or str(Path(env.get("HOME", "~")).expanduser() / ".claude")
    return Path(config) / "projects" / project_dir_name(str(cwd)) / f"{session_id}.jsonl"


class TranscriptMirror:
    """Copies what the CLI appended to its transcript since the last copy into the shared store.

    The CLI appends to the file; a file shorter than what was copied was rewritten, and is copied
    again whole. Called at turn boundaries and at the hand-over, off the event loop.
    """

    def __init__(self, handover, job_id: str, phase_id: str):
        self._handover = handover
        self.job_id, self.phase_id = job_id, phase_id
        self.session_id = ""
        self.copied = 0

    def mirror(self, path: Path, session_id: str) -> int:
        """Copies the new bytes of ``path``; returns how many were copied."""
        if session_id != self.session_id:
            self.session_id, self.copied = session_id, 0
        try:
            with open(path, "rb") as f:
                size = f.seek(0, 2)
                if size < self.copied:  # rewritten, not appended to
                    self._handover.drop_transcript(self.job_id, self.phase_id, session_id)
                    self.copied = 0
                f.seek(self.copied)
                data = f.read(size - self.copied)
        except FileNotFoundError:
            return 0
        # Only whole lines: the CLI may be in the middle of writing the last one.
        end = data.rfind(b"\n") + 1
        if end == 0:
            return 0
        self._handover.mirror_transcript(self.job_id, self.phase_id, session_id, self.copied, data[:end])
        self.copied += end
        return end


def restore_transcript(data: bytes, target: Path) -> None:
    """Writes a mirrored transcript where the adopter's CLI will look for it (0600, no symlink followed)."""
    target.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_NOFOLLOW, 0o600)
    with open(fd, "wb") as f:
        f.write(data)
