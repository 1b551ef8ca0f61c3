"""The PhaseOptions fields added after the first contract, as ``PhaseSpec`` values.

``spec_from_request`` spreads ``run_options(options)`` into the spec; validation is the spec's.
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
        "api_features": tuple(o.api_features),
    }
