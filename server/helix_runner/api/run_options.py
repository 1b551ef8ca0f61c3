"""The PhaseOptions fields added after the first contract, as ``PhaseSpec`` values, and back.

``spec_from_request`` spreads ``run_options(options)`` into the spec; validation is the spec's.
``set_run_options`` is the way back, for a spec kept as the contract's message (the hand-over).
"""

from __future__ import annotations

from typing import Any

from helix.runner.v1 import runner_service_pb2
from helix_runner.errors import invalid_field

_WORKSPACE = {
    runner_service_pb2.WORKSPACE_MODE_UNSPECIFIED: "IN_PLACE",
    runner_service_pb2.WORKSPACE_MODE_IN_PLACE: "IN_PLACE",
    runner_service_pb2.WORKSPACE_MODE_GIT_WORKTREE: "GIT_WORKTREE",
}
_RETENTION = {
    runner_service_pb2.WORKTREE_RETENTION_UNSPECIFIED: "",
    runner_service_pb2.WORKTREE_RETENTION_KEEP: "KEEP",
    runner_service_pb2.WORKTREE_RETENTION_REMOVE: "REMOVE",
    runner_service_pb2.WORKTREE_RETENTION_REMOVE_ON_SUCCESS: "REMOVE_ON_SUCCESS",
}


def run_options(o: runner_service_pb2.PhaseOptions) -> dict[str, Any]:
    """Spec keyword arguments for the workspace and later run options (INVALID_ARGUMENT for an unknown enum value)."""
    if o.workspace not in _WORKSPACE:
        raise invalid_field("options.workspace", f"unknown value {o.workspace}")
    if o.worktree_retention not in _RETENTION:
        raise invalid_field("options.worktree_retention", f"unknown value {o.worktree_retention}")
    return {
        "workspace": _WORKSPACE[o.workspace],
        "base_ref": o.base_ref,
        "worktree_retention": _RETENTION[o.worktree_retention],
        "add_dirs": tuple(o.add_dirs),
        "system_prompt": o.system_prompt,
        "effort": o.effort,
        "tools": o.tools if o.HasField("tools") else None,
        "session_id": o.session_id,
        "fork_session": o.fork_session,
        "include_hook_events": o.include_hook_events,
        "no_session_persistence": o.no_session_persistence,
        "bare": o.bare,
        "mcp_config": o.mcp_config,
        "strict_mcp_config": o.strict_mcp_config,
        "agents": o.agents,
        "settings": o.settings,
        "setting_sources": o.setting_sources if o.HasField("setting_sources") else None,
        "json_schema": o.json_schema,
        "egress_allowlist": tuple(o.egress_allowlist),
        "allow_repository_config_writes": o.allow_repository_config_writes,
        "pids_limit": o.pids_limit,
        "workspace_max_bytes": o.workspace_max_bytes,
        "api_features": tuple(o.api_features),
    }


_WORKSPACE_BACK = {"IN_PLACE": runner_service_pb2.WORKSPACE_MODE_IN_PLACE,
                   "GIT_WORKTREE": runner_service_pb2.WORKSPACE_MODE_GIT_WORKTREE}
_RETENTION_BACK = {name: number for number, name in _RETENTION.items()}


def set_run_options(o: runner_service_pb2.PhaseOptions, spec: Any) -> None:
    """Sets ``o``'s fields from a ``PhaseSpec``'s, so that ``run_options(o)`` gives them back."""
    o.workspace = _WORKSPACE_BACK[spec.workspace]
    o.base_ref = spec.base_ref
    o.worktree_retention = _RETENTION_BACK[spec.worktree_retention]
    o.add_dirs.extend(spec.add_dirs)
    o.system_prompt = spec.system_prompt
    o.effort = spec.effort
    if spec.tools is not None:
        o.tools = spec.tools
    o.session_id = spec.session_id
    o.fork_session = spec.fork_session
    o.include_hook_events = spec.include_hook_events
    o.no_session_persistence = spec.no_session_persistence
    o.bare = spec.bare
    o.mcp_config = spec.mcp_config
    o.strict_mcp_config = spec.strict_mcp_config
    o.agents = spec.agents
    o.settings = spec.settings
    if spec.setting_sources is not None:
        o.setting_sources = spec.setting_sources
    o.json_schema = spec.json_schema
    o.egress_allowlist.extend(spec.egress_allowlist)
    o.allow_repository_config_writes = spec.allow_repository_config_writes
    o.pids_limit = spec.pids_limit
    o.workspace_max_bytes = spec.workspace_max_bytes
    o.api_features.extend(spec.api_features)
