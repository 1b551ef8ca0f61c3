"""Cluster admission end to end: two real servers on one PostgreSQL, limits that hold for both.

Replica A runs a real-CLI phase held at a breakpoint; with a cluster limit of one running phase,
a phase started on replica B waits QUEUED (seen from both replicas), a third is refused with
QUEUE_FULL and a RetryInfo, and B's phase starts once A's finishes (docs/scale-out.md, "Cluster
admission"). Every wait is bounded.
"""

from __future__ import annotations

import asyncio
import sys
import textwrap

import grpc
import pytest
from support.runner_server import collect, replica_pair
from support.streams import Stream, breakpoint_hit, queued

from helix.runner.v1 import events_pb2 as ev
from helix.runner.v1 import resources_pb2 as res
from helix.runner.v1 import runner_service_pb2 as pb
from helix_runner.api.errors import error_info, retry_info
from helix_runner.offline import Reply

CLUSTER = {"cluster_max_running_phases": 1, "cluster_max_queued_phases": 1}


def attempt_started(e) -> bool:
    return e.HasField("control") and e.control.kind == ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED


async def phase_status(stub, job_id: str) -> int:
    job = await stub.GetJob(pb.GetJobRequest(job_id=job_id), timeout=10)
    return job.job.phases[0].status


@pytest.mark.real_cli
async def test_a_phase_waits_for_a_cluster_slot_on_another_replica_and_starts_when_it_frees(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    api = scripted_api([
        Reply.tool_use("Bash", {"command": "echo on a"}),
        Reply.text("A is done."),
        Reply.text("B is done."),
    ])
    async with replica_pair(tmp_path, postgres_url, api, api, **CLUSTER) as (a, b):
        on_a = {"job_id": "job-a", "phase_id": "p1"}
        run_a = Stream(a.stub.RunPhase(pb.RunPhaseRequest(
            **on_a, prompt="go", working_dir=str(a.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]),
        ), timeout=120))
        hit = await run_a.wait_for(breakpoint_hit)  # A holds the cluster's one slot

        on_b = {"job_id": "job-b", "phase_id": "p1"}
        run_b = Stream(b.stub.RunPhase(pb.RunPhaseRequest(**on_b, prompt="go", working_dir=str(b.workdir)),
                                       timeout=120))
        waiting = await run_b.wait_for(queued)
        assert waiting.control.queue.reason == res.QUEUE_REASON_SERVER_LIMIT
        assert "across the cluster: 1; the cluster's limit is 1" in waiting.control.message
        # QUEUED is the phase's status on both replicas, and its event is in its stream on both.
        assert await phase_status(b.stub, "job-b") == res.PHASE_STATUS_QUEUED
        assert await phase_status(a.stub, "job-b") == res.PHASE_STATUS_QUEUED
        watch_from_a = Stream(a.stub.WatchPhase(pb.WatchPhaseRequest(**on_b), timeout=120))
        assert (await watch_from_a.wait_for(queued)).sequence == waiting.sequence
        assert postgres_cluster.execute(
            postgres_url, "SELECT job_id, replica_id, state FROM admission_ledger ORDER BY seq") == [
            ("job-a", "replica-a", "running"), ("job-b", "replica-b", "queued")]

        # The cluster's queue (one waiting phase) is full: refused on either replica, with a hint.
        for stub in (a.stub, b.stub):
            call = stub.RunPhase(pb.RunPhaseRequest(job_id="job-c", phase_id="p1", prompt="go",
                                                    working_dir=str(a.workdir if stub is a.stub else b.workdir)),
                                 timeout=30)
            with pytest.raises(grpc.aio.AioRpcError) as refused:
                async for _ in call:
                    pass
            info = error_info(refused.value)
            assert refused.value.code() == grpc.StatusCode.RESOURCE_EXHAUSTED
            assert info.reason == "QUEUE_FULL" and info.metadata["scope"] == "cluster"
            hint = retry_info(refused.value)
            assert hint is not None and hint.retry_delay.ToMilliseconds() == int(info.metadata["retry_after_ms"])

        assert not any(attempt_started(e) for e in run_b.events)  # still waiting for A's slot
        await a.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **on_a, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        _, result_a = await run_a.finish()
        assert result_a.status == res.PHASE_STATUS_SUCCEEDED, result_a.reason

        events_b, result_b = await run_b.finish()  # B was woken when A's slot freed
        assert result_b.status == res.PHASE_STATUS_SUCCEEDED, result_b.reason
        kinds = [e.control.kind for e in events_b if e.HasField("control")]
        assert kinds.index(ev.CONTROL_EVENT_KIND_QUEUED) < kinds.index(ev.CONTROL_EVENT_KIND_ATTEMPT_STARTED)
        assert await watch_from_a.finish() == (events_b, result_b)
        assert postgres_cluster.execute(postgres_url, "SELECT count(*) FROM admission_ledger") == [(0,)]


@pytest.mark.real_cli
async def test_cancelling_a_queued_phase_from_either_side_leaves_no_ledger_entry(
    claude_binary, scripted_api, postgres_url, postgres_cluster, tmp_path
):
    api = scripted_api([Reply.tool_use("Bash", {"command": "echo on a"}), Reply.text("A is done.")])
    config = {"cluster_max_running_phases": 1}
    async with replica_pair(tmp_path, postgres_url, api, api, **config) as (a, b):
        on_a = {"job_id": "job-a", "phase_id": "p1"}
        run_a = Stream(a.stub.RunPhase(pb.RunPhaseRequest(
            **on_a, prompt="go", working_dir=str(a.workdir),
            options=pb.PhaseOptions(allowed_tools=["Bash"], breakpoints=[res.Breakpoint(tool_name="Bash", once=True)]),
        ), timeout=120))
        hit = await run_a.wait_for(breakpoint_hit)

        def ledger():
            return postgres_cluster.execute(postgres_url, "SELECT job_id, state FROM admission_ledger ORDER BY seq")

        # 1. The client goes away while its phase waits (on_disconnect CANCEL, the default).
        call = b.stub.RunPhase(pb.RunPhaseRequest(job_id="job-gone", phase_id="p1", prompt="go",
                                                  working_dir=str(b.workdir)), timeout=120)
        gone = Stream(call)
        await gone.wait_for(queued)
        assert ledger() == [("job-a", "running"), ("job-gone", "queued")]
        follow = Stream(a.stub.WatchPhase(pb.WatchPhaseRequest(job_id="job-gone", phase_id="p1"), timeout=60))
        call.cancel()
        _, ended = await follow.finish()  # followed from A until B recorded the end
        assert ended.status == res.PHASE_STATUS_CANCELLED
        assert ledger() == [("job-a", "running")]

        # 2. CancelPhase sent to A for a phase queued on B: forwarded to B, which ends it.
        run_b = Stream(b.stub.RunPhase(pb.RunPhaseRequest(job_id="job-b", phase_id="p1", prompt="go",
                                                          working_dir=str(b.workdir)), timeout=120))
        await run_b.wait_for(queued)
        await a.stub.CancelPhase(pb.CancelPhaseRequest(job_id="job-b", phase_id="p1"), timeout=10)
        _, result_b = await run_b.finish()
        assert result_b.status == res.PHASE_STATUS_CANCELLED
        assert ledger() == [("job-a", "running")]

        await a.stub.ResolveToolCall(pb.ResolveToolCallRequest(
            **on_a, tool_use_id=hit.control.tool_use_id, approve=pb.ApproveDecision()), timeout=10)
        _, result_a = await run_a.finish()
        assert result_a.status == res.PHASE_STATUS_SUCCEEDED, result_a.reason
        assert ledger() == []


# A CLI stand-in that answers at once (init, then a successful result): the 30-phase test below is
# about admission, not the CLI; the same lines as tests/api/test_run_phase_retries.py's FAST_CLI.
FAST_CLI = """
    import sys
    sys.stdin.readline(); sys.stdin.readline()
    print('{"type":"system","subtype":"init","cwd":"/w","session_id":"s-1","tools":[],"model":"claude-sonnet-4-5",'
          '"permissionMode":"default","claude_code_version":"2.1.330","uuid":"u1"}', flush=True)
    print('{"type":"result","subtype":"success","is_error":false,"duration_ms":1,"num_turns":1,"result":"ok",'
          '"session_id":"s-1","total_cost_usd":0,"usage":{"input_tokens":0,"output_tokens":0},'
          '"permission_denials":[],"uuid":"u3"}', flush=True)
"""


@pytest.mark.slow  # several server processes or a kill and restart: the slower tier
async def test_30_phases_on_two_replicas_never_exceed_the_cluster_limit(postgres_url, postgres_cluster, tmp_path):
    claude = tmp_path / "fake-claude"
    claude.write_text(f"#!{sys.executable}\n" + textwrap.dedent(FAST_CLI))
    claude.chmod(0o755)
    config = {"claude_path": str(claude), "max_running_phases": 4, "cluster_max_running_phases": 3}
    async with replica_pair(tmp_path, postgres_url, None, None, **config) as (a, b):
        async def one(n: int):
            replica = (a, b)[n % 2]
            project = "x" if n % 3 else "y"
            request = pb.RunPhaseRequest(job_id=f"job-{n:02d}", phase_id="p1", project_id=project, prompt="hi",
                                         working_dir=str(replica.workdir))
            return await collect(replica.stub.RunPhase(request, timeout=300))

        outcomes = await asyncio.wait_for(asyncio.gather(*(one(n) for n in range(30))), 300)
    assert all(result.status == res.PHASE_STATUS_SUCCEEDED for _, result in outcomes), [
        r.reason for _, r in outcomes if r.status != res.PHASE_STATUS_SUCCEEDED]
    assert sum(1 for events, _ in outcomes if any(queued(e) for e in events)) >= 20  # most had to wait
    # Each attempt's span lies inside its hold on the cluster slot (taken before, released after).
    spans = [(r.attempts[0].start_time.ToNanoseconds(), r.attempts[0].end_time.ToNanoseconds()) for _, r in outcomes]
    edges = sorted([(s, 1) for s, _ in spans] + [(e, -1) for _, e in spans])
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    assert 1 <= peak <= 3, peak
    assert postgres_cluster.execute(postgres_url, "SELECT count(*) FROM admission_ledger") == [(0,)]
