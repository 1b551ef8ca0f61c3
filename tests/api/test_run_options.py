"""The later run options through the real CLI (--session-id, --effort, --tools), and their validation."""

from __future__ import annotations

import uuid

import grpc
import pytest

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_session_id_effort_and_tools_reach_the_cli_and_a_breakpoint_holds(claude_binary, scripted_api, runner_factory):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo ran > out.txt"}), Reply.text("done")])
    session = str(uuid.uuid4())
    async with runner_factory(api) as runner:
        call = runner.stub.RunPhase(pb.RunPhaseRequest(
            job_id="bare", phase_id="p", prompt="go", working_dir=str(runner.workdir),
            options=pb.PhaseOptions(session_id=session, effort="low", tools="Bash,Read",
                                    allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")])),
            timeout=90)
        events, result = [], None
        async for response in call:
            if response.HasField("result"):
                result = response.result
                continue
            events.extend(response.events)
            for e in response.events:
                if e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT:
                    assert not (runner.workdir / "out.txt").exists()  # held before it ran
                    inspection = (await runner.stub.InspectPhase(pb.InspectPhaseRequest(job_id="bare", phase_id="p"),
                                                                 timeout=10)).inspection
                    assert [c.call.name for c in inspection.pending_calls] == ["Bash"]
                    await runner.stub.ResolveToolCall(pb.ResolveToolCallRequest(
                        job_id="bare", phase_id="p", tool_use_id=e.control.tool_use_id, approve=pb.ApproveDecision()),
                        timeout=10)
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    assert any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT for e in events)
    assert (runner.workdir / "out.txt").read_text() == "ran\n"
    assert result.session_id == session
    init = next(e.session_init for e in events if e.HasField("session_init"))
    assert set(init.tools) == {"Bash", "Read"}  # --tools restricted the built-in set
    argv = list(result.diagnostics.argv)
    assert argv[argv.index("--effort") + 1] == "low" and "--tools=Bash,Read" in argv


@pytest.mark.parametrize(("options", "field"), [
    ({"effort": "extreme"}, "options.effort"),
    ({"bare": True}, "options.bare"),  # the CLI skips our PreToolUse hook under --bare (see phase_spec)
    ({"session_id": "not-a-uuid"}, "options.session_id"),
    ({"fork_session": True}, "options.fork_session"),
    ({"tools": "Bash,--rm"}, "options.tools"),
    ({"system_prompt": "x" * (64 * 1024 + 1)}, "options.system_prompt"),
])
async def test_bad_run_options_are_refused_before_spawning(runner_factory, options, field):
    async with runner_factory(None, claude_path="/nonexistent/claude") as runner:
        with pytest.raises(grpc.aio.AioRpcError) as caught:
            await runner.run_phase("hi", **options)
    assert caught.value.code() == grpc.StatusCode.INVALID_ARGUMENT
    assert error_info(caught.value).metadata["field"] == field
