"""Every phase-control RPC reaches the phase's owner from any replica, over gRPC and over Connect.

Two replicas of the real server on one PostgreSQL database; replica A runs the phase (held at a
breakpoint, a background shell ticking), replica B never saw it. The model and permission-mode
switches and the background-task RPCs asked on B are answered by A, as the routing table says
(api/routing.py); before the table they answered FAILED_PRECONDITION "not running" on B.
"""

from __future__ import annotations

import asyncio
import time

import grpc
import pytest
from connectrpc.code import Code
from connectrpc.errors import ConnectError
from support.runner_server import replica_pair
from support.streams import Stream, breakpoint_hit

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1.runner_service_connect import RunnerServiceClient
from helix_runner.api.errors import error_info
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli

TICKER = "for i in $(seq 1 600); do echo tick$i; sleep 0.05; done; echo finished"
NEW_MODEL = "claude-sonnet-4-5"
IDS = {"job_id": "job-route", "phase_id": "p1"}


def task_started(e) -> bool:
    return e.HasField("task") and e.task.kind == ev.TASK_EVENT_KIND_STARTED


async def until_output(call, needle: str):
    """``call()`` (a GetTaskOutput) until its output holds ``needle``; at most 20 s."""
    deadline = time.monotonic() + 20
    while True:
        answer = await call()
        if needle in answer.output or time.monotonic() > deadline:
            return answer
        await asyncio.sleep(0.2)


async def test_model_mode_and_task_rpcs_on_another_replica_reach_the_owner_over_grpc_and_connect(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": TICKER, "run_in_background": True}),
        Reply.tool_use("Read", {"file_path": "/etc/hostname"}),
        Reply.text("done"),
    ])
    async with replica_pair(tmp_path, postgres_url, api, None, web_port=0) as (a, b):
        request = pb.RunPhaseRequest(
            **IDS, prompt="go", working_dir=str(a.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash", "Read"], breakpoints=[res.Breakpoint(tool_name="Read")]))
        run = Stream(a.stub.RunPhase(request, timeout=120))
        task_id = (await run.wait_for(task_started)).task.task_id
        hit = await run.wait_for(breakpoint_hit)

        # gRPC on B: answered by A.
        output = await until_output(lambda: b.stub.GetTaskOutput(
            pb.GetTaskOutputRequest(**IDS, task_id=task_id), timeout=15), "tick2\n")
        assert "tick1\n" in output.output
        switched = await b.stub.SetPhaseModel(pb.SetPhaseModelRequest(**IDS, model=NEW_MODEL), timeout=15)
        assert switched.phase.model == NEW_MODEL
        mode = await b.stub.SetPhasePermissionMode(
            pb.SetPhasePermissionModeRequest(**IDS, mode=res.PERMISSION_MODE_ACCEPT_EDITS), timeout=15)
        assert mode.mode == "acceptEdits"
        # The owner's error comes back unchanged: the same status and ErrorInfo as asked on A.
        unknown = pb.GetTaskOutputRequest(**IDS, task_id="bnosuchtask")
        errors = []
        for stub in (a.stub, b.stub):
            with pytest.raises(grpc.aio.AioRpcError) as caught:
                await stub.GetTaskOutput(unknown, timeout=15)
            errors.append((caught.value.code(), caught.value.details(), error_info(caught.value)))
        assert errors[1] == errors[0] and errors[0][2].reason == "TASK_NOT_FOUND"

        # Connect on B (the dashboard's path): the same routes.
        async with RunnerServiceClient(b.server.web.url.rstrip("/")) as client:
            output = await until_output(lambda: client.get_task_output(
                pb.GetTaskOutputRequest(**IDS, task_id=task_id)), "tick3\n")
            assert "tick1\n" in output.output
            assert (await client.set_phase_model(
                pb.SetPhaseModelRequest(**IDS, model=NEW_MODEL))).phase.model == NEW_MODEL
            assert (await client.set_phase_permission_mode(
                pb.SetPhasePermissionModeRequest(**IDS, mode=res.PERMISSION_MODE_DEFAULT))).mode == "default"
            with pytest.raises(ConnectError) as caught:
                await client.get_task_output(unknown)
            assert caught.value.code is Code.NOT_FOUND and caught.value.message == errors[0][1]
            await client.stop_task(pb.StopTaskRequest(**IDS, task_id=task_id))

        await b.stub.ResolveToolCall(
            pb.ResolveToolCallRequest(**IDS, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()),
            timeout=15)
        events, result = await run.finish()
    assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason
    ends = [e.task for e in events if e.HasField("task") and e.task.task_id == task_id and not task_started(e)]
    assert ends and ends[-1].status in ("stopped", "killed"), ends  # stopped from B, not run to "finished"
    requests = api.message_requests()
    assert requests[-1].model == NEW_MODEL and requests[0].model != NEW_MODEL  # the switch reached A's CLI
