"""Two replicas of the real server on one PostgreSQL database: any replica answers.

Replica A runs the phase (the real CLI against the scripted API); replica B never saw it and
answers every read about it from the shared database, the same as A does (docs/scale-out.md).
"""

from __future__ import annotations

import contextlib

import pytest
from support.runner_server import collect, start_runner

from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.offline import Reply, Usage

pytestmark = pytest.mark.real_cli


@contextlib.asynccontextmanager
async def replicas(tmp_path, api, postgres_url, **config):
    """Replica A (runs phases, talks to ``api``) and replica B, each with its own data dir, one database."""
    async with contextlib.AsyncExitStack() as stack:
        pair = []
        for name in ("a", "b"):
            root = tmp_path / name
            root.mkdir()
            harness = start_runner(
                root,
                api if name == "a" else None,
                database_url=postgres_url,
                replica_id=f"replica-{name}",
                **config,
            )
            pair.append(await anext(harness))
            stack.push_async_callback(harness.aclose)
        yield pair


async def test_a_phase_run_on_one_replica_is_answered_for_by_another(
    claude_binary, scripted_api, postgres_url, tmp_path
):
    api = scripted_api(
        [
            Reply.tool_use("Bash", {"command": "echo from replica a"}),
            Reply.text("Done.", usage=Usage(input_tokens=300, output_tokens=20)),
        ]
    )
    async with replicas(tmp_path, api, postgres_url) as (a, b):
        events, result = await a.run_phase(
            "run a command", job_id="job-r", phase_id="p1", allowed_tools=["Bash"]
        )
        assert result.status == res.PHASE_STATUS_SUCCEEDED, result.reason

        async def reads(stub):
            job = await stub.GetJob(pb.GetJobRequest(job_id="job-r"), timeout=10)
            jobs = await stub.ListJobs(pb.ListJobsRequest(), timeout=10)
            calls = await stub.ListToolCalls(pb.ListToolCallsRequest(job_id="job-r"), timeout=10)
            costs = await stub.GetCostTotals(pb.GetCostTotalsRequest(job_id="job-r"), timeout=10)
            watched = await collect(
                stub.WatchPhase(pb.WatchPhaseRequest(job_id="job-r", phase_id="p1"), timeout=30)
            )
            return job, jobs, calls, costs, watched

        on_a, on_b = await reads(a.stub), await reads(b.stub)
        job, jobs, calls, costs, (watched_events, watched_result) = on_b
        assert [p.phase_id for p in job.job.phases] == ["p1"]
        assert job.job.phases[0].status == res.PHASE_STATUS_SUCCEEDED
        assert [j.job_id for j in jobs.jobs] == ["job-r"]
        assert [(c.name, c.status) for c in calls.tool_calls] == [("Bash", res.TOOL_CALL_STATUS_SUCCEEDED)]
        assert costs.totals.phase_count == 1 and costs.totals.tokens.input_tokens >= 300
        assert watched_events == events and watched_result == result
        assert on_b == on_a  # B answers exactly as the replica that ran the phase
