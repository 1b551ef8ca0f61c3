"""The fork's request from the phase's stored one: secret-bearing options are never kept (api/checkpoint_mapping.py)."""

from __future__ import annotations

import pytest

from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.checkpoint_mapping import KEPT_OUT, fork_request, storable_request
from helix_runner.errors import RunnerError


def _stored() -> bytes:
    request = pb.RunPhaseRequest(job_id="j", phase_id="p", prompt="go", working_dir="/w", options=pb.PhaseOptions(
        model="m", mcp_config='{"mcpServers":{"db":{"env":{"PW":"secret-1"}}}}', settings='{"env":{"T":"secret-2"}}',
        env={"API_TOKEN": "secret-3"}, session_id="00000000-0000-4000-8000-000000000000",
        workspace=pb.WORKSPACE_MODE_GIT_WORKTREE, base_ref="main"))
    return storable_request(request)


def test_the_stored_request_keeps_no_secret_bearing_value():
    stored = _stored()
    for secret in (b"secret-1", b"secret-2", b"secret-3"):
        assert secret not in stored
    kept = pb.RunPhaseRequest.FromString(stored)
    assert (kept.options.mcp_config, kept.options.settings, dict(kept.options.env)) == (
        KEPT_OUT, KEPT_OUT, {"API_TOKEN": KEPT_OUT})


def test_a_fork_needs_them_again_and_takes_its_own_changes():
    with pytest.raises(RunnerError) as caught:
        fork_request(pb.ForkPhaseRequest(job_id="j", phase_id="p"), _stored(), "", "", "", "", "f")
    assert caught.value.reason == "OPTIONS_NOT_KEPT"
    assert caught.value.metadata["fields"] == "mcp_config,settings,env.API_TOKEN"
    request = pb.ForkPhaseRequest(job_id="j", phase_id="p", model="other", mcp_config="{}", settings="{}",
                                  env={"API_TOKEN": "again"})
    fork = fork_request(request, _stored(), "", "", "", "", "f")
    o = fork.options
    assert (fork.phase_id, o.model, o.mcp_config, o.settings, dict(o.env)) == ("f", "other", "{}", "{}",
                                                                                {"API_TOKEN": "again"})
    # The session and the base are the server's to set for a fork.
    assert (o.session_id, o.base_ref, o.workspace) == ("", "", pb.WORKSPACE_MODE_GIT_WORKTREE)


def test_a_phase_from_before_forks_is_forked_from_its_row():
    fork = fork_request(pb.ForkPhaseRequest(job_id="j", phase_id="p"), None, "the prompt", "/w", "m", "proj", "f")
    assert (fork.prompt, fork.working_dir, fork.options.model, fork.project_id) == ("the prompt", "/w", "m", "proj")
