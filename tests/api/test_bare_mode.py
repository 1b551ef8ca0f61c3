"""`--bare` with job control: pause and breakpoints hold tool calls through the permission prompt.

Under --bare CLI 2.1.330 runs no PreToolUse hook; the server's ask rule for every tool makes it send
`can_use_tool` for each call instead, which the controller holds or allows (docs/claude-cli-protocol.md
§3.6). Only bypassPermissions is allowed with it.
"""

from __future__ import annotations

import grpc
import pytest
from support.streams import PhaseCall

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_under_bare_a_breakpoint_and_pause_hold_tool_calls(claude_binary, scripted_api, runner_factory):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "touch a.txt"}),
        Reply.tool_use("Read", {"file_path": "a.txt"}),
        Reply.tool_use("Bash", {"command": "touch b.txt"}),
        Reply.text("done"),
    ])
    ids = {"job_id": "bare", "phase_id": "p"}
    async with runner_factory(api, allow_bypass_permissions=True) as runner:
        a, b = runner.workdir / "a.txt", runner.workdir / "b.txt"
        phase = PhaseCall(runner.stub, "bare", "p", runner.workdir, bare=True,
                          permission_mode=res.PERMISSION_MODE_BYPASS_PERMISSIONS,
                          breakpoints=[res.Breakpoint(tool_name="Bash")])
        first = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, 60)
        assert not a.exists()  # held before it ran
        inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(**ids), timeout=10)).inspection
        assert [c.call.name for c in inspection.pending_calls] == ["Bash"]
        # The controller allows what it does not hold: only bypassPermissions means that.
        with pytest.raises(grpc.aio.AioRpcError) as refused:
            await runner.stub.SetPhasePermissionMode(pb.SetPhasePermissionModeRequest(
                **ids, mode=res.PERMISSION_MODE_DEFAULT), timeout=10)
        assert refused.value.code() == grpc.StatusCode.FAILED_PRECONDITION
        await runner.stub.PausePhase(pb.PausePhaseRequest(**ids), timeout=10)
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **ids, tool_use_id=first.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        # The pause holds the next call, a read-only one the CLI would never ask about.
        paused = await phase.control(ev.CONTROL_EVENT_KIND_PAUSED, after=first.sequence)
        assert paused.control.tool_name == "Read" and a.exists()
        held = (await runner.stub.GetJob(pb.GetJobRequest(job_id="bare"), timeout=10)).job.phases[0]
        assert held.status == res.PHASE_STATUS_PAUSED
        await runner.stub.ResumePhase(pb.ResumePhaseRequest(**ids), timeout=10)
        second = await phase.control(ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, after=paused.sequence)
        await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **ids, tool_use_id=second.control.tool_use_id, deny=pb.DenyDecision(message="not b")), timeout=10)
        result = await phase.finish(90)
    events = phase.events
    hits = sum(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT for e in events)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert hits == 2 and a.exists() and not b.exists()
    kinds = [e.control.kind for e in events if e.HasField("control")]
    assert [k for k in kinds if k in (ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, ev.CONTROL_EVENT_KIND_PAUSED,
                                      ev.CONTROL_EVENT_KIND_TOOL_DENIED)] == [
        ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT, ev.CONTROL_EVENT_KIND_PAUSED, ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT,
        ev.CONTROL_EVENT_KIND_TOOL_DENIED]
    denied = [e.tool_call_finished for e in events if e.HasField("tool_call_finished") and e.tool_call_finished.is_error]
    assert len(denied) == 1 and "not b" in denied[0].content_preview
    argv = list(result.diagnostics.argv)
    assert "--bare" in argv and argv[argv.index("--permission-mode") + 1] == "bypassPermissions"
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert init.permission_mode == "bypassPermissions"


@pytest.mark.parametrize(("options", "field"), [
    ({"bare": True}, "options.bare"),
    ({"bare": True, "permission_mode": res.PERMISSION_MODE_ACCEPT_EDITS}, "options.bare"),
    ({"bare": True, "permission_mode": res.PERMISSION_MODE_BYPASS_PERMISSIONS, "settings": '{"permissions": {"ask": ["Bash"]}}'},
     "options.settings"),
])
async def test_bare_is_refused_where_the_server_could_not_stand_in_for_the_cli_s_permissions(
        runner_factory, options, field):
    async with runner_factory(None, claude_path="/nonexistent/claude", allow_bypass_permissions=True) as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", **options)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field
