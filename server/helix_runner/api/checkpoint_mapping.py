"""Checkpoints, fork origins and fork points between the domain and the contract (docs/fork-and-rewind.md)."""

from __future__ import annotations

from helix.runner.v1 import resources_pb2, runner_service_pb2
from helix_runner.domain.checkpoints import Checkpoint, ForkOrigin
from helix_runner.domain.tool_decision import Decision
from helix_runner.errors import ErrorKind, RunnerError
from helix_runner.phases.fork import ForkPoint


def checkpoint_to_proto(c: Checkpoint) -> resources_pb2.Checkpoint:
    w = c.workspace
    msg = resources_pb2.Checkpoint(
        number=c.number, kind=int(c.kind), sequence=c.sequence, session_id=c.session_id, tool_use_id=c.tool_use_id,
        tool_name=c.tool_name, turn=c.turn, before=c.before, attempt=c.attempt, rewound=c.rewound,
        workspace=resources_pb2.CheckpointWorkspace(kind=int(w.kind), tree=w.tree, head=w.head, commit=w.commit,
                                                    ref=w.ref, repository=w.repository, reason=w.reason,
                                                    same_as=w.same_as),
    )
    msg.time.FromNanoseconds(c.time_ns)
    return msg


def fork_origin_to_proto(o: ForkOrigin) -> resources_pb2.ForkOrigin:
    return resources_pb2.ForkOrigin(job_id=o.job_id, phase_id=o.phase_id, checkpoint=o.checkpoint,
                                    tool_use_id=o.tool_use_id, turn=o.turn, changes=list(o.changes))


def fork_point_from_proto(point: runner_service_pb2.ForkPoint, conversation_only: bool) -> ForkPoint:
    """The point a ForkPhase or RewindPhase request names (checked by ``phases.fork.check_point``)."""
    at = point.WhichOneof("at")
    chosen = point.WhichOneof("decision")
    # Validated as ResolveToolCall's (the deny message's size, the edit's JSON object).
    decision = Decision.deny(point.deny.message) if chosen == "deny" else \
        Decision.edit(point.edit.input_json) if chosen == "edit" else None
    return ForkPoint(tool_use_id=point.tool_use_id if at == "tool_use_id" else "",
                     turn=point.turn if at == "turn" else 0,
                     number=point.checkpoint if at == "checkpoint" else None,
                     decision=decision, inject=point.inject, conversation_only=conversation_only)


# What the stored request carries instead of an option that may hold a secret: the server keeps
# neither a phase's `mcp_config` or `settings` nor its `env` values (its record never holds them).
KEPT_OUT = "(not kept by the server: it may hold a secret; ForkPhase takes it again)"


def storable_request(request: runner_service_pb2.RunPhaseRequest) -> bytes:
    """The accepted request as the store keeps it, for forks: its secret-bearing options marked, not kept."""
    kept = runner_service_pb2.RunPhaseRequest()
    kept.CopyFrom(request)
    o = kept.options
    if o.mcp_config:
        o.mcp_config = KEPT_OUT
    if o.settings:
        o.settings = KEPT_OUT
    for name in o.env:
        o.env[name] = KEPT_OUT
    return kept.SerializeToString()


def fork_request(request: runner_service_pb2.ForkPhaseRequest, stored: bytes | None, prompt: str, working_dir: str,
                 model: str, project_id: str, phase_id: str) -> runner_service_pb2.RunPhaseRequest:
    """The fork's own request: the phase's as it was accepted (``stored``; a phase from before forks
    has only its prompt, directory and model) with the fork's changes. The session and workspace
    options are the server's to set (phases/service.PhaseService.fork), so the phase's are dropped."""
    if stored:
        base = runner_service_pb2.RunPhaseRequest.FromString(stored)
    else:
        base = runner_service_pb2.RunPhaseRequest(job_id=request.job_id, project_id=project_id, prompt=prompt,
                                                  working_dir=working_dir)
        base.options.model = model
    base.job_id = request.job_id
    base.phase_id = phase_id
    o = base.options
    for name in ("resume_session_id", "session_id", "fork_session", "base_ref"):
        o.ClearField(name)
    o.workspace = runner_service_pb2.WORKSPACE_MODE_GIT_WORKTREE  # at the checkpoint (the server sets the base)
    if request.model:
        o.model = request.model
    if request.permission_mode:
        o.permission_mode = request.permission_mode
    if request.breakpoints or request.clear_breakpoints:
        del o.breakpoints[:]
        o.breakpoints.extend(request.breakpoints)
    # The options the store did not keep, given again by the caller.
    if request.mcp_config:
        o.mcp_config = request.mcp_config
    if request.settings:
        o.settings = request.settings
    for name, value in request.env.items():
        o.env[name] = value
    missing = [name for name in ("mcp_config", "settings") if getattr(o, name) == KEPT_OUT]
    missing += [f"env.{name}" for name, value in sorted(o.env.items()) if value == KEPT_OUT]
    if missing:
        raise RunnerError(ErrorKind.FAILED_PRECONDITION, "OPTIONS_NOT_KEPT",
                          f"phase {request.phase_id} was started with options the server does not keep (they may "
                          f"hold secrets): send {', '.join(missing)} again in the ForkPhaseRequest",
                          {"fields": ",".join(missing)})
    return base
