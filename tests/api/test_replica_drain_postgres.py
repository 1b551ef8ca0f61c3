"""Draining a replica (SIGTERM in a pod) with a phase that cannot move to another replica.

A phase whose workspace is on no root marked shared cannot be handed over (docs/scale-out.md
"Hand-over"; tests/api/test_handover_postgres.py moves those that can): when the drain grace runs
out it ends INTERRUPTED on the replica that ran it, saying why it could not move, recorded under its
own fence and streamed to its RunPhase caller, and the other replicas see exactly that (no takeover,
no silent restart elsewhere).
"""

from __future__ import annotations

import asyncio

import grpc
import pytest
from support.runner_server import start_runner

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix.runner.v1 import runner_service_pb2_grpc as pb_grpc
from helix_runner.config import load_config
from helix_runner.offline import Reply
from helix_runner.server import start_server

pytestmark = pytest.mark.real_cli


async def test_a_drained_replica_interrupts_its_running_phase_itself(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo never"}), Reply.text("Never.")])
    owner_root = tmp_path / "a"
    (owner_root / "home").mkdir(parents=True)
    (owner_root / "work").mkdir()
    config = load_config(
        flags={"port": 0, "data_dir": str(owner_root / "data"), "workspace_roots": [str(tmp_path)],
               "retry_max_attempts": 3, "database_url": postgres_url, "replica_id": "drain-a"},
        environ={},
    )
    owner = await start_server(config, server_env=api.cli_env(owner_root / "home", max_retries=2))
    (tmp_path / "b").mkdir()
    other_harness = start_runner(tmp_path / "b", None, database_url=postgres_url, replica_id="drain-b")
    other = await anext(other_harness)
    channel = grpc.aio.insecure_channel(f"127.0.0.1:{owner.port}")
    try:
        ids = {"job_id": "job-drain", "phase_id": "p1"}
        call = pb_grpc.RunnerServiceStub(channel).RunPhase(
            pb.RunPhaseRequest(
                **ids, prompt="go", working_dir=str(owner_root / "work"),
                options=pb.PhaseOptions(allowed_tools=["Bash"],
                                        breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]),
            ),
            timeout=120,
        )
        events = []
        async with asyncio.timeout(60):
            async for response in call:  # held at the breakpoint: it cannot finish within the grace
                events.extend(response.events)
                if any(e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_BREAKPOINT_HIT
                       for e in response.events):
                    break
        drained = asyncio.create_task(owner.drain(0.5))
        result = None
        async with asyncio.timeout(60):
            async for response in call:
                events.extend(response.events)
                if response.HasField("result"):
                    result = response.result
        await asyncio.wait_for(drained, 60)

        # The RunPhase caller got INTERRUPTED from the owner itself, with the reason; no retry followed
        # (the policy allows 3 attempts) and no other replica took the phase.
        assert result is not None and result.status == res.PHASE_STATUS_INTERRUPTED
        assert "shut down" in result.reason
        job = await other.stub.GetJob(pb.GetJobRequest(job_id="job-drain"), timeout=10)
        (phase,) = job.job.phases
        assert phase.status == res.PHASE_STATUS_INTERRUPTED and "shut down" in phase.status_reason
        # Its workspace is on no root marked shared (docs/scale-out.md "Hand-over"): it could not move.
        assert "it could not move to another replica" in result.reason and "marked shared" in result.reason
        watched = []
        async for response in other.stub.WatchPhase(pb.WatchPhaseRequest(**ids), timeout=30):
            watched.extend(response.events)
            if response.HasField("result"):
                assert response.result == result
        assert watched == events  # the history the owner streamed, nothing appended by anyone else
    finally:
        await channel.close()
        await other_harness.aclose()
