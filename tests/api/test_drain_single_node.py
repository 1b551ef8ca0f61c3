"""A drain on the single-node server (SQLite) has no replica to hand a phase to (issue 24)."""

from __future__ import annotations

import asyncio

import pytest
from support.runner_server import start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply

pytestmark = pytest.mark.real_cli


async def test_a_drained_single_node_interrupts_its_phase_and_says_it_had_nowhere_to_move_it(
    claude_binary, scripted_api, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo never"}), Reply.text("Never.")])
    harness = start_runner(tmp_path, api)
    runner = await anext(harness)
    try:
        call = runner.stub.RunPhase(pb.RunPhaseRequest(
            job_id="j", phase_id="p", prompt="go", working_dir=str(runner.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash")])),
            timeout=120)
        result = None
        async with asyncio.timeout(60):
            async for response in call:
                if any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                       for e in response.events):
                    drained = asyncio.create_task(runner.server.drain(0.5))
                if response.HasField("result"):
                    result = response.result
        await asyncio.wait_for(drained, 60)
        assert result.status == res.PHASE_STATUS_INTERRUPTED
        assert "a single-node server has no other replica to hand it over to" in result.reason
    finally:
        await harness.aclose()
